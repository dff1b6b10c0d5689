//! The Bash tool: one shell command, in the workspace, in its own process
//! group, killed whole when its timeout expires, and killed whole when
//! the shell ends (nothing a call starts outlives it).
//!
//! - Shell: `/bin/bash -c` when it exists (workflow prompts assume bash),
//!   else `/bin/sh -c`.
//! - Environment: fixed, nothing inherited from the host: `PATH=
//!   /usr/local/bin:/usr/bin:/bin`, `HOME` = the workspace, `LANG=C.UTF-8`,
//!   `TMPDIR` = a private directory made for this call (outside the
//!   workspace, so temporary files do not land in it; removed afterwards;
//!   [`make_tmp_dir`]),
//!   and `GIT_CONFIG_*` turning off git's detached auto-maintenance.
//! - stdin `/dev/null`; stdout and stderr are one pipe, so their output
//!   stays in order; it is read to the end (kept up to `maxOutputBytes`,
//!   the rest counted and discarded) so the command never blocks on a full
//!   pipe.
//! - Timeout: SIGTERM to the group, a short grace, then SIGKILL to the
//!   group. Under the sandbox the child also may not call `setsid` or
//!   `setpgid` (a seccomp filter installed in it after its own `setsid`),
//!   so no descendant can leave the group.
//! - Cancel: the host stops a tool process with SIGTERM before SIGKILL;
//!   the tool process then SIGKILLs the shell's group, removes the call's
//!   temporary directory and exits ([`stop_group_on_sigterm`]). SIGTERM is
//!   held from before the shell's spawn until that handler is in place, so
//!   a cancel in between is not lost (it used to end the tool process
//!   alone, leaving the shell's background children behind). The shell
//!   itself starts with every signal unblocked ([`dsh_exec::default_signals`]).
//! - A temporary directory left behind anyway (the tool process SIGKILLed)
//!   is removed by a later call ([`make_tmp_dir`]).

use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, killpg, sigaction};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use serde::Deserialize;

use super::{Ctx, Done, Status, ToolError, cap_output, input};

/// How long the group has between SIGTERM and SIGKILL after a timeout.
pub const KILL_GRACE: Duration = Duration::from_millis(300);
/// How long to wait for the pipe's end after the group was killed: every
/// writer is dead by then, so this only guards against the impossible.
const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// The fixed `PATH`.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The shell's process group, for [`on_sigterm`]; 0 while there is none.
static GROUP: AtomicI32 = AtomicI32::new(0);

