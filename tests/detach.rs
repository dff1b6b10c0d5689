//! Detached runs on this machine (the file journal): `run --detach`
//! returns once the run has started and prints its id; the run outlives
//! the terminal's session; `attach` and `wait` show it as `run` does and
//! exit with its code; `cancel` ends it, leaving no process behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{DSH, dsh_in};
use serde_json::{Value, json};

const SCRIPT: &str = r#"export const meta = { name: "bg", description: "in the background" };
const a = await agent("first", { label: "a" });
const b = await agent("second", { label: "b" });
return [a, b];
"#;

/// `dsh workflow run wf.ts --fixture f.json --detach`.
const DETACH: &[&str] = &[
    "workflow",
    "run",
    "wf.ts",
    "--fixture",
    "f.json",
    "--detach",
];

/// A workspace whose `a` call answers at once and whose `b` call is the
/// fixture entry `b` (its `match` set here).
fn workspace(b: Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("wf.ts"), SCRIPT).expect("script");
    let mut b = b;
    b["match"] = json!({ "label": "b" });
    std::fs::write(
        dir.path().join("f.json"),
        json!({"version": 1, "answers": [{ "match": { "label": "a" }, "text": "A" }, b]})
            .to_string(),
    )
    .expect("fixture");
    dir
}

fn detach(dir: &Path) -> String {
    let (stdout, stderr, code) = dsh_in(dir, DETACH);
    assert_eq!(code, Some(0), "{stderr}");
    let id = stdout.lines().last().expect("the id").to_string();
    assert!(id.starts_with("run-"), "{stdout}");
    id
}

/// The pid that holds run `id`'s lock.
fn holder(dir: &Path, id: &str) -> i32 {
    std::fs::read_to_string(dir.join(".dsh/runs").join(id).join("lock"))
        .expect("lock")
        .trim()
        .parse()
        .expect("a pid")
}

/// Whether `pid` runs (a zombie nobody reaped holds nothing).
fn runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Waits (bounded) until the run's events say `what`.
fn until_event(dir: &Path, id: &str, what: &str) {
    let deadline = Instant::now() + common::RUN_BOUND;
    let events = dir.join(".dsh/runs").join(id).join("events.jsonl");
    while !std::fs::read_to_string(&events)
        .unwrap_or_default()
        .contains(what)
    {
        assert!(Instant::now() < deadline, "never {what}");
        std::thread::sleep(common::POLL);
    }
}

