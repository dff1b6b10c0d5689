//! What the engine's interrupt handler decides with: when the current
//! synchronous slice started, the sync-slice limit, and whether (and since
//! when) the run is cancelled.
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
}

pub struct Clock {
    slice_start: Cell<Instant>,
    sync_limit: Duration,
    cancel_grace: Duration,
    cancelled_at: Cell<Option<Instant>>,
    fired: Cell<Option<Interrupted>>,
}

impl Clock {
    pub fn new(sync_limit: Duration, cancel_grace: Duration) -> Self {
        Clock {
            slice_start: Cell::new(Instant::now()),
            sync_limit,
            cancel_grace,
            cancelled_at: Cell::new(None),
            fired: Cell::new(None),
        }
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
            if now.saturating_duration_since(since) >= self.cancel_grace {
                self.fired.set(Some(Interrupted::Cancelled));
                return true;
            }
        }
        if now.saturating_duration_since(slice_start) >= self.sync_limit {
            self.fired.set(Some(Interrupted::SyncTimeout));
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
        self.sync_limit
    }
}
