//! What a child process dsh starts resets between `fork` and `exec`.
//!
//! Two things survive `exec` that a program dsh starts on a script's or a
//! model's behalf must not inherit: the signal mask and ignored signals
//! (std no longer resets the mask), and descriptors dsh itself inherited
//! open without close-on-exec. The host's spawner (agent CLIs, `command`
//! programs, the tool host) and the tool host's Bash call these from a
//! `pre_exec` hook; one copy, because the raw `rt_sigaction` layout and
//! the signal count must be right in both.
//!
//! It is not a process launcher: it spawns nothing and holds no state.
//! Both functions are async-signal-safe (system calls only, no
//! allocation), as a `pre_exec` hook must be.

/// In a forked child, before exec: every descriptor from 3 up is made
/// close-on-exec, so the program gets only its stdin, stdout and stderr.
/// Rust opens everything close-on-exec, but a descriptor this process
/// inherited open (from whoever started dsh: a CI runner's pipe, a
/// socket) is not, and was handed on to every agent CLI, command program
/// and tool host, and from there to Bash: a sandboxed command could read
/// and write a file outside the workspace through it, Landlock
/// notwithstanding (Landlock checks opens, not descriptors already open).
/// Marked rather than closed, so that std's own close-on-exec pipe still
/// reports a failed exec. Async-signal-safe: close_range, else fcntl.
pub fn cloexec_inherited() {
    /// `CLOSE_RANGE_CLOEXEC` (Linux 5.11).
    #[cfg(target_os = "linux")]
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: plain system calls on this (forked, single-threaded)
    // process's descriptor table; the numbers need not be open.
    unsafe {
        #[cfg(target_os = "linux")]
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return;
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            libc::c_int::try_from(lim.rlim_cur)
                .unwrap_or(libc::c_int::MAX)
                .min(1 << 16)
        } else {
            1024
        };
        for fd in 3..max {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// In a forked child, before exec: every signal unblocked and at its
/// default action. Both survive exec, and std no longer resets the mask:
/// a dsh started with SIGTERM blocked or SIGINT ignored (by a shell's `&`,
/// `nohup`, a supervisor) would hand that on to every agent CLI, command
/// program and tool host, whose own stop logic (and that of what they
/// start) then does nothing. Dispositions first, so that a pending signal
/// meets the default action. Async-signal-safe: rt_sigaction and
/// rt_sigprocmask only, no allocation.
pub fn default_signals() {
    // SAFETY: plain system calls on zeroed buffers owned by this frame;
    // numbers the kernel refuses (SIGKILL, SIGSTOP) fail with EINVAL and
    // change nothing.
    unsafe {
        // The raw calls, not the C library's: glibc refuses to touch the
        // two signals it reserves (32, 33), and an inherited SIG_IGN or
        // block of those would stay. An all-zero kernel `struct sigaction`
        // is SIG_DFL with no flags and an empty mask, whatever the order
        // of its fields on the architecture.
        #[cfg(target_os = "linux")]
        {
            let dfl = [0u64; 4];
            for sig in 1..NSIG {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    dfl.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
            let none = 0u64;
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &raw const none,
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            for sig in 1..NSIG {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        }
    }
}

/// One more than the highest signal number (Linux: 64 signals).
pub const NSIG: libc::c_int = 65;
