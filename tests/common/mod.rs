//! Shared helpers of the end-to-end tests (`tests/cli.rs`, `tests/library.rs`).
//!
//! Every wait here is bounded and synchronizes on something observable (a
//! process exiting, a line appearing in the events file, a process
//! disappearing from /proc); fixed sleeps are only ever poll intervals.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `dsh` binary under test.
pub const DSH: &str = env!("CARGO_BIN_EXE_dsh");

/// Upper bound for one CLI run (never the thing being measured).
pub const RUN_BOUND: Duration = Duration::from_secs(60);
/// Upper bound for waiting on an event or a process state.
pub const WAIT_BOUND: Duration = Duration::from_secs(30);
/// Poll interval of every bounded wait.
pub const POLL: Duration = Duration::from_millis(10);

// ------------------------------------------------------------------ CLI runs

/// What one `dsh` invocation produced.
#[derive(Debug)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    /// The exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    /// The lines of `--events-file`, parsed.
    pub events: Vec<Value>,
    /// The temporary directory the script lived in (kept alive for inspection).
    pub dir: tempfile::TempDir,
}

impl Output {
    /// stdout parsed as JSON (the value, or the result with `--output result`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n--- stdout\n{}\n--- stderr\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// Events of one `type` (e.g. `workflow/agent-start`).
    pub fn events_of(&self, ty: &str) -> Vec<&Value> {
        events_of(&self.events, ty)
    }

    /// Asserts the exit code, showing everything when it differs.
    #[track_caller]
    pub fn assert_code(&self, want: i32) {
        assert_eq!(
            self.code,
            Some(want),
            "exit code\n--- stdout\n{}\n--- stderr\n{}\n--- events\n{:#?}",
            self.stdout,
            self.stderr,
            self.events
        );
    }

    /// Asserts stderr carries `error[CODE]:`.
    #[track_caller]
    pub fn assert_error_line(&self, code: &str) {
        let needle = format!("error[{code}]:");
        assert!(
            self.stderr.contains(&needle),
            "stderr should contain {needle:?}:\n{}",
            self.stderr
        );
    }
}

/// `dsh` as its own worker with the worker's testing switches set
/// (`DSH_WORKER_TESTING`, e.g. `landlock-abi=0`; they are not worker
/// arguments): a shell that sets the variable and execs `dsh __worker`
/// with the host's arguments (the host clears a worker's environment).
pub fn testing_worker(switches: &str) -> dsh_orchestrator::WorkerCommand {
    dsh_orchestrator::WorkerCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            format!("DSH_WORKER_TESTING={switches} exec \"$0\" __worker \"$@\""),
            DSH.into(),
        ],
    }
}

/// Events of one `type`.
pub fn events_of<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// A script (and optional fixture) written into a fresh temporary directory.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    pub script: PathBuf,
    pub fixture: Option<PathBuf>,
    pub events_file: PathBuf,
    /// Extra environment for `dsh`.
    pub env: Vec<(String, String)>,
}

impl Workspace {
    pub fn new(name: &str, script: &str, fixture: Option<&Value>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let script_path = dir.path().join(name);
        std::fs::write(&script_path, script).expect("write script");
        let fixture = fixture.map(|f| {
            let p = dir.path().join("fixture.json");
            std::fs::write(&p, serde_json::to_string_pretty(f).expect("fixture json"))
                .expect("write fixture");
            p
        });
        let events_file = dir.path().join("events.jsonl");
        Workspace {
            dir,
            script: script_path,
            fixture,
            events_file,
            env: Vec::new(),
        }
    }

    /// Runs `dsh` with `key=value` added to its environment.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Writes another file into the directory and returns its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, contents).expect("write file");
        p
    }

    /// `dsh workflow run <script> [--fixture] --events-file … <extra>`; adds
    /// `--events none` unless `extra` chooses an events mode.
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(DSH);
        cmd.current_dir(self.dir.path())
            .arg("workflow")
            .arg("run")
            // Relative to the working directory, so messages name `wf.ts`.
            .arg(self.script.file_name().expect("script file name"));
        if let Some(f) = &self.fixture {
            cmd.arg("--fixture").arg(f);
        }
        cmd.arg("--events-file").arg(&self.events_file);
        if !extra.contains(&"--events") {
            cmd.args(["--events", "none"]);
        }
        cmd.args(extra);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs to completion (bounded by [`RUN_BOUND`]).
    pub fn run(self, extra: &[&str]) -> Output {
        self.spawn(extra).finish()
    }

    /// Starts `dsh` and returns at once.
    pub fn spawn(self, extra: &[&str]) -> Running {
        let child = self.command(extra).spawn().expect("spawn dsh");
        Running::adopt(child, self)
    }
}

