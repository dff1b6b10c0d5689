//! One agent program: spawned in its own process group, its output drained
//! concurrently and bounded, stopped with SIGTERM → grace → SIGKILL, always
//! reaped.
//!
//! The discipline follows the worker's (`run/process.rs`) and
//! cargo-nextest's:
//! - The program leads a new process group (`setpgid(0, 0)`), so one
//!   `killpg` reaches its children too.
//! - The group is signalled **only while the leader is not reaped**: its
//!   pid (the group id) cannot be reused before then. The leader's exit is
//!   therefore observed *without* reaping it (a pidfd, or `waitid` with
//!   `WNOWAIT`), the rest of the group is SIGKILLed, and only then is the
//!   leader reaped.
//! - Whatever way the leader ends — on its own, timed out, over the output
//!   cap, cancelled — anything left in its group is SIGKILLed before the
//!   leader is reaped: no survivor, no orphan.
//! - stdout is kept up to the cap (one byte more is an overflow), stderr only
//!   as a tail. After the leader exits the pipes are drained for a bounded
//!   time only (a process that escaped the group may hold them open).
//! - Programs are spawned from one long-lived thread with a parent-death
//!   signal (`PR_SET_PDEATHSIG`), so a host killed with SIGKILL does not
//!   leave agent CLIs running (see `run/spawn.rs` for why the thread).
//! - A dropped run (runtime shutdown) SIGKILLs the group while the leader is
//!   still unreaped; tokio's `kill_on_drop` then reaps it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How much of stderr is kept (its end).
pub const STDERR_TAIL: usize = 4096;
/// How long the pipes are drained after the leader exited and its group
/// was killed.
const DRAIN_BOUND: Duration = Duration::from_secs(2);
/// How long to wait for the leader after SIGKILL before giving up on it
/// (a process stuck in the kernel); it is then reaped by tokio later.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Poll interval when no pidfd is available.
const EXIT_POLL: Duration = Duration::from_millis(20);

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
    group: Group,
    stdin: Option<ChildStdin>,
    stdin_data: Option<Vec<u8>>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    exit: ExitWatch,
}

/// The child and its process group. Dropping it while the leader is not
/// reaped SIGKILLs the group first (then tokio's `kill_on_drop`).
struct Group {
    child: Child,
    pgid: libc::pid_t,
    reaped: bool,
}

impl Group {
    fn signal(&self, sig: libc::c_int) {
        if self.reaped {
            return;
        }
        // SAFETY: plain syscalls. The leader is not reaped, so its pid —
        // the group id — still names it and this group and cannot be
        // reused. The leader is also signalled directly, in case it moved
        // itself out of the group (setsid, setpgid).
        unsafe {
            libc::killpg(self.pgid, sig);
            libc::kill(self.pgid, sig);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Spawns `spec` in a new process group with a parent-death signal,
/// stdout and stderr piped.
pub async fn spawn(spec: &ProcSpec) -> std::io::Result<Running> {
    // SAFETY: getpid has no preconditions.
    let parent_pid = unsafe { libc::getpid() };
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
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || crate::run::spawn::die_with_parent(parent_pid));
    }
    // The run's worker spawner: one long-lived thread, so the parent-death
    // signal never fires early.
    let mut child = crate::run::spawn::spawn_async(cmd, &tokio::runtime::Handle::current()).await?;
    let pid = child
        .id()
        .and_then(|p| libc::pid_t::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the program exited before it could be tracked"))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let exit = ExitWatch::new(pid);
    Ok(Running {
        group: Group {
            child,
            pgid: pid,
            reaped: false,
        },
        stdin,
        stdin_data: spec.stdin.clone(),
        stdout,
        stderr,
        exit,
    })
}

// ------------------------------------------------------------------ exit without reaping

/// Observes the leader's exit without reaping it.
enum ExitWatch {
    #[cfg(target_os = "linux")]
    Pidfd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>, libc::pid_t),
    Poll(libc::pid_t),
}

impl ExitWatch {
    fn new(pid: libc::pid_t) -> ExitWatch {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::FromRawFd;
            // SAFETY: plain syscall; the child is not reaped, so the pid is ours.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if let Ok(fd) = libc::c_int::try_from(fd)
                && fd >= 0
            {
                // SAFETY: pidfd_open returned a fresh descriptor we own.
                let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
                // SAFETY: the AsyncFd owns the descriptor, which stays open
                // and unchanged until it is dropped.
                let registered = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        owned,
                        tokio::io::Interest::READABLE,
                    )
                };
                if let Ok(afd) = registered {
                    return ExitWatch::Pidfd(afd, pid);
                }
            }
        }
        ExitWatch::Poll(pid)
    }

    /// Resolves once the leader has exited (it stays a zombie until reaped).
    /// Cancel-safe.
    async fn exited(&self) {
        match self {
            #[cfg(target_os = "linux")]
            ExitWatch::Pidfd(afd, pid) => loop {
                match afd.readable().await {
                    Ok(mut guard) => {
                        if has_exited(*pid) {
                            return;
                        }
                        guard.clear_ready();
                    }
                    Err(_) => {
                        // Cannot happen for a registered pidfd; fall back.
                        poll_exit(*pid).await;
                        return;
                    }
                }
            },
            ExitWatch::Poll(pid) => poll_exit(*pid).await,
        }
    }
}

async fn poll_exit(pid: libc::pid_t) {
    while !has_exited(pid) {
        tokio::time::sleep(EXIT_POLL).await;
    }
}

