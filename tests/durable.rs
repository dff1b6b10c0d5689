//! Durable runs through the real `dsh`: `--record` then replay, the run
//! directory and its journal, `kill -9` of the host and `resume`, torn
//! journals, changed scripts, concurrent resumes, `runs` and `show`.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    Workspace, assert_event_guarantees, assert_mentions, children_of, dsh_in, events_of, fixture,
    outcomes, process_alive, read_events,
};
use serde_json::{Value, json};

/// The one run directory under `<dir>/.dsh/runs/`.
fn run_dir(dir: &Path) -> PathBuf {
    dir.join(".dsh/runs").join(run_id(dir))
}

fn run_id(dir: &Path) -> String {
    common::only_run_id(dir)
}

/// Labels → outcomes, from events.
fn label_outcomes(events: &[Value]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = events_of(events, "workflow/agent-end")
        .iter()
        .map(|e| {
            (
                e["label"].as_str().unwrap_or_default().to_string(),
                e["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

const MIXED: &str = r#"
const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] };
const [plan, data, refused] = await parallel([
  () => agent("make a plan", { label: "plan" }),
  () => agent("give data", { label: "data", schema }),
  () => agent("please refuse", { label: "refused" }),
]);
let broken = "no";
try { await agent("flaky one", { label: "flaky" }); } catch (e: any) { broken = e.code; }
const summary = await agent("summarize " + plan, { label: "summary", model: "m1" });
return { plan, data, refused, broken, summary, spent: budget.spent() };
"#;

fn mixed_fixture() -> Value {
    fixture(json!([
        { "match": { "label": "plan" }, "text": "1. parse", "delayMs": 30, "usage": { "input": 5, "output": 7 } },
        { "match": { "label": "data" }, "structured": { "ok": true }, "delayMs": 5 },
        { "match": { "label": "refused" }, "fail": "model refused" },
        { "match": { "label": "flaky" }, "resultError": "connection reset" },
        { "match": { "label": "summary" }, "text": "all good", "delayMs": 10, "usage": { "input": 1, "output": 2 } },
    ]))
}

#[test]
fn a_recorded_run_replays_to_the_same_result_and_outcomes() {
    let ws = Workspace::new("wf.ts", MIXED, Some(&mixed_fixture()));
    let dir = ws.dir.path().to_path_buf();
    let recorded = ws.run(&["--record", "rec.json", "--output", "result"]);
    recorded.assert_code(0);
    assert_event_guarantees(&recorded.events);
    let rec: Value = serde_json::from_str(
        &std::fs::read_to_string(recorded.dir.path().join("rec.json")).expect("rec.json"),
    )
    .expect("json");
    assert_eq!(rec["version"], 1);
    let answers = rec["answers"].as_array().expect("answers");
    assert_eq!(answers.len(), 5, "{rec:#}");
    assert!(answers.iter().all(|a| a["times"] == 1));
    assert_eq!(
        answers[4]["match"],
        json!({ "prompt": "summarize 1. parse", "model": "m1" })
    );
    assert_eq!(answers[3]["resultError"], "connection reset");

    // Replay the recording, offline, in a fresh workspace.
    let replay = Workspace::new("wf.ts", MIXED, None);
    let rec_path = replay.file("rec.json", &rec.to_string());
    let rec_arg = rec_path.display().to_string();
    let replayed = replay.run(&["--fixture", &rec_arg, "--output", "result"]);
    replayed.assert_code(0);
    assert_event_guarantees(&replayed.events);
    assert_eq!(replayed.json()["value"], recorded.json()["value"]);
    assert_eq!(replayed.json()["value"]["spent"], 9);
    assert_eq!(
        label_outcomes(&replayed.events),
        label_outcomes(&recorded.events)
    );
    drop(dir);
}

#[test]
fn every_run_keeps_a_run_directory_with_its_journal_and_result() {
    let ws = Workspace::new("wf.ts", MIXED, Some(&mixed_fixture()));
    let out = ws.run(&["--output", "result"]);
    out.assert_code(0);
    let dir = run_dir(out.dir.path());
    for f in [
        "run.json",
        "script.ts",
        "journal.jsonl",
        "result.json",
        "lock",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("script.ts")).expect("copy"),
        MIXED
    );
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).expect("run.json"))
            .expect("json");
    assert_eq!(info["name"], "wf");
    assert_eq!(info["limits"]["syncTimeoutMs"], 30000);
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("result.json")).expect("result.json"),
    )
    .expect("json");
    assert_eq!(result["result"]["value"], out.json()["value"]);
    let journal = std::fs::read_to_string(dir.join("journal.jsonl")).expect("journal");
    let lines: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect();
    assert_eq!(lines[0]["type"], "attempt");
    assert_eq!(lines.iter().filter(|l| l["type"] == "start").count(), 5);
    assert_eq!(lines.iter().filter(|l| l["type"] == "settled").count(), 5);
}

