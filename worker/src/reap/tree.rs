//! The shim's descendants, found by walking `/proc`, and signalled without
//! ever reaching a stranger.
//!
//! Because the shim is a child subreaper, every process started beneath it
//! stays beneath it: an orphan (a double fork, the child of a `setsid`'d
//! shell that exited) is re-parented to the shim, not to init. So "every
//! process whose `PPid` chain leads to the shim" is exactly what the agent
//! started and is still there.
//!
//! A pid read from `/proc` may be reaped and reused by an unrelated process
//! before it is signalled. [`signal`] therefore pins the process with a
//! pidfd, then checks that the pinned pid still has the start time seen in
//! the walk: pid and start time together name one process.

use std::collections::HashMap;
use std::os::fd::{FromRawFd as _, OwnedFd};

use nix::sys::signal::Signal;

/// One process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone)]
pub(crate) struct Proc {
    pub pid: i32,
    ppid: i32,
    /// The one-letter state: `R`, `S`, `D`, `T`, `Z`, …
    state: u8,
    /// Start time in clock ticks since boot (field 22).
    pub start: u64,
    /// The command name (at most 15 bytes, chosen by the process itself).
    pub comm: String,
}

impl Proc {
    /// Neither a zombie nor dead: signalling it can still change something.
    fn is_live(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }
}

impl From<procfs::process::Stat> for Proc {
    fn from(s: procfs::process::Stat) -> Proc {
        Proc {
            pid: s.pid,
            ppid: s.ppid,
            // The state is one ASCII letter; anything else is not a state
            // `is_live` rules out.
            state: u8::try_from(s.state).unwrap_or(b'?'),
            start: s.starttime,
            comm: s.comm,
        }
    }
}

/// `/proc/PID/stat` of one process (procfs parses the name between the
/// first `(` and the last `)`, and reads a name that is not UTF-8
/// lossily: a process cannot hide from the walk by its name).
fn read_proc(pid: i32) -> Option<Proc> {
    let stat = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    Some(stat.into())
}

/// Every live process beneath `root` (not `root` itself). Zombies are
/// walked through but not returned: there is nothing left to stop, and
/// the shim's `waitpid` loop reaps those that are its children.
pub(crate) fn descendants(root: i32) -> Vec<Proc> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    // Gone between the listing and the read: nothing to do for it.
    for p in all.flatten().filter_map(|p| p.stat().ok()).map(Proc::from) {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for p in children.remove(&parent).unwrap_or_default() {
            queue.push(p.pid);
            if p.is_live() {
                found.push(p);
            }
        }
    }
    found
}

/// Sends `sig` to `p` if it is still the process the walk saw. Returns
/// false when it is gone (or its pid now names another process).
pub(crate) fn signal(p: &Proc, sig: Signal) -> bool {
    let same = || read_proc(p.pid).is_some_and(|now| now.start == p.start);
    // SAFETY: pidfd_open takes a pid and flags, no pointers.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) };
    if raw < 0 {
        // Kernels before 5.3 have no pidfd: check, then kill(2). The window
        // between the two is the best an old kernel allows.
        if nix::errno::Errno::last() == nix::errno::Errno::ENOSYS && same() {
            return nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid), sig).is_ok();
        }
        return false;
    }
    let Ok(raw) = i32::try_from(raw) else {
        return false;
    };
    // SAFETY: pidfd_open just returned this descriptor and nothing else
    // owns it; the OwnedFd closes it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
    // The pidfd pins the process: if it is the one we saw now, the signal
    // below cannot reach anybody else.
    if !same() {
        return false;
    }
    use std::os::fd::AsRawFd as _;
    // SAFETY: a valid pidfd, a signal number, a null siginfo (the kernel
    // then fills it in as kill(2) would) and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_an_awkward_name_parses() {
        // Fields 1 to 22 (starttime), then the 30 later ones of a 5.x kernel.
        let line = format!(
            "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654{}",
            " 1".repeat(30)
        );
        use procfs::FromRead as _;
        let p = Proc::from(procfs::process::Stat::from_read(line.as_bytes()).unwrap());
        assert_eq!(p.pid, 4242);
        assert_eq!(p.comm, "a) b (c)");
        assert_eq!(p.state, b'S');
        assert_eq!(p.ppid, 17);
        assert_eq!(p.start, 987654);
    }

    #[test]
    fn our_own_stat_parses_and_a_child_is_a_descendant() {
        let me = read_proc(std::process::id() as i32).unwrap();
        assert!(me.is_live());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let found = descendants(std::process::id() as i32);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.iter().any(|p| p.pid == pid), "{found:?}");
    }

    /// `/proc/PID/stat` read as a `String` failed on such a name, so the
    /// process (and everything beneath it) was left out of the walk.
    #[test]
    fn a_name_that_is_not_utf8_does_not_hide_a_process() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "printf '\\377x' > /proc/$$/comm && sleep 30"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut found = Vec::new();
        for _ in 0..200 {
            found = descendants(std::process::id() as i32);
            if found.iter().any(|p| p.pid == pid && p.comm.contains('x'))
                && found.iter().any(|p| p.ppid == pid)
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Its `sleep` too, found beneath it.
        for p in found.iter().filter(|p| p.ppid == pid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid), Signal::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.iter().any(|p| p.ppid == pid), "{found:?}");
        let p = found.iter().find(|p| p.pid == pid).expect("found");
        assert_eq!(p.comm, "\u{fffd}x");
    }

    #[test]
    fn a_reused_pid_is_not_signalled() {
        let mut me = read_proc(std::process::id() as i32).unwrap();
        me.start += 1;
        // Signal 0 would succeed on the real process; the start time says
        // it is another one.
        assert!(!signal(&me, Signal::SIGCONT));
    }
}