/// The terminal's session ends (its process group gets SIGHUP) right
/// after `run --detach` returned: the run goes on and completes; `attach`
/// shows it from its first event to its last and prints its value.
#[test]
fn a_detached_run_outlives_its_terminal_and_attach_shows_it() {
    use std::os::unix::process::CommandExt as _;
    let dir = workspace(json!({ "text": "B", "delayMs": 1500 }));
    // A shell standing in for the terminal's session: it runs the detach
    // and stays, until the whole session's group is hung up.
    let mut terminal = Command::new("sh");
    terminal
        .current_dir(dir.path())
        .args([
            "-c",
            &format!("{DSH} workflow run wf.ts --fixture f.json --detach > id.txt; sleep 60"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid between fork and exec of our own child.
    unsafe {
        terminal.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut terminal = terminal.spawn().expect("sh");
    let deadline = Instant::now() + common::RUN_BOUND;
    let id = loop {
        let text = std::fs::read_to_string(dir.path().join("id.txt")).unwrap_or_default();
        if let Some(id) = text.lines().last().filter(|l| l.starts_with("run-")) {
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "no id");
        std::thread::sleep(common::POLL);
    };
    // SAFETY: the session we made: its group is the shell's pid.
    unsafe { libc::kill(-(terminal.id() as i32), libc::SIGHUP) };
    let _ = terminal.wait();
    let (stdout, stderr, code) = dsh_in(
        dir.path(),
        &[
            "workflow", "attach", &id, "--events", "lines", "--color", "never",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).ok(),
        Some(json!(["A", "B"]))
    );
    let shown: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("] ").map(|(_, t)| t))
        .collect();
    assert_eq!(
        shown.first(),
        Some(&format!("start bg — in the background ({id})").as_str()),
        "{stderr}"
    );
    assert_eq!(shown.last(), Some(&"end completed (2 agents)"), "{stderr}");
    // `latest` and `wait` name the same run, quietly with --events none.
    let (stdout, stderr, code) = dsh_in(
        dir.path(),
        &["workflow", "wait", "latest", "--events", "none"],
    );
    assert_eq!(code, Some(0));
    assert_eq!(stderr, "");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).ok(),
        Some(json!(["A", "B"]))
    );
}

/// `cancel` ends a detached run through its usual cancel path: `wait`
/// exits 130 with `error[CANCELLED]`, and the run's process and worker are
/// gone; a second `cancel` says it settled already.
#[test]
fn cancel_ends_a_detached_run_and_leaves_no_process() {
    let dir = workspace(json!({ "hang": true }));
    let id = detach(dir.path());
    until_event(dir.path(), &id, "\"label\":\"b\"");
    let pid = holder(dir.path(), &id);
    let (_, stderr, code) = dsh_in(dir.path(), &["workflow", "cancel", &id]);
    assert_eq!(code, Some(0), "{stderr}");
    let (stdout, stderr, code) = dsh_in(dir.path(), &["workflow", "wait", &id, "--events", "none"]);
    assert_eq!(code, Some(130), "{stdout}{stderr}");
    assert!(stderr.contains("error[CANCELLED]"), "{stderr}");
    let deadline = Instant::now() + common::RUN_BOUND;
    while runs(pid) {
        assert!(
            Instant::now() < deadline,
            "the run's process {pid} is still there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, stderr, code) = dsh_in(dir.path(), &["workflow", "cancel", &id]);
    assert_eq!(code, Some(0));
    assert!(stderr.contains("has settled already"), "{stderr}");
}

/// A run killed (`kill -9`) before it settled: `wait` does not wait
/// forever, it says so and how to continue it.
#[test]
fn wait_for_a_killed_run_says_to_resume_it() {
    let dir = workspace(json!({ "hang": true }));
    let id = detach(dir.path());
    until_event(dir.path(), &id, "\"label\":\"b\"");
    let pid = holder(dir.path(), &id);
    // SAFETY: the run's process, which this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + common::RUN_BOUND;
    while runs(pid) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, stderr, code) = dsh_in(dir.path(), &["workflow", "wait", &id, "--events", "none"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("dsh workflow resume {id}")),
        "{stderr}"
    );
    let (_, stderr, code) = dsh_in(dir.path(), &["workflow", "cancel", &id]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no process runs run"), "{stderr}");
}

/// What `run` refuses at once, `run --detach` refuses in the foreground,
/// leaving nothing behind.
#[test]
fn a_detached_run_that_cannot_start_says_why_at_once() {
    let dir = workspace(json!({ "text": "B" }));
    std::fs::write(dir.path().join("bad.ts"), "return (;").expect("bad");
    let (stdout, stderr, code) = dsh_in(dir.path(), &["workflow", "run", "bad.ts", "--detach"]);
    assert_eq!(code, Some(2), "{stdout}");
    assert!(stderr.contains("error[SCRIPT_PARSE]"), "{stderr}");
    assert!(
        !dir.path().join(".dsh/runs").exists()
            || std::fs::read_dir(dir.path().join(".dsh/runs"))
                .unwrap()
                .all(|e| e.unwrap().file_name() == ".detached")
    );
    let (_, stderr, code) = dsh_in(
        dir.path(),
        &["workflow", "run", "wf.ts", "--detach", "--no-journal"],
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--no-journal"), "{stderr}");
}

/// A runs directory whose `.detached` is a symlink (a cloned repository
/// can ship one) is refused: nothing is written through it.
#[test]
fn a_symlinked_detached_directory_is_not_written_through() {
    let dir = workspace(json!({ "text": "B" }));
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    std::fs::create_dir_all(dir.path().join(".dsh/runs")).expect("runs");
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(".dsh/runs/.detached"))
        .expect("symlink");
    let (_, stderr, code) = dsh_in(dir.path(), DETACH);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(".detached"), "{stderr}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// A cancelled run resumed by hand runs again: `wait` (and `attach`)
/// follow the new attempt and print its value, not the cancelled result
/// the run directory still has from the attempt before.
#[test]
fn wait_follows_the_attempt_a_resume_started() {
    let dir = workspace(json!({ "text": "B", "delayMs": 3000 }));
    let id = detach(dir.path());
    until_event(dir.path(), &id, "\"label\":\"b\"");
    let (_, stderr, code) = dsh_in(dir.path(), &["workflow", "cancel", &id]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, _, code) = dsh_in(dir.path(), &["workflow", "wait", &id, "--events", "none"]);
    assert_eq!(code, Some(130));
    let first = holder(dir.path(), &id);
    let mut resume = Command::new(DSH)
        .args(["workflow", "resume", &id, "--events", "none"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("resume");
    // The resume has taken the run (its lock names it; it may even have
    // finished on a slow machine — the waits below hold either way).
    let deadline = Instant::now() + common::RUN_BOUND;
    while holder(dir.path(), &id) == first {
        assert!(Instant::now() < deadline, "the resume never held the run");
        std::thread::sleep(common::POLL);
    }
    for events in ["none", "jsonl"] {
        let (stdout, stderr, code) =
            dsh_in(dir.path(), &["workflow", "wait", &id, "--events", events]);
        assert_eq!(code, Some(0), "--events {events}: {stdout}{stderr}");
        assert!(stdout.contains("\"B\""), "--events {events}: {stdout}");
    }
    assert!(resume.wait().expect("resume").success());
}
