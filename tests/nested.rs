//! Nested workflows through the real `dsh` and its worker: `workflow(name
//! | {scriptPath}, args)` finding children in `.claude/workflows/`, their
//! agents, logs and phases in the parent's events, failures as Claude Code
//! has them, the one-level rule, the shared agent cap, the journal and
//! resume, `dsh workflow run NAME` and `dsh workflow list`.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{Workspace, assert_event_guarantees, assert_mentions, events_of, fixture};
use serde_json::{Value, json};

const REVIEW: &str = r#"export const meta = { name: "review", description: "review one file", whenToUse: "for one file" };
phase("inside");
log("reviewing " + args.file);
const verdict = await agent("review " + args.file, { label: "review " + args.file, phase: "ignored" });
return { file: args.file, verdict };
"#;

const FAN: &str = r#"export const meta = { name: "fan", description: "reviews files" };
phase("Fan out");
const rs = await parallel(["a.rs", "b.rs"].map((file) => () => workflow("review", { file })));
const s = await agent("summarize", { label: "summary" });
return { rs, s };
"#;

fn answers() -> Value {
    fixture(json!([
        { "match": { "label": "review a.rs" }, "text": "ok a" },
        { "match": { "label": "review b.rs" }, "text": "ok b" },
        { "match": { "label": "summary" }, "text": "done" },
    ]))
}

/// A workspace whose HOME is its own directory (the user's real
/// `~/.claude` is never read), with `files` written under it.
fn workspace(script: &str, fixture: Option<&Value>, files: &[(&str, &str)]) -> Workspace {
    let ws = Workspace::new("wf.js", script, fixture);
    for (name, text) in files {
        write(ws.dir.path(), name, text);
    }
    let home = ws.dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let home = home.display().to_string();
    ws.with_env("HOME", &home)
}