#[test]
fn no_journal_keeps_nothing() {
    let ws = Workspace::new("wf.ts", "return 1;", None);
    let out = ws.run(&["--no-journal"]);
    out.assert_code(0);
    assert!(!out.dir.path().join(".dsh").exists());
}

#[test]
fn an_unwritable_runs_directory_is_a_warning_not_a_failure() {
    let ws = Workspace::new("wf.ts", "return 1;", None);
    // A file where the runs directory should be.
    let blocker = ws.file("blocker", "");
    let arg = blocker.join("runs").display().to_string();
    let out = ws.run(&["--runs-dir", &arg]);
    out.assert_code(0);
    assert_mentions(&out.stderr, &["cannot be resumed", "--runs-dir"]);
}

const FAN: &str = r#"
const out = await parallel([
  () => agent("alpha", { label: "a" }),
  () => agent("beta", { label: "b" }),
  () => agent("gamma", { label: "c" }),
  () => agent("delta", { label: "d" }),
]);
return out;
"#;

/// a and b answer; c and d hang.
fn half_hanging() -> Value {
    fixture(json!([
        { "match": { "label": "a" }, "text": "A" },
        { "match": { "label": "b" }, "text": "B" },
        { "match": {}, "hang": true },
    ]))
}

/// Everything answers, so the calls still to do can finish.
fn all_answer(dir: &Path) -> String {
    let p = dir.join("later.fixture.json");
    std::fs::write(
        &p,
        fixture(json!([{ "match": {}, "text": "live now", "times": 100 }])).to_string(),
    )
    .expect("write");
    p.display().to_string()
}

fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while process_alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} outlived its host");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts FAN, waits until a and b completed and c, d started, then
/// SIGKILLs the host. Returns the workspace directory.
fn run_and_kill_host() -> tempfile::TempDir {
    let ws = Workspace::new("wf.ts", FAN, Some(&half_hanging()));
    let mut running = ws.spawn(&[]);
    for label in ["a", "b"] {
        running.wait_for_event(&format!("{label} completed"), |e| {
            e["type"] == "workflow/agent-end" && e["label"] == label
        });
    }
    for label in ["c", "d"] {
        running.wait_for_event(&format!("{label} started"), |e| {
            e["type"] == "workflow/agent-start" && e["label"] == label
        });
    }
    let workers = children_of(running.pid());
    assert_eq!(workers.len(), 1, "one worker: {workers:?}");
    running.signal(libc::SIGKILL);
    let out = running.finish();
    assert_eq!(out.code, None, "killed by a signal");
    // The parent-death signal takes the worker down with its host.
    wait_gone(workers[0]);
    out.dir
}

