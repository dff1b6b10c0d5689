//! When an API provider's requests go out: the two rules that make a run
//! cheaper, not only faster. One [`Dispatch`] per provider (its
//! `Endpoint`) sees every request of every call.
//!
//! 1. **Prefix-cache holds.** Providers serve a prompt prefix they have
//!    seen from cache at a fraction of the price, but only once a request
//!    with it was processed: sixteen calls that share a 20 KB preamble
//!    and go out at the same instant all miss. A request that shares at
//!    least [`MIN_SHARED_BYTES`] more with an earlier request still on its
//!    way (queued, or sent and not yet answering) than with anything
//!    already answered waits until that request's answer starts — then
//!    the prefix is in the provider's cache — or the provider's
//!    `prefix_hold` passes, whichever comes first. A request that fails
//!    releases those behind it (the first of them leads in its place).
//! 2. **Adaptive concurrency.** A `429` (rate limited) or `529`
//!    (overloaded) halves the requests the provider may have in flight
//!    (once per round: answers to requests sent before the cut do not cut
//!    again) and pauses every request until the response's `Retry-After`
//!    has passed; each answer raises the limit by `1/limit` again
//!    (additive increase, multiplicative decrease). Such a response is
//!    answered by waiting, not counted as a failed attempt (up to
//!    [`RATE_LIMITED_ATTEMPTS`]). `concurrency = N` in the provider's
//!    table turns this off: N at most, each request retrying on its own.
//!
//! Both are visible in the call's activity events: `held` and `released`
//! for a hold, `concurrency` when the limit changes.
//!
//! The shared prefix is measured on the request body as it is sent (its
//! JSON, model and system prompt included), so calls to different models
//! or with different system prompts share little. What is answered is
//! remembered as hashes of [`BLOCK`]-byte prefixes, bounded; nothing of a
//! prompt is kept after its request ends.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use dsh_seam::{Activity, Progress};

/// A shared prefix shorter than this is not worth a hold (providers cache
/// from about 1,024 tokens, some 4 KB of text).
pub const MIN_SHARED_BYTES: usize = 4096;
/// The granularity of what is remembered as cached.
pub const BLOCK: usize = 256;
/// Most prefix hashes remembered as answered (8 bytes each); past it the
/// memory starts over, as a provider's cache would evict.
const MAX_ANSWERED_BLOCKS: usize = 1 << 18;
/// The ceiling of the adaptive limit: more than any run has calls at once.
pub const CEILING: u32 = 1024;
/// Most `429`/`529` answers one request takes in its stride before the
/// call fails, under adaptive concurrency.
pub const RATE_LIMITED_ATTEMPTS: u32 = 64;
/// The default `prefix_hold`: how long a request waits at most for
/// another's answer to start.
pub const DEFAULT_PREFIX_HOLD: Duration = Duration::from_secs(30);

/// `concurrency` in a provider's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// `"adaptive"` (the default): halved on `429`/`529`, raised again by
    /// the answers that follow.
    #[default]
    Adaptive,
    /// A number: at most this many requests in flight, never adapted.
    Fixed(u32),
}

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Concurrency;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"adaptive\" or a number of requests at once, 1 or more")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Concurrency, E> {
                match v {
                    "adaptive" => Ok(Concurrency::Adaptive),
                    _ => Err(E::custom(format!(
                        "{v:?} is not a concurrency: write \"adaptive\" or a number such as 8"
                    ))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Concurrency, E> {
                match u32::try_from(v) {
                    Ok(n) if (1..=CEILING).contains(&n) => Ok(Concurrency::Fixed(n)),
                    _ => Err(E::custom(format!(
                        "concurrency {v} is out of range: write a number from 1 to {CEILING}, or \"adaptive\""
                    ))),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Concurrency, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(V)
    }
}

/// How a provider dispatches its requests (from its table).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatchConfig {
    /// `concurrency`.
    pub concurrency: Concurrency,
    /// `prefix_hold`; zero turns holds off.
    pub prefix_hold: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            concurrency: Concurrency::Adaptive,
            prefix_hold: DEFAULT_PREFIX_HOLD,
        }
    }
}

/// One provider's dispatch: every request passes [`Dispatch::admit`].
pub struct Dispatch {
    cfg: DispatchConfig,
    state: Mutex<State>,
    /// Woken on every change a waiting request may be waiting for.
    changed: Notify,
    hasher: std::collections::hash_map::RandomState,
}

