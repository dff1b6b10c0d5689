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
/// [`super::spawner`], or forked by this process and adopted with
/// [`ProcessGroup::adopt`]). Dropping it while the leader is not reaped
/// SIGKILLs the group first; the leader is then reaped in the background
/// (tokio's `kill_on_drop` for a spawned one, `reap_when_gone` for an
/// adopted one).
pub struct ProcessGroup {
    leader: Leader,
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

/// Who reaps the leader, and what of it there is to take.
enum Leader {
    /// Spawned through tokio, which reaps it (`wait`, or its orphan queue
    /// after `kill_on_drop`).
    Spawned(Child),
    /// Forked by this process outside tokio (a worker forked before the
    /// runtime started): reaped here with `waitid`. Its stderr pipe, until
    /// taken.
    Adopted(Option<tokio::net::unix::pipe::Receiver>),
}

/// A child's stderr, to read: a spawned child's pipe or an adopted one's.
#[derive(Debug)]
pub enum Stderr {
    /// The pipe tokio made for a spawned child.
    Spawned(tokio::process::ChildStderr),
    /// The pipe made for a child forked outside tokio.
    Adopted(tokio::net::unix::pipe::Receiver),
}

impl tokio::io::AsyncRead for Stderr {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stderr::Spawned(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Stderr::Adopted(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl ProcessGroup {
    /// Takes over a child spawned with `process_group(0)`. Must be called
    /// inside a tokio runtime, before anything could reap the child.
    pub fn new(child: Child) -> std::io::Result<ProcessGroup> {
        let pid = child
            .id()
            .and_then(|p| libc::pid_t::try_from(p).ok())
            .ok_or_else(|| std::io::Error::other("the child exited before it could be tracked"))?;
        Ok(ProcessGroup {
            watch: ExitWatch::new(pid),
            leader: Leader::Spawned(child),
            pid,
            status: None,
        })
    }

    /// Takes over a child this process forked itself (not through tokio or
    /// std), already the leader of its own process group, and the read end
    /// of its stderr pipe. Must be called inside a tokio runtime, before
    /// anything could reap the child; nothing else in the process may wait
    /// for it. From here it is ended and reaped like any spawned child.
    pub fn adopt(pid: u32, stderr: std::os::fd::OwnedFd) -> std::io::Result<ProcessGroup> {
        let pid = libc::pid_t::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| std::io::Error::other(format!("{pid} is not a child's pid")))?;
        // The exit watch and the pipe register with the current runtime
        // (tokio panics without one): an error, not a panic.
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(std::io::Error::other(
                "ProcessGroup::adopt must be called inside a tokio runtime",
            ));
        }
        // A descriptor that is not a pipe (or the runtime refusing it)
        // costs the worker's log lines, not the run.
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr).ok();
        Ok(ProcessGroup {
            watch: ExitWatch::new(pid),
            leader: Leader::Adopted(stderr),
            pid,
            status: None,
        })
    }

    /// The leader's pid, which is also the group's id.
    pub fn pid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// The leader's pipes, to take; `None` for an adopted leader.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        match &mut self.leader {
            Leader::Spawned(c) => Some(c),
            Leader::Adopted(_) => None,
        }
    }

    /// The leader's stderr, if it was piped and not taken yet.
    pub fn take_stderr(&mut self) -> Option<Stderr> {
        match &mut self.leader {
            Leader::Spawned(c) => c.stderr.take().map(Stderr::Spawned),
            Leader::Adopted(s) => s.take().map(Stderr::Adopted),
        }
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

    /// [`ProcessGroup::exited`], watched from the current runtime: the
    /// group's own watch belongs to the runtime that took the child over,
    /// which may be another one, or gone, by the time someone else ends
    /// it. Cancel-safe.
    pub async fn exited_here(&self) {
        if self.status.is_some() {
            return;
        }
        ExitWatch::new(self.pid).exited().await
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
        let reaped = match &mut self.leader {
            Leader::Spawned(child) => match tokio::time::timeout(KILL_WAIT, child.wait()).await {
                Ok(Ok(st)) => Some(st),
                Ok(Err(_)) | Err(_) => None,
            },
            // It has exited (above), so this does not block.
            Leader::Adopted(_) => reap_exited(self.pid),
        };
        self.status = reaped;
        reaped
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
        if self.status.is_none() && matches!(self.leader, Leader::Adopted(_)) {
            reap_when_gone(self.pid);
        }
    }
}

/// Reaps an adopted leader that is being SIGKILLed and dropped unreaped:
/// in the background on the current runtime once it has exited, else (no
/// runtime) on a thread of its own. Without this it would stay a zombie
/// for as long as the host lives; tokio does the same for a spawned child
/// through its orphan queue.
fn reap_when_gone(pid: libc::pid_t) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let _enter = handle.enter();
            let watch = ExitWatch::new(pid);
            handle.spawn(async move {
                watch.exited().await;
                let _ = reap_exited(pid);
            });
        }
        Err(_) => {
            let _ = std::thread::Builder::new()
                .name("dsh-reap".into())
                .spawn(move || {
                    let mut status: libc::c_int = 0;
                    // SAFETY: plain syscall writing one int we own; blocks
                    // until the SIGKILLed leader is gone.
                    while unsafe { libc::waitpid(pid, &mut status, 0) } == -1
                        && Errno::last() == Errno::EINTR
                    {}
                });
        }
    }
}

/// Reaps `pid`, which has exited; `None` if it cannot be (not our child,
/// or somehow not exited yet). libc's `waitpid` rather than nix's
/// `waitid`: nix reaps first and converts the status after, and fails on
/// a realtime signal, which would leave a reaped pid taken for a live one.
fn reap_exited(pid: libc::pid_t) -> Option<ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: plain syscall writing one int we own.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            r if r == pid => return Some(ExitStatus::from_raw(status)),
            -1 if Errno::last() == Errno::EINTR => continue,
            _ => return None,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopting_outside_a_runtime_is_an_error_not_a_panic() {
        let (r, _w) = nix::unistd::pipe().expect("pipe");
        let err = ProcessGroup::adopt(std::process::id(), r).expect_err("no runtime");
        assert!(err.to_string().contains("tokio runtime"), "{err}");
        let (r, _w) = nix::unistd::pipe().expect("pipe");
        let err = ProcessGroup::adopt(0, r).expect_err("pid 0");
        assert!(err.to_string().contains("not a child's pid"), "{err}");
    }
}
