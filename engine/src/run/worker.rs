//! The worker program: finding it ([`WorkerCommand`]) and spawning it
//! ([`spawn`]).
//!
//! The host and the worker talk over an anonymous `socketpair`: the worker
//! inherits its end as its standard input, so there is no socket file, no temp
//! directory and no listener that anyone else could connect to (see
//! docs/architecture.md for why this replaced a named local socket). The
//! process itself is spawned and ended like every child of the host
//! ([`dsh_exec::process`]).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;

use dsh_protocol::{SandboxPolicy, policy_line};

use super::error::StartError;
pub use dsh_exec::WorkerCommand;
use dsh_exec::process::{ProcessGroup, spawner};

/// A freshly spawned worker and the host's end of the socket.
pub struct Spawned {
    pub process: ProcessGroup,
    pub socket: std::os::unix::net::UnixStream,
}

impl Spawned {
    /// The worker's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// Spawns the worker in `/` with an empty environment, its end of the
/// socket as stdin, stdout null, stderr piped, in a new process group. The
/// worker arms its own parent-death signal (`--parent`), so nothing runs
/// between fork and exec and std spawns it with `posix_spawn`: the host's
/// page tables are not copied for a process that execs at once (in a
/// burst of 100 runs that copy was about 15 % of all CPU;
/// docs/performance.md). The worker finds `sandbox` waiting on its socket
/// as the policy line (`dsh_protocol::policy_line`) and applies it (all
/// but the run's own limits) right after its `Hello`, before `Init` (see
/// docs/sandbox.md): a run given this worker must have that policy.
pub fn spawn(
    worker: &WorkerCommand,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<Spawned> {
    begin_spawn(worker, sandbox, handle)?.wait()
}

/// A spawn handed to the spawner thread: the caller goes on meanwhile.
///
/// Why not wait at once: a thread that sleeps while the spawner thread
/// starts the worker is woken, on a 2-core machine, onto the core the new
/// worker just took, and can wait there behind the worker's whole start
/// (measured: 2.5 ms, the other core idle; docs/performance.md).
pub(crate) struct PendingSpawn {
    process: std::sync::mpsc::Receiver<std::io::Result<ProcessGroup>>,
    socket: std::os::unix::net::UnixStream,
}

impl PendingSpawn {
    /// The spawned worker, once the spawner thread has it (blocking until
    /// then), or why it could not be spawned.
    pub(crate) fn wait(self) -> std::io::Result<Spawned> {
        let process = self
            .process
            .recv()
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))??;
        self.socket.set_nonblocking(true)?;
        Ok(Spawned {
            process,
            socket: self.socket,
        })
    }
}

