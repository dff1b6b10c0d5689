//! Where a run's journal lines are kept: the [`JournalStore`] behind the
//! journaling layer.
//!
//! The layer ([`crate::provider`]) decides *what* to journal and when a
//! line must be durable before the script sees an outcome; a store only
//! keeps lines in order and says when they are durable. The file journal
//! ([`JournalWriter`], `journal.jsonl` in the run directory, group commit
//! on a thread of its own) is the store today; a database table of the
//! same lines can be another.

use std::path::PathBuf;

use async_trait::async_trait;

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
