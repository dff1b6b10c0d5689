//! End-to-end tests of the `openai` provider: real scripts run through the
//! library (`dsh_orchestrator::start`, the `dsh` binary as worker) with an
//! [`OpenAiProvider`] pointed at a scripted HTTP server on 127.0.0.1 (no
//! network). Every run's events keep the §8 guarantees and its worker is
//! gone afterwards. Waits synchronize on run events and on what the server
//! saw; time bounds are upper limits only.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod http_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::lib::{collect_events, request, result};
use common::{Workspace, assert_event_guarantees, assert_process_gone_async, events_of, outcomes};
use dsh_orchestrator::providers::openai::{OpenAiConfig, OpenAiProvider};
use dsh_orchestrator::{ErrorCode, StartRequest, StopReason, WorkflowRun, start};
use http_server::{Reply, TestServer};
use rstest::rstest;
use serde_json::{Value, json};

/// The provider under test: the DeepSeek defaults, pointed at `server`,
/// with quick retries.
fn provider(server: &TestServer, tweak: impl FnOnce(&mut OpenAiConfig)) -> Arc<OpenAiProvider> {
    let mut cfg = OpenAiConfig {
        base_url: server.base_url(),
        backoff: Duration::from_millis(1),
        // One completion per call (the tool loop: tests/agent_loop.rs).
        agent: dsh_orchestrator::providers::agent::LoopSettings {
            tools: Some(Vec::new()),
            ..Default::default()
        },
        ..OpenAiConfig::default()
    };
    tweak(&mut cfg);
    Arc::new(OpenAiProvider::with_key("deepseek", &cfg, "sk-e2e").expect("provider"))
}

fn run_with(script: &str, provider: Arc<OpenAiProvider>) -> StartRequest {
    request(script).with_provider(provider)
}

/// After every run: the events keep §8 and the worker is gone.
async fn finish(run: &WorkflowRun) -> Vec<Value> {
    let events = collect_events(run).await;
    assert_event_guarantees(&events);
    assert_process_gone_async(run.worker_pid()).await;
    events
}

fn agent_end(events: &[Value], seq: u64) -> Value {
    events_of(events, "workflow/agent-end")
        .into_iter()
        .find(|e| e["seq"] == seq)
        .unwrap_or_else(|| panic!("no agent-end {seq}: {events:#?}"))
        .clone()
}

