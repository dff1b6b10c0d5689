//! `dsh-orchestrator`: the host side of dsh workflow, composed — the facade
//! an application depends on.
//!
//! The work is done by small crates, each with one job, re-exported here
//! under the module names applications already use:
//! - `dsh-seam` ([`provider`], [`outcome`], [`units`]): the subagent seam a
//!   provider implements;
//! - `dsh-engine` ([`script`], [`run`], [`events`], [`limits`], [`result`],
//!   [`catalog`], …): prepares a script and runs it in a supervised worker;
//! - `dsh-providers` ([`providers`]): the built-in providers (API models
//!   only with the `http` feature);
//! - `dsh-journal` ([`journal`]): durable runs, resume and `--record`;
//! - `dsh-exec` ([`process`], [`files`]): processes and files on the host.
//!
//! What is its own: [`config`] (`dsh.toml`), [`agent_types`] (Claude
//! Code's agent types and `.claude/agents/*.md`), and [`router`], which
//! picks the provider for each call from both.
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
pub mod config;
pub mod router;

pub use dsh_engine::{catalog, cost, events, events_file, limits, result, run, script};
pub use dsh_exec::{files, process};
pub use dsh_journal as journal;
pub use dsh_seam::{outcome, provider, units};

/// The built-in providers (`dsh-providers`), and the [`router`]
/// that picks one for each call.
pub mod providers {
    pub use crate::router;
    pub use dsh_providers::*;
    pub use dsh_seam::answered;
}

pub use dsh_protocol::{ErrorCode, SandboxLevel, SandboxPolicy, SandboxReport, StopReason, Usage};
pub use dsh_seam::{ChildHook, HookedChild, Layer, Stack};
pub use events::{AgentOutcomeKind, Event, EventKind, EventStream};
pub use limits::Limits;
pub use outcome::CallOutcome;
pub use provider::{
    Activity, AgentOptions, AgentRequest, CallLimit, CallLimits, ChildOrigin, ChildOutcome,
    ChildResult, FailureKind, KeptWorktree, Progress, ProviderError, ResultFault, RetryCause,
    StartRefused, Subagent, SubagentProvider,
};
pub use result::{RunError, RunResult};
pub use run::{
    ArgsInput, ForkedWorker, SpawnedWorker, StartError, StartRequest, WorkerCommand, WorkerMissing,
    WorkerSource, WorkflowRun, prepare, start,
};
pub use script::Meta;
