//! `dsh workflow run --store` and `runs --store` against a real PostgreSQL
//! (where it comes from: `store/tests/pg/mod.rs`): the run's record,
//! journal and result land in the store, the listing reads them back, and
//! a bad or unreachable store is a clear error that keeps nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../store/tests/pg/mod.rs"]
mod pg;

use std::process::{Command, Stdio};

use common::{DSH, Workspace};
use serde_json::{Value, json};

const SCRIPT: &str = r#"export const meta = { name: "stored", description: "kept in the store" };
const a = await agent("first", { label: "a" });
const b = await agent("second", { label: "b" });
return [a, b];
"#;

fn fixture() -> Value {
    json!({"version": 1, "answers": [
        {"match": {"label": "a"}, "text": "A"},
        {"match": {"label": "b"}, "text": "B"}
    ]})
}

fn runs(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let out = Command::new(DSH)
        .current_dir(dir)
        .args(["workflow", "runs"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("dsh workflow runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_kept_in_the_store_is_journaled_there_and_listed() {
    let Some(url) = pg::database().await else {
        return;
    };
    let ws = Workspace::new("wf.ts", SCRIPT, Some(&fixture()));
    let dir = ws.dir.path().to_path_buf();
    let out = ws.run(&["--store", &url, "--output", "result"]);
    out.assert_code(0);
    let result = out.json();
    assert_eq!(result["value"], json!(["A", "B"]), "{}", out.stdout);
    // No run directory: the run is in the store.
    assert!(!dir.join(".dsh/runs").exists());

    let rows = pg::query(
        &url,
        "SELECT id, info, attempt, result, source FROM dsh_runs",
    )
    .await;
    assert_eq!(rows.len(), 1);
    let id: String = rows[0].get(0);
    let info: Value = rows[0].get(1);
    let doc: Option<Value> = rows[0].get(3);
    let source: String = rows[0].get(4);
    assert_eq!(info["name"], "stored");
    assert_eq!(info["id"], id.as_str());
    assert_eq!(source, SCRIPT);
    let doc = doc.expect("the result is recorded");
    assert_eq!(doc["result"]["stopReason"], "completed");
    assert_eq!(
        (doc["live"].as_u64(), doc["replayed"].as_u64()),
        (Some(2), Some(0))
    );

    // The journal: the attempt, then each call started and settled, in
    // order, as journal.jsonl would have them.
    let lines: Vec<Value> = pg::query(&url, "SELECT line FROM dsh_journal ORDER BY seq")
        .await
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).expect("a journal line"))
        .collect();
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(kinds.first(), Some(&"attempt"), "{kinds:?}");
    let labels: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "start")
        .map(|l| l["label"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(labels, ["a", "b"], "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["type"] != "start" && l["type"] != "attempt")
            .count(),
        2,
        "{lines:?}"
    );

    // The run's events, as events.jsonl would have them: from its start
    // to its end, each call's start and end between.
    let events: Vec<Value> = pg::query(&url, "SELECT event FROM dsh_events ORDER BY seq")
        .await
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).expect("an event"))
        .collect();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(types.first(), Some(&"workflow/start"), "{types:?}");
    assert_eq!(types.last(), Some(&"workflow/end"), "{types:?}");
    assert_eq!(
        types.iter().filter(|t| **t == "workflow/agent-end").count(),
        2,
        "{types:?}"
    );
    assert_eq!(events, out.events, "the store has what --events-file has");

    // Listed from the store, from anywhere (here: another directory).
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let (code, stdout, stderr) = runs(elsewhere.path(), &["--store", &url], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&id), "{stdout}");
    assert!(
        stdout.contains("stored") && stdout.contains("completed"),
        "{stdout}"
    );
    assert!(stdout.contains("2/0/0"), "{stdout}");

    // Shown from the store, call by call, as a run directory is.
    let shown = Command::new(DSH)
        .current_dir(elsewhere.path())
        .args(["workflow", "show", &id, "--store", &url, "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("dsh workflow show");
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("show's JSON");
    assert_eq!(shown["runId"], id.as_str());
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["totals"]["completed"], 2);
    let labels: Vec<&str> = shown["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["label"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(labels, ["a", "b"]);

    // And reported from the store: its calls and its logs.
    let reported = Command::new(DSH)
        .current_dir(elsewhere.path())
        .args(["workflow", "report", &id, "--store", &url])
        .stdin(Stdio::null())
        .output()
        .expect("dsh workflow report");
    assert_eq!(
        reported.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&reported.stderr)
    );
    let html =
        std::fs::read_to_string(elsewhere.path().join(format!("{id}.html"))).expect("the report");
    assert!(html.contains("stored") && html.contains("first"), "{html}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_also_named_by_dsh_store_and_by_dsh_toml() {
    let Some(url) = pg::database().await else {
        return;
    };
    let by_env = Workspace::new("wf.ts", SCRIPT, Some(&fixture())).with_env("DSH_STORE", &url);
    by_env.run(&[]).assert_code(0);
    let ws = Workspace::new("wf.ts", SCRIPT, Some(&fixture()));
    ws.file("dsh.toml", &format!("[store]\nurl = \"{url}\"\n"));
    let dir = ws.dir.path().to_path_buf();
    // The output owns the directory: kept until the listing below.
    let out = ws.run(&[]);
    out.assert_code(0);
    let rows = pg::query(
        &url,
        "SELECT count(*) FROM dsh_runs WHERE result IS NOT NULL",
    )
    .await;
    assert_eq!(rows[0].get::<_, i64>(0), 2);
    // `runs` in that directory reads the same [store].
    let (code, stdout, stderr) = runs(&dir, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.contains("completed")).count(),
        2,
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_cannot_start_leaves_no_record() {
    let Some(url) = pg::database().await else {
        return;
    };
    let ws = Workspace::new("wf.ts", "return (;", Some(&fixture()));
    let out = ws.run(&["--store", &url]);
    out.assert_code(2);
    out.assert_error_line("SCRIPT_PARSE");
    // The schema may or may not exist: the store was never opened.
    let rows = pg::query(
        &url,
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'dsh_runs'",
    )
    .await;
    if rows[0].get::<_, i64>(0) == 1 {
        assert_eq!(
            pg::query(&url, "SELECT count(*) FROM dsh_runs").await[0].get::<_, i64>(0),
            0
        );
    }
}

/// Errors that need no database: they say where the URL came from, never
/// its password, and keep nothing.
#[rstest::rstest]
#[case::not_postgres(&["--store", "mysql://ann:s3cret@127.0.0.1/x"], "--store: store URL mysql://ann:***@127.0.0.1/x: not a PostgreSQL URL")]
#[case::no_journal(&["--store", "postgres://ann@127.0.0.1/x", "--no-journal"], "--no-journal and a store exclude each other")]
fn a_bad_store_is_a_usage_error(#[case] args: &[&str], #[case] says: &str) {
    let ws = Workspace::new("wf.ts", SCRIPT, Some(&fixture()));
    let out = ws.run(args);
    out.assert_code(2);
    out.assert_error_line("USAGE");
    assert!(out.stderr.contains(says), "{}", out.stderr);
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

#[test]
fn an_unreachable_store_is_said_at_once() {
    // A loopback port nobody listens on: the connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://ann:s3cret@127.0.0.1:{port}/x");
    let ws = Workspace::new("wf.ts", SCRIPT, Some(&fixture()));
    let dir = ws.dir.path().to_path_buf();
    let out = ws.run(&["--store", &url]);
    out.assert_code(2);
    out.assert_error_line("USAGE");
    assert!(
        out.stderr
            .contains("cannot connect to postgres://ann@127.0.0.1"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    assert!(!dir.join(".dsh/runs").exists());
    let (code, _, stderr) = runs(&dir, &["--store", &url], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

fn resume(
    dir: &std::path::Path,
    id: &str,
    url: &str,
    fixture: &std::path::Path,
) -> std::process::Output {
    Command::new(DSH)
        .current_dir(dir)
        .args(["workflow", "resume", id, "--store", url, "--fixture"])
        .arg(fixture)
        .args(["--output", "result", "--events", "none"])
        .stdin(Stdio::null())
        .output()
        .expect("dsh workflow resume")
}

/// The process running a stored run dies (kill -9) with one call
/// answered and one in flight. While it lived, a resume elsewhere was
/// refused; once it is gone, a resume with nothing but the store's URL —
/// another directory, no run directory anywhere — replays the answered
/// call, runs the other, and records the run's result as its second
/// attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_run_whose_process_died_is_resumed_from_the_store() {
    let Some(url) = pg::database().await else {
        return;
    };
    let first = json!({"version": 1, "answers": [
        {"match": {"label": "a"}, "text": "A"},
        {"match": {"label": "b"}, "hang": true}
    ]});
    let ws = Workspace::new("wf.ts", SCRIPT, Some(&first));
    let mut running = ws.spawn(&["--store", &url]);
    running.wait_for_event("the start of b", |e| {
        e["type"] == "workflow/agent-start" && e["label"] == "b"
    });
    let id: String = pg::query(&url, "SELECT id FROM dsh_runs").await[0].get(0);

    let elsewhere = tempfile::tempdir().expect("tempdir");
    let second = elsewhere.path().join("answers.json");
    std::fs::write(
        &second,
        json!({"version": 1, "answers": [
            {"match": {"label": "a"}, "text": "A, asked again"},
            {"match": {"label": "b"}, "text": "B"}
        ]})
        .to_string(),
    )
    .expect("fixture");
    let status = Command::new(DSH)
        .args(["workflow", "show", &id, "--store", &url, "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("dsh workflow show");
    let status: Value = serde_json::from_slice(&status.stdout).expect("show's JSON");
    assert_eq!(status["status"], "running", "{status}");
    let held = resume(elsewhere.path(), &id, &url, &second);
    let stderr = String::from_utf8_lossy(&held.stderr);
    assert_eq!(held.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("another process holds it"), "{stderr}");

    running.signal(libc::SIGKILL);
    let deadline = std::time::Instant::now() + common::WAIT_BOUND;
    while !running.exited() {
        assert!(std::time::Instant::now() < deadline, "dsh outlived SIGKILL");
        std::thread::sleep(common::POLL);
    }
    drop(running);

    let out = resume(elsewhere.path(), &id, &url, &second);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).expect("the result");
    assert_eq!(result["value"], json!(["A", "B"]), "{result}");
    assert!(!elsewhere.path().join(".dsh").exists());

    let rows = pg::query(&url, "SELECT attempt, result FROM dsh_runs").await;
    assert_eq!(rows[0].get::<_, i32>(0), 2);
    let doc: Value = rows[0].get::<_, Option<Value>>(1).expect("a result");
    assert_eq!(doc["result"]["stopReason"], "completed");
    assert_eq!(
        (doc["replayed"].as_u64(), doc["live"].as_u64()),
        (Some(1), Some(1))
    );
    let attempts = pg::query(
        &url,
        "SELECT count(*) FROM dsh_journal WHERE line LIKE '{\"type\":\"attempt\"%'",
    )
    .await;
    assert_eq!(attempts[0].get::<_, i64>(0), 2);
}
