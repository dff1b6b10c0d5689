//! `dsh-worker reap`, end to end with real processes: the shim passes the
//! program's stdio and exit status through, and nothing the program
//! started outlives it — not a `setsid`'d shell, not a double fork, not a
//! program that ignores SIGTERM — whether the program exits, the group is
//! stopped, the shim alone is stopped, or the shim's parent dies.
//!
//! Every test works in its own temporary directory, whose path appears in
//! the command line of every process it starts (the marker): the leftover
//! checks look at those processes only, and a failed test kills them.
//! Processes are named by pid *and* start time, so a reused pid never
//! passes for a survivor (or a survivor for a reused pid).

#![cfg(target_os = "linux")]
// Test code: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rstest::rstest;

const WORKER: &str = env!("CARGO_BIN_EXE_dsh-worker");
/// How long anything may take on a slow, loaded machine before the test
/// calls it hung.
const BOUND: Duration = Duration::from_secs(60);
/// The poll interval of the waits below (they wait for an event, bounded
/// by [`BOUND`]; this is not a sleep anything depends on).
const TICK: Duration = Duration::from_millis(10);

/// One process, by pid and start time (field 22 of `/proc/PID/stat`).
#[derive(Debug, Clone, Copy)]
struct Pinned {
    pid: i32,
    start: u64,
}

/// State letter and start time of `pid`, if it exists.
fn stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields[0].chars().next()?, fields[19].parse().ok()?))
}

impl Pinned {
    /// Still there, a zombie included: a zombie is a process nobody
    /// reaped, which is exactly what the shim must not leave behind.
    fn exists(&self) -> bool {
        stat(self.pid).is_some_and(|(_, start)| start == self.start)
    }

    fn is_zombie_or_gone(&self) -> bool {
        stat(self.pid).is_none_or(|(state, start)| start != self.start || state == 'Z')
    }
}

/// A test's directory; on drop, SIGKILLs whatever still mentions it.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("dsh-reap-")
            .tempdir()
            .unwrap();
        let scene = Scene { dir };
        // The leftover: a shell that starts a long sleep, writes both pids
        // with their start times, and waits. Its command line carries the
        // marker.
        scene.write(
            "leftover.sh",
            &format!("sleep 300 &\n{}\nwait\n", pin("$$ $!", &scene.path("pids"))),
        );
        scene
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    /// `setsid sh leftover.sh &` (or another way to detach it) and wait,
    /// in the program, until it has written its pids.
    fn detach(&self, how: &str) -> String {
        let leftover = self.path("leftover.sh");
        let pids = self.path("pids");
        let start = match how {
            "setsid" => format!("setsid sh '{}' &", leftover.display()),
            "double-fork" => format!("( sh '{}' & )", leftover.display()),
            other => panic!("no way {other}"),
        };
        format!(
            "{start}\nwhile [ ! -s '{}' ]; do sleep 0.01; done\n",
            pids.display()
        )
    }

    /// The processes a file written by [`pin`] names.
    fn pinned(&self, name: &str) -> Vec<Pinned> {
        std::fs::read_to_string(self.path(name))
            .unwrap()
            .lines()
            .map(|l| {
                let (pid, start) = l.split_once(' ').unwrap();
                Pinned {
                    pid: pid.parse().unwrap(),
                    start: start.parse().unwrap(),
                }
            })
            .collect()
    }

    /// Pids of live processes whose command line mentions this scene.
    fn mentioning(&self) -> Vec<i32> {
        let marker = self.dir.path().to_str().unwrap().as_bytes();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            if cmdline.windows(marker.len()).any(|w| w == marker) {
                found.push(pid);
            }
        }
        found
    }

    /// The program as the shim's child, the shim in a group of its own
    /// (as dsh starts it).
    fn shim(&self, grace_ms: u64, script: &str) -> Command {
        let mut cmd = Command::new(WORKER);
        cmd.args(["reap", "--grace-ms", &grace_ms.to_string(), "--"])
            .args(["sh", "-c", script])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Waits until `name` exists and is not empty (files are written under
    /// a temporary name and renamed), failing early if `child` ended.
    fn wait_for(&self, name: &str, child: &mut Child) {
        let path = self.path(name);
        let until = Instant::now() + BOUND;
        while !std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            if let Some(st) = child.try_wait().unwrap() {
                panic!("the shim ended ({st}) before {name} appeared");
            }
            assert!(Instant::now() < until, "{name} did not appear");
            std::thread::sleep(TICK);
        }
    }

    /// Asserts that nothing this scene started is left.
    fn assert_clean(&self, pinned: &[Pinned]) {
        for p in pinned {
            assert!(!p.exists(), "{p:?} survived: {:?}", stat(p.pid));
        }
        assert_eq!(self.mentioning(), Vec::<i32>::new(), "processes left");
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for pid in self.mentioning() {
            // SAFETY: kill takes no pointers.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Shell text that writes `PID START` for each of `pids` to `file`,
/// atomically (a temporary name, then a rename).
fn pin(pids: &str, file: &Path) -> String {
    let f = file.display();
    format!(
        "for p in {pids}; do echo \"$p $(cut -d' ' -f22 /proc/$p/stat)\"; done > '{f}.tmp' && mv '{f}.tmp' '{f}'"
    )
}

/// Waits for `child`, at most [`BOUND`]; a hung shim fails the test (its
/// group is killed first).
fn wait_bounded(child: &mut Child) -> ExitStatus {
    let until = Instant::now() + BOUND;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() >= until {
            // SAFETY: kill takes no pointers; the group is the shim's own.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("the shim did not end within {BOUND:?}");
        }
        std::thread::sleep(TICK);
    }
}

/// Status, stdout and stderr of a shim that ends by itself. The pipes are
/// read on threads and waited for at most [`BOUND`]: a survivor holding
/// them open must fail the test, not hang it.
fn finish(mut child: Child) -> (ExitStatus, String, String) {
    let (tx, rx) = std::sync::mpsc::channel();
    let readers = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ];
    for (i, pipe) in readers.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                pipe.read_to_string(&mut text).unwrap();
            }
            let _ = tx.send((i, text));
        });
    }
    let st = wait_bounded(&mut child);
    let mut texts = [String::new(), String::new()];
    let until = Instant::now() + BOUND;
    for _ in 0..2 {
        let left = until.saturating_duration_since(Instant::now());
        let (i, text) = rx
            .recv_timeout(left)
            .expect("the shim's stdout/stderr stayed open after it ended: a survivor holds them");
        texts[i] = text;
    }
    let [out, err] = texts;
    (st, out, err)
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill takes no pointers.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[rstest]
#[case::zero("exit 0", Some(0), None)]
#[case::three("exit 3", Some(3), None)]
#[case::killed("kill -KILL $$", None, Some(libc::SIGKILL))]
#[case::terminated("kill -TERM $$", None, Some(libc::SIGTERM))]
fn the_exit_status_passes_through(
    #[case] script: &str,
    #[case] code: Option<i32>,
    #[case] signal: Option<i32>,
) {
    let scene = Scene::new();
    let (st, _, err) = finish(scene.shim(5000, script).spawn().unwrap());
    assert_eq!((st.code(), st.signal()), (code, signal), "{err}");
    assert_eq!(err, "", "nothing left behind, nothing said");
}

