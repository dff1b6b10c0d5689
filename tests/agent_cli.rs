//! The agent CLI providers against the real CLIs (`kind = "claude-code"`,
//! `"codex"`, `"qwen"`), each driven by a fake model on 127.0.0.1 that the
//! test scripts: the model makes the CLI really use its tools in a
//! temporary git repository, and the tests check the effect on disk, the
//! answer, the usage the run counted, the activity events, a stall, a
//! cancel and a resume — and that no process of the CLI is left behind.
//!
//! The CLIs come from the npm registry (see `cli_agents`); without `npm`
//! the tests say so and pass.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_agents;
mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod test_server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use test_server::{Recorded, Reply, TestServer};

use cli_agents::{CLAUDE, assert_no_marked_processes, marked_processes, marker};
use common::{DSH, git};

/// Upper bound of one `dsh` run here (a CLI starting takes a second or
/// two; a loaded machine more).
const RUN_BOUND: Duration = Duration::from_secs(240);

/// A test's world: a git repository with a commit, a home for the CLI,
/// and a `dsh.toml`.
struct World {
    dir: tempfile::TempDir,
    marker: String,
}

impl World {
    fn new(test: &str) -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("home")).expect("mkdir");
        std::fs::write(repo.join("README.md"), "hello world\n").expect("write");
        std::fs::write(
            repo.join("src/lib.rs"),
            "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
        )
        .expect("write");
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        World {
            dir,
            marker: marker(test),
        }
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.repo().join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    /// `dsh workflow run SCRIPT` in the repository, with the CLI's
    /// environment.
    fn dsh(&self, args: &[&str], env: &[(&str, String)]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(DSH);
        c.args(args)
            .current_dir(self.repo())
            .env("HOME", self.home())
            .env("DSH_TEST_MARKER", &self.marker)
            .env_remove("DSH_WORKER")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }
}

/// The environment Claude Code needs to run offline against `server`.
fn claude_env(server: &TestServer) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", server.root_url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        // bypassPermissions is refused to root otherwise.
        ("IS_SANDBOX", "1".into()),
    ]
}

/// `[providers.claude]` for the installed Claude Code.
fn claude_toml(program: &Path, extra: &str) -> String {
    format!(
        "[workflow]\nprovider = \"claude\"\n\n[providers.claude]\nkind = \"claude-code\"\n\
         program = \"{}\"\npermission_mode = \"bypassPermissions\"\nenv = [\"DSH_TEST_MARKER\"]\n{extra}",
        program.display()
    )
}

