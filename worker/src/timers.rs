//! Deadlines of the script's `setTimeout` timers. The callbacks themselves
//! live in the prelude (keyed by id); the loop only needs to know when to
//! wake up and which ids are due.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Timers {
    // (deadline, id): ordered by deadline, then by creation order (ids grow).
    queue: BTreeSet<(Instant, u64)>,
    live: HashSet<u64>,
}

impl Timers {
    pub fn set(&mut self, id: u64, delay: Duration) {
        self.queue.insert((Instant::now() + delay, id));
        self.live.insert(id);
    }

    pub fn clear(&mut self, id: u64) {
        self.live.remove(&id);
    }

    pub fn clear_all(&mut self) {
        self.queue.clear();
        self.live.clear();
    }

    /// Time until the next live timer, `None` when there is none.
    pub fn next_wait(&mut self, now: Instant) -> Option<Duration> {
        self.drop_dead();
        self.queue
            .first()
            .map(|(at, _)| at.saturating_duration_since(now))
    }

    /// Removes and returns one timer that is due.
    pub fn pop_due(&mut self, now: Instant) -> Option<u64> {
        self.drop_dead();
        let &(at, id) = self.queue.first()?;
        if at > now {
            return None;
        }
        self.queue.remove(&(at, id));
        self.live.remove(&id);
        Some(id)
    }

    fn drop_dead(&mut self) {
        while let Some(&(at, id)) = self.queue.first() {
            if self.live.contains(&id) {
                break;
            }
            self.queue.remove(&(at, id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_timers_come_out_in_deadline_then_creation_order() {
        let mut t = Timers::default();
        t.set(1, Duration::from_millis(0));
        t.set(2, Duration::from_millis(0));
        t.set(3, Duration::from_secs(3600));
        t.clear(2);
        let later = Instant::now() + Duration::from_millis(1);
        assert_eq!(t.pop_due(later), Some(1));
        assert_eq!(t.pop_due(later), None);
        assert!(
            t.next_wait(later)
                .is_some_and(|d| d > Duration::from_secs(3000))
        );
        t.clear_all();
        assert_eq!(t.next_wait(later), None);
    }
}
