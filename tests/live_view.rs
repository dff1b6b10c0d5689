//! The live view, looked at as a person would: `dsh workflow run` in a
//! real terminal (a tmux pane on a private tmux server), snapshots of the
//! screen taken with `capture-pane` at moments fixed by the run's own
//! events (`--events-file`), checked for the status area (counts, running
//! agents, elapsed time), the summary at the end, and a clean screen after
//! Ctrl-C. Without tmux the tests say so and pass (CI installs it).

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::DSH;
use serde_json::{Value, json};

/// Upper bound of every wait (never the thing measured).
const BOUND: Duration = Duration::from_secs(60);

/// A tmux server of this test alone (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// `None` (with a message) when tmux is not installed.
    fn start(name: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("tmux is not installed: the live view is not checked here");
            return None;
        }
        Some(Tmux {
            socket: format!("dsh-test-{}-{name}", std::process::id()),
        })
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    /// Runs `shell` in a new 120×40 pane.
    fn run(&self, shell: &str) {
        let out = self.cmd(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "40",
            shell,
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
    }

    /// The pane's text now.
    fn screen(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p", "-t", "t"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        self.cmd(&["send-keys", "-t", "t", keys]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // Only this test's own server, by its socket.
        let _ = self.cmd(&["kill-server"]);
    }
}

