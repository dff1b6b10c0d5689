//! Spinning before blocking: how either end waits for the other's answer.
//!
//! Why spin at all: a process that blocks in `poll` or `epoll_wait` leaves
//! its CPU idle, and on a virtual machine an idle vCPU is halted — waking
//! it for the peer's answer costs 20–40 µs. Measured on the 2-core VM of
//! docs/performance.md, a Unix-socket ping-pong between two processes
//! takes 70–120 µs a round trip when both sides block, about 24 µs when
//! one side spins and 5 µs when both do. (Yielding the CPU inside the
//! spin, so that another process could use it, measured slower: 29 against
//! 24 µs for the ping-pong.) An instant answer (a fixture, a
//! cache, the `Go` after `Ready`, the worker's next `agent()` call) comes
//! within a few microseconds; a model's answer takes seconds, and [`Spin`]
//! stops spinning for it after a few misses.
//!
//! Sans-io like the rest of this crate: [`Spin`] only decides how long the
//! next wait may spin; the worker's channel and the host's connection do
//! the non-blocking reads.

use std::time::Duration;

/// The longest a wait spins before it blocks.
pub const SPIN_MAX: Duration = Duration::from_micros(50);
/// A blocking wait answered within this reopens a closed window: what a
/// spin would have caught, plus the wake-up of the side that blocked.
const REOPEN_WITHIN: Duration = Duration::from_micros(100);
/// Below this a spin is not worth its system calls: the next wait blocks.
const SPIN_MIN: Duration = Duration::from_micros(4);

/// The adaptive spin window of waits that follow a write. A spin that
/// sees the answer keeps the full window; one that does not halves it, so
/// a peer that answers slowly (a model call) costs at most about twice
/// [`SPIN_MAX`] of CPU before waits block at once. A blocking wait that
/// was answered within [`SPIN_MAX`] anyway restores the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spin {
    window: Duration,
}

impl Default for Spin {
    fn default() -> Self {
        Spin { window: SPIN_MAX }
    }
}

impl Spin {
    /// How long the next wait after a write may spin (zero: it blocks).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The answer came during the spin: spin the whole window again.
    pub fn hit(&mut self) {
        self.window = SPIN_MAX;
    }

    /// The spin ran out: the peer is slow to answer this time.
    pub fn miss(&mut self) {
        let half = self.window / 2;
        self.window = if half < SPIN_MIN {
            Duration::ZERO
        } else {
            half
        };
    }

    /// A wait that blocked (without spinning) was answered after
    /// `waited`: an answer about as soon as a spin would have caught it
    /// means the peer answers fast again. (Both sides spin, so when both
    /// windows are closed each answer also pays the other's wake-up; the
    /// bound allows for it, or neither would ever reopen.)
    pub fn blocked_for(&mut self, waited: Duration) {
        if self.window.is_zero() && waited <= REOPEN_WITHIN {
            self.hit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses_shrink_the_window_to_nothing_and_a_fast_answer_restores_it() {
        let mut spin = Spin::default();
        assert_eq!(spin.window(), SPIN_MAX);
        let mut misses = 0;
        while !spin.window().is_zero() {
            spin.miss();
            misses += 1;
            assert!(misses < 10, "the window never closes");
        }
        // 50 → 25 → 12.5 → 6.25 → (3.1: below the minimum) 0
        assert_eq!(misses, 4);
        spin.blocked_for(REOPEN_WITHIN * 10);
        assert!(spin.window().is_zero(), "a slow answer keeps it closed");
        spin.blocked_for(REOPEN_WITHIN);
        assert_eq!(spin.window(), SPIN_MAX);
    }

    #[test]
    fn a_hit_restores_the_whole_window() {
        let mut spin = Spin::default();
        spin.miss();
        assert_eq!(spin.window(), SPIN_MAX / 2);
        spin.hit();
        assert_eq!(spin.window(), SPIN_MAX);
    }
}