const SCHEMA: &str = "{ type: \"object\", properties: { ok: { type: \"boolean\" } }, required: [\"ok\"], additionalProperties: false }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_structured_answers_with_usage_in_the_budget_and_events() {
    let server = TestServer::start(vec![
        Reply::chat_usage("hello", 11, 3),
        // Not valid for the schema: one corrective retry follows.
        Reply::chat_usage(r#"{"ok":"yes"}"#, 20, 6),
        Reply::chat_usage(r#"{"ok":true}"#, 30, 2),
    ])
    .await;
    let script = format!(
        "const schema = {SCHEMA};\n\
         const text = await agent(\"Say hello\", {{ model: \"deepseek-reasoner\" }});\n\
         const s1 = budget.spent();\n\
         const value = await agent(\"Check it\", {{ schema, label: \"check\" }});\n\
         return {{ text, value, s1, s2: budget.spent() }};"
    );
    let mut req = run_with(&script, provider(&server, |_| {}));
    req.limits.budget_tokens = Some(1000);
    let run = start(req).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    // The budget counts output tokens, the corrective retry's included.
    assert_eq!(
        r.value,
        json!({ "text": "hello", "value": { "ok": true }, "s1": 3, "s2": 11 })
    );
    let events = finish(&run).await;
    let first = agent_end(&events, 1);
    assert_eq!(first["outcome"], "completed");
    assert_eq!(first["childId"], "deepseek-1");
    assert_eq!(first["usage"], json!({ "input": 11, "output": 3 }));
    let second = agent_end(&events, 2);
    assert_eq!(second["outcome"], "completed");
    assert_eq!(second["childId"], "deepseek-2");
    assert_eq!(second["usage"], json!({ "input": 50, "output": 8 }));

    let seen = server.requests();
    assert_eq!(seen.len(), 3, "two calls, one corrective retry");
    for r in &seen {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("authorization"), Some("Bearer sk-e2e"));
    }
    let text_call = seen[0].json();
    assert_eq!(text_call["model"], "deepseek-reasoner");
    assert_eq!(
        text_call["messages"],
        json!([{ "role": "user", "content": "Say hello" }])
    );
    assert!(text_call.get("response_format").is_none(), "{text_call}");
    let schema_call = seen[1].json();
    assert_eq!(schema_call["model"], "deepseek-chat");
    assert_eq!(
        schema_call["response_format"],
        json!({ "type": "json_object" })
    );
    let system = schema_call["messages"][0]["content"]
        .as_str()
        .expect("a system message");
    assert!(
        system.contains("json") && system.contains("\"ok\""),
        "{system}"
    );
    let retry = seen[2].json();
    let msgs = retry["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 4, "{retry}");
    assert_eq!(
        msgs[2],
        json!({ "role": "assistant", "content": r#"{"ok":"yes"}"# })
    );
    let correction = msgs[3]["content"].as_str().expect("text");
    assert!(correction.contains("value.ok"), "{correction}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_still_invalid_after_the_retry_is_null_with_the_reason() {
    let server = TestServer::start(vec![
        Reply::chat_usage(r#"{"ok":"yes"}"#, 5, 1),
        Reply::chat_usage("no JSON here", 7, 2),
    ])
    .await;
    let script = format!(
        "const v = await agent(\"Check it\", {{ schema: {SCHEMA} }});\nreturn {{ v, spent: budget.spent() }};"
    );
    let run = start(run_with(&script, provider(&server, |_| {}))).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "v": null, "spent": 3 }));
    let events = finish(&run).await;
    let end = agent_end(&events, 1);
    assert_eq!(end["outcome"], "failed");
    assert_eq!(end["usage"], json!({ "input": 12, "output": 3 }));
    let reason = end["reason"].as_str().expect("a reason");
    assert!(reason.contains("not JSON"), "{reason}");
    assert!(reason.contains("after one corrective turn"), "{reason}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_with_retry_after_then_success() {
    let server = TestServer::start(vec![
        Reply::status(429, "rate limited").header("Retry-After", "1"),
        Reply::chat("made it"),
    ])
    .await;
    let run = start(run_with(
        "return await agent(\"hi\");",
        provider(&server, |_| {}),
    ))
    .expect("start");
    let begun = Instant::now();
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!("made it"));
    assert!(
        begun.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured: {:?}",
        begun.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
    let events = finish(&run).await;
    assert_eq!(
        outcomes(&events).get(&1).map(String::as_str),
        Some("completed")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_until_attempts_run_out_give_null_and_the_run_goes_on() {
    let server = TestServer::start(vec![
        Reply::status(500, "boom"),
        Reply::status(503, "still down"),
        Reply::chat("second call"),
    ])
    .await;
    let script = "const a = await agent(\"first\");\nlog(\"after first\");\nconst b = await agent(\"second\");\nreturn { a, b };";
    let run = start(run_with(script, provider(&server, |c| c.max_attempts = 2))).expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "a": null, "b": "second call" }));
    let events = finish(&run).await;
    let end = agent_end(&events, 1);
    assert_eq!(end["outcome"], "failed");
    let reason = end["reason"].as_str().expect("a reason");
    assert!(reason.contains("gave up after 2 attempts"), "{reason}");
    assert!(reason.contains("HTTP 503"), "{reason}");
    assert!(reason.contains("still down"), "{reason}");
    assert_eq!(agent_end(&events, 2)["outcome"], "completed");
    assert_eq!(server.requests().len(), 3);
}

#[rstest]
#[case::not_json("{\"choices\": [{\"message\"", "not JSON")]
#[case::no_choices(
    r#"{"id":"x","usage":{"prompt_tokens":4,"completion_tokens":0}}"#,
    "no choices[0]"
)]
#[case::bad_request_status("", "HTTP 400")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_refused_responses_give_null_with_a_reason(
    #[case] body: &str,
    #[case] want: &str,
) {
    let reply = if want == "HTTP 400" {
        Reply::status(400, "unknown parameter")
    } else {
        Reply::body(body)
    };
    let server = TestServer::start(vec![reply]).await;
    let run = start(run_with(
        "const a = await agent(\"hi\");\nreturn { a, done: true };",
        provider(&server, |_| {}),
    ))
    .expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "a": null, "done": true }));
    let events = finish(&run).await;
    let end = agent_end(&events, 1);
    assert_eq!(end["outcome"], "failed");
    let reason = end["reason"].as_str().expect("a reason");
    assert!(reason.contains(want), "{reason} should contain {want}");
    assert_eq!(server.requests().len(), 1, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_run_drops_the_request_in_flight() {
    // The answer would come a minute later: only a dropped request lets
    // this run settle in time.
    let server =
        TestServer::start(vec![Reply::chat("too late").after(Duration::from_secs(60))]).await;
    let run = start(run_with(
        "const a = await agent(\"slow\");\nlog(\"answered\");\nreturn a;",
        provider(&server, |_| {}),
    ))
    .expect("start");
    server.wait_requests(1).await;
    let begun = Instant::now();
    run.cancel("stop the slow call");
    server.wait_dropped(1).await;
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "the server saw the hang-up after {:?}",
        begun.elapsed()
    );
    let r = result(&run).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled, "{r:?}");
    assert_eq!(r.error.as_ref().map(|e| e.code), Some(ErrorCode::Cancelled));
    let events = finish(&run).await;
    assert_eq!(
        outcomes(&events).get(&1).map(String::as_str),
        Some("cancelled")
    );
    assert!(events_of(&events, "workflow/log").is_empty(), "{events:#?}");
    assert_eq!(server.seen().late_answers, 0, "no late answer");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_outside_a_git_checkout_fails_the_call_clearly() {
    let server = TestServer::start(vec![Reply::chat("never")]).await;
    let plain = tempfile::tempdir().expect("tempdir");
    let workspace = plain.path().to_path_buf();
    let run = start(run_with(
        "return await agent(\"hi\", { isolation: \"worktree\" });",
        provider(&server, move |c| c.agent.workspace = Some(workspace)),
    ))
    .expect("start");
    let r = result(&run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, Value::Null);
    let events = finish(&run).await;
    let end = agent_end(&events, 1);
    assert_eq!(end["outcome"], "failed");
    let reason = end["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("not inside a git repository") && reason.contains("isolation"),
        "{reason}"
    );
    assert!(server.requests().is_empty(), "nothing was sent");
}

