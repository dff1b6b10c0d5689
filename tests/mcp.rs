//! `dsh workflow mcp` against real MCP clients: the official Python SDK
//! (`mcp` from PyPI, driven by `tests/mcp/client.py`) over stdio and
//! streamable HTTP, and Claude Code itself, its model played by a loopback
//! server that makes it write a workflow and run it through the tools.
//!
//! The Python SDK is looked up as `$DSH_TEST_MCP_PYTHON`, then in
//! `~/.cache/dsh-mcp-py` (installed there from PyPI when missing; `.ci/run`
//! installs it first). Only a machine where that cannot be done skips
//! these tests, and says so on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_agents;
mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod test_server;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_server::{Recorded, Reply, TestServer};

use common::DSH;

/// The pinned SDK version.
const MCP_SDK: &str = "mcp==2.3.0";

/// Longest a scenario may take here (it waits on runs of a few seconds; a
/// loaded machine takes longer).
const SCENARIO_BOUND: Duration = Duration::from_secs(300);

/// The fixture every run of these tests is answered from.
const FIXTURE: &str = r#"{"version": 1, "answers": [
  {"match": {"promptContains": "slow answer"}, "text": "late", "delayMs": 8000},
  {"match": {}, "text": "ok"}
]}"#;

/// A Python with the MCP SDK, installing it when missing.
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DSH_TEST_MCP_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let venv = home.join(".cache/dsh-mcp-py");
    let py = venv.join("bin/python");
    let has_sdk = |py: &Path| {
        Command::new(py)
            .args(["-c", "import mcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_sdk(&py) {
        return Some(py);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin/pip"))
            .args(["install", "-q", MCP_SDK])
            .status()
            .is_ok_and(|s| s.success());
    if made && has_sdk(&py) {
        return Some(py);
    }
    eprintln!(
        "SKIPPED: the Python MCP SDK ({MCP_SDK}) could not be installed in {}; these tests need it",
        venv.display()
    );
    None
}

/// A directory with the fixture, and the `dsh workflow mcp` command line
/// that serves runs kept under it.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fixture.json"), FIXTURE).unwrap();
        World { dir }
    }

    fn runs(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    fn server_args(&self, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "workflow".into(),
            "mcp".into(),
            "--runs-dir".into(),
            self.runs().display().to_string(),
            "--fixture".into(),
            self.dir.path().join("fixture.json").display().to_string(),
            "--allow-dir".into(),
            self.dir.path().display().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    /// Runs `tests/mcp/client.py SCENARIO` against the server over stdio.
    fn stdio(&self, py: &Path, scenario: &str, extra: &[&str]) -> Value {
        let mut args = vec![scenario.to_string(), "stdio".into(), DSH.into()];
        args.extend(self.server_args(extra));
        client(py, &args, self.dir.path())
    }

    /// Processes still running whose command line names this world.
    fn processes(&self) -> Vec<String> {
        let needle = self.dir.path().display().to_string();
        let mut found = Vec::new();
        for pid in common::all_pids() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let zombie = common::proc_stat(pid).is_some_and(|(state, ..)| state == 'Z');
            if cmdline.contains(&needle) && !zombie {
                found.push(format!("{pid}: {cmdline}"));
            }
        }
        found
    }

    /// Waits (bounded) until no process of this world is left.
    fn assert_no_process_left(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = self.processes();
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "processes left behind: {left:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs the Python client and reads what it printed.
fn client(py: &Path, args: &[String], cwd: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let mut child = Command::new(py)
        .arg(script)
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + SCENARIO_BOUND;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the MCP client did not finish within {SCENARIO_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "client failed ({status}):\n{out}\n{err}");
    serde_json::from_str(out.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("client printed no JSON ({e}):\n{out}\n{err}"))
}

#[test]
fn a_client_writes_a_workflow_runs_it_and_reads_its_result() {
    let Some(py) = python() else { return };
    let w = World::new();
    let out = w.stdio(&py, "inline", &[]);
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "workflow_cancel",
            "workflow_list",
            "workflow_result",
            "workflow_resume",
            "workflow_runs",
            "workflow_start",
            "workflow_status"
        ]
    );
    // The start tool teaches the language to a model that never saw it.
    let doc = out["startDescription"].as_str().unwrap();
    for needle in [
        "agent(",
        "parallel(",
        "pipeline(",
        "phase(",
        "schema",
        "return",
    ] {
        assert!(doc.contains(needle), "{needle} is not taught:\n{doc}");
    }
    assert_eq!(out["start"]["isError"], false, "{}", out["start"]);
    let id = out["start"]["structured"]["runId"].as_str().unwrap();
    assert!(id.starts_with("run-"), "{id}");
    let status = &out["status"]["structured"];
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["agents"]["completed"], 3, "{status}");
    assert_eq!(status["phase"], "Sum up", "{status}");
    assert_eq!(status["logs"], json!(["starting 3"]), "{status}");
    let result = &out["result"]["structured"];
    assert_eq!(
        result["value"],
        json!({"answers": ["ok", "ok", "ok"], "count": 3}),
        "{result}"
    );
    assert_eq!(result["stopReason"], "completed");
    assert_eq!(result["runId"], id);
    // The run is an ordinary run directory: `dsh workflow show` reads it.
    let runs = out["runs"]["structured"]["runs"].as_array().unwrap();
    assert_eq!(runs[0]["runId"], id);
    assert_eq!(runs[0]["name"], "mcp-inline");
    assert!(w.runs().join(id).join("result.json").is_file());
    // The inline script waited for its run only: the run keeps its copy.
    assert_eq!(
        std::fs::read_dir(w.runs().join(".mcp")).unwrap().count(),
        0,
        "inline scripts left behind"
    );
    let resources: Vec<&str> = out["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        resources.contains(&format!("dsh://runs/{id}/result").as_str())
            && resources.contains(&format!("dsh://runs/{id}/report").as_str()),
        "{resources:?}"
    );
    assert_eq!(out["resourceResult"]["value"], result["value"]);
    w.assert_no_process_left();
}

