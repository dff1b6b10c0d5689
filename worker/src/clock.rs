//! What the engine's interrupt handler decides with: when the current
//! synchronous slice started, the sync-slice limit, the CPU-time budget
//! (`computeMs`), and whether (and since when) the run is cancelled.
//!
//! Shared between the loop and the interrupt handler through `Rc` and
//! `Cell`s only, so the handler never contends for a `RefCell` that a native
//! function might hold.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Why the handler stopped the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// One synchronous slice ran longer than `syncTimeoutMs`.
    SyncTimeout,
    /// The run was cancelled and the script kept running.
    Cancelled,
    /// The script used more CPU time than `computeMs`.
    Compute,
}

pub struct Clock {
    slice_start: Cell<Instant>,
    sync_limit: Cell<Duration>,
    cancel_grace: Cell<Duration>,
    cancelled_at: Cell<Option<Instant>>,
    fired: Cell<Option<Interrupted>>,
    compute: Compute,
}

/// The CPU budget: process CPU time is read only when it could have run
/// out, which is never sooner than the budget left in wall time (CPU time
/// cannot grow faster than the clock on a single thread), so the handler
/// stays cheap.
struct Compute {
    limit: Cell<Option<Duration>>,
    started: Cell<Option<Duration>>,
    next_check: Cell<Instant>,
}

/// CPU time this process has used.
pub fn process_cpu_time() -> Duration {
    let Ok(ts) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID) else {
        return Duration::ZERO;
    };
    Duration::new(
        u64::try_from(ts.tv_sec()).unwrap_or(0),
        u32::try_from(ts.tv_nsec()).unwrap_or(0),
    )
}

impl Clock {
    pub fn new(sync_limit: Duration, cancel_grace: Duration, compute: Option<Duration>) -> Self {
        Clock {
            slice_start: Cell::new(Instant::now()),
            sync_limit: Cell::new(sync_limit),
            cancel_grace: Cell::new(cancel_grace),
            cancelled_at: Cell::new(None),
            fired: Cell::new(None),
            compute: Compute {
                limit: Cell::new(compute),
                started: Cell::new(None),
                next_check: Cell::new(Instant::now()),
            },
        }
    }

    /// Sets the run's limits: the clock exists before `Init` says them
    /// (the engine is built first), and nothing of the body has run yet.
    pub fn configure(
        &self,
        sync_limit: Duration,
        cancel_grace: Duration,
        compute: Option<Duration>,
    ) {
        self.sync_limit.set(sync_limit);
        self.cancel_grace.set(cancel_grace);
        self.compute.limit.set(compute);
    }

    /// The body starts: CPU time counts from here.
    pub fn start_compute(&self) {
        if let Some(limit) = self.compute.limit.get() {
            self.compute.started.set(Some(process_cpu_time()));
            self.compute.next_check.set(Instant::now() + limit);
        }
    }

    /// The `computeMs` budget, when one is set.
    pub fn compute_limit(&self) -> Option<Duration> {
        self.compute.limit.get()
    }

    fn compute_exhausted(&self, now: Instant) -> bool {
        let c = &self.compute;
        let Some(limit) = c.limit.get() else {
            return false;
        };
        let Some(started) = c.started.get() else {
            return false;
        };
        if now < c.next_check.get() {
            return false;
        }
        let used = process_cpu_time().saturating_sub(started);
        if used >= limit {
            return true;
        }
        let left = (limit - used).max(Duration::from_millis(1));
        c.next_check.set(now + left);
        false
    }

    /// Marks the start of a synchronous slice (a macrotask and its microtasks).
    pub fn start_slice(&self) {
        self.slice_start.set(Instant::now());
    }

    pub fn note_cancel(&self) {
        if self.cancelled_at.get().is_none() {
            self.cancelled_at.set(Some(Instant::now()));
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled_at.get().is_some()
    }

    /// The decision of the interrupt handler: `true` stops the script with
    /// an uncatchable error. Once fired it stays fired, so the script cannot
    /// resume after an interrupt.
    pub fn should_interrupt(&self) -> bool {
        if self.fired.get().is_some() {
            return true;
        }
        let now = Instant::now();
        let slice_start = self.slice_start.get();
        if let Some(at) = self.cancelled_at.get() {
            let since = at.max(slice_start);
            if now.saturating_duration_since(since) >= self.cancel_grace.get() {
                self.fired.set(Some(Interrupted::Cancelled));
                return true;
            }
        }
        if now.saturating_duration_since(slice_start) >= self.sync_limit.get() {
            self.fired.set(Some(Interrupted::SyncTimeout));
            return true;
        }
        if self.compute_exhausted(now) {
            self.fired.set(Some(Interrupted::Compute));
            return true;
        }
        false
    }

    pub fn fired(&self) -> Option<Interrupted> {
        self.fired.get()
    }
}

impl Clock {
    pub fn sync_limit(&self) -> Duration {
        self.sync_limit.get()
    }
}
