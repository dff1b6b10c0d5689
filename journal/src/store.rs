//! Where a run's journal lines are kept: the [`JournalStore`] behind the
//! journaling layer.
//!
//! The layer ([`crate::provider`]) decides *what* to journal and when a
//! line must be durable before the script sees an outcome; a store only
//! keeps lines in order and says when they are durable. The file journal
//! ([`JournalWriter`], `journal.jsonl` in the run directory, group commit
//! on a thread of its own) is one; `dsh-store`'s PostgreSQL journal is
//! another.
//!
//! A run's record as a whole — `run.json`, the script, the result — is a
//! run directory by default; [`RunStore`] is where it is kept instead when
//! the run is kept in a database (`Durable::new_run_in_store`).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::line::Line;
use crate::writer::JournalWriter;

/// A line that would take the journal past its size limit; nothing was
/// queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalFull {
    /// The journal's length so far (what is queued included).
    pub used: u64,
    /// The limit.
    pub limit: u64,
}

/// Keeps one run's journal lines, in the order they are appended.
///
/// A failing store never fails the run: it reports the first error itself
/// (a log line), drops later lines, and answers `false` to
/// [`JournalStore::append_durable`], so the layer counts the call as not
/// journaled (a resume asks it again).
#[async_trait]
pub trait JournalStore: Send + Sync + 'static {
    /// The journal's length in bytes once everything appended so far is
    /// kept (what the size limit is checked against).
    fn bytes(&self) -> u64;

    /// Appends `line`; returns at once (it is durable with the next
    /// durable line).
    fn append(&self, line: &Line);

    /// Appends a line's `text` (with its newline) unless that would take
    /// the journal past `limit` bytes.
    fn append_within(&self, text: String, limit: u64) -> Result<(), JournalFull>;

    /// Appends `line` and waits until it is durable; `false` when it
    /// could not be made so.
    async fn append_durable(&self, line: &Line) -> bool;

    /// Waits until everything appended so far is kept (not necessarily
    /// durable).
    async fn flush(&self);

    /// Waits until everything appended so far is durable.
    async fn sync(&self);

    /// Makes `paths` (the run directory's other files) durable with the
    /// first durable line. A store that keeps no files ignores it.
    fn also_sync(&self, _paths: Vec<PathBuf>) {}
}

#[async_trait]
impl JournalStore for JournalWriter {
    fn bytes(&self) -> u64 {
        JournalWriter::bytes(self)
    }

    fn append(&self, line: &Line) {
        JournalWriter::append(self, line);
    }

    fn append_within(&self, text: String, limit: u64) -> Result<(), JournalFull> {
        JournalWriter::append_within(self, text, limit)
    }

    async fn append_durable(&self, line: &Line) -> bool {
        JournalWriter::append_durable(self, line).await
    }

    async fn flush(&self) {
        JournalWriter::flush(self).await;
    }

    async fn sync(&self) {
        JournalWriter::sync(self).await;
    }

    fn also_sync(&self, paths: Vec<PathBuf>) {
        JournalWriter::also_sync(self, paths);
    }
}

/// Why a [`RunStore`] could not do what was asked (its message names the
/// store and what failed).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RunStoreError(pub Box<dyn std::error::Error + Send + Sync>);

/// Where a durable run's record is kept instead of a run directory: a
/// database many hosts share (`dsh-store`). Its journal lines go to the
/// [`JournalStore`] that [`RunStore::create`] returns.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Where the store is, as the user may see it (never a password).
    fn location(&self) -> String;

    /// Records a new run — `info` is what `run.json` holds, `source` its
    /// script — and returns the store of its journal lines.
    async fn create(
        &self,
        id: &str,
        info: &Value,
        source: &str,
    ) -> Result<Arc<dyn JournalStore>, RunStoreError>;

    /// Records `info` again once the run has started (its name and meta
    /// are known then).
    async fn describe(&self, id: &str, info: &Value) -> Result<(), RunStoreError>;

    /// Records how attempt `attempt` settled (what `result.json` holds).
    async fn settle(&self, id: &str, attempt: u32, doc: &Value) -> Result<(), RunStoreError>;

    /// Forgets a run that never started (its record and journal).
    async fn discard(&self, id: &str) -> Result<(), RunStoreError>;

    /// Reads run `id` for a resume and holds it for this process, as
    /// [`RunStore::create`] holds a new run: a run another process holds
    /// (it runs, or is being resumed) is refused, saying so.
    async fn hold(&self, id: &str) -> Result<StoredRecord, RunStoreError>;

    /// The store of run `id`'s journal lines, appending after those it has.
    async fn reopen(&self, id: &str) -> Result<Arc<dyn JournalStore>, RunStoreError>;

    /// Keeps run `id`'s `events` as they come, after those it has (an
    /// earlier attempt's), within `limit` bytes, until the run ends; says
    /// how that went as the events file's writer does.
    async fn keep_events(
        &self,
        id: &str,
        events: dsh_engine::events::EventStream,
        limit: u64,
    ) -> dsh_engine::events_file::Written;
}

/// A run as a store keeps it, read back for a resume.
#[derive(Debug, Clone)]
pub struct StoredRecord {
    /// What `run.json` holds.
    pub info: Value,
    /// The script as it was run.
    pub source: String,
    /// The journal, as the text of `journal.jsonl` would be.
    pub journal: String,
}