/// The whole chain through the command line: `dsh.toml` → the router →
/// the openai provider → the loopback server, with the key from the
/// environment variable the file names and an agent type's system prompt
/// and model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_a_workflow_against_a_configured_endpoint() {
    let server = TestServer::start(vec![
        Reply::chat_usage("plan: parse, check", 4, 6),
        Reply::chat_usage("{\"ok\": true}", 1, 2),
    ])
    .await;
    let ws = common::Workspace::new(
        "wf.ts",
        &format!(
            "const plan = await agent(\"make a plan\");\n\
             const verdict = await agent(\"review it\", {{ agentType: \"reviewer\", schema: {SCHEMA} }});\n\
             return {{ plan, verdict, spent: budget.spent() }};\n"
        ),
        None,
    )
    .with_env("DSH_E2E_OPENAI_KEY", "sk-from-env");
    ws.file(
        "dsh.toml",
        &format!(
            "[workflow]\nprovider = \"local\"\n\n\
             [providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"small\"\n\
             api_key_env = \"DSH_E2E_OPENAI_KEY\"\nbackoff = \"1ms\"\n\n\
             [agent_types.reviewer]\nmodel = \"large\"\nsystem_prompt = \"You review plans.\"\n",
            server.base_url()
        ),
    );
    let out = tokio::task::spawn_blocking(move || ws.run(&["--output", "result"]))
        .await
        .expect("dsh");
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json()["value"],
        json!({ "plan": "plan: parse, check", "verdict": { "ok": true }, "spent": 8 })
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-from-env"));
    assert_eq!(reqs[0].json()["model"], "small");
    let second = reqs[1].json();
    assert_eq!(second["model"], "large");
    assert!(
        second["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("You review plans."),
        "{second:#}"
    );
}