/// Starts spawning the worker (see [`spawn`]) and returns at once.
pub(crate) fn begin_spawn(
    worker: &WorkerCommand,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<PendingSpawn> {
    // CLOEXEC on both ends: only the worker's stdin copy reaches it.
    let (host_end, worker_end) = std::os::unix::net::UnixStream::pair()?;
    // Waiting in the socket's buffer when the worker starts: the only way
    // it learns its policy.
    (&host_end).write_all(policy_line::line(sandbox).as_bytes())?;

    let cmd = worker_process(worker, &[], worker_end.into(), Stdio::piped())?;
    Ok(PendingSpawn {
        process: spawner::spawn_later(cmd, handle)?,
        socket: host_end,
    })
}

/// The command of a worker process (or a fork server: `role_args`):
/// `worker`'s program and arguments, then `role_args`, `--fd 0` and
/// `--parent` (this process); an empty environment, `/` as working
/// directory, `socket` as stdin, stdout `/dev/null`, `stderr` as given, a
/// process group of its own. Spawned with `posix_spawn` (no `pre_exec`).
pub(crate) fn worker_process(
    worker: &WorkerCommand,
    role_args: &[&str],
    socket: OwnedFd,
    stderr: Stdio,
) -> std::io::Result<std::process::Command> {
    let mut cmd = std::process::Command::new(absolute_program(worker)?);
    cmd.args(&worker.args)
        .args(role_args)
        .arg("--fd")
        .arg("0")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .env_clear()
        // Not the user's project directory: the worker holds no handle on
        // it, and under Landlock it cannot even list `/`.
        .current_dir("/")
        // Moved into the command: dropped (closed here) with it once the
        // child holds its own copy.
        .stdin(Stdio::from(socket))
        .stdout(Stdio::null())
        .stderr(stderr);
    spawner::own_group_self_armed(&mut cmd);
    Ok(cmd)
}

/// The worker's program as exec should see it from `/`, where the worker
/// starts: a relative path made absolute (a bare name is still looked up
/// in PATH by exec).
fn absolute_program(worker: &WorkerCommand) -> std::io::Result<PathBuf> {
    Ok(
        if worker.program.is_relative() && worker.program.components().count() > 1 {
            std::env::current_dir()?.join(&worker.program)
        } else {
            worker.program.clone()
        },
    )
}

/// Takes over a worker forked outside tokio ([`ForkedWorker`]) and sends it
/// its sandbox policy line. Inside a tokio runtime. On error the worker is
/// killed and reaped.
pub(crate) fn adopt(forked: ForkedWorker, sandbox: SandboxPolicy) -> std::io::Result<Spawned> {
    let ForkedWorker {
        pid,
        socket,
        stderr,
    } = forked;
    let process = match ProcessGroup::adopt(pid, stderr) {
        Ok(p) => p,
        Err(e) => {
            kill_unadopted(pid);
            return Err(e);
        }
    };
    // From here dropping `process` kills and reaps it.
    (&socket).write_all(policy_line::line(sandbox).as_bytes())?;
    socket.set_nonblocking(true)?;
    Ok(Spawned { process, socket })
}

/// A worker spawned ahead of its run, so that its exec, sandbox and engine
/// build overlap with the caller's own preparation of the run (reading the
/// configuration, the run directory, the journal, parsing the script).
/// Give it to one [`crate::StartRequest::with_spawned_worker`]: `start()`
/// then sends it `Init` instead of spawning one. A run whose sandbox
/// policy differs from this one's starts its command as usual, and this
/// worker is killed.
///
/// One worker, for one run. The CLI spawns one as soon as it knows the
/// policy (docs/performance.md: it took about 0.9 ms off `dsh workflow
/// run`). Clones share the one worker; the first run to start takes it.
/// Dropping the last clone before a run took it kills the worker (its
/// process group, SIGKILL).
#[derive(Clone)]
pub struct SpawnedWorker {
    inner: std::sync::Arc<SpawnedInner>,
}

struct SpawnedInner {
    worker: WorkerCommand,
    sandbox: SandboxPolicy,
    /// Taken (left `None`) by the run that uses it.
    slot: std::sync::Mutex<Option<Ahead>>,
}

/// Where a worker spawned ahead is.
enum Ahead {
    /// On the spawner thread, or done there and not looked at yet.
    Pending(PendingSpawn),
    /// Spawned, waiting for its run ([`SpawnedWorker::pid`] asked).
    Spawned(Box<Spawned>),
}

impl Ahead {
    fn spawned(self) -> std::io::Result<Spawned> {
        match self {
            Ahead::Pending(p) => p.wait(),
            Ahead::Spawned(s) => Ok(*s),
        }
    }
}

impl SpawnedWorker {
    /// Starts spawning `worker` for a run with the sandbox policy
    /// `sandbox` and returns at once: the spawn itself happens on the
    /// spawner thread, and the worker says `Hello` to the run that takes
    /// it. Must be called inside a tokio runtime, the one its run will
    /// start in. A spawn that fails is not reported here: the run that
    /// would have taken the worker spawns its own and reports why.
    pub fn spawn(
        worker: &WorkerCommand,
        sandbox: SandboxPolicy,
    ) -> Result<SpawnedWorker, StartError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let pending =
            begin_spawn(worker, sandbox, &handle).map_err(|e| StartError::spawn(worker, e))?;
        Ok(SpawnedWorker::holding(
            worker,
            sandbox,
            Ahead::Pending(pending),
        ))
    }

    /// A handle on `ahead`, made for `worker` under `sandbox`.
    fn holding(worker: &WorkerCommand, sandbox: SandboxPolicy, ahead: Ahead) -> SpawnedWorker {
        SpawnedWorker {
            inner: std::sync::Arc::new(SpawnedInner {
                worker: worker.clone(),
                sandbox,
                slot: std::sync::Mutex::new(Some(ahead)),
            }),
        }
    }

    /// Takes over a worker this process forked itself, before its tokio
    /// runtime started (the `dsh` binary does this first thing for
    /// `workflow run`: no exec, no dynamic loader, the image already
    /// mapped; docs/performance.md), as the worker for a run of `worker`
    /// under `sandbox`. The forked worker waits for one line on its socket
    /// naming the sandbox policy before it says `Hello`
    /// ([`ForkedWorker`]); this sends it. Must be called inside a tokio
    /// runtime. On error the forked worker is killed and reaped.
    pub fn adopt(
        forked: ForkedWorker,
        worker: &WorkerCommand,
        sandbox: SandboxPolicy,
    ) -> Result<SpawnedWorker, StartError> {
        if tokio::runtime::Handle::try_current().is_err() {
            kill_unadopted(forked.pid);
            return Err(StartError::NoRuntime);
        }
        let spawned = adopt(forked, sandbox).map_err(|e| super::StartError::spawn(worker, e))?;
        Ok(SpawnedWorker::holding(
            worker,
            sandbox,
            Ahead::Spawned(Box::new(spawned)),
        ))
    }

    /// Whether a run has taken the worker yet.
    pub fn is_taken(&self) -> bool {
        self.inner.slot.lock().map_or(true, |s| s.is_none())
    }

    /// The worker's pid, waiting for the spawner thread if it is not
    /// spawned yet; `None` once a run took it or if it could not be
    /// spawned.
    pub fn pid(&self) -> Option<u32> {
        let mut slot = self.inner.slot.lock().ok()?;
        let spawned = slot.take()?.spawned().ok()?;
        let pid = spawned.pid();
        *slot = Some(Ahead::Spawned(Box::new(spawned)));
        Some(pid)
    }

    /// The worker command it runs.
    pub fn worker(&self) -> &WorkerCommand {
        &self.inner.worker
    }

    /// The worker, for a run under `sandbox`; `None` when it was made for
    /// another policy, already taken, or could not be spawned. A worker
    /// not used is killed: nothing else could use it.
    pub(crate) fn take_for(&self, sandbox: SandboxPolicy) -> Option<Spawned> {
        let pending = self.inner.slot.lock().ok()?.take()?;
        if self.inner.sandbox != sandbox {
            return None;
        }
        match pending.spawned() {
            Ok(spawned) => Some(spawned),
            Err(e) => {
                tracing::debug!("the worker spawned ahead did not start ({e}); spawning another");
                None
            }
        }
    }
}