fn reader_thread(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// A `dsh` process still running.
pub struct Running {
    pub child: Child,
    stdout: Option<std::thread::JoinHandle<String>>,
    stderr: Option<std::thread::JoinHandle<String>>,
    pub ws: Workspace,
}

impl Running {
    /// Takes over a `dsh` spawned from `ws.command(…)` (adjusted by the
    /// caller), reading its stdout and stderr.
    pub fn adopt(mut child: Child, ws: Workspace) -> Running {
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        Running {
            child,
            stdout: Some(reader_thread(stdout)),
            stderr: Some(reader_thread(stderr)),
            ws,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The events written so far (complete lines only).
    pub fn events_so_far(&self) -> Vec<Value> {
        read_events(&self.ws.events_file, false)
    }

    /// Polls the events file until an event satisfies `pred`; panics after
    /// [`WAIT_BOUND`] or when dsh exits without writing one.
    #[track_caller]
    pub fn wait_for_event(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT_BOUND;
        loop {
            if let Some(e) = self.events_so_far().into_iter().find(|e| pred(e)) {
                return e;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                // One last look: the line may have landed just before exit.
                if let Some(e) = self.events_so_far().into_iter().find(|e| pred(e)) {
                    return e;
                }
                panic!(
                    "dsh exited ({st}) before {what}; events: {:#?}",
                    self.events_so_far()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT_BOUND:?}; events: {:#?}",
                self.events_so_far()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Sends a signal to the dsh process.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid");
        // SAFETY: plain syscall on our own child's pid (not yet reaped).
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    /// Whether dsh has exited (it is reaped only by `finish`).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits (bounded) for dsh to exit and collects everything.
    pub fn finish(mut self) -> Output {
        let deadline = Instant::now() + RUN_BOUND;
        let status = loop {
            match self.child.try_wait().expect("try_wait") {
                Some(st) => break st,
                None if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!(
                        "dsh did not exit within {RUN_BOUND:?}; events: {:#?}",
                        self.events_so_far()
                    );
                }
                None => std::thread::sleep(POLL),
            }
        };
        let stdout = self.stdout.take().expect("stdout").join().expect("stdout");
        let stderr = self.stderr.take().expect("stderr").join().expect("stderr");
        let events = read_events(&self.ws.events_file, true);
        Output {
            stdout,
            stderr,
            code: status.code(),
            events,
            dir: self.ws.dir,
        }
    }
}

/// Parses a JSON-lines events file; a missing file is no events. With
/// `strict`, every line must parse; otherwise a partial last line is skipped.
pub fn read_events(path: &Path, strict: bool) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let complete = if strict {
        text.as_str()
    } else {
        // Only lines terminated by '\n' are known to be whole.
        match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        }
    };
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l:?}: {e}")))
        .collect()
}

/// Shorthand: write `script` as `name`, run it with `fixture` and `extra` flags.
pub fn run_named(name: &str, script: &str, fixture: Option<&Value>, extra: &[&str]) -> Output {
    Workspace::new(name, script, fixture).run(extra)
}

/// Shorthand: `wf.ts` with a fixture.
pub fn run_ts(script: &str, fixture: &Value, extra: &[&str]) -> Output {
    run_named("wf.ts", script, Some(fixture), extra)
}

/// Shorthand: `wf.ts` without a fixture.
pub fn run_plain(script: &str, extra: &[&str]) -> Output {
    run_named("wf.ts", script, None, extra)
}

/// Runs `dsh` with arbitrary arguments in `dir` (bounded).
pub fn dsh_in(dir: &Path, args: &[&str]) -> (String, String, Option<i32>) {
    let mut child = Command::new(DSH)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsh");
    let out = reader_thread(child.stdout.take().expect("stdout"));
    let err = reader_thread(child.stderr.take().expect("stderr"));
    let deadline = Instant::now() + RUN_BOUND;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dsh {args:?} did not exit within {RUN_BOUND:?}");
        }
        std::thread::sleep(POLL);
    };
    (
        out.join().expect("stdout"),
        err.join().expect("stderr"),
        status.code(),
    )
}

/// The one `agent-end` event of a run that made one call.
#[track_caller]
pub fn agent_end(events: &[Value]) -> &Value {
    let ends = events_of(events, "workflow/agent-end");
    assert_eq!(ends.len(), 1, "{events:#?}");
    ends[0]
}

/// A fixture with the given answers.
pub fn fixture(answers: Value) -> Value {
    serde_json::json!({ "version": 1, "answers": answers })
}

// ------------------------------------------------------------------ §8 guarantees

/// Asserts the guarantees of contract §8 that hold on every path:
/// exactly one `workflow/start`, first, and one `workflow/end`, last; every
/// `agent-start` paired with exactly one `agent-end` of the same `seq`
/// (and label, phase, childId) before the end; no `agent-end` without a
/// start; `outcome` ∈ {completed, failed, cancelled}; one `runId`
/// throughout; `t` non-decreasing; `workflow/end` without a result value.
#[track_caller]
pub fn assert_event_guarantees(events: &[Value]) {
    let dump = || format!("{events:#?}");
    assert!(events.len() >= 2, "at least start and end: {}", dump());
    let types: Vec<&str> = events
        .iter()
        .map(|e| {
            e["type"]
                .as_str()
                .unwrap_or_else(|| panic!("event without type: {e}"))
        })
        .collect();
    assert_eq!(types[0], "workflow/start", "first event: {}", dump());
    assert_eq!(
        types[types.len() - 1],
        "workflow/end",
        "last event: {}",
        dump()
    );
    assert_eq!(
        types.iter().filter(|t| **t == "workflow/start").count(),
        1,
        "exactly one workflow/start: {}",
        dump()
    );
    assert_eq!(
        types.iter().filter(|t| **t == "workflow/end").count(),
        1,
        "exactly one workflow/end: {}",
        dump()
    );
    let known = [
        "workflow/start",
        "workflow/phase",
        "workflow/log",
        "workflow/warning",
        "workflow/agent-queued",
        "workflow/agent-start",
        "workflow/agent-end",
        "workflow/agent-activity",
        "workflow/end",
    ];
    for t in &types {
        assert!(known.contains(t), "unknown event type {t}: {}", dump());
    }

    let run_id = events[0]["runId"].as_str().expect("runId string");
    assert!(!run_id.is_empty(), "runId non-empty");
    let mut last_t = 0u64;
    let mut open: HashMap<u64, &Value> = HashMap::new();
    let mut ended: HashSet<u64> = HashSet::new();
    let mut started: HashSet<u64> = HashSet::new();
    // Calls waiting for a slot, and those that stopped waiting.
    let mut waiting: HashSet<u64> = HashSet::new();
    let mut unqueued: HashSet<u64> = HashSet::new();
    for e in events {
        assert_eq!(e["runId"], run_id, "same runId everywhere: {}", dump());
        let t = e["t"]
            .as_u64()
            .unwrap_or_else(|| panic!("t must be a whole number: {e}"));
        assert!(
            t >= last_t,
            "t non-decreasing ({t} after {last_t}): {}",
            dump()
        );
        last_t = t;
        match e["type"].as_str() {
            Some("workflow/agent-queued") => {
                let seq = e["seq"].as_u64().expect("seq");
                assert!(e["label"].is_string(), "label: {e}");
                if e["waiting"] == true {
                    assert!(
                        !started.contains(&seq) && !unqueued.contains(&seq) && waiting.insert(seq),
                        "agent-queued {seq} waits after it started, waited or left: {}",
                        dump()
                    );
                } else {
                    assert_eq!(e["waiting"], false, "waiting is a boolean: {e}");
                    assert!(
                        waiting.remove(&seq) && unqueued.insert(seq),
                        "agent-queued {seq} stops waiting without waiting first: {}",
                        dump()
                    );
                }
            }
            Some("workflow/agent-start") => {
                let seq = e["seq"].as_u64().expect("seq");
                assert!(
                    !waiting.contains(&seq),
                    "agent-start {seq} while it still waits for a slot: {}",
                    dump()
                );
                assert!(started.insert(seq), "seq {seq} started twice: {}", dump());
                assert!(e["childId"].is_string(), "childId: {e}");
                assert!(e["label"].is_string(), "label: {e}");
                open.insert(seq, e);
            }
            Some("workflow/agent-end") => {
                let seq = e["seq"].as_u64().expect("seq");
                let start = open.remove(&seq).unwrap_or_else(|| {
                    panic!("agent-end {seq} without an open agent-start: {}", dump())
                });
                assert!(ended.insert(seq), "seq {seq} ended twice: {}", dump());
                for k in ["label", "phase", "childId"] {
                    assert_eq!(e[k], start[k], "agent-end {seq} {k} matches its start");
                }
                let outcome = e["outcome"].as_str().unwrap_or("");
                assert!(
                    ["completed", "failed", "cancelled"].contains(&outcome),
                    "outcome {outcome:?} of seq {seq}: {}",
                    dump()
                );
            }
            Some("workflow/agent-activity") => {
                let seq = e["seq"].as_u64().expect("seq");
                assert!(
                    open.contains_key(&seq),
                    "agent-activity {seq} outside its agent-start/agent-end: {}",
                    dump()
                );
                assert!(e["activity"].is_string(), "activity kind: {e}");
            }
            Some("workflow/end") => {
                let reason = e["stopReason"].as_str().unwrap_or("");
                assert!(
                    ["completed", "error", "cancelled"].contains(&reason),
                    "stopReason {reason:?}"
                );
                if reason == "completed" {
                    assert!(e["error"].is_null(), "completed end has error null: {e}");
                } else {
                    assert!(
                        e["error"]["code"].is_string() && e["error"]["message"].is_string(),
                        "non-completed end carries {{code, message}}: {e}"
                    );
                }
                assert!(e["agentsStarted"].is_u64(), "agentsStarted: {e}");
                assert!(
                    e.get("value").is_none(),
                    "workflow/end carries no value: {e}"
                );
            }
            _ => {}
        }
    }
    assert!(
        waiting.is_empty(),
        "every call that waited for a slot stops waiting before workflow/end; still waiting {:?}: {}",
        waiting,
        dump()
    );
    assert!(
        open.is_empty(),
        "every agent-start needs an agent-end before workflow/end; unpaired seqs {:?}: {}",
        open.keys().collect::<Vec<_>>(),
        dump()
    );
}

/// The `agent-end` outcome of every `seq`.
pub fn outcomes(events: &[Value]) -> HashMap<u64, String> {
    events_of(events, "workflow/agent-end")
        .into_iter()
        .map(|e| {
            (
                e["seq"].as_u64().expect("seq"),
                e["outcome"].as_str().expect("outcome").to_string(),
            )
        })
        .collect()
}

// ------------------------------------------------------------------ processes

/// Whether `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name, which may itself
    // contain spaces or parentheses: take the last ')'.
    match stat.rfind(')') {
        Some(i) => {
            let state = stat[i + 1..].trim_start().chars().next().unwrap_or('?');
            state != 'Z' && state != 'X'
        }
        None => false,
    }
}

