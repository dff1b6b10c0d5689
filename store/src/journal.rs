//! A run's call journal in PostgreSQL: the [`JournalStore`] the journal
//! layer writes to when the run is kept in the store.
//!
//! The same lines as `journal.jsonl`, in the same order, one row each
//! (`dsh_journal (run_id, seq, line)`), so the layer's replay rules are
//! unchanged. A writer task with a connection of its own takes what has
//! queued since its last write and inserts it in one statement — group
//! commit, as the file journal's `fdatasync` — and acknowledges the lines
//! once PostgreSQL has committed them. A connection that breaks is opened
//! again and the batch written again (the primary key makes a repeat a
//! no-op); a store that stays unreachable is reported once, and the layer
//! counts the calls of the lines not kept as not journaled. A first try
//! that finds its places taken means another process writes this run's
//! journal: this writer stops rather than interleave.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dsh_journal::{JournalFull, JournalStore, Line};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Client;

use crate::{StoreError, StoreUrl, connect};

/// How often a batch is tried before the store is given up for this run,
/// and how long to wait between tries (doubling).
const TRIES: u32 = 6;
const FIRST_WAIT: Duration = Duration::from_millis(250);

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
    /// `dsh_runs`) after the lines it already has. Inside a tokio runtime.
    pub async fn open(url: &StoreUrl, run_id: &str) -> Result<PgJournal, StoreError> {
        let client = connect(url).await?;
        let row = client
            .query_one(
                "SELECT coalesce(max(seq), 0), coalesce(sum(octet_length(line)), 0)::bigint
                 FROM dsh_journal WHERE run_id = $1",
                &[&run_id],
            )
            .await?;
        let last: i64 = row.get(0);
        let bytes: i64 = row.get(1);
        let queued = Arc::new(AtomicU64::new(u64::try_from(bytes).unwrap_or(0)));
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            url: url.clone(),
            client: Some(client),
            run_id: run_id.to_string(),
            next_seq: last + 1,
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

/// The task that owns the journal's connection.
struct Writer {
    url: StoreUrl,
    client: Option<Client>,
    run_id: String,
    next_seq: i64,
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
            let kept = lines.is_empty() || self.write(lines).await;
            for ack in acks {
                let _ = ack.send(kept);
            }
        }
    }

    /// Writes `lines` after the ones written so far; `false` when the
    /// store is (or now is) given up.
    async fn write(&mut self, lines: Vec<String>) -> bool {
        if self.given_up.is_some() {
            return false;
        }
        let count = lines.len() as i64;
        let seqs: Vec<i64> = (self.next_seq..self.next_seq + count).collect();
        let mut wait = FIRST_WAIT;
        let mut last_error = String::new();
        for try_ in 0..TRIES {
            if self.client.as_ref().is_none_or(Client::is_closed) {
                self.client = connect(&self.url).await.ok();
            }
            if let Some(client) = &self.client {
                match client
                    .execute(
                        "INSERT INTO dsh_journal (run_id, seq, line)
                         SELECT $1, s, l FROM unnest($2::bigint[], $3::text[]) AS t(s, l)
                         ON CONFLICT (run_id, seq) DO NOTHING",
                        &[&self.run_id, &seqs, &lines],
                    )
                    .await
                {
                    // Fewer rows than lines on a first try: another
                    // process wrote these places of this run's journal (it
                    // resumed the run while this one still ran). Its lines
                    // stand; this process stops journaling rather than
                    // interleave with it. On a later try the missing rows
                    // are this writer's own earlier commit.
                    Ok(written) if written != count as u64 && try_ == 0 => {
                        last_error = format!(
                            "another process wrote run {}'s journal at line {}",
                            self.run_id, self.next_seq
                        );
                        break;
                    }
                    Ok(_) => {
                        self.next_seq += count;
                        return true;
                    }
                    Err(e) => last_error = StoreError::from(e).to_string(),
                }
            } else {
                last_error = format!("cannot connect to {}", self.url);
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        tracing::warn!(
            "the store {} stopped taking run {}'s journal ({last_error}); this run's later calls are not journaled",
            self.url,
            self.run_id
        );
        self.given_up = Some(last_error);
        false
    }
}
