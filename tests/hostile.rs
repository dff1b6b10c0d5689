//! Hostile scripts: each must end as a clean result (one of the contract's
//! codes, the §8 event guarantees intact), with the host unharmed and the
//! worker process gone afterwards. Tampering with built-ins is covered in
//! tests/tamper.rs, the sandbox's kernel rules in worker/tests/sandbox.rs.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::lib::{collect_events, limits, request, result};
use common::{Workspace, assert_event_guarantees, assert_process_gone_async, events_of, fixture};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{ErrorCode, Limits, StopReason, start};
use rstest::rstest;
use serde_json::{Value, json};

fn echo_provider() -> Arc<ScriptedProvider> {
    let text = fixture(json!([
        { "match": { "label": "hang" }, "hang": true },
        { "match": {}, "text": "echoed", "times": 1000 },
    ]))
    .to_string();
    Arc::new(ScriptedProvider::from_json_text("hostile.fixture.json", &text).expect("fixture"))
}

/// Runs `script` through the library with `limits`; checks the events and
/// that the worker is gone; returns the result and the events.
async fn run_hostile(script: &str, limits: Limits) -> (dsh_orchestrator::RunResult, Vec<Value>) {
    let req = request(script)
        .with_limits(limits)
        .with_provider(echo_provider());
    let run = start(req).expect("start");
    let events = collect_events(&run).await;
    let res = result(&run).await;
    assert_event_guarantees(&events);
    assert_process_gone_async(run.worker_pid()).await;
    run.dispose().await;
    (res, events)
}

#[rstest]
#[case::memory_bomb_strings(
    "const a: string[] = []; let i = 0; while (true) a.push(\"x\".repeat(4096) + i++);",
    Limits { memory_bytes: 16 << 20, ..limits() },
    StopReason::Error, ErrorCode::Memory, &["16777216"][..]
)]
#[case::memory_bomb_buffers(
    "const keep: ArrayBuffer[] = []; for (;;) keep.push(new ArrayBuffer(1 << 20));",
    Limits { memory_bytes: 16 << 20, ..limits() },
    StopReason::Error, ErrorCode::Memory, &[][..]
)]
#[case::memory_bomb_after_an_await(
    "await agent(\"warm up\");\nconst keep: number[][] = []; for (;;) keep.push(new Array(100000).fill(1));",
    Limits { memory_bytes: 32 << 20, ..limits() },
    StopReason::Error, ErrorCode::Memory, &[][..]
)]
#[case::unbounded_recursion(
    "function down(n: number): number { return down(n + 1) + 1; }\nreturn down(0);",
    limits(),
    StopReason::Error, ErrorCode::ScriptError, &["stack"][..]
)]
#[case::sync_spin_at_start(
    "while (true) {}",
    Limits { sync_timeout: Duration::from_millis(300), ..limits() },
    StopReason::Error, ErrorCode::Timeout, &["syncTimeoutMs", "300"][..]
)]
#[case::spin_after_an_await_with_a_compute_budget(
    "await agent(\"first\");\nfor (;;) {}",
    Limits { compute: Some(Duration::from_millis(300)), ..limits() },
    StopReason::Error, ErrorCode::Timeout, &["computeMs", "300"][..]
)]
#[case::return_value_of_100_mb(
    "return \"x\".repeat(100 * 1024 * 1024);",
    limits(),
    StopReason::Error, ErrorCode::Memory, &["value"][..]
)]
#[case::return_value_over_the_frame_limit(
    "return \"x\".repeat(20 * 1024 * 1024);",
    Limits { memory_bytes: 512 << 20, ..limits() },
    StopReason::Error, ErrorCode::ResultUnserializable, &["frame limit"][..]
)]
#[case::a_throwing_thenable_as_the_result(
    "return { then() { throw new Error(\"gotcha\"); } };",
    limits(),
    StopReason::Error, ErrorCode::ScriptError, &["gotcha"][..]
)]
// A request over the frame limit is refused in the script, never sent:
// a plain prompt, and one whose JSON text is six times its length.
#[case::a_prompt_over_the_request_limit(
    "await agent(\"x\".repeat(17 * 1024 * 1024));",
    limits(),
    StopReason::Error, ErrorCode::InvalidArgument, &["bytes for one request", "send less"][..]
)]
#[case::a_prompt_whose_json_is_over_the_request_limit(
    "await agent(\"\\u0001\".repeat(3 * 1024 * 1024));",
    limits(),
    StopReason::Error, ErrorCode::InvalidArgument, &["bytes for one request", "send less"][..]
)]
#[case::all_children_hang_under_a_wall_timeout(
    "await parallel([() => agent(\"a\", { label: \"hang\" }), () => agent(\"b\", { label: \"hang\" }), () => agent(\"c\", { label: \"hang\" })]);",
    Limits { wall_timeout: Some(Duration::from_millis(300)), ..limits() },
    StopReason::Cancelled, ErrorCode::Timeout, &["300"][..]
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_scripts_end_cleanly(
    #[case] script: &str,
    #[case] limits: Limits,
    #[case] stop: StopReason,
    #[case] code: ErrorCode,
    #[case] mentions: &[&str],
) {
    let grace = limits.dispose_grace;
    let started = Instant::now();
    let (res, events) = run_hostile(script, limits).await;
    assert_eq!(res.stop_reason, stop, "{res:?}");
    let err = res.error.clone().expect("an error");
    assert_eq!(err.code, code, "{err:?}");
    for m in mentions {
        assert!(
            err.message.contains(m),
            "{code} should mention {m:?}: {err:?}"
        );
    }
    assert_eq!(res.value, Value::Null);
    // Every announced child was settled; hung ones as cancelled.
    for end in events_of(&events, "workflow/agent-end") {
        if end["label"] == "hang" {
            assert_eq!(end["outcome"], "cancelled", "{end}");
        }
    }
    if code == ErrorCode::Timeout && stop == StopReason::Cancelled {
        // Settled by the wall budget plus at most the grace (generous slack
        // for a loaded machine).
        let bound = Duration::from_millis(300) + grace + Duration::from_secs(20);
        assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thenable_result_is_adopted_like_any_async_return() {
    let (res, _) = run_hostile(
        "return { then(resolve: (v: unknown) => void) { resolve({ adopted: true }); } };",
        limits(),
    )
    .await;
    assert_eq!(res.stop_reason, StopReason::Completed, "{res:?}");
    assert_eq!(res.value, json!({ "adopted": true }));
}

/// Peak resident memory of a child process, read when reaping it.
fn wait_peak_rss_bytes(pid: u32) -> (i32, u64) {
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: reaping our own child; wait4 fills `status` and `ru`.
    let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, ru.as_mut_ptr()) };
    assert_eq!(rc, pid as libc::pid_t, "wait4");
    // SAFETY: initialized by the successful call above.
    let kb = unsafe { ru.assume_init() }.ru_maxrss;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, u64::try_from(kb).unwrap_or(0) * 1024)
}