#[test]
fn after_kill_9_of_the_host_resume_replays_the_finished_calls() {
    let dir = run_and_kill_host();
    let id = run_id(dir.path());
    let later = all_answer(dir.path());
    let (stdout, stderr, code) = dsh_in(
        dir.path(),
        &[
            "workflow",
            "resume",
            &id,
            "--fixture",
            &later,
            "--events",
            "none",
            "--events-file",
            "resumed.jsonl",
            "--output",
            "result",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let result: Value = serde_json::from_str(&stdout).expect("result json");
    assert_eq!(result["value"], json!(["A", "B", "live now", "live now"]));
    assert_mentions(&stderr, &["2 call(s) replayed", "2 ran live"]);
    let events = read_events(&dir.path().join("resumed.jsonl"), true);
    assert_event_guarantees(&events);
    let replayed: Vec<&str> = events_of(&events, "workflow/agent-end")
        .iter()
        .filter(|e| e["replayed"] == true)
        .map(|e| e["label"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(replayed.len(), 2, "{events:#?}");
    assert!(replayed.contains(&"a") && replayed.contains(&"b"));
    assert!(outcomes(&events).values().all(|o| o == "completed"));

    // A second resume replays everything.
    let (stdout, stderr, code) =
        dsh_in(dir.path(), &["workflow", "resume", &id, "--events", "none"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["A", "B", "live now", "live now"])
    );
    assert_mentions(&stderr, &["4 call(s) replayed", "0 ran live"]);

    // runs and show know about it.
    let (runs, _, code) = dsh_in(dir.path(), &["workflow", "runs"]);
    assert_eq!(code, Some(0));
    assert_mentions(&runs, &[&id, "wf", "completed"]);
    let (show, _, code) = dsh_in(dir.path(), &["workflow", "show", &id]);
    assert_eq!(code, Some(0));
    assert_mentions(&show, &[&id, "replayed     a", "4 replayed", "live now"]);
}

#[test]
fn a_torn_last_journal_line_is_ignored() {
    let dir = run_and_kill_host();
    let journal = run_dir(dir.path()).join("journal.jsonl");
    let mut text = std::fs::read_to_string(&journal).expect("journal");
    text.push_str("{\"type\":\"settled\",\"seq\":3,\"key\":\"ab");
    std::fs::write(&journal, text).expect("write");
    let later = all_answer(dir.path());
    let id = run_id(dir.path());
    let (stdout, stderr, code) = dsh_in(
        dir.path(),
        &[
            "workflow",
            "resume",
            &id,
            "--fixture",
            &later,
            "--events",
            "none",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_mentions(&stderr, &["cut off", "2 call(s) replayed"]);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["A", "B", "live now", "live now"])
    );
    // The torn tail was cut before appending: the journal parses again.
    for line in std::fs::read_to_string(&journal).expect("journal").lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

#[test]
fn a_changed_script_is_refused_unless_allowed_and_then_only_matching_calls_replay() {
    let dir = run_and_kill_host();
    let id = run_id(dir.path());
    let later = all_answer(dir.path());
    std::fs::write(
        dir.path().join("wf.ts"),
        FAN.replace("\"beta\"", "\"beta, rephrased\""),
    )
    .expect("edit");
    let (stdout, stderr, code) = dsh_in(
        dir.path(),
        &[
            "workflow",
            "resume",
            &id,
            "--fixture",
            &later,
            "--events",
            "none",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.starts_with("error[USAGE]: "), "{stderr}");
    assert_mentions(&stderr, &["wf.ts", "changed", "--allow-changed"]);

    let (stdout, stderr, code) = dsh_in(
        dir.path(),
        &[
            "workflow",
            "resume",
            &id,
            "--fixture",
            &later,
            "--events",
            "none",
            "--allow-changed",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["A", "live now", "live now", "live now"])
    );
    assert_mentions(&stderr, &["1 call(s) replayed", "3 ran live"]);
}

#[test]
fn a_run_in_use_is_not_resumed_twice_at_once() {
    let dir = run_and_kill_host();
    let id = run_id(dir.path());
    // The first resume hangs on c and d again (the run's own fixture).
    let mut first = std::process::Command::new(common::DSH)
        .current_dir(dir.path())
        .args([
            "workflow",
            "resume",
            &id,
            "--events",
            "none",
            "--events-file",
            "first.jsonl",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let events_path = dir.path().join("first.jsonl");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !read_events(&events_path, false)
        .iter()
        .any(|e| e["type"] == "workflow/agent-start" && e["label"] == "d")
    {
        assert!(
            Instant::now() < deadline,
            "the first resume never started d"
        );
        assert!(
            first.try_wait().expect("try_wait").is_none(),
            "first resume exited"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (stdout, stderr, code) =
        dsh_in(dir.path(), &["workflow", "resume", &id, "--events", "none"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert_mentions(
        &stderr,
        &[
            "error[USAGE]",
            &id,
            "in use",
            &format!("pid {}", first.id()),
        ],
    );
    let (runs, _, _) = dsh_in(dir.path(), &["workflow", "runs"]);
    assert_mentions(&runs, &["running"]);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(first.id() as libc::pid_t, libc::SIGINT) };
    let status = first.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
}

#[test]
fn resuming_an_unknown_run_says_how_to_list_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, stderr, code) = dsh_in(dir.path(), &["workflow", "resume", "run-nope"]);
    assert_eq!(code, Some(2));
    assert!(stdout.is_empty());
    assert_mentions(&stderr, &["error[USAGE]", "run-nope", "dsh workflow runs"]);
}

#[test]
fn calls_with_one_key_replay_in_call_order_whatever_order_they_settled_in() {
    // Same prompt, so one key; "a" answers last.
    let ws = Workspace::new(
        "wf.ts",
        "return await parallel([() => agent(\"same question\", { label: \"a\" }), () => agent(\"same question\", { label: \"b\" })]);",
        Some(&fixture(json!([
            { "match": { "label": "a" }, "text": "A", "delayMs": 200 },
            { "match": { "label": "b" }, "text": "B" },
        ]))),
    );
    let out = ws.run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!(["A", "B"]));
    let id = run_id(out.dir.path());
    let (stdout, stderr, code) = dsh_in(
        out.dir.path(),
        &["workflow", "resume", &id, "--events", "none"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["A", "B"])
    );
    assert_mentions(&stderr, &["2 call(s) replayed"]);
}

// ------------------------------------------------------------------ run ids, events

/// Two runs of `wf.ts` in one directory; their ids, oldest first.
fn two_runs() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("wf.ts"),
        "log(\"hello from the script\");\nreturn await agent(\"a\");",
    )
    .expect("script");
    std::fs::write(
        dir.path().join("fx.json"),
        fixture(json!([{ "match": {}, "text": "A" }])).to_string(),
    )
    .expect("fixture");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (_, stderr, code) = dsh_in(
            dir.path(),
            &[
                "workflow",
                "run",
                "wf.ts",
                "--fixture",
                "fx.json",
                "--events",
                "none",
            ],
        );
        assert_eq!(code, Some(0), "{stderr}");
        let runs = dir.path().join(".dsh/runs");
        let new: Vec<String> = std::fs::read_dir(&runs)
            .expect("runs")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|id| !ids.contains(id))
            .collect();
        assert_eq!(new.len(), 1, "{new:?}");
        ids.extend(new);
    }
    let second = ids.pop().expect("two ids");
    let first = ids.pop().expect("two ids");
    (dir, first, second)
}

/// The shortest prefix of `id` (after `run-`) no other id shares.
fn unique_prefix(id: &str, other: &str) -> String {
    let tail = id.strip_prefix("run-").expect("a run id");
    let other = other.strip_prefix("run-").expect("a run id");
    (1..=tail.len())
        .map(|n| &tail[..n])
        .find(|p| !other.starts_with(p))
        .expect("ids differ")
        .to_string()
}

#[test]
fn latest_and_a_unique_prefix_name_a_run_in_show_report_and_resume() {
    let (dir, first, second) = two_runs();
    let json = |run: &str| {
        let (out, err, code) = dsh_in(dir.path(), &["workflow", "show", run, "--json"]);
        assert_eq!(code, Some(0), "show {run}: {err}");
        serde_json::from_str::<Value>(&out).expect("json")["runId"].clone()
    };
    assert_eq!(json("latest"), json!(second));
    let p1 = unique_prefix(&first, &second);
    assert_eq!(json(&p1), json!(first));
    assert_eq!(json(&format!("run-{p1}")), json!(first));
    assert_eq!(json(&second), json!(second));

    // Ambiguous: says so and lists the candidates.
    let (_, err, code) = dsh_in(dir.path(), &["workflow", "show", "run-"]);
    assert_eq!(code, Some(2), "{err}");
    assert_mentions(&err, &["error[USAGE]", "ambiguous", &first, &second]);

    let (out, err, code) = dsh_in(dir.path(), &["workflow", "report", "latest"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&second), "{out}");

    let (out, err, code) = dsh_in(dir.path(), &["workflow", "resume", &p1, "--events", "none"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "\"A\"");
    assert_mentions(
        &err,
        &[&format!("resumed run {first}"), "1 call(s) replayed"],
    );
}

#[test]
fn a_run_directory_keeps_its_events_and_the_report_shows_its_logs() {
    let (dir, first, _) = two_runs();
    let run_dir = dir.path().join(".dsh/runs").join(&first);
    let events = read_events(&run_dir.join("events.jsonl"), true);
    assert_event_guarantees(&events);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "workflow/log" && e["message"] == "hello from the script"),
        "{events:#?}"
    );
    // A resume appends its attempt's events.
    let (_, err, code) = dsh_in(
        dir.path(),
        &["workflow", "resume", &first, "--events", "none"],
    );
    assert_eq!(code, Some(0), "{err}");
    let events = read_events(&run_dir.join("events.jsonl"), true);
    assert_eq!(events_of(&events, "workflow/start").len(), 2, "{events:#?}");
    assert_eq!(events_of(&events, "workflow/end").len(), 2, "{events:#?}");

    let (out, err, code) = dsh_in(dir.path(), &["workflow", "report", &first]);
    assert_eq!(code, Some(0), "{err}");
    let html = std::fs::read_to_string(dir.path().join(out.trim())).expect("the report");
    let logs = html
        .split("<h2>Logs</h2>")
        .nth(1)
        .expect("a Logs section without any flag");
    // The last attempt's logs, once.
    assert_eq!(logs.matches("hello from the script").count(), 1, "{logs}");
}

/// `--events-file` naming the run directory's own `events.jsonl` (how
/// logs reached the report before every run kept that file) is written
/// once, not by two writers.
#[test]
fn an_events_file_that_is_the_run_directorys_own_gets_each_event_once() {
    let (dir, first, _) = two_runs();
    let file = dir
        .path()
        .join(".dsh/runs")
        .join(&first)
        .join("events.jsonl");
    let arg = file.display().to_string();
    let (_, err, code) = dsh_in(
        dir.path(),
        &[
            "workflow",
            "resume",
            &first,
            "--events",
            "none",
            "--events-file",
            &arg,
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let events = read_events(&file, true);
    assert_eq!(events_of(&events, "workflow/start").len(), 1, "{events:#?}");
    assert_eq!(events_of(&events, "workflow/end").len(), 1, "{events:#?}");
}

/// The run directory's `events.jsonl` is written for every run, so it is
/// bounded: past the journal's limit (`--journal-limit`) the later events
/// are left out, with one warning saying so, while `--events-file` (asked
/// for by the user) keeps them all.
#[test]
fn the_run_directorys_events_file_stops_at_the_journal_limit() {
    let script = "for (let i = 0; i < 400; i++) log(\"line \" + i + \" \" + \"x\".repeat(50));\n\
                  return 1;\n";
    let out = Workspace::new("wf.ts", script, None).run(&["--journal-limit", "4096"]);
    out.assert_code(0);
    let path = run_dir(out.dir.path()).join("events.jsonl");
    let size = std::fs::metadata(&path).expect("events.jsonl").len();
    assert!(size > 0 && size <= 4096, "{size} bytes");
    let kept = read_events(&path, true);
    assert_eq!(kept[0]["type"], "workflow/start", "{kept:#?}");
    assert!(kept.len() < 100, "{} events kept", kept.len());
    assert_eq!(
        out.stderr
            .matches("reached its size limit (4096 bytes")
            .count(),
        1,
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--journal-limit"), "{}", out.stderr);
    // `--events-file` is not capped.
    assert_eq!(events_of(&out.events, "workflow/log").len(), 400);
}

/// A resume whose first event no longer fits in `events.jsonl` (earlier
/// attempts filled it to the limit) starts the file afresh: the last
/// attempt's events are kept whole and the report shows its logs.
#[test]
fn a_resume_into_a_full_events_file_starts_it_afresh() {
    let (dir, first, _) = two_runs();
    let file = dir
        .path()
        .join(".dsh/runs")
        .join(&first)
        .join("events.jsonl");
    let limit: usize = 64 << 10;
    let mut text = std::fs::read_to_string(&file).expect("events.jsonl");
    text.push_str(&"x".repeat(limit - 10 - text.len()));
    text.push('\n');
    std::fs::write(&file, &text).expect("fill events.jsonl");
    let limit_arg = limit.to_string();
    let (_, err, code) = dsh_in(
        dir.path(),
        &[
            "workflow",
            "resume",
            &first,
            "--events",
            "none",
            "--journal-limit",
            &limit_arg,
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("size limit"), "{err}");
    let after = std::fs::read_to_string(&file).expect("events.jsonl");
    assert!(
        !after.contains("xxxxxxxx"),
        "the earlier attempts' events are still there: {} bytes",
        after.len()
    );
    let events = read_events(&file, true);
    assert_eq!(events[0]["type"], "workflow/start", "{events:#?}");
    assert_eq!(events_of(&events, "workflow/start").len(), 1, "{events:#?}");
    assert_eq!(events_of(&events, "workflow/end").len(), 1, "{events:#?}");
    let (out, err, code) = dsh_in(dir.path(), &["workflow", "report", &first]);
    assert_eq!(code, Some(0), "{err}");
    let html = std::fs::read_to_string(dir.path().join(out.trim())).expect("the report");
    assert!(html.contains("hello from the script"), "{html}");
}
