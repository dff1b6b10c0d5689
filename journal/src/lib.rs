//! `dsh-journal`: durable runs — the append-only journal of agent calls, the run
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
//! The lines are kept by a [`JournalStore`] ([`store`]): the file journal
//! ([`writer`]) today.
//!
//! The public face for applications is [`durable`]: start a durable run,
//! open a stored one and resume it; [`summary`] lists and reads runs.
//! Not in here: the CLI commands (`runs_cmd.rs` of the `dsh` binary), the
//! engine that runs the script (`dsh-engine`) and the fixture provider that
//! replays recordings (`dsh-providers`' `scripted`).

#![warn(missing_docs)]

pub mod durable;
pub mod key;
pub mod layer;
pub mod line;
pub mod provider;
pub mod reader;
pub mod record;
pub mod rundir;
pub mod store;
pub mod summary;
pub mod writer;

pub use durable::{
    Durable, DurableOptions, DurableRun, Finished, JournalMode, JournalWarning, ResumeError,
    ResumeOptions, StoredRun, resume_stored,
};
pub use key::call_key;
pub use layer::JournalLayer;
pub use line::{Line, Outcome};
pub use provider::{DEFAULT_JOURNAL_LIMIT, Journaling, JournalingProvider, Replay};
pub use rundir::{ProviderSpec, RunDir, RunInfo};
pub use store::{JournalFull, JournalStore, RunStore, RunStoreError, StoredRecord};
pub use summary::{CallState, CallSummary, RunStatus, RunSummary};

/// A journal or run-directory problem, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Reading or writing a file of the run directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory, as displayed.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A journal line before the last one does not parse (a torn last
    /// line is not an error: it is ignored).
    #[error(
        "{path}:{line}: not a journal line ({message}); the journal is damaged before its last line, so it cannot be replayed safely — start a new run instead"
    )]
    Corrupt {
        /// The journal file, as displayed.
        path: String,
        /// The bad line's number, 1-based.
        line: usize,
        /// Why it does not parse.
        message: String,
    },
    /// A run directory's `run.json` is not one this version reads, or no
    /// run of that path or id exists.
    #[error("{path}: {message}")]
    Invalid {
        /// The file, or the run as the caller named it.
        path: String,
        /// The problem and the fix.
        message: String,
    },
    /// Another process holds the run's lock (it is running or resuming).
    #[error(
        "run {id} is in use by another dsh process{pid}; wait for it to finish or stop it, then resume"
    )]
    Locked {
        /// The run's id.
        id: String,
        /// ` (pid N)` with the holder's pid when the lock file names one,
        /// else empty.
        pid: String,
    },
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
