//! End-to-end tests of the per-call bounds the host enforces: `stallMs`
//! (no progress from the provider for that long) and the `stall` and
//! `timeout` defaults of `dsh.toml`, through real worker processes — the
//! CLI with fixtures and configurations, the library with the `command`
//! provider. A stalled or timed-out call resolves `null`, its `agent-end`
//! says why, and it is never retried: a resume replays the failure.
//!
//! Every wait is bounded and synchronizes on something observable; the
//! time bounds are generous upper limits (a fixture that would answer
//! after a minute, against a 300 ms stall), never what is measured.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::lib::{collect_events, finish, request, result};
use common::{
    POLL, WAIT_BOUND, Workspace, agent_end, assert_event_guarantees, assert_mentions, dsh_in,
    events_of, fixture, process_alive, read_events,
};
use dsh_orchestrator::providers::command::{CommandConfig, CommandProvider};
use dsh_orchestrator::{RunResult, start};
use serde_json::{Value, json};

#[track_caller]
fn assert_failed_with(end: &Value, reason_start: &str) {
    assert_eq!(end["outcome"], "failed", "{end}");
    let reason = end["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(reason_start),
        "reason {reason:?} should start with {reason_start:?}"
    );
    assert!(reason.contains("not retried"), "{reason}");
}

/// A fixture answer that would come after a minute: far longer than any
/// bound under test, so only the bound can end the call in time.
fn slow_fixture() -> Value {
    fixture(json!([{ "match": {}, "text": "too late", "delayMs": 60000 }]))
}

// ------------------------------------------------------------------ stallMs, CLI

#[test]
fn a_call_whose_provider_makes_no_progress_for_stall_ms_resolves_null() {
    let t0 = Instant::now();
    let out = Workspace::new(
        "wf.ts",
        "const v = await agent(\"slow\", { stallMs: 300 });\nreturn { v };",
        Some(&slow_fixture()),
    )
    .run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!({ "v": null }));
    assert_event_guarantees(&out.events);
    assert_failed_with(
        agent_end(&out.events),
        "stalled: no progress from the provider for 300 ms (stallMs)",
    );
    // Far sooner than the fixture's minute (a generous bound, not a measure).
    assert!(t0.elapsed() < Duration::from_secs(45), "{:?}", t0.elapsed());
}

#[test]
fn an_answer_within_stall_ms_stands() {
    let out = Workspace::new(
        "wf.ts",
        "return await agent(\"quick\", { stallMs: 60000 });",
        Some(&fixture(
            json!([{ "match": {}, "text": "done", "delayMs": 10 }]),
        )),
    )
    .run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!("done"));
    assert_eq!(agent_end(&out.events)["outcome"], "completed");
}

#[test]
fn a_stall_ms_that_is_not_a_positive_number_is_ignored_with_a_warning() {
    let out = Workspace::new(
        "wf.ts",
        "return await agent(\"quick\", { stallMs: \"soon\" });",
        Some(&fixture(json!([{ "match": {}, "text": "done" }]))),
    )
    .run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!("done"));
    let warnings = out.events_of("workflow/warning");
    assert!(
        warnings.iter().any(|w| w["path"] == "options.stallMs"
            && w["message"].as_str().unwrap_or("").contains("ignored")),
        "{warnings:#?}"
    );
}

// ------------------------------------------------------------------ resume

#[test]
fn a_stalled_call_is_journaled_as_failed_and_a_resume_replays_the_failure() {
    let out = Workspace::new(
        "wf.ts",
        "return [await agent(\"slow\", { stallMs: 300 }), await agent(\"next\")];",
        Some(&fixture(json!([
            { "match": { "promptContains": "slow" }, "text": "too late", "delayMs": 60000 },
            { "match": { "promptContains": "next" }, "text": "B" },
        ]))),
    )
    .run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!([null, "B"]));
    let dir = out.dir.path();
    let id = common::only_run_id(dir);
    let events = dir.join("resumed.jsonl");
    let events_arg = events.display().to_string();
    let t0 = Instant::now();
    let (stdout, stderr, code) = dsh_in(
        dir,
        &[
            "workflow",
            "resume",
            &id,
            "--events",
            "none",
            "--events-file",
            &events_arg,
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!([null, "B"])
    );
    // Both replayed: the stalled call is not asked again (it would take
    // the fixture's minute, or stall again).
    assert_mentions(&stderr, &["2 call(s) replayed"]);
    assert!(t0.elapsed() < Duration::from_secs(45));
    let events = read_events(&events, true);
    let ends = events_of(&events, "workflow/agent-end");
    let first = ends.iter().find(|e| e["seq"] == 1).expect("call 1 ended");
    assert_eq!(first["replayed"], true, "{first}");
    assert_failed_with(
        first,
        "stalled: no progress from the provider for 300 ms (stallMs)",
    );
}

