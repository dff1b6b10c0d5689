//! Finding and spawning the worker process.
//!
//! The host and the worker talk over an anonymous `socketpair`: the worker
//! inherits its end as descriptor 3, so there is no socket file, no temp
//! directory and no listener that anyone else could connect to (see
//! docs/architecture.md for why this replaced a named local socket).
//!
//! Every worker is spawned from one long-lived thread. The parent-death
//! signal (`PR_SET_PDEATHSIG`) fires when the *thread* that forked the child
//! exits, so spawning from a short-lived blocking-pool thread could kill a
//! healthy worker; a dedicated thread that lives as long as the process
//! avoids that.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Mutex, OnceLock, mpsc};

use tokio::process::Child;

/// Descriptor number of the socket in the worker.
const WORKER_FD: RawFd = 3;

/// How to start a worker: a program and the arguments before `--fd 3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl WorkerCommand {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        WorkerCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// A `dsh` binary used as its own worker (hidden `__worker` subcommand).
    pub fn dsh(program: impl Into<PathBuf>) -> Self {
        WorkerCommand {
            program: program.into(),
            args: vec!["__worker".into()],
        }
    }

    /// Resolution order: `DSH_WORKER` (an error when it is set but names no
    /// file — never a silent fallback); `dsh-worker` next to the current
    /// executable, or one directory up (cargo's `examples/` and `deps/`).
    /// The error lists every place looked at.
    pub fn resolve() -> Result<WorkerCommand, WorkerMissing> {
        let mut looked = Vec::new();
        if let Some(p) = std::env::var_os("DSH_WORKER") {
            let p = PathBuf::from(p);
            if p.is_file() {
                return Ok(WorkerCommand::new(p));
            }
            // Set but wrong: an error, never a silent fallback to another worker.
            return Err(WorkerMissing::NotAFile { path: p });
        } else {
            looked.push("DSH_WORKER (not set)".into());
        }
        match std::env::current_exe() {
            Ok(exe) => {
                // Next to the executable; one level up covers cargo's
                // target/<profile>/{examples,deps}/ layout.
                let dirs = [exe.parent(), exe.parent().and_then(|d| d.parent())];
                for dir in dirs.into_iter().flatten() {
                    let p = dir.join("dsh-worker");
                    if p.is_file() {
                        return Ok(WorkerCommand::new(p));
                    }
                    looked.push(format!("{} (missing)", p.display()));
                }
            }
            Err(e) => looked.push(format!("next to the current executable ({e})")),
        }
        Err(WorkerMissing::NotFound { looked })
    }
}

/// No worker program to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerMissing {
    /// `DSH_WORKER` is set but names no file (never a silent fallback).
    #[error(
        "DSH_WORKER={} is not a file; point it at a dsh-worker executable or unset it",
        path.display()
    )]
    NotAFile { path: PathBuf },
    /// None of the usual places has one; `looked` lists them.
    #[error(
        "cannot find the dsh-worker executable; looked at: {}. Set DSH_WORKER to its path or pass a worker command to the StartRequest",
        looked.join("; ")
    )]
    NotFound { looked: Vec<String> },
}

/// A freshly spawned worker and the host's end of the socket.
pub struct Spawned {
    pub child: Child,
    pub socket: std::os::unix::net::UnixStream,
    pub pid: u32,
}

/// What the spawner thread does with a spawned child (or the error).
type Reply = Box<dyn FnOnce(std::io::Result<Child>) + Send>;

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
                    let _enter = job.handle.enter();
                    // kill_on_drop is the last line of defence (a runtime
                    // torn down mid-run); the supervisor always reaps first.
                    let res = tokio::process::Command::from(job.cmd)
                        .kill_on_drop(true)
                        .spawn();
                    (job.reply)(res);
                }
            });
        Mutex::new(tx)
    })
}

/// Spawns `cmd` on the spawner thread (see the module docs: the thread that
/// forks must outlive the child, or its parent-death signal fires) inside
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

/// [`on_spawner_thread`], waiting for the child (blocking).
pub(crate) fn spawn_blocking(
    cmd: std::process::Command,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<Child> {
    let (tx, rx) = mpsc::channel();
    on_spawner_thread(
        cmd,
        handle,
        Box::new(move |res| {
            let _ = tx.send(res);
        }),
    )?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// [`on_spawner_thread`], awaiting the child. A child whose caller went
/// away meanwhile is dropped, which kills it (`kill_on_drop`).
pub(crate) async fn spawn_async(
    cmd: std::process::Command,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<Child> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    on_spawner_thread(
        cmd,
        handle,
        Box::new(move |res| {
            let _ = tx.send(res);
        }),
    )?;
    rx.await
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// For a `pre_exec` closure: the child gets SIGKILL when the spawning
/// thread's process dies, and exits at once (status 111) if that already
/// happened before the signal was armed. Only async-signal-safe calls.
///
/// # Safety
/// Call only in a forked child before exec.
pub(crate) unsafe fn die_with_parent(parent_pid: libc::pid_t) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl takes no pointers here.
        if unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: getppid and _exit are async-signal-safe.
    if unsafe { libc::getppid() } != parent_pid {
        unsafe { libc::_exit(111) };
    }
    Ok(())
}

fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Spawns the worker in `/` with an empty environment, stdin and stdout null,
/// stderr piped, in a new process group, with a parent-death signal.
pub fn spawn(worker: &WorkerCommand, handle: &tokio::runtime::Handle) -> std::io::Result<Spawned> {
    let (host_end, worker_end) = socketpair()?;
    let child_fd = worker_end.as_raw_fd();
    // SAFETY: getpid has no preconditions.
    let parent_pid = unsafe { libc::getpid() };

    // The worker starts in `/`, so a relative path must be made absolute
    // here (a bare name is still looked up in PATH by exec).
    let program = if worker.program.is_relative() && worker.program.components().count() > 1 {
        std::env::current_dir()?.join(&worker.program)
    } else {
        worker.program.clone()
    };
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&worker.args)
        .arg("--fd")
        .arg(WORKER_FD.to_string())
        .env_clear()
        // Not the user's project directory: the worker holds no handle on
        // it, and under Landlock it cannot even list `/`.
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (dup2, fcntl, prctl, getppid, _exit); it
    // allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(move || {
            if child_fd == WORKER_FD {
                let flags = libc::fcntl(WORKER_FD, libc::F_GETFD);
                if flags < 0 || libc::fcntl(WORKER_FD, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(child_fd, WORKER_FD) < 0 {
                // dup2 leaves the new descriptor without CLOEXEC: inherited.
                return Err(std::io::Error::last_os_error());
            }
            die_with_parent(parent_pid)
        });
    }

    let child = spawn_blocking(cmd, handle)?;
    // The worker holds its own copy now; ours must not keep the pair alive.
    drop(worker_end);
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the worker exited before it could be tracked"))?;
    let socket = std::os::unix::net::UnixStream::from(host_end);
    socket.set_nonblocking(true)?;
    Ok(Spawned { child, socket, pid })
}
