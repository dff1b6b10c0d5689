//! The worker's answer awaited without leaving the thread: right after a
//! write the supervisor spins a moment for the worker's next frame, and a
//! worker found on this thread's CPU is moved off it
//! (`process::placement`; docs/performance.md round 10).

use std::time::Duration;

use dsh_exec::process::placement::{self, Placement};

use super::{Claim, Supervisor};

/// The least time between two checks of where the worker runs against
/// this thread (`Supervisor::keep_apart`).
const PLACEMENT_EVERY: Duration = Duration::from_millis(20);

impl Supervisor {
    /// Right after a write, waits a moment for the worker's next frame
    /// without leaving the thread (see [`dsh_protocol::spin`]); whatever
    /// the spin finds (frames, an end of stream, a reset) is handled here,
    /// as the runtime's read would handle it.
    pub(super) async fn spin_for_worker(&mut self) -> Option<Claim> {
        let window = self.spin.window();
        if window.is_zero() {
            // Blocking: how soon the worker answers decides whether to
            // spin again (see `Spin::blocked_for`).
            self.blocked_since = Some(std::time::Instant::now());
            return None;
        }
        match self.conn.inbound.spin_read(window) {
            Some(read) => {
                self.spin.hit();
                if let Some(narrowed) = self.narrowed.take() {
                    // Answered within a spin: apart now, and the worker's
                    // allowed set is its own again.
                    narrowed.restore();
                }
                self.on_read(read).await
            }
            None => {
                self.spin.miss();
                None
            }
        }
    }

    /// Moves the worker off this thread's CPU if both are on it (see
    /// `process::placement`), at most every [`PLACEMENT_EVERY`]. Only
    /// while the run is live, so the pid is still the unreaped worker.
    pub(super) fn keep_apart(&mut self) {
        let now = std::time::Instant::now();
        if now < self.next_placement_check {
            return;
        }
        self.next_placement_check = now + PLACEMENT_EVERY;
        if let Some(narrowed) = self.narrowed.take() {
            // Together again although narrowed: this thread moved to where
            // the worker was sent. Start over from the worker's own set.
            narrowed.restore();
        }
        if let Placement::Moved(narrowed) = placement::separate(self.process.pid()) {
            self.narrowed = Some(narrowed);
        }
    }
}
