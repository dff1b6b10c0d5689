//! End-to-end tests of `dsh workflow test [PATH...]`: workflows with a
//! sibling fixture are run and compared with their `X.expected.json`;
//! `--update` writes those files; `-j N` runs several at once.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::dsh_in;
use rstest::rstest;
use serde_json::{Value, json};

/// A workflow that reads its args, narrates, and returns a value.
const PASS_TS: &str = r#"
export const meta = { name: "pass", description: "passes", phases: [{ title: "Ask" }] };
phase("Ask");
const a = await agent(`Say hi to ${args.who}`, { label: "greet" });
log(`greeted ${args.who}`);
return { a, n: 3 };
"#;

/// Two reviewers, one of which fails.
const REVIEW_TS: &str = r#"
phase("Review");
const rs = await parallel([
  () => agent("review one", { label: "one" }),
  () => agent("review two", { label: "two" }),
]);
return { reviewed: rs.filter(Boolean).length };
"#;

const REVIEW_FIXTURE: &str = r#"{"version": 1, "answers": [
  {"match": {"label": "one"}, "text": "fine"},
  {"match": {"label": "two"}, "fail": "the reviewer gave up"}
]}"#;

/// A script that fails: its expected result is an error naming the file.
const THROWS_TS: &str = r#"
await agent("first", { label: "first" });
throw new Error("nope");
"#;

const ANY_FIXTURE: &str = r#"{"version": 1, "answers": [{"match": {}, "text": "hello"}]}"#;

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(p, text).expect("write");
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The suite: workflows that pass, fail in different ways, or are not
/// workflows under test at all. Returns the directory.
fn suite() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Passes: args from pass.args.json, result, agents, logs and phases as expected.
    write(d, "pass.ts", PASS_TS);
    write(d, "pass.fixture.json", ANY_FIXTURE);
    write(d, "pass.args.json", r#"{"who": "Ada"}"#);
    write(
        d,
        "pass.expected.json",
        &json!({
            "result": { "value": { "a": "hello", "n": 3 }, "stopReason": "completed", "agentsStarted": 1 },
            "events": {
                "agents": [{ "label": "greet", "outcome": "completed" }],
                "logs": ["greeted Ada"],
                "phases": ["Ask"]
            }
        })
        .to_string(),
    );
    // Passes: JavaScript in a subdirectory; only the result is compared.
    write(
        d,
        "sub/deep.mjs",
        r#"const x = await agent("hi"); return x.toUpperCase();"#,
    );
    write(d, "sub/deep.fixture.json", ANY_FIXTURE);
    write(
        d,
        "sub/deep.expected.json",
        r#"{"result": {"value": "HELLO", "stopReason": "completed", "agentsStarted": 1}}"#,
    );
    // Passes: the expected result is an error, and an agent failed as expected.
    write(d, "review.ts", REVIEW_TS);
    write(d, "review.fixture.json", REVIEW_FIXTURE);
    write(
        d,
        "review.expected.json",
        &json!({
            "result": { "value": { "reviewed": 1 }, "stopReason": "completed", "agentsStarted": 2 },
            "events": { "agents": [
                { "label": "one", "outcome": "completed" },
                { "label": "two", "outcome": "failed" }
            ] }
        })
        .to_string(),
    );
    // Fails: a wrong value.
    write(d, "wrong_value.ts", PASS_TS);
    write(d, "wrong_value.fixture.json", ANY_FIXTURE);
    write(d, "wrong_value.args.json", r#"{"who": "Ada"}"#);
    write(
        d,
        "wrong_value.expected.json",
        r#"{"result": {"value": {"a": "hello", "n": 2}, "stopReason": "completed", "agentsStarted": 1}}"#,
    );
    // Fails: the expected file says both reviewers completed.
    write(d, "agent_failed.ts", REVIEW_TS);
    write(d, "agent_failed.fixture.json", REVIEW_FIXTURE);
    write(
        d,
        "agent_failed.expected.json",
        &json!({
            "result": { "value": { "reviewed": 1 }, "stopReason": "completed", "agentsStarted": 2 },
            "events": { "agents": [
                { "label": "one", "outcome": "completed" },
                { "label": "two", "outcome": "completed" }
            ] }
        })
        .to_string(),
    );
    // Fails: no expected file.
    write(d, "no_expected.ts", THROWS_TS);
    write(d, "no_expected.fixture.json", ANY_FIXTURE);
    // Fails: an invalid fixture.
    write(d, "bad_fixture.ts", PASS_TS);
    write(
        d,
        "bad_fixture.fixture.json",
        r#"{"version": 1, "answers": [{"match": {}, "txt": "x"}]}"#,
    );
    // Not tested: no fixture; a hidden directory; not a script.
    write(d, "lone.ts", PASS_TS);
    write(d, ".hidden/h.ts", PASS_TS);
    write(d, ".hidden/h.fixture.json", ANY_FIXTURE);
    write(d, "notes.txt", "not a workflow");
    write(d, "notes.fixture.json", ANY_FIXTURE);
    dir
}

/// The verdicts of a `dsh workflow test` output: path → `ok` / `FAIL` / `new`.
fn verdicts(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| {
            let (tag, rest) = l.split_once(' ')?;
            if !["ok", "FAIL", "new"].contains(&tag) {
                return None;
            }
            let path = rest.trim_start();
            let path = path.split(" (").next().unwrap_or(path);
            Some((path.to_string(), tag.to_string()))
        })
        .collect()
}