/// When the host stops the tool process (a cancelled call, SIGTERM then
/// SIGKILL to *its* group), the shell's own group must go too: it left the
/// tool process's group with `setsid`, so the host's signals never reach
/// it. From now on SIGTERM SIGKILLs the shell's group; the call then ends
/// the ordinary way (the shell is reaped, the call's temporary directory
/// removed, an answer written that the host no longer reads) well within
/// the host's grace. It used to exit from the handler, which left the
/// temporary directory behind on every cancelled call. Once the group is
/// reaped ([`GROUP`] back to 0) a SIGTERM takes its default action again:
/// the call has nothing left to stop but this process.
fn stop_group_on_sigterm(group: Pid) {
    GROUP.store(group.as_raw(), Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(on_sigterm),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only loads an atomic and makes the
    // async-signal-safe call kill(2); it touches no lock, allocator or
    // Rust runtime state.
    let _ = unsafe { sigaction(Signal::SIGTERM, &action) };
}

extern "C" fn on_sigterm(_: libc::c_int) {
    let group = GROUP.load(Ordering::SeqCst);
    // SAFETY: kill(2), signal(2) and raise(3) are async-signal-safe and
    // take no pointers; a group id ≤ 0 (none yet, or already reaped) is
    // never signalled.
    unsafe {
        if group > 0 {
            libc::kill(-group, libc::SIGKILL);
        } else {
            // The shell's group is gone: nothing is left to stop but this
            // process, which may be blocked writing an answer nobody reads.
            // Swallowing the signal made the host wait out its whole grace
            // before SIGKILL; the default action ends it now (a temporary
            // directory not yet removed is reclaimed by a later call). The
            // raised signal is blocked while this handler runs and is
            // delivered, to the default action, as it returns.
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::raise(libc::SIGTERM);
        }
    }
}

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
fn start_sentinel(watch: libc::c_int) -> std::io::Result<()> {
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

#[derive(Deserialize)]
struct BashInput {
    command: String,
    timeout: Option<u64>,
    #[allow(dead_code)] // For the transcript only; part of the input shape.
    description: Option<String>,
}

/// The call's private temporary directory, and the lock that says it is
/// in use.
pub(crate) struct TmpDir {
    pub path: PathBuf,
    /// An exclusive `flock` on the directory itself, held as long as this
    /// process lives (close-on-exec, so the shell does not inherit it; the
    /// Bash sentinel closes it too). The kernel drops it however the
    /// process ends, SIGKILL included: an unlocked `call-*` directory is
    /// one whose owner is gone, which [`reclaim_stale`] removes.
    _lock: std::fs::File,
}

/// A staging directory younger than this is left alone by
/// [`reclaim_stale`]: it may be one a live call has just made and not yet
/// locked.
const STAGING_MIN_AGE: Duration = Duration::from_secs(60);
/// At most this many entries of the parent are looked at per call, so a
/// parent flooded with entries cannot make every call slow.
const RECLAIM_SCAN_MAX: usize = 256;

/// Makes the call's private temporary directory, before the sandbox so
/// that Landlock can grant it: `$TMPDIR/dsh-tool-tmp-UID/call-PID-NANOS`,
/// both levels mode 0700. The shared parent exists so that the call's
/// directory can be removed afterwards under Landlock, which is granted
/// only the right to remove directories beneath the parent (the system's
/// `/tmp` itself stays out of reach). A parent that is not a real
/// directory of ours, private to us (something another user planted), is
/// not used. `None` when it cannot be made: then `TMPDIR` is not set and
/// temporary files fail under the sandbox.
///
/// The directory is made as `.new-PID-NANOS`, locked, and only then
/// renamed to `call-…`, so that every `call-…` directory is locked from the
/// moment it has that name. Before making its own, the call removes the
/// directories of calls whose process is gone ([`reclaim_stale`]): a
/// cancelled or killed call cannot always remove its own.
pub(crate) fn make_tmp_dir() -> Option<TmpDir> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    // SAFETY: getuid takes no arguments and cannot fail (nix's wrapper
    // needs a feature the workspace does not enable).
    let uid = unsafe { libc::getuid() };
    let parent = std::env::temp_dir().join(format!("dsh-tool-tmp-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&parent);
    let meta = std::fs::symlink_metadata(&parent).ok()?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return None;
    }
    reclaim_stale(&parent, uid);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let id = format!("{}-{nanos}", std::process::id());
    let staging = parent.join(format!(".new-{id}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .ok()?;
    let Some(lock) = lock_dir(&staging) else {
        let _ = std::fs::remove_dir(&staging);
        return None;
    };
    let dir = parent.join(format!("call-{id}"));
    if std::fs::rename(&staging, &dir).is_err() {
        let _ = std::fs::remove_dir(&staging);
        return None;
    }
    Some(TmpDir {
        path: dir,
        _lock: lock,
    })
}

/// Opens `dir` (a real directory, never through a symlink) and takes an
/// exclusive lock on it without waiting; `None` when it is not a directory
/// or someone holds the lock.
fn lock_dir(dir: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .ok()?;
    f.try_lock().ok()?;
    Some(f)
}

/// Whether `name` is one dsh gives a call's directory: `call-PID-NANOS`
/// (`staging` false) or `.new-PID-NANOS` (`staging` true).
fn call_dir_name(name: &str) -> Option<bool> {
    let (staging, id) = match (name.strip_prefix("call-"), name.strip_prefix(".new-")) {
        (Some(id), _) => (false, id),
        (_, Some(id)) => (true, id),
        _ => return None,
    };
    let (pid, nanos) = id.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(nanos)).then_some(staging)
}

/// Removes the directories of calls whose process is gone: only entries
/// named as dsh names them, real directories (a symlink is never
/// followed, nor removed), owned by `uid`, and not locked — a live call
/// holds its lock until it exits. A staging directory must also be older
/// than [`STAGING_MIN_AGE`] (its owner locks it a moment after making it).
/// Best effort: whatever fails is left for the next call.
fn reclaim_stale(parent: &std::path::Path, uid: u32) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.take(RECLAIM_SCAN_MAX).flatten() {
        let name = entry.file_name();
        let Some(staging) = name.to_str().and_then(call_dir_name) else {
            continue;
        };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        if staging
            && meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age < STAGING_MIN_AGE)
        {
            continue;
        }
        // Held across the removal, so a second call reclaiming at the
        // same time skips it.
        let Some(_lock) = lock_dir(&path) else {
            continue;
        };
        // Does not follow symlinks inside (std removes them as links).
        let _ = std::fs::remove_dir_all(&path);
    }
}

pub(crate) fn remove_tmp_dir(dir: Option<TmpDir>) {
    if let Some(dir) = dir {
        // Best effort: what is left is reclaimed by a later call once this
        // process (and its lock) is gone.
        let _ = std::fs::remove_dir_all(&dir.path);
    }
}

fn shell() -> &'static str {
    if std::path::Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// What the reader thread collected.
#[derive(Default)]
struct Collected {
    kept: Vec<u8>,
    total: u64,
}

pub(crate) fn run(ctx: &Ctx, raw: &serde_json::Value) -> Result<Done, ToolError> {
    let inp: BashInput = input(
        "Bash",
        raw,
        "command: string, timeout?: number (milliseconds), description?: string",
    )?;
    let timeout_ms = inp
        .timeout
        .filter(|t| *t > 0)
        .map_or(ctx.bash_timeout_ms, |t| t.min(ctx.bash_timeout_ms));
    let start_err =
        |e: std::io::Error| ToolError::error(format!("Bash: cannot start the shell: {e}"));
    let (mut reader, writer) = std::io::pipe().map_err(start_err)?;
    let writer2 = writer.try_clone().map_err(start_err)?;
    #[cfg(target_os = "linux")]
    let group_filter = if ctx.sandboxed {
        Some(crate::sandbox::tools::stay_in_group().map_err(|e| {
            ToolError::error(format!("Bash: cannot build the process-group filter: {e}"))
        })?)
    } else {
        None
    };
    let mut cmd = Command::new(shell());
    cmd.arg("-c")
        .arg(&inp.command)
        .current_dir(&ctx.workspace)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &ctx.workspace)
        .env("LANG", "C.UTF-8")
        // git's automatic maintenance detaches into the background with
        // setsid, which the group filter refuses (and which would outlive
        // the call): run it in the foreground instead.
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "gc.autoDetach")
        .env("GIT_CONFIG_VALUE_0", "false")
        .env("GIT_CONFIG_KEY_1", "maintenance.autoDetach")
        .env("GIT_CONFIG_VALUE_1", "false")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2);
    if let Some(tmp) = &ctx.tmp_dir {
        cmd.env("TMPDIR", tmp);
    }
    // The sentinel's pipe (see `start_sentinel`): this process keeps the
    // write end until the call is over; both ends are close-on-exec, so
    // the shell holds neither.
    let (watch_r, watch_w) = std::io::pipe().map_err(start_err)?;
    let watch = watch_r.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec, and
    // makes only async-signal-safe system calls (rt_sigaction,
    // rt_sigprocmask, close_range/fcntl, setsid, fork, waitpid, prctl,
    // seccomp) without
    // allocating: the filter was compiled before the fork, and errors are
    // plain OS error numbers.
    unsafe {
        cmd.pre_exec(move || {
            // A signal mask and ignored signals survive exec: without this
            // the shell and everything it started inherited the SIGTERM
            // held around the spawn (below), and `timeout`, `kill` and a
            // test runner's own SIGTERM did nothing to them.
            dsh_exec::default_signals();
            dsh_exec::cloexec_inherited();
            nix::unistd::setsid()?;
            start_sentinel(watch)?;
            #[cfg(target_os = "linux")]
            {
                // The shell dies with the tool process (its descendants are
                // in the group, which the tool process kills).
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                if let Some(filter) = &group_filter {
                    seccompiler::apply_filter(filter)
                        .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))?;
                }
            }
            Ok(())
        });
    }
    // SIGTERM is held from before the spawn until the handler knows the
    // shell's group: a cancel that came between the two used to end this
    // process by the default action, and the shell's background children
    // (which have no parent-death signal) outlived the call. The process
    // has no other thread yet, so the thread's mask is the process's. The
    // child inherits the mask (std no longer resets it): `dsh_exec::default_signals`
    // in the closure above empties it again.
    let mut term = SigSet::empty();
    term.add(Signal::SIGTERM);
    let _ = term.thread_block();
    let spawned = cmd.spawn();
    // The parent's copies of the pipe's write end: closed now, or the
    // reader would never see the end of the output.
    drop(cmd);
    drop(watch_r);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = term.thread_unblock();
            return Err(start_err(e));
        }
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    stop_group_on_sigterm(pid);
    // A SIGTERM that arrived meanwhile is handled now, by the handler.
    let _ = term.thread_unblock();

    let collected = Arc::new(Mutex::new(Collected::default()));
    let (eof_tx, eof_rx) = mpsc::channel::<()>();
    let max = ctx.max_output_bytes;
    {
        let collected = Arc::clone(&collected);
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Ok(mut c) = collected.lock() {
                            c.total += n as u64;
                            let room = max.saturating_sub(c.kept.len());
                            c.kept.extend_from_slice(&buf[..n.min(room)]);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = eof_tx.send(());
        });
    }

    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let timed_out = !wait_exit(pid, deadline);
    if timed_out {
        let _ = killpg(pid, Signal::SIGTERM);
        wait_exit(pid, Instant::now() + KILL_GRACE);
    }
    // Always, and while the shell is an unreaped zombie (so its pid, the
    // group's id, cannot have been reused): whatever it left running in
    // the background dies with the call.
    let _ = killpg(pid, Signal::SIGKILL);
    // The group is gone (the sentinel with it); once the shell is reaped
    // its id may be reused, so a later SIGTERM must not signal it.
    GROUP.store(0, Ordering::SeqCst);
    drop(watch_w);
    let status = child.wait().ok();
    let _ = eof_rx.recv_timeout(DRAIN_WAIT);

    let (kept, total) = match collected.lock() {
        Ok(c) => (c.kept.clone(), c.total),
        Err(_) => (Vec::new(), 0),
    };
    let mut out = String::from_utf8_lossy(&kept).into_owned();
    cap_output(&mut out, max, String::new);
    if total > kept.len() as u64 {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[output truncated: the command printed {total} bytes; showing the first {max}]"
        ));
    }
    if timed_out {
        out.push_str(&format!(
            "\n[timed out after {timeout_ms} ms: the command and everything it started were killed]"
        ));
        return Ok(Done {
            status: Status::Timeout,
            output: out,
        });
    }
    match status {
        Some(s) => {
            if let Some(sig) = s.signal() {
                let name = Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("?");
                out.push_str(&format!("\n[killed by signal {sig} ({name})]"));
            } else if let Some(code) = s.code().filter(|c| *c != 0) {
                out.push_str(&format!("\n[exit code {code}]"));
            }
        }
        None => out.push_str("\n[exit status unknown]"),
    }
    if out.is_empty() {
        out.push_str("(no output)");
    }
    Ok(Done::ok(out))
}

/// Waits until the process `pid` has exited (without reaping it, so its
/// pid stays reserved) or `deadline` passes; true when it exited.
fn wait_exit(pid: Pid, deadline: Instant) -> bool {
    // Short sleeps first: most commands end within milliseconds.
    let mut nap = Duration::from_millis(1);
    loop {
        match waitid(
            Id::Pid(pid),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        ) {
            Ok(WaitStatus::StillAlive) => {}
            Err(nix::errno::Errno::EINTR) => {}
            // Exited, or cannot be waited for at all: either way there is
            // nothing left to wait for.
            Ok(_) | Err(_) => return true,
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}