struct State {
    /// Requests allowed in flight (fractional: it grows by `1/limit`).
    limit: f64,
    in_flight: u32,
    /// No request goes out before this (a `Retry-After`).
    paused_until: Option<Instant>,
    /// Requests waiting for a slot, oldest first.
    queue: VecDeque<u64>,
    next_id: u64,
    /// Requests that will warm the cache for others: past their hold
    /// (or never held), their answer not yet started.
    leaders: Vec<(u64, Arc<[u8]>)>,
    /// Hashes of the [`BLOCK`]-multiple prefixes of answered requests.
    answered: HashSet<u64>,
    /// Bumped by each cut: a `429` of a request sent before the last cut
    /// does not cut again.
    epoch: u64,
}

/// What a request does once it has a slot.
pub struct Permit {
    dispatch: Arc<Dispatch>,
    id: u64,
    epoch: u64,
    key: Arc<[u8]>,
    /// Still among the leaders (its answer has not started).
    leading: bool,
}

/// A request on its way through [`Dispatch::admit`]; dropped (the call
/// cancelled) it leaves no trace in the queue or among the leaders.
struct Ticket<'a> {
    dispatch: &'a Dispatch,
    id: u64,
    queued: bool,
    leading: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !(self.queued || self.leading) {
            return;
        }
        let mut st = self.dispatch.lock();
        if self.queued {
            st.queue.retain(|q| *q != self.id);
        }
        if self.leading {
            st.leaders.retain(|(l, _)| *l != self.id);
        }
        drop(st);
        self.dispatch.changed.notify_waiters();
    }
}

impl Dispatch {
    /// A dispatch with nothing in flight.
    pub fn new(cfg: DispatchConfig) -> Arc<Self> {
        let limit = match cfg.concurrency {
            Concurrency::Adaptive => CEILING,
            Concurrency::Fixed(n) => n,
        };
        Arc::new(Dispatch {
            cfg,
            state: Mutex::new(State {
                limit: f64::from(limit),
                in_flight: 0,
                paused_until: None,
                queue: VecDeque::new(),
                next_id: 0,
                leaders: Vec::new(),
                answered: HashSet::new(),
                epoch: 0,
            }),
            changed: Notify::new(),
            hasher: std::collections::hash_map::RandomState::new(),
        })
    }

    /// Whether a `429`/`529` is answered here (adaptive) rather than by
    /// the request's own retries.
    pub fn adaptive(&self) -> bool {
        self.cfg.concurrency == Concurrency::Adaptive
    }

