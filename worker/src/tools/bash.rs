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
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, killpg, sigaction};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use serde::Deserialize;

use super::{Ctx, Done, Status, ToolError, cap_output, input};

mod sentinel;
mod tmp;

use sentinel::start_sentinel;
pub(crate) use tmp::{make_tmp_dir, remove_tmp_dir};

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

#[derive(Deserialize)]
struct BashInput {
    command: String,
    timeout: Option<u64>,
    #[allow(dead_code)] // For the transcript only; part of the input shape.
    description: Option<String>,
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
    let (reader, writer) = std::io::pipe().map_err(start_err)?;
    // The sentinel's pipe (see `start_sentinel`): this process keeps the
    // write end until the call is over; both ends are close-on-exec, so
    // the shell holds neither.
    let (watch_r, watch_w) = std::io::pipe().map_err(start_err)?;
    let cmd = shell_command(ctx, &inp.command, writer, watch_r.as_raw_fd())?;
    let (mut child, pid) = spawn_held(cmd, watch_r)?;
    let max = ctx.max_output_bytes;
    let (collected, eof_rx) = collect_output(reader, max);

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
    Ok(describe(
        &kept,
        total,
        max,
        timed_out.then_some(timeout_ms),
        status,
    ))
}

/// Why the shell could not be started.
fn start_err(e: std::io::Error) -> ToolError {
    ToolError::error(format!("Bash: cannot start the shell: {e}"))
}

/// The shell running `command`: fixed environment, output into `writer`
/// (stdout and stderr alike), its own session and group, its sentinel
/// watching `watch`, and under the sandbox the filter that keeps it in its
/// group.
fn shell_command(
    ctx: &Ctx,
    command: &str,
    writer: std::io::PipeWriter,
    watch: std::os::fd::RawFd,
) -> Result<Command, ToolError> {
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
        .arg(command)
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
    Ok(cmd)
}

/// Spawns the shell with SIGTERM held until [`stop_group_on_sigterm`]
/// knows its group; the shell's pid is its group's id.
fn spawn_held(
    mut cmd: Command,
    watch_r: std::io::PipeReader,
) -> Result<(std::process::Child, Pid), ToolError> {
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
    let child = match spawned {
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
    Ok((child, pid))
}

/// Reads the shell's output to its end on a thread of its own (so the
/// command never blocks on a full pipe), keeping the first `max` bytes and
/// counting the rest; the channel says when the end was reached.
fn collect_output(
    mut reader: std::io::PipeReader,
    max: usize,
) -> (Arc<Mutex<Collected>>, mpsc::Receiver<()>) {
    let collected = Arc::new(Mutex::new(Collected::default()));
    let (eof_tx, eof_rx) = mpsc::channel::<()>();
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
    (collected, eof_rx)
}

/// The call's answer: the output kept (cut to `max`, with a line for what
/// was not kept), then how the shell ended — timed out (`timed_out`: the
/// timeout in milliseconds), killed by a signal, or a nonzero exit code.
fn describe(
    kept: &[u8],
    total: u64,
    max: usize,
    timed_out: Option<u64>,
    status: Option<std::process::ExitStatus>,
) -> Done {
    let mut out = String::from_utf8_lossy(kept).into_owned();
    cap_output(&mut out, max, String::new);
    if total > kept.len() as u64 {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[output truncated: the command printed {total} bytes; showing the first {max}]"
        ));
    }
    if let Some(timeout_ms) = timed_out {
        out.push_str(&format!(
            "\n[timed out after {timeout_ms} ms: the command and everything it started were killed]"
        ));
        return Done {
            status: Status::Timeout,
            output: out,
        };
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
    Done::ok(out)
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
