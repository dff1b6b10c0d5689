//! A worker started ahead of its run (`WorkerSource::Ahead`, what
//! `dsh workflow run` does): the run talks to it and behaves as a cold
//! one, it builds its engine before it knows its run yet obeys the run's
//! limits and data, a worker made for another policy is killed and the run
//! starts its own, and an unused one is killed when dropped. (The warm
//! pool these tests once covered is gone: it sped up no figure a user
//! feels; docs/performance.md.)

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::lib::{collect_events, limits, meta, result};
use common::{DSH, assert_event_guarantees, assert_process_gone_async, process_alive};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{
    SandboxPolicy, SpawnedWorker, StartRequest, StopReason, WorkerCommand, start,
};
use serde_json::json;

fn dsh() -> WorkerCommand {
    WorkerCommand::dsh(DSH)
}

fn request(script: &str) -> StartRequest {
    request_answering(
        script,
        json!([{ "match": {}, "text": "echoed", "times": 100 }]),
    )
}

/// A run whose agent calls the fixture `answers` answers.
fn request_answering(script: &str, answers: serde_json::Value) -> StartRequest {
    let fixture = common::fixture(answers);
    StartRequest::new("pool.ts", script)
        .with_meta(meta())
        .with_limits(limits())
        .with_worker(dsh())
        .with_provider(std::sync::Arc::new(
            ScriptedProvider::from_json_text("pool.json", &fixture.to_string()).expect("fixture"),
        ))
}

/// A worker spawned ahead for `sandbox`, given the time to build its
/// engine before its run starts (as the CLI's worker does while the CLI
/// reads its configuration).
async fn prepared_ahead(sandbox: SandboxPolicy) -> SpawnedWorker {
    let ahead = SpawnedWorker::spawn(&dsh(), sandbox).expect("spawn ahead");
    assert!(ahead.pid().is_some(), "spawned");
    tokio::time::sleep(Duration::from_millis(100)).await;
    ahead
}

/// A worker made ahead builds its engine (runtime, context, prelude)
/// while it waits for its run, before the run's memory limit is known; the
/// limit must still hold for everything the script allocates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_engine_still_obeys_the_runs_memory_limit() {
    let script =
        "const a: string[] = []; let i = 0; while (true) a.push(\"x\".repeat(4096) + i++);";
    let req = request(script).with_limits(dsh_orchestrator::Limits {
        memory_bytes: 16 << 20,
        ..limits()
    });
    let ahead = prepared_ahead(req.sandbox).await;
    let run = start(req.with_spawned_worker(ahead)).expect("start");
    let pid = run.worker_pid();
    let r = result(&run).await;
    run.dispose().await;
    assert_eq!(r.stop_reason, StopReason::Error);
    let err = r.error.as_ref().expect("an error");
    assert_eq!(err.code, dsh_orchestrator::ErrorCode::Memory, "{err:?}");
    assert!(err.message.contains("16777216"), "{}", err.message);
    assert_process_gone_async(pid).await;
}

/// `dsh` (which is also the worker) is linked position-dependent on Linux
/// (build.rs): a PIE's ~34,000 relocated pointers would make ~580 KiB of
/// every worker private (docs/performance.md, round 3). An ELF header of
/// type `ET_EXEC` (2), not `ET_DYN` (3), says the link flag took effect.
#[cfg(target_os = "linux")]
#[test]
fn the_dsh_binary_is_position_dependent() {
    let bytes = std::fs::read(DSH).expect("read the dsh binary");
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    let e_type = u16::from_le_bytes([bytes[16], bytes[17]]);
    assert_eq!(
        e_type, 2,
        "dsh is not ET_EXEC (type {e_type}); the -no-pie link argument in build.rs did not apply"
    );
}

