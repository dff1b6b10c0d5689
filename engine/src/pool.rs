//! The warm worker pool: worker processes spawned ahead of time, connected,
//! their `Hello` already checked, waiting for `Init`. A run that takes one
//! skips the exec, the dynamic linking and the first round trip.
//!
//! What does not change: a pool worker applies the same sandbox as a cold
//! one, at the same point (right after `Hello`, every layer but the run's
//! own limits, which follow `Init`), so it is no less confined; and a pool
//! worker serves exactly one run, then exits. A pool is for one sandbox
//! policy ([`WorkerPool::with_sandbox`]; best-effort by default): a run with
//! another policy starts cold. The pool refills in
//! the background; a run never waits for it (an empty pool means a cold
//! start). Dropping the last handle stops the refilling and kills the idle
//! workers.
//!
//! Trade-offs (docs/performance.md): each idle worker costs a process and
//! its memory while it waits; a pool belongs to the tokio runtime it was
//! created in, and its workers must be used by runs started in that
//! runtime.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_protocol::{DEFAULT_MAX_FRAME_BYTES, FrameBuffer, SandboxPolicy, WorkerMsg};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::run::handshake::check_hello;
use crate::run::worker::{self, Spawned};
use crate::run::{DEFAULT_SANDBOX, WorkerCommand};

/// How long a new pool worker may take to say `Hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker that said `Hello` and waits for `Init`.
pub(crate) struct Warm {
    pub spawned: Spawned,
}

/// A taken worker, and the request for its replacement.
pub(crate) struct Taken {
    pub spawned: Spawned,
    pub refill: Refill,
}

/// Asks the pool to spawn a replacement when dropped. The run that took a
/// worker holds it until a few milliseconds after its worker says `Ready`
/// (or the run ends first): spawning the replacement at once would make
/// the new worker's exec and engine build compete for the CPU with the
/// very start the pool is there to speed up (on 2 cores: a warm trivial
/// run 2.3–3.0 → 1.9–2.0 ms, p90 4.5 → 2.3 ms, holding it to `Ready`;
/// 0.55–0.60 → 0.42–0.52 ms holding it past the run's first steps;
/// docs/performance.md). A pool under steady use refills at most a few
/// milliseconds later.
pub(crate) struct Refill {
    inner: Arc<Inner>,
}

impl Drop for Refill {
    fn drop(&mut self) {
        self.inner.wake.notify_one();
    }
}

struct Inner {
    worker: WorkerCommand,
    sandbox: SandboxPolicy,
    size: usize,
    idle: Mutex<VecDeque<Warm>>,
    wake: Notify,
    closed: CancellationToken,
    handle: tokio::runtime::Handle,
}

/// A pool of warm workers for one worker command. Cheap to share
/// (`Arc<WorkerPool>`); see the module docs.
pub struct WorkerPool {
    inner: Arc<Inner>,
}

impl WorkerPool {
    /// A pool that keeps `size` workers of `worker` ready, filled in the
    /// background. Must be called inside a tokio runtime; the runs that use
    /// it must run in the same runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(worker: WorkerCommand, size: usize) -> Arc<WorkerPool> {
        Self::with_sandbox(worker, size, DEFAULT_SANDBOX)
    }

    /// Like [`WorkerPool::new`], for runs with the sandbox policy `sandbox`
    /// (its workers apply it before they are taken; a run with another
    /// policy does not take one).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn with_sandbox(
        worker: WorkerCommand,
        size: usize,
        sandbox: SandboxPolicy,
    ) -> Arc<WorkerPool> {
        let inner = Inner::new(worker, sandbox, size, tokio::runtime::Handle::current());
        inner.handle.spawn(refill(inner.clone()));
        Arc::new(WorkerPool { inner })
    }

    /// Like [`WorkerPool::new`], but spawns the first `size` workers now
    /// (blocking the calling thread until each said `Hello`), so the next
    /// `size` runs are certain to find a warm worker.
    ///
    /// Outside a tokio runtime it is an error.
    pub fn prefilled(worker: WorkerCommand, size: usize) -> std::io::Result<Arc<WorkerPool>> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            std::io::Error::other("a worker pool must be created inside a tokio runtime")
        })?;
        let inner = Inner::new(worker, DEFAULT_SANDBOX, size, handle);
        // A pool that fails half-way drops (and kills) what it spawned.
        let pool = Arc::new(WorkerPool {
            inner: inner.clone(),
        });
        for _ in 0..size {
            inner.push(spawn_warm(&inner.worker, inner.sandbox, &inner.handle)?);
        }
        inner.handle.spawn(refill(inner.clone()));
        Ok(pool)
    }

    /// The worker command this pool runs.
    pub fn worker(&self) -> &WorkerCommand {
        &self.inner.worker
    }

    /// The sandbox policy of the runs this pool serves.
    pub fn sandbox(&self) -> SandboxPolicy {
        self.inner.sandbox
    }

    /// Idle workers right now.
    pub fn idle(&self) -> usize {
        self.inner.idle.lock().map_or(0, |q| q.len())
    }

    /// The process ids of the idle workers (for diagnostics and leak checks).
    pub fn idle_pids(&self) -> Vec<u32> {
        self.inner
            .idle
            .lock()
            .map(|q| q.iter().map(|w| w.spawned.pid()).collect())
            .unwrap_or_default()
    }

    /// Takes a live warm worker, if there is one; its replacement is
    /// spawned when the returned [`Refill`] is dropped.
    pub(crate) fn take(&self) -> Option<Taken> {
        let taken = loop {
            let next = self.inner.idle.lock().ok().and_then(|mut q| q.pop_front());
            match next {
                None => break None,
                Some(w) => {
                    // One that died while idle is dropped (and reaped).
                    if !w.spawned.process.has_exited() {
                        break Some(w);
                    }
                }
            }
        };
        match taken {
            Some(w) => Some(Taken {
                spawned: w.spawned,
                refill: Refill {
                    inner: self.inner.clone(),
                },
            }),
            None => {
                // Empty (or only dead ones): refill now.
                self.inner.wake.notify_one();
                None
            }
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.inner.closed.cancel();
        // Idle workers are killed: dropping one SIGKILLs its process
        // group, and the runtime reaps it.
        if let Ok(mut q) = self.inner.idle.lock() {
            q.clear();
        }
    }
}

