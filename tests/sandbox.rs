//! The sandbox through `dsh` and real workers: the level a run reached is
//! in `--output result` and in `--verbose`; `strict` fails closed before
//! the body runs when Landlock is missing (pretended with the worker's
//! testing switch `DSH_WORKER_TESTING=landlock-abi=0`); the kernel's backstops (the data
//! and CPU rlimits) read as `MEMORY` and `TIMEOUT`, not as a mystery exit.
//!
//! What each sandbox rule denies is tried one by one in
//! worker/tests/sandbox.rs.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{
    DSH, Output, Workspace, assert_event_guarantees, assert_mentions, assert_process_gone, fixture,
    process_alive,
};
use serde_json::{Value, json};

/// A kernel that cannot enforce a rule fails the test, visibly, unless the
/// person running it accepts that with `DSH_TEST_ALLOW_WEAK_SANDBOX=1`
/// (then the gap is printed and the test checks the report admits it).
fn weaker_kernel(what: &str) {
    assert!(
        std::env::var_os("DSH_TEST_ALLOW_WEAK_SANDBOX").is_some(),
        "NOT ENFORCED on this kernel: {what}. Set DSH_TEST_ALLOW_WEAK_SANDBOX=1 to accept it"
    );
    eprintln!("NOT ENFORCED on this kernel (accepted): {what}");
}

fn kernel_abi() -> u32 {
    dsh_worker::sandbox::landlock::kernel_abi()
}

/// A script whose first line would show in the events if the body ran.
const BODY: &str = "log(\"ran\");\nawait agent(\"echo\");\nreturn 1;\n";

fn echo_fixture() -> Value {
    fixture(json!([{ "match": {}, "text": "echoed", "times": 10 }]))
}

/// A workspace whose worker is a shell script `body` (`DSH_WORKER`).
fn with_worker_script(ws: Workspace, body: &str) -> Workspace {
    let path = ws.file("worker.sh", &format!("#!/bin/sh\n{body}\n"));
    let mut perm = std::fs::metadata(&path).expect("stat").permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(&path, perm).expect("chmod");
    let p = path.display().to_string();
    ws.with_env("DSH_WORKER", &p)
}

/// `dsh` itself as the worker, pretending the kernel has no Landlock.
fn without_landlock(ws: Workspace) -> Workspace {
    with_worker_script(
        ws,
        &format!("DSH_WORKER_TESTING=landlock-abi=0 exec '{DSH}' __worker \"$@\""),
    )
}

fn sandbox_of(out: &Output) -> Value {
    out.json()["sandbox"].clone()
}

