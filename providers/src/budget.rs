//! The host memory all model calls together may hold: one budget of bytes
//! shared by every call of the agent loop in this process (`openai`,
//! `anthropic`), on top of each call's own caps.
//!
//! Each call is capped on its own (a 16 MiB response body, a 16 MiB
//! conversation, 1 MiB per turn), but a hostile model answering every
//! call with the most it may made the host hold that much *per call*:
//! about 64 MB each, 1 GB for 16 calls at once. So what a call holds
//! beyond those caps' small change is also drawn from one pool of
//! [`MODEL_MEMORY_BYTES`]:
//!
//! - its conversation (the messages it keeps between turns), 1 byte per
//!   byte, for the whole call;
//! - a turn's request, [`REQUEST_COPIES`] bytes per byte of the encoded
//!   body (the JSON value, its encoding, the copy each attempt sends), for
//!   the turn;
//! - a turn's response, [`RESPONSE_COPIES`] bytes per byte of the body as
//!   it streams in (the body or the event stream's pieces, and what is
//!   parsed from it), for the turn.
//!
//! A call holds one share ([`Held`]) for all of this: its conversation
//! between turns, and during a turn the conversation plus the turn's
//! request and response. The turn gives its part back when its answer is
//! parsed ([`Held::shrink_to`]).
//!
//! A turn waits for its request's share and a first allowance for its
//! response ([`RESPONSE_ALLOWANCE`]) before it sends anything: many calls
//! at once queue there rather than fail. It waits holding nothing:
//! [`Held::wait_cover`] gives back what the call holds (its conversation's
//! share) and waits for the whole amount as one. (Waiting while holding
//! part of the pool would let calls that each hold part of it wait for one
//! another for ever: ten calls each keeping a 10 MiB conversation, each
//! waiting for 34 MiB more.) Past that nothing waits: a response that
//! outgrows its allowance, or a conversation that grows, takes more only
//! if the pool has it now, else the call fails at once, naming the budget,
//! and gives back all it held. Honest answers stay within the allowance,
//! so only answers of many megabytes meet the refusal.

use std::sync::LazyLock;

use tokio::sync::{Semaphore, SemaphorePermit};

/// The pool: what every model call of this process together may hold
/// beyond its fixed overhead (docs/sandbox.md, "Tool calls").
pub const MODEL_MEMORY_BYTES: usize = 128 << 20;
/// Bytes drawn per byte of an encoded request.
pub const REQUEST_COPIES: usize = 3;
/// Bytes drawn per byte of a response body.
pub const RESPONSE_COPIES: usize = 2;
/// What a turn draws for its response up front, with its request: an
/// answer of up to half of it never needs more while it streams in.
pub const RESPONSE_ALLOWANCE: usize = 4 << 20;
/// The pool is counted in units of this many bytes (a holding is rounded
/// up to whole units).
const UNIT: usize = 64 << 10;

static POOL: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(units(MODEL_MEMORY_BYTES)));

/// Whole units covering `bytes`.
fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

/// The pool had not enough left: what was asked for, for the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the host's memory budget for model calls ({} MiB for every call in progress together) \
     is in use by other calls: {what} needed {} MiB; the call gives up rather than grow the \
     host (answers and conversations this large are what a hostile or runaway model sends)",
    MODEL_MEMORY_BYTES >> 20,
    bytes.div_ceil(1 << 20)
)]
pub struct Exhausted {
    /// What the bytes were for ("the answer so far", …).
    pub what: &'static str,
    /// The whole holding asked for, in bytes.
    pub bytes: usize,
}

/// A share of a pool that grows with what it covers and is given back
/// when dropped.
#[derive(Debug)]
pub struct Held<'p> {
    pool: &'p Semaphore,
    /// The pool's size, in units.
    total: usize,
    permit: Option<SemaphorePermit<'p>>,
    /// Units held.
    units: usize,
}

impl Held<'static> {
    /// An empty share of the process's pool.
    pub fn new() -> Self {
        Held::of(&POOL, units(MODEL_MEMORY_BYTES))
    }
}

impl Default for Held<'static> {
    fn default() -> Self {
        Held::new()
    }
}

impl<'p> Held<'p> {
    /// An empty share of `pool` (`total` permits, each a unit).
    fn of(pool: &'p Semaphore, total: usize) -> Self {
        Held {
            pool,
            total,
            permit: None,
            units: 0,
        }
    }

    /// Makes the share cover `bytes` in all (it never shrinks);
    /// [`Exhausted`] when the pool cannot give the difference now.
    pub fn cover(&mut self, bytes: usize, what: &'static str) -> Result<(), Exhausted> {
        let want = units(bytes);
        if want <= self.units {
            return Ok(());
        }
        let more = u32::try_from(want - self.units).map_err(|_| Exhausted { what, bytes })?;
        let got = self
            .pool
            .try_acquire_many(more)
            .map_err(|_| Exhausted { what, bytes })?;
        match &mut self.permit {
            Some(p) => p.merge(got),
            None => self.permit = Some(got),
        }
        self.units = want;
        Ok(())
    }

