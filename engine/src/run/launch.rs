//! Where a run's worker comes from ([`WorkerSource`], the one field of
//! [`crate::StartRequest`] that says so) and getting it ([`launch`]).
//!
//! Every source ends in the same thing: a worker process of its own, the
//! host's child, in its own process group, that says `Hello` and applies
//! the run's sandbox policy itself before `Init`. The sources differ only
//! in how the process comes to exist (docs/performance.md says what each
//! one saves, measured):
//!
//! - spawned (`posix_spawn` of the worker program): always possible, the
//!   fallback of every other source;
//! - forked from the fork server that overlapping runs of one stock
//!   command share (`fork_server/shared.rs`): [`WorkerSource::Resolve`]
//!   and [`WorkerSource::Command`] do this while another such run is live;
//! - spawned, or forked by the embedding program, ahead of the run
//!   ([`WorkerSource::Ahead`]: what `dsh workflow run` does).
//!
//! This file depends on the launch code below it (`run/worker.rs`,
//! `fork_server.rs`, `fork_server/shared.rs`, `run/error.rs`) and nothing
//! above it: `start()` (`run/mod.rs`) calls [`launch`], and the supervisor
//! holds the [`Lease`] it returns.

use dsh_protocol::SandboxPolicy;

use super::error::StartError;
use super::worker::{self, Spawned, SpawnedWorker, WorkerCommand};
use crate::fork_server::ForkServer;
use crate::fork_server::shared::{self, Lease};

/// Where a run's worker comes from. Set with
/// [`crate::StartRequest::with_worker_source`] (or the shorthands
/// `with_worker`, `with_spawned_worker`).
///
/// A fork server a host holds for its own runs was a source too; it went
/// when 100 runs at once forked from it took as long as from the shared
/// one (docs/performance.md).
#[derive(Clone, Debug, Default)]
pub enum WorkerSource {
    /// The worker program [`WorkerCommand::resolve`] finds, started as
    /// [`WorkerSource::Command`] starts its command (the default).
    #[default]
    Resolve,
    /// This command: spawned; or, while another run of it is live and it
    /// is a stock command ([`WorkerCommand::is_stock`]), forked from the
    /// fork server those runs share (docs/architecture.md, "The fork
    /// server").
    Command(WorkerCommand),
    /// This command, always spawned: never forked from a shared fork
    /// server.
    Spawn(WorkerCommand),
    /// The worker spawned (or forked by the embedding program) ahead of
    /// the run ([`SpawnedWorker`]). A run whose sandbox policy is not the
    /// one it was made for starts its command as [`WorkerSource::Command`]
    /// does, and the worker made ahead is killed.
    Ahead(SpawnedWorker),
}

/// A run's worker, started.
pub(crate) struct Launched {
    /// The worker's process and the host's end of its socket.
    pub spawned: Spawned,
    /// The command it runs (for messages).
    pub command: WorkerCommand,
    /// For a run that took part in the fork server sharing: released once
    /// the worker is gone (`fork_server/shared.rs`).
    pub lease: Option<Lease>,
}

/// Starts the worker `source` names for a run under `sandbox`. Returns
/// once the worker is on its way: a spawn waits for the spawner thread,
/// a fork is one round trip to the server, made on the calling thread (a
/// server that stops answering holds it up to 5 s, once, and is then taken
/// for gone).
pub(crate) fn launch(
    source: &WorkerSource,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> Result<Launched, StartError> {
    match source {
        WorkerSource::Resolve => shared_or_spawned(WorkerCommand::resolve()?, sandbox, handle),
        WorkerSource::Command(command) => shared_or_spawned(command.clone(), sandbox, handle),
        WorkerSource::Spawn(command) => {
            let spawned = spawn(command, sandbox, handle)?;
            Ok(launched(spawned, command.clone(), None))
        }
        WorkerSource::Ahead(ahead) => match ahead.take_for(sandbox) {
            Some(spawned) => Ok(launched(spawned, ahead.worker().clone(), None)),
            None => shared_or_spawned(ahead.worker().clone(), sandbox, handle),
        },
    }
}

fn launched(spawned: Spawned, command: WorkerCommand, lease: Option<Lease>) -> Launched {
    Launched {
        spawned,
        command,
        lease,
    }
}

/// Forked from the shared server when other runs of `command` are live
/// (the lease is held until the worker is gone; the server's `Arc` only
/// for the fork), else spawned.
fn shared_or_spawned(
    command: WorkerCommand,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> Result<Launched, StartError> {
    let (lease, server) = shared::enter(&command);
    let spawned = match server.and_then(|s| fork(&s, sandbox)) {
        Some(spawned) => spawned,
        None => spawn(&command, sandbox, handle)?,
    };
    Ok(launched(spawned, command, Some(lease)))
}

/// A worker forked from `server`; `None` (and the server taken for gone)
/// when it cannot fork.
fn fork(server: &ForkServer, sandbox: SandboxPolicy) -> Option<Spawned> {
    server
        .fork(sandbox)
        .map_err(|e| tracing::debug!("the fork server did not fork a worker ({e}); spawning one"))
        .ok()
}

fn spawn(
    command: &WorkerCommand,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> Result<Spawned, StartError> {
    worker::spawn(command, sandbox, handle).map_err(|e| StartError::spawn(command, e))
}