/// Polls /proc until `pid` is gone (or a zombie); panics after 10 s.
#[track_caller]
pub fn assert_process_gone(pid: u32) {
    let bound = Duration::from_secs(10);
    let deadline = Instant::now() + bound;
    while process_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} is still alive {bound:?} later: {}",
            std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
        );
        std::thread::sleep(POLL);
    }
}

/// Async flavour of [`assert_process_gone`] for tokio tests.
pub async fn assert_process_gone_async(pid: u32) {
    let bound = Duration::from_secs(10);
    let deadline = Instant::now() + bound;
    while process_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} is still alive {bound:?} later"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Every process id in /proc.
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .collect()
}

/// A process's state letter, parent pid and process group from
/// `/proc/PID/stat` (the fields after the command name).
pub fn proc_stat(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let mut f = after.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// The live (non-zombie) children of `parent`, from /proc/*/status `PPid`.
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for pid in all_pids() {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse::<u32>().ok());
        if ppid == Some(parent) && process_alive(pid) {
            out.push(pid);
        }
    }
    out
}

// ------------------------------------------------------------------ library

pub mod lib {
    use std::time::Duration;

    use dsh_orchestrator::{Limits, Meta, StartRequest, WorkerCommand};
    use serde_json::Value;

    /// The grace the library tests use: short, so a forced settle is quick,
    /// yet long enough for a loaded machine to settle normally first.
    pub const GRACE: Duration = Duration::from_secs(2);

