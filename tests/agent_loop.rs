//! End-to-end tests of the agent loop of the API providers: real scripts
//! run through the library (the `dsh` binary as worker and as tool host)
//! with the `openai` and `anthropic` providers pointed at a scripted model
//! server on 127.0.0.1 that plays multi-turn conversations. The tools run
//! for real, sandboxed, in a temporary git repository; the tests check what
//! they did on disk, what the model was shown, the answer, the summed
//! usage, the activity events and the refusals.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod http_server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::lib::{finish, request};
use common::{DSH, events_of, git};
use dsh_orchestrator::providers::agent::{LoopSettings, ToolHost};
use dsh_orchestrator::providers::anthropic::{AnthropicConfig, AnthropicProvider};
use dsh_orchestrator::providers::openai::{OpenAiConfig, OpenAiProvider};
use dsh_orchestrator::{SandboxPolicy, WorkerCommand, start};
use http_server::{Reply, TestServer};
use serde_json::{Value, json};

/// A git repository with one commit: a small crate with a bug in `add`.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::create_dir_all(p.join("src")).expect("mkdir");
    std::fs::write(
        p.join("src/lib.rs"),
        "/// Adds two numbers.\npub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
    )
    .expect("write");
    std::fs::write(p.join("README.md"), "# calc\nA tiny calculator.\n").expect("write");
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-q", "-m", "init"]);
    dir
}

