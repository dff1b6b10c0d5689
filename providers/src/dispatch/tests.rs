//! The dispatch's rules as behaviour: who goes first, who waits for whom,
//! how the limit moves. Time is tokio's paused clock, so a hold that ends
//! by its deadline ends exactly there, on any machine.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;

/// A body of `shared` bytes of preamble then `tail`.
fn body(shared: usize, tail: &str) -> Arc<[u8]> {
    let mut v = vec![b'p'; shared];
    v.extend_from_slice(tail.as_bytes());
    v.into()
}

/// Polls `f` once: `Some` when it is ready.
fn poll_now<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    match Pin::new(f).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// Lets every woken task run (the paused clock does not move).
async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

fn adaptive() -> Arc<Dispatch> {
    Dispatch::new(DispatchConfig::default())
}

fn kinds(p: &Progress) -> Vec<String> {
    p.take_activities()
        .into_iter()
        .map(|a| match a {
            Activity::Held { shared_bytes } => format!("held {shared_bytes}"),
            Activity::Released { .. } => "released".into(),
            Activity::Concurrency { limit, .. } => format!("concurrency {limit}"),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn calls_sharing_a_long_prefix_wait_for_the_first_answer_to_start() {
    let d = adaptive();
    let p = Progress::new();
    let mut leader = d.admit(body(20_000, "call 0"), &p).await;
    let followers: Vec<_> = (1..16)
        .map(|i| {
            let d = d.clone();
            let p = Progress::new();
            tokio::spawn(async move {
                let permit = d.admit(body(20_000, &format!("call {i}")), &p).await;
                (permit, p)
            })
        })
        .collect();
    settle().await;
    assert!(
        followers.iter().all(|f| !f.is_finished()),
        "nobody goes before the first answer starts"
    );
    leader.answering();
    for f in followers {
        let (permit, p) = f.await.expect("joined");
        let told = kinds(&p);
        assert!(told.len() == 2 && told[1] == "released", "{told:?}");
        assert!(told[0].starts_with("held 2000"), "{told:?}");
        drop(permit);
    }
}

#[tokio::test(start_paused = true)]
async fn a_short_or_already_cached_prefix_is_not_held() {
    let d = adaptive();
    let p = Progress::new();
    let _leader = d.admit(body(MIN_SHARED_BYTES - 1, "a"), &p).await;
    let mut short = Box::pin(d.admit(body(MIN_SHARED_BYTES - 1, "b"), &p));
    assert!(poll_now(&mut short).is_some(), "under the minimum: no hold");

    // Once one answer with the preamble started, the preamble is cached:
    // a request still waiting for its own answer is no reason to hold.
    let d = adaptive();
    let mut first = d.admit(body(20_000, "a"), &p).await;
    first.answering();
    let _second = d.admit(body(20_000, "b"), &p).await;
    let mut third = Box::pin(d.admit(body(20_000, "c"), &p));
    assert!(poll_now(&mut third).is_some(), "cached already: no hold");
    assert!(kinds(&p).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_fails_hands_the_lead_to_the_next() {
    let d = adaptive();
    let p = Progress::new();
    let leader = d.admit(body(10_000, "0"), &p).await;
    let mut a = Box::pin(d.admit(body(10_000, "1"), &p));
    let mut b = Box::pin(d.admit(body(10_000, "2"), &p));
    assert!(poll_now(&mut a).is_none() && poll_now(&mut b).is_none());
    drop(leader); // failed: no answer started
    let mut a = poll_now(&mut a).expect("the first held one leads now");
    assert!(
        poll_now(&mut b).is_none(),
        "the other waits for the new leader"
    );
    a.answering();
    assert!(poll_now(&mut b).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_hold_ends_at_prefix_hold() {
    let d = Dispatch::new(DispatchConfig {
        prefix_hold: Duration::from_millis(250),
        ..DispatchConfig::default()
    });
    let p = Progress::new();
    let _leader = d.admit(body(10_000, "0"), &p).await;
    let start = Instant::now();
    let _follower = d.admit(body(10_000, "1"), &p).await;
    assert_eq!(start.elapsed(), Duration::from_millis(250));

    let off = Dispatch::new(DispatchConfig {
        prefix_hold: Duration::ZERO,
        ..DispatchConfig::default()
    });
    let _leader = off.admit(body(10_000, "0"), &p).await;
    let mut follower = Box::pin(off.admit(body(10_000, "1"), &p));
    assert!(poll_now(&mut follower).is_some(), "prefix_hold 0: no holds");
}

#[tokio::test(start_paused = true)]
async fn a_fixed_concurrency_admits_in_order() {
    let d = Dispatch::new(DispatchConfig {
        concurrency: Concurrency::Fixed(2),
        ..DispatchConfig::default()
    });
    let p = Progress::new();
    let one = d.admit(body(10, "1"), &p).await;
    let _two = d.admit(body(10, "2"), &p).await;
    let mut three = Box::pin(d.admit(body(10, "3"), &p));
    let mut four = Box::pin(d.admit(body(10, "4"), &p));
    assert!(poll_now(&mut three).is_none() && poll_now(&mut four).is_none());
    drop(one);
    assert!(
        poll_now(&mut four).is_none(),
        "one slot: the first in line gets it"
    );
    let three = poll_now(&mut three).expect("first in line");
    drop(three);
    assert!(poll_now(&mut four).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_admission_leaves_nothing_behind() {
    let d = Dispatch::new(DispatchConfig {
        concurrency: Concurrency::Fixed(1),
        ..DispatchConfig::default()
    });
    let p = Progress::new();
    let one = d.admit(body(10_000, "1"), &p).await;
    let mut gone = Box::pin(d.admit(body(10, "2"), &p));
    assert!(poll_now(&mut gone).is_none());
    drop(gone);
    drop(one);
    let mut next = Box::pin(d.admit(body(10_000, "3"), &p));
    let _next = poll_now(&mut next).expect("no dead ticket in line, no dead leader to wait for");
    let st = d.lock();
    assert_eq!((st.in_flight, st.queue.len()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn rate_limits_halve_the_limit_once_per_round_pause_and_recover() {
    let d = adaptive();
    let p = Progress::new();
    let mut permits = Vec::new();
    for i in 0..16 {
        permits.push(d.admit(body(10, &i.to_string()), &p).await);
    }
    // Every request in flight is answered 429: one cut, not sixteen.
    for permit in &mut permits {
        permit.rate_limited(Duration::from_secs(2), "HTTP 429", &p);
    }
    assert_eq!(d.limit(), 8);
    assert_eq!(kinds(&p), ["concurrency 8"]);
    permits.clear();

    // Nothing goes out during the pause.
    let start = Instant::now();
    let mut again = d.admit(body(10, "again"), &p).await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // A 429 of a request sent after the cut cuts again.
    again.rate_limited(Duration::ZERO, "HTTP 429", &p);
    assert_eq!(d.limit(), 1);
    drop(again);

    // Answers raise it by one per limit's worth of answers.
    for i in 0..20 {
        let mut permit = d.admit(body(10, &format!("ok {i}")), &p).await;
        permit.succeeded(&p);
    }
    assert!(d.limit() >= 5, "back up: {}", d.limit());
    let ups = kinds(&p);
    assert!(ups.starts_with(&["concurrency 1".into(), "concurrency 2".into()]));
}

#[tokio::test(start_paused = true)]
async fn a_fixed_concurrency_does_not_adapt() {
    let d = Dispatch::new(DispatchConfig {
        concurrency: Concurrency::Fixed(4),
        ..DispatchConfig::default()
    });
    assert!(!d.adaptive());
    let p = Progress::new();
    let mut permit = d.admit(body(10, "x"), &p).await;
    permit.succeeded(&p);
    assert_eq!(d.limit(), 4);
    assert!(kinds(&p).is_empty());
}

#[test]
fn concurrency_reads_adaptive_or_a_number() {
    #[derive(Deserialize)]
    struct T {
        c: Concurrency,
    }
    let read = |s: &str| {
        toml::from_str::<T>(s)
            .map(|t| t.c)
            .map_err(|e| e.to_string())
    };
    assert_eq!(read("c = \"adaptive\""), Ok(Concurrency::Adaptive));
    assert_eq!(read("c = 8"), Ok(Concurrency::Fixed(8)));
    for (bad, says) in [
        ("c = 0", "from 1 to 1024"),
        ("c = \"fast\"", "\"fast\" is not a concurrency"),
        ("c = 2.5", "\"adaptive\" or a number"),
    ] {
        let e = read(bad).expect_err(bad);
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn common_prefixes() {
    assert_eq!(common_prefix(b"", b"abc"), 0);
    assert_eq!(common_prefix(b"abc", b"abd"), 2);
    let a = vec![7u8; 1000];
    let mut b = a.clone();
    b[700] = 8;
    assert_eq!(common_prefix(&a, &b), 700);
    assert_eq!(common_prefix(&a, &a), 1000);
}
