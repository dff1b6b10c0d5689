//! Cheaper runs, end to end: real scripts through the library (the `dsh`
//! binary as worker) against the loopback model server of the bench
//! (`bench/src/model_server.rs`), which prices a prompt prefix as cached
//! once a request with it was answered, and enforces a rate limit with
//! `429` + `Retry-After`.
//!
//! What is checked is behaviour — who went first, what was cached, that no
//! call failed, which way the concurrency moved — never how long it took
//! (time bounds are upper limits only; docs/performance.md has the
//! figures).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../bench/src/model_server.rs"]
mod model_server;

use std::sync::Arc;
use std::time::Duration;

use common::lib::{collect_events, request, result};
use common::{assert_event_guarantees, events_of};
use dsh_orchestrator::Limits;
use dsh_orchestrator::providers::dispatch::Concurrency;
use dsh_orchestrator::providers::openai::{OpenAiConfig, OpenAiProvider};
use dsh_orchestrator::start;
use model_server::{ModelServer, Options, tokens};
use serde_json::Value;

fn provider(server: &ModelServer, tweak: impl FnOnce(&mut OpenAiConfig)) -> Arc<OpenAiProvider> {
    let mut cfg = OpenAiConfig {
        base_url: server.base_url(),
        api_key_env: String::new(),
        backoff: Duration::from_millis(5),
        agent: dsh_orchestrator::providers::agent::LoopSettings {
            tools: Some(Vec::new()),
            ..Default::default()
        },
        ..OpenAiConfig::default()
    };
    tweak(&mut cfg);
    Arc::new(OpenAiProvider::with_key("model", &cfg, "").expect("provider"))
}

/// `n` calls at once, each prompt a 20 KB shared preamble then its own
/// line.
fn fan_out(n: usize) -> String {
    format!(
        "const preamble = \"You review one file of a large codebase; the conventions follow.\\n\" + \
         \"Every public item is documented; errors are typed; no unwrap on input.\\n\".repeat(280);\n\
         const files = Array.from({{ length: {n} }}, (_, i) => `src/f${{i}}.rs`);\n\
         const out = await parallel(files.map((f) => () => agent(preamble + \"\\nReview \" + f, {{ label: f }})));\n\
         return out.filter((x) => x !== null).length;"
    )
}

async fn run(script: &str, p: Arc<OpenAiProvider>, limits: Limits) -> (Value, Vec<Value>) {
    let run = start(request(script).with_provider(p).with_limits(limits)).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    let events = collect_events(&run).await;
    assert_event_guarantees(&events);
    (r.value, events)
}

fn activities<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events_of(events, "workflow/agent-activity")
        .into_iter()
        .filter(|e| e["activity"] == kind)
        .collect()
}