/// Waits (bounded) until `pred` holds for the events written so far.
fn wait_events(file: &Path, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let events: Vec<Value> = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if pred(&events) {
            return events;
        }
        assert!(
            start.elapsed() < BOUND,
            "no {what} within {BOUND:?}: {events:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the screen shows `text`.
fn wait_screen(tmux: &Tmux, text: &str) -> String {
    let start = Instant::now();
    loop {
        let s = tmux.screen();
        if s.contains(text) {
            return s;
        }
        assert!(
            start.elapsed() < BOUND,
            "the screen never showed {text:?}:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for the shell to write dsh's exit status; returns it.
fn wait_exit(dir: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.join("exit.txt"))
            && s.ends_with('\n')
        {
            return s;
        }
        assert!(start.elapsed() < BOUND, "dsh did not exit within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn started(events: &[Value], seq: u64) -> bool {
    events
        .iter()
        .any(|e| e["type"] == "workflow/agent-start" && e["seq"] == seq)
}

fn ended(events: &[Value], seq: u64) -> bool {
    events
        .iter()
        .any(|e| e["type"] == "workflow/agent-end" && e["seq"] == seq)
}

const SCRIPT: &str = r#"export const meta = { name: "fan-out", description: "A fan-out with delays" };
phase("Work");
const items = ["quick", "slow", "never\u001b[2J"];
const out = await parallel(items.map((t) => () => agent(`Do ${t}`, { label: t })));
log(`done ${out.filter(Boolean).length}`);
return out;
"#;

/// A directory with the script and a fixture: `quick` answers at once,
/// `slow` after `slow_ms`, the third after `never_ms`.
fn setup(slow_ms: u64, never_ms: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("fan.ts"), SCRIPT).expect("write");
    let fixture = json!({ "version": 1, "answers": [
        { "match": { "label": "quick" }, "text": "q", "usage": { "input": 1000, "output": 200 } },
        { "match": { "label": "slow" }, "text": "s", "delayMs": slow_ms },
        { "match": { "prompt": "Do never\u{1b}[2J" }, "fail": "gave up", "delayMs": never_ms },
    ] });
    std::fs::write(dir.path().join("fan.fixture.json"), fixture.to_string()).expect("write");
    let events = dir.path().join("events.jsonl");
    (dir, events)
}

fn command(dir: &Path, events: &Path) -> String {
    format!(
        "cd {} && {DSH} workflow run fan.ts --fixture fan.fixture.json --budget 50000 \
         --events-file {} ; echo EXIT=$? > exit.txt; sleep 600",
        dir.display(),
        events.display()
    )
}

#[test]
fn the_status_area_shows_running_agents_then_a_summary() {
    let Some(tmux) = Tmux::start("status") else {
        return;
    };
    let (dir, events) = setup(60_000, 60_000);
    tmux.run(&command(dir.path(), &events));
    // `quick` is done, the other two are running (they wait a minute).
    wait_events(&events, "quick done, the others running", |e| {
        ended(e, 1) && started(e, 2) && started(e, 3)
    });
    let screen = wait_screen(&tmux, "1 done · 2 running · 0 queued · 0 failed");
    assert!(screen.contains("fan-out "), "the run's name:\n{screen}");
    // `--budget` counts output tokens: `quick`'s 200 (its 1000 input
    // tokens are not counted against it).
    assert!(
        screen.contains("200 of 50.0k output tokens"),
        "tokens against the budget:\n{screen}"
    );
    assert!(screen.contains("Work"), "the phase line:\n{screen}");
    assert!(screen.contains("1/3"), "the phase's progress:\n{screen}");
    assert!(screen.contains("▸ slow"), "a running agent:\n{screen}");
    assert!(
        screen.contains("▸ never\\u{1b}[2J"),
        "a script's label is escaped:\n{screen}"
    );
    assert!(
        screen.contains("agent #1 completed quick"),
        "finished agents scroll:\n{screen}"
    );
    assert!(
        !screen.contains("agent #2 started"),
        "starts are in the status area:\n{screen}"
    );
    // The elapsed time moves on without any event.
    let before = screen
        .lines()
        .find(|l| l.starts_with("fan-out "))
        .map(str::to_string)
        .expect("a status line");
    let start = Instant::now();
    loop {
        let now = tmux.screen();
        let line = now
            .lines()
            .find(|l| l.starts_with("fan-out "))
            .map(str::to_string);
        if line.as_deref().is_some_and(|l| l != before) {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "the status line never moved: {before}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tmux.keys("C-c");
    let code = wait_exit(dir.path());
    assert_eq!(code.trim(), "EXIT=130", "Ctrl-C cancels");
    let screen = tmux.screen();
    assert!(
        screen.contains("fan-out cancelled in"),
        "the summary:\n{screen}"
    );
    assert!(
        screen.contains("show:   dsh workflow show run-"),
        "what to do next:\n{screen}"
    );
    assert!(
        !screen.contains('▸'),
        "no status line is left behind:\n{screen}"
    );
    assert!(
        !screen.contains("running ·"),
        "no status line is left behind:\n{screen}"
    );
}

/// Behind `--max-concurrent 1` the third call waits: the header counts it
/// as queued and its phase's total includes it; cancelled, the end line
/// and the summary count the same three calls.
#[test]
fn queued_calls_count_in_the_header_and_the_cancelled_summary() {
    let Some(tmux) = Tmux::start("queued") else {
        return;
    };
    let (dir, events) = setup(60_000, 60_000);
    tmux.run(
        &command(dir.path(), &events)
            .replace(" --budget 50000", " --budget 50000 --max-concurrent 1"),
    );
    wait_events(&events, "quick done, slow running, never queued", |e| {
        ended(e, 1)
            && started(e, 2)
            && e.iter().any(|e| {
                e["type"] == "workflow/agent-queued" && e["seq"] == 3 && e["waiting"] == true
            })
    });
    let screen = wait_screen(&tmux, "1 done · 1 running · 1 queued · 0 failed");
    assert!(
        screen.contains("1/3 (1 queued)"),
        "the phase's total:\n{screen}"
    );
    tmux.keys("C-c");
    let code = wait_exit(dir.path());
    assert_eq!(code.trim(), "EXIT=130", "Ctrl-C cancels");
    let screen = tmux.screen();
    assert!(screen.contains("(3 agents)"), "the end line:\n{screen}");
    assert!(
        screen.contains("cancelled in")
            && screen.contains(": 3 agents (1 never started), 0 failed"),
        "the summary counts as the end line does:\n{screen}"
    );
}

#[test]
fn a_run_that_completes_ends_with_its_summary() {
    let Some(tmux) = Tmux::start("summary") else {
        return;
    };
    let (dir, events) = setup(300, 600);
    tmux.run(&command(dir.path(), &events));
    wait_events(&events, "the end", |e| {
        e.iter().any(|e| e["type"] == "workflow/end")
    });
    let code = wait_exit(dir.path());
    let screen = tmux.screen();
    assert_eq!(code.trim(), "EXIT=0");
    assert!(
        screen.contains("fan-out completed in") && screen.contains("3 agents, 1 failed"),
        "{screen}"
    );
    assert!(screen.contains("slowest: never\\u{1b}[2J"), "{screen}");
    // The failed agents are listed with their reasons, as nextest lists
    // its failures.
    assert!(
        screen.contains("FAILED #3 never\\u{1b}[2J — gave up"),
        "{screen}"
    );
    assert!(screen.contains("log done 2"), "logs scroll:\n{screen}");
    assert!(!screen.contains('▸'), "{screen}");
}

/// Off a terminal the pretty events are the plain lines, byte for byte as
/// before the live view existed: no status area, no escape sequence, one
/// line per event (times and the run id masked).
#[test]
fn off_a_terminal_the_lines_are_plain() {
    let (dir, _) = setup(300, 600);
    let (_, stderr, code) = common::dsh_in(
        dir.path(),
        &[
            "workflow",
            "run",
            "fan.ts",
            "--fixture",
            "fan.fixture.json",
            "--no-journal",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "no escape sequence: {stderr:?}");
    let masked: Vec<String> = stderr
        .lines()
        .map(|l| {
            let l = match l.find("ms] ") {
                Some(i) if l.starts_with('[') => format!("[T]{}", &l[i + 3..]),
                _ => l.to_string(),
            };
            match l.find("(run-") {
                Some(i) => format!("{}(run-ID)", &l[..i]),
                None => l,
            }
        })
        .collect();
    assert_eq!(
        masked,
        [
            "[T] start fan-out — A fan-out with delays (run-ID)",
            "[T] phase Work",
            "[T] agent #1 started quick [Work]",
            "[T] agent #1 completed quick",
            "[T] agent #2 started slow [Work]",
            "[T] agent #3 started never\\u{1b}[2J [Work]",
            "[T] agent #2 completed slow",
            "[T] agent #3 failed never\\u{1b}[2J — gave up",
            "[T] log done 2",
            "[T] end completed (3 agents)",
        ],
        "{stderr}"
    );
}

/// A label with a line or paragraph separator (U+2028, U+2029) or a bidi
/// control (U+202E …) is shown escaped, like an ESC: not escaped, the first
/// could start a new line in the view and the second reorder it.
#[test]
fn separators_and_bidi_controls_in_a_label_are_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("sep.ts"),
        "await agent(\"x\", { label: \"a\\u2028end completed\\u2029b\\u202eevil\" });\nreturn 1;\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("sep.fixture.json"),
        json!({ "version": 1, "answers": [{ "match": {}, "text": "ok" }] }).to_string(),
    )
    .expect("write");
    let (_, stderr, code) = common::dsh_in(
        dir.path(),
        &[
            "workflow",
            "run",
            "sep.ts",
            "--fixture",
            "sep.fixture.json",
            "--no-journal",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    for raw in ['\u{2028}', '\u{2029}', '\u{202e}'] {
        assert!(!stderr.contains(raw), "{raw:?} reached stderr: {stderr:?}");
    }
    assert!(
        stderr.contains("agent #1 completed a\\u{2028}end completed\\u{2029}b\\u{202e}evil"),
        "{stderr}"
    );
}

/// `attach` draws a detached run's live view in a terminal as `run` draws
/// its own, from the run directory's events, and ends with the same
/// summary (the failed agent listed with its reason) and `run`'s exit
/// code.
#[test]
fn attach_draws_a_detached_runs_live_view_and_summary() {
    let Some(tmux) = Tmux::start("attach") else {
        return;
    };
    let (dir, _) = setup(600, 900);
    let (stdout, stderr, code) = common::dsh_in(
        dir.path(),
        &[
            "workflow",
            "run",
            "fan.ts",
            "--fixture",
            "fan.fixture.json",
            "--detach",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let id = stdout.lines().last().expect("the id").to_string();
    tmux.run(&format!(
        "cd {} && {DSH} workflow attach {id} > value.json; echo EXIT=$? > exit.txt; sleep 600",
        dir.path().display()
    ));
    let code = wait_exit(dir.path());
    let screen = tmux.screen();
    assert_eq!(code.trim(), "EXIT=0", "{screen}");
    assert!(
        screen.contains("fan-out completed in") && screen.contains("3 agents, 1 failed"),
        "{screen}"
    );
    assert!(
        screen.contains("FAILED #3 never\\u{1b}[2J — gave up"),
        "{screen}"
    );
    assert!(
        !screen.contains('▸'),
        "the status area is cleared:\n{screen}"
    );
    let value: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("value.json")).expect("value"),
    )
    .expect("the value");
    assert_eq!(value, json!(["q", "s", null]));
}