    pub fn meta() -> Meta {
        Meta {
            name: "e2e".into(),
            description: "end-to-end test workflow".into(),
            when_to_use: None,
            phases: None,
        }
    }

    pub fn limits() -> Limits {
        Limits {
            dispose_grace: GRACE,
            ..Limits::default()
        }
    }

    /// A request for `script` (TypeScript), run by the `dsh` binary as its
    /// own worker, with test meta and a short grace. (Runs of the suites
    /// overlap, so many of their workers are forked from the shared fork
    /// server, the rest spawned: both kinds run every test.)
    pub fn request(script: &str) -> StartRequest {
        StartRequest::new("e2e.ts", script)
            .with_meta(meta())
            .with_limits(limits())
            .with_worker(WorkerCommand::dsh(super::DSH))
    }

    /// Every event of the run as JSON (waits, bounded, for `workflow/end`).
    pub async fn collect_events(run: &dsh_orchestrator::WorkflowRun) -> Vec<Value> {
        let mut stream = run.subscribe();
        let mut out = Vec::new();
        let bound = super::WAIT_BOUND;
        loop {
            match tokio::time::timeout(bound, stream.next()).await {
                Ok(Some(ev)) => out.push(ev.to_json()),
                Ok(None) => break,
                Err(_) => panic!("event stream did not end within {bound:?}: {out:#?}"),
            }
        }
        out
    }

