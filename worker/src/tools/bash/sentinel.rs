//! The Bash call's sentinel: a process in the shell's group that kills the
//! group once the tool process is gone, however it went ([`start_sentinel`]).
//! Everything here runs in a forked child, so it is async-signal-safe.

/// One more than the highest signal number (see [`dsh_exec::NSIG`]).
const NSIG: libc::c_int = dsh_exec::NSIG;

/// In the shell's forked child, right after its `setsid`: starts the
/// call's sentinel, a process in the shell's new group whose only job is
/// to SIGKILL that group once the tool process is gone, however it went.
///
/// The tool process kills the group itself when the shell ends, on a
/// timeout and on SIGTERM; but a SIGKILLed tool process (the host's grace
/// ran out, or the host died and the parent-death signal fired) runs no
/// code, and the shell's parent-death signal kills the shell alone: its
/// background jobs lived on until their CPU limit, which an idle job never
/// reaches. The sentinel blocks reading `watch`, a pipe whose only write
/// end the tool process holds; the kernel closes it when that process
/// dies, the read returns, and the sentinel kills its group (itself
/// included). Under the sandbox nothing the command starts can leave the
/// group, so that is everything. It is forked twice so that it is not the
/// shell's child (a program waiting for "any child" would wait for it),
/// ignores every signal but SIGKILL (a `kill 0` in a test suite does not
/// disarm it), and keeps no descriptor but `watch` (a copy of the output
/// pipe would keep its reader waiting; one of the temporary directory's
/// lock would keep the directory marked in use).
///
/// Async-signal-safe: fork, waitpid, sigaction, close_range/close, read,
/// kill, _exit; nothing is allocated.
pub(super) fn start_sentinel(watch: libc::c_int) -> std::io::Result<()> {
    // SAFETY: see above; every call is a plain system call on values owned
    // by this frame, and the forked children end with _exit.
    unsafe {
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                if libc::fork() == 0 {
                    sentinel(watch);
                }
                libc::_exit(0);
            }
            middle => {
                let mut status = 0;
                while libc::waitpid(middle, &mut status, 0) == -1
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                {
                }
                Ok(())
            }
        }
    }
}

/// The sentinel's body (see [`start_sentinel`]); never returns.
fn sentinel(watch: libc::c_int) -> ! {
    // SAFETY: plain system calls on this process's own descriptors,
    // signals and group, in a forked child that never returns to Rust
    // code of the parent's.
    unsafe {
        let mut ign: libc::sigaction = std::mem::zeroed();
        ign.sa_sigaction = libc::SIG_IGN;
        libc::sigemptyset(&mut ign.sa_mask);
        for sig in 1..NSIG {
            libc::sigaction(sig, &ign, std::ptr::null_mut());
        }
        close_all_but(watch);
        let mut byte = 0u8;
        loop {
            let n = libc::read(watch, (&raw mut byte).cast(), 1);
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // End of file (the tool process is gone), or an error: either
            // way nothing is left to watch.
            break;
        }
        libc::kill(0, libc::SIGKILL);
        libc::_exit(0)
    }
}

/// Closes every descriptor but `keep` (≥ 0): `close_range`, or one by one
/// up to the descriptor limit where the kernel lacks it (before 5.9).
/// Async-signal-safe.
fn close_all_but(keep: libc::c_int) {
    // SAFETY: closing descriptors of this (forked, single-threaded)
    // process; the numbers need not be open.
    unsafe {
        #[cfg(target_os = "linux")]
        {
            let keep = keep as libc::c_uint;
            let low = if keep == 0 {
                0
            } else {
                libc::syscall(
                    libc::SYS_close_range,
                    0 as libc::c_uint,
                    keep - 1,
                    0 as libc::c_uint,
                )
            };
            let high = libc::syscall(
                libc::SYS_close_range,
                keep + 1,
                libc::c_uint::MAX,
                0 as libc::c_uint,
            );
            if low == 0 && high == 0 {
                return;
            }
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            libc::c_int::try_from(lim.rlim_cur)
                .unwrap_or(libc::c_int::MAX)
                .min(1 << 16)
        } else {
            1024
        };
        for fd in 0..max {
            if fd != keep {
                libc::close(fd);
            }
        }
    }
}