/// The verdict lines in output order, without the timings.
fn verdict_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| ["ok ", "FAIL ", "new "].iter().any(|t| l.starts_with(t)))
        .map(|l| l.split(" (").next().unwrap_or(l).to_string())
        .collect()
}

/// The last line of stdout.
fn summary(stdout: &str) -> &str {
    stdout.lines().last().unwrap_or("")
}

fn test_in(dir: &Path, extra: &[&str]) -> (String, String, Option<i32>) {
    let mut args = vec!["workflow", "test"];
    args.extend_from_slice(extra);
    dsh_in(dir, &args)
}

fn expected_suite_verdicts() -> BTreeMap<String, String> {
    [
        ("agent_failed.ts", "FAIL"),
        ("bad_fixture.ts", "FAIL"),
        ("no_expected.ts", "FAIL"),
        ("pass.ts", "ok"),
        ("review.ts", "ok"),
        ("sub/deep.mjs", "ok"),
        ("wrong_value.ts", "FAIL"),
    ]
    .into_iter()
    .map(|(p, v)| (p.to_string(), v.to_string()))
    .collect()
}

#[rstest]
#[case::serial("1")]
#[case::parallel("4")]
fn verdicts_summary_and_exit_code(#[case] jobs: &str) {
    let dir = suite();
    let (stdout, stderr, code) = test_in(dir.path(), &["-j", jobs]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_eq!(verdicts(&stdout), expected_suite_verdicts(), "{stdout}");
    assert_eq!(summary(&stdout), "3 passed, 4 failed", "{stdout}");
    // One line per workflow, timed when it ran.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ok   pass.ts (") && l.ends_with(" ms)")),
        "{stdout}"
    );
}

#[test]
fn jobs_do_not_change_the_verdicts_or_their_order() {
    let dir = suite();
    let (one, _, code_one) = test_in(dir.path(), &["-j", "1", "."]);
    let (four, _, code_four) = test_in(dir.path(), &["-j", "4", "."]);
    assert_eq!(code_one, code_four);
    assert_eq!(
        verdict_lines(&one),
        verdict_lines(&four),
        "{one}\n---\n{four}"
    );
    assert_eq!(verdict_lines(&one).len(), 7, "{one}");
    assert_eq!(summary(&one), summary(&four));
}