#[test]
fn stdin_stdout_and_stderr_pass_through() {
    let scene = Scene::new();
    let mut child = scene
        .shim(
            5000,
            "read line; echo \"out:$line\"; echo \"err:$line\" >&2",
        )
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let (st, out, err) = finish(child);
    assert!(st.success());
    assert_eq!(out, "out:hello\n");
    assert_eq!(err, "err:hello\n");
}

/// Fails without the sweep: the detached shell and its sleep would run on
/// (re-parented to init), and nothing would be said.
#[rstest]
#[case::setsid("setsid")]
#[case::double_fork("double-fork")]
fn what_the_program_leaves_behind_is_stopped_reaped_and_named(#[case] how: &str) {
    let scene = Scene::new();
    let script = format!("{}echo started", scene.detach(how));
    let (st, out, err) = finish(scene.shim(5000, &script).spawn().unwrap());
    assert_eq!(st.code(), Some(0), "{err}");
    assert_eq!(out, "started\n");
    let left = scene.pinned("pids");
    // Gone as soon as the shim is: killed *and* reaped by it.
    scene.assert_clean(&left);
    assert_eq!(err.lines().count(), 1, "{err}");
    // The shell and its sleep, and possibly a helper of the shell's (its
    // `mv`) caught while exiting.
    let count: usize = err
        .strip_prefix("dsh: stopped ")
        .and_then(|rest| rest.split_once(" process(es) the agent left behind: "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("not the leftover line: {err}"));
    assert!((2..=3).contains(&count), "{err}");
    for p in &left {
        assert!(
            err.contains(&format!("{} (", p.pid)),
            "{p:?} not named: {err}"
        );
    }
}

/// A group stop (what dsh does) while a detached shell runs, which the
/// group signal never reaches: the shim stops it too, and everything ends
/// long before the grace. Fails if the shim dies of the SIGTERM itself
/// (the detached shell runs on) or hides how the program ended.
#[test]
fn sigterm_to_the_group_stops_the_detached_processes_too() {
    let scene = Scene::new();
    let grace = Duration::from_secs(30);
    let script = format!(
        "{}{}\nwait",
        scene.detach("setsid"),
        pin("$$", &scene.path("program"))
    );
    let mut child = scene
        .shim(grace.as_millis() as u64, &script)
        .spawn()
        .unwrap();
    scene.wait_for("program", &mut child);
    let mut procs = scene.pinned("pids");
    procs.extend(scene.pinned("program"));
    let sent = Instant::now();
    signal(-(child.id() as i32), libc::SIGTERM);
    let (st, _, err) = finish(child);
    assert!(sent.elapsed() < grace, "needed {:?}", sent.elapsed());
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st} {err}");
    scene.assert_clean(&procs);
}

