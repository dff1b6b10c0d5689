//! One agent program: spawned in its own process group, its output drained
//! concurrently and bounded, stopped with SIGTERM → grace → SIGKILL, always
//! reaped.
//!
//! The process discipline is the host's one ([`dsh_exec::process`]): the
//! program leads its own process group, its exit is observed without
//! reaping it, and
//! - whatever way the leader ends — on its own, timed out, over the output
//!   cap, cancelled — anything left in its group is SIGKILLed before the
//!   leader is reaped: no survivor, no orphan.
//! - stdout is kept up to the cap (one byte more is an overflow), stderr only
//!   as a tail. After the leader exits the pipes are drained for a bounded
//!   time only (a process that escaped the group may hold them open).
//! - programs are spawned from the host's spawner thread with a
//!   parent-death signal, so a host killed with SIGKILL does not leave
//!   agent CLIs running;
//! - a dropped run (runtime shutdown) SIGKILLs the group while the leader
//!   is still unreaped; tokio's `kill_on_drop` then reaps it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use dsh_exec::process::{ProcessGroup, spawner};

/// How much longer than the reaper's own grace the host waits before it
/// SIGKILLs the reaper's group: the reaper stops what the program (a CLI or
/// a `command`) left behind within its grace, and must not be killed while
/// doing so.
pub(crate) const REAPER_MARGIN: Duration = Duration::from_secs(1);

/// How much of stderr is kept (its end).
pub const STDERR_TAIL: usize = 4096;
/// How long the pipes are drained after the leader exited and its group
/// was killed.
const DRAIN_BOUND: Duration = Duration::from_secs(2);
/// How long to wait for the leader after SIGKILL before giving up on it
/// (a process stuck in the kernel); it is then reaped by tokio later.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcSpec {
    /// Resolved program path.
    pub program: PathBuf,
    /// Arguments after the program.
    pub args: Vec<String>,
    /// The complete environment.
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// Written to stdin, which is then closed; stdin is null when `None`.
    pub stdin: Option<Vec<u8>>,
}

/// Bounds of one run.
#[derive(Debug, Clone, Copy)]
pub struct ProcLimits {
    pub timeout: Option<Duration>,
    pub output_limit: u64,
    pub grace: Duration,
}

/// Why the program stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited on its own.
    Exited,
    /// The per-call timeout ran out; it was stopped.
    TimedOut,
    /// It wrote more than the cap to stdout; it was stopped.
    Overflow,
    /// Cancelled; it was stopped.
    Cancelled,
}

/// A finished program.
#[derive(Debug)]
pub struct Finished {
    pub ending: Ending,
    /// `None` when the leader could not be reaped (stuck in the kernel even
    /// after SIGKILL).
    pub status: Option<ExitStatus>,
    /// At most the cap.
    pub stdout: Vec<u8>,
    /// The last [`STDERR_TAIL`] bytes of stderr.
    pub stderr_tail: Vec<u8>,
    /// Whether stderr was longer than the tail.
    pub stderr_truncated: bool,
}

// ------------------------------------------------------------------ spawning