impl Inner {
    fn new(
        worker: WorkerCommand,
        sandbox: SandboxPolicy,
        size: usize,
        handle: tokio::runtime::Handle,
    ) -> Arc<Inner> {
        Arc::new(Inner {
            worker,
            sandbox,
            size,
            idle: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            closed: CancellationToken::new(),
            handle,
        })
    }

    fn push(&self, warm: Warm) {
        if let Ok(mut q) = self.idle.lock() {
            q.push_back(warm);
        }
    }

    fn missing(&self) -> usize {
        self.size
            .saturating_sub(self.idle.lock().map_or(self.size, |q| q.len()))
    }
}

/// Keeps the pool full until it is closed. Spawning blocks (fork/exec and
/// the `Hello` read), so it runs on the blocking pool.
async fn refill(inner: Arc<Inner>) {
    loop {
        while inner.missing() > 0 && !inner.closed.is_cancelled() {
            let worker = inner.worker.clone();
            let handle = inner.handle.clone();
            let sandbox = inner.sandbox;
            let res =
                tokio::task::spawn_blocking(move || spawn_warm(&worker, sandbox, &handle)).await;
            match res {
                Ok(Ok(warm)) => {
                    if inner.closed.is_cancelled() {
                        drop(warm);
                        return;
                    }
                    inner.push(warm);
                }
                Ok(Err(e)) => {
                    tracing::warn!(
                        "worker pool: cannot start {}: {e}; runs start cold until it can",
                        inner.worker.program.display()
                    );
                    // Do not spin on a broken worker command.
                    tokio::select! {
                        _ = inner.closed.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
                Err(_) => return,
            }
        }
        tokio::select! {
            _ = inner.closed.cancelled() => return,
            _ = inner.wake.notified() => {}
        }
    }
}

/// Spawns one worker and waits (blocking, bounded) for its `Hello`.
fn spawn_warm(
    worker: &WorkerCommand,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<Warm> {
    let mut spawned = worker::spawn(worker, sandbox, handle)?;
    // On an error the worker is dropped, which kills it.
    read_hello(&mut spawned)?;
    Ok(Warm { spawned })
}

fn read_hello(spawned: &mut Spawned) -> std::io::Result<()> {
    let pid = spawned.pid();
    let sock = &mut spawned.socket;
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(HELLO_TIMEOUT))?;
    let mut frames = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
    let mut buf = [0u8; 256];
    let msg = loop {
        let n = sock.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other(
                "the worker closed its connection before Hello",
            ));
        }
        frames.push(&buf[..n]);
        match frames.next_msg::<WorkerMsg>() {
            Ok(Some(m)) => break m,
            Ok(None) => continue,
            Err(e) => return Err(std::io::Error::other(format!("protocol violation: {e}"))),
        }
    };
    check_hello(&msg, pid)
        .map_err(|e| std::io::Error::other(format!("protocol violation: {e}")))?;
    // The worker sends nothing else before Init: no bytes can be left over.
    sock.set_read_timeout(None)?;
    sock.set_nonblocking(true)?;
    Ok(())
}
