//! The fork server runs share by default: while runs of one worker
//! command overlap, the next ones fork their workers from one server
//! instead of each exec'ing the worker binary (docs/performance.md,
//! "Round 12": 100 runs started at once, about a third less time).
//!
//! Who takes part: a run started by [`crate::start`] that brought no worker
//! of its own (no worker spawned ahead, no warm pool worker, no fork server
//! of the caller's), whose worker command is a stock one
//! ([`WorkerCommand::is_stock`]: any other program may not know
//! `--fork-server`), and whose request leaves
//! [`crate::StartRequest::shared_fork_server`] at [`SharedForkServer::Auto`].
//!
//! When: a run that starts while at least one other such run of its
//! command is live takes a [`Lease`] on the command's server, starting it
//! if there is none. A run that starts alone spawns its worker, as before:
//! one run never pays for a server it cannot share. Each lease is held
//! until the run's worker is gone; the last one shuts the server down
//! (its control socket closed, its process SIGKILLed, and the run's end
//! waits until it has exited), so no process outlives the runs that used
//! it.
//!
//! Nothing else changes for the run: a forked worker is still its own
//! process, the host's child, in its own process group, sandboxed by
//! itself for the run's policy ([`crate::fork_server`]). A server that
//! cannot start or stops answering means spawned workers, never a failed
//! start.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use super::ForkServer;
use crate::run::WorkerCommand;

/// Whether a run may fork its worker from the server runs share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SharedForkServer {
    /// Forks from the shared server while other runs of the same worker
    /// command are live (the default; see the module docs).
    #[default]
    Auto,
    /// Always spawns (exec's) the worker, unless the request brings one.
    Never,
}

/// Live runs of one command at which the next one forks: the second run
/// of a burst starts the server, the first spawns as a lone run does.
const SHARE_FROM: usize = 1;

/// One entry per worker command in use; a handful at most in practice
/// (an embedding host uses one or two commands).
static SHARED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

struct Entry {
    worker: WorkerCommand,
    /// Runs holding a [`Lease`] for this command.
    live: usize,
    /// The server, while some lease holds it.
    server: Weak<ForkServer>,
}

/// A run's part in the sharing, held until its worker is gone.
pub(crate) struct Lease {
    worker: WorkerCommand,
    server: Option<Arc<ForkServer>>,
}

impl Lease {
    /// The server to fork this run's worker from, if it shares one.
    pub(crate) fn server(&self) -> Option<&Arc<ForkServer>> {
        self.server.as_ref()
    }

    /// Ends the run's part: the last holder of the server shuts it down
    /// and waits until it has exited, so a host that has seen its last
    /// run end finds no process of dsh's left. (Merely dropped, a lease
    /// SIGKILLs the server without waiting.)
    pub(crate) async fn release(mut self) {
        if let Some(server) = self.server.take().and_then(|s| Arc::try_unwrap(s).ok()) {
            server.shut_down().await;
        }
    }
}

fn shared() -> MutexGuard<'static, Vec<Entry>> {
    // The entries stay consistent whatever panicked while holding the
    // lock: a count and a weak pointer, each updated in one step.
    SHARED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A lease for a run of `worker`: with the shared server when other runs
/// of it are live (started here if need be), else without. Inside a tokio
/// runtime (the server's exit is watched there).
pub(crate) fn enter(worker: &WorkerCommand) -> Lease {
    let mut entries = shared();
    let i = match entries.iter().position(|e| e.worker == *worker) {
        Some(i) => i,
        None => {
            entries.push(Entry {
                worker: worker.clone(),
                live: 0,
                server: Weak::new(),
            });
            entries.len() - 1
        }
    };
    let entry = &mut entries[i];
    let server = match entry.server.upgrade() {
        Some(server) => Some(server),
        None if entry.live >= SHARE_FROM && worker.is_stock() => {
            // Under the lock: runs started together from several threads
            // must not start a server each.
            match ForkServer::start(worker) {
                Ok(server) => {
                    entry.server = Arc::downgrade(&server);
                    Some(server)
                }
                Err(e) => {
                    tracing::debug!("no shared fork server ({e}); spawning workers");
                    None
                }
            }
        }
        None => None,
    };
    entry.live += 1;
    Lease {
        worker: worker.clone(),
        server,
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The last holder's drop ends the server; outside the lock.
        drop(self.server.take());
        let mut entries = shared();
        if let Some(i) = entries.iter().position(|e| e.worker == self.worker) {
            let entry = &mut entries[i];
            entry.live = entry.live.saturating_sub(1);
            if entry.live == 0 && entry.server.strong_count() == 0 {
                entries.swap_remove(i);
            }
        }
    }
}
