//! What a hostile model can make the host hold (issue 33): every model
//! call's answers, requests and conversation draw from one budget
//! (docs/sandbox.md, "Host memory of model calls"), so the host's peak
//! stays near its own memory plus that budget however many calls run.
//!
//! A test binary of its own: the scripted model server lives in this test
//! process and holds every answer it sends, and a child spawned by a
//! process that large inherits its high-water mark (`ru_maxrss` counts the
//! parent's pages up to the child's exec), which would skew the peaks
//! tests/host_memory.rs reads.

// Tests fail loudly: unwrap and expect are how they say what broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod http_server;

use common::Workspace;
use serde_json::json;

fn peak_mib(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("dsh: host peak memory "))
        .unwrap_or_else(|| panic!("no peak memory line in {stderr}"));
    line["dsh: host peak memory ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {line}"))
}

/// `calls` agent calls at once against a model that answers each with
/// `mib` MiB of streamed text and then stalls; returns dsh's peak memory
/// (MiB) and the reasons the calls failed with.
async fn hostile_model_peak(calls: usize, mib: usize) -> (f64, Vec<String>) {
    use http_server::{Reply, TestServer};
    let piece = "a".repeat(1 << 20);
    let mut stream = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: identity\r\n\r\n",
    );
    for _ in 0..mib {
        let event = json!({"choices": [{"index": 0, "delta": {"content": piece}}]});
        stream.push_str(&format!("data: {event}\n\n"));
    }
    let bytes = stream.into_bytes();
    let server = TestServer::with_handler(Box::new(move |_| Reply::Stall(bytes.clone()))).await;
    let script = format!(
        r#"export const meta = {{ name: "hostile", description: "a model that sends too much" }};
        const calls = [];
        for (let i = 0; i < {calls}; i++) calls.push(agent("go " + i, {{ stallMs: 4000 }}));
        return (await Promise.all(calls)).length;"#
    );
    let ws = Workspace::new("hostile.ts", &script, None);
    ws.file(
        "dsh.toml",
        &format!(
            "[workflow]\nprovider = \"m\"\n\n[providers.m]\nkind = \"openai\"\nbase_url = \"{}\"\n\
             api_key_env = \"DSH_TEST_KEY\"\nconcurrency = 64\ntools = []\n",
            server.base_url()
        ),
    );
    let ws = ws.with_env("DSH_TEST_KEY", "sk-test");
    let out = tokio::task::spawn_blocking(move || {
        ws.run(&["--verbose", "--max-concurrent", "64", "--output", "result"])
    })
    .await
    .expect("dsh ran");
    out.assert_code(0);
    let reasons = out
        .events_of("workflow/agent-end")
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    (peak_mib(&out.stderr), reasons)
}

/// Issue 33: a hostile model made the host hold its answer for every call
/// at once (each call capped at 16 MiB of response, 16 MiB of
/// conversation, but nothing bounded their sum: 16 calls, 1 GB). Every
/// model call's share now comes from one budget of 128 MiB: a call whose
/// answer would go past it fails, naming the budget. Measured here: 410
/// MiB before; 130–227 MiB after, across 12 runs on a loaded machine (the
/// spread is the allocator's per-thread arenas keeping freed blocks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_model_cannot_make_the_host_hold_its_answers_for_every_call() {
    let (peak, reasons) = hostile_model_peak(24, 12).await;
    eprintln!("24 calls × 12 MiB: host peak {peak} MiB; reasons: {reasons:#?}");
    assert_eq!(reasons.len(), 24);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("memory budget for model calls")),
        "{reasons:#?}"
    );
    // The pool, plus the host's own memory, the copies the pool's factors
    // do not quite cover (a String's doubling) and what the allocator keeps
    // of freed blocks: 160 MiB — still far below the 410 MiB (24 × 12 MiB
    // of answers held at once) that the unbounded host reached.
    assert!(peak < 288.0, "host peak {peak} MiB");
}