    /// The current limit on requests in flight.
    pub fn limit(&self) -> u32 {
        self.lock().limit as u32
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it leaves consistent counters (every
        // update is one statement), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the request whose body is `key` may go out: past any
    /// prefix hold, a slot free, no pause. Holds are told on `progress`.
    pub async fn admit(self: &Arc<Self>, key: Arc<[u8]>, progress: &Progress) -> Permit {
        let mut ticket = Ticket {
            dispatch: self,
            id: 0,
            queued: false,
            leading: false,
        };
        let hold_until = Instant::now() + self.cfg.prefix_hold;
        let mut held: Option<Instant> = None;
        {
            let mut st = self.lock();
            ticket.id = st.next_id;
            st.next_id += 1;
        }
        // The hold: behind an earlier request that will warm the cache.
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                let shared = if self.cfg.prefix_hold.is_zero() {
                    None
                } else {
                    self.worth_holding(&st, &key)
                };
                match shared {
                    Some(shared) if Instant::now() < hold_until => {
                        if held.is_none() {
                            held = Some(Instant::now());
                            progress.activity(Activity::Held {
                                shared_bytes: shared as u64,
                            });
                        }
                    }
                    _ => {
                        st.leaders.push((ticket.id, key.clone()));
                        st.queue.push_back(ticket.id);
                        ticket.leading = true;
                        ticket.queued = true;
                        break;
                    }
                }
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(hold_until) => {}
            }
        }
        if let Some(since) = held {
            progress.activity(Activity::Released {
                waited_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        // The slot: first in line, under the limit, not paused.
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let pause = {
                let mut st = self.lock();
                let now = Instant::now();
                match st.paused_until {
                    Some(t) if t > now => Some(t),
                    _ => {
                        let free =
                            (st.limit.floor() as u64).saturating_sub(u64::from(st.in_flight));
                        let place = st.queue.iter().position(|q| *q == ticket.id);
                        if place.is_some_and(|p| (p as u64) < free) {
                            st.queue.retain(|q| *q != ticket.id);
                            st.in_flight += 1;
                            ticket.queued = false;
                            ticket.leading = false;
                            return Permit {
                                dispatch: self.clone(),
                                id: ticket.id,
                                epoch: st.epoch,
                                key,
                                leading: true,
                            };
                        }
                        None
                    }
                }
            };
            match pause {
                Some(t) => tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep_until(t) => {}
                },
                None => notified.await,
            }
        }
    }

    /// The shared length with the leader `key` would gain most from, when
    /// it is worth a hold: at least [`MIN_SHARED_BYTES`] beyond what is
    /// already cached.
    fn worth_holding(&self, st: &State, key: &[u8]) -> Option<usize> {
        let best = st
            .leaders
            .iter()
            .map(|(_, l)| common_prefix(l, key))
            .max()?;
        if best < MIN_SHARED_BYTES {
            return None;
        }
        let cached = self.cached_len(st, key);
        (best >= cached + MIN_SHARED_BYTES).then_some(best)
    }

    /// How much of `key` an answered request had, in whole blocks.
    fn cached_len(&self, st: &State, key: &[u8]) -> usize {
        let mut h = self.hasher.build_hasher();
        let mut len = 0;
        for block in key.chunks_exact(BLOCK) {
            h.write(block);
            if !st.answered.contains(&h.finish()) {
                break;
            }
            len += BLOCK;
        }
        len
    }

    fn remember(&self, st: &mut State, key: &[u8]) {
        if st.answered.len() + key.len() / BLOCK > MAX_ANSWERED_BLOCKS {
            st.answered.clear();
        }
        let mut h = self.hasher.build_hasher();
        for block in key.chunks_exact(BLOCK) {
            h.write(block);
            st.answered.insert(h.finish());
        }
    }
}

impl Permit {
    /// A successful answer has started arriving: its prefix is in the
    /// provider's cache now, and those held behind it go.
    pub fn answering(&mut self) {
        if !self.leading {
            return;
        }
        self.leading = false;
        let d = &self.dispatch;
        let mut st = d.lock();
        st.leaders.retain(|(l, _)| *l != self.id);
        d.remember(&mut st, &self.key);
        drop(st);
        d.changed.notify_waiters();
    }

    /// The answer is complete: the limit grows by `1/limit` (adaptive).
    pub fn succeeded(&mut self, progress: &Progress) {
        self.answering();
        let d = &self.dispatch;
        if !d.adaptive() {
            return;
        }
        let mut st = d.lock();
        let before = st.limit.floor();
        st.limit = (st.limit + 1.0 / st.limit).min(f64::from(CEILING));
        let after = st.limit.floor();
        drop(st);
        if after > before {
            d.changed.notify_waiters();
            progress.activity(Activity::Concurrency {
                limit: after as u32,
                reason: "answers arriving".into(),
            });
        }
    }

    /// The provider answered `429`/`529`: no request goes out before
    /// `pause` has passed, and (once per round) the limit is halved.
    pub fn rate_limited(&mut self, pause: Duration, reason: &str, progress: &Progress) {
        let d = &self.dispatch;
        let mut st = d.lock();
        let until = Instant::now() + pause;
        st.paused_until = Some(st.paused_until.map_or(until, |t| t.max(until)));
        let cut = (self.epoch == st.epoch).then(|| {
            let from = st.limit.min(f64::from(st.in_flight)).floor();
            st.limit = (from / 2.0).floor().max(1.0);
            st.epoch += 1;
            st.limit as u32
        });
        drop(st);
        if let Some(limit) = cut {
            progress.activity(Activity::Concurrency {
                limit,
                reason: reason.to_string(),
            });
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let d = &self.dispatch;
        let mut st = d.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        if self.leading {
            st.leaders.retain(|(l, _)| *l != self.id);
        }
        drop(st);
        d.changed.notify_waiters();
    }
}

/// The length of the longest common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    // Compared in 64-byte chunks first: prompts share kilobytes.
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 64 <= n && a[i..i + 64] == b[i..i + 64] {
        i += 64;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests;