fn limits() -> Limits {
    common::lib::limits()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_sharing_a_preamble_sends_one_first_and_the_rest_hit_the_cache() {
    let server = ModelServer::start(Options {
        latency: Duration::from_millis(100),
        ..Options::default()
    })
    .await
    .expect("server");
    let (value, events) = run(&fan_out(16), provider(&server, |_| {}), limits()).await;
    assert_eq!(value, 16, "every call answered");

    let seen = server.seen();
    assert_eq!(seen.len(), 16);
    // The first request's answer went out before any other arrived.
    let first_answer = seen[0].answered.expect("answered");
    for s in &seen[1..] {
        assert!(
            s.arrived >= first_answer,
            "{:?} before {first_answer:?}",
            s.arrived
        );
    }
    // Everything the followers share with the first is served from cache.
    let preamble = seen[0].prompt.find("\nReview").expect("the call's line");
    let shareable: u64 = 15 * tokens(preamble);
    let cached: u64 = seen.iter().map(|s| s.cached).sum();
    assert!(
        cached * 100 >= shareable * 90,
        "cached {cached} of {shareable} shareable tokens"
    );
    // The events say so: fifteen holds, fifteen releases, and the cached
    // tokens in every follower's usage.
    assert_eq!(activities(&events, "held").len(), 15);
    assert_eq!(activities(&events, "released").len(), 15);
    let from_cache: u64 = events_of(&events, "workflow/agent-end")
        .iter()
        .filter_map(|e| e["usage"]["cacheRead"].as_u64())
        .sum();
    assert_eq!(from_cache, cached);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_holds_the_same_fan_out_misses_the_cache() {
    let server = ModelServer::start(Options {
        // Long enough that the sixteen requests, sent together, all
        // arrive before the first answer even on a loaded machine.
        latency: Duration::from_millis(500),
        ..Options::default()
    })
    .await
    .expect("server");
    let p = provider(&server, |c| c.prefix_hold = Duration::ZERO);
    let (value, events) = run(&fan_out(16), p, limits()).await;
    assert_eq!(value, 16);
    assert!(activities(&events, "held").is_empty());
    let seen = server.seen();
    let first_answer = seen
        .iter()
        .filter_map(|s| s.answered)
        .min()
        .expect("answered");
    let early = seen.iter().filter(|s| s.arrived < first_answer).count();
    assert!(early > 1, "sent together: {early} before the first answer");
    let preamble = seen[0].prompt.find("\nReview").expect("the call's line");
    let cached: u64 = seen.iter().map(|s| s.cached).sum();
    assert!(
        cached * 2 < 15 * tokens(preamble),
        "sent together, most miss: {cached} cached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_is_met_by_adapting_the_concurrency_without_a_failed_call() {
    // 20 requests per second; 60 calls need three windows. A window long
    // enough that even a slow, loaded machine sends more than 20 in it, so
    // the limit is certainly hit.
    let server = ModelServer::start(Options {
        latency: Duration::from_millis(10),
        rate: Some((20, Duration::from_secs(1))),
        ..Options::default()
    })
    .await
    .expect("server");
    let script = "const out = await parallel(Array.from({ length: 60 }, (_, i) => () => agent(`task ${i}`)));\n\
                  return out.filter((x) => x !== null).length;";
    // Two attempts: a failed call would show that a 429 was counted.
    let p = provider(&server, |c| c.max_attempts = 2);
    let (value, events) = run(script, p, limits()).await;
    assert_eq!(value, 60, "no call failed");
    let ends = events_of(&events, "workflow/agent-end");
    assert!(ends.iter().all(|e| e["outcome"] == "completed"));

    let seen = server.seen();
    assert_eq!(seen.iter().filter(|s| s.status == 200).count(), 60);
    assert!(
        seen.iter().any(|s| s.status == 429),
        "the limit was hit (else this test tests nothing)"
    );
    // The limit went down on the 429s, and back up with the answers.
    let limits: Vec<u64> = activities(&events, "concurrency")
        .iter()
        .map(|e| e["limit"].as_u64().expect("limit"))
        .collect();
    let low = limits
        .iter()
        .position(|l| *l < 16)
        .expect("a cut below the 16 calls in flight");
    assert!(
        limits[low + 1..].iter().any(|l| *l > limits[low]),
        "and a rise after it: {limits:?}"
    );
    let cut = activities(&events, "concurrency")[low]["reason"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(cut.contains("429"), "{cut}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_concurrency_is_never_exceeded_and_counts_429_as_attempts() {
    let server = ModelServer::start(Options {
        latency: Duration::from_millis(30),
        rate: Some((4, Duration::from_secs(60))),
        ..Options::default()
    })
    .await
    .expect("server");
    let script = "const out = await parallel(Array.from({ length: 8 }, (_, i) => () => agent(`task ${i}`)));\n\
                  return out.filter((x) => x !== null).length;";
    let p = provider(&server, |c| {
        c.concurrency = Concurrency::Fixed(3);
        c.max_attempts = 1;
    });
    let (value, events) = run(script, p, limits()).await;
    // The minute-long window refuses the rest, and with one attempt a
    // refused call fails at once: at a fixed concurrency a 429 is an
    // attempt like any other.
    assert!(server.max_in_flight() <= 3, "{}", server.max_in_flight());
    assert_eq!(value, 4, "four answered in the window");
    assert!(activities(&events, "concurrency").is_empty());
    let failed: Vec<&Value> = events_of(&events, "workflow/agent-end")
        .into_iter()
        .filter(|e| e["outcome"] == "failed")
        .collect();
    assert_eq!(failed.len(), 4);
    assert!(
        failed
            .iter()
            .all(|e| e["reason"].as_str().unwrap_or("").contains("HTTP 429")),
        "{failed:?}"
    );
}
