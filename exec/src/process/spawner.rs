//! Spawning children from one long-lived thread.
//!
//! The parent-death signal (`PR_SET_PDEATHSIG`) fires when the *thread*
//! that forked the child exits, so spawning from a short-lived
//! blocking-pool thread could kill a healthy child; a dedicated thread that
//! lives as long as the process avoids that. Every child is also put in a
//! process group of its own and handed back as a [`ProcessGroup`]. A
//! program that is not ours gets the signal armed between fork and exec
//! (`own_group`); the worker arms it itself (`own_group_self_armed`),
//! which lets std use `posix_spawn` instead of a full fork.

use std::os::unix::process::CommandExt;
use std::sync::{Mutex, OnceLock, mpsc};

use super::ProcessGroup;

/// What the spawner thread does with a spawned child (or the error).
type Reply = Box<dyn FnOnce(std::io::Result<ProcessGroup>) + Send>;

struct Job {
    cmd: std::process::Command,
    handle: tokio::runtime::Handle,
    reply: Reply,
}

fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        // Lives for the rest of the process (see the module docs).
        let _ = std::thread::Builder::new()
            .name("dsh-spawner".into())
            .spawn(move || {
                for job in rx {
                    // Inside the runtime: the child's pipes and its exit
                    // watch register with this runtime's reactor.
                    let _enter = job.handle.enter();
                    // kill_on_drop is the last line of defence (a runtime
                    // torn down mid-run); owners always reap first.
                    let res = tokio::process::Command::from(job.cmd)
                        .kill_on_drop(true)
                        .spawn()
                        .and_then(ProcessGroup::new);
                    (job.reply)(res);
                }
            });
        Mutex::new(tx)
    })
}

/// Puts `cmd` in a process group of its own, with the parent-death signal
/// armed before exec. `pre_exec` runs first (in the forked child, before
/// exec; it must be async-signal-safe).
pub fn own_group(
    cmd: &mut std::process::Command,
    pre_exec: impl Fn() -> std::io::Result<()> + Send + Sync + 'static,
) {
    let parent_pid = std::process::id();
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec. It calls
    // `default_signals` (rt_sigaction, rt_sigprocmask), `cloexec_inherited`
    // (close_range or fcntl), `pre_exec`, which the
    // caller guarantees is async-signal-safe, and `die_with_parent`, which only makes async-signal-safe calls; it
    // allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(move || {
            crate::default_signals();
            crate::cloexec_inherited();
            pre_exec()?;
            die_with_parent(parent_pid)
        });
    }
}

/// Puts `cmd` in a process group of its own for a child that arms its
/// parent-death signal itself, first thing after exec (the worker's
/// `--parent`). With no closure to run between fork and exec, std spawns
/// it with `posix_spawn`, whose vfork semantics do not copy the host's
/// page tables only for the exec to throw them away.
pub fn own_group_self_armed(cmd: &mut std::process::Command) {
    cmd.process_group(0);
}

/// Spawns `cmd` on the spawner thread (see the module docs) inside
/// `handle`'s runtime, and hands the result to `reply` there.
fn on_spawner_thread(
    cmd: std::process::Command,
    handle: &tokio::runtime::Handle,
    reply: Reply,
) -> std::io::Result<()> {
    let gone = || std::io::Error::other("the spawner thread is gone");
    spawner()
        .lock()
        .map_err(|_| gone())?
        .send(Job {
            cmd,
            handle: handle.clone(),
            reply,
        })
        .map_err(|_| gone())
}

/// Hands `cmd` (prepared with [`own_group`] or [`own_group_self_armed`])
/// to the spawner thread
/// and returns at once; the child, or why it could not be spawned, arrives
/// on the receiver. A child whose receiver is gone by then is dropped,
/// which kills its group.
pub fn spawn_later(
    cmd: std::process::Command,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<mpsc::Receiver<std::io::Result<ProcessGroup>>> {
    let (tx, rx) = mpsc::channel();
    on_spawner_thread(
        cmd,
        handle,
        Box::new(move |res| {
            let _ = tx.send(res);
        }),
    )?;
    Ok(rx)
}

/// Spawns `cmd` (prepared with [`own_group`]) in the current runtime. A
/// child whose caller went away meanwhile is dropped, which kills its
/// group.
pub async fn spawn(cmd: std::process::Command) -> std::io::Result<ProcessGroup> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    on_spawner_thread(
        cmd,
        &tokio::runtime::Handle::current(),
        Box::new(move |res| {
            let _ = tx.send(res);
        }),
    )?;
    rx.await
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// In a forked child: SIGKILL when the spawning thread's process dies, and
/// exit at once (status 111) if that already happened before the signal
/// was armed. Only async-signal-safe calls.
fn die_with_parent(parent_pid: u32) -> std::io::Result<()> {
    // Plain syscalls (prctl, getppid), async-signal-safe.
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(std::io::Error::from)?;
    if std::os::unix::process::parent_id() != parent_pid {
        // SAFETY: _exit is async-signal-safe and ends the forked child
        // without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(111) };
    }
    Ok(())
}
