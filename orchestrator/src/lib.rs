//! `dsh-orchestrator`: the host side of dsh workflow.
//!
//! It prepares a workflow script on the host ([`script`]: parse, strip
//! types, extract meta — nothing of the script is evaluated here), runs it
//! in its own supervised worker process ([`run`]: spawn, handshake, the
//! per-run supervisor, cancellation, cleanup), answers the script's
//! `agent()` calls through the subagent seam ([`provider`], with the
//! built-in [`providers`]), and reports [`events`] and a [`result`].
//! The `dsh` command line lives in the `dsh` package (the workspace root).
//!
//! It is not a JavaScript engine (that is `dsh-worker`) and not a wire
//! format (that is `dsh-protocol`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), dsh_orchestrator::StartError> {
//! use dsh_orchestrator::{start, StartRequest, Limits};
//! let req = StartRequest::from_path("scripts/examples/review.ts", &Limits::default())?;
//! let run = start(req)?;
//! let mut events = run.subscribe();
//! let result = run.result().await;
//! run.dispose().await;
//! # let _ = events.try_next(); let _ = result;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod agent_types;
pub mod catalog;
pub mod config;
pub mod events;
pub mod events_file;
pub mod files;
mod fork_server;
pub mod journal;
pub mod limits;
pub mod outcome;
pub mod process;
pub mod provider;
pub mod providers;
pub mod result;
pub mod run;
pub mod script;
pub mod units;

pub use dsh_protocol::{ErrorCode, SandboxLevel, SandboxPolicy, SandboxReport, StopReason, Usage};
pub use events::{AgentOutcomeKind, Event, EventKind, EventStream};
pub use limits::Limits;
pub use outcome::CallOutcome;
pub use provider::{
    Activity, AgentOptions, AgentRequest, CallLimit, CallLimits, ChildOrigin, ChildOutcome,
    ChildResult, KeptWorktree, Progress, ResultFault, StartRefused, Subagent, SubagentProvider,
};
pub use result::{RunError, RunResult};
pub use run::{
    ArgsInput, ForkedWorker, SpawnedWorker, StartError, StartRequest, WorkerCommand, WorkerMissing,
    WorkerSource, WorkflowRun, prepare, start,
};
pub use script::Meta;