/// Every API key a built-in provider reads: removed from each `dsh` these
/// tests start, so that the machine's own keys decide nothing.
const API_KEYS: [&str; 3] = ["DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// Runs `ws` with `--events lines` and exactly the API keys `keys`.
async fn run_with_keys(ws: Workspace, keys: &[(&str, &str)]) -> common::Output {
    let keys: Vec<(String, String)> = keys
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = ws.command(&["--events", "lines", "--no-journal"]);
        for k in API_KEYS {
            cmd.env_remove(k);
        }
        cmd.envs(keys);
        let child = cmd.spawn().expect("spawn dsh");
        common::Running::adopt(child, ws).finish()
    })
    .await
    .expect("dsh")
}

/// `dsh.toml` pointing the built-in API providers at `server` (the
/// loopback: these tests never reach the network), naming no default.
fn loopback_providers(ws: &Workspace, server: &TestServer) {
    ws.file(
        "dsh.toml",
        &format!(
            "[providers.deepseek]\nkind = \"openai\"\nbase_url = \"{url}\"\nbackoff = \"1ms\"\n\n\
             [providers.openai]\nkind = \"openai\"\nbase_url = \"{url}\"\n\
             api_key_env = \"OPENAI_API_KEY\"\nbackoff = \"1ms\"\n",
            url = server.base_url()
        ),
    );
}

/// The README's promise: with `DEEPSEEK_API_KEY` set and no provider
/// configured, nothing else is needed — `deepseek` answers, and the start
/// line says why. It used to reject every call: "no provider is
/// configured".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_api_key_set_chooses_the_provider_and_the_start_line_says_so() {
    let server = TestServer::start(vec![Reply::chat_usage("hello from the key", 4, 2)]).await;
    let ws = Workspace::new("wf.ts", "return await agent(\"Say hello\");\n", None);
    loopback_providers(&ws, &server);
    let out = run_with_keys(ws, &[("DEEPSEEK_API_KEY", "sk-only")]).await;
    out.assert_code(0);
    assert_eq!(out.json(), json!("hello from the key"));
    let start = out
        .stderr
        .lines()
        .find(|l| l.contains(" start "))
        .unwrap_or_else(|| panic!("no start line: {}", out.stderr));
    common::assert_mentions(
        start,
        &[
            "provider deepseek",
            "DEEPSEEK_API_KEY is set",
            "no provider is configured",
        ],
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-only"));
    let end = &events_of(&out.events, "workflow/agent-end")[0];
    assert_eq!(end["childId"], "deepseek-1", "{end}");
}

/// With several keys set dsh does not guess: the start line and the
/// call's error say which keys compete and how to choose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_api_keys_set_say_how_to_choose() {
    let server = TestServer::start(Vec::new()).await;
    let ws = Workspace::new("wf.ts", "return await agent(\"Say hello\");\n", None);
    loopback_providers(&ws, &server);
    let out = run_with_keys(
        ws,
        &[("DEEPSEEK_API_KEY", "sk-a"), ("OPENAI_API_KEY", "sk-b")],
    )
    .await;
    out.assert_code(1);
    out.assert_error_line("AGENT_START");
    let competing = "DEEPSEEK_API_KEY for deepseek, OPENAI_API_KEY for openai";
    common::assert_mentions(
        &out.stderr,
        &[
            "no default provider: several API keys are set",
            competing,
            "choose one with --provider NAME or workflow.provider",
        ],
    );
    let end = out.events.last().expect("events");
    common::assert_mentions(
        end["error"]["message"].as_str().unwrap_or_default(),
        &["several API keys are set", competing, "--provider NAME"],
    );
    assert!(server.requests().is_empty(), "no provider was asked");
}
