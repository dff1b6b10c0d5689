//! End-to-end tests of the library seam (contract §13): `start()`,
//! `WorkflowRun` and the subagent traits, with the `dsh` binary as the
//! worker. Every run's events are checked against the §8 guarantees and
//! every worker process must be gone afterwards.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::lib::{GRACE, collect_events, limits, meta, request, result, wait_for};
use common::{assert_event_guarantees, assert_process_gone_async, events_of, outcomes};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{
    AgentRequest, ChildOutcome, ChildResult, ErrorCode, Limits, ResultFault, RunResult,
    SandboxLevel, SandboxPolicy, StartError, StartRefused, StartRequest, StopReason, Subagent,
    SubagentProvider, Usage, WorkerCommand, WorkflowRun, start,
};
use rstest::rstest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

// ------------------------------------------------------------------ test providers

/// What a test child does when asked for its result.
#[derive(Clone)]
enum Behaviour {
    /// Answer this text at once, reporting `usage`.
    Answer(String, Option<Usage>),
    /// Never answer until cancelled, except calls labelled `quick`, which
    /// answer "quick answer" at once.
    Hang,
}

/// A provider that records every request and every child cancel/dispose.
struct TestProvider {
    behaviour: Behaviour,
    requests: Arc<Mutex<Vec<AgentRequest>>>,
    log: Arc<Mutex<Vec<String>>>,
    /// Fires when any child of this provider is cancelled.
    child_cancelled: CancellationToken,
    next: AtomicU64,
}

impl TestProvider {
    fn new(behaviour: Behaviour) -> Arc<Self> {
        Arc::new(TestProvider {
            behaviour,
            requests: Arc::default(),
            log: Arc::default(),
            child_cancelled: CancellationToken::new(),
            next: AtomicU64::new(1),
        })
    }

    fn requests(&self) -> Vec<AgentRequest> {
        self.requests.lock().unwrap().clone()
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[async_trait]
impl SubagentProvider for TestProvider {
    async fn start(
        &self,
        request: AgentRequest,
        _cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let behaviour = match &self.behaviour {
            Behaviour::Hang if request.label == "quick" => {
                Behaviour::Answer("quick answer".into(), None)
            }
            b => b.clone(),
        };
        self.requests.lock().unwrap().push(request);
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(TestChild {
            id: format!("test-child-{n}"),
            behaviour,
            cancel: CancellationToken::new(),
            provider_cancelled: self.child_cancelled.clone(),
            log: self.log.clone(),
        }))
    }
}

struct TestChild {
    id: String,
    behaviour: Behaviour,
    cancel: CancellationToken,
    provider_cancelled: CancellationToken,
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Subagent for TestChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        match &self.behaviour {
            Behaviour::Answer(text, usage) => Ok(ChildOutcome {
                result: ChildResult::Text(text.clone()),
                usage: *usage,
            }),
            Behaviour::Hang => {
                self.cancel.cancelled().await;
                Ok(ChildOutcome {
                    result: ChildResult::Cancelled,
                    usage: None,
                })
            }
        }
    }

    fn cancel(&self) {
        self.log.lock().unwrap().push(format!("cancel {}", self.id));
        self.cancel.cancel();
        self.provider_cancelled.cancel();
    }

    async fn dispose(&self) {
        self.log
            .lock()
            .unwrap()
            .push(format!("dispose {}", self.id));
        self.cancel.cancel();
    }
}

fn with_provider(script: &str, provider: Arc<TestProvider>) -> StartRequest {
    request(script).with_provider(provider)
}

/// After every run: the events keep §8 and the worker is gone.
async fn check_run_end(run: &WorkflowRun) -> Vec<Value> {
    let events = collect_events(run).await;
    assert_event_guarantees(&events);
    assert_eq!(events[0]["runId"], run.id(), "events carry the run id");
    assert_process_gone_async(run.worker_pid()).await;
    events
}

#[track_caller]
fn assert_stopped(r: &RunResult, stop: StopReason, code: ErrorCode) -> String {
    assert_eq!(r.stop_reason, stop, "{r:?}");
    assert_eq!(r.value, Value::Null, "{r:?}");
    let e = r
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("an error: {r:?}"));
    assert_eq!(e.code, code, "{r:?}");
    e.message.clone()
}

