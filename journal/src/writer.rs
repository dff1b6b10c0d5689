//! The journal writer: one thread owns the file; lines arrive over a
//! channel and are written in order. Whoever needs a line on disk before
//! going on (a settled outcome, before the script sees it) waits for an
//! acknowledgement that comes after `write` and `fdatasync` — group commit:
//! lines queued together share one sync, so a fan-out of 200 instant
//! answers costs a handful of syncs, not 200.
//!
//! A failing disk never fails the run: the first error is logged, later
//! lines are dropped, and waiters are released at once.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::{JournalError, Line};
pub use crate::store::JournalFull;

enum Req {
    /// A line; the acknowledgement says whether it reached the disk.
    Line(String, Option<oneshot::Sender<bool>>),
    Sync(oneshot::Sender<bool>),
    /// Written (no sync) up to here.
    Flush(oneshot::Sender<()>),
    /// Files and directories to fsync once, with the first answer synced
    /// (or now, if one already was): what a resume needs besides the
    /// journal itself, paid only by runs that have something to resume.
    AlsoSync(Vec<std::path::PathBuf>),
}

/// Appends lines to one journal file. Cloning shares the writer; the
/// thread ends when the last clone is dropped (no final sync: every answer
/// was synced when it was journaled).
#[derive(Clone)]
pub struct JournalWriter {
    tx: mpsc::Sender<Req>,
    /// The file's length once everything queued is written.
    queued: Arc<AtomicU64>,
}

impl JournalWriter {
    /// Opens `path` for appending (creating it), first cutting it to
    /// `keep_len` bytes when given (a torn last line from a crash).
    pub fn open(path: &Path, keep_len: Option<u64>) -> Result<Self, JournalError> {
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a symlink (a run directory is data).
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| JournalError::io(path, e))?;
        if let Some(len) = keep_len {
            file.set_len(len).map_err(|e| JournalError::io(path, e))?;
        }
        let len = file
            .metadata()
            .map_err(|e| JournalError::io(path, e))?
            .len();
        let (tx, rx) = mpsc::channel();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("dsh-journal".into())
            .spawn(move || write_loop(file, &path, rx))
            .map_err(|e| JournalError::Io {
                path: "journal writer thread".into(),
                source: e,
            })?;
        Ok(JournalWriter {
            tx,
            queued: Arc::new(AtomicU64::new(len)),
        })
    }

    /// The journal's length once everything queued so far is written.
    pub fn bytes(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    fn queue(&self, text: String, ack: Option<oneshot::Sender<bool>>) {
        self.queued.fetch_add(text.len() as u64, Ordering::Relaxed);
        let _ = self.tx.send(Req::Line(text, ack));
    }

    /// Queues a line; returns at once.
    pub fn append(&self, line: &Line) {
        self.queue(line.to_text(), None);
    }

    /// Queues a line's `text` (with its newline) unless it would take the
    /// journal past `limit` bytes.
    pub fn append_within(&self, text: String, limit: u64) -> Result<(), JournalFull> {
        let used = self.bytes();
        if used.saturating_add(text.len() as u64) > limit {
            return Err(JournalFull { used, limit });
        }
        self.queue(text, None);
        Ok(())
    }

    /// Queues a line and waits until it is written and synced; `false`
    /// when it could not be (the disk is full, the file is gone): the
    /// caller must not count it as journaled.
    pub async fn append_durable(&self, line: &Line) -> bool {
        let (ack, done) = oneshot::channel();
        self.queue(line.to_text(), Some(ack));
        done.await.unwrap_or(false)
    }

    /// Waits until everything queued so far is written (not synced: the
    /// answers were synced when they were journaled).
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Req::Flush(ack)).is_ok() {
            let _ = done.await;
        }
    }

    /// Fsyncs `paths` (files or directories) once, together with the first
    /// durable line — or at once if one was already synced.
    pub fn also_sync(&self, paths: Vec<std::path::PathBuf>) {
        let _ = self.tx.send(Req::AlsoSync(paths));
    }

    /// Waits until everything queued so far is written and synced.
    pub async fn sync(&self) {
        let (ack, done) = oneshot::channel::<bool>();
        if self.tx.send(Req::Sync(ack)).is_ok() {
            let _ = done.await;
        }
    }
}

fn write_loop(mut file: std::fs::File, path: &Path, rx: mpsc::Receiver<Req>) {
    let mut broken = false;
    // The lines of one batch, written one after the other (not joined: a
    // line can be megabytes, and joining would copy it once more).
    let mut batch: Vec<String> = Vec::new();
    let mut acks: Vec<oneshot::Sender<bool>> = Vec::new();
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    let mut also: Vec<std::path::PathBuf> = Vec::new();
    let mut synced_once = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        // Take everything queued now: one write, one sync.
        while let Some(req) = next.take().or_else(|| rx.try_recv().ok()) {
            match req {
                Req::Line(text, ack) => {
                    batch.push(text);
                    acks.extend(ack);
                }
                Req::Sync(ack) => acks.push(ack),
                Req::Flush(ack) => flushes.push(ack),
                Req::AlsoSync(paths) => also.extend(paths),
            }
        }
        if !broken && !batch.is_empty() {
            let res = batch
                .iter()
                .try_for_each(|t| file.write_all(t.as_bytes()))
                .and_then(|()| {
                    if acks.is_empty() {
                        Ok(())
                    } else {
                        file.sync_data()
                    }
                });
            if let Err(e) = res {
                broken = true;
                tracing::warn!(
                    "journal {}: cannot write ({e}); this run can no longer be resumed from here",
                    path.display()
                );
            }
        } else if !broken && !acks.is_empty() {
            let _ = file.sync_data();
        }
        if !acks.is_empty() {
            synced_once = true;
        }
        if synced_once && !also.is_empty() {
            for p in also.drain(..) {
                // A directory opens read-only too; fsync on it makes its
                // entries (the run directory, journal.jsonl) durable.
                if let Ok(f) = std::fs::File::open(&p) {
                    let _ = f.sync_all();
                }
            }
        }
        batch.clear();
        for ack in acks.drain(..) {
            let _ = ack.send(!broken);
        }
        for ack in flushes.drain(..) {
            let _ = ack.send(());
        }
    }
    // Nothing to sync at the end: every answer was synced when journaled.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn durable_lines_are_on_disk_when_the_wait_returns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        let w = JournalWriter::open(&path, None).expect("open");
        w.append(&Line::Attempt {
            attempt: 1,
            pid: 1,
            at: 0,
        });
        w.append_durable(&Line::Attempt {
            attempt: 2,
            pid: 1,
            at: 0,
        })
        .await;
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 2, "{text}");
        drop(w);
    }

    #[tokio::test]
    async fn opening_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        std::fs::write(
            &path,
            "{\"type\":\"attempt\",\"attempt\":1,\"pid\":1,\"at\":0}\n{\"type\":\"sta",
        )
        .expect("write");
        let keep = std::fs::read(&path)
            .expect("read")
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|i| i as u64 + 1);
        let w = JournalWriter::open(&path, keep).expect("open");
        w.sync().await;
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.ends_with("\"at\":0}\n"), "{text}");
    }
}