    /// Waits (bounded) on a stream until an event satisfies `pred`.
    pub async fn wait_for(
        stream: &mut dsh_orchestrator::EventStream,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let bound = super::WAIT_BOUND;
        let fut = async {
            while let Some(ev) = stream.next().await {
                let j = ev.to_json();
                if pred(&j) {
                    return Some(j);
                }
            }
            None
        };
        match tokio::time::timeout(bound, fut).await {
            Ok(Some(e)) => e,
            Ok(None) => panic!("the event stream ended before {what}"),
            Err(_) => panic!("no {what} within {bound:?}"),
        }
    }

    /// `result()` bounded, so a hung run fails the test instead of stalling it.
    pub async fn result(run: &dsh_orchestrator::WorkflowRun) -> dsh_orchestrator::RunResult {
        tokio::time::timeout(super::WAIT_BOUND, run.result())
            .await
            .expect("the run settles")
    }

    /// The run's result and events (checked against the §8 guarantees),
    /// then a bounded dispose.
    pub async fn finish(
        run: dsh_orchestrator::WorkflowRun,
    ) -> (dsh_orchestrator::RunResult, Vec<Value>) {
        let r = result(&run).await;
        let events = collect_events(&run).await;
        super::assert_event_guarantees(&events);
        tokio::time::timeout(super::WAIT_BOUND, run.dispose())
            .await
            .expect("dispose is bounded");
        (r, events)
    }
}

/// The id of the one run kept under `<dir>/.dsh/runs/`.
#[track_caller]
pub fn only_run_id(dir: &Path) -> String {
    let runs = dir.join(".dsh/runs");
    let mut ids: Vec<String> = std::fs::read_dir(&runs)
        .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "one run expected: {ids:?}");
    ids.remove(0)
}

/// `git -C dir ARGS` with a fixed identity; its stdout. Panics (showing
/// the output) when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts that `text` mentions every one of `mentions`.
#[track_caller]
pub fn assert_mentions(text: &str, mentions: &[&str]) {
    for m in mentions {
        assert!(text.contains(m), "should mention {m:?}: {text}");
    }
}

/// A server process a test started, ended when the test ends — passing or
/// not (a panic unwinds through it): SIGTERM, up to 10 s to go, then
/// SIGKILL.
pub struct Ended(pub std::process::Child);

impl Drop for Ended {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a process this test started.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