// ------------------------------------------------------------------ dsh.toml

/// A workspace answering from `fx.json` (the slow fixture) through a
/// `[providers.fx]` of kind fixture, configured by `toml` after the
/// `[workflow]` and `[providers.fx]` headers' own lines.
fn configured(script: &str, provider_keys: &str, rest: &str) -> Workspace {
    let ws = Workspace::new("wf.ts", script, None);
    ws.file(
        "fx.json",
        &serde_json::to_string(&slow_fixture()).expect("json"),
    );
    ws.file(
        "dsh.toml",
        &format!(
            "[workflow]\nprovider = \"fx\"\n\n[providers.fx]\nkind = \"fixture\"\npath = \"fx.json\"\n{provider_keys}\n{rest}"
        ),
    );
    ws
}

#[test]
fn a_provider_stall_in_dsh_toml_applies_to_calls_without_stall_ms() {
    let out = configured("return await agent(\"slow\");", "stall = \"300ms\"", "").run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), Value::Null);
    assert_failed_with(
        agent_end(&out.events),
        "stalled: no progress from the provider for 300 ms (stall of [providers.fx])",
    );
}

#[test]
fn the_calls_stall_ms_wins_over_the_agent_type_over_the_provider() {
    // The provider's stall would fire first; the agent type's replaces it,
    // and the call's own replaces both.
    let out = configured(
        "return [await agent(\"slow a\", { agentType: \"patient\" }), \
                 await agent(\"slow b\", { agentType: \"patient\", stallMs: 300 })];",
        "stall = \"50ms\"",
        "[agent_types.patient]\nstall = \"400ms\"\n",
    )
    .run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!([null, null]));
    let ends = events_of(&out.events, "workflow/agent-end");
    let reason = |seq: u64| {
        ends.iter()
            .find(|e| e["seq"] == seq)
            .and_then(|e| e["reason"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        reason(1).starts_with(
            "stalled: no progress from the provider for 400 ms (stall of [agent_types.patient])"
        ),
        "{}",
        reason(1)
    );
    assert!(
        reason(2).starts_with("stalled: no progress from the provider for 300 ms (stallMs)"),
        "{}",
        reason(2)
    );
}

#[test]
fn an_agent_type_timeout_in_dsh_toml_fails_the_call() {
    let out = configured(
        "return await agent(\"slow\", { agentType: \"quick\" });",
        "",
        "[agent_types.quick]\ntimeout = \"300ms\"\n",
    )
    .run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), Value::Null);
    assert_failed_with(
        agent_end(&out.events),
        "timed out after 300 ms (timeout of [agent_types.quick])",
    );
}

#[test]
fn a_bad_stall_in_dsh_toml_names_the_line_and_the_fix() {
    let ws = configured("return 1;", "stall = \"soon\"", "");
    let (stdout, stderr, code) = dsh_in(ws.dir.path(), &["workflow", "providers"]);
    assert_ne!(code, Some(0), "{stdout}");
    assert_mentions(&stderr, &["dsh.toml:7", "providers.fx.stall", "soon"]);
    let ws = configured("return 1;", "", "[agent_types.t]\ntimeout = 0\n");
    let (_, stderr, code) = dsh_in(ws.dir.path(), &["workflow", "providers"]);
    assert_ne!(code, Some(0));
    assert_mentions(
        &stderr,
        &["dsh.toml:9", "agent_types.t.timeout", "more than 0"],
    );
}