/// A worker process forked by the embedding program itself rather than
/// spawned by the host, handed over with [`SpawnedWorker::adopt`].
///
/// What the forked process must be (the `dsh` binary makes it with
/// `dsh_worker::prefork`): the leader of its own process group, with its
/// parent-death signal armed, `socket`'s peer as its channel, `stderr`'s
/// write end as its stderr; it reads one line naming the sandbox policy
/// from the socket, then serves exactly as a spawned worker does from its
/// `Hello` on. Nothing else in the process may wait for `pid`.
#[derive(Debug)]
pub struct ForkedWorker {
    /// The forked worker's pid (also its process group's id).
    pub pid: u32,
    /// The host's end of the worker's socket pair.
    pub socket: std::os::unix::net::UnixStream,
    /// The read end of the worker's stderr pipe.
    pub stderr: OwnedFd,
}

/// SIGKILLs and reaps a forked worker that could not be adopted.
fn kill_unadopted(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
}

impl std::fmt::Debug for SpawnedWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnedWorker")
            .field("worker", &self.inner.worker)
            .field("sandbox", &self.inner.sandbox)
            .field("taken", &self.is_taken())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::WorkerCommand;

    #[rstest]
    #[case::dsh_binary(WorkerCommand::dsh("/opt/bin/dsh"), true)]
    #[case::dsh_worker(WorkerCommand::new("/opt/bin/dsh-worker"), true)]
    #[case::another_program(WorkerCommand::new("/opt/bin/wrapper"), false)]
    #[case::extra_arguments(
        WorkerCommand { program: "/opt/bin/dsh".into(), args: vec!["__worker".into(), "--x".into()] },
        false
    )]
    #[case::a_shell(
        WorkerCommand { program: "/bin/sh".into(), args: vec!["-c".into(), "exec dsh".into()] },
        false
    )]
    #[case::one_other_argument(
        WorkerCommand { program: "/opt/bin/dsh-worker".into(), args: vec!["--x".into()] },
        false
    )]
    fn only_stock_commands_may_share_a_fork_server(
        #[case] cmd: WorkerCommand,
        #[case] stock: bool,
    ) {
        assert_eq!(cmd.is_stock(), stock, "{cmd:?}");
    }
}
