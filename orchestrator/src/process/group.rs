//! A child that leads its own process group, and the one way it ends.
//!
//! The group is signalled **only while the leader is not reaped**: until
//! then its pid — the group id — cannot be reused, so a signal can never
//! reach a stranger. The leader's exit is therefore observed *without*
//! reaping it (a pidfd, else `waitid(WNOWAIT)` polling); whatever way the
//! leader ends, what is left of its group (a grandchild it forked, a
//! daemon it started) is SIGKILLed before the leader is reaped.
//!
//! Stopping is a small state machine with named steps, after
//! cargo-nextest's `TerminateChildResult`: the leader already exited →
//! reap; else SIGTERM to the group, the grace, SIGKILL, reap
//! ([`Termination`]).

use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{self, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::process::Child;

/// How long to wait for the leader after SIGKILL before giving up on it
/// (a process stuck in the kernel); tokio reaps it later.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Poll interval when no pidfd is available.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// How a child ended when its owner stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Termination {
    /// It had exited on its own before any signal.
    Exited(ExitStatus),
    /// It exited after SIGTERM, within the grace.
    Terminated(ExitStatus),
    /// It was SIGKILLed.
    Killed(ExitStatus),
    /// It did not exit even after SIGKILL (stuck in the kernel); it is
    /// reaped by tokio whenever it goes.
    Stuck,
}

impl Termination {
    /// The exit status, when the leader was reaped.
    pub fn status(self) -> Option<ExitStatus> {
        match self {
            Termination::Exited(s) | Termination::Terminated(s) | Termination::Killed(s) => Some(s),
            Termination::Stuck => None,
        }
    }
}

/// A spawned child leading its own process group (spawned through
/// [`super::spawner`]). Dropping it while the leader is not reaped
/// SIGKILLs the group first; tokio's `kill_on_drop` then reaps the leader.
pub struct ProcessGroup {
    child: Child,
    pid: libc::pid_t,
    watch: ExitWatch,
    /// Set once the leader is reaped: from then on nothing is signalled.
    status: Option<ExitStatus>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("pid", &self.pid)
            .field("status", &self.status)
            .finish()
    }
}

impl ProcessGroup {
    /// Takes over a child spawned with `process_group(0)`. Must be called
    /// inside a tokio runtime, before anything could reap the child.
    pub(crate) fn new(child: Child) -> std::io::Result<ProcessGroup> {
        let pid = child
            .id()
            .and_then(|p| libc::pid_t::try_from(p).ok())
            .ok_or_else(|| std::io::Error::other("the child exited before it could be tracked"))?;
        Ok(ProcessGroup {
            watch: ExitWatch::new(pid),
            child,
            pid,
            status: None,
        })
    }

    /// The leader's pid, which is also the group's id.
    pub fn pid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// The leader's pipes, to take.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The exit status, once the leader is reaped.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Whether the leader has exited (it may not be reaped yet).
    pub fn has_exited(&self) -> bool {
        self.status.is_some() || has_exited(self.pid)
    }

    /// Resolves once the leader has exited; it stays a zombie, unreaped,
    /// so its group can still be signalled. Cancel-safe.
    pub async fn exited(&self) {
        if self.status.is_some() {
            return;
        }
        self.watch.exited().await
    }

    /// Sends `sig` to the group and to the leader (in case it left the
    /// group), unless the leader is reaped: until then its pid — the group
    /// id — still names it and its group and cannot have been reused.
    pub fn signal(&self, sig: Signal) {
        if self.status.is_some() {
            return;
        }
        let pid = Pid::from_raw(self.pid);
        // A group or leader that is already gone (ESRCH) is what we want.
        let _ = signal::killpg(pid, sig);
        let _ = signal::kill(pid, sig);
    }

    /// Once the leader has exited: SIGKILLs what is left of its group, then
    /// reaps the leader. Waits for the exit first if it has not happened.
    /// `None` when the leader could not be reaped within a bound.
    pub async fn reap(&mut self) -> Option<ExitStatus> {
        if let Some(st) = self.status {
            return Some(st);
        }
        if tokio::time::timeout(KILL_WAIT, self.exited())
            .await
            .is_err()
        {
            return None;
        }
        self.signal(Signal::SIGKILL);
        match tokio::time::timeout(KILL_WAIT, self.child.wait()).await {
            Ok(Ok(st)) => {
                self.status = Some(st);
                Some(st)
            }
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Stops the child: reaps it if it already exited; else SIGTERM to the
    /// group, up to `grace` for it to exit, SIGKILL, reap.
    pub async fn terminate(&mut self, grace: Duration) -> Termination {
        if self.has_exited() {
            return self.reaped(Termination::Exited).await;
        }
        self.signal(Signal::SIGTERM);
        if tokio::time::timeout(grace, self.exited()).await.is_ok() {
            return self.reaped(Termination::Terminated).await;
        }
        self.kill().await
    }

    /// Stops the child at once: SIGKILL to the group, reap.
    pub async fn kill(&mut self) -> Termination {
        if self.has_exited() {
            return self.reaped(Termination::Exited).await;
        }
        self.signal(Signal::SIGKILL);
        self.reaped(Termination::Killed).await
    }

    async fn reaped(&mut self, how: fn(ExitStatus) -> Termination) -> Termination {
        match self.reap().await {
            Some(st) => how(st),
            None => Termination::Stuck,
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

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
            // SAFETY: plain syscall without pointers; the child is not
            // reaped, so the pid is ours.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if let Ok(fd) = libc::c_int::try_from(fd)
                && fd >= 0
            {
                // SAFETY: pidfd_open returned a fresh descriptor that
                // nothing else owns.
                let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
                // SAFETY: the AsyncFd owns the descriptor, which stays open
                // and unchanged until the AsyncFd is dropped.
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

    /// Resolves once the leader has exited. Cancel-safe.
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
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match wait::waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => return true,
            Err(Errno::EINTR) => continue,
            Err(_) => return true,
        }
    }
}
