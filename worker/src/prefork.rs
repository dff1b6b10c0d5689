//! A worker forked from the `dsh` command line before its runtime starts,
//! instead of spawned and exec'd later.
//!
//! Why: a `dsh workflow run` otherwise starts the same 100 MB executable
//! twice (itself, then its worker), and each start pays the dynamic
//! loader (on a VM, mostly `cpuid` probes trapping to the hypervisor),
//! std's start-up and the page faults of a fresh image: about 1.1 ms of a
//! 6 ms run (docs/performance.md, "Round 9"). A fork of the command line
//! while it is still one small thread pays none of it.
//!
//! What the forked child does, in order, so that it ends up as the same
//! worker the host would have spawned ([`crate::main_with_args`] with
//! `--fd 0 --parent PID`): leads a process group of its own; arms its
//! parent-death signal; moves to `/`; empties its environment (and zeroes
//! the strings, which `/proc/PID/environ` would still show); names itself
//! `dsh-worker`; makes its socket its stdin, `/dev/null` its stdout and the
//! pipe its stderr, and closes every other descriptor it inherited. From
//! there it serves exactly as a spawned worker does, starting with the
//! policy line ([`dsh_protocol::policy_line`]), which it waits for here:
//! the host only knows the run's policy once it has read its
//! configuration.
//!
//! What it is not: a fork server. It makes one worker, for the one run of
//! the command line that forked it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// The parent's side of a forked worker (see the module docs).
#[derive(Debug)]
pub struct Preforked {
    /// The child's pid, also its process group's id.
    pub pid: u32,
    /// The host's end of the child's socket.
    pub socket: UnixStream,
    /// The read end of the child's stderr pipe.
    pub stderr: OwnedFd,
}

/// Forks this process into a worker waiting for its sandbox policy; see
/// the module docs. Returns in the parent only.
///
/// # Safety
///
/// The process must have exactly one thread (no runtime, no thread
/// started yet): the child goes on running Rust code after `fork`, which
/// is only sound when no other thread could have held a lock.
pub unsafe fn prefork() -> std::io::Result<Preforked> {
    // CLOEXEC on every end: nothing of them leaks into anything the
    // command line spawns later.
    let (host_end, worker_end) = UnixStream::pair()?;
    let (stderr_r, stderr_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let devnull = std::fs::File::open("/dev/null")?;
    let parent = std::process::id();
    // SAFETY: the caller guarantees this process has one thread.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            drop(host_end);
            drop(stderr_r);
            let code = child(parent, worker_end.into(), stderr_w, devnull.into());
            std::process::exit(code)
        }
        nix::unistd::ForkResult::Parent { child } => {
            // The child does the same: whichever runs first, the group
            // exists before anyone signals it.
            let _ = nix::unistd::setpgid(child, child);
            Ok(Preforked {
                pid: child.as_raw().unsigned_abs(),
                socket: host_end,
                stderr: stderr_r,
            })
        }
    }
}

/// The forked child, up to and through its run; returns the exit status.
/// Also the child of [`crate::fork_server`], whose `parent` is the host.
pub(crate) fn child(parent: u32, socket: OwnedFd, stderr: OwnedFd, devnull: OwnedFd) -> i32 {
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    if let Ok(parent) = i32::try_from(parent) {
        crate::die_with_parent(parent);
    }
    if let Err(e) = become_worker_process(socket, stderr, devnull) {
        eprintln!("dsh-worker: cannot set up the forked worker: {e}");
        return crate::EXIT_USAGE;
    }
    // SAFETY: descriptor 0 is the socket, put there just above; nothing
    // else in this process owns it.
    let stream = unsafe { UnixStream::from_raw_fd(0) };
    crate::serve_stream(stream, None)
}

/// Process-wide set-up: the directory, the environment, the name, the
/// descriptors (see the module docs).
fn become_worker_process(
    socket: OwnedFd,
    stderr: OwnedFd,
    devnull: OwnedFd,
) -> std::io::Result<()> {
    std::env::set_current_dir("/")?;
    wipe_environment();
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_name(c"dsh-worker");
    }
    // Each one first to a descriptor above the standard three (std's
    // try_clone duplicates with F_DUPFD_CLOEXEC from 3 up), and the
    // originals closed, before the moves: the command line may have been
    // started with 0, 1 or 2 closed, one of these then got that number,
    // and moving another onto it (or closing it later) would lose one.
    let high = [
        socket.try_clone()?,
        devnull.try_clone()?,
        stderr.try_clone()?,
    ];
    drop((socket, devnull, stderr));
    let [socket, devnull, stderr] = high;
    for (from, to) in [(&socket, 0), (&devnull, 1), (&stderr, 2)] {
        // SAFETY: plain syscall; `to` is one of the standard three, which
        // this replaces. dup2 leaves CLOEXEC off on the copy.
        if unsafe { libc::dup2(from.as_raw_fd(), to) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    drop((socket, devnull, stderr));
    close_inherited();
    Ok(())
}

/// Closes every descriptor from 3 up: whatever the command line inherited
/// from its own parent (a worker exec'd with std would have inherited
/// those without CLOEXEC; this one keeps none). `close_range` (Linux 5.9),
/// else each number up to the descriptor limit.
fn close_inherited() {
    // SAFETY: plain syscalls; nothing in this process uses a descriptor
    // above 2 any more (the worker opens its own later).
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20)
        } else {
            1024
        };
        for fd in 3..i32::try_from(top).unwrap_or(1024) {
            libc::close(fd);
        }
    }
}

/// Closes every descriptor from 3 up but `keep` (the host's socket when
/// it was given at 3 or above): an exec'd worker (a pool worker, a fork
/// server) is spawned by the host with `posix_spawn`, which hands on every
/// descriptor the host itself inherited without close-on-exec (a CI
/// runner's pipe, a socket); a sandboxed worker could still use those, as
/// Landlock checks opens, not descriptors already open. Run first thing,
/// before the worker opens anything of its own.
pub(crate) fn close_inherited_except(keep: i32) {
    if keep < 3 {
        close_inherited();
        return;
    }
    // SAFETY: plain syscalls; nothing in this process uses a descriptor
    // above 2 but `keep` yet.
    unsafe {
        let keep = keep.unsigned_abs();
        if libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32) == 0
            && libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32) == 0
        {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20)
        } else {
            1024
        };
        for fd in 3..i32::try_from(top).unwrap_or(1024) {
            if fd.unsigned_abs() != keep {
                libc::close(fd);
            }
        }
    }
}

/// Empties the environment, zeroing each string first: the worker runs
/// untrusted scripts and had none of the command line's variables (API
/// keys among them) when it was exec'd with an empty environment.
fn wipe_environment() {
    unsafe extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: this process has one thread (the fork's precondition), so
    // nothing reads or changes the environment meanwhile. Each entry is a
    // NUL-terminated string owned by the C runtime; it is zeroed in place
    // up to its NUL, never past it, and the array itself is then emptied
    // by clearenv. Sound because nothing has called setenv, unsetenv or
    // putenv yet (this runs first thing in `main`): every entry is still
    // the writable initial stack, the very bytes `/proc/PID/environ`
    // shows. (The command line, `/proc/PID/cmdline`, is left as it is:
    // it holds the CLI's argv, which other processes of the user can read
    // from the CLI's own entry anyway.)
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let s = *p;
            let len = libc::strlen(s);
            std::ptr::write_bytes(s, 0, len);
            p = p.add(1);
        }
        libc::clearenv();
    }
}