#[test]
fn providers_lists_the_stall_and_timeout_defaults() {
    let ws = configured(
        "return 1;",
        "stall = \"5m\"",
        "[agent_types.t]\ntimeout = \"30m\"\nstall = \"90s\"\n",
    );
    let (stdout, stderr, code) = dsh_in(ws.dir.path(), &["workflow", "providers"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_mentions(
        &stdout,
        &["stall 300s", "agent type t", "stall 90s", "timeout 1800s"],
    );
}

// ------------------------------------------------------------------ command provider

/// An executable `#!/bin/sh` script in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    let body = body.replace("@DIR@", &dir.display().to_string());
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

async fn run_command(dir: &Path, prog: &Path, js: &str) -> (RunResult, Vec<Value>) {
    let cfg: CommandConfig =
        serde_json::from_value(json!({ "argv": [prog], "grace": "500ms" })).expect("config");
    let provider = Arc::new(CommandProvider::new("fake", &cfg, dir).expect("usable"));
    finish(start(request(js).with_provider(provider)).expect("start")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_keeps_printing_does_not_stall() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A line every 100 ms for a second: each one is progress, so a 2 s
    // stall bound never fires, however slow the machine (the bound only
    // needs one line per 2 s).
    let prog = script(
        dir.path(),
        "chatty.sh",
        "cat > /dev/null\ni=0\nwhile [ $i -lt 10 ]; do echo \"line $i\" >&2; sleep 0.1; i=$((i+1)); done\necho done",
    );
    let (r, events) = run_command(
        dir.path(),
        &prog,
        "return await agent(\"talk\", { stallMs: 2000 });",
    )
    .await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!("done"));
    assert_eq!(agent_end(&events)["outcome"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_program_stalls_and_is_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prog = script(
        dir.path(),
        "silent.sh",
        "echo $$ > @DIR@/pid.tmp && mv @DIR@/pid.tmp @DIR@/pid\nexec sleep 60",
    );
    let (r, events) = run_command(
        dir.path(),
        &prog,
        // 1 s: room for a loaded machine to start the shell and write the
        // pid file before the stall (writing a file is not progress).
        "const v = await agent(\"quiet\", { stallMs: 1000 });\nreturn { v };",
    )
    .await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "v": null }));
    assert_failed_with(
        agent_end(&events),
        "stalled: no progress from the provider for 1000 ms (stallMs)",
    );
    // The program had started (it wrote its pid), and it is gone now.
    let pid: u32 = std::fs::read_to_string(dir.path().join("pid"))
        .expect("the program ran")
        .trim()
        .parse()
        .expect("pid");
    let t0 = Instant::now();
    while process_alive(pid) {
        assert!(t0.elapsed() < WAIT_BOUND, "process {pid} is still alive");
        tokio::time::sleep(POLL).await;
    }
}

// ------------------------------------------------------------------ an embedder's provider

/// A provider whose children report progress through the seam every
/// `every` for `reports` times, then answer; it keeps the options it saw.
struct Ticking {
    every: Duration,
    reports: u32,
    seen: std::sync::Mutex<Vec<dsh_orchestrator::AgentOptions>>,
}

struct TickingChild {
    progress: dsh_orchestrator::Progress,
    every: Duration,
    reports: u32,
    cancel: tokio_util::sync::CancellationToken,
}

#[async_trait::async_trait]
impl dsh_orchestrator::SubagentProvider for Ticking {
    async fn start(
        &self,
        request: dsh_orchestrator::AgentRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> Result<Arc<dyn dsh_orchestrator::Subagent>, dsh_orchestrator::StartRefused> {
        self.seen.lock().unwrap().push(request.options.clone());
        Ok(Arc::new(TickingChild {
            progress: dsh_orchestrator::Progress::new(),
            every: self.every,
            reports: self.reports,
            cancel: tokio_util::sync::CancellationToken::new(),
        }))
    }
}

#[async_trait::async_trait]
impl dsh_orchestrator::Subagent for TickingChild {
    fn id(&self) -> &str {
        "ticking"
    }
    async fn result(
        &self,
    ) -> Result<dsh_orchestrator::ChildOutcome, dsh_orchestrator::ResultFault> {
        for _ in 0..self.reports {
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    return Ok(dsh_orchestrator::ChildOutcome {
                        result: dsh_orchestrator::ChildResult::Cancelled,
                        usage: None,
                    });
                }
                _ = tokio::time::sleep(self.every) => self.progress.report(),
            }
        }
        Ok(dsh_orchestrator::ChildOutcome {
            result: dsh_orchestrator::ChildResult::Text("ticked".into()),
            usage: None,
        })
    }
    fn cancel(&self) {
        self.cancel.cancel();
    }
    async fn dispose(&self) {}
    fn progress(&self) -> Option<dsh_orchestrator::Progress> {
        Some(self.progress.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedders_provider_reports_progress_and_sees_the_options() {
    // Ten reports 50 ms apart against a 5 s stall: never stalled, and the
    // options reach the provider.
    let p = Arc::new(Ticking {
        every: Duration::from_millis(50),
        reports: 10,
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let run = start(
        request("return await agent(\"tick\", { stallMs: 5000, disallowedTools: [\"Bash\"] });")
            .with_provider(p.clone()),
    )
    .expect("start");
    let r = result(&run).await;
    let events = collect_events(&run).await;
    assert_event_guarantees(&events);
    run.dispose().await;
    assert_eq!(r.value, json!("ticked"), "{r:?}");
    let seen = p.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].stall_ms, Some(5000));
    assert_eq!(seen[0].disallowed_tools, Some(vec!["Bash".to_string()]));

    // Reporting every 60 s against a 300 ms stall: stalled, and cancelled.
    let p = Arc::new(Ticking {
        every: Duration::from_secs(60),
        reports: 1,
        seen: std::sync::Mutex::new(Vec::new()),
    });
    let run = start(request("return await agent(\"tick\", { stallMs: 300 });").with_provider(p))
        .expect("start");
    let r = result(&run).await;
    let events = collect_events(&run).await;
    run.dispose().await;
    assert_eq!(r.value, Value::Null, "{r:?}");
    assert_failed_with(
        agent_end(&events),
        "stalled: no progress from the provider for 300 ms (stallMs)",
    );
}
