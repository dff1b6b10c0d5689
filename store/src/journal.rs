//! A run's call journal in PostgreSQL: the [`JournalStore`] the journal
//! layer writes to when the run is kept in the store.
//!
//! The same lines as `journal.jsonl`, in the same order, one row each
//! (`dsh_journal (run_id, seq, line)`), so the layer's replay rules are
//! unchanged. A writer task with a connection of its own takes what has
//! queued since its last write and inserts it in one statement — group
//! commit, as the file journal's `fdatasync` — and acknowledges the lines
//! once PostgreSQL has committed them. Every insert is fenced by the
//! claim the run is held under, and a broken connection is opened again
//! (`lines.rs`). A store that stays unreachable, a run claimed by another
//! host, or places another process wrote: the writer stops, says why
//! once, and the layer counts the calls of the lines not kept as not
//! journaled — it never interleaves with the run's new holder.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dsh_journal::{JournalFull, JournalStore, Line};
use tokio::sync::{mpsc, oneshot};

use crate::lines::{Appender, Table};
use crate::{StoreError, StoreUrl};

enum Req {
    Line(String, Option<oneshot::Sender<bool>>),
    Flush(oneshot::Sender<bool>),
}

/// One run's journal in the store (see the module docs).
pub struct PgJournal {
    queued: Arc<AtomicU64>,
    tx: mpsc::UnboundedSender<Req>,
}

impl PgJournal {
    /// Appends to the journal of run `run_id` (which must exist in
    /// `dsh_runs`) after the lines it already has, while the run's claim
    /// is `fence` (`None`: unfenced). Inside a tokio runtime.
    pub async fn open(
        url: &StoreUrl,
        run_id: &str,
        fence: Option<i32>,
    ) -> Result<PgJournal, StoreError> {
        let (appender, bytes) = Appender::open(url, run_id, fence, Table::Journal).await?;
        let queued = Arc::new(AtomicU64::new(bytes));
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            appender,
            url: url.to_string(),
            run_id: run_id.to_string(),
            given_up: None,
        };
        tokio::spawn(writer.run(rx));
        Ok(PgJournal { queued, tx })
    }

    fn queue(&self, text: String, ack: Option<oneshot::Sender<bool>>) {
        self.queued.fetch_add(text.len() as u64, Ordering::Relaxed);
        let _ = self.tx.send(Req::Line(text, ack));
    }
}

#[async_trait]
impl JournalStore for PgJournal {
    fn bytes(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    fn append(&self, line: &Line) {
        self.queue(line.to_text(), None);
    }

    fn append_within(&self, text: String, limit: u64) -> Result<(), JournalFull> {
        let used = self.bytes();
        if used.saturating_add(text.len() as u64) > limit {
            return Err(JournalFull { used, limit });
        }
        self.queue(text, None);
        Ok(())
    }

    async fn append_durable(&self, line: &Line) -> bool {
        let (ack, done) = oneshot::channel();
        self.queue(line.to_text(), Some(ack));
        done.await.unwrap_or(false)
    }

    async fn flush(&self) {
        self.sync().await;
    }

    /// Every committed line is durable: a flush and a sync are one wait.
    async fn sync(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Req::Flush(ack)).is_ok() {
            let _ = done.await;
        }
    }
}

/// The task that owns the journal's appender.
struct Writer {
    appender: Appender,
    url: String,
    run_id: String,
    /// Why the store was given up for this run, once it was.
    given_up: Option<String>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Req>) {
        while let Some(first) = rx.recv().await {
            let mut lines = Vec::new();
            let mut acks = Vec::new();
            let mut take = |req| match req {
                Req::Line(text, ack) => {
                    lines.push(text);
                    acks.extend(ack);
                }
                Req::Flush(ack) => acks.push(ack),
            };
            take(first);
            while let Ok(req) = rx.try_recv() {
                take(req);
            }
            let kept = self.write(&lines).await;
            for ack in acks {
                let _ = ack.send(kept);
            }
        }
    }

    /// Writes `lines`; `false` when the store is (or now is) given up.
    async fn write(&mut self, lines: &[String]) -> bool {
        if self.given_up.is_some() {
            return lines.is_empty();
        }
        match self.appender.append(lines).await {
            Ok(()) => true,
            Err(why) => {
                tracing::warn!(
                    "the store {} stopped taking run {}'s journal ({why}); this run's later calls are not journaled",
                    self.url,
                    self.run_id
                );
                self.given_up = Some(why);
                false
            }
        }
    }
}
