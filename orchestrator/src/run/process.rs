//! The worker process: one owner, explicit termination steps.
//!
//! `terminate` is the small state machine of docs/architecture.md: already
//! exited → reap; else SIGTERM to the process group, wait a short grace,
//! SIGKILL, reap. The group is only signalled while the child is known not
//! to be reaped, so a reused pid can never be hit.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;

/// Time between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_millis(200);

pub struct WorkerProcess {
    child: Child,
    pid: u32,
    status: Option<ExitStatus>,
}

impl WorkerProcess {
    pub fn new(child: Child, pid: u32) -> Self {
        WorkerProcess {
            child,
            pid,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status, once the process has been reaped.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Waits for the process to exit (cancel-safe).
    pub async fn wait(&mut self) -> ExitStatus {
        if let Some(st) = self.status {
            return st;
        }
        match self.child.wait().await {
            Ok(st) => {
                self.status = Some(st);
                st
            }
            Err(_) => {
                // Waiting failed (should not happen for our own child): make
                // sure it is dead, and record a synthetic status.
                self.kill_group(libc::SIGKILL);
                let st = std::os::unix::process::ExitStatusExt::from_raw(libc::SIGKILL);
                self.status = Some(st);
                st
            }
        }
    }

    fn reaped(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        if let Ok(Some(st)) = self.child.try_wait() {
            self.status = Some(st);
            return true;
        }
        false
    }

    fn kill_group(&mut self, sig: libc::c_int) {
        if self.status.is_some() {
            return;
        }
        let Ok(pgid) = libc::pid_t::try_from(self.pid) else {
            return;
        };
        // SAFETY: plain syscall; the child is not reaped, so its pid (which
        // is its process group id) still names our worker's group.
        unsafe {
            libc::killpg(pgid, sig);
        }
    }

    /// SIGTERM, a short wait, SIGKILL; then reap. Returns the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        if self.reaped() {
            return self.wait().await;
        }
        self.kill_group(libc::SIGTERM);
        if let Ok(Ok(st)) = tokio::time::timeout(TERM_GRACE, self.child.wait()).await {
            self.status = Some(st);
            return st;
        }
        self.kill(libc::SIGKILL).await
    }

    /// Immediate SIGKILL of the group, then reap.
    pub async fn kill(&mut self, sig: libc::c_int) -> ExitStatus {
        if !self.reaped() {
            self.kill_group(sig);
        }
        self.wait().await
    }
}

/// Renders an exit status for messages: `exited with status 3`, `was killed
/// by SIGKILL` (worker deaths, and command-provider children).
pub fn describe_status(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = st.code() {
        return format!("exited with status {code}");
    }
    if let Some(sig) = st.signal() {
        let name = match sig {
            libc::SIGKILL => "SIGKILL".to_string(),
            libc::SIGTERM => "SIGTERM".to_string(),
            libc::SIGINT => "SIGINT".to_string(),
            libc::SIGHUP => "SIGHUP".to_string(),
            libc::SIGPIPE => "SIGPIPE".to_string(),
            libc::SIGSEGV => "SIGSEGV".to_string(),
            libc::SIGABRT => "SIGABRT".to_string(),
            libc::SIGXCPU => "SIGXCPU".to_string(),
            libc::SIGBUS => "SIGBUS".to_string(),
            n => format!("signal {n}"),
        };
        return format!("was killed by {name}");
    }
    "ended".into()
}
