//! The run's event fan-out: the [`Hub`] keeps the history and hands each
//! subscriber its own bounded queue, read as an [`EventStream`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tokio::sync::Notify;

use super::{Event, EventKind};

/// Bytes of events (as [`Event::weight`] counts them) a subscriber may have
/// waiting before later ones are dropped for it (and counted): a
/// subscriber that reads slower than the run emits — a stderr piped into a
/// stalled reader — costs at most this much, never the run's progress.
/// Bursts (10,000 phases at once) fit; `workflow/end` is never dropped.
pub const SUBSCRIBER_QUEUE_BYTES: usize = 16 << 20;

/// One subscriber's queue, shared by the hub (which pushes) and the
/// [`EventStream`] (which pops).
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    ready: Notify,
}

#[derive(Default)]
struct QueueState {
    events: VecDeque<Event>,
    /// The [`Event::weight`] of `events`.
    bytes: usize,
    dropped: u64,
    closed: bool,
}

impl QueueState {
    fn pop(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        self.bytes = self.bytes.saturating_sub(e.weight());
        Some(e)
    }
}

impl Queue {
    /// Queues `event` unless the queue is full (then counts it); `end`
    /// always goes in, and closes the queue.
    fn push(&self, event: Event, end: bool) {
        if let Ok(mut st) = self.state.lock() {
            let weight = event.weight();
            if end || st.bytes + weight <= SUBSCRIBER_QUEUE_BYTES {
                st.bytes += weight;
                st.events.push_back(event);
            } else {
                st.dropped += 1;
            }
            st.closed |= end;
        }
        self.ready.notify_one();
    }
}

/// A subscription: every event of the run in order, ending after
/// `workflow/end`. A subscriber that falls more than
/// [`SUBSCRIBER_QUEUE_BYTES`] behind misses the excess;
/// [`EventStream::dropped`] counts the events it missed.
pub struct EventStream {
    queue: Arc<Queue>,
}

impl EventStream {
    /// The next event; `None` after `workflow/end` was delivered.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            // Registered before the check, so a push between the check and
            // the wait still wakes this one.
            let ready = self.queue.ready.notified();
            {
                let mut st = self.queue.state.lock().ok()?;
                if let Some(e) = st.pop() {
                    return Some(e);
                }
                if st.closed {
                    return None;
                }
            }
            ready.await;
        }
    }

    /// The next event if one is ready now.
    pub fn try_next(&mut self) -> Option<Event> {
        self.queue.state.lock().ok()?.pop()
    }

    /// Events this subscriber missed because it fell more than
    /// [`SUBSCRIBER_QUEUE_BYTES`] behind.
    pub fn dropped(&self) -> u64 {
        self.queue.state.lock().map(|st| st.dropped).unwrap_or(0)
    }
}

struct HubState {
    history: Vec<Event>,
    /// Weak: a dropped [`EventStream`] is forgotten at the next event.
    subscribers: Vec<Weak<Queue>>,
    ended: bool,
}

/// The run's event fan-out. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    run_id: Arc<str>,
    epoch: Instant,
    state: Arc<Mutex<HubState>>,
}

impl Hub {
    /// A hub for run `run_id` with no events yet; events' `t` counts from
    /// `epoch`.
    pub fn new(run_id: Arc<str>, epoch: Instant) -> Self {
        Hub {
            run_id,
            epoch,
            state: Arc::new(Mutex::new(HubState {
                history: Vec::new(),
                subscribers: Vec::new(),
                ended: false,
            })),
        }
    }