/// A worker made ahead runs the prelude before it knows its run: each
/// run's own args, script name, agent cap and budget must still be what
/// the hooks see, run after run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_on_a_worker_made_ahead_sees_its_own_init_data() {
    use dsh_orchestrator::ArgsInput;
    let script = "let capped = null;\n\
                  try { await agent(\"a\"); await agent(\"b\"); } catch (e) { capped = e.code; }\n\
                  let where = null;\n\
                  try { null.x; } catch (e) { where = String(e.stack).includes(\"pool-\") ? \"named\" : String(e.stack); }\n\
                  return { args, total: budget.total, capped, where };";
    for (i, (cap, tokens)) in [(1u32, Some(500u64)), (5, None)].into_iter().enumerate() {
        let mut l = limits();
        l.max_total_agents = cap;
        l.budget_tokens = tokens;
        let name = format!("pool-{i}.ts");
        let ahead = prepared_ahead(SandboxPolicy::BestEffort).await;
        let pid = ahead.pid();
        let req = request(script)
            .with_limits(l)
            .with_args(ArgsInput::Json(json!({ "run": i })))
            .with_spawned_worker(ahead);
        let req = StartRequest {
            script_name: name,
            ..req
        };
        let run = start(req).expect("start");
        assert_eq!(
            Some(run.worker_pid()),
            pid,
            "run {i} took the worker made ahead"
        );
        let r = result(&run).await;
        run.dispose().await;
        let capped = if cap == 1 {
            json!("AGENT_CAP")
        } else {
            json!(null)
        };
        assert_eq!(
            r.value,
            json!({ "args": { "run": i }, "total": tokens, "capped": capped, "where": "named" }),
            "run {i}: {r:?}"
        );
    }
}

/// A worker made ahead sandboxed itself for its policy before it was
/// taken: a run on it is sandboxed exactly as a cold run of that policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_a_worker_made_ahead_is_sandboxed_as_a_cold_one() {
    let cold = start(request("return 1;")).expect("cold");
    let cold_sandbox = result(&cold).await.sandbox;
    cold.dispose().await;
    let ahead = prepared_ahead(SandboxPolicy::BestEffort).await;
    let pid = ahead.pid();
    let warm = start(request("return 1;").with_spawned_worker(ahead)).expect("warm");
    assert_eq!(
        Some(warm.worker_pid()),
        pid,
        "the run took the worker made ahead"
    );
    let warm_sandbox = result(&warm).await.sandbox;
    warm.dispose().await;
    assert_eq!(warm_sandbox, cold_sandbox);
    assert!(warm_sandbox.is_some_and(|s| s.enforced.iter().any(|r| r == "rlimit:data")));
}

// ------------------------------------------------------------ spawned ahead

/// A worker spawned ahead of its run (what the CLI does while it reads the
/// configuration and opens the journal) is the one the run talks to, and
/// the run behaves as a cold one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_uses_the_worker_spawned_ahead_for_it() {
    let req = request("log(\"ahead\");\nreturn await agent(\"x\");");
    let ahead = SpawnedWorker::spawn(&dsh(), req.sandbox).expect("spawn ahead");
    let pid = ahead.pid().expect("spawned");
    assert!(!ahead.is_taken());
    let run = start(req.with_spawned_worker(ahead.clone())).expect("start");
    assert_eq!(run.worker_pid(), pid);
    assert!(ahead.is_taken());
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!("echoed"));
    assert_event_guarantees(&collect_events(&run).await);
    assert_eq!(ahead.pid(), None, "taken: nothing left to report");
}

/// Spawned for another sandbox policy: the run starts its own worker, and
/// the one spawned ahead is killed rather than left waiting for an `Init`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_spawned_ahead_for_another_policy_is_killed_and_the_run_starts_cold() {
    let req = request("return 1;");
    assert_ne!(req.sandbox, SandboxPolicy::Off);
    let ahead = SpawnedWorker::spawn(&dsh(), SandboxPolicy::Off).expect("spawn ahead");
    let pid = ahead.pid().expect("spawned");
    let run = start(req.with_spawned_worker(ahead)).expect("start");
    assert_ne!(run.worker_pid(), pid);
    assert_eq!(result(&run).await.value, json!(1));
    assert_process_gone_async(pid).await;
}

/// Never used: dropping the last handle kills the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_spawned_ahead_and_never_used_is_killed_when_dropped() {
    let ahead = SpawnedWorker::spawn(&dsh(), SandboxPolicy::BestEffort).expect("spawn ahead");
    let pid = ahead.pid().expect("spawned");
    assert!(process_alive(pid));
    drop(ahead);
    assert_process_gone_async(pid).await;
}

/// A start that fails (a script that does not parse) kills the worker
/// spawned ahead for it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_kills_the_worker_spawned_ahead() {
    let req = request("return (;");
    let ahead = SpawnedWorker::spawn(&dsh(), req.sandbox).expect("spawn ahead");
    let pid = ahead.pid().expect("spawned");
    assert!(start(req.with_spawned_worker(ahead)).is_err());
    assert_process_gone_async(pid).await;
}