/// `waitid(WEXITED | WNOHANG | WNOWAIT)`: has the child exited? Leaves it
/// unreaped. An error (it is not our child any more) counts as exited, so
/// nothing waits forever.
fn has_exited(pid: libc::pid_t) -> bool {
    let Ok(id) = libc::id_t::try_from(pid) else {
        return true;
    };
    // SAFETY: siginfo_t is plain data; zeroed is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: plain syscall writing into `info`.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                id,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            // SAFETY: waitid filled `info` (or left it zeroed: no event).
            return unsafe { info.si_pid() } != 0;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return true;
        }
    }
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

struct Sink {
    out: Vec<u8>,
    cap: usize,
    keep_out: bool,
    overflow: bool,
    err: std::collections::VecDeque<u8>,
    err_truncated: bool,
}

impl Sink {
    fn stdout(&mut self, data: &[u8]) {
        if !self.keep_out || self.overflow {
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
        self.group.pgid.unsigned_abs()
    }

    /// Runs to the end: the program exits, or is stopped by `cancel`, the
    /// timeout or the output cap. The group is gone and the leader reaped
    /// (unless stuck in the kernel) when this returns.
    pub async fn finish(mut self, limits: ProcLimits, cancel: &CancellationToken) -> Finished {
        let cap = usize::try_from(limits.output_limit).unwrap_or(usize::MAX);
        let mut sink = Sink {
            out: Vec::new(),
            cap,
            keep_out: true,
            overflow: false,
            err: std::collections::VecDeque::new(),
            err_truncated: false,
        };
        let mut stdout = self.stdout.take();
        let mut stderr = self.stderr.take();
        let mut obuf = vec![0u8; 64 * 1024];
        let mut ebuf = vec![0u8; 8 * 1024];
        // Boxed so that it (and the pipe it owns) can be dropped early.
        let mut stdin_fut = Box::pin(write_stdin(self.stdin.take(), self.stdin_data.take()));
        let mut stdin_done = false;
        let deadline = limits.timeout.map(|t| Instant::now() + t);

        // 1. Until the leader exits or something stops it.
        let mut ending = None;
        while ending.is_none() {
            tokio::select! {
                biased;
                _ = self.exit.exited() => break,
                _ = cancel.cancelled() => ending = Some(Ending::Cancelled),
                _ = sleep_until_opt(deadline) => ending = Some(Ending::TimedOut),
                r = read_opt(&mut stdout, &mut obuf) => match r {
                    Ok(n) if n > 0 => {
                        sink.stdout(&obuf[..n]);
                        if sink.overflow {
                            ending = Some(Ending::Overflow);
                        }
                    }
                    _ => stdout = None,
                },
                r = read_opt(&mut stderr, &mut ebuf) => match r {
                    Ok(n) if n > 0 => sink.stderr(&ebuf[..n]),
                    _ => stderr = None,
                },
                _ = &mut stdin_fut, if !stdin_done => stdin_done = true,
            }
        }

        // 2. Stopping: SIGTERM to the group, the grace, SIGKILL. The pipes
        //    keep being drained (a program flushing on SIGTERM must not
        //    block on a full pipe), stdout no longer kept.
        let mut leader_exited = ending.is_none();
        if !leader_exited {
            sink.keep_out = false;
            self.group.signal(libc::SIGTERM);
            let term_deadline = Instant::now() + limits.grace;
            let mut killed = false;
            let mut kill_deadline = None;
            loop {
                tokio::select! {
                    biased;
                    _ = self.exit.exited() => {
                        leader_exited = true;
                        break;
                    }
                    _ = tokio::time::sleep_until(term_deadline), if !killed => {
                        self.group.signal(libc::SIGKILL);
                        killed = true;
                        kill_deadline = Some(Instant::now() + KILL_WAIT);
                    }
                    _ = sleep_until_opt(kill_deadline), if killed => break,
                    r = read_opt(&mut stdout, &mut obuf) => if !matches!(r, Ok(n) if n > 0) {
                        stdout = None;
                    },
                    r = read_opt(&mut stderr, &mut ebuf) => match r {
                        Ok(n) if n > 0 => sink.stderr(&ebuf[..n]),
                        _ => stderr = None,
                    },
                }
            }
        }
        let ending = ending.unwrap_or(Ending::Exited);

        // 3. The leader is a zombie (or stuck): nothing of its group may
        //    outlive it.
        self.group.signal(libc::SIGKILL);
        // Its stdin is of no use any more (and may never be read).
        drop(stdin_fut);

        // 4. What is left in the pipes, for a bounded time.
        let drain_deadline = Instant::now() + DRAIN_BOUND;
        while stdout.is_some() || stderr.is_some() {
            tokio::select! {
                _ = tokio::time::sleep_until(drain_deadline) => break,
                r = read_opt(&mut stdout, &mut obuf) => match r {
                    Ok(n) if n > 0 => sink.stdout(&obuf[..n]),
                    _ => stdout = None,
                },
                r = read_opt(&mut stderr, &mut ebuf) => match r {
                    Ok(n) if n > 0 => sink.stderr(&ebuf[..n]),
                    _ => stderr = None,
                },
            }
        }
        let ending = if ending == Ending::Exited && sink.overflow {
            Ending::Overflow
        } else {
            ending
        };

        // 5. Reap.
        let status = if leader_exited {
            match tokio::time::timeout(KILL_WAIT, self.group.child.wait()).await {
                Ok(Ok(st)) => {
                    self.group.reaped = true;
                    Some(st)
                }
                _ => None,
            }
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

pub use crate::run::process::describe_status;