/// A script that parks forever after announcing itself with a log line.
const PARKED: &str = "log(\"parked\");\nawait new Promise(() => {});\n";

/// A script that starts a call that hangs (seq 1), then spins. The spin
/// begins in the very slice that delivers the answer of the `quick` call
/// (seq 2); the host sends that answer before any later Cancel on the same
/// ordered socket, so once the `quick` agent-end is observed, a cancel is
/// guaranteed to find the script wedged in `while (true) {}`.
const WEDGED_AFTER_CALL: &str = "const p = agent(\"stuck\", { label: \"stuck\" });\np.catch(() => {});\nawait agent(\"quick\", { label: \"quick\" });\nwhile (true) {}\n";

async fn wait_for_log(run: &WorkflowRun, message: &str) {
    let mut events = run.subscribe();
    wait_for(&mut events, &format!("log {message:?}"), |e| {
        e["type"] == "workflow/log" && e["message"] == message
    })
    .await;
}

/// Waits until the [`WEDGED_AFTER_CALL`] script is spinning: its `quick`
/// call ended. Returns the hanging call's agent-start.
async fn wait_until_wedged(run: &WorkflowRun) -> Value {
    let mut events = run.subscribe();
    let started = wait_for(&mut events, "the stuck agent-start", |e| {
        e["type"] == "workflow/agent-start" && e["label"] == "stuck"
    })
    .await;
    let mut events = run.subscribe();
    wait_for(&mut events, "the quick agent-end", |e| {
        e["type"] == "workflow/agent-end" && e["label"] == "quick"
    })
    .await;
    started
}

// ------------------------------------------------------------------ start → result