/// The loop's settings for `workspace`: every tool, the dsh binary as
/// tool host, best-effort sandbox.
fn settings(workspace: &Path, worktrees: &Path) -> LoopSettings {
    LoopSettings {
        tools: Some(
            ["Read", "Glob", "Grep", "LS", "Edit", "Write", "Bash"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        workspace: Some(workspace.to_path_buf()),
        worktree_dir: Some(worktrees.to_path_buf()),
        host: ToolHost {
            command: Some(WorkerCommand::dsh(DSH)),
            sandbox: SandboxPolicy::BestEffort,
        },
        ..LoopSettings::default()
    }
}

fn openai(server: &TestServer, agent: LoopSettings) -> Arc<OpenAiProvider> {
    let cfg = OpenAiConfig {
        base_url: server.base_url(),
        backoff: Duration::from_millis(1),
        agent,
        ..OpenAiConfig::default()
    };
    Arc::new(OpenAiProvider::with_key("deepseek", &cfg, "sk-e2e").expect("provider"))
}

/// The tool messages the model was sent in request `n` (0-based), in
/// order: `(tool_call_id, content)`.
fn tool_results(server: &TestServer, n: usize) -> Vec<(String, String)> {
    let body = server.requests()[n].json();
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The last tool result the model saw in request `n`.
fn last_result(server: &TestServer, n: usize) -> String {
    tool_results(server, n)
        .pop()
        .map(|(_, c)| c)
        .unwrap_or_else(|| panic!("no tool result in request {n}"))
}

fn activities(events: &[Value], kind: &str) -> Vec<Value> {
    events_of(events, "workflow/agent-activity")
        .into_iter()
        .filter(|e| e["activity"] == kind)
        .cloned()
        .collect()
}

/// The tools called, in the order of their `tool-call` events.
fn tools_called(events: &[Value]) -> Vec<String> {
    activities(events, "tool-call")
        .iter()
        .map(|e| e["tool"].as_str().unwrap_or("").to_string())
        .collect()
}

const FIX_SCHEMA: &str = "{ type: \"object\", properties: { fixed: { type: \"boolean\" }, file: { type: \"string\" } }, required: [\"fixed\", \"file\"], additionalProperties: false }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_searches_reads_edits_a_worktree_runs_bash_and_answers_with_a_schema() {
    let repo = repo();
    let worktrees = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(vec![
        Reply::stream_tools(&[("Glob", json!({ "pattern": "**/*.rs" }))], 100, 10),
        Reply::stream_tools(
            &[(
                "Grep",
                json!({ "pattern": "a - b", "output_mode": "content", "-n": true }),
            )],
            120,
            10,
        ),
        Reply::stream_tools(&[("Read", json!({ "file_path": "src/lib.rs" }))], 140, 10),
        Reply::stream_tools(
            &[(
                "Edit",
                json!({ "file_path": "src/lib.rs", "old_string": "a - b", "new_string": "a + b" }),
            )],
            160,
            10,
        ),
        Reply::stream_tools(
            &[(
                "Bash",
                json!({ "command": "grep -c 'a + b' src/lib.rs && git status --porcelain" }),
            )],
            180,
            10,
        ),
        Reply::stream_tools(
            &[(
                "StructuredOutput",
                json!({ "fixed": true, "file": "src/lib.rs" }),
            )],
            200,
            10,
        ),
    ])
    .await;
    let provider = openai(&server, settings(repo.path(), worktrees.path()));
    let script = format!(
        "return await agent(\"Fix the bug in add\", {{ schema: {FIX_SCHEMA}, isolation: \"worktree\", label: \"fix\" }});"
    );
    let run = start(request(&script).with_provider(provider)).expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "fixed": true, "file": "src/lib.rs" }));

    // What each tool gave the model, from the requests that followed.
    assert_eq!(server.requests().len(), 6);
    let glob = last_result(&server, 1);
    assert_eq!(glob.trim(), "src/lib.rs", "{glob}");
    let grep = last_result(&server, 2);
    assert!(
        grep.contains("src/lib.rs:3:") && grep.contains("a - b"),
        "{grep}"
    );
    let read = last_result(&server, 3);
    assert!(
        read.contains("     2\tpub fn add(a: i32, b: i32) -> i32 {"),
        "{read}"
    );
    let edit = last_result(&server, 4);
    assert!(edit.contains("src/lib.rs"), "{edit}");
    let bash = last_result(&server, 5);
    assert!(bash.starts_with("1\n"), "one fixed line: {bash}");
    assert!(bash.contains("M src/lib.rs"), "git sees the change: {bash}");
    // Tool results answer the calls they belong to.
    assert_eq!(tool_results(&server, 1)[0].0, "call_1");

    // The fix is in the kept worktree, on a branch; the checkout is untouched.
    let end = &events_of(&events, "workflow/agent-end")[0];
    assert_eq!(end["outcome"], "completed");
    assert_eq!(
        end["usage"],
        json!({ "input": 900, "output": 60 }),
        "summed over 6 turns"
    );
    let wt = PathBuf::from(end["worktree"]["path"].as_str().expect("a kept worktree"));
    let branch = end["worktree"]["branch"].as_str().expect("branch");
    assert!(branch.starts_with("dsh/"), "{branch}");
    let fixed = std::fs::read_to_string(wt.join("src/lib.rs")).expect("read");
    assert!(fixed.contains("a + b"), "{fixed}");
    let original = std::fs::read_to_string(repo.path().join("src/lib.rs")).expect("read");
    assert!(
        original.contains("a - b"),
        "the checkout is untouched: {original}"
    );

    // The activity a progress view shows: each tool call, in order, and
    // each ended ok; turns; tokens.
    assert_eq!(
        tools_called(&events),
        ["Glob", "Grep", "Read", "Edit", "Bash"]
    );
    let ends = activities(&events, "tool-end");
    assert_eq!(ends.len(), 5);
    assert!(ends.iter().all(|e| e["status"] == "ok"), "{ends:#?}");
    assert_eq!(activities(&events, "turn").len(), 6);
    assert!(!activities(&events, "tokens").is_empty());

    // The first request offered the tools and StructuredOutput, streamed.
    let first = server.requests()[0].json();
    assert_eq!(first["stream"], true);
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        offered,
        [
            "Read",
            "Glob",
            "Grep",
            "LS",
            "Edit",
            "Write",
            "Bash",
            "StructuredOutput"
        ]
    );
    let system = first["messages"][0]["content"].as_str().unwrap_or("");
    assert!(system.contains("StructuredOutput"), "{system}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_the_workspace_is_refused_and_shown() {
    let repo = repo();
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().join("escaped.txt");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let server = TestServer::start(vec![
        Reply::stream_tools(&[("Read", json!({ "file_path": "/etc/passwd" }))], 10, 1),
        Reply::stream_tools(
            &[(
                "Write",
                json!({ "file_path": target.display().to_string(), "content": "x" }),
            )],
            10,
            1,
        ),
        Reply::stream_tools(&[("Read", json!({ "file_path": "../../../../etc/hostname" }))], 10, 1),
        Reply::stream_tools(
            &[(
                "Bash",
                json!({ "command": format!("cat /etc/passwd; echo x > {}; exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", target.display()) }),
            )],
            10,
            1,
        ),
        Reply::stream_tools(&[("WebFetch", json!({ "url": "https://example.com" }))], 10, 1),
        Reply::stream_text("I could not leave the workspace.", 10, 1),
    ])
    .await;
    let worktrees = tempfile::tempdir().expect("tempdir");
    let provider = openai(&server, settings(repo.path(), worktrees.path()));
    let run = start(request("return await agent(\"Try to escape\");").with_provider(provider))
        .expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!("I could not leave the workspace."));

    let passwd = last_result(&server, 1);
    assert!(passwd.contains("outside the workspace"), "{passwd}");
    assert!(!passwd.contains("root:"), "{passwd}");
    let write = last_result(&server, 2);
    assert!(write.contains("outside the workspace"), "{write}");
    let dotdot = last_result(&server, 3);
    assert!(dotdot.contains("outside the workspace"), "{dotdot}");
    let bash = last_result(&server, 4);
    assert!(!bash.contains("root:"), "Bash read /etc/passwd: {bash}");
    assert!(
        !bash.contains("connected"),
        "Bash reached the network: {bash}"
    );
    assert!(!target.exists(), "a file was written outside the workspace");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the listener saw a connection"
    );
    let unknown = last_result(&server, 5);
    assert!(unknown.contains("not one of your tools"), "{unknown}");

    // The refusals are visible in the events.
    let ends = activities(&events, "tool-end");
    let statuses: Vec<&str> = ends
        .iter()
        .map(|e| e["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses[..3], ["denied", "denied", "denied"], "{ends:#?}");
    assert_eq!(statuses[4], "denied", "{ends:#?}");
    assert!(
        ends[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("/etc/passwd"),
        "{ends:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_by_default_and_explore_never_writes() {
    let repo = repo();
    let server = TestServer::start(vec![
        Reply::stream_tools(
            &[("Write", json!({ "file_path": "new.txt", "content": "x" }))],
            1,
            1,
        ),
        Reply::stream_text("done", 1, 1),
        Reply::stream_text("explored", 1, 1),
    ])
    .await;
    let agent = LoopSettings {
        tools: None,
        ..settings(repo.path(), repo.path())
    };
    let provider = openai(&server, agent);
    let run = start(
        request(
            "const a = await agent(\"Write a file\");\n\
             const b = await agent(\"Look around\", { agentType: \"Explore\" });\n\
             return [a, b];",
        )
        .with_provider(provider),
    )
    .expect("start");
    let (r, _events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    assert!(!repo.path().join("new.txt").exists());
    let refused = last_result(&server, 1);
    assert!(refused.contains("not one of your tools"), "{refused}");
    let offered = |n: usize| -> Vec<String> {
        server.requests()[n].json()["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(offered(0), ["Read", "Glob", "Grep", "LS"]);
    // The library run has no agent types: the call's type is its own
    // word here, and Explore still gets no writing tool.
    assert!(
        offered(2)
            .iter()
            .all(|t| !["Edit", "Write", "Bash"].contains(&t.as_str()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_keeps_calling_tools_stops_at_the_turn_limit() {
    let repo = repo();
    let replies = (0..10)
        .map(|_| Reply::stream_tools(&[("LS", json!({ "path": "." }))], 5, 1))
        .collect();
    let server = TestServer::start(replies).await;
    let agent = LoopSettings {
        max_turns: 3,
        ..settings(repo.path(), repo.path())
    };
    let run = start(
        request("return await agent(\"Loop forever\");").with_provider(openai(&server, agent)),
    )
    .expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, Value::Null, "agent() resolves null");
    let end = &events_of(&events, "workflow/agent-end")[0];
    assert_eq!(end["outcome"], "failed");
    let reason = end["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("max_turns") && reason.contains('3'),
        "{reason}"
    );
    assert_eq!(server.requests().len(), 3, "no fourth turn");
    assert_eq!(end["usage"], json!({ "input": 15, "output": 3 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stops_is_a_stall() {
    let repo = repo();
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking\"}}]}\n\n";
    let first = format!("{head}{:x}\r\n{chunk}\r\n", chunk.len());
    let server = TestServer::start(vec![Reply::Stall(first.into_bytes())]).await;
    let run = start(
        request("return await agent(\"Think\", { stallMs: 800 });")
            .with_provider(openai(&server, settings(repo.path(), repo.path()))),
    )
    .expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    let end = &events_of(&events, "workflow/agent-end")[0];
    assert_eq!(end["outcome"], "failed");
    let reason = end["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("stalled"), "{reason}");
    server.wait_dropped(1).await;
    assert_eq!(server.requests().len(), 1, "a stall is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_bash_call_leaves_no_process() {
    let repo = repo();
    let server = TestServer::start(vec![Reply::stream_tools(
        &[(
            "Bash",
            json!({ "command": "sleep 300 & echo $! > sleeper.pid; wait" }),
        )],
        1,
        1,
    )])
    .await;
    let run = start(
        request("return await agent(\"Wait a long time\");")
            .with_provider(openai(&server, settings(repo.path(), repo.path()))),
    )
    .expect("start");
    let pid_file = repo.path().join("sleeper.pid");
    let pid = tokio::time::timeout(common::WAIT_BOUND, async {
        loop {
            if let Ok(t) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = t.trim().parse::<u32>()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the Bash command started");
    run.cancel("the test cancels");
    let (r, events) = finish(run).await;
    assert_eq!(
        r.stop_reason,
        dsh_orchestrator::StopReason::Cancelled,
        "{r:?}"
    );
    let end = &events_of(&events, "workflow/agent-end")[0];
    assert_eq!(end["outcome"], "cancelled");
    common::assert_process_gone_async(pid).await;
}

/// The cancel test above failed now and then under load: the host's stop
/// is SIGTERM, 500 ms, SIGKILL, and a tool process that did not get the
/// CPU within those 500 ms to run its SIGTERM handler (which kills the
/// shell's group) died by the SIGKILL with the group alive; the shell went
/// by its parent-death signal, its background job stayed. The same,
/// deterministically: the tool process is stopped (SIGSTOP) before the
/// cancel, so its handler never runs; the call's sentinel kills the group
/// once the tool process is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_the_tool_process_cannot_run_leaves_no_process() {
    let repo = repo();
    let server = TestServer::start(vec![Reply::stream_tools(
        &[(
            "Bash",
            json!({ "command": "sleep 300 & echo $! $PPID > pids.txt; wait" }),
        )],
        1,
        1,
    )])
    .await;
    let run = start(
        request("return await agent(\"Wait a long time\");")
            .with_provider(openai(&server, settings(repo.path(), repo.path()))),
    )
    .expect("start");
    let pid_file = repo.path().join("pids.txt");
    let (sleeper, tool_process) = tokio::time::timeout(common::WAIT_BOUND, async {
        loop {
            if let Ok(t) = std::fs::read_to_string(&pid_file)
                && t.ends_with('\n')
                && let Some((a, b)) = t.trim().split_once(' ')
                && let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<i32>())
            {
                return (a, b);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the Bash command started");
    // SAFETY: plain syscall; the tool process is alive (its shell is
    // waiting on the sleeper), a descendant of this test.
    assert_eq!(unsafe { libc::kill(tool_process, libc::SIGSTOP) }, 0);
    run.cancel("the test cancels");
    let (r, _) = finish(run).await;
    assert_eq!(
        r.stop_reason,
        dsh_orchestrator::StopReason::Cancelled,
        "{r:?}"
    );
    common::assert_process_gone_async(sleeper).await;
}

/// Regression (issue 33): a host killed outright (SIGKILL) in the middle
/// of a Bash call. Its tool process dies by its parent-death signal and
/// the shell by its own, but the command's background job used to run on
/// (until a CPU limit an idle job never reaches); the call's sentinel now
/// kills the shell's whole group once the tool process is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_host_leaves_no_bash_background_job() {
    let repo = repo();
    let server = TestServer::start(vec![Reply::stream_tools(
        &[(
            "Bash",
            json!({ "command": "sleep 300 & echo $! > sleeper.pid; wait" }),
        )],
        1,
        1,
    )])
    .await;
    std::fs::write(
        repo.path().join("dsh.toml"),
        format!(
            "[workflow]\nprovider = \"deepseek\"\n\n[providers.deepseek]\nkind = \"openai\"\n\
             base_url = \"{}\"\napi_key_env = \"DSH_EXAMPLE_KEY\"\ntools = [\"Bash\"]\n",
            server.base_url()
        ),
    )
    .expect("write");
    std::fs::write(
        repo.path().join("wf.ts"),
        "return await agent(\"Wait a long time\");",
    )
    .expect("write");
    let mut host = tokio::process::Command::new(DSH)
        .args([
            "workflow",
            "run",
            "wf.ts",
            "--events",
            "none",
            "--no-journal",
        ])
        .current_dir(repo.path())
        .env("DSH_EXAMPLE_KEY", "sk-example")
        .env_remove("DSH_WORKER")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("dsh starts");
    let pid_file = repo.path().join("sleeper.pid");
    let pid = tokio::time::timeout(common::WAIT_BOUND, async {
        loop {
            if let Ok(t) = std::fs::read_to_string(&pid_file)
                && t.ends_with('\n')
                && let Ok(pid) = t.trim().parse::<u32>()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the Bash command started");
    host.start_kill().expect("SIGKILL dsh");
    host.wait().await.expect("dsh reaped");
    common::assert_process_gone_async(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_partly_streamed_answer_says_so() {
    let repo = repo();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\n";
    let cut = format!(
        "{head}data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"par\"}}}}]}}\n\n"
    );
    let server = TestServer::start(vec![
        Reply::Raw(cut.into_bytes()),
        Reply::stream_text("whole answer", 3, 2),
    ])
    .await;
    let run = start(
        request("return await agent(\"Answer\");")
            .with_provider(openai(&server, settings(repo.path(), repo.path()))),
    )
    .expect("start");
    let (r, events) = finish(run).await;
    assert_eq!(r.value, json!("whole answer"), "{r:?}");
    let retries = activities(&events, "retry");
    assert_eq!(retries.len(), 1, "{events:#?}");
    assert_eq!(retries[0]["partial"], true, "{retries:#?}");
    assert_eq!(retries[0]["attempt"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_provider_runs_the_same_loop() {
    let repo = repo();
    let server = TestServer::start(vec![
        Reply::anthropic(
            "Let me look.",
            &[("Glob", json!({ "pattern": "*.md" }))],
            50,
            5,
        ),
        Reply::anthropic("", &[("Read", json!({ "file_path": "README.md" }))], 60, 5),
        Reply::anthropic(
            "",
            &[(
                "StructuredOutput",
                json!({ "fixed": false, "file": "README.md" }),
            )],
            70,
            5,
        ),
    ])
    .await;
    let cfg = AnthropicConfig {
        base_url: server.root_url(),
        backoff: Duration::from_millis(1),
        agent: settings(repo.path(), repo.path()),
        ..AnthropicConfig::default()
    };
    let provider = Arc::new(AnthropicProvider::with_key("claude", &cfg, "sk-ant-e2e").expect("p"));
    // The script says the first 5 characters are shared with other calls
    // (Claude Code's sharedHeadLength): that head is its own block, marked
    // for the prompt cache.
    let script = format!(
        "return await agent(\"Read the readme\", {{ schema: {FIX_SCHEMA}, sharedHeadLength: 5 }});"
    );
    let run = start(request(&script).with_provider(provider)).expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    assert_eq!(r.value, json!({ "fixed": false, "file": "README.md" }));
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].header("x-api-key"), Some("sk-ant-e2e"));
    assert_eq!(seen[0].header("anthropic-version"), Some("2023-06-01"));
    let first = seen[0].json();
    assert_eq!(first["stream"], true);
    assert!(
        first["system"]
            .as_str()
            .unwrap_or("")
            .contains("StructuredOutput")
    );
    assert_eq!(first["tools"][0]["name"], "Read");
    let ephemeral = json!({ "type": "ephemeral" });
    assert_eq!(
        first["messages"][0]["content"],
        json!([
            { "type": "text", "text": "Read ", "cache_control": ephemeral },
            // The end of the conversation is marked too (a loop turn).
            { "type": "text", "text": "the readme", "cache_control": ephemeral },
        ])
    );
    assert!(first["tools"][0]["input_schema"].is_object());
    // The second turn carries the first one's tool use and its result.
    let second = seen[1].json();
    let msgs = second["messages"].as_array().expect("messages");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"][0],
        json!({ "type": "text", "text": "Let me look." })
    );
    assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
    assert_eq!(msgs[1]["content"][1]["input"], json!({ "pattern": "*.md" }));
    let result = &msgs[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], msgs[1]["content"][1]["id"]);
    assert_eq!(result["is_error"], false);
    assert_eq!(
        result["cache_control"], ephemeral,
        "the last block is marked"
    );
    assert!(msgs[1]["content"][1].get("cache_control").is_none());
    assert_eq!(result["content"].as_str().unwrap_or("").trim(), "README.md");
    let read = &seen[2].json()["messages"][4]["content"][0];
    assert!(
        read["content"]
            .as_str()
            .unwrap_or("")
            .contains("A tiny calculator."),
        "{read}"
    );
    let end = &events_of(&events, "workflow/agent-end")[0];
    assert_eq!(end["usage"], json!({ "input": 180, "output": 15 }));
}

/// A model played by rules, acting on what the tools really returned: a
/// survey prompt globs for Rust files and answers with the paths it got; a
/// review prompt reads the file and reports each line that calls
/// `unwrap()`.
fn reviewer_model(req: &http_server::Recorded) -> Reply {
    let body = req.json();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let reviewed = prompt
        .strip_prefix("Review ")
        .and_then(|r| r.split(' ').next())
        .map(str::to_string);
    if last["role"] != "tool" {
        return match &reviewed {
            None => Reply::stream_tools(&[("Glob", json!({ "pattern": "**/*.rs" }))], 50, 5),
            Some(file) => Reply::stream_tools(&[("Read", json!({ "file_path": file }))], 50, 5),
        };
    }
    let result = last["content"].as_str().unwrap_or("");
    match &reviewed {
        None => {
            let mut files: Vec<&str> = result.lines().filter(|l| l.ends_with(".rs")).collect();
            files.sort_unstable();
            Reply::stream_tools(&[("StructuredOutput", json!({ "files": files }))], 80, 10)
        }
        Some(file) => {
            let findings: Vec<Value> = result
                .lines()
                .filter_map(|l| {
                    let (n, text) = l.split_once('\t')?;
                    text.contains("unwrap()").then(|| {
                        json!({ "line": n.trim().parse::<u64>().unwrap_or(0), "severity": "medium", "message": "unwrap() panics on None/Err" })
                    })
                })
                .collect();
            Reply::stream_tools(
                &[(
                    "StructuredOutput",
                    json!({ "file": file, "findings": findings }),
                )],
                90,
                20,
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repo_review_example_reviews_a_repository_through_the_cli() {
    let repo = repo();
    std::fs::write(
        repo.path().join("src/main.rs"),
        "fn main() {\n    let n: i32 = std::env::args().nth(1).unwrap().parse().unwrap();\n    println!(\"{}\", calc::add(n, 1));\n}\n",
    )
    .expect("write");
    std::fs::create_dir_all(repo.path().join("target")).expect("mkdir");
    std::fs::write(repo.path().join(".gitignore"), "target/\n").expect("write");
    std::fs::write(repo.path().join("target/gen.rs"), "x.unwrap();\n").expect("write");
    let server = TestServer::with_handler(Box::new(reviewer_model)).await;
    std::fs::write(
        repo.path().join("dsh.toml"),
        format!(
            "[workflow]\nprovider = \"deepseek\"\n\n[providers.deepseek]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"DSH_EXAMPLE_KEY\"\n",
            server.base_url()
        ),
    )
    .expect("write");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/examples/repo-review.ts");
    let events = repo.path().join("events.jsonl");
    let out = tokio::process::Command::new(DSH)
        .args(["workflow", "run"])
        .arg(&script)
        .args([
            "--args",
            r#"{"focus":"panics"}"#,
            "--events",
            "none",
            "--no-journal",
        ])
        .arg("--events-file")
        .arg(&events)
        .current_dir(repo.path())
        .env("DSH_EXAMPLE_KEY", "sk-example")
        .env_remove("DSH_WORKER")
        .output()
        .await
        .expect("dsh runs");
    assert!(out.status.success(), "{out:?}");
    let value: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(
        value["files"],
        json!(["src/lib.rs", "src/main.rs"]),
        "{value}"
    );
    assert_eq!(
        value["findings"],
        json!([
            { "file": "src/main.rs", "line": 2, "severity": "medium", "message": "unwrap() panics on None/Err" },
        ]),
        "{value}"
    );
    // Survey plus two reviews, two turns each.
    assert_eq!(server.requests().len(), 6);
    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .expect("events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    common::assert_event_guarantees(&lines);
    let tools = tools_called(&lines);
    assert_eq!(
        tools.iter().filter(|t| **t == "Glob").count(),
        1,
        "{tools:?}"
    );
    assert_eq!(
        tools.iter().filter(|t| **t == "Read").count(),
        2,
        "{tools:?}"
    );
}

/// A call that rewrites its worktree's `.git` file to point at a git
/// directory of its own making, with a hook, cannot make the host run
/// that hook when the host keeps the worktree: the host's git commands use
/// the directories it recorded when it made the worktree, and no hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_whose_git_file_was_rewritten_runs_no_hook_on_the_host() {
    let repo = repo();
    let worktrees = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let marker = outside.path().join("hook-ran");
    let attack = format!(
        "mkdir -p fake/objects fake/refs/heads fake/hooks && \
         printf 'ref: refs/heads/main\\n' > fake/HEAD && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n' > fake/config && \
         printf '#!/bin/sh\\ntouch {m}\\n' > fake/hooks/post-checkout && \
         cp fake/hooks/post-checkout fake/hooks/reference-transaction && \
         chmod +x fake/hooks/* && \
         printf 'gitdir: %s/fake\\n' \"$PWD\" > .git && cat .git",
        m = marker.display()
    );
    let server = TestServer::start(vec![
        Reply::stream_tools(&[("Bash", json!({ "command": attack }))], 1, 1),
        Reply::stream_text("done", 1, 1),
    ])
    .await;
    let provider = openai(&server, settings(repo.path(), worktrees.path()));
    let run = start(
        request("return await agent(\"Break out\", { isolation: \"worktree\" });")
            .with_provider(provider),
    )
    .expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    let bash = last_result(&server, 1);
    assert!(bash.contains("gitdir: "), "the attack ran: {bash}");
    let end = &events_of(&events, "workflow/agent-end")[0];
    assert!(
        end["worktree"]["branch"]
            .as_str()
            .is_some_and(|b| b.starts_with("dsh/")),
        "{end}"
    );
    assert!(!marker.exists(), "the host ran the call's hook");
    // The branch is in the real repository.
    let branches = git(repo.path(), &["branch", "--list", "dsh/*"]);
    assert!(branches.contains("dsh/"), "{branches}");
}

/// A call that makes a git directory of its own (a copy of the real one,
/// with `core.fsmonitor` set to a command) and points its worktree's `.git`
/// at it: the host puts `.git` back before it keeps the worktree, so the
/// documented review step (`git -C <kept path> status`) runs none of the
/// call's commands and `git worktree remove` works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_worktree_has_its_own_git_file_back_before_the_user_reviews_it() {
    let repo = repo();
    let worktrees = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let marker = outside.path().join("fsmonitor-ran");
    let attack = format!(
        "admin=$(sed 's/^gitdir: //' .git) && \
         common=$(cd \"$admin\" && cd \"$(cat commondir)\" && pwd) && \
         cp -r \"$common\" fake && rm -rf fake/worktrees && \
         cp \"$admin/HEAD\" fake/HEAD && cp \"$admin/index\" fake/index && \
         printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> fake/config && \
         printf 'gitdir: %s/fake\\n' \"$PWD\" > .git && \
         echo changed >> README.md && cat .git",
        m = marker.display()
    );
    let server = TestServer::start(vec![
        Reply::stream_tools(&[("Bash", json!({ "command": attack }))], 1, 1),
        Reply::stream_text("done", 1, 1),
    ])
    .await;
    let provider = openai(&server, settings(repo.path(), worktrees.path()));
    let run = start(
        request("return await agent(\"Break out\", { isolation: \"worktree\" });")
            .with_provider(provider),
    )
    .expect("start");
    let (r, events) = finish(run).await;
    assert!(r.is_completed(), "{r:?}");
    let bash = last_result(&server, 1);
    assert!(bash.contains("/fake"), "the attack ran: {bash}");
    let end = &events_of(&events, "workflow/agent-end")[0];
    let kept = PathBuf::from(end["worktree"]["path"].as_str().expect("kept"));
    let dot_git = std::fs::read_to_string(kept.join(".git")).expect(".git is a file");
    assert!(!dot_git.contains("/fake"), "{dot_git}");
    // The review step the docs give.
    let status = git(&kept, &["status", "--porcelain"]);
    assert!(status.contains("README.md"), "{status}");
    git(&kept, &["diff"]);
    assert!(!marker.exists(), "the user's git ran the call's fsmonitor");
    git(
        repo.path(),
        &[
            "worktree",
            "remove",
            "--force",
            kept.to_str().expect("utf-8"),
        ],
    );
    assert!(!kept.exists());
}

/// Bash in a plain workspace can change what the user's next dsh run or
/// git command uses (Landlock cannot carve those paths out of the
/// workspace); the CLI says so on stderr, naming what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_changing_dsh_toml_or_claude_files_is_reported_to_the_user() {
    let repo = repo();
    let server = TestServer::start(vec![
        Reply::stream_tools(
            &[(
                "Bash",
                json!({ "command": "echo '# changed' >> dsh.toml && mkdir -p .claude/agents && echo x > .claude/agents/evil.md" }),
            )],
            1,
            1,
        ),
        Reply::stream_text("done", 1, 1),
    ])
    .await;
    std::fs::write(
        repo.path().join("dsh.toml"),
        format!(
            "[workflow]\nprovider = \"loop\"\n\n[providers.loop]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"DSH_EXAMPLE_KEY\"\ntools = [\"Bash\"]\n",
            server.base_url()
        ),
    )
    .expect("write");
    std::fs::write(
        repo.path().join("wf.ts"),
        "return await agent(\"change things\");\n",
    )
    .expect("write");
    let out = tokio::process::Command::new(DSH)
        .args([
            "workflow",
            "run",
            "wf.ts",
            "--events",
            "none",
            "--no-journal",
        ])
        .current_dir(repo.path())
        .env("DSH_EXAMPLE_KEY", "sk-example")
        .env_remove("DSH_WORKER")
        .output()
        .await
        .expect("dsh runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        std::fs::read_to_string(repo.path().join("dsh.toml"))
            .expect("dsh.toml")
            .contains("# changed"),
        "the command ran"
    );
    assert!(stderr.contains("a Bash tool call changed"), "{stderr}");
    assert!(
        stderr.contains("dsh.toml") && stderr.contains(".claude/agents/evil.md"),
        "{stderr}"
    );
}