#[test]
fn a_long_run_sends_progress_is_cancelled_and_resumed() {
    let Some(py) = python() else { return };
    let w = World::new();
    let out = w.stdio(&py, "cancel-resume", &[]);
    let id = out["start"]["structured"]["runId"].as_str().unwrap();
    // A bounded wait on a run that goes on: it answers "running" at the
    // end of the wait, and progress notifications came meanwhile.
    assert_eq!(out["waiting"]["structured"]["status"], "running");
    assert_eq!(out["waiting"]["structured"]["agents"]["running"], 1);
    let progress = out["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress notification: {out}");
    assert!(
        progress[0]["message"]
            .as_str()
            .unwrap()
            .contains("running (Wait): 1 running"),
        "{progress:?}"
    );
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert_eq!(out["early"]["isError"], true);
    assert!(
        out["early"]["text"]
            .as_str()
            .unwrap()
            .contains("still running")
    );
    assert_eq!(out["cancel"]["structured"]["status"], "cancelling");
    assert_eq!(out["cancelled"]["structured"]["status"], "cancelled");
    let cancelled = &out["cancelledResult"]["structured"];
    assert_eq!(cancelled["stopReason"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["error"]["code"], "CANCELLED", "{cancelled}");
    assert_eq!(out["resume"]["structured"]["runId"], id);
    assert_eq!(out["resumed"]["structured"]["status"], "completed");
    // A resumed attempt counts its own calls.
    assert_eq!(out["resumed"]["structured"]["agents"]["completed"], 1);
    assert_eq!(out["resumed"]["structured"]["agents"]["failed"], 0);
    assert_eq!(out["resumedResult"]["structured"]["value"], "late");
    w.assert_no_process_left();
}

#[test]
fn hostile_requests_get_clear_errors_and_the_server_stays_up() {
    let Some(py) = python() else { return };
    let w = World::new();
    let out = w.stdio(&py, "hostile", &["--max-runs", "2"]);
    let said = |key: &str| -> String {
        let v = &out[key];
        assert_eq!(v["isError"], true, "{key} was not refused: {v}");
        v["text"].as_str().unwrap().to_string()
    };
    assert!(said("noSource").contains("exactly one of name"));
    assert!(said("twoSources").contains("exactly one of name"));
    let parse = said("parseError");
    assert!(parse.contains("inline.ts:1:11"), "{parse}");
    assert!(said("outside").contains("outside the directories"));
    assert!(said("missing").contains("no-such-file.ts"));
    assert!(said("unknownName").contains("workflow_list"));
    assert!(said("tooManyAgents").contains("ceiling of 100"));
    assert!(said("tooLong").contains("ceiling of 3600s"));
    assert!(said("badBudget").contains("budgetUsd"));
    assert!(said("unknownField").contains("unknown field `sandbox`"));
    assert!(said("hugeScript").contains("more than the 1048576"));
    assert!(said("wrongType").contains("invalid type"));
    assert!(said("statusUnknown").contains("no such run"));
    assert!(said("resultUnknown").contains("no such run"));
    assert!(said("cancelUnknown").contains("not a path"));
    // A flood of starts: at most --max-runs run, the others are refused
    // with the reason; every one is answered.
    let flood = out["flood"].as_array().unwrap();
    assert_eq!(flood.len(), 6);
    let started = flood.iter().filter(|r| r["isError"] == false).count();
    assert!((1..=2).contains(&started), "{flood:?}");
    for r in flood.iter().filter(|r| r["isError"] == true) {
        assert!(r["text"].as_str().unwrap().contains("--max-runs"), "{r}");
    }
    assert_eq!(out["after"].as_array().unwrap().len(), 7);
    w.assert_no_process_left();
}

/// Raw bytes on the server's stdin: a line that is not JSON and one far
/// over the transport's limit are dropped; the server answers the next
/// request, and its memory stays bounded.
#[test]
fn garbage_and_oversized_lines_do_not_take_the_server_down() {
    let w = World::new();
    let mut server = Command::new(DSH)
        .args(w.server_args(&[]))
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let huge = vec![b'a'; 40 << 20];
    stdin.write_all(b"this is not json\n").unwrap();
    stdin.write_all(&huge).unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin
        .write_all(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
    let mut stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["serverInfo"]["name"], "dsh", "{answer}");
    let rss_kb = std::fs::read_to_string(format!("/proc/{}/status", server.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap();
    // The 40 MiB line was never held whole (the transport's limit is 16 MiB).
    assert!(rss_kb < 40 << 10, "peak memory {rss_kb} kB");
    drop(stdin);
    // Its client gone, the server ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server outlived its stdin");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server on streamable HTTP, with a bearer token: the SDK's HTTP
/// client runs a workflow through it; a request without the token is
/// refused with 401.
#[test]
fn streamable_http_with_a_bearer_token() {
    let Some(py) = python() else { return };
    let w = World::new();
    let token = "a-token-long-enough-to-use";
    let mut server = common::Ended(
        Command::new(DSH)
            .args(w.server_args(&["--http", "127.0.0.1:0"]))
            .env("DSH_MCP_TOKEN", token)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The address it bound, from its first line.
    let mut err = std::io::BufReader::new(server.0.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut err, &mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("dsh: MCP on ")
        .unwrap_or_else(|| panic!("no address: {line}"))
        .to_string();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    // No token: refused before MCP is spoken.
    let mut raw = std::net::TcpStream::connect(&addr).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    write!(
        raw,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let out = client(
        &py,
        &[
            "inline".into(),
            "http".into(),
            url.clone(),
            token.to_string(),
        ],
        w.dir.path(),
    );
    assert_eq!(out["status"]["structured"]["status"], "completed", "{out}");
    assert_eq!(out["result"]["structured"]["value"]["count"], 3, "{out}");
    // SIGTERM ends the server; the runs it started are on disk.
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    w.assert_no_process_left();
}

/// Not on loopback without a token: refused at start, naming the fix.
#[test]
fn http_off_loopback_needs_a_token() {
    let w = World::new();
    let out = Command::new(DSH)
        .args(w.server_args(&["--http", "0.0.0.0:0"]))
        .env_remove("DSH_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("DSH_MCP_TOKEN"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// Claude Code as the client.

/// The script Claude Code's (scripted) model writes.
const CLAUDE_SCRIPT: &str = "phase(\"Ask\");\nconst [a, b] = await parallel([() => agent(\"first\"), () => agent(\"second\")]);\nreturn { joined: a + \"+\" + b };\n";

fn is_messages(r: &Recorded) -> bool {
    cli_agents::is_messages(&r.method, &r.path)
}

/// The model: finds the dsh tools (Claude Code defers MCP tools behind
/// ToolSearch), starts a workflow it wrote, waits for it, reads its
/// result and says it.
fn workflow_model(r: &Recorded) -> Reply {
    if !is_messages(r) {
        return Reply::json(200, &json!({ "input_tokens": 1 }));
    }
    let body = r.json();
    // Side requests (a title, a summary) have no tools: answer plainly.
    if body["tools"].as_array().is_none_or(|t| t.is_empty()) {
        return Reply::anthropic("MCP workflow", &[], 1, 1);
    }
    let results = cli_agents::tool_results(&body);
    let run_id = results
        .iter()
        .find_map(|t| {
            serde_json::from_str::<Value>(t)
                .ok()
                .and_then(|v| v["runId"].as_str().map(str::to_string))
        })
        .unwrap_or_default();
    let select = |tool: &str| {
        Reply::anthropic(
            "",
            &[(
                "ToolSearch",
                json!({ "query": format!("select:mcp__dsh__{tool}") }),
            )],
            10,
            2,
        )
    };
    match results.len() {
        0 => select("workflow_start"),
        1 => Reply::anthropic(
            "",
            &[(
                "mcp__dsh__workflow_start",
                json!({ "script": CLAUDE_SCRIPT }),
            )],
            10,
            2,
        ),
        2 => select("workflow_status"),
        3 => Reply::anthropic(
            "",
            &[(
                "mcp__dsh__workflow_status",
                json!({ "runId": run_id, "waitSeconds": 30 }),
            )],
            10,
            2,
        ),
        4 => select("workflow_result"),
        5 => Reply::anthropic(
            "",
            &[("mcp__dsh__workflow_result", json!({ "runId": run_id }))],
            10,
            2,
        ),
        _ => {
            let last = results.last().cloned().unwrap_or_default();
            Reply::anthropic(&format!("The workflow said: {last}"), &[], 10, 2)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_a_workflow_it_wrote_through_dsh() {
    let Some(claude) = cli_agents::CLAUDE.program() else {
        return;
    };
    let w = World::new();
    let home = w.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let server = TestServer::with_handler(Box::new(workflow_model)).await;
    let config = w.dir.path().join("mcp.json");
    std::fs::write(
        &config,
        json!({ "mcpServers": { "dsh": {
            "command": DSH,
            "args": w.server_args(&[]),
            "env": { "RUST_LOG": "off" },
        }}})
        .to_string(),
    )
    .unwrap();
    let mut c = tokio::process::Command::new(&claude);
    c.args([
        "-p",
        "Run a two-agent workflow with dsh and tell me what it returned.",
    ])
    .arg("--mcp-config")
    .arg(&config)
    .args([
        "--permission-mode",
        "bypassPermissions",
        "--output-format",
        "json",
    ])
    .current_dir(w.dir.path())
    .env("HOME", &home)
    .env("ANTHROPIC_BASE_URL", server.root_url())
    .env("ANTHROPIC_API_KEY", "sk-ant-test")
    .env("DISABLE_TELEMETRY", "1")
    .env("DISABLE_ERROR_REPORTING", "1")
    .env("DISABLE_AUTOUPDATER", "1")
    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    .env("IS_SANDBOX", "1")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let out = tokio::time::timeout(SCENARIO_BOUND, c.output())
        .await
        .expect("claude finished in time")
        .expect("claude runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "claude failed:\n{stdout}\n{stderr}");
    let said: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("claude printed no JSON ({e}):\n{stdout}\n{stderr}"));
    let text = said["result"].as_str().unwrap_or_default();
    // The value of the workflow it wrote, through workflow_result.
    assert!(text.contains("ok+ok"), "{said}");
    assert!(
        text.contains("\\\"stopReason\\\":\\\"completed\\\"")
            || text.contains("\"stopReason\":\"completed\""),
        "{said}"
    );
    // The run is dsh's own: kept in the runs directory, named inline.
    let runs: Vec<_> = std::fs::read_dir(w.runs())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(runs[0].path().join("run.json")).unwrap())
            .unwrap();
    assert_eq!(run_json["name"], "inline", "{run_json}");
    w.assert_no_process_left();
}

// ---------------------------------------------------------------------------
// The MCP tasks extension, with rmcp's own client (the Python SDK has no
// client side of it, and Claude Code does not implement it).

/// A client of the server over stdio that declares the tasks extension.
async fn tasks_client(
    w: &World,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::ServiceExt as _;
    use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
    let mut command = tokio::process::Command::new(DSH);
    command.args(w.server_args(&[])).env("RUST_LOG", "off");
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("dsh-tests", "1"),
    )
    .serve(transport)
    .await
    .unwrap()
}

/// Polls a task until it is terminal (bounded).
async fn task_end(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
    id: &str,
) -> rmcp::model::DetailedTask {
    use rmcp::model::GetTaskParams;
    let deadline = Instant::now() + SCENARIO_BOUND;
    loop {
        let info = client
            .peer()
            .get_task(GetTaskParams::new(id.to_string()))
            .await
            .unwrap();
        if info.task.status().is_terminal() {
            return info.task;
        }
        assert!(Instant::now() < deadline, "the task never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn start_request(script: &str) -> rmcp::model::CallToolRequestParams {
    rmcp::model::CallToolRequestParams::new("workflow_start")
        .with_arguments(serde_json::from_value(json!({ "script": script })).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_tasks_gets_the_run_as_a_task() {
    use rmcp::model::{CallToolResponse, CallToolResult, TaskPayload};
    let w = World::new();
    let client = tasks_client(&w).await;
    let script = "const a = await agent(\"one\");\nreturn { a };\n";
    let response = client.call_tool_once(start_request(script)).await.unwrap();
    let CallToolResponse::Task(create) = response else {
        panic!("a start made no task: {response:?}");
    };
    let task = task_end(&client, &create.task.task_id).await;
    let TaskPayload::Completed { result } = task.payload else {
        panic!("the task did not complete: {:?}", task.payload);
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    let value = result.structured_content.unwrap();
    assert_eq!(value["value"], json!({"a": "ok"}), "{value}");
    assert_eq!(value["stopReason"], "completed");
    // A refusal is an answer at once, not a task.
    let refused = client
        .call_tool_once(start_request("const = ;"))
        .await
        .unwrap();
    let CallToolResponse::Complete(refused) = refused else {
        panic!("a refused start made a task: {refused:?}");
    };
    assert_eq!(refused.is_error, Some(true));
    client.cancel().await.unwrap();
    w.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_task_cancels_its_run() {
    use rmcp::model::{CallToolResponse, CancelTaskParams, TaskStatus};
    let w = World::new();
    let client = tasks_client(&w).await;
    let response = client
        .call_tool_once(start_request("return await agent(\"slow answer\");"))
        .await
        .unwrap();
    let CallToolResponse::Task(create) = response else {
        panic!("a start made no task: {response:?}");
    };
    client
        .peer()
        .cancel_task(CancelTaskParams::new(create.task.task_id.clone()))
        .await
        .unwrap();
    let task = task_end(&client, &create.task.task_id).await;
    assert_eq!(task.status(), TaskStatus::Cancelled);
    // The run itself settled as cancelled, well before its 8 s answer.
    let run = std::fs::read_dir(w.runs())
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .unwrap();
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(run.path().join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["result"]["stopReason"], "cancelled", "{result}");
    client.cancel().await.unwrap();
    w.assert_no_process_left();
}
