//! `dsh workflow show` (table, timeline, `--json`) and `dsh workflow
//! report` (the self-contained HTML file) through the real `dsh`, on runs
//! made with fixtures and `--dry-run`; then the report in a real headless
//! Chromium when one is installed.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Workspace, fixture, only_run_id};
use serde_json::{Value, json};

const DSH: &str = env!("CARGO_BIN_EXE_dsh");

/// Three agents: `plan` with no phase, then two in phase `Review`, one of
/// which fails; the delays make the durations differ.
const TRIO: &str = r#"export const meta = { name: "trio", description: "three agents, one fails" };
const plan = await agent("plan the work", { label: "plan" });
phase("Review");
const [a, b] = await parallel([
  () => agent("Review src/a.rs carefully", { label: "src/a.rs" }),
  () => agent("Review src/b.rs quickly", { label: "src/b.rs" }),
]);
return { plan, a, b };
"#;

fn trio_fixture() -> Value {
    fixture(json!([
        { "match": { "label": "plan" }, "text": "1. read", "delayMs": 50,
          "usage": { "input": 10, "output": 5 } },
        { "match": { "label": "src/a.rs" }, "text": "looks fine", "delayMs": 600,
          "usage": { "input": 200, "output": 40 } },
        { "match": { "label": "src/b.rs" }, "fail": "model refused: <too long>", "delayMs": 150 },
    ]))
}

/// Runs `dsh` with `args` in `dir` with extra environment, bounded.
fn dsh(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String, Option<i32>) {
    let mut cmd = Command::new(DSH);
    cmd.current_dir(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    bounded(cmd, Duration::from_secs(120))
}

/// Runs `cmd` to its end or kills it after `limit`.
fn bounded(mut cmd: Command, limit: Duration) -> (String, String, Option<i32>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out_p, err_p) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_p).expect("out"))
        .stderr(std::fs::File::create(&err_p).expect("err"))
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        std::fs::read_to_string(out_p).unwrap_or_default(),
        std::fs::read_to_string(err_p).unwrap_or_default(),
        status.code(),
    )
}

/// Runs the trio and returns its workspace and run id.
fn trio() -> (tempfile::TempDir, String) {
    let out = Workspace::new("trio.ts", TRIO, Some(&trio_fixture())).run(&[]);
    out.assert_code(0);
    let id = only_run_id(out.dir.path());
    (out.dir, id)
}

/// Writes the run's report and returns its path and text.
fn report_of(dir: &Path, id: &str) -> (PathBuf, String) {
    let (out, err, rc) = dsh(dir, &["workflow", "report", id], &[]);
    assert_eq!(rc, Some(0), "{err}");
    let path = PathBuf::from(out.trim());
    assert!(path.is_absolute() || dir.join(&path).is_file(), "{out}");
    let path = if path.is_absolute() {
        path
    } else {
        dir.join(path)
    };
    let html = std::fs::read_to_string(&path).expect("the report");
    (path, html)
}