fn write(root: &Path, name: &str, text: &str) {
    let p = root.join(name);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

fn logs(events: &[Value]) -> Vec<String> {
    events_of(events, "workflow/log")
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_named_child_runs_with_its_args_and_its_agents_are_grouped_under_it() {
    let ws = workspace(
        FAN,
        Some(&answers()),
        &[(".claude/workflows/review.js", REVIEW)],
    );
    let out = ws.run(&["--output", "result"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json()["value"],
        json!({
            "rs": [{ "file": "a.rs", "verdict": "ok a" }, { "file": "b.rs", "verdict": "ok b" }],
            "s": "done",
        })
    );
    let starts = events_of(&out.events, "workflow/agent-start");
    let seen: Vec<(String, Value, Value)> = starts
        .iter()
        .map(|e| {
            (
                e["label"].as_str().unwrap_or_default().to_string(),
                e["phase"].clone(),
                e["workflow"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("review a.rs".into(), json!("▸ review"), json!("review")),
            ("review b.rs".into(), json!("▸ review #2"), json!("review")),
            ("summary".into(), json!("Fan out"), Value::Null),
        ]
    );
    let logs = logs(&out.events);
    for line in [
        "▸ running dynamic workflow review",
        "[review] reviewing a.rs",
        "[review] reviewing b.rs",
        "▸ review done",
    ] {
        assert!(logs.iter().any(|l| l == line), "{line:?} in {logs:#?}");
    }
    let phases: Vec<(Value, Value)> = events_of(&out.events, "workflow/phase")
        .iter()
        .map(|e| (e["title"].clone(), e["workflow"].clone()))
        .collect();
    assert_eq!(
        phases,
        [
            (json!("Fan out"), Value::Null),
            (json!("inside"), json!("review")),
            (json!("inside"), json!("review")),
        ]
    );
}

const FAILURES: &str = r#"export const meta = { name: "failures", description: "children that fail" };
const out = {};
try { await workflow("broken"); } catch (e) { out.broken = [e.code, e.message]; }
try { await workflow("nests"); } catch (e) { out.nests = [e.code, e.message]; }
try { await workflow("missing"); } catch (e) { out.missing = [e.code, e.message]; }
try { await workflow(42); } catch (e) { out.bad = e.code; }
out.par = await parallel([() => workflow("throws"), () => workflow({ scriptPath: "lib/inc.ts" }, 5)]);
out.undef = await workflow({ scriptPath: "lib/nothing.js" });
return out;
"#;

fn failing_children() -> [(&'static str, &'static str); 5] {
    [
        (
            ".claude/workflows/broken.js",
            "export const meta = { name: \"broken\", description: \"d\" };\nconst x = ;\n",
        ),
        (
            ".claude/workflows/nests.js",
            "export const meta = { name: \"nests\", description: \"d\" };\nreturn await workflow(\"broken\");\n",
        ),
        (
            ".claude/workflows/throws.js",
            "export const meta = { name: \"throws\", description: \"d\" };\n\nthrow new Error(\"kaboom\");\n",
        ),
        (
            "lib/inc.ts",
            "export const meta = { name: \"inc\", description: \"d\" };\nconst n: number = args;\nreturn n + 1;\n",
        ),
        (
            "lib/nothing.js",
            "export const meta = { name: \"nothing\", description: \"d\" };\nlog(\"nothing to return\");\n",
        ),
    ]
}

#[test]
fn failing_children_reject_as_claude_code_has_it_and_parallel_makes_them_null() {
    let ws = workspace(FAILURES, None, &failing_children());
    let out = ws.run(&["--output", "result"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = &out.json()["value"];
    assert_eq!(v["broken"][0], "SCRIPT_PARSE", "{v:#}");
    let broken = v["broken"][1].as_str().unwrap_or_default();
    assert_mentions(
        broken,
        &["workflow('broken')", ".claude/workflows/broken.js:2:"],
    );
    assert_eq!(v["nests"][0], "INVALID_ARGUMENT", "{v:#}");
    assert_mentions(v["nests"][1].as_str().unwrap_or_default(), &["one level"]);
    assert_eq!(v["missing"][0], "INVALID_ARGUMENT");
    assert_mentions(
        v["missing"][1].as_str().unwrap_or_default(),
        &["workflow('missing')", "known: broken, nests, throws"],
    );
    assert_eq!(v["bad"], "INVALID_ARGUMENT");
    assert_eq!(v["par"], json!([null, 6]));
    assert!(
        v.get("undef").is_none(),
        "a child returning nothing gives undefined: {v:#}"
    );
    let logs = logs(&out.events);
    assert!(
        logs.iter().any(|l| l == "parallel[0] failed: kaboom"),
        "{logs:#?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.starts_with("▸ throws failed: Error: kaboom")),
        "{logs:#?}"
    );
}

#[test]
fn an_uncaught_child_error_ends_the_run_naming_the_childs_file_and_line() {
    let script =
        "export const meta = { name: \"p\", description: \"d\" };\nawait workflow(\"throws\");\n";
    let ws = workspace(script, None, &failing_children());
    let out = ws.run(&[]);
    out.assert_code(1);
    out.assert_error_line("SCRIPT_ERROR");
    assert_mentions(&out.stderr, &[".claude/workflows/throws.js:3:", "kaboom"]);
}

#[test]
fn the_agent_cap_counts_the_childs_calls_too() {
    let script = r#"export const meta = { name: "p", description: "d" };
await agent("one", { label: "one" });
const r = await workflow("review", { file: "a.rs" }).catch((e) => e.code);
return r;
"#;
    let ws = workspace(
        script,
        Some(&fixture(json!([{ "match": {}, "text": "x" }]))),
        &[(".claude/workflows/review.js", REVIEW)],
    );
    let out = ws.run(&["--max-agents", "1", "--output", "result"]);
    out.assert_code(0);
    assert_eq!(out.json()["value"], "AGENT_CAP");
}

#[test]
fn resume_replays_the_childs_calls_from_the_journal() {
    let first = fixture(json!([
        { "match": { "label": "review a.rs" }, "text": "ok a" },
        { "match": { "label": "review b.rs" }, "text": "ok b" },
        { "match": { "label": "summary" }, "resultError": "connection reset" },
    ]));
    let ws = workspace(
        FAN,
        Some(&first),
        &[(".claude/workflows/review.js", REVIEW)],
    );
    let dir = ws.dir.path().to_path_buf();
    let home = dir.join("home").display().to_string();
    let later = dir.join("later.json");
    std::fs::write(
        &later,
        fixture(json!([
            { "match": { "label": "summary" }, "text": "done later" },
            { "match": {}, "startError": "the child's calls must come from the journal" },
        ]))
        .to_string(),
    )
    .expect("later");
    let out = ws.run(&[]);
    out.assert_code(1);
    out.assert_error_line("AGENT_RESULT");
    let id = common::only_run_id(&dir);
    let (stdout, stderr, code) = {
        let mut cmd = std::process::Command::new(common::DSH);
        cmd.current_dir(&dir).env("HOME", &home).args([
            "workflow",
            "resume",
            &id,
            "--fixture",
            &later.display().to_string(),
            "--events",
            "none",
        ]);
        let o = cmd.output().expect("resume");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            o.status.code(),
        )
    };
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json")["s"],
        "done later"
    );
    assert_mentions(&stderr, &["2 call(s) replayed", "1 ran live"]);
}

#[test]
fn run_by_name_and_list_find_saved_workflows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    write(dir.path(), ".claude/workflows/review.js", REVIEW);
    write(
        &home,
        ".claude/workflows/mine.js",
        "export const meta = { name: \"review\", description: \"shadowed\" };\nreturn 0;\n",
    );
    write(
        &home,
        ".claude/workflows/solo.ts",
        "export const meta = { name: \"solo\", description: \"a user's own\" };\nreturn args;\n",
    );
    let home_s = home.display().to_string();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(common::DSH)
            .current_dir(dir.path())
            .env("HOME", &home_s)
            .args(args)
            .output()
            .expect("dsh");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            o.status.code(),
        )
    };
    let (stdout, stderr, code) = run(&[
        "workflow",
        "run",
        "solo",
        "--args",
        "7",
        "--events",
        "none",
        "--no-journal",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "7");

    let (stdout, stderr, code) = run(&["workflow", "list"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_mentions(
        &stdout,
        &[
            "review  (project: ",
            "review one file",
            "when to use: for one file",
            "shadowed by",
            "solo  (user: ",
        ],
    );

    let (_, stderr, code) = run(&["workflow", "run", "nosuch", "--events", "none"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_mentions(
        &stderr,
        &["nosuch", "known: review, solo", "dsh workflow list"],
    );
}