async fn output(mut c: tokio::process::Command) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(RUN_BOUND, c.output())
        .await
        .expect("dsh finished in time")
        .expect("dsh runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits (bounded) until the events file has an event `pred` accepts.
async fn wait_event(path: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + RUN_BOUND;
    loop {
        if let Some(e) = events(path).into_iter().find(|e| pred(e)) {
            return e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} event in time; events: {:#?}",
            events(path)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The tool calls of the activity events, in order.
fn tool_calls(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "workflow/agent-activity" && e["activity"] == "tool-call")
        .map(|e| e["tool"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Runs `wait.js` (one call that the model makes run a long command: the
/// `LONG` command line, which carries the test's marker), interrupts dsh
/// once that command runs, and checks that the run was cancelled and that
/// nothing of the CLI survived it.
async fn cancel_a_long_command(w: &World, env: &[(&str, String)]) {
    w.write(
        "wait.js",
        r#"return await agent("Wait for it", { label: "waiter" });"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let child = w
        .dsh(
            &[
                "workflow",
                "run",
                "wait.js",
                "--events",
                "none",
                "--no-journal",
                "--events-file",
                &evs,
            ],
            env,
        )
        .spawn()
        .expect("spawn dsh");
    wait_event(&ev, "tool call", |e| e["activity"] == "tool-call").await;
    // The command runs (in a session of its own, for Claude Code and Qwen
    // Code), found by the marker in its arguments.
    let deadline = tokio::time::Instant::now() + RUN_BOUND;
    while !marked_processes(&w.marker)
        .iter()
        .any(|(_, cmd)| cmd.contains("time.sleep(3600)"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // SAFETY: signalling the dsh process this test spawned.
    unsafe { libc::kill(child.id().expect("pid") as i32, libc::SIGINT) };
    let out = tokio::time::timeout(RUN_BOUND, child.wait_with_output())
        .await
        .expect("dsh exits")
        .expect("wait");
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let events = events(&ev);
    common::assert_event_guarantees(&events);
    assert_eq!(common::agent_end(&events)["outcome"], "cancelled");
    assert_no_marked_processes(&w.marker);
}

/// The long command of [`cancel_a_long_command`], with `marker` in its
/// arguments.
fn long_command(marker: &str) -> String {
    format!("python3 -c 'import time; time.sleep(3600)' {marker}")
}

// ------------------------------------------------------------ Claude Code

/// The assistant turns so far in a Messages API request.
fn assistant_turns(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// The text of the last tool result in a request.
fn last_tool_result(body: &Value) -> String {
    cli_agents::tool_results(body).pop().unwrap_or_default()
}

fn is_messages(r: &Recorded) -> bool {
    cli_agents::is_messages(&r.method, &r.path)
}

/// A model that reads the README, edits it, checks `git status` and
/// answers through StructuredOutput.
fn fixing_model(r: &Recorded) -> Reply {
    if !is_messages(r) {
        return Reply::json(200, &json!({ "input_tokens": 1 }));
    }
    let body = r.json();
    match assistant_turns(&body) {
        0 => Reply::anthropic(
            "Looking around.",
            &[(
                "Bash",
                json!({ "command": "pwd && cat README.md", "description": "where am I" }),
            )],
            100,
            10,
        ),
        1 => {
            let cwd = last_tool_result(&body)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            Reply::anthropic(
                "",
                &[("Read", json!({ "file_path": format!("{cwd}/README.md") }))],
                120,
                11,
            )
        }
        2 => {
            let cwd = first_cwd(&body);
            Reply::anthropic(
                "",
                &[(
                    "Edit",
                    json!({ "file_path": format!("{cwd}/README.md"), "old_string": "hello world", "new_string": "hello, world" }),
                )],
                140,
                12,
            )
        }
        3 => Reply::anthropic(
            "",
            &[(
                "Bash",
                json!({ "command": "git status --short", "description": "status" }),
            )],
            160,
            13,
        ),
        _ => Reply::anthropic(
            "",
            &[(
                "StructuredOutput",
                json!({ "file": "README.md", "status": last_tool_result(&body).trim() }),
            )],
            180,
            14,
        ),
    }
}

/// The working directory the model learnt from its first tool result.
fn first_cwd(body: &Value) -> String {
    for m in body["messages"].as_array().into_iter().flatten() {
        for c in m["content"].as_array().into_iter().flatten() {
            if c["type"] == "tool_result" {
                let t = match &c["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                return t.lines().next().unwrap_or_default().to_string();
            }
        }
    }
    String::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_edits_a_worktree_and_answers_through_its_schema() {
    let Some(claude) = CLAUDE.program() else {
        return;
    };
    let w = World::new("claude-edit");
    let server = TestServer::with_handler(Box::new(fixing_model)).await;
    w.write("dsh.toml", &claude_toml(&claude, ""));
    w.write(
        "fix.js",
        r#"const r = await agent("Fix the greeting in README.md", {
  label: "fix", isolation: "worktree",
  schema: { type: "object", properties: { file: { type: "string" }, status: { type: "string" } },
            required: ["file", "status"], additionalProperties: false },
});
return { r, spent: budget.spent() };"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            "fix.js",
            "--events",
            "none",
            "--output",
            "result",
            "--budget",
            "100000",
            "--events-file",
            &evs,
        ],
        &claude_env(&server),
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let result: Value = serde_json::from_str(&stdout).expect("the result as JSON");
    // The answer, through Claude Code's own --json-schema.
    assert_eq!(
        result["value"]["r"],
        json!({ "file": "README.md", "status": "M README.md" })
    );
    // The model's five turns: 100+120+140+160+180 input, 10+…+14 output.
    assert_eq!(result["value"]["spent"], 60, "{result}");
    assert_eq!(result["usage"]["output"], 60, "{result}");
    assert_eq!(result["usage"]["input"], 700, "{result}");
    assert!(result["cost"].as_f64().is_some_and(|c| c > 0.0), "{result}");
    let events = events(&ev);
    common::assert_event_guarantees(&events);
    let end = common::agent_end(&events);
    assert_eq!(end["outcome"], "completed", "{end}");
    assert_eq!(end["usage"]["output"], 60);
    assert!(end["cost"].as_f64().is_some_and(|c| c > 0.0), "{end}");
    // What the model did, as activity events.
    assert_eq!(
        tool_calls(&events),
        ["Bash", "Read", "Edit", "Bash", "StructuredOutput"],
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["activity"] == "turn" && e["turn"] == 5),
        "{events:#?}"
    );
    // The edit happened in the kept worktree, on its branch; the checkout
    // is untouched.
    let branch = end["worktree"]["branch"].as_str().expect("a kept worktree");
    let path = PathBuf::from(end["worktree"]["path"].as_str().expect("its path"));
    assert_eq!(
        std::fs::read_to_string(path.join("README.md")).expect("read"),
        "hello, world\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.repo().join("README.md")).expect("read"),
        "hello world\n"
    );
    assert!(git(&w.repo(), &["branch", "--list", branch]).contains(branch));
    // The model was shown what the tools really returned.
    let seen = server.requests();
    let bodies: Vec<Value> = seen
        .iter()
        .filter(|r| is_messages(r))
        .map(Recorded::json)
        .collect();
    assert!(last_tool_result(&bodies[1]).contains("hello world"));
    assert!(
        last_tool_result(&bodies[2]).contains("hello world"),
        "the Read result"
    );
    // The call's schema reached the model as Claude Code's StructuredOutput tool.
    let so = bodies[0]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "StructuredOutput"))
        .expect("a StructuredOutput tool");
    assert_eq!(so["input_schema"]["required"], json!(["file", "status"]));
    assert_no_marked_processes(&w.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_claude_code_call_leaves_no_process_behind() {
    let Some(claude) = CLAUDE.program() else {
        return;
    };
    let w = World::new("claude-cancel");
    let long = long_command(&w.marker);
    let server = TestServer::with_handler(Box::new(move |r: &Recorded| {
        if !is_messages(r) {
            return Reply::json(200, &json!({ "input_tokens": 1 }));
        }
        match assistant_turns(&r.json()) {
            0 => Reply::anthropic(
                "",
                &[(
                    "Bash",
                    json!({ "command": long, "description": "wait", "timeout": 600000 }),
                )],
                10,
                1,
            ),
            _ => Reply::Hang,
        }
    }))
    .await;
    w.write("dsh.toml", &claude_toml(&claude, ""));
    cancel_a_long_command(&w, &claude_env(&server)).await;
}

/// Runs `stall.js` (one call with `stallMs`) against a model that sends
/// the head of its answer and then nothing: the call must fail as
/// stalled, the model must have been reached once and never again, and
/// nothing of the CLI may survive. `is_model` tells the model's requests
/// from the CLI's others.
async fn stall_scenario(
    w: &World,
    server: &TestServer,
    env: &[(&str, String)],
    is_model: fn(&Recorded) -> bool,
) {
    w.write(
        "stall.js",
        r#"const a = await agent("Think hard", { label: "thinker", stallMs: 15000 });
return { a };"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            "stall.js",
            "--events",
            "none",
            "--no-journal",
            "--events-file",
            &evs,
        ],
        env,
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!({ "a": null })
    );
    let events = events(&ev);
    let end = common::agent_end(&events);
    assert_eq!(end["outcome"], "failed", "{end}");
    assert!(
        end["reason"]
            .as_str()
            .is_some_and(|r| r.contains("stalled")),
        "{end}"
    );
    // The model was reached (the stall is its silence, not a slow start),
    // and the call was never retried.
    assert_eq!(
        server.requests().iter().filter(|r| is_model(r)).count(),
        1,
        "{:?}",
        server
            .requests()
            .iter()
            .map(|r| r.path.clone())
            .collect::<Vec<_>>()
    );
    assert_no_marked_processes(&w.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_call_that_stops_streaming_is_stalled_and_stopped() {
    let Some(claude) = CLAUDE.program() else {
        return;
    };
    let w = World::new("claude-stall");
    // The first turn streams its head and then nothing more.
    let server = TestServer::with_handler(Box::new(|r: &Recorded| {
        if !is_messages(r) {
            return Reply::json(200, &json!({ "input_tokens": 1 }));
        }
        Reply::Stall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
                .to_vec(),
        )
    }))
    .await;
    w.write("dsh.toml", &claude_toml(&claude, ""));
    stall_scenario(&w, &server, &claude_env(&server), is_messages).await;
}

/// Whether a Messages API request is the continuation dsh asks for on a
/// resume.
fn continues(body: &Value) -> bool {
    body["messages"]
        .to_string()
        .contains("was interrupted before you gave your final answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_call_interrupted_by_a_killed_host_continues_its_session_on_resume() {
    let Some(claude) = CLAUDE.program() else {
        return;
    };
    let w = World::new("claude-resume");
    // The first turn runs a command; the second never answers — until the
    // call is continued on resume.
    let server = TestServer::with_handler(Box::new(|r: &Recorded| {
        if !is_messages(r) {
            return Reply::json(200, &json!({ "input_tokens": 1 }));
        }
        let body = r.json();
        if continues(&body) {
            return Reply::anthropic("finished after the resume", &[], 30, 3);
        }
        match assistant_turns(&body) {
            0 => Reply::anthropic(
                "",
                &[(
                    "Bash",
                    json!({ "command": "echo one > step1.txt", "description": "step one" }),
                )],
                10,
                1,
            ),
            _ => Reply::Hang,
        }
    }))
    .await;
    w.write("dsh.toml", &claude_toml(&claude, ""));
    w.write(
        "long.js",
        r#"return await agent("Do the long task", { label: "long" });"#,
    );
    let mut child = w
        .dsh(
            &["workflow", "run", "long.js", "--events", "none"],
            &claude_env(&server),
        )
        .spawn()
        .expect("spawn dsh");
    // The second turn is waiting for the model: the host dies.
    server
        .wait("the second turn", |s| {
            s.requests.iter().filter(|r| is_messages(r)).count() >= 2
        })
        .await;
    child.start_kill().expect("kill -9 dsh");
    let _ = child.wait().await;
    assert_no_marked_processes(&w.marker);
    assert_eq!(
        std::fs::read_to_string(w.repo().join("step1.txt")).expect("step one ran"),
        "one\n"
    );
    let run = common::only_run_id(&w.repo());
    let journal =
        std::fs::read_to_string(w.repo().join(".dsh/runs").join(&run).join("journal.jsonl"))
            .expect("journal");
    let session = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "session")
        .unwrap_or_else(|| panic!("a session line in {journal}"));
    assert_eq!(session["provider"], "claude");
    let (code, stdout, stderr) = output(w.dsh(
        &["workflow", "resume", &run, "--events", "none"],
        &claude_env(&server),
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!("finished after the resume")
    );
    // The continuation carried the interrupted conversation: the command
    // the model ran before the host died, and its result.
    let last = server
        .requests()
        .into_iter()
        .filter(is_messages)
        .map(|r| r.json())
        .find(continues)
        .expect("a continuation");
    let history = last["messages"].to_string();
    assert!(history.contains("echo one > step1.txt"), "{history}");
    assert!(history.contains("Do the long task"), "{history}");
    assert_no_marked_processes(&w.marker);
}

// ------------------------------------------------------------------ Codex

/// `CODEX_HOME` for a test: Codex's own configuration pointing at
/// `server` (a custom model provider, no login), nothing else of the
/// user's.
fn codex_home(w: &World, server: &TestServer) -> PathBuf {
    let home = w.dir.path().join("codex-home");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\n\
             base_url = \"{}\"\nwire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\n\
             [features]\nplugins = false\n",
            server.base_url()
        ),
    )
    .expect("write");
    home
}

fn codex_toml(program: &Path, extra: &str) -> String {
    format!(
        "[workflow]\nprovider = \"codex\"\n\n[providers.codex]\nkind = \"codex\"\n\
         program = \"{}\"\npermission_mode = \"workspace-write\"\nenv = [\"DSH_TEST_MARKER\"]\n{extra}",
        program.display()
    )
}

/// The tool outputs so far in a Responses API request, in order.
fn tool_outputs(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output")
        .map(|i| i["output"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The user messages' texts of a Responses API request.
fn user_texts(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .flat_map(|i| {
            i["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["text"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn exec(id: &str, cmd: &str) -> Value {
    json!({ "type": "function_call", "id": format!("fc_{id}"), "call_id": format!("call_{id}"),
            "name": "exec_command", "arguments": json!({ "cmd": cmd }).to_string(), "status": "completed" })
}

fn message(text: &str) -> Value {
    json!({ "type": "message", "id": "msg_x", "role": "assistant", "status": "completed",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }] })
}

/// A model that reads the README, patches it, checks `git status` and
/// answers with JSON.
fn codex_fixing_model(r: &Recorded) -> Reply {
    if r.method != "POST" || !r.path.ends_with("/responses") {
        return Reply::status(404, "not here");
    }
    let body = r.json();
    let outs = tool_outputs(&body);
    match outs.len() {
        0 => Reply::responses(&[exec("1", "cat README.md")], 100, 10),
        1 => Reply::responses(
            &[
                json!({ "type": "custom_tool_call", "id": "ctc_2", "call_id": "call_2", "name": "apply_patch",
                      "input": "*** Begin Patch\n*** Update File: README.md\n@@\n-hello world\n+hello, world\n*** End Patch\n",
                      "status": "completed" }),
            ],
            200,
            20,
        ),
        2 => Reply::responses(&[exec("3", "git status --short")], 300, 30),
        _ => {
            let status = outs[2]
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_string();
            Reply::responses(
                &[message(
                    &json!({ "file": "README.md", "status": status }).to_string(),
                )],
                400,
                40,
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_edits_a_worktree_and_answers_through_its_output_schema() {
    let Some(codex) = cli_agents::CODEX.program() else {
        return;
    };
    let w = World::new("codex-edit");
    let server = TestServer::with_handler(Box::new(codex_fixing_model)).await;
    let home = codex_home(&w, &server);
    w.write("dsh.toml", &codex_toml(&codex, ""));
    w.write(
        "fix.js",
        r#"const r = await agent("Fix the greeting in README.md", {
  label: "fix", isolation: "worktree",
  schema: { type: "object", properties: { file: { type: "string" }, status: { type: "string" } },
            required: ["file", "status"], additionalProperties: false },
});
return { r, spent: budget.spent() };"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            "fix.js",
            "--events",
            "none",
            "--output",
            "result",
            "--budget",
            "100000",
            "--events-file",
            &evs,
        ],
        &[("CODEX_HOME", home.display().to_string())],
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let result: Value = serde_json::from_str(&stdout).expect("the result as JSON");
    assert_eq!(
        result["value"]["r"],
        json!({ "file": "README.md", "status": "M README.md" }),
        "{result}"
    );
    // Four model requests: 100+200+300+400 in, 10+20+30+40 out; Codex
    // reports no cost.
    assert_eq!(result["value"]["spent"], 100, "{result}");
    assert_eq!(result["usage"]["input"], 1000, "{result}");
    assert!(result.get("cost").is_none(), "{result}");
    let events = events(&ev);
    common::assert_event_guarantees(&events);
    let end = common::agent_end(&events);
    assert_eq!(end["outcome"], "completed", "{end}");
    assert_eq!(
        tool_calls(&events),
        ["shell", "apply_patch", "shell"],
        "{events:#?}"
    );
    // The patch landed in the kept worktree only.
    let path = PathBuf::from(end["worktree"]["path"].as_str().expect("a kept worktree"));
    assert_eq!(
        std::fs::read_to_string(path.join("README.md")).expect("read"),
        "hello, world\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.repo().join("README.md")).expect("read"),
        "hello world\n"
    );
    // The command really ran in the worktree, and the schema reached the
    // model as Codex's strict output format.
    let bodies: Vec<Value> = server.requests().iter().map(Recorded::json).collect();
    assert!(
        tool_outputs(&bodies[1])[0].contains("hello world"),
        "{:?}",
        tool_outputs(&bodies[1])
    );
    assert_eq!(bodies[0]["text"]["format"]["type"], "json_schema");
    assert_eq!(
        bodies[0]["text"]["format"]["schema"]["required"],
        json!(["file", "status"])
    );
    assert_no_marked_processes(&w.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_gets_a_loose_schema_in_its_prompt_and_one_corrective_turn_in_its_session() {
    let Some(codex) = cli_agents::CODEX.program() else {
        return;
    };
    let w = World::new("codex-correct");
    // First a wrong answer, then (in the resumed thread) a right one.
    let server = TestServer::with_handler(Box::new(|r: &Recorded| {
        let body = r.json();
        let corrected = user_texts(&body)
            .iter()
            .any(|t| t.contains("does not match the schema"));
        if corrected {
            Reply::responses(&[message("{\"count\": 2}")], 50, 5)
        } else {
            Reply::responses(&[message("{\"count\": \"two\"}")], 40, 4)
        }
    }))
    .await;
    let home = codex_home(&w, &server);
    w.write("dsh.toml", &codex_toml(&codex, ""));
    // Not strict (no additionalProperties: false): Codex cannot take it.
    w.write(
        "count.js",
        r#"return await agent("Count the files", { label: "count",
  schema: { type: "object", properties: { count: { type: "integer" } }, required: ["count"] } });"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            "count.js",
            "--events",
            "none",
            "--output",
            "result",
            "--events-file",
            &evs,
        ],
        &[("CODEX_HOME", home.display().to_string())],
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let result: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(result["value"], json!({ "count": 2 }), "{result}");
    // Both runs counted once each (Codex's totals are the thread's).
    assert_eq!(result["usage"]["input"], 90, "{result}");
    assert_eq!(result["usage"]["output"], 9, "{result}");
    let bodies: Vec<Value> = server.requests().iter().map(Recorded::json).collect();
    assert_eq!(bodies.len(), 2);
    assert!(
        bodies[0]["text"].get("format").is_none(),
        "{}",
        bodies[0]["text"]
    );
    assert!(
        user_texts(&bodies[0])
            .iter()
            .any(|t| t.contains("\"required\":[\"count\"]"))
    );
    // The corrective turn continued the thread: the wrong answer is in its
    // history.
    let history = bodies[1]["input"].to_string();
    assert!(history.contains("two"), "{history}");
    let events = events(&ev);
    assert!(
        events.iter().any(|e| e["activity"] == "retry"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("corrective"))),
        "{events:#?}"
    );
    assert_no_marked_processes(&w.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_codex_call_leaves_no_process_behind() {
    let Some(codex) = cli_agents::CODEX.program() else {
        return;
    };
    let w = World::new("codex-cancel");
    let long = long_command(&w.marker);
    let server = TestServer::with_handler(Box::new(move |r: &Recorded| {
        if tool_outputs(&r.json()).is_empty() {
            Reply::responses(&[exec("1", &long)], 10, 1)
        } else {
            Reply::Hang
        }
    }))
    .await;
    let home = codex_home(&w, &server);
    w.write("dsh.toml", &codex_toml(&codex, ""));
    cancel_a_long_command(&w, &[("CODEX_HOME", home.display().to_string())]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_cost_budget_reaches_claude_code_as_its_own_cap() {
    let Some(claude) = CLAUDE.program() else {
        return;
    };
    let w = World::new("claude-budget");
    let server = TestServer::with_handler(Box::new(fixing_model)).await;
    w.write("dsh.toml", &claude_toml(&claude, ""));
    w.write(
        "spend.js",
        r#"return await agent("Fix the greeting", { label: "fix" });"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    // Far less than one turn costs: Claude Code stops itself after it.
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            "spend.js",
            "--events",
            "none",
            "--no-journal",
            "--budget-usd",
            "0.000001",
            "--events-file",
            &evs,
        ],
        &claude_env(&server),
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stdout.trim(), "null");
    let end = common::agent_end(&events(&ev)).clone();
    assert_eq!(end["outcome"], "failed", "{end}");
    assert!(
        end["reason"]
            .as_str()
            .is_some_and(|r| r.contains("error_max_budget_usd")),
        "{end}"
    );
    assert!(end["cost"].as_f64().is_some_and(|c| c > 0.0), "{end}");
    assert_eq!(
        server.requests().iter().filter(|r| is_messages(r)).count(),
        1
    );
    assert_no_marked_processes(&w.marker);
}

// ------------------------------------------------ the fix-todos example

/// A repository with two TODO comments.
fn todo_world(test: &str) -> World {
    let w = World::new(test);
    w.write("README.md", "hello world\nTODO: describe usage\n");
    w.write(
        "src/lib.rs",
        "// TODO: say what add does\npub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
    );
    git(&w.repo(), &["commit", "-qam", "todos"]);
    w
}

/// The TODO of a fix prompt: `(file, line)`.
fn todo_of(prompt: &str) -> Option<(String, usize)> {
    let at = prompt.split("Resolve the TODO comment at ").nth(1)?;
    let place = at.split(' ').next()?;
    let (file, line) = place.rsplit_once(':')?;
    Some((file.to_string(), line.parse().ok()?))
}

/// What replaces each TODO line.
fn replacement(file: &str) -> &'static str {
    if file.ends_with(".md") {
        "Call add(a, b) to add two numbers."
    } else {
        "/// Adds two numbers."
    }
}

/// `grep -rn TODO` output as the survey's answer.
fn todos_of(grep: &str) -> Value {
    let todos: Vec<Value> = grep
        .lines()
        .filter_map(|l| {
            let mut p = l.splitn(3, ':');
            let file = p.next()?.trim_start_matches("./");
            let line: u64 = p.next()?.parse().ok()?;
            let text = p.next()?.trim().trim_start_matches("//").trim();
            Some(json!({ "file": file, "line": line, "text": text }))
        })
        .collect();
    json!({ "todos": todos })
}

const GREP: &str = "grep -rn TODO --include=*.rs --include=*.md . | sort";

/// Claude Code as the example's agents: the explorer greps, each fixer
/// reads its file and edits the TODO away.
fn claude_todo_model(r: &Recorded) -> Reply {
    if !is_messages(r) {
        return Reply::json(200, &json!({ "input_tokens": 1 }));
    }
    let body = r.json();
    // The call's prompt is in the first user message (as JSON text here:
    // enough to find what it asks).
    let prompt = body["messages"].to_string();
    let turns = assistant_turns(&body);
    if prompt.contains("List the TODO comments") {
        return match turns {
            0 => Reply::anthropic(
                "",
                &[(
                    "Bash",
                    json!({ "command": GREP, "description": "find TODOs" }),
                )],
                50,
                5,
            ),
            _ => Reply::anthropic(
                "",
                &[("StructuredOutput", todos_of(&last_tool_result(&body)))],
                60,
                6,
            ),
        };
    }
    let Some((file, line)) = todo_of(&prompt) else {
        return Reply::anthropic("I do not know what to do.", &[], 1, 1);
    };
    match turns {
        0 => Reply::anthropic(
            "",
            &[("Bash", json!({ "command": "pwd", "description": "where" }))],
            70,
            7,
        ),
        1 => Reply::anthropic(
            "",
            &[(
                "Read",
                json!({ "file_path": format!("{}/{file}", first_cwd(&body)) }),
            )],
            80,
            8,
        ),
        2 => {
            let content = last_tool_result(&body);
            // Read shows `N\tline`; the TODO's own line.
            let old = content
                .lines()
                .find_map(|l| {
                    let (n, rest) = l.trim_start().split_once('\t')?;
                    (n.parse::<usize>().ok()? == line).then(|| rest.to_string())
                })
                .unwrap_or_default();
            Reply::anthropic(
                "",
                &[(
                    "Edit",
                    json!({ "file_path": format!("{}/{file}", first_cwd(&body)), "old_string": old, "new_string": replacement(&file) }),
                )],
                90,
                9,
            )
        }
        _ => Reply::anthropic(
            "",
            &[(
                "StructuredOutput",
                json!({ "changed": true, "summary": format!("resolved the TODO in {file}") }),
            )],
            100,
            10,
        ),
    }
}

/// Codex as the example's agents: the explorer greps, each fixer patches
/// its TODO away.
fn codex_todo_model(r: &Recorded) -> Reply {
    let body = r.json();
    let prompt = user_texts(&body).join("\n");
    let outs = tool_outputs(&body);
    if prompt.contains("List the TODO comments") {
        return match outs.len() {
            0 => Reply::responses(&[exec("s1", GREP)], 50, 5),
            _ => {
                // Codex's output has a header before the command's own.
                let grep = outs[0].split("Output:\n").last().unwrap_or_default();
                Reply::responses(&[message(&todos_of(grep).to_string())], 60, 6)
            }
        };
    }
    let Some((file, _)) = todo_of(&prompt) else {
        return Reply::responses(&[message("I do not know what to do.")], 1, 1);
    };
    let old = if file.ends_with(".md") {
        "TODO: describe usage"
    } else {
        "// TODO: say what add does"
    };
    match outs.len() {
        0 => Reply::responses(
            &[
                json!({ "type": "custom_tool_call", "id": "ctc_f", "call_id": "call_f", "name": "apply_patch",
                      "input": format!("*** Begin Patch\n*** Update File: {file}\n@@\n-{old}\n+{}\n*** End Patch\n", replacement(&file)),
                      "status": "completed" }),
            ],
            70,
            7,
        ),
        _ => Reply::responses(
            &[message(
                &json!({ "changed": true, "summary": format!("resolved the TODO in {file}") })
                    .to_string(),
            )],
            80,
            8,
        ),
    }
}

/// Runs the fix-todos example in `w` and checks its result, branches and
/// activity.
async fn run_fix_todos(w: &World, env: &[(&str, String)], fixer_tools: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/examples/fix-todos.ts");
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            &script.display().to_string(),
            "--events",
            "none",
            "--events-file",
            &evs,
        ],
        env,
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let value: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(
        value,
        json!({ "found": 2, "results": [
            { "todo": "README.md:2", "changed": true, "summary": "resolved the TODO in README.md" },
            { "todo": "src/lib.rs:1", "changed": true, "summary": "resolved the TODO in src/lib.rs" },
        ] }),
        "stderr: {stderr}"
    );
    let events = events(&ev);
    common::assert_event_guarantees(&events);
    // Each fix on its own branch; the checkout untouched.
    for e in events
        .iter()
        .filter(|e| e["type"] == "workflow/agent-end" && e["label"] != "survey")
    {
        let path = PathBuf::from(
            e["worktree"]["path"]
                .as_str()
                .unwrap_or_else(|| panic!("{e}")),
        );
        let label = e["label"].as_str().expect("label");
        let file = label.split(':').next().expect("file");
        let text = std::fs::read_to_string(path.join(file)).expect("read");
        assert!(!text.contains("TODO"), "{label}: {text}");
        assert!(text.contains(replacement(file)), "{label}: {text}");
    }
    assert!(git(&w.repo(), &["grep", "-c", "TODO"]).contains("README.md:1"));
    let branches = git(&w.repo(), &["branch", "--list", "dsh/*"]);
    assert_eq!(branches.lines().count(), 2, "{branches}");
    let calls = tool_calls(&events);
    for t in fixer_tools {
        assert!(calls.iter().any(|c| c == t), "{t} in {calls:?}");
    }
    // `show` reads the run back: three agents, their tokens.
    let run = common::only_run_id(&w.repo());
    let (code, shown, _) = output(w.dsh(&["workflow", "show", &run], &[])).await;
    assert_eq!(code, Some(0));
    assert!(shown.contains("3 done, 0 failed"), "{shown}");
    assert_no_marked_processes(&w.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fix_todos_example_through_claude_code() {
    let Some(claude) = CLAUDE.program() else {
        return;
    };
    let w = todo_world("todos-claude");
    let server = TestServer::with_handler(Box::new(claude_todo_model)).await;
    w.write("dsh.toml", &claude_toml(&claude, ""));
    git(&w.repo(), &["add", "dsh.toml"]);
    git(&w.repo(), &["commit", "-qm", "config"]);
    run_fix_todos(
        &w,
        &claude_env(&server),
        &["Bash", "Read", "Edit", "StructuredOutput"],
    )
    .await;
    // The survey ran as Claude Code's own Explore agent: no editing tools.
    let survey = server
        .requests()
        .into_iter()
        .filter(is_messages)
        .map(|r| r.json())
        .find(|b| b["messages"].to_string().contains("List the TODO comments"))
        .expect("the survey's request");
    let tools: Vec<&str> = survey["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        !tools.contains(&"Edit") && !tools.contains(&"Write"),
        "{tools:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fix_todos_example_through_codex() {
    let Some(codex) = cli_agents::CODEX.program() else {
        return;
    };
    let w = todo_world("todos-codex");
    let server = TestServer::with_handler(Box::new(codex_todo_model)).await;
    let home = codex_home(&w, &server);
    w.write("dsh.toml", &codex_toml(&codex, ""));
    git(&w.repo(), &["add", "dsh.toml"]);
    git(&w.repo(), &["commit", "-qm", "config"]);
    run_fix_todos(
        &w,
        &[("CODEX_HOME", home.display().to_string())],
        &["shell", "apply_patch"],
    )
    .await;
    // The survey (agentType Explore) ran in Codex's read-only sandbox.
    let survey = server
        .requests()
        .iter()
        .map(Recorded::json)
        .find(|b| user_texts(b).join(" ").contains("List the TODO comments"))
        .expect("the survey's request");
    assert!(
        survey["input"].to_string().contains("read-only"),
        "the survey's sandbox: {}",
        survey["input"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_call_that_stops_streaming_is_stalled_and_stopped() {
    let Some(codex) = cli_agents::CODEX.program() else {
        return;
    };
    let w = World::new("codex-stall");
    let server = TestServer::with_handler(Box::new(|_: &Recorded| {
        Reply::Stall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_s\",\"status\":\"in_progress\",\"output\":[]}}\n\n"
                .to_vec(),
        )
    }))
    .await;
    let home = codex_home(&w, &server);
    w.write("dsh.toml", &codex_toml(&codex, ""));
    stall_scenario(
        &w,
        &server,
        &[("CODEX_HOME", home.display().to_string())],
        |r| r.path.ends_with("/responses"),
    )
    .await;
}

// ------------------------------------------------------------ Qwen Code

/// A home for Qwen Code: its settings point it at an OpenAI-compatible
/// endpoint (the environment's), with nothing sent anywhere else and no
/// extra requests of its own.
fn qwen_home(w: &World) -> PathBuf {
    let home = w.home();
    std::fs::create_dir_all(home.join(".qwen")).expect("mkdir");
    std::fs::write(
        home.join(".qwen/settings.json"),
        json!({
            "security": { "auth": { "selectedType": "openai" }, "folderTrust": { "enabled": false } },
            "model": { "generationConfig": { "maxRetries": 0, "retryInitialDelayMs": 100, "retryMaxDelayMs": 200 } },
            "privacy": { "usageStatisticsEnabled": false },
            "telemetry": { "enabled": false },
            "general": { "enableAutoUpdate": false, "preventSystemSleep": false },
            "tools": { "useRipgrep": false },
            "memory": { "enableManagedAutoMemory": false, "enableManagedAutoDream": false, "enableAutoSkill": false }
        })
        .to_string(),
    )
    .expect("write");
    home
}

fn qwen_env(server: &TestServer) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", server.base_url()),
        ("OPENAI_API_KEY", "sk-qwen-test".into()),
        ("OPENAI_MODEL", "fake-model".into()),
        ("QWEN_CODE_NO_RELAUNCH", "true".into()),
        ("QWEN_USAGE_STATISTICS_ENABLED", "false".into()),
        ("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1".into()),
    ]
}

fn qwen_toml(program: &Path) -> String {
    format!(
        "[workflow]\nprovider = \"qwen\"\n\n[providers.qwen]\nkind = \"qwen\"\n\
         program = \"{}\"\npermission_mode = \"yolo\"\nenv = [\"DSH_TEST_MARKER\"]\n",
        program.display()
    )
}

/// The tool results so far in a chat-completions request.
fn chat_tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            other => other.to_string(),
        })
        .collect()
}

/// The working directory Qwen Code tells its model about.
fn qwen_cwd(body: &Value) -> String {
    let first = chat_tool_results(body)
        .into_iter()
        .next()
        .unwrap_or_default();
    // `pwd`'s output, whatever the shell tool wraps around it.
    first
        .split(['\n', '|'])
        .map(str::trim)
        .map(|l| l.strip_prefix("Output:").map_or(l, str::trim))
        .find(|l| l.starts_with('/'))
        .unwrap_or_default()
        .to_string()
}

fn qwen_fixing_model(r: &Recorded) -> Reply {
    if r.method != "POST" || !r.path.ends_with("/chat/completions") {
        return Reply::status(404, "not here");
    }
    let body = r.json();
    let results = chat_tool_results(&body);
    match results.len() {
        0 => Reply::stream_tools(
            &[(
                "run_shell_command",
                json!({ "command": "pwd", "description": "where" }),
            )],
            100,
            10,
        ),
        1 => Reply::stream_tools(
            &[(
                "read_file",
                json!({ "file_path": format!("{}/README.md", qwen_cwd(&body)) }),
            )],
            120,
            11,
        ),
        2 => Reply::stream_tools(
            &[(
                "edit",
                json!({ "file_path": format!("{}/README.md", qwen_cwd(&body)), "old_string": "hello world", "new_string": "hello, world" }),
            )],
            140,
            12,
        ),
        3 => Reply::stream_tools(
            &[(
                "run_shell_command",
                json!({ "command": "git status --short", "description": "status" }),
            )],
            160,
            13,
        ),
        _ => {
            let status = results[3]
                .split(['\n', '|'])
                .map(str::trim)
                .map(|l| l.strip_prefix("Output:").map_or(l, str::trim))
                .find(|l| l.ends_with("README.md"))
                .unwrap_or_default()
                .to_string();
            Reply::stream_tools(
                &[(
                    "structured_output",
                    json!({ "file": "README.md", "status": status }),
                )],
                180,
                14,
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_code_edits_a_worktree_and_answers_through_its_schema() {
    let Some(qwen) = cli_agents::QWEN.program() else {
        return;
    };
    let w = World::new("qwen-edit");
    qwen_home(&w);
    let server = TestServer::with_handler(Box::new(qwen_fixing_model)).await;
    w.write("dsh.toml", &qwen_toml(&qwen));
    w.write(
        "fix.js",
        r#"const r = await agent("Fix the greeting in README.md", {
  label: "fix", isolation: "worktree",
  schema: { type: "object", properties: { file: { type: "string" }, status: { type: "string" } },
            required: ["file", "status"], additionalProperties: false },
});
return { r, spent: budget.spent() };"#,
    );
    let ev = w.dir.path().join("events.jsonl");
    let evs = ev.display().to_string();
    let (code, stdout, stderr) = output(w.dsh(
        &[
            "workflow",
            "run",
            "fix.js",
            "--events",
            "none",
            "--output",
            "result",
            "--events-file",
            &evs,
        ],
        &qwen_env(&server),
    ))
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let result: Value = serde_json::from_str(&stdout).expect("the result as JSON");
    assert_eq!(
        result["value"]["r"],
        json!({ "file": "README.md", "status": "M README.md" }),
        "{result}"
    );
    assert_eq!(result["value"]["spent"], 60, "{result}");
    assert_eq!(result["usage"]["input"], 700, "{result}");
    let events = events(&ev);
    common::assert_event_guarantees(&events);
    let end = common::agent_end(&events);
    assert_eq!(end["outcome"], "completed", "{end}");
    assert_eq!(
        tool_calls(&events),
        [
            "run_shell_command",
            "read_file",
            "edit",
            "run_shell_command",
            "structured_output"
        ],
        "{events:#?}"
    );
    let path = PathBuf::from(end["worktree"]["path"].as_str().expect("a kept worktree"));
    assert_eq!(
        std::fs::read_to_string(path.join("README.md")).expect("read"),
        "hello, world\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.repo().join("README.md")).expect("read"),
        "hello world\n"
    );
    let bodies: Vec<Value> = server.requests().iter().map(Recorded::json).collect();
    assert!(
        chat_tool_results(&bodies[2])[1].contains("hello world"),
        "the read_file result"
    );
    // The schema reached the model as Qwen Code's structured_output tool.
    assert!(
        bodies[0]["tools"].to_string().contains("structured_output"),
        "{}",
        bodies[0]["tools"]
    );
    assert_no_marked_processes(&w.marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_qwen_code_call_leaves_no_process_behind() {
    let Some(qwen) = cli_agents::QWEN.program() else {
        return;
    };
    let w = World::new("qwen-cancel");
    qwen_home(&w);
    let long = long_command(&w.marker);
    let server = TestServer::with_handler(Box::new(move |r: &Recorded| {
        if chat_tool_results(&r.json()).is_empty() {
            Reply::stream_tools(
                &[(
                    "run_shell_command",
                    json!({ "command": long, "description": "wait" }),
                )],
                10,
                1,
            )
        } else {
            Reply::Hang
        }
    }))
    .await;
    w.write("dsh.toml", &qwen_toml(&qwen));
    cancel_a_long_command(&w, &qwen_env(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qwen_code_call_that_stops_streaming_is_stalled_and_stopped() {
    let Some(qwen) = cli_agents::QWEN.program() else {
        return;
    };
    let w = World::new("qwen-stall");
    qwen_home(&w);
    let server = TestServer::with_handler(Box::new(|_: &Recorded| {
        Reply::Stall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n"
                .to_vec(),
        )
    }))
    .await;
    w.write("dsh.toml", &qwen_toml(&qwen));
    stall_scenario(&w, &server, &qwen_env(&server), |r| {
        r.path.ends_with("/chat/completions")
    })
    .await;
}

// ------------------------------------------------ dsh workflow providers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_probes_each_real_cli_without_calling_a_model() {
    let (Some(claude), Some(codex), Some(qwen)) = (
        CLAUDE.program(),
        cli_agents::CODEX.program(),
        cli_agents::QWEN.program(),
    ) else {
        return;
    };
    let w = World::new("providers");
    // A model server that would notice any call.
    let server = TestServer::with_handler(Box::new(|_: &Recorded| Reply::status(500, "no"))).await;
    w.write(
        "dsh.toml",
        &format!(
            "[providers.c]\nkind = \"claude-code\"\nprogram = \"{}\"\n\n[providers.x]\nkind = \"codex\"\nprogram = \"{}\"\n\n\
             [providers.q]\nkind = \"qwen\"\nprogram = \"{}\"\n",
            claude.display(),
            codex.display(),
            qwen.display()
        ),
    );
    let mut env = claude_env(&server);
    env.push(("OPENAI_API_KEY", "sk-q".into()));
    env.push((
        "CODEX_HOME",
        w.dir.path().join("codex-home").display().to_string(),
    ));
    let (code, stdout, stderr) = output(w.dsh(&["workflow", "providers"], &env)).await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let line = |kind: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(kind) && l.contains("tested"))
            .unwrap_or_else(|| panic!("no {kind} line in:\n{stdout}"))
            .to_string()
    };
    let c = line("claude-code");
    assert!(
        c.contains("2.1.332, tested; logged in: api_key from ANTHROPIC_API_KEY"),
        "{c}"
    );
    let x = line("codex");
    assert!(x.contains("0.171.0, tested; not logged in"), "{x}");
    let q = line("qwen");
    assert!(
        q.contains("0.24.4, tested; logged in: OPENAI_API_KEY is set"),
        "{q}"
    );
    // The configured entries are usable.
    for name in ["c", "x", "q"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{name} ")) && l.contains("usable:")),
            "{name}:\n{stdout}"
        );
    }
    assert!(server.requests().is_empty(), "no model was called");
}
