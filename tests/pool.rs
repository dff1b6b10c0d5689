//! The warm worker pool: a pool worker serves exactly one run and then
//! exits, the pool refills, a run on a pool worker behaves like a cold one
//! (the whole library suite also runs with `DSH_TEST_WARM_POOL=1` in CI),
//! a dead idle worker is skipped, and dropping the pool leaves no process.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::lib::{collect_events, limits, meta, result};
use common::{DSH, assert_event_guarantees, assert_process_gone_async, events_of, process_alive};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{
    EventKind, SandboxPolicy, SpawnedWorker, StartRequest, StopReason, WorkerCommand, WorkerPool,
    start,
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

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + common::WAIT_BOUND;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_worker_serves_exactly_one_run_and_the_pool_refills() {
    let pool = WorkerPool::prefilled(dsh(), 2).expect("pool");
    let before = pool.idle_pids();
    assert_eq!(before.len(), 2);
    let run = start(request("return await agent(\"x\");").with_pool(pool.clone())).expect("start");
    let pid = run.worker_pid();
    assert!(
        before.contains(&pid),
        "the run took a pool worker: {pid} not in {before:?}"
    );
    let r = result(&run).await;
    assert_eq!(r.value, json!("echoed"));
    run.dispose().await;
    assert_process_gone_async(pid).await;
    wait_until("the pool is full again", || pool.idle() == 2).await;
    let after = pool.idle_pids();
    assert!(!after.contains(&pid), "a used worker came back: {after:?}");
}

/// The replacement is held back only for the run's first steps (a few
/// milliseconds after `Ready`), not for the run's whole life: a run that
/// waits on its agent for good still gets its pool refilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_refills_while_the_run_that_took_a_worker_still_runs() {
    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    let req = request_answering(
        "return await agent(\"held\");",
        json!([{ "match": {}, "hang": true }]),
    )
    .with_pool(pool.clone());
    let run = start(req).expect("start");
    let taken = run.worker_pid();
    let mut events = run.subscribe();
    // The run is past its start: its agent call is out and never answered.
    loop {
        let ev = tokio::time::timeout(common::WAIT_BOUND, events.next())
            .await
            .expect("the agent call starts")
            .expect("events");
        if matches!(ev.kind, EventKind::AgentStart { .. }) {
            break;
        }
    }
    wait_until("the pool is full again", || pool.idle() == 1).await;
    assert!(process_alive(taken), "the run's worker still runs");
    assert!(!pool.idle_pids().contains(&taken));
    run.cancel("done");
    let r = result(&run).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    run.dispose().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_a_pool_worker_behaves_like_a_cold_one() {
    let script = "phase(\"p\");\nlog(\"hello\");\nconst r = await parallel([() => agent(\"a\"), () => agent(\"b\")]);\nreturn r;";
    let cold = start(request(script)).expect("cold");
    let cold_events = collect_events(&cold).await;
    let cold_result = result(&cold).await;
    cold.dispose().await;

    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    let warm = start(request(script).with_pool(pool.clone())).expect("warm");
    let warm_events = collect_events(&warm).await;
    let warm_result = result(&warm).await;
    warm.dispose().await;

    assert_event_guarantees(&warm_events);
    assert_eq!(warm_result.value, cold_result.value);
    assert_eq!(warm_result.stop_reason, StopReason::Completed);
    assert_eq!(warm_result.sandbox, cold_result.sandbox, "the same sandbox");
    // The same events, field for field, but for what differs by nature:
    // the run id, the clock and the provider's child ids.
    let comparable = |evs: &[serde_json::Value]| -> Vec<serde_json::Value> {
        evs.iter()
            .map(|e| {
                let mut e = e.clone();
                if let Some(m) = e.as_object_mut() {
                    for k in ["runId", "t", "childId"] {
                        m.remove(k);
                    }
                }
                e
            })
            .collect()
    };
    assert_eq!(comparable(&warm_events), comparable(&cold_events));
    assert_eq!(
        events_of(&warm_events, "workflow/log")[0]["message"],
        "hello"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_before_go_on_a_pool_worker_runs_nothing() {
    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    let run = start(request("log(\"ran\");\nreturn 1;").with_pool(pool)).expect("start");
    run.cancel("changed my mind");
    let events = collect_events(&run).await;
    let r = result(&run).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert!(events_of(&events, "workflow/log").is_empty(), "{events:#?}");
    assert_process_gone_async(run.worker_pid()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_worker_command_starts_cold() {
    let pool = WorkerPool::prefilled(WorkerCommand::dsh(DSH), 1).expect("pool");
    let pooled = pool.idle_pids();
    let other = WorkerCommand {
        program: DSH.into(),
        args: vec!["__worker".into(), "--landlock-abi".into(), "7".into()],
    };
    let run = start(
        request("return 1;")
            .with_worker(other)
            .with_pool(pool.clone()),
    )
    .expect("start");
    assert!(!pooled.contains(&run.worker_pid()));
    assert_eq!(result(&run).await.value, json!(1));
    assert_eq!(pool.idle_pids(), pooled, "the pool was not touched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_idle_worker_is_skipped() {
    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    let dead = pool.idle_pids()[0];
    // SAFETY: signalling our own idle worker.
    unsafe { libc::kill(dead as libc::pid_t, libc::SIGKILL) };
    wait_until("the idle worker is dead", || !process_alive(dead)).await;
    let run = start(request("return 2;").with_pool(pool)).expect("start");
    assert_ne!(run.worker_pid(), dead);
    assert_eq!(result(&run).await.value, json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_pool_leaves_no_process() {
    let pool = WorkerPool::new(dsh(), 3);
    wait_until("the pool filled", || pool.idle() == 3).await;
    let pids = pool.idle_pids();
    drop(pool);
    for pid in pids {
        let deadline = Instant::now() + common::WAIT_BOUND;
        while process_alive(pid) {
            assert!(
                Instant::now() < deadline,
                "idle worker {pid} survived its pool"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A pool worker builds its engine (runtime, context, prelude) while it
/// waits for its run, before the run's memory limit is known; the limit
/// must still hold for everything the script allocates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_engine_still_obeys_the_runs_memory_limit() {
    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    let script =
        "const a: string[] = []; let i = 0; while (true) a.push(\"x\".repeat(4096) + i++);";
    let run = start(
        request(script)
            .with_limits(dsh_orchestrator::Limits {
                memory_bytes: 16 << 20,
                ..limits()
            })
            .with_pool(pool.clone()),
    )
    .expect("start");
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

/// The replacement for a taken worker is asked for when the run's worker
/// says `Ready`, or when the run ends before that: a worker killed at
/// once (before or after its `Ready`, whichever the machine makes it)
/// still leaves the pool full again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_worker_dies_at_once_still_refills_the_pool() {
    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    // A script that cannot finish before the kill, however the machine
    // schedules this test: it waits far longer than any test runs.
    let script = "await new Promise((r) => setTimeout(r, 3600000));\nreturn 1;";
    let run = start(request(script).with_pool(pool.clone())).expect("start");
    let pid = run.worker_pid();
    // SAFETY: signalling the worker of our own run.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let r = result(&run).await;
    assert_eq!(r.stop_reason, StopReason::Error, "{r:?}");
    run.dispose().await;
    assert_process_gone_async(pid).await;
    wait_until("the pool is full again", || pool.idle() == 1).await;
    assert!(!pool.idle_pids().contains(&pid));
}

/// A pool worker runs the prelude before it knows its run: each run's own
/// args, script name, agent cap and budget must still be what the hooks
/// see, run after run on the same pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_on_the_pool_sees_its_own_init_data() {
    use dsh_orchestrator::ArgsInput;
    let pool = WorkerPool::prefilled(dsh(), 2).expect("pool");
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
        let before = pool.idle_pids();
        let req = request(script)
            .with_limits(l)
            .with_args(ArgsInput::Json(json!({ "run": i })))
            .with_pool(pool.clone());
        let req = StartRequest {
            script_name: name,
            ..req
        };
        let run = start(req).expect("start");
        assert!(
            before.contains(&run.worker_pid()),
            "run {i} took a pool worker"
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
        wait_until("the pool is full again", || pool.idle() == 2).await;
    }
}

/// A pool worker sandboxed itself for the pool's policy before it was
/// taken: a run with another policy must start cold and get its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_another_sandbox_policy_starts_cold() {
    use dsh_orchestrator::SandboxPolicy;
    let pool = WorkerPool::prefilled(dsh(), 1).expect("pool");
    assert_eq!(pool.sandbox(), SandboxPolicy::BestEffort);
    let idle = pool.idle_pids();
    let run = start(
        request("return 1;")
            .with_sandbox(SandboxPolicy::Off)
            .with_pool(pool.clone()),
    )
    .expect("start");
    assert!(
        !idle.contains(&run.worker_pid()),
        "an unsandboxed run took a sandboxed pool worker"
    );
    let r = result(&run).await;
    run.dispose().await;
    assert_eq!(r.value, json!(1));
    let sandbox = r.sandbox.expect("a report");
    assert_eq!(
        sandbox.level,
        dsh_orchestrator::SandboxLevel::None,
        "{sandbox:?}"
    );
    assert_eq!(pool.idle_pids(), idle, "the pool's worker is still there");

    // The pool's own policy takes the warm worker, sandboxed as a cold
    // best-effort run is.
    let cold = start(request("return 1;")).expect("cold");
    let cold_sandbox = result(&cold).await.sandbox;
    cold.dispose().await;
    let warm = start(request("return 1;").with_pool(pool.clone())).expect("warm");
    assert!(
        idle.contains(&warm.worker_pid()),
        "the run took the pool worker"
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
