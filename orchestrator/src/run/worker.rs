//! The worker program: finding it ([`WorkerCommand`]) and spawning it
//! ([`spawn`]).
//!
//! The host and the worker talk over an anonymous `socketpair`: the worker
//! inherits its end as its standard input, so there is no socket file, no temp
//! directory and no listener that anyone else could connect to (see
//! docs/architecture.md for why this replaced a named local socket). The
//! process itself is spawned and ended like every child of the host
//! ([`crate::process`]).

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;

use dsh_protocol::SandboxPolicy;

use crate::process::{ProcessGroup, spawner};

/// How to start a worker: a program and the arguments before `--fd 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable to run.
    pub program: PathBuf,
    /// Arguments given before `--fd 0` (`__worker` for a `dsh` binary).
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// Runs `program` with no arguments before `--fd 0` (a `dsh-worker`
    /// executable).
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
    NotAFile {
        /// The value of `DSH_WORKER`.
        path: PathBuf,
    },
    /// None of the usual places has one; `looked` lists them.
    #[error(
        "cannot find the dsh-worker executable; looked at: {}. Set DSH_WORKER to its path or pass a worker command to the StartRequest",
        looked.join("; ")
    )]
    NotFound {
        /// Each place looked at, with why it did not do.
        looked: Vec<String>,
    },
}

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
/// docs/performance.md). The worker applies `sandbox` (all but the run's
/// own limits) right after its `Hello`, before `Init` (`--sandbox`; see
/// docs/sandbox.md): a run given this worker must have that policy.
pub fn spawn(
    worker: &WorkerCommand,
    sandbox: SandboxPolicy,
    handle: &tokio::runtime::Handle,
) -> std::io::Result<Spawned> {
    // CLOEXEC on both ends: only the worker's stdin copy reaches it.
    let (host_end, worker_end) = std::os::unix::net::UnixStream::pair()?;

    // The worker starts in `/`, so a relative path must be made absolute
    // here (a bare name is still looked up in PATH by exec).
    let program = if worker.program.is_relative() && worker.program.components().count() > 1 {
        std::env::current_dir()?.join(&worker.program)
    } else {
        worker.program.clone()
    };
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&worker.args)
        .arg("--sandbox")
        .arg(sandbox.as_str())
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
        .stdin(Stdio::from(OwnedFd::from(worker_end)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    spawner::own_group_self_armed(&mut cmd);
    let process = spawner::spawn_blocking(cmd, handle)?;
    host_end.set_nonblocking(true)?;
    Ok(Spawned {
        process,
        socket: host_end,
    })
}
