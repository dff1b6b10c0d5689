//! Why a run could not start ([`StartError`]), and why no worker program
//! was found ([`WorkerMissing`]). A file of its own so that the launch code
//! (`run/worker.rs`, `run/launch.rs`, `fork_server.rs`) can name them
//! without depending on `run/mod.rs`, which depends on it.

use dsh_protocol::ErrorCode;

use crate::limits::LimitError;
use crate::script::ScriptError;
use dsh_exec::WorkerCommand;
pub use dsh_exec::WorkerMissing;

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
    /// `StartError::Spawn` for `command`, which could not be spawned.
    pub(crate) fn spawn(command: &WorkerCommand, source: std::io::Error) -> StartError {
        StartError::Spawn {
            program: command.program.display().to_string(),
            source,
        }
    }

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
