//! Why a run could not start ([`StartError`]), and why no worker program
//! was found ([`WorkerMissing`]). A file of its own so that the launch code
//! (`run/worker.rs`, `run/launch.rs`, `fork_server.rs`) can name them
//! without depending on `run/mod.rs`, which depends on it.

use std::path::PathBuf;

use dsh_protocol::ErrorCode;

use crate::limits::LimitError;
use crate::script::ScriptError;

/// Everything that prevents a run from existing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The script does not parse, or its meta is invalid (`SCRIPT_PARSE`,
    /// `META_INVALID`).
    #[error("{0}")]
    Script(#[from] ScriptError),
    /// The script is over `maxScriptBytes` (`SCRIPT_TOO_LARGE`).
    #[error(
        "{name}: the script is {bytes} bytes, over the limit of {limit} bytes (maxScriptBytes)"
    )]
    TooLarge {
        /// The script's name, as in [`crate::StartRequest::script_name`].
        name: String,
        /// The script's size in bytes.
        bytes: u64,
        /// The limit in bytes ([`crate::Limits::max_script_bytes`]).
        limit: usize,
    },
    /// Neither the file, the request nor the fallback gives a meta
    /// (`META_INVALID`).
    #[error(
        "{name}: the script has no `export const meta` and the request gives none; add meta to the file or pass it with StartRequest::with_meta"
    )]
    MissingMeta {
        /// The script's name, as in [`crate::StartRequest::script_name`].
        name: String,
    },
    /// A limit is invalid (`USAGE`).
    #[error("invalid limit {0}")]
    Limits(#[from] LimitError),
    /// The script file cannot be used: a wrong extension, or it cannot be
    /// read (`USAGE`).
    #[error("{message}")]
    Usage {
        /// The file, the problem and the fix.
        message: String,
    },
    /// No worker program was found (`WORKER_EXITED`).
    #[error(transparent)]
    WorkerMissing(#[from] WorkerMissing),
    /// The worker program could not be started (`WORKER_EXITED`).
    #[error("cannot start the worker {program}: {source}")]
    Spawn {
        /// The worker program's path, as displayed.
        program: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// [`crate::start`] was called outside a tokio runtime (`WORKER_EXITED`).
    #[error("start() must be called inside a tokio runtime")]
    NoRuntime,
}

impl StartError {
    /// The contract's error code for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            StartError::Script(e) => ErrorCode::parse(e.code()).unwrap_or(ErrorCode::ScriptParse),
            StartError::TooLarge { .. } => ErrorCode::ScriptTooLarge,
            StartError::MissingMeta { .. } => ErrorCode::MetaInvalid,
            StartError::Limits(_) | StartError::Usage { .. } => ErrorCode::Usage,
            StartError::WorkerMissing(_) | StartError::Spawn { .. } | StartError::NoRuntime => {
                ErrorCode::WorkerExited
            }
        }
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
