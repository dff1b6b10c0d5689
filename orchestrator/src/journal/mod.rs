//! Durable runs: the append-only journal of agent calls, the run
//! directory that holds it, and the provider wrapper that writes it and
//! replays it (`dsh workflow resume`) — the same records also become a
//! fixture (`--record`).
//!
//! One mechanism, three uses:
//! - **journal**: every call's start and settled outcome is appended to
//!   `journal.jsonl` in the run directory; a settled line is on disk
//!   (written and `fdatasync`ed) before its outcome reaches the script;
//! - **resume**: the n-th call with a given key gets the n-th journaled
//!   answer with that key, at once, marked `replayed`; the rest run live
//!   and are journaled in turn;
//! - **record**: the calls of one attempt, in call order, written as a
//!   fixture with exact matches.
//!
//! The public face for applications is [`durable`]: start a durable run,
//! open a stored one and resume it; [`summary`] lists and reads runs.
//! Not in here: the CLI commands (`runs_cmd.rs` of the `dsh` binary) and
//! the fixture provider that replays recordings (`providers/scripted.rs`).

pub mod durable;
pub mod key;
pub mod line;
pub mod provider;
pub mod reader;
pub mod record;
pub mod rundir;
pub mod summary;
pub mod writer;

pub use durable::{
    Durable, DurableOptions, DurableRun, Finished, JournalMode, JournalWarning, ResumeError,
    ResumeOptions, StoredRun,
};
pub use key::call_key;
pub use line::{Line, Outcome};
pub use provider::{Journaling, JournalingProvider};
pub use rundir::{ProviderSpec, RunDir, RunInfo};
pub use summary::{CallState, CallSummary, RunStatus, RunSummary};

/// A journal or run-directory problem, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}:{line}: not a journal line ({message}); the journal is damaged before its last line, so it cannot be replayed safely — start a new run instead"
    )]
    Corrupt {
        path: String,
        line: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error(
        "run {id} is in use by another dsh process{pid}; wait for it to finish or stop it, then resume"
    )]
    Locked { id: String, pid: String },
}

impl JournalError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        JournalError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