/// A spawned program, not yet waited for.
pub struct Running {
    group: ProcessGroup,
    stdin: Option<ChildStdin>,
    stdin_data: Option<Vec<u8>>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// Spawns `spec` in a new process group with a parent-death signal,
/// stdout and stderr piped.
pub async fn spawn(spec: &ProcSpec) -> std::io::Result<Running> {
    let mut cmd = std::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawner::own_group(&mut cmd, || Ok(()));
    let mut group = spawner::spawn(cmd).await?;
    let (stdin, stdout, stderr) = match group.child_mut() {
        Some(child) => (child.stdin.take(), child.stdout.take(), child.stderr.take()),
        None => (None, None, None),
    };
    Ok(Running {
        group,
        stdin,
        stdin_data: spec.stdin.clone(),
        stdout,
        stderr,
    })
}

// ------------------------------------------------------------------ running

/// Reads from an optional pipe; pending forever when there is none.
async fn read_opt<R: AsyncRead + Unpin>(
    r: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn write_stdin(stdin: Option<ChildStdin>, data: Option<Vec<u8>>) {
    if let (Some(mut w), Some(data)) = (stdin, data) {
        // A program that does not read its stdin (EPIPE) is its business.
        let _ = w.write_all(&data).await;
        let _ = w.shutdown().await;
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Sees stdout as it arrives, instead of it being kept (an agent CLI's
/// stream of JSON lines, read while the CLI runs).
pub type StdoutTap<'a> = &'a mut (dyn FnMut(&[u8]) + Send);

struct Sink<'a> {
    /// Told of every byte the program writes, on either stream.
    progress: dsh_seam::Progress,
    tap: Option<StdoutTap<'a>>,
    /// Bytes seen on stdout (against the cap when a tap takes them).
    seen: u64,
    out: Vec<u8>,
    cap: usize,
    keep_out: bool,
    overflow: bool,
    err: std::collections::VecDeque<u8>,
    err_truncated: bool,
}

impl Sink<'_> {
    fn stdout(&mut self, data: &[u8]) {
        self.progress.report();
        if !self.keep_out || self.overflow {
            return;
        }
        if let Some(tap) = self.tap.as_mut() {
            self.seen = self.seen.saturating_add(data.len() as u64);
            if self.seen > self.cap as u64 {
                self.overflow = true;
                return;
            }
            tap(data);
            return;
        }
        if self.out.len() + data.len() > self.cap {
            let room = self.cap - self.out.len();
            self.out.extend_from_slice(&data[..room]);
            self.overflow = true;
        } else {
            self.out.extend_from_slice(data);
        }
    }

    fn stderr(&mut self, data: &[u8]) {
        self.progress.report();
        self.err.extend(data);
        if self.err.len() > STDERR_TAIL {
            let extra = self.err.len() - STDERR_TAIL;
            self.err.drain(..extra);
            self.err_truncated = true;
        }
    }
}

impl Running {
    /// The leader's process id (also its group id).
    pub fn pid(&self) -> u32 {
        self.group.pid()
    }

    /// Runs to the end: the program exits, or is stopped by `cancel`, the
    /// timeout or the output cap. The group is gone and the leader reaped
    /// (unless stuck in the kernel) when this returns. Any output, on
    /// stdout or stderr, is reported to `progress`.
    ///
    /// With a `tap`, stdout goes to it as it arrives and is not kept
    /// ([`Finished::stdout`] is empty); `output_limit` still bounds it.
    pub async fn finish(
        mut self,
        limits: ProcLimits,
        cancel: &CancellationToken,
        progress: dsh_seam::Progress,
        tap: Option<StdoutTap<'_>>,
    ) -> Finished {
        let cap = usize::try_from(limits.output_limit).unwrap_or(usize::MAX);
        let mut sink = Sink {
            progress,
            tap,
            seen: 0,
            out: Vec::new(),
            cap,
            keep_out: true,
            overflow: false,
            err: std::collections::VecDeque::new(),
            err_truncated: false,
        };
        let mut pipes = Pipes {
            stdout: self.stdout.take(),
            stderr: self.stderr.take(),
            obuf: vec![0u8; 64 * 1024],
            ebuf: vec![0u8; 8 * 1024],
        };
        // Boxed so that it (and the pipe it owns) can be dropped early.
        let mut stdin_fut = Box::pin(write_stdin(self.stdin.take(), self.stdin_data.take()));
        let mut stdin_done = false;
        let deadline = limits.timeout.map(|t| Instant::now() + t);

        // 1. Until the leader exits or something stops it.
        let mut ending = None;
        while ending.is_none() {
            tokio::select! {
                biased;
                _ = self.group.exited() => break,
                _ = cancel.cancelled() => ending = Some(Ending::Cancelled),
                _ = sleep_until_opt(deadline) => ending = Some(Ending::TimedOut),
                r = read_opt(&mut pipes.stdout, &mut pipes.obuf) => match r {
                    Ok(n) if n > 0 => {
                        sink.stdout(&pipes.obuf[..n]);
                        if sink.overflow {
                            ending = Some(Ending::Overflow);
                        }
                    }
                    _ => pipes.stdout = None,
                },
                r = read_opt(&mut pipes.stderr, &mut pipes.ebuf) => match r {
                    Ok(n) if n > 0 => sink.stderr(&pipes.ebuf[..n]),
                    _ => pipes.stderr = None,
                },
                _ = &mut stdin_fut, if !stdin_done => stdin_done = true,
            }
        }

        // 2. Stopping (SIGTERM, the grace, SIGKILL) unless it exited.
        let leader_exited =
            ending.is_none() || stop(&mut self.group, limits.grace, &mut pipes, &mut sink).await;
        let ending = ending.unwrap_or(Ending::Exited);

        // 3. The leader is a zombie (or stuck): nothing of its group may
        //    outlive it.
        self.group.signal(nix::sys::signal::Signal::SIGKILL);
        // Its stdin is of no use any more (and may never be read).
        drop(stdin_fut);

        // 4. What is left in the pipes, for a bounded time.
        pipes.drain(&mut sink).await;
        let ending = if ending == Ending::Exited && sink.overflow {
            Ending::Overflow
        } else {
            ending
        };

        // 5. Reap.
        let status = if leader_exited {
            self.group.reap().await
        } else {
            None
        };
        Finished {
            ending,
            status,
            stdout: sink.out,
            stderr_tail: sink.err.into_iter().collect(),
            stderr_truncated: sink.err_truncated,
        }
    }
}

/// The program's output pipes (`None` once closed) and a read buffer
/// for each.
struct Pipes {
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    obuf: Vec<u8>,
    ebuf: Vec<u8>,
}

impl Pipes {
    /// Reads what is left in both pipes into `sink` until they close, for
    /// at most [`DRAIN_BOUND`].
    async fn drain(&mut self, sink: &mut Sink<'_>) {
        let drain_deadline = Instant::now() + DRAIN_BOUND;
        while self.stdout.is_some() || self.stderr.is_some() {
            tokio::select! {
                _ = tokio::time::sleep_until(drain_deadline) => break,
                r = read_opt(&mut self.stdout, &mut self.obuf) => match r {
                    Ok(n) if n > 0 => sink.stdout(&self.obuf[..n]),
                    _ => self.stdout = None,
                },
                r = read_opt(&mut self.stderr, &mut self.ebuf) => match r {
                    Ok(n) if n > 0 => sink.stderr(&self.ebuf[..n]),
                    _ => self.stderr = None,
                },
            }
        }
    }
}

/// Stops a program that has not exited: SIGTERM to the group, `grace`,
/// SIGKILL, then at most [`KILL_WAIT`]. The pipes keep being drained (a
/// program flushing on SIGTERM must not block on a full pipe), stdout no
/// longer kept. Whether the leader exited.
async fn stop(
    group: &mut ProcessGroup,
    grace: Duration,
    pipes: &mut Pipes,
    sink: &mut Sink<'_>,
) -> bool {
    sink.keep_out = false;
    group.signal(nix::sys::signal::Signal::SIGTERM);
    let term_deadline = Instant::now() + grace;
    let mut killed = false;
    let mut kill_deadline = None;
    loop {
        tokio::select! {
            biased;
            _ = group.exited() => return true,
            _ = tokio::time::sleep_until(term_deadline), if !killed => {
                group.signal(nix::sys::signal::Signal::SIGKILL);
                killed = true;
                kill_deadline = Some(Instant::now() + KILL_WAIT);
            }
            _ = sleep_until_opt(kill_deadline), if killed => return false,
            r = read_opt(&mut pipes.stdout, &mut pipes.obuf) => if !matches!(r, Ok(n) if n > 0) {
                pipes.stdout = None;
            },
            r = read_opt(&mut pipes.stderr, &mut pipes.ebuf) => match r {
                Ok(n) if n > 0 => sink.stderr(&pipes.ebuf[..n]),
                _ => pipes.stderr = None,
            },
        }
    }
}

pub use dsh_exec::process::describe_status;