#[test]
fn the_result_and_verbose_output_show_the_sandbox_reached() {
    let ws = Workspace::new("wf.ts", BODY, Some(&echo_fixture()));
    let out = ws.run(&["--output", "result", "--verbose"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let sandbox = sandbox_of(&out);
    let abi = kernel_abi();
    assert_eq!(sandbox["landlockAbi"], abi, "{sandbox}");
    let enforced = sandbox["enforced"].to_string();
    for rule in [
        "no_new_privs",
        "seccomp:allow-list",
        "capabilities:none",
        "rlimit:core=0",
        "rlimit:fsize=0",
        "rlimit:nofile",
        "rlimit:nproc=0",
        "rlimit:data",
    ] {
        assert!(enforced.contains(rule), "{rule} missing from {enforced}");
    }
    if abi >= 6 {
        assert_eq!(sandbox["level"], "full", "{sandbox}");
        assert_eq!(sandbox["missing"], json!([]));
        assert!(
            out.stderr
                .contains(&format!("dsh: sandbox full (Landlock ABI {abi})")),
            "{}",
            out.stderr
        );
    } else {
        weaker_kernel(&format!("sandbox not full (Landlock ABI {abi}): {sandbox}"));
        assert_eq!(sandbox["level"], "partial", "{sandbox}");
        assert!(out.stderr.contains("not enforced:"), "{}", out.stderr);
    }
}

#[test]
fn strict_runs_where_the_kernel_enforces_everything() {
    let ws = Workspace::new("wf.ts", BODY, Some(&echo_fixture()));
    let out = ws.run(&["--sandbox", "strict", "--output", "result"]);
    assert_event_guarantees(&out.events);
    if kernel_abi() >= 6 {
        out.assert_code(0);
        assert_eq!(sandbox_of(&out)["level"], "full");
    } else {
        weaker_kernel(&format!(
            "Landlock ABI {} is below 6, so strict must refuse",
            kernel_abi()
        ));
        out.assert_code(1);
        out.assert_error_line("SANDBOX_UNAVAILABLE");
    }
}

#[test]
fn strict_without_landlock_fails_closed_before_the_body_runs() {
    let ws = without_landlock(Workspace::new("wf.ts", BODY, Some(&echo_fixture())));
    let out = ws.run(&["--sandbox", "strict", "--output", "result"]);
    out.assert_code(1);
    out.assert_error_line("SANDBOX_UNAVAILABLE");
    assert_event_guarantees(&out.events);
    assert!(
        out.events_of("workflow/log").is_empty(),
        "{:#?}",
        out.events
    );
    assert!(out.events_of("workflow/agent-start").is_empty());
    let result = out.json();
    assert_eq!(result["stopReason"], "error");
    assert_eq!(result["agentsStarted"], 0);
    let msg = result["error"]["message"].as_str().unwrap_or_default();
    assert_mentions(msg, &["strict", "Landlock", "ABI 0", "best-effort"]);
    // The refusal still says what was reached, and what was not.
    let sandbox = sandbox_of(&out);
    assert_eq!(sandbox["level"], "partial", "{sandbox}");
    assert_eq!(sandbox["landlockAbi"], 0, "{sandbox}");
    assert!(
        sandbox["missing"].to_string().contains("landlock:fs"),
        "{sandbox}"
    );
    assert!(
        sandbox["enforced"]
            .to_string()
            .contains("seccomp:allow-list"),
        "{sandbox}"
    );
}

#[test]
fn best_effort_without_landlock_runs_and_reports_partial() {
    let ws = without_landlock(Workspace::new("wf.ts", BODY, Some(&echo_fixture())));
    let out = ws.run(&["--output", "result", "--verbose"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let sandbox = sandbox_of(&out);
    assert_eq!(sandbox["level"], "partial", "{sandbox}");
    assert_eq!(sandbox["landlockAbi"], 0);
    assert!(
        sandbox["missing"].to_string().contains("landlock:fs"),
        "{sandbox}"
    );
    assert!(
        out.stderr.contains("dsh: sandbox partial"),
        "{}",
        out.stderr
    );
}

#[test]
fn sandbox_off_enforces_nothing_and_says_so() {
    let ws = Workspace::new("wf.ts", BODY, Some(&echo_fixture()));
    let out = ws.run(&["--sandbox", "off", "--output", "result"]);
    out.assert_code(0);
    let sandbox = sandbox_of(&out);
    assert_eq!(
        sandbox,
        json!({ "level": "none", "landlockAbi": null, "enforced": [], "missing": [] })
    );
}

/// Kills the process `pid` (one this test started) if it is still there
/// when the test ends, pass or fail.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if process_alive(self.0)
            && let Ok(pid) = libc::pid_t::try_from(self.0)
        {
            // SAFETY: plain syscall; the pid is the test's own grandchild,
            // checked alive just now.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Without the sandbox a worker could fork (here: its wrapper does, before
/// exec'ing the real worker). Whatever it left in its process group dies
/// with the run: the host kills the group before it reaps the worker.
#[rstest::rstest]
#[case::completed("return 1;\n", &[], 0)]
#[case::failed("throw new Error('no');\n", &[], 1)]
#[case::timed_out("while (true) {}\n", &["--timeout", "1s"], 124)]
fn no_grandchild_of_an_unsandboxed_worker_survives_its_run(
    #[case] body: &str,
    #[case] extra: &[&str],
    #[case] code: i32,
) {
    let ws = Workspace::new("wf.ts", body, None);
    let pid_file = ws.file("grandchild.pid", "");
    let ws = with_worker_script(
        ws,
        &format!(
            "sleep 300 &\necho $! > '{}'\nexec '{DSH}' __worker \"$@\"",
            pid_file.display()
        ),
    );
    let mut args = vec!["--sandbox", "off", "--no-journal"];
    args.extend_from_slice(extra);
    let out = ws.run(&args);
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("the wrapper wrote the grandchild's pid");
    let _cleanup = KillOnDrop(pid);
    out.assert_code(code);
    assert_process_gone(pid);
}

#[test]
fn an_unknown_sandbox_policy_is_a_usage_error() {
    let ws = Workspace::new("wf.ts", BODY, Some(&echo_fixture()));
    let out = ws.run(&["--sandbox", "lenient"]);
    out.assert_code(2);
    // Parsed by clap like --events: the value and the possible ones.
    assert!(
        out.stderr
            .starts_with("error[USAGE]: invalid value 'lenient' for '--sandbox <POLICY>'"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("[possible values: strict, best-effort, off]"),
        "{}",
        out.stderr
    );
}

/// The kernel's backstops: a worker that dies the way the data limit or
/// the CPU limit kills it reads as the budget, not as `WORKER_EXITED`.
#[rstest::rstest]
#[case::data_limit_exit(
    &format!("exit {}", dsh_protocol::WORKER_EXIT_OUT_OF_MEMORY),
    &[][..],
    "MEMORY",
    &["memory", "--memory"][..]
)]
#[case::cpu_limit_signal("kill -XCPU $$", &["--compute-timeout", "1s"][..], "TIMEOUT", &["computeMs (1000 ms)"][..])]
#[case::any_other_death("exit 7", &[][..], "WORKER_EXITED", &["status 7"][..])]
fn backstop_deaths_read_as_their_budget(
    #[case] worker: &str,
    #[case] flags: &[&str],
    #[case] code: &str,
    #[case] mentions: &[&str],
) {
    let ws = with_worker_script(Workspace::new("wf.ts", BODY, Some(&echo_fixture())), worker);
    let mut args = vec!["--output", "result"];
    args.extend_from_slice(flags);
    let out = ws.run(&args);
    out.assert_code(1);
    out.assert_error_line(code);
    assert_event_guarantees(&out.events);
    let result = out.json();
    assert_eq!(result["stopReason"], "error");
    assert_eq!(result["error"]["code"], code);
    assert_mentions(
        result["error"]["message"].as_str().unwrap_or_default(),
        mentions,
    );
}

#[test]
fn compute_timeout_stops_a_spin_after_an_await() {
    let ws = Workspace::new(
        "wf.ts",
        "await agent(\"echo\");\nwhile (true) {}\n",
        Some(&echo_fixture()),
    );
    let out = ws.run(&["--compute-timeout", "300ms", "--output", "result"]);
    out.assert_code(1);
    out.assert_error_line("TIMEOUT");
    assert_event_guarantees(&out.events);
    let result = out.json();
    assert_eq!(result["stopReason"], "error");
    assert_eq!(result["agentsStarted"], 1);
    assert_mentions(
        result["error"]["message"].as_str().unwrap_or_default(),
        &["computeMs (300 ms)", "CPU"],
    );
}

#[test]
fn compute_timeout_adds_up_many_short_slices() {
    // No single slice comes near the sync timeout; together they exceed
    // the CPU budget.
    let script = "for (;;) {\n  await new Promise((r) => setTimeout(r, 1));\n  const s = Date.now();\n  while (Date.now() - s < 20) {}\n}\n";
    let ws = Workspace::new("wf.ts", script, Some(&echo_fixture()));
    let out = ws.run(&[
        "--compute-timeout",
        "300ms",
        "--sync-timeout",
        "5s",
        "--output",
        "result",
    ]);
    out.assert_code(1);
    out.assert_error_line("TIMEOUT");
    assert_mentions(
        out.json()["error"]["message"].as_str().unwrap_or_default(),
        &["computeMs"],
    );
}

#[test]
fn a_script_within_its_compute_budget_completes() {
    let ws = Workspace::new("wf.ts", BODY, Some(&echo_fixture()));
    let out = ws.run(&["--compute-timeout", "10s", "--output", "result"]);
    out.assert_code(0);
    assert!(
        sandbox_of(&out)["enforced"]
            .to_string()
            .contains("rlimit:cpu"),
        "{}",
        out.stdout
    );
}

#[rstest::rstest]
#[case::zero(&["--compute-timeout", "0s"][..], "--compute-timeout")]
#[case::garbage(&["--compute-timeout", "soon"][..], "soon")]
fn invalid_compute_timeouts_are_usage_errors(#[case] flags: &[&str], #[case] mention: &str) {
    let ws = Workspace::new("wf.ts", BODY, Some(&echo_fixture()));
    let out = ws.run(flags);
    out.assert_code(2);
    assert!(out.stderr.starts_with("error[USAGE]: "), "{}", out.stderr);
    assert!(out.stderr.contains(mention), "{}", out.stderr);
}

/// The worker's `--parent` names a process id; anything else is a usage
/// error that says what was wrong and what is accepted, before any socket
/// is used. Its sandbox policy is not an argument (see below).
#[rstest::rstest]
#[case::sandbox_argument(&["--sandbox", "off", "--fd", "3"], "unknown argument \"--sandbox\"")]
#[case::parent_garbage(&["--fd", "0", "--parent", "host"], "--parent needs the host's process id")]
#[case::parent_zero(&["--fd", "0", "--parent", "0"], "--parent needs the host's process id")]
#[case::parent_missing(&["--fd", "0", "--parent"], "--parent needs the host's process id")]
fn a_bad_worker_argument_is_a_usage_error(#[case] args: &[&str], #[case] says: &str) {
    let out = std::process::Command::new(DSH)
        .arg("__worker")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
}

/// The worker arms its own parent-death signal (the host spawns it with
/// nothing run between fork and exec). A host that died before that was
/// armed would never send it, so a worker whose `--parent` is already gone
/// exits at once (status 111) instead of waiting on a socket forever.
#[test]
fn a_worker_whose_host_is_already_gone_exits_at_once() {
    let mut gone = std::process::Command::new("/bin/true")
        .spawn()
        .expect("spawn /bin/true");
    let gone_pid = gone.id();
    gone.wait().expect("reap /bin/true");
    // Its end of a socket the test keeps open: a worker that did not
    // notice would block reading `Init` from it, not fail on a closed one.
    let (_ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let mut worker = std::process::Command::new(DSH)
        .args(["__worker", "--fd", "0", "--parent", &gone_pid.to_string()])
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .spawn()
        .expect("run the worker");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = worker.try_wait().expect("wait for the worker") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = worker.kill();
            let _ = worker.wait();
            panic!("the worker outlived its dead host by 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(111), "{status}");
}

/// The policy line is the one way a worker learns its sandbox policy: a
/// line that names no policy, or none before the first frame, and the
/// worker says so and exits without saying `Hello` — it never runs
/// unconfined on a guess. A socket closed before any byte is no run at
/// all: the worker exits 0.
#[rstest::rstest]
#[case::unknown(
    b"lax\n",
    Some("unknown sandbox policy \"lax\": expected one of strict, best-effort, off")
)]
#[case::not_a_line(&[0u8; 80], Some("longer than 64 bytes"))]
#[case::cut(b"best-", Some("in the middle of the policy line"))]
#[case::nothing(b"", None)]
fn a_bad_policy_line_stops_the_worker_before_hello(
    #[case] line: &[u8],
    #[case] says: Option<&str>,
) {
    use std::io::{Read as _, Write as _};
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    ours.write_all(line).expect("write the line");
    ours.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let out = std::process::Command::new(DSH)
        .args(["__worker", "--fd", "0"])
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .output()
        .expect("run the worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A worker that leaves part of the line unread resets the socket:
    // what it said before that is still read first.
    let mut said = Vec::new();
    if let Err(e) = ours.read_to_end(&mut said) {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(said.is_empty(), "the worker said something: {said:?}");
    match says {
        Some(says) => {
            assert_ne!(out.status.code(), Some(0), "{stderr}");
            assert!(stderr.contains(says), "{stderr}");
        }
        None => assert_eq!(out.status.code(), Some(0), "{stderr}"),
    }
}