/// The End's count includes calls still waiting for a slot when the body
/// returned: the worker counts an admission from the call that carries it
/// (`childStart`, or `admit` for a queued call), not from a separate one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_still_queued_when_the_body_returns_are_counted() {
    let provider = TestProvider::new(Behaviour::Hang);
    let mut req = with_provider(
        "agent(\"held\"); agent(\"queued 1\"); agent(\"queued 2\");\nreturn 1;",
        provider.clone(),
    );
    req.limits.max_concurrent_agents = 1;
    let run = start(req).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!(1));
    assert_eq!(r.agents_started, 3, "one started, two queued");
    let labels: Vec<String> = provider
        .requests()
        .iter()
        .map(|q| q.label.clone())
        .collect();
    assert_eq!(
        labels,
        ["held"],
        "the queued calls never reached the provider"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_then_result() {
    let provider = TestProvider::new(Behaviour::Answer("recorded answer".into(), None));
    let req = with_provider(
        "phase(\"Ask\");\nconst a = await agent(\"hello there\\nsecond line\");\nreturn { a, n: args.n };",
        provider.clone(),
    )
    .with_args(dsh_orchestrator::ArgsInput::Json(json!({ "n": 7 })));
    let run = start(req).expect("start");
    assert_eq!(run.meta(), &meta());
    assert!(!run.id().is_empty());
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "a": "recorded answer", "n": 7 }));
    assert_eq!(r.error, None);
    assert_eq!(r.agents_started, 1);
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].seq, 1);
    assert_eq!(reqs[0].prompt, "hello there\nsecond line");
    assert_eq!(reqs[0].label, "hello there");
    assert_eq!(reqs[0].phase.as_deref(), Some("Ask"));
    assert_eq!(reqs[0].schema, None);
    let events = check_run_end(&run).await;
    assert_eq!(events[0]["meta"]["name"], "e2e");
    assert_eq!(
        outcomes(&events).get(&1).map(String::as_str),
        Some("completed")
    );
    assert_eq!(
        events_of(&events, "workflow/agent-start")[0]["childId"],
        "test-child-1"
    );
    // Every child is disposed once the run settles.
    let done = run.dispose().await;
    assert_eq!(done, r);
    assert!(run.is_quiescent());
    assert!(
        provider.log().contains(&"dispose test-child-1".to_string()),
        "{:?}",
        provider.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_answers_are_validated_by_the_host() {
    let fx = json!({ "version": 1, "answers": [
        { "match": { "label": "good" }, "structured": { "ok": true } },
        { "match": { "label": "bad" }, "structured": { "ok": "no" } }
    ]});
    let provider = Arc::new(ScriptedProvider::from_value(&fx).expect("fixture"));
    let script = "const schema = { type: \"object\", properties: { ok: { type: \"boolean\" } }, required: [\"ok\"], additionalProperties: false };\nreturn [await agent(\"g\", { label: \"good\", schema }), await agent(\"b\", { label: \"bad\", schema })];";
    let run = start(request(script).with_provider(provider)).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!([{ "ok": true }, null]));
    let events = check_run_end(&run).await;
    assert_eq!(
        outcomes(&events).get(&2).map(String::as_str),
        Some("failed")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_from_the_file_is_used_when_the_caller_gives_none() {
    let req = StartRequest::new(
        "from-file.ts",
        "export const meta = { name: \"file-meta\", description: \"from the file\" };\nreturn 1;",
    )
    .with_limits(limits())
    .with_worker(WorkerCommand::dsh(common::DSH));
    let run = start(req).expect("start");
    assert_eq!(run.meta().name, "file-meta");
    assert_eq!(run.meta().description, "from the file");
    assert_eq!(result(&run).await.value, json!(1));
    let events = check_run_end(&run).await;
    assert_eq!(
        events[0]["meta"],
        json!({ "name": "file-meta", "description": "from the file" })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_replays_workflow_start_to_late_subscribers() {
    let run = start(request("log(\"one\");\nreturn 1;")).expect("start");
    // Subscribed right away and after the end: both see the whole history.
    let mut early = run.subscribe();
    let first = early.next().await.expect("an event").to_json();
    assert_eq!(first["type"], "workflow/start");
    assert_eq!(first["t"], 0);
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    let late = collect_events(&run).await;
    assert_eq!(late[0]["type"], "workflow/start");
    assert_eq!(late[0]["meta"]["name"], "e2e");
    let types: Vec<&str> = late.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        vec!["workflow/start", "workflow/log", "workflow/end"]
    );
    // The early stream gets the same events and then ends.
    let mut rest = vec![first];
    while let Some(e) = tokio::time::timeout(Duration::from_secs(30), early.next())
        .await
        .expect("the stream ends")
    {
        rest.push(e.to_json());
    }
    assert_eq!(rest, late);
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_does_not_stall_the_run() {
    let run = start(request(
        "for (let i = 0; i < 2000; i++) log(\"line \" + i);\nreturn \"done\";",
    ))
    .expect("start");
    let _idle = run.subscribe();
    drop(run.subscribe());
    let r = result(&run).await;
    assert_eq!(r.value, json!("done"));
    let events = check_run_end(&run).await;
    assert_eq!(events_of(&events, "workflow/log").len(), 2000);
}

// ------------------------------------------------------------------ cancellation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_before_go_never_runs_the_body() {
    let provider = TestProvider::new(Behaviour::Answer("should not happen".into(), None));
    let script = "await agent(\"first statement\");\nlog(\"body ran\");\nreturn 1;";
    let run = start(with_provider(script, provider.clone())).expect("start");
    // Same synchronous step as start(): the worker cannot have said Ready.
    run.cancel("cancelled before go");
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Cancelled, ErrorCode::Cancelled);
    assert!(msg.contains("cancelled before go"), "{msg}");
    assert_eq!(r.agents_started, 0);
    let events = check_run_end(&run).await;
    assert!(
        provider.requests().is_empty(),
        "the provider saw {:?}",
        provider.requests()
    );
    assert!(events_of(&events, "workflow/log").is_empty(), "{events:#?}");
    assert!(events_of(&events, "workflow/agent-start").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_child_through_the_host_while_the_worker_is_wedged() {
    let provider = TestProvider::new(Behaviour::Hang);
    let mut req = with_provider(WEDGED_AFTER_CALL, provider.clone());
    // A long grace: the run must not need the grace kill to settle.
    req.limits.dispose_grace = Duration::from_secs(20);
    let run = start(req).expect("start");
    let started = wait_until_wedged(&run).await;
    assert_eq!(started["label"], "stuck");
    run.cancel("stop now");
    // The worker is spinning in `while (true) {}` and cannot relay anything:
    // the host itself must cancel the child.
    tokio::time::timeout(
        Duration::from_secs(10),
        provider.child_cancelled.cancelled(),
    )
    .await
    .expect("the child is cancelled by the host");
    let r = tokio::time::timeout(Duration::from_secs(15), run.result())
        .await
        .expect("settles well before the 20 s grace");
    let msg = assert_stopped(&r, StopReason::Cancelled, ErrorCode::Cancelled);
    assert!(msg.contains("stop now"), "{msg}");
    assert_eq!(r.agents_started, 2);
    let events = check_run_end(&run).await;
    assert_eq!(
        outcomes(&events).get(&1).map(String::as_str),
        Some("cancelled")
    );
    // The child's end was reported while the worker was still wedged: the
    // in-worker interrupt stops the script only later.
    let end_t = events.last().unwrap()["t"].as_u64().unwrap();
    let agent_end_t = events_of(&events, "workflow/agent-end")[0]["t"]
        .as_u64()
        .unwrap();
    assert!(
        agent_end_t < end_t,
        "agent-end at {agent_end_t} ms, end at {end_t} ms"
    );
    // The stuck child was cancelled, then disposed.
    let log = provider.log();
    let at = |what: &str| log.iter().position(|l| l == what);
    let cancelled = at("cancel test-child-1").unwrap_or_else(|| panic!("{log:?}"));
    let disposed = at("dispose test-child-1").unwrap_or_else(|| panic!("{log:?}"));
    assert!(cancelled < disposed, "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_is_idempotent_and_the_first_reason_wins() {
    let run = start(request(PARKED)).expect("start");
    wait_for_log(&run, "parked").await;
    run.cancel("first reason");
    run.cancel("second reason");
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Cancelled, ErrorCode::Cancelled);
    assert!(msg.contains("first reason"), "{msg}");
    assert!(!msg.contains("second reason"), "{msg}");
    // After the result, cancel changes nothing.
    run.cancel("third reason");
    assert_eq!(run.try_result().as_ref(), Some(&r));
    assert_eq!(result(&run).await, r);
    let events = check_run_end(&run).await;
    let end = events.last().unwrap();
    assert_eq!(end["stopReason"], "cancelled");
    assert_eq!(end["error"]["message"], msg.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispose_is_idempotent_and_bounded() {
    let run = start(request(PARKED)).expect("start");
    wait_for_log(&run, "parked").await;
    let bound = GRACE + Duration::from_secs(20);
    let first = tokio::time::timeout(bound, run.dispose())
        .await
        .expect("dispose is bounded");
    assert_stopped(&first, StopReason::Cancelled, ErrorCode::Cancelled);
    assert!(run.is_quiescent(), "dispose waits for quiescence");
    assert!(
        !common::process_alive(run.worker_pid()),
        "the worker is reaped"
    );
    let second = tokio::time::timeout(bound, run.dispose())
        .await
        .expect("dispose again is bounded");
    assert_eq!(first, second);
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispose_after_completion_keeps_the_completed_result() {
    let run = start(request("return \"fine\";")).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed());
    let d = run.dispose().await;
    assert_eq!(d, r);
    assert_eq!(d.value, json!("fine"));
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_reaps_the_worker() {
    let run = start(request(PARKED)).expect("start");
    wait_for_log(&run, "parked").await;
    let pid = run.worker_pid();
    assert!(common::process_alive(pid));
    drop(run);
    assert_process_gone_async(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_right_after_start_reaps_the_worker() {
    let run = start(request(PARKED)).expect("start");
    let pid = run.worker_pid();
    drop(run);
    assert_process_gone_async(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_settles_at_once_and_kills_the_worker() {
    let provider = TestProvider::new(Behaviour::Hang);
    let mut req = with_provider(WEDGED_AFTER_CALL, provider.clone());
    req.limits.dispose_grace = Duration::from_secs(30);
    let run = start(req).expect("start");
    wait_until_wedged(&run).await;
    run.terminate();
    let r = tokio::time::timeout(Duration::from_secs(15), run.result())
        .await
        .expect("terminate does not wait for the 30 s grace");
    assert_stopped(&r, StopReason::Cancelled, ErrorCode::Cancelled);
    let events = check_run_end(&run).await;
    assert_eq!(
        outcomes(&events).get(&1).map(String::as_str),
        Some("cancelled")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_timeout_settles_cancelled_with_timeout() {
    let mut req = request(PARKED);
    req.limits.wall_timeout = Some(Duration::from_millis(300));
    let run = start(req).expect("start");
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Cancelled, ErrorCode::Timeout);
    assert!(msg.contains("300"), "{msg}");
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_never_answers_is_settled_by_the_grace() {
    // Never says Hello: only the grace timer can end the run after a cancel.
    let mut req = request("return 1;").with_worker(WorkerCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "exec /bin/sleep 30".into(), "sh".into()],
    });
    req.limits.dispose_grace = Duration::from_millis(500);
    let run = start(req).expect("start");
    run.cancel("give up");
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Cancelled, ErrorCode::Cancelled);
    assert!(msg.contains("give up"), "{msg}");
    check_run_end(&run).await;
}

// ------------------------------------------------------------------ worker deaths

/// Starts a run with one finished and two hanging children, kills the worker
/// with SIGKILL once all three started, and returns the result and events
/// (after checking §8 and that the worker is gone).
async fn sigkill_mid_run() -> (RunResult, Vec<Value>) {
    let fx = json!({ "version": 1, "answers": [
        { "match": { "label": "quick" }, "text": "quick answer" },
        { "match": {}, "hang": true }
    ]});
    let provider = Arc::new(ScriptedProvider::from_value(&fx).expect("fixture"));
    let script = "await agent(\"q\", { label: \"quick\" });\nconst a = agent(\"first hang\");\nconst b = agent(\"second hang\");\nreturn [await a, await b];";
    let run = start(request(script).with_provider(provider)).expect("start");
    let mut events = run.subscribe();
    wait_for(&mut events, "both hanging agents started", |e| {
        e["type"] == "workflow/agent-start" && e["seq"] == 3
    })
    .await;
    let pid = libc::pid_t::try_from(run.worker_pid()).expect("pid");
    // SAFETY: plain syscall on the worker's pid, which the run has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let r = result(&run).await;
    let events = check_run_end(&run).await;
    (r, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_with_sigkill_mid_run() {
    let (r, events) = sigkill_mid_run().await;
    assert_stopped(&r, StopReason::Error, ErrorCode::WorkerExited);
    assert_eq!(r.agents_started, 3, "the count the host observed");
    let outs = outcomes(&events);
    assert_eq!(outs.get(&1).map(String::as_str), Some("completed"));
    // Ends synthesized by the host after the death say cancelled.
    assert_eq!(outs.get(&2).map(String::as_str), Some("cancelled"));
    assert_eq!(outs.get(&3).map(String::as_str), Some("cancelled"));
    let end = events.last().unwrap();
    assert_eq!(end["stopReason"], "error");
    assert_eq!(end["error"]["code"], "WORKER_EXITED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_with_sigkill_names_the_signal() {
    let (r, _) = sigkill_mid_run().await;
    let msg = assert_stopped(&r, StopReason::Error, ErrorCode::WorkerExited);
    assert!(msg.contains("SIGKILL"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_death_after_a_cancel_reports_cancelled() {
    let provider = TestProvider::new(Behaviour::Hang);
    let mut req = with_provider(WEDGED_AFTER_CALL, provider.clone());
    req.limits.dispose_grace = Duration::from_secs(20);
    let run = start(req).expect("start");
    wait_until_wedged(&run).await;
    run.cancel("cancel first");
    tokio::time::timeout(
        Duration::from_secs(10),
        provider.child_cancelled.cancelled(),
    )
    .await
    .expect("child cancelled");
    let pid = libc::pid_t::try_from(run.worker_pid()).expect("pid");
    // SAFETY: plain syscall; the worker may already have ended (ESRCH is fine).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Cancelled, ErrorCode::Cancelled);
    assert!(msg.contains("cancel first"), "{msg}");
    check_run_end(&run).await;
}

#[rstest]
#[case::garbage("printf 'garbage-bytes-here' >&0; exec /bin/sleep 30", &["protocol violation"])]
#[case::oversized_frame("printf '\\377\\377\\377\\377' >&0; exec /bin/sleep 30", &["protocol violation", "exceeds the limit", "16777216"])]
#[case::undecodable_frame("printf '\\001\\000\\000\\000\\377' >&0; exec /bin/sleep 30", &["protocol violation", "undecodable"])]
// Whether the truncation or the exit is noticed first is a race; either is right.
#[case::truncated_frame("printf '\\010\\000\\000\\000ab' >&0; exit 0", &["stream ended inside a frame|exited with status 0"])]
#[case::exits_at_once("exit 7", &["exited with status 7"])]
#[case::closes_the_socket("exec 0<&-; exec /bin/sleep 30", &["closed its connection"])]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_worker_settles_worker_exited(#[case] shell: &str, #[case] mentions: &[&str]) {
    // The host appends `--fd 0 --parent <pid>`, which become $1 to $4 of
    // the shell; the socket is the shell's stdin, the policy line waiting
    // on it unread.
    let req = request("log(\"never\");\nreturn 1;").with_worker(WorkerCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), shell.into(), "sh".into()],
    });
    let run = start(req).expect("start");
    let pid = run.worker_pid();
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Error, ErrorCode::WorkerExited);
    for m in mentions {
        // `a|b`: either alternative.
        assert!(
            m.split('|').any(|alt| msg.contains(alt)),
            "should mention {m:?}: {msg}"
        );
    }
    assert_eq!(r.agents_started, 0);
    let events = check_run_end(&run).await;
    assert_eq!(events.len(), 2, "start and end only: {events:#?}");
    // The sleeping shell is not left behind.
    assert_process_gone_async(pid).await;
    assert_eq!(run.dispose().await, r);
}

// ------------------------------------------------------------------ budget, sandbox

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_usage_feeds_budget_spent() {
    let provider = TestProvider::new(Behaviour::Answer("paid".into(), Some(Usage::new(3, 42))));
    let mut req = with_provider(
        "await agent(\"a\");\nconst s1 = budget.spent();\nawait agent(\"b\");\nreturn { s1, s2: budget.spent(), remaining: budget.remaining(), total: budget.total };",
        provider,
    );
    req.limits.budget_tokens = Some(100);
    let run = start(req).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(
        r.value,
        json!({ "s1": 42, "s2": 84, "remaining": 16, "total": 100 })
    );
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_usage_exhausts_the_budget() {
    let provider = TestProvider::new(Behaviour::Answer("paid".into(), Some(Usage::new(0, 50))));
    let mut req = with_provider(
        "for (let i = 0; i < 5; i++) await agent(\"call \" + i);\nreturn \"not reached\";",
        provider.clone(),
    );
    req.limits.budget_tokens = Some(80);
    let run = start(req).expect("start");
    let r = result(&run).await;
    let msg = assert_stopped(&r, StopReason::Error, ErrorCode::Budget);
    assert!(msg.contains("80"), "{msg}");
    // 0 then 50 spent: two calls pass, the third is refused.
    assert_eq!(provider.requests().len(), 2);
    assert_eq!(r.agents_started, 2);
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_sandbox_settles_sandbox_unavailable_without_running_the_body() {
    let provider = TestProvider::new(Behaviour::Answer("x".into(), None));
    // The worker's testing switch: behave as if the kernel had no Landlock.
    let worker = common::testing_worker("landlock-abi=0");
    let req = with_provider(
        "log(\"ran\");\nawait agent(\"x\");\nreturn 1;",
        provider.clone(),
    )
    .with_worker(worker)
    .with_sandbox(SandboxPolicy::Strict);
    let run = start(req).expect("start");
    let r = result(&run).await;
    assert_stopped(&r, StopReason::Error, ErrorCode::SandboxUnavailable);
    let events = check_run_end(&run).await;
    assert!(provider.requests().is_empty());
    assert!(events_of(&events, "workflow/log").is_empty(), "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_carries_the_sandbox_the_worker_reached() {
    let run = start(request("return 1;")).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    let sandbox = r.sandbox.clone().expect("a sandbox report");
    let abi = dsh_worker::sandbox::landlock::kernel_abi();
    assert_eq!(sandbox.landlock_abi, Some(abi));
    if abi >= 6 {
        assert_eq!(sandbox.level, SandboxLevel::Full, "{sandbox:?}");
    } else {
        assert!(
            std::env::var_os("DSH_TEST_ALLOW_WEAK_SANDBOX").is_some(),
            "NOT ENFORCED on this kernel: sandbox not full (Landlock ABI {abi}): {sandbox:?}. \
             Set DSH_TEST_ALLOW_WEAK_SANDBOX=1 to accept it"
        );
        assert_eq!(sandbox.level, SandboxLevel::Partial, "{sandbox:?}");
    }
    assert_eq!(r.to_json()["sandbox"]["landlockAbi"], abi);
    check_run_end(&run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_bytes_limit_truncates_with_one_marker() {
    let mut req = request(
        "for (let i = 0; i < 5; i++) log(\"0123456789\");\nconsole.log(\"more\");\nreturn \"done\";",
    );
    req.limits.log_bytes = 25;
    let run = start(req).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!("done"));
    let events = check_run_end(&run).await;
    let logs: Vec<&str> = events_of(&events, "workflow/log")
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        logs,
        vec![
            "0123456789",
            "0123456789",
            "[log truncated: limit of 25 bytes reached]"
        ]
    );
    // 3 more lines of 10 bytes and "more" (4 bytes) were dropped.
    assert!(r.log_bytes_dropped > 0, "{r:?}");
    let end = events.last().unwrap();
    assert_eq!(end["logBytesDropped"], r.log_bytes_dropped);
}

// ------------------------------------------------------------------ start errors

fn without_meta(source: &str) -> StartRequest {
    StartRequest::new("e2e.ts", source)
        .with_limits(limits())
        .with_worker(WorkerCommand::dsh(common::DSH))
}

#[rstest]
#[case::parse(request("let = ;"), ErrorCode::ScriptParse)]
#[case::import(request("import fs from \"fs\";"), ErrorCode::ScriptParse)]
#[case::meta_not_literal(
    request("export const meta = { name: make(), description: \"d\" };"),
    ErrorCode::MetaInvalid
)]
#[case::meta_schema(
    without_meta("export const meta = { name: 5, description: \"d\" };"),
    ErrorCode::MetaInvalid
)]
#[case::missing_meta(without_meta("return 1;"), ErrorCode::MetaInvalid)]
#[case::zero_concurrency(request("return 1;").with_limits(Limits { max_concurrent_agents: 0, ..limits() }), ErrorCode::Usage)]
#[case::agents_above_ceiling(request("return 1;").with_limits(Limits { max_total_agents: 1001, ..limits() }), ErrorCode::Usage)]
#[case::zero_wall_timeout(request("return 1;").with_limits(Limits { wall_timeout: Some(Duration::ZERO), ..limits() }), ErrorCode::Usage)]
#[case::too_large(request("return \"a long enough script\";").with_limits(Limits { max_script_bytes: 8, ..limits() }), ErrorCode::ScriptTooLarge)]
#[case::worker_missing(request("return 1;").with_worker(WorkerCommand::new("/nonexistent/dsh-worker")), ErrorCode::WorkerExited)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_errors_carry_their_code(#[case] req: StartRequest, #[case] code: ErrorCode) {
    match start(req) {
        Ok(run) => panic!("start should fail with {code}, got run {}", run.id()),
        Err(e) => {
            assert_eq!(e.code(), code, "{e}");
            assert!(!e.to_string().is_empty());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_parse_start_error_names_the_position() {
    let err = start(request("const a = 1;\nlet b = ;"))
        .err()
        .expect("a start error");
    assert_eq!(err.code(), ErrorCode::ScriptParse);
    let text = err.to_string();
    assert!(text.contains("e2e.ts:2:9"), "{text}");
    assert!(matches!(err, StartError::Script(_)), "{err:?}");
}

#[test]
fn start_outside_a_runtime_is_an_error() {
    let err = start(request("return 1;")).err().expect("a start error");
    assert!(matches!(err, StartError::NoRuntime), "{err:?}");
}