    /// Emits an event. Nothing is emitted after `workflow/end`.
    pub fn emit(&self, kind: EventKind) {
        let is_end = matches!(kind, EventKind::End { .. });
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.ended {
            return;
        }
        // Read the clock under the lock: events are ordered by the lock,
        // and two threads that read it before taking the lock could append
        // their events in the opposite order of their times (an agent's
        // activity, emitted by its own task, after another agent's end).
        let t = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let event = Event {
            run_id: self.run_id.clone(),
            t,
            kind,
        };
        st.subscribers.retain(|q| match q.upgrade() {
            Some(q) => {
                q.push(event.clone(), is_end);
                true
            }
            None => false,
        });
        st.history.push(event);
        if is_end {
            st.ended = true;
            st.subscribers.clear();
        }
    }

    /// A new subscription: the events so far (all of them, whatever their
    /// number), then each later one; a stream taken after `workflow/end`
    /// holds the history only.
    pub fn subscribe(&self) -> EventStream {
        let queue = Arc::new(Queue::default());
        if let Ok(mut st) = self.state.lock() {
            if let Ok(mut q) = queue.state.lock() {
                q.events.extend(st.history.iter().cloned());
                q.closed = st.ended;
            }
            if !st.ended {
                st.subscribers.push(Arc::downgrade(&queue));
            }
        }
        EventStream { queue }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_protocol::StopReason;

    fn log(hub: &Hub, i: usize) {
        hub.emit(EventKind::Log {
            message: format!("line {i}"),
            workflow: None,
        });
    }

    fn end(hub: &Hub) {
        hub.emit(EventKind::End {
            stop_reason: StopReason::Completed,
            error: None,
            agents_started: 0,
            log_bytes_dropped: 0,
        });
    }

    #[tokio::test]
    async fn a_subscriber_that_never_reads_holds_a_bounded_queue_and_still_gets_the_end() {
        let hub = Hub::new("r".into(), Instant::now());
        let mut slow = hub.subscribe();
        let fits = SUBSCRIBER_QUEUE_BYTES / (256 + "line 0000000".len());
        let extra = 1000;
        for i in 0..fits + extra {
            hub.emit(EventKind::Log {
                message: format!("line {i:07}"),
                workflow: None,
            });
        }
        end(&hub);
        assert_eq!(slow.dropped(), extra as u64);
        let mut got = Vec::new();
        while let Some(e) = slow.next().await {
            got.push(e);
        }
        assert_eq!(got.len(), fits + 1, "the kept events and the end");
        assert!(
            matches!(got[0].kind, EventKind::Log { ref message, .. } if message == "line 0000000")
        );
        assert!(matches!(
            got.last().map(|e| &e.kind),
            Some(EventKind::End { .. })
        ));
        // A late subscriber still gets the whole history.
        let mut late = hub.subscribe();
        let mut n = 0;
        while late.next().await.is_some() {
            n += 1;
        }
        assert_eq!(n, fits + extra + 1);
        assert_eq!(late.dropped(), 0);
    }

    #[tokio::test]
    async fn a_reader_that_keeps_up_misses_nothing() {
        let hub = Hub::new("r".into(), Instant::now());
        let mut s = hub.subscribe();
        let reader = tokio::spawn(async move {
            let mut n = 0u64;
            while s.next().await.is_some() {
                n += 1;
            }
            (n, s.dropped())
        });
        for i in 0..100 {
            log(&hub, i);
            tokio::task::yield_now().await;
        }
        end(&hub);
        assert_eq!(reader.await.expect("reader"), (101, 0));
    }

    /// Events emitted from several threads at once (an agent's activity
    /// pump beside the supervisor) come out with `t` non-decreasing: the
    /// order of the stream and the order of the clock agree.
    #[test]
    fn events_from_several_threads_keep_t_in_order() {
        let hub = Hub::new("r".into(), Instant::now());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let hub = hub.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        log(&hub, i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("an emitting thread");
        }
        end(&hub);
        let st = hub.state.lock().expect("the hub's state");
        assert_eq!(st.history.len(), 80_001);
        for pair in st.history.windows(2) {
            assert!(pair[0].t <= pair[1].t, "{} after {}", pair[1].t, pair[0].t);
        }
    }
}
