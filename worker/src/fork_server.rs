//! `dsh-worker --fork-server`: a process that forks workers for the host,
//! so that a host starting many runs pays one exec of this binary instead
//! of one per run (docs/performance.md, "Round 9").
//!
//! The host spawns it once, like a worker (`--parent PID`, its control
//! socket as stdin, an empty environment, in `/`). For each run the host
//! sends one byte over the control socket with two descriptors attached
//! (`SCM_RIGHTS`): its worker's end of a new socket pair, and the write end
//! of a new stderr pipe. The server forks with `CLONE_PARENT`, so that the
//! new worker is the **host's** child, not the server's: the host waits for
//! it, signals its group and reaps it exactly as a worker it spawned
//! itself, and the worker's parent-death signal is armed against the host.
//! The server answers with the pid (a native-endian `i32`; a negative one
//! is `-errno`). The forked worker then sets itself up like the worker
//! `dsh workflow run` forks ([`crate::prefork`]) and reads its sandbox
//! policy from its socket.
//!
//! The server itself runs no script and applies no sandbox (it must be
//! able to fork); each worker applies its own. It ends when the host
//! closes the control socket, or with the host (parent-death signal).
//! It is single-threaded, which is what makes forking it sound.

use std::io::{IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

/// Serves fork requests on `control` until it closes; returns the exit
/// status. `host` is the host's pid (`--parent`), already checked alive.
pub(crate) fn serve(control: UnixStream, host: u32, after_fork: AfterFork) -> i32 {
    if !glibc_at_least(2, 34) {
        // See fork_one's safety note; the host then spawns its workers.
        eprintln!("dsh-worker: --fork-server needs Linux with glibc 2.34 or later");
        return crate::EXIT_USAGE;
    }
    let devnull = match std::fs::File::open("/dev/null") {
        Ok(f) => OwnedFd::from(f),
        Err(e) => {
            eprintln!("dsh-worker: --fork-server: cannot open /dev/null: {e}");
            return crate::EXIT_USAGE;
        }
    };
    loop {
        let fds = match receive(&control) {
            Ok(Some(fds)) => fds,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("dsh-worker: --fork-server: {e}");
                return crate::EXIT_HOST_GONE;
            }
        };
        let answer = match fds {
            Request::Fork { socket, stderr } => fork_one(&control, &devnull, socket, stderr, host),
            Request::Malformed => -libc::EINVAL,
        };
        if after_fork == AfterFork::Die {
            return 0;
        }
        if let Err(e) = (&control).write_all(&answer.to_ne_bytes()) {
            eprintln!("dsh-worker: --fork-server: answering the host: {e}");
            return crate::EXIT_HOST_GONE;
        }
    }
}

/// Whether this process runs on glibc `major.minor` or later (the C
/// library's own answer, not the one built against).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: returns a pointer to a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    version_at_least(version.to_str().unwrap_or(""), major, minor)
}

/// Whether a `major.minor[.patch]` version is at least `major.minor`,
/// compared as numbers; anything unreadable is not.
fn version_at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(found_major), Some(found_minor)) => (found_major, found_minor) >= (major, minor),
        _ => false,
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_at_least(_major: u32, _minor: u32) -> bool {
    false
}

/// What the server does once it has forked (testing: a server that dies
/// between a fork and its answer, `DSH_WORKER_TESTING=server-dies-after-fork`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFork {
    /// Answers with the pid (always, outside tests).
    Answer,
    /// Exits without answering.
    Die,
}

/// One request, as received.
enum Request {
    /// Fork a worker on these two descriptors.
    Fork { socket: OwnedFd, stderr: OwnedFd },
    /// Not one byte with exactly two descriptors (whatever came is closed).
    Malformed,
}