#[test]
fn a_log_flood_leaves_one_marker_and_the_host_memory_bounded() {
    // 200 MB of log text against the default 1 MiB budget.
    let script = "const line = \"y\".repeat(1000);\nfor (let i = 0; i < 200_000; i++) log(line);\nreturn \"survived\";\n";
    let ws = Workspace::new("wf.ts", script, None);
    let events_file = ws.events_file.clone();
    let mut child = ws
        .command(&["--output", "result", "--events", "jsonl"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn dsh");
    let (code, peak) = wait_peak_rss_bytes(child.id());
    // Reaped by wait4 already; keep std from waiting again.
    let _ = child.try_wait();
    assert_eq!(code, 0, "dsh exit code");
    let events = common::read_events(&events_file, true);
    assert_event_guarantees(&events);
    let logs = events_of(&events, "workflow/log");
    let markers: Vec<_> = logs
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("[log truncated"))
        })
        .collect();
    assert_eq!(markers.len(), 1, "exactly one marker line");
    assert_eq!(
        logs.last().map(|e| e["message"].clone()),
        Some(markers[0]["message"].clone()),
        "nothing after the marker"
    );
    let end = events.last().expect("end event");
    let dropped = end["logBytesDropped"].as_u64().expect("logBytesDropped");
    assert!(dropped > 190_000_000, "dropped {dropped}");
    // The host read none of the flood: far below the 200 MB logged.
    assert!(
        peak < 96 << 20,
        "dsh peaked at {} MiB while the script logged 200 MB",
        peak >> 20
    );
}

/// A lone surrogate (half of an emoji cut by `slice`) cannot be UTF-8:
/// wherever a script's string leaves the engine it becomes U+FFFD, as
/// JavaScript's own UTF-8 writers make it, and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_surrogates_become_replacement_characters_and_the_run_goes_on() {
    let (res, events) = run_hostile(
        "const half = \"😀\".slice(0, 1);\n\
         log(`log ${half}`);\n\
         phase(`phase ${half}`);\n\
         const a = await agent(`prompt ${half} end`);\n\
         const b = await agent(\"p\", { label: `label ${half}`, model: `m${half}` });\n\
         return { a, b, half, pair: \"😀\", key: { [half]: 1 } };",
        limits(),
    )
    .await;
    assert_eq!(res.stop_reason, StopReason::Completed, "{res:?}");
    assert_eq!(
        res.value,
        json!({ "a": "echoed", "b": "echoed", "half": "\u{FFFD}", "pair": "😀", "key": { "\u{FFFD}": 1 } })
    );
    let field = |kind: &str, key: &str| -> Vec<String> {
        events_of(&events, kind)
            .iter()
            .filter_map(|e| e[key].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(field("workflow/log", "message"), ["log \u{FFFD}"]);
    assert!(
        field("workflow/phase", "title").contains(&"phase \u{FFFD}".to_owned()),
        "{events:?}"
    );
    assert_eq!(
        field("workflow/agent-start", "label"),
        ["prompt \u{FFFD} end", "label \u{FFFD}"]
    );
}