#[test]
fn the_diff_shows_the_differing_values() {
    let dir = suite();
    let (stdout, _, code) = test_in(dir.path(), &["wrong_value.ts", "agent_failed.ts"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(summary(&stdout), "0 passed, 2 failed", "{stdout}");
    // Diff lines with the marker and the JSON text, indentation dropped.
    let lines: Vec<String> = stdout
        .lines()
        .map(str::trim)
        .map(|l| match l.split_at_checked(1) {
            Some((m @ ("-" | "+"), rest)) => format!("{m} {}", rest.trim()),
            _ => l.to_string(),
        })
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    // wrong_value: n was expected 2, is 3.
    assert!(lines.contains(&"- \"n\": 2"), "{stdout}");
    assert!(lines.contains(&"+ \"n\": 3"), "{stdout}");
    assert!(
        stdout.contains("--- expected (wrong_value.expected.json)"),
        "{stdout}"
    );
    // agent_failed: reviewer two was expected to complete, it failed.
    assert!(lines.contains(&"- \"outcome\": \"completed\""), "{stdout}");
    assert!(lines.contains(&"+ \"outcome\": \"failed\""), "{stdout}");
    // Unchanged lines far from a change are elided.
    assert!(lines.contains(&"…"), "{stdout}");
}

#[test]
fn a_missing_expected_file_fails_and_points_to_update() {
    let dir = suite();
    let (stdout, _, code) = test_in(dir.path(), &["no_expected.ts"]);
    assert_eq!(code, Some(1));
    assert!(stdout.starts_with("FAIL no_expected.ts"), "{stdout}");
    assert!(stdout.contains("no expected file"), "{stdout}");
    assert!(stdout.contains("--update"), "{stdout}");
    assert_eq!(summary(&stdout), "0 passed, 1 failed");
}

#[test]
fn an_invalid_fixture_fails_with_fixture_invalid() {
    let dir = suite();
    let (stdout, _, code) = test_in(dir.path(), &["bad_fixture.ts"]);
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains(
            "error[FIXTURE_INVALID]: bad_fixture.fixture.json: answers[0]: unknown key \"txt\""
        ),
        "{stdout}"
    );
    assert_eq!(summary(&stdout), "0 passed, 1 failed");
}

#[test]
fn update_writes_the_expected_files_and_a_rerun_passes() {
    let dir = suite();
    let d = dir.path();
    let (stdout, _, code) = test_in(d, &["--update", "no_expected.ts", "pass.ts", "sub"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        verdicts(&stdout),
        [
            ("no_expected.ts", "new"),
            ("pass.ts", "ok"),
            ("sub/deep.mjs", "ok")
        ]
        .into_iter()
        .map(|(p, v)| (p.to_string(), v.to_string()))
        .collect(),
        "{stdout}"
    );
    assert!(
        stdout.contains("wrote no_expected.expected.json"),
        "{stdout}"
    );
    assert_eq!(summary(&stdout), "3 passed, 0 failed");
    // The new file has the result (without the machine-dependent sandbox)
    // and every event part; the message names the script by its file name.
    let written = read_json(&d.join("no_expected.expected.json"));
    assert_eq!(
        written,
        json!({
            "result": {
                "value": null,
                "stopReason": "error",
                "error": { "code": "SCRIPT_ERROR", "message": written["result"]["error"]["message"] },
                "agentsStarted": 1
            },
            "events": {
                "agents": [{ "label": "first", "outcome": "completed" }],
                "logs": [],
                "phases": []
            }
        })
    );
    let message = written["result"]["error"]["message"]
        .as_str()
        .expect("message");
    assert!(message.starts_with("no_expected.ts:"), "{message}");
    assert!(message.contains("nope"), "{message}");

    // A rerun compares and passes, also from another working directory.
    let (stdout, _, code) = test_in(d, &["no_expected.ts"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(summary(&stdout), "1 passed, 0 failed");
    let parent = d.parent().expect("parent");
    let name = d.file_name().expect("name").to_string_lossy().into_owned();
    let (stdout, _, code) = test_in(parent, &[&format!("{name}/no_expected.ts")]);
    assert_eq!(code, Some(0), "{stdout}");

    // --update fixes a wrong expected file and keeps the parts it had.
    let (stdout, _, code) = test_in(d, &["--update", "wrong_value.ts"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.starts_with("new  wrong_value.ts"), "{stdout}");
    assert_eq!(
        read_json(&d.join("wrong_value.expected.json")),
        json!({ "result": { "value": { "a": "hello", "n": 3 }, "stopReason": "completed", "agentsStarted": 1 } })
    );

    // Everything but the invalid fixture passes after an update of all.
    let (stdout, _, code) = test_in(d, &["--update"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(summary(&stdout), "6 passed, 1 failed", "{stdout}");
    std::fs::remove_file(d.join("bad_fixture.ts")).expect("rm");
    let (stdout, _, code) = test_in(d, &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(summary(&stdout), "6 passed, 0 failed", "{stdout}");
    assert!(verdicts(&stdout).values().all(|v| v == "ok"), "{stdout}");
}

#[test]
fn no_run_directories_are_written() {
    let dir = suite();
    let before = tree(dir.path());
    let (stdout, _, _) = test_in(dir.path(), &[]);
    assert_eq!(summary(&stdout), "3 passed, 4 failed", "{stdout}");
    assert!(!dir.path().join(".dsh").exists(), "{stdout}");
    assert_eq!(tree(dir.path()), before);
}

/// Every path under `dir`, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("entry").path();
            out.push(
                p.strip_prefix(root)
                    .expect("under root")
                    .display()
                    .to_string(),
            );
            if p.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[rstest]
#[case::empty_dir(&["empty"], "no workflows to test under empty")]
#[case::script_without_fixture(&["lone.ts"], "no workflows to test under lone.ts")]
#[case::missing_path(&["nope"], "nope: cannot read")]
#[case::zero_jobs(&["-j", "0"], "-j: must be at least 1")]
fn usage_errors_exit_2(#[case] args: &[&str], #[case] message: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("empty")).expect("mkdir");
    write(dir.path(), "lone.ts", PASS_TS);
    write(dir.path(), "x.ts", PASS_TS);
    write(dir.path(), "x.fixture.json", ANY_FIXTURE);
    let (stdout, stderr, code) = test_in(dir.path(), args);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with("error[USAGE]: ") && stderr.contains(message),
        "{stderr}"
    );
}

#[test]
fn the_examples_pass() {
    // The examples, and the compat scripts whose expected results were
    // recorded from Claude Code (scripts/compat/record.py).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (stdout, stderr, code) = test_in(root, &["scripts/"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let got = verdicts(&stdout);
    for (p, v) in &got {
        assert_eq!(v, "ok", "{p}: {stdout}");
    }
    let paths: Vec<&str> = got.keys().map(String::as_str).collect();
    for want in [
        "scripts/compat/par.js",
        "scripts/compat/values.js",
        "scripts/examples/research.ts",
        "scripts/examples/review.ts",
    ] {
        assert!(paths.contains(&want), "{want} not tested: {stdout}");
    }
    assert_eq!(summary(&stdout), format!("{} passed, 0 failed", got.len()));
}

/// A symlink that leaves the tested tree is not a test: a pull request
/// adding `leak.js -> /proc/self/environ` (with a fixture and an expected
/// file beside it) must not print the host's environment into the log.
/// Symlinks that stay inside count as usual.
#[test]
fn symlinks_out_of_the_tested_tree_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    write(d, "ok.ts", PASS_TS);
    write(d, "ok.fixture.json", ANY_FIXTURE);
    write(d, "ok.args.json", r#"{"who": "you"}"#);
    std::os::unix::fs::symlink("/proc/self/environ", d.join("leak.js")).expect("symlink");
    write(d, "leak.fixture.json", ANY_FIXTURE);
    write(d, "leak.expected.json", r#"{"result": {"value": 1}}"#);
    // A script inside whose fixture points outside is skipped too.
    write(d, "sneaky.ts", PASS_TS);
    std::os::unix::fs::symlink("/etc/hostname", d.join("sneaky.fixture.json")).expect("symlink");
    // A symlink inside the tree is an ordinary case.
    std::fs::create_dir(d.join("sub")).expect("mkdir");
    write(d, "sub/real.ts", PASS_TS);
    write(d, "sub/real.fixture.json", ANY_FIXTURE);
    std::os::unix::fs::symlink(d.join("sub/real.ts"), d.join("alias.ts")).expect("symlink");
    std::os::unix::fs::symlink(
        d.join("sub/real.fixture.json"),
        d.join("alias.fixture.json"),
    )
    .expect("symlink");

    let (stdout, stderr, code) = dsh_in(d, &["workflow", "test", "--update"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("leak") && !stderr.contains("leak"),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("sneaky"), "{stdout}");
    assert!(
        !stdout.contains("CARGO") && !stderr.contains("CARGO"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("ok.ts") && stdout.contains("alias.ts"),
        "{stdout}"
    );
    assert!(stdout.contains("2 passed, 0 failed"), "{stdout}");
}

/// A file with NUL bytes is not script text, and none of it is shown.
#[test]
fn a_script_with_nul_bytes_is_refused_without_an_excerpt() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bin.ts"), b"SECRET=hunter2\0PATH=/bin\0").expect("write");
    let (stdout, stderr, code) = dsh_in(dir.path(), &["workflow", "check", "bin.ts"]);
    assert_eq!(code, Some(2));
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("error[USAGE]: bin.ts: cannot read the script: it contains NUL bytes"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// An expected file a repository ships as a FIFO, or as a huge sparse
/// file, fails its case at once instead of hanging or filling memory;
/// `--update` never writes into a FIFO or through a symlink.
#[rstest]
#[case::fifo("fifo")]
#[case::sparse("sparse")]
#[case::symlink("symlink")]
fn an_expected_file_that_is_not_a_plain_file_fails_the_case(#[case] what: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    write(d, "t.ts", PASS_TS);
    write(d, "t.fixture.json", ANY_FIXTURE);
    write(d, "t.args.json", r#"{"who": "Ada"}"#);
    write(d, "victim.json", "{}\n");
    let expected = d.join("t.expected.json");
    match what {
        "fifo" => {
            let c = std::ffi::CString::new(expected.to_str().expect("utf-8")).expect("no NUL");
            // SAFETY: a valid C string; mkfifo only creates the node.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        }
        "sparse" => std::fs::File::create(&expected)
            .and_then(|f| f.set_len(64 << 30))
            .expect("sparse"),
        _ => std::os::unix::fs::symlink(d.join("victim.json"), &expected).expect("symlink"),
    }
    if what != "symlink" {
        let (stdout, stderr, code) = test_in(d, &["t.ts"]);
        assert_eq!(code, Some(1), "{stdout}\n{stderr}");
        assert!(stdout.starts_with("FAIL t.ts"), "{stdout}");
        assert!(stdout.contains("t.expected.json: cannot read"), "{stdout}");
    }
    let (stdout, stderr, code) = test_in(d, &["t.ts", "--update"]);
    if what == "sparse" {
        // A regular file, however large, is replaced.
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        assert!(std::fs::metadata(&expected).expect("expected").len() < 4096);
    } else {
        assert_eq!(code, Some(1), "{stdout}\n{stderr}");
        assert!(stdout.contains("refusing to replace it"), "{stdout}");
    }
    assert_eq!(
        std::fs::read_to_string(d.join("victim.json")).expect("victim"),
        "{}\n"
    );
}

/// Validates a JUnit report against the JUnit XML schema
/// (`tests/junit/junit-10.xsd`, which says where it comes from) with
/// xmllint (Debian's libxml2-utils; `.ci/run` installs it). Without
/// xmllint, says so and returns.
fn validates_as_junit(report: &Path) {
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/junit/junit-10.xsd");
    let out = match std::process::Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&xsd)
        .arg(report)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIPPED: xmllint cannot be run ({e}): the JUnit schema is not checked");
            return;
        }
    };
    assert!(
        out.status.success(),
        "{} is not valid JUnit XML:\n{}{}",
        report.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(report).unwrap_or_default()
    );
}

/// `--junit FILE`: one test case per workflow, in discovery order, the
/// failures with their diff or error as text, the tokens as properties;
/// read back by quick-junit's own reader.
#[test]
fn junit_has_a_case_per_workflow() {
    let dir = suite();
    let (stdout, stderr, code) = test_in(dir.path(), &["-j", "2", "--junit", "out/report.xml"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_eq!(summary(&stdout), "3 passed, 4 failed", "{stdout}");
    // The directory must exist: a missing one is an error, not created.
    let (_, stderr, code) = test_in(dir.path(), &["--junit", "nowhere/x/report.xml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--junit nowhere/x/report.xml: cannot write"),
        "{stderr}"
    );
    std::fs::create_dir(dir.path().join("out")).expect("mkdir");
    let (stdout, stderr, code) = test_in(dir.path(), &["-j", "2", "--junit", "out/report.xml"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let xml = std::fs::read_to_string(dir.path().join("out/report.xml")).expect("the report");
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        "{xml}"
    );
    validates_as_junit(&dir.path().join("out/report.xml"));
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("valid JUnit XML");
    assert_eq!((report.tests, report.failures, report.errors), (7, 4, 0));
    let suite = &report.test_suites[0];
    let cases: Vec<(String, bool)> = suite
        .test_cases
        .iter()
        .map(|c| {
            (
                c.name.as_str().to_string(),
                matches!(c.status, quick_junit::TestCaseStatus::Success { .. }),
            )
        })
        .collect();
    let mut want: Vec<(String, bool)> = expected_suite_verdicts()
        .into_iter()
        .map(|(p, v)| (p, v == "ok"))
        .collect();
    // Discovery order is the paths' order, which `verdicts` sorted too.
    want.sort();
    let mut got = cases.clone();
    got.sort();
    assert_eq!(got, want, "{xml}");
    let wrong = suite
        .test_cases
        .iter()
        .find(|c| c.name.as_str() == "wrong_value.ts")
        .expect("wrong_value.ts");
    match &wrong.status {
        quick_junit::TestCaseStatus::NonSuccess {
            kind, description, ..
        } => {
            assert_eq!(*kind, quick_junit::NonSuccessKind::Failure);
            let text = description.as_ref().map(|d| d.as_str()).unwrap_or_default();
            assert!(
                text.contains("--- expected") && text.contains("\"n\": 2"),
                "{text}"
            );
        }
        other => panic!("wrong_value.ts: {other:?}"),
    }
    assert!(wrong.time.is_some(), "a run's case is timed");
    assert!(wrong.properties.is_empty(), "its fixture reports no tokens");
    // A fixture that reports tokens and cost: the case's properties.
    write(
        dir.path(),
        "sub/deep.fixture.json",
        r#"{"version": 1, "answers": [{"match": {}, "text": "hello", "usage": {"input": 30, "output": 7, "costUsd": 0.5}}]}"#,
    );
    let (_, stderr, _) = test_in(dir.path(), &["--junit", "out/report.xml", "sub"]);
    validates_as_junit(&dir.path().join("out/report.xml"));
    let xml = std::fs::read_to_string(dir.path().join("out/report.xml")).expect("the report");
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("valid JUnit XML");
    let deep = &report.test_suites[0].test_cases[0];
    let props: Vec<(&str, &str)> = deep
        .properties
        .iter()
        .map(|p| (p.name.as_str(), p.value.as_str()))
        .collect();
    assert_eq!(
        props,
        [
            ("tokens.input", "30"),
            ("tokens.output", "7"),
            ("cost.usd", "0.5")
        ],
        "{stderr}
{xml}"
    );
}

/// Under GitHub Actions: an `::error` annotation per failing workflow on
/// stdout (at the line a run error names), and a Markdown summary appended
/// to `$GITHUB_STEP_SUMMARY`, byte for byte (times aside).
#[test]
fn github_gets_annotations_and_a_step_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    write(d, "a_ok.ts", r#"return await agent("hi");"#);
    write(d, "a_ok.fixture.json", ANY_FIXTURE);
    write(
        d,
        "a_ok.expected.json",
        r#"{"result": {"value": "hello", "stopReason": "completed", "agentsStarted": 1}}"#,
    );
    write(d, "b_throws.ts", THROWS_TS);
    write(d, "b_throws.fixture.json", ANY_FIXTURE);
    write(
        d,
        "b_throws.expected.json",
        r#"{"result": {"value": null, "stopReason": "completed", "agentsStarted": 1}}"#,
    );
    let summary_file = d.join("summary.md");
    std::fs::write(&summary_file, "earlier step\n").expect("summary");
    let out = std::process::Command::new(common::DSH)
        .current_dir(d)
        .args(["workflow", "test", "-j", "1"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary_file)
        .output()
        .expect("dsh workflow test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let annotations: Vec<&str> = stdout.lines().filter(|l| l.starts_with("::")).collect();
    assert_eq!(annotations.len(), 1, "{stdout}");
    assert!(
        annotations[0].starts_with(
            "::error file=b_throws.ts,line=3,title=dsh workflow test%3A b_throws.ts::--- expected (b_throws.expected.json)%0A+++ actual%0A"
        ),
        "{}",
        annotations[0]
    );
    assert_eq!(summary(&stdout), "1 passed, 1 failed");
    let md = std::fs::read_to_string(&summary_file).expect("summary");
    let timeless = regex::Regex::new(r"\| \d+ ms \|")
        .expect("regex")
        .replace_all(&md, "| T ms |");
    let head = "earlier step\n### dsh workflow test\n\n1 passed, 1 failed\n\n\
                | | workflow | time | tokens (in / out) | cost |\n|---|---|---|---|---|\n\
                | ✅ | `a_ok.ts` | T ms | — | — |\n| ❌ | `b_throws.ts` | T ms | — | — |\n\n\
                <details><summary><code>b_throws.ts</code></summary>\n\n```diff\n--- expected (b_throws.expected.json)\n+++ actual\n";
    assert!(timeless.starts_with(head), "{timeless}");
    assert!(timeless.ends_with("```\n\n</details>\n"), "{timeless}");
    // Not under GitHub Actions: neither.
    let (stdout, _, _) = test_in(d, &["-j", "1"]);
    assert!(!stdout.contains("::error"), "{stdout}");
}