#[test]
fn show_prints_timings_tokens_outcomes_and_a_timeline_grouped_by_phase() {
    let (dir, id) = trio();
    let (out, err, rc) = dsh(
        dir.path(),
        &["workflow", "show", &id],
        &[("COLUMNS", "100")],
    );
    assert_eq!(rc, Some(0), "{err}");
    // The lines `show` had before stay.
    for old in [
        "run      ",
        "name     trio",
        "status   completed",
        "agents   2 done, 1 failed, 0 replayed",
        "result\n",
    ] {
        assert!(out.contains(old), "{old:?} missing:\n{out}");
    }
    assert!(out.contains("tokens   210 in, 45 out"), "{out}");
    let header = out
        .lines()
        .find(|l| l.contains("SEQ"))
        .expect("a table header");
    for col in [
        "OUTCOME",
        "LABEL",
        "PHASE",
        "START",
        "DUR",
        "TOKENS IN/OUT",
        "COST",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let row = |seq: u64| {
        out.lines()
            .find(|l| l.starts_with(&format!("  #{seq:<4} ")))
            .unwrap_or_else(|| panic!("no row #{seq}:\n{out}"))
            .to_string()
    };
    let (r1, r2, r3) = (row(1), row(2), row(3));
    assert!(
        r1.contains("completed") && r1.contains("plan") && r1.contains("10/5"),
        "{r1}"
    );
    assert!(r1.contains(" - "), "no phase, no cost: {r1}");
    assert!(
        r2.contains("completed") && r2.contains("Review") && r2.contains("200/40"),
        "{r2}"
    );
    assert!(
        r3.contains("failed") && r3.contains("model refused: <too long>"),
        "{r3}"
    );
    // Offsets are `+…` from the attempt's start; a's duration is ≥ 600ms.
    assert!(r2.contains(" +"), "{r2}");
    let json = show_json(dir.path(), &id);
    assert!(
        json["agents"][1]["durationMs"].as_u64().unwrap() >= 600,
        "{json}"
    );

    // The timeline: one bar per agent, grouped by phase, within the width.
    let at = out.find("timeline\n").expect("a timeline");
    let tl: Vec<&str> = out[at..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("result"))
        .collect();
    assert_eq!(tl.iter().filter(|l| l.contains('▕')).count(), 3, "{tl:#?}");
    assert!(
        tl[0].starts_with("- ") && tl[0].contains("plan"),
        "no phase is `-`: {tl:#?}"
    );
    assert!(
        tl[1].starts_with("Review "),
        "phase title on its first bar: {tl:#?}"
    );
    assert!(
        tl[2].starts_with("             ▕"),
        "later bars of a phase are indented: {tl:#?}"
    );
    for l in &tl {
        assert!(l.chars().count() <= 100, "wider than COLUMNS: {l:?}");
    }
    let blocks = |l: &str, b: char| l.chars().filter(|c| *c == b).count();
    let a_bar = blocks(tl[1], '█');
    let b_bar = blocks(tl[2], '▓');
    assert!(a_bar > b_bar && b_bar >= 1, "600ms vs 150ms bars: {tl:#?}");
    assert!(
        tl.last().unwrap().contains("█ completed ▓ failed"),
        "a legend: {tl:#?}"
    );
}

fn show_json(dir: &Path, id: &str) -> Value {
    let (out, err, rc) = dsh(dir, &["workflow", "show", id, "--json"], &[]);
    assert_eq!(rc, Some(0), "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn show_json_is_one_object_for_tools() {
    let (dir, id) = trio();
    let v = show_json(dir.path(), &id);
    assert_eq!(v["runId"], json!(id));
    assert_eq!(v["name"], "trio");
    assert_eq!(v["description"], "three agents, one fails");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["stopReason"], "completed");
    let t = &v["totals"];
    assert_eq!(
        (&t["agents"], &t["completed"], &t["failed"], &t["replayed"]),
        (&json!(3), &json!(2), &json!(1), &json!(0))
    );
    assert_eq!((&t["tokensIn"], &t["tokensOut"]), (&json!(210), &json!(45)));
    assert!(t["wallMs"].as_u64().unwrap() >= 650, "{t}");
    assert!(t["costUsd"].is_null());
    let agents = v["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 3);
    let keys: Vec<&str> = agents[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "seq",
            "label",
            "phase",
            "workflow",
            "startMs",
            "durationMs",
            "usage",
            "costUsd",
            "session",
            "outcome",
            "reason",
            "replayed",
            "worktree"
        ]
    );
    assert_eq!(agents[0]["phase"], Value::Null);
    assert_eq!(agents[0]["usage"], json!({"input": 10, "output": 5}));
    assert_eq!(agents[1]["phase"], "Review");
    assert_eq!(agents[2]["outcome"], "failed");
    assert_eq!(agents[2]["reason"], "model refused: <too long>");
    assert_eq!(agents[2]["replayed"], false);
    assert!(agents[1]["startMs"].as_u64() >= agents[0]["startMs"].as_u64());
    assert!(agents[0]["durationMs"].as_u64().unwrap() >= 50);
}

const HOSTILE: &str = r#"export const meta = { name: "hostile", description: "<b>bold</b> & \u001b[2J" };
phase("\u001b[2J<i>P</i>");
const r = await agent("say <script>alert(2)</script>", { label: "\u001b[31m<script>alert(1)</script>" });
return { r };
"#;

#[test]
fn script_text_is_escaped_in_show_and_in_the_report() {
    let fx = fixture(json!([{ "match": {}, "text": "</script><img src=x onerror=alert(3)>" }]));
    let out = Workspace::new("hostile.ts", HOSTILE, Some(&fx)).run(&[]);
    out.assert_code(0);
    let id = only_run_id(out.dir.path());
    let (shown, err, rc) = dsh(out.dir.path(), &["workflow", "show", &id], &[]);
    assert_eq!(rc, Some(0), "{err}");
    assert!(
        !shown.contains('\u{1b}'),
        "a raw ESC reached the terminal: {shown:?}"
    );
    assert!(shown.contains("\\u{1b}[31m<script>"), "{shown}");
    assert!(
        shown.contains("\\u{1b}[2J<i"),
        "the phase, escaped: {shown}"
    );
    let (json_text, _, _) = dsh(out.dir.path(), &["workflow", "show", &id, "--json"], &[]);
    assert!(!json_text.contains('\u{1b}'), "{json_text:?}");

    let (_, html) = report_of(out.dir.path(), &id);
    assert!(
        !html.contains("<script>alert"),
        "markup from the script in the page"
    );
    assert!(!html.contains("<img"), "the answer's markup in the page");
    assert!(
        !html.contains("<b>bold"),
        "the description's markup in the page"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the label as text"
    );
    assert!(html.contains("&lt;i&gt;P&lt;/i&gt;"), "the phase as text");
    assert!(
        html.contains("&lt;b&gt;bold&lt;/b&gt; &amp;"),
        "the description as text"
    );
    // Exactly the report's own two script blocks.
    assert_eq!(html.matches("<script").count(), 2, "{html}");
    assert_eq!(html.matches("</script>").count(), 2);
}

#[test]
fn the_report_is_one_self_contained_file_with_a_bar_per_agent() {
    let (dir, id) = trio();
    let (path, html) = report_of(dir.path(), &id);
    assert_eq!(
        path,
        dir.path().join(".dsh/runs").join(&id).join("report.html")
    );
    for external in ["http://", "https://", "<link", " src=", "@import", "url("] {
        assert!(!html.contains(external), "{external} in the report");
    }
    assert_eq!(html.matches("<rect class=\"bar").count(), 3);
    for class in [
        "bar o-completed\" data-seq=\"1\"",
        "bar o-completed\" data-seq=\"2\"",
        "bar o-failed\" data-seq=\"3\"",
    ] {
        assert!(html.contains(class), "{class}");
    }
    for text in [
        "<h1>trio</h1>",
        "three agents, one fails",
        "Review src/b.rs quickly",
        "looks fine",
        "<title>#3 src/b.rs — failed",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    assert!(
        html.contains("&quot;plan&quot;: &quot;1. read&quot;"),
        "the result value, pretty and escaped"
    );

    // -o writes elsewhere and prints that path.
    let other = dir.path().join("out.html");
    let (out, err, rc) = dsh(
        dir.path(),
        &["workflow", "report", &id, "-o", other.to_str().unwrap()],
        &[],
    );
    assert_eq!(rc, Some(0), "{err}");
    assert_eq!(out.trim(), other.to_str().unwrap());
    assert_eq!(std::fs::read_to_string(&other).unwrap(), html);
}

#[test]
fn a_thousand_agent_report_stays_small_and_caps_each_text() {
    let script = r#"export const meta = { name: "wide", description: "a thousand agents" };
phase("Fan");
const rs = await parallel(Array.from({ length: 1000 }, (_, i) => () =>
  agent("Review file " + i + " " + "x".repeat(3000), { label: "file-" + i })));
return rs.length;
"#;
    let out = Workspace::new("wide.ts", script, None).run(&["--dry-run", "--max-agents", "1000"]);
    out.assert_code(0);
    let id = only_run_id(out.dir.path());
    let (path, html) = report_of(out.dir.path(), &id);
    let size = std::fs::metadata(&path).unwrap().len();
    println!("1,000-agent report: {size} bytes");
    assert!(size < 4 << 20, "{size} bytes");
    assert_eq!(html.matches("<rect class=\"bar").count(), 1000);
    assert!(html.contains(&"x".repeat(1900)), "prompts are kept");
    assert!(
        !html.contains(&"x".repeat(2001)),
        "prompts are cut at 2,000 characters"
    );
    // Every bar is at least one pixel wide.
    assert!(!html.contains("width=\"0\""));
}

// ------------------------------------------------------------------ a real browser

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `url` with `args`; stdout and stderr.
fn browse(browser: &Path, profile: &Path, args: &[&str], url: &str) -> (String, String) {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        // The tests run as root in containers, where Chromium's own sandbox
        // cannot start; the page is our own file.
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url);
    let (out, err, rc) = bounded(cmd, Duration::from_secs(90));
    assert_eq!(rc, Some(0), "chromium failed: {err}");
    (out, err)
}

#[test]
fn the_report_works_in_a_headless_chromium() {
    let Some(browser) = chromium() else {
        println!("skipped: no chromium at /usr/bin/chromium (apt-get install -y chromium)");
        return;
    };
    let (dir, id) = trio();
    let (path, _) = report_of(dir.path(), &id);
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", path.display());

    // `#select=3` selects bar 3 on load, the click's code path.
    let (dom, err) = browse(
        &browser,
        profile.path(),
        &["--dump-dom"],
        &format!("{url}#select=3"),
    );
    assert!(!err.contains("Uncaught"), "a script error: {err}");
    assert_eq!(dom.matches("<rect class=\"bar").count(), 3, "{dom}");
    let at = dom
        .find("<dl id=\"detail-3\">")
        .unwrap_or_else(|| panic!("no details for #3: {dom}"));
    let panel = &dom[at..dom[at..].find("</dl>").map_or(dom.len(), |e| at + e)];
    assert!(
        panel.contains("Review src/b.rs quickly"),
        "the prompt in the panel: {panel}"
    );
    assert!(
        panel.contains("model refused: &lt;too long&gt;"),
        "the reason, as text: {panel}"
    );
    assert!(
        dom.contains("bar o-failed sel"),
        "the bar is marked selected"
    );

    // Kept after the test for a human to look at, in the build's own
    // scratch directory (wherever CARGO_TARGET_DIR puts it).
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
    let _ = std::fs::remove_file(&shot);
    let (_, err) = browse(
        &browser,
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,900",
        ],
        &format!("{url}#select=2"),
    );
    assert!(!err.contains("Uncaught"), "a script error: {err}");
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot at {}: {size} bytes",
        shot.display()
    );
}

