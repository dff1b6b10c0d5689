//! The fork server runs share by default: while runs of one worker
//! command overlap, the next ones fork their workers from one server
//! instead of each exec'ing the worker binary (docs/performance.md,
//! "Round 12": 100 runs started at once, about a third less time).
//!
//! Who takes part: a run whose [`crate::WorkerSource`] is `Resolve` or
//! `Command` (or `Ahead` with a worker made for another policy), whose
//! worker command is a stock one ([`WorkerCommand::is_stock`]: any other
//! program may not know `--fork-server`). `WorkerSource::Spawn` always
//! spawns.
//!
//! When: every such run holds a [`Lease`] on its command's entry from its
//! start until its worker is gone. A run that starts while another lease
//! of its command is held forks from the command's server, starting it if
//! there is none; a run that starts alone spawns its worker, as before, so
//! one run never pays for a server it cannot share. (A run counts until
//! its worker is gone, not until its result: a host that starts its next
//! run the moment it has a result overlaps the two.) The entry holds the
//! server while any lease is held; the lease that takes the count to zero
//! shuts it down (its control socket closed, its process SIGKILLed) and
//! waits until it has exited, so a host that has seen its last run end has
//! no process of dsh's left.
//!
//! Nothing else changes for the run: a forked worker is still its own
//! process, the host's child, in its own process group, sandboxed by
//! itself for the run's policy ([`crate::fork_server`]). A server that
//! cannot start or stops answering means spawned workers, never a failed
//! start.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::ForkServer;
use crate::run::worker::WorkerCommand;

/// Live runs of one command at which the next one forks: the second run
/// of a burst starts the server, the first spawns as a lone run does.
const SHARE_FROM: usize = 1;

/// One entry per worker command with a lease held; a handful at most in
/// practice (an embedding host uses one or two commands).
static SHARED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

struct Entry {
    worker: WorkerCommand,
    /// Leases held for this command.
    live: usize,
    /// The server, once one run has started it; ended with the last lease.
    server: Option<Arc<ForkServer>>,
}

/// A run's part in the sharing, held until its worker is gone.
pub(crate) struct Lease {
    /// `None` once released.
    worker: Option<WorkerCommand>,
}

fn shared() -> MutexGuard<'static, Vec<Entry>> {
    // The entries stay consistent whatever panicked while holding the
    // lock: each update is a count or an option set in one step.
    SHARED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A lease for a run of `worker`, and the server to fork its worker from
/// when other runs of it are live (started here if need be). Inside a
/// tokio runtime (the server's exit is watched there). The server's `Arc`
/// is for the fork only: the entry keeps the server up, not the run.
pub(crate) fn enter(worker: &WorkerCommand) -> (Lease, Option<Arc<ForkServer>>) {
    let mut entries = shared();
    let i = match entries.iter().position(|e| e.worker == *worker) {
        Some(i) => i,
        None => {
            entries.push(Entry {
                worker: worker.clone(),
                live: 0,
                server: None,
            });
            entries.len() - 1
        }
    };
    let entry = &mut entries[i];
    if entry.server.is_none() && entry.live >= SHARE_FROM && worker.is_stock() {
        // Under the lock, so that runs started together from several
        // threads start one server. The lock is held through the server's
        // spawn (a fraction of a millisecond, behind spawns already queued
        // on the spawner thread); its start-up is waited for by the first
        // fork, outside the lock.
        match ForkServer::start(worker) {
            Ok(server) => entry.server = Some(server),
            Err(e) => tracing::debug!("no shared fork server ({e}); spawning workers"),
        }
    }
    entry.live += 1;
    let server = entry.server.clone();
    let lease = Lease {
        worker: Some(worker.clone()),
    };
    (lease, server)
}

impl Lease {
    /// Ends the run's part. The lease that takes its command's count to
    /// zero shuts the server down and waits until it has exited; a run
    /// that starts meanwhile finds no server and no other run, and spawns.
    pub(crate) async fn release(mut self) {
        let last = self.leave();
        if let Some(server) = last.and_then(|s| Arc::try_unwrap(s).ok()) {
            server.shut_down().await;
        }
    }

    /// Takes the lease off its entry's count; the server when this was the
    /// last lease.
    fn leave(&mut self) -> Option<Arc<ForkServer>> {
        let worker = self.worker.take()?;
        let mut entries = shared();
        let i = entries.iter().position(|e| e.worker == worker)?;
        let entry = &mut entries[i];
        entry.live = entry.live.saturating_sub(1);
        if entry.live > 0 {
            return None;
        }
        entries.swap_remove(i).server
    }
}

impl Drop for Lease {
    /// A lease dropped without [`Lease::release`] (the run's task aborted
    /// with its runtime): the last one still ends the server, SIGKILLed
    /// as its `ForkServer` drops, without the wait.
    fn drop(&mut self) {
        drop(self.leave());
    }
}