/// Only the shim is signalled (as by its parent-death signal): it must
/// stop the program and the detached processes itself. Fails if it only
/// waits (the program would run until the grace, then die of SIGKILL).
#[test]
fn sigterm_to_the_shim_alone_stops_everything() {
    let scene = Scene::new();
    let script = format!(
        "{}{}\nwait",
        scene.detach("setsid"),
        pin("$$", &scene.path("program"))
    );
    let mut child = scene.shim(30_000, &script).spawn().unwrap();
    scene.wait_for("program", &mut child);
    let mut procs = scene.pinned("pids");
    procs.extend(scene.pinned("program"));
    signal(child.id() as i32, libc::SIGTERM);
    let (st, _, err) = finish(child);
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st} {err}");
    scene.assert_clean(&procs);
}

/// A program (and its detached shell, which inherits the ignored
/// disposition) that ignores SIGTERM is SIGKILLed once the grace is over,
/// not before.
#[test]
fn a_program_ignoring_sigterm_is_killed_after_the_grace() {
    let scene = Scene::new();
    let grace = Duration::from_millis(1000);
    let script = format!(
        "trap '' TERM\n{}{}\nexec sleep 300",
        scene.detach("setsid"),
        pin("$$", &scene.path("program"))
    );
    let mut child = scene
        .shim(grace.as_millis() as u64, &script)
        .spawn()
        .unwrap();
    scene.wait_for("program", &mut child);
    let mut procs = scene.pinned("pids");
    procs.extend(scene.pinned("program"));
    let sent = Instant::now();
    signal(-(child.id() as i32), libc::SIGTERM);
    let (st, _, err) = finish(child);
    assert!(sent.elapsed() >= grace, "killed after {:?}", sent.elapsed());
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st} {err}");
    scene.assert_clean(&procs);
}

/// The shim's parent dies (as dsh would): its parent-death signal is
/// SIGTERM, and it stops everything before it goes.
#[test]
fn the_death_of_the_shims_parent_stops_everything() {
    let scene = Scene::new();
    let script = format!(
        "{}{}\nwait",
        scene.detach("setsid"),
        pin("$$", &scene.path("program"))
    );
    scene.write("program.sh", &script);
    // The parent: starts the shim, writes its pid, waits.
    let parent_script = format!(
        "'{WORKER}' reap --grace-ms 30000 -- sh '{}' &\n{}\nwait",
        scene.path("program.sh").display(),
        pin("$!", &scene.path("shim"))
    );
    let mut parent = Command::new("sh")
        .args(["-c", &parent_script])
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    scene.wait_for("program", &mut parent);
    scene.wait_for("shim", &mut parent);
    let shim = scene.pinned("shim")[0];
    let mut procs = scene.pinned("pids");
    procs.extend(scene.pinned("program"));
    parent.kill().unwrap();
    parent.wait().unwrap();
    // The shim now belongs to init (or another subreaper), which reaps it
    // when it likes: wait until it has at least ended.
    let until = Instant::now() + BOUND;
    while !shim.is_zombie_or_gone() {
        assert!(Instant::now() < until, "the shim did not end");
        std::thread::sleep(TICK);
    }
    // It reaped everything beneath it before it ended.
    scene.assert_clean(&procs);
}

#[test]
fn a_missing_program_is_127_and_named() {
    let scene = Scene::new();
    let missing = scene.path("no-such-agent");
    let child = Command::new(WORKER)
        .args(["reap", "--"])
        .arg(&missing)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (st, _, err) = finish(child);
    assert_eq!(st.code(), Some(127), "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(err.starts_with("dsh: cannot run"), "{err}");
}

#[test]
fn a_program_that_cannot_be_executed_is_126() {
    let scene = Scene::new();
    scene.write("not-executable", "#!/bin/sh\n");
    let child = Command::new(WORKER)
        .args(["reap", "--"])
        .arg(scene.path("not-executable"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (st, _, err) = finish(child);
    assert_eq!(st.code(), Some(126), "{err}");
    assert!(err.contains("not-executable"), "{err}");
}

#[rstest]
#[case::no_program(&["reap"])]
#[case::no_separator(&["reap", "sh"])]
#[case::bad_grace(&["reap", "--grace-ms", "soon", "--", "true"])]
fn a_bad_command_line_is_2_with_the_usage(#[case] args: &[&str]) {
    let child = Command::new(WORKER)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (st, _, err) = finish(child);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("usage: dsh-worker reap"), "{err}");
}
