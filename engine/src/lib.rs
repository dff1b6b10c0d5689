//! `dsh-engine`: runs a workflow script — the engine of dsh workflow.
//!
//! It prepares a script on the host ([`script`]: parse, strip types,
//! extract meta — nothing of the script is evaluated here), starts it in
//! its own supervised worker process ([`run`]: [`start`], the handshake,
//! the per-run supervisor, the cancel path, cleanup), hands each `agent()`
//! call to the [`SubagentProvider`] it was given, enforces the run's
//! [`limits`] (with [`cost`], the `maxCostUsd` budget), and reports
//! [`events`] and a [`result`]. [`catalog`] finds saved workflows for
//! `workflow()`.
//!
//! It names no provider: providers are in `dsh-providers`, the journal that
//! records calls is in `dsh-journal`, and the seam between them is
//! `dsh-seam`. It is not a JavaScript engine (that is `dsh-worker`) and not
//! a wire format (that is `dsh-protocol`).

#![warn(missing_docs)]

pub mod catalog;
pub mod cost;
pub mod events;
pub mod events_file;
mod fork_server;
pub mod limits;
pub mod result;
pub mod run;
pub mod script;

pub use dsh_seam::{CallOutcome, SubagentProvider};
pub use events::{Event, EventKind, EventStream};
pub use limits::Limits;
pub use result::{RunError, RunResult};
pub use run::{
    ArgsInput, ForkedWorker, SpawnedWorker, StartError, StartRequest, WorkerCommand, WorkerMissing,
    WorkerSource, WorkflowRun, prepare, start,
};
pub use script::Meta;
