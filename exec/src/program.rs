//! The program dsh runs as its own helper ([`WorkerCommand`]): the worker
//! that runs a script, and (with its `reap` and `tool` subcommands) the
//! reaper and the tool host that providers start. Finding it is here, once,
//! because the engine and the providers both need it.

use std::path::PathBuf;

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

    /// Whether this is a stock worker command, as [`WorkerCommand::dsh`]
    /// makes it (`__worker` and nothing else) or as [`WorkerCommand::new`]
    /// makes it for a program named `dsh-worker` (no arguments): only
    /// those are known to serve `--fork-server`, so only their runs share
    /// a fork server (`fork_server/shared.rs`; docs/architecture.md, "The fork server"). A wrapper script or
    /// extra arguments always spawn.
    pub fn is_stock(&self) -> bool {
        match self.args.as_slice() {
            [] => self.program.file_name().is_some_and(|n| n == "dsh-worker"),
            [only] => only == "__worker",
            _ => false,
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