    /// Like [`Held::cover`], but waits until the pool can give it;
    /// [`Exhausted`] at once only when the whole pool could not.
    ///
    /// It never waits while holding anything: what the share holds is
    /// given back first and `bytes` is waited for as one amount (the
    /// pool's queue is first come, first served, so a waiter that holds
    /// nothing is served once those ahead of it are, and a holder never
    /// waits). See the module docs.
    pub async fn wait_cover(&mut self, bytes: usize, what: &'static str) -> Result<(), Exhausted> {
        let want = units(bytes);
        if want <= self.units {
            return Ok(());
        }
        let all = u32::try_from(want)
            .ok()
            .filter(|m| *m as usize <= self.total)
            .ok_or(Exhausted { what, bytes })?;
        // Given back before the wait, so other waiters can be served.
        self.permit = None;
        self.units = 0;
        let got = self
            .pool
            .acquire_many(all)
            .await
            .map_err(|_| Exhausted { what, bytes })?;
        self.permit = Some(got);
        self.units = want;
        Ok(())
    }

    /// Gives back what the share holds beyond `bytes` (whole units).
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = units(bytes);
        if keep >= self.units {
            return;
        }
        if let Some(p) = &mut self.permit {
            // The split-off permits go back to the pool when dropped.
            drop(p.split(self.units - keep));
        }
        if keep == 0 {
            self.permit = None;
        }
        self.units = keep;
    }

    /// Bytes held (whole units).
    pub fn bytes(&self) -> usize {
        self.units * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holding_grows_is_refused_past_the_pool_and_is_given_back() {
        let pool = Semaphore::new(10);
        let mut a = Held::of(&pool, 10);
        a.cover(1, "a").expect("one byte");
        assert_eq!(a.bytes(), UNIT);
        a.cover(UNIT, "a").expect("still one unit");
        assert_eq!(pool.available_permits(), 9);
        a.cover(10 * UNIT, "a").expect("all of it");
        let mut b = Held::of(&pool, 10);
        let e = b.cover(1, "the answer so far").expect_err("nothing left");
        assert_eq!(e.bytes, 1);
        let msg = e.to_string();
        assert!(msg.contains("the answer so far needed 1 MiB"), "{msg}");
        assert!(msg.contains("128 MiB for every call"), "{msg}");
        drop(a);
        assert_eq!(pool.available_permits(), 10);
        b.cover(3 * UNIT, "b").expect("given back");
        // More than the whole pool is refused at once, not waited for.
        assert!(b.cover(11 * UNIT, "b").is_err());
        assert_eq!(b.bytes(), 3 * UNIT);
        drop(b);
        assert_eq!(pool.available_permits(), 10);
    }

    #[tokio::test]
    async fn a_waiting_share_gets_what_another_gives_back() {
        let pool: &'static Semaphore = Box::leak(Box::new(Semaphore::new(2)));
        let mut a = Held::of(pool, 2);
        a.cover(2 * UNIT, "a").expect("all of it");
        let waiter = tokio::spawn(async move {
            let mut b = Held::of(pool, 2);
            b.wait_cover(UNIT, "b").await.map(|()| b.bytes())
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(a);
        assert_eq!(waiter.await.expect("joined"), Ok(UNIT));
        // More than the whole pool is refused at once, not waited for.
        let mut c = Held::of(pool, 2);
        assert!(c.wait_cover(3 * UNIT, "c").await.is_err());
    }

    /// Two calls that each hold most of the pool (their conversations)
    /// and then each wait for a turn's share: waiting while holding would
    /// leave both waiting for ever; each must instead be served in turn.
    #[tokio::test]
    async fn holders_that_wait_do_not_wait_for_one_another() {
        let pool: &'static Semaphore = Box::leak(Box::new(Semaphore::new(10)));
        let (a_holds, a_held) = tokio::sync::oneshot::channel();
        let (b_holds, b_held) = tokio::sync::oneshot::channel();
        let (go_tx, go) = tokio::sync::watch::channel(false);
        let call = |holds: tokio::sync::oneshot::Sender<()>,
                    mut go: tokio::sync::watch::Receiver<bool>| async move {
            let mut h = Held::of(pool, 10);
            h.cover(4 * UNIT, "the conversation")
                .expect("free at first");
            let _ = holds.send(());
            go.wait_for(|g| *g).await.expect("go");
            h.wait_cover(7 * UNIT, "the request").await?;
            let got = h.bytes();
            h.shrink_to(4 * UNIT);
            assert_eq!(h.bytes(), 4 * UNIT);
            Ok::<_, Exhausted>(got)
        };
        let a = tokio::spawn(call(a_holds, go.clone()));
        let b = tokio::spawn(call(b_holds, go));
        a_held.await.expect("a holds");
        b_held.await.expect("b holds");
        assert_eq!(pool.available_permits(), 2);
        go_tx.send(true).expect("go");
        let both = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            (a.await.expect("a joined"), b.await.expect("b joined"))
        })
        .await
        .expect("the two calls waited for one another");
        assert_eq!(both, (Ok(7 * UNIT), Ok(7 * UNIT)));
        assert_eq!(pool.available_permits(), 10);
    }

    #[test]
    fn a_share_shrinks_and_gives_back() {
        let pool = Semaphore::new(10);
        let mut a = Held::of(&pool, 10);
        a.cover(6 * UNIT, "a").expect("free");
        a.shrink_to(2 * UNIT);
        assert_eq!((a.bytes(), pool.available_permits()), (2 * UNIT, 8));
        a.shrink_to(0);
        assert_eq!((a.bytes(), pool.available_permits()), (0, 10));
        a.cover(UNIT, "a").expect("grows again");
        assert_eq!(pool.available_permits(), 9);
    }
}