/// Reads one request; `None` when the host closed the socket.
fn receive(control: &UnixStream) -> nix::Result<Option<Request>> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    // Room for more than the two a request has, so that a wrong count is
    // received (and its descriptors closed) rather than truncated.
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let msg = loop {
        match recvmsg::<()>(
            control.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    if msg.bytes == 0 {
        return Ok(None);
    }
    let mut received: Vec<OwnedFd> = Vec::new();
    let cmsgs = match msg.cmsgs() {
        Ok(c) => c,
        // Truncated control data (more than eight descriptors): the
        // kernel dropped what did not fit, and nix gives none of it.
        Err(nix::errno::Errno::ENOBUFS) => return Ok(Some(Request::Malformed)),
        Err(e) => return Err(e),
    };
    for cmsg in cmsgs {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: the kernel just installed this descriptor in
                // this process for this message; nothing else owns it.
                received.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok(Some(match <[OwnedFd; 2]>::try_from(received) {
        Ok([socket, stderr]) => Request::Fork { socket, stderr },
        Err(_) => Request::Malformed,
    }))
}

/// Forks one worker as the host's child; returns its pid or `-errno`.
fn fork_one(
    control: &UnixStream,
    devnull: &OwnedFd,
    socket: OwnedFd,
    stderr: OwnedFd,
    host: u32,
) -> i32 {
    // SAFETY: a raw clone without CLONE_VM: the child gets a copy of this
    // single-threaded process (no lock can be held by another thread) and
    // goes on on a copy of this stack, as after fork(). CLONE_PARENT makes
    // the host its parent (see the module docs); with it the kernel takes
    // the exit signal from this process's own (SIGCHLD: it was spawned
    // by std), so the one given here is for form.
    //
    // What a raw clone does not do that glibc's fork does: update the
    // thread's cached tid in its TCB (and the robust-futex list). Nothing
    // the worker runs reads them on glibc ≥ 2.34 (`raise`/`abort` ask the
    // kernel for the tid; Rust's locks and QuickJS use no tid-owned
    // pthread mutexes); `pthread_kill`, `pthread_*affinity*` or
    // `pthread_getcpuclockid` on the main thread would, and musl's `raise`
    // does, which is why the server refuses to run off glibc or on one
    // older than 2.34 ([`serve`]).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match pid {
        0 => {
            // The control socket is the server's, not the worker's; the
            // child's own set-up closes it with every other descriptor.
            let _ = control;
            let devnull = match devnull.try_clone() {
                Ok(d) => d,
                Err(_) => std::process::exit(crate::EXIT_USAGE),
            };
            std::process::exit(crate::prefork::child(host, socket, stderr, devnull))
        }
        p if p > 0 => i32::try_from(p).unwrap_or(-libc::EOVERFLOW),
        _ => -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{ControlMessage, sendmsg};
    use std::io::IoSlice;

    fn send(to: &UnixStream, fds: &[RawFd]) {
        let cmsg = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(
            to.as_raw_fd(),
            &[IoSlice::new(&[1u8])],
            cmsgs,
            MsgFlags::empty(),
            None,
        )
        .expect("sendmsg");
    }

    #[test]
    fn the_c_library_version_is_compared_as_numbers() {
        assert!(version_at_least("2.36", 2, 34));
        assert!(version_at_least("2.34", 2, 34));
        assert!(version_at_least("3.0", 2, 34));
        assert!(!version_at_least("2.9", 2, 34), "9 < 34, not '9' > '3'");
        assert!(!version_at_least("2.33.1", 2, 34));
        assert!(!version_at_least("", 2, 34));
        assert!(!version_at_least("two.forty", 2, 34));
    }

    #[test]
    fn only_one_byte_with_exactly_two_descriptors_is_a_fork_request() {
        let (host, server) = UnixStream::pair().expect("pair");
        let (a, b) = UnixStream::pair().expect("pair");
        let null = std::fs::File::open("/dev/null").expect("null");
        let (a, b, c) = (a.as_raw_fd(), b.as_raw_fd(), null.as_raw_fd());
        // More than the eight there is room for: truncated by the kernel.
        let nine = [c; 9];
        send(&host, &[a, b]);
        assert!(matches!(receive(&server), Ok(Some(Request::Fork { .. }))));
        for fds in [&[][..], &[a][..], &[a, b, c][..], &nine[..]] {
            send(&host, fds);
            let got = receive(&server);
            assert!(
                matches!(got, Ok(Some(Request::Malformed))),
                "{} descriptors: {:?}",
                fds.len(),
                got.map(|r| r.map(|r| matches!(r, Request::Fork { .. })))
            );
        }
        drop(host);
        assert!(matches!(receive(&server), Ok(None)));
    }
}