#[test]
fn a_nested_workflows_calls_carry_its_name_and_phase() {
    let child = r#"export const meta = { name: "review", description: "review one file" };
phase("inside");
return await agent("review " + args.file, { label: "review " + args.file });
"#;
    let parent = r#"export const meta = { name: "fan", description: "reviews a file" };
phase("Fan out");
const r = await workflow("review", { file: "a.rs" });
const s = await agent("summarize", { label: "summary" });
return { r, s };
"#;
    let fx = fixture(json!([{ "match": {}, "text": "ok" }]));
    let ws = Workspace::new("fan.js", parent, Some(&fx));
    let wf = ws.dir.path().join(".claude/workflows");
    std::fs::create_dir_all(&wf).unwrap();
    std::fs::write(wf.join("review.js"), child).unwrap();
    // Its own HOME: the user's ~/.claude is never read.
    let home = ws.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.display().to_string();
    let out = ws.with_env("HOME", &home).run(&[]);
    out.assert_code(0);
    let id = only_run_id(out.dir.path());
    let v = show_json(out.dir.path(), &id);
    let agents = v["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2, "{v}");
    assert_eq!(agents[0]["workflow"], "review", "{v}");
    // A nested workflow's calls run in the phase the runtime gives them
    // (`▸ NAME`, as in their events), not the child's own `phase()`.
    assert_eq!(agents[0]["phase"], "▸ review", "{v}");
    assert_eq!(agents[1]["workflow"], Value::Null, "{v}");
    assert_eq!(agents[1]["phase"], "Fan out", "{v}");
}

/// The report is a new file renamed into place: `-o` naming a symlink, or
/// a `report.html` symlink planted in the run directory (a cloned
/// repository can ship one), is refused and the link's target untouched.
#[rstest::rstest]
#[case::output_flag(true)]
#[case::planted_in_the_run_directory(false)]
fn the_report_never_writes_through_a_symlink(#[case] with_flag: bool) {
    let (dir, id) = trio();
    let d = dir.path();
    let victim = d.join("victim.txt");
    std::fs::write(&victim, "untouched\n").expect("victim");
    let link = if with_flag {
        d.join("link.html")
    } else {
        d.join(".dsh/runs").join(&id).join("report.html")
    };
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let link_arg = link.display().to_string();
    let mut args = vec!["workflow", "report", &id];
    if with_flag {
        args.extend(["-o", &link_arg]);
    }
    let (out, err, rc) = dsh(d, &args, &[]);
    assert_eq!(rc, Some(2), "{out}\n{err}");
    let name = link.file_name().expect("name").to_string_lossy();
    assert!(
        err.contains(&format!("{name}: is a symlink; refusing to replace it")),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "untouched\n"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
    // A regular file at `-o` is replaced, as before.
    let plain = d.join("plain.html");
    std::fs::write(&plain, "old").expect("plain");
    let plain_arg = plain.display().to_string();
    let (_, err, rc) = dsh(d, &["workflow", "report", &id, "-o", &plain_arg], &[]);
    assert_eq!(rc, Some(0), "{err}");
    assert!(
        std::fs::read_to_string(&plain)
            .expect("report")
            .starts_with("<!DOCTYPE html>")
    );
}

/// Line breaks in text the script controls (its description, its logs)
/// do not become lines of the report file: every line is one dsh wrote.
#[test]
fn script_text_cannot_forge_a_line_of_the_report() {
    let script = "export const meta = { name: \"nl\", description: \"d\\nexport FORGED=1\\n\" };\n\
                  log(\"x\\nFORGED_LOG=1\");\nreturn await agent(\"p\");\n";
    let fx = fixture(json!([{ "match": {}, "text": "a\nFORGED_ANSWER=1" }]));
    let out = Workspace::new("nl.ts", script, Some(&fx)).run(&[]);
    out.assert_code(0);
    let id = only_run_id(out.dir.path());
    // The report takes logs from `events.jsonl` in the run directory.
    let log = json!({ "type": "workflow/log", "message": "x\nFORGED_LOG=1" });
    std::fs::write(
        out.dir
            .path()
            .join(".dsh/runs")
            .join(&id)
            .join("events.jsonl"),
        format!("{log}\n"),
    )
    .expect("events");
    let (_, html) = report_of(out.dir.path(), &id);
    assert!(html.contains("x&#10;FORGED_LOG=1"), "the log is in: {html}");
    for forged in ["export FORGED=1", "FORGED_ANSWER=1", "FORGED_LOG=1"] {
        assert!(
            !html.lines().any(|l| l.trim_start().starts_with(forged)),
            "a line of the file starts with {forged:?}: {html}"
        );
    }
    assert!(html.contains("d&#10;export FORGED=1&#10;"), "{html}");
}

/// Writes `events.jsonl` of run `id` as attempts, each a `workflow/start`
/// followed by its log lines.
fn plant_attempts(dir: &Path, id: &str, attempts: &[Vec<String>]) {
    let mut text = String::new();
    for logs in attempts {
        text.push_str(&format!("{}\n", json!({ "type": "workflow/start" })));
        for m in logs {
            text.push_str(&format!(
                "{}\n",
                json!({ "type": "workflow/log", "message": m })
            ));
        }
        text.push_str(&format!("{}\n", json!({ "type": "workflow/end" })));
    }
    std::fs::write(dir.join(".dsh/runs").join(id).join("events.jsonl"), text).expect("events");
}

/// The logs are the last attempt's even when an earlier attempt logged
/// more lines than the report keeps (the reading went on to the end);
/// of a last attempt that logged more, the last lines are kept and the
/// report and stderr say how many earlier ones are not shown.
#[test]
fn the_report_shows_the_last_attempts_last_logs() {
    let (dir, id) = trio();
    let first: Vec<String> = (0..1200).map(|i| format!("first-attempt-{i}")).collect();
    let second: Vec<String> = (0..3).map(|i| format!("second-attempt-{i}")).collect();
    plant_attempts(dir.path(), &id, &[first.clone(), second]);
    let (_, html) = report_of(dir.path(), &id);
    assert!(
        html.contains("second-attempt-2"),
        "the last attempt's logs: {html}"
    );
    assert!(
        !html.contains("first-attempt-"),
        "an earlier attempt's logs: {html}"
    );

    let many: Vec<String> = (0..1500).map(|i| format!("line-{i}-end")).collect();
    plant_attempts(dir.path(), &id, &[vec!["old".into()], many]);
    let (out, err, rc) = dsh(dir.path(), &["workflow", "report", &id], &[]);
    assert_eq!(rc, Some(0), "{err}");
    let path = PathBuf::from(out.trim());
    let path = if path.is_absolute() {
        path
    } else {
        dir.path().join(path)
    };
    let html = std::fs::read_to_string(path).expect("the report");
    assert!(html.contains("line-1499-end"), "the last line is kept");
    assert!(html.contains("line-500-end"), "the last 1,000 are kept");
    assert!(!html.contains("line-499-end"), "older ones are dropped");
    assert!(!html.contains(">old\n"), "{html}");
    let said =
        "500 earlier log line(s) of this attempt are not shown: the report keeps the last 1000";
    assert!(html.contains(said), "the report says the logs were cut");
    assert!(err.contains(said), "stderr says it too: {err}");
}
