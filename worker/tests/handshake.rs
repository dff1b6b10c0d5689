//! The handshake from the worker's side, end to end with the real
//! `dsh-worker` process and the raw protocol: the host sends `Go` in the
//! same write as `Init` (protocol version 9), so the worker finds it
//! waiting once it has built the run; a `Cancel` that is already in when
//! the worker is about to start the body wins over that `Go`, and the body
//! never runs a line.

#![cfg(target_os = "linux")]
// Test code: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dsh_protocol::{
    Args, CancelReason, DEFAULT_MAX_FRAME_BYTES, EndOutcome, FrameBuffer, HostMsg, Init, Limits,
    PROTOCOL_VERSION, WorkerMsg, encode,
};
use rstest::rstest;

const WORKER: &str = env!("CARGO_BIN_EXE_dsh-worker");
/// How long a read may wait on a slow, loaded machine before the test
/// calls the worker hung.
const BOUND: Duration = Duration::from_secs(60);

/// A body that says it ran before anything else, then asks for an agent.
const BODY: &str = "(async function () {\nlog(\"body ran\");\nawait agent(\"q\");\nreturn 1;\n})";

struct Worker {
    child: Child,
    sock: UnixStream,
    frames: FrameBuffer,
}

impl Worker {
    /// Spawns `dsh-worker` on one end of a socket pair and reads its `Hello`.
    fn start() -> Worker {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        ours.write_all(b"off\n").unwrap();
        let child = Command::new(WORKER)
            .args(["--fd", "0", "--parent"])
            .arg(std::process::id().to_string())
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        ours.set_read_timeout(Some(BOUND)).unwrap();
        let mut w = Worker {
            child,
            sock: ours,
            frames: FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES),
        };
        match w.next() {
            WorkerMsg::Hello {
                protocol_version, ..
            } => assert_eq!(protocol_version, PROTOCOL_VERSION),
            other => panic!("expected Hello, got {other:?}"),
        }
        w
    }

    /// Writes `msgs` in one write, as the host does with `Init` and `Go`.
    fn send_together(&mut self, msgs: &[HostMsg]) {
        let mut bytes = Vec::new();
        for m in msgs {
            bytes.extend(encode(m, DEFAULT_MAX_FRAME_BYTES).unwrap());
        }
        self.sock.write_all(&bytes).unwrap();
    }

    fn next(&mut self) -> WorkerMsg {
        loop {
            if let Some(m) = self.frames.next_msg::<WorkerMsg>().unwrap() {
                return m;
            }
            let mut buf = [0u8; 4096];
            let n = self.sock.read(&mut buf).expect("the worker answers");
            assert!(n > 0, "the worker hung up without an End");
            self.frames.push(&buf[..n]);
        }
    }

    /// Every message up to and including `End`; the worker then exits 0.
    fn until_end(mut self) -> Vec<WorkerMsg> {
        let mut seen = Vec::new();
        loop {
            let m = self.next();
            let end = matches!(m, WorkerMsg::End { .. });
            seen.push(m);
            if end {
                break;
            }
        }
        drop(self.sock);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "worker exit: {status}");
        seen
    }
}

fn init() -> HostMsg {
    HostMsg::Init(Box::new(Init {
        run_id: "run-handshake".into(),
        script_name: "handshake.ts".into(),
        script_js: BODY.into(),
        meta_json: r#"{"name":"handshake","description":"the handshake"}"#.into(),
        args: Args::None,
        limits: Limits {
            max_concurrent_agents: 16,
            max_total_agents: 100,
            max_items_per_call: 100,
            sync_timeout_ms: 30_000,
            budget_tokens: None,
            memory_bytes: 64 << 20,
            compute_ms: None,
            log_bytes: 1 << 20,
            cancel_interrupt_ms: 1,
        },
    }))
}

fn cancel() -> HostMsg {
    HostMsg::Cancel {
        reason: CancelReason::Requested("cancelled at the start".into()),
    }
}

#[test]
fn go_sent_with_init_runs_the_body() {
    let mut w = Worker::start();
    w.send_together(&[init(), HostMsg::Go]);
    assert!(matches!(w.next(), WorkerMsg::Ready { .. }));
    // The body runs up to its agent() call: its log line comes first.
    let mut log = None;
    let call = loop {
        match w.next() {
            WorkerMsg::Log { message, .. } => log = Some(message),
            WorkerMsg::ChildStart { call_id, .. } => break call_id,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(log.as_deref(), Some("body ran"));
    // A cancel while the body runs rejects the call and ends the run.
    w.send_together(&[cancel()]);
    let seen = w.until_end();
    let end = seen.last().unwrap();
    assert!(
        matches!(end, WorkerMsg::End { result } if matches!(result.outcome, EndOutcome::Cancelled { .. })),
        "call {call}: {seen:?}"
    );
}

/// `Cancel` behind `Go` (the run cancelled while its worker built it), or
/// in place of `Go` (cancelled before the host sent `Init`): either way
/// the worker says `Ready` and ends cancelled without running the body.
#[rstest]
#[case::behind_go(vec![init(), HostMsg::Go, cancel()])]
#[case::in_place_of_go(vec![init(), cancel()])]
fn a_cancel_already_in_means_the_body_never_runs(#[case] msgs: Vec<HostMsg>) {
    let mut w = Worker::start();
    w.send_together(&msgs);
    let seen = w.until_end();
    assert!(
        matches!(seen.first(), Some(WorkerMsg::Ready { .. })),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 2, "only Ready and End: {seen:?}");
    match &seen[1] {
        WorkerMsg::End { result } => match &result.outcome {
            EndOutcome::Cancelled { error } => {
                assert!(
                    error.message.contains("cancelled at the start"),
                    "{error:?}"
                );
                assert_eq!(result.agents_started, 0);
            }
            other => panic!("expected a cancelled end, got {other:?}"),
        },
        other => panic!("expected End, got {other:?}"),
    }
}

/// Regression (issue 33): an exec'd worker (spawned by the host with
/// `posix_spawn`) kept every descriptor the host had inherited without
/// close-on-exec; a script escaping the engine could use them (Landlock
/// checks opens, not descriptors already open). By its `Hello` it holds
/// nothing but stdio and the socket.
#[test]
fn an_execd_worker_keeps_no_inherited_descriptor() {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::CommandExt as _;
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    ours.write_all(b"off\n").unwrap();
    let file = std::fs::File::open(WORKER).unwrap();
    let fd = file.as_raw_fd();
    let mut cmd = Command::new(WORKER);
    cmd.args(["--fd", "0", "--parent"])
        .arg(std::process::id().to_string())
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: dup2 only (async-signal-safe), in the test's own child: fd 7
    // open without close-on-exec, as an inherited descriptor is.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut sock = ours;
    sock.set_read_timeout(Some(BOUND)).unwrap();
    let mut frames = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
    let hello = loop {
        if let Some(m) = frames.next_msg::<WorkerMsg>().unwrap() {
            break m;
        }
        let mut buf = [0u8; 4096];
        let n = sock.read(&mut buf).expect("the worker answers");
        assert!(n > 0, "the worker hung up before its Hello");
        frames.push(&buf[..n]);
    };
    assert!(matches!(hello, WorkerMsg::Hello { .. }), "{hello:?}");
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!fds.contains(&"7".to_string()), "{fds:?}");
}
