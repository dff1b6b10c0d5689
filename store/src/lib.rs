//! `dsh-store`: runs, their call journals and their events in PostgreSQL,
//! so that they outlive the machine that ran them and any machine can
//! list, show and resume them (docs/scale.md).
//!
//! What it is: a [`Store`] (one connection, the schema brought up to date
//! on connect, [`migrate`]), the runs table ([`RunRow`]), and
//! [`PgJournal`], the [`dsh_journal::JournalStore`] that keeps a run's
//! journal lines in the database instead of `journal.jsonl`. The journal
//! layer above it — what is journaled, when it must be durable, how a
//! resume replays by content key — is the same on either store.
//!
//! What it is not: a queue, a scheduler or a second journal format. The
//! file journal stays the embedded default; nothing of this crate runs
//! unless a store URL is given.

mod events;
mod journal;
pub mod migrate;
mod url;

pub use journal::PgJournal;
pub use url::StoreUrl;

use dsh_journal::summary::{Held, RunSummary, summarize_stored};
use serde_json::Value;
use tokio_postgres::{Client, NoTls};

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store URL (shown without its password) and why it is refused.
    #[error("store URL {url}: {why}")]
    Url {
        /// The URL as given, password replaced.
        url: String,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// The database said no, or could not be reached.
    #[error("the store: {0}")]
    Db(String),
    /// The database's schema is newer than this dsh.
    #[error(
        "the store's schema is version {found}, and this dsh knows versions up to {known}; upgrade dsh on this host (a store is never written by an older dsh than the one that migrated it)"
    )]
    NewerSchema {
        /// The version found in `dsh_schema`.
        found: i32,
        /// The newest version this dsh knows.
        known: i32,
    },
    /// A stored row this dsh cannot read (it names the run and the column).
    #[error("the store: run {run}: {why}")]
    Row {
        /// The run's id.
        run: String,
        /// What is wrong with the row.
        why: String,
    },
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        // The server's own message (with its code) when it sent one: the
        // client's Display only says "db error".
        match e.as_db_error() {
            Some(db) => StoreError::Db(format!("{} ({})", db.message(), db.code().code())),
            None => StoreError::Db(e.to_string()),
        }
    }
}

/// Opens a connection to `url`; its driving task runs on the current
/// tokio runtime and ends with the connection.
pub(crate) async fn connect(url: &StoreUrl) -> Result<Client, StoreError> {
    let (client, connection) = url
        .config()
        .connect(NoTls)
        .await
        .map_err(|e| StoreError::Db(format!("cannot connect to {url}: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("store connection ended: {e}");
        }
    });
    Ok(client)
}

/// A run as the store keeps it.
#[derive(Debug, Clone)]
pub struct RunRow {
    /// The run's id.
    pub id: String,
    /// What `run.json` holds.
    pub info: Value,
    /// The attempt that ran last.
    pub attempt: i32,
    /// What `result.json` holds, once the attempt settled.
    pub result: Option<Value>,
}

/// A run a host claimed ([`Store::claim`]).
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The run's id.
    pub id: String,
    /// How many times it has been claimed, this claim included (more than
    /// one: an earlier host is gone, and this one resumes it).
    pub claims: i32,
    /// What the submitter gave besides the record (the fixture's text).
    pub submission: Option<Value>,
}

fn no_such_run(id: &str) -> StoreError {
    StoreError::Row {
        run: id.to_string(),
        why: "no such run in this store; see `dsh workflow runs --store URL`".into(),
    }
}

/// The store: one connection, the schema up to date.
pub struct Store {
    url: StoreUrl,
    client: Client,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url).finish()
    }
}

impl Store {
    /// Connects to `url` and brings its schema to this dsh's version.
    /// Inside a tokio runtime.
    pub async fn open(url: &StoreUrl) -> Result<Store, StoreError> {
        let mut client = connect(url).await?;
        migrate::migrate(&mut client).await?;
        Ok(Store {
            url: url.clone(),
            client,
        })
    }

    /// Where the store is.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// Whether the store's connection is gone (and with it every hold
    /// this process had).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Records a new run: its `run.json` document and script.
    pub async fn create_run(&self, id: &str, info: &Value, source: &str) -> Result<(), StoreError> {
        self.client
            .execute(
                "INSERT INTO dsh_runs (id, info, source) VALUES ($1, $2, $3)",
                &[&id, info, &source],
            )
            .await?;
        Ok(())
    }

    /// Records how attempt `attempt` of run `id` settled — unless a later
    /// attempt has settled already (a process that lost its hold and
    /// settles late never overwrites the newer result).
    pub async fn set_result(&self, id: &str, attempt: i32, doc: &Value) -> Result<(), StoreError> {
        let n = self
            .client
            .execute(
                "UPDATE dsh_runs SET result = $2, attempt = $3, state = 'settled', updated_at = now()
                 WHERE id = $1 AND (result IS NULL OR attempt <= $3)",
                &[&id, doc, &attempt],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::Row {
                run: id.to_string(),
                why: format!(
                    "a later attempt than {attempt} has settled it already (this process lost its \
                     hold on the run); its result stands"
                ),
            });
        }
        Ok(())
    }

    /// The newest `limit` runs, newest first.
    pub async fn runs(&self, limit: i64) -> Result<Vec<RunRow>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT id, info, attempt, result FROM dsh_runs
                 ORDER BY created_at DESC, id DESC LIMIT $1",
                &[&limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| RunRow {
                id: r.get(0),
                info: r.get(1),
                attempt: r.get(2),
                result: r.get(3),
            })
            .collect())
    }

    /// Run `id`'s journal, as the text of `journal.jsonl` would be.
    pub async fn journal_text(&self, id: &str) -> Result<String, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT line FROM dsh_journal WHERE run_id = $1 ORDER BY seq",
                &[&id],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get::<_, &str>(0)).collect())
    }

    /// Run `id`'s events, as the text of `events.jsonl` would be.
    pub async fn events_text(&self, id: &str) -> Result<String, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT event FROM dsh_events WHERE run_id = $1 ORDER BY seq",
                &[&id],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| format!("{}\n", r.get::<_, &str>(0)))
            .collect())
    }

    /// What `runs`, `show` and `report` say about run `id`, as for a run
    /// directory; `texts` keeps that many characters of each prompt and
    /// answer (`None`: none).
    pub async fn summary(&self, id: &str, texts: Option<usize>) -> Result<RunSummary, StoreError> {
        let row = self
            .client
            .query_opt("SELECT info, result FROM dsh_runs WHERE id = $1", &[&id])
            .await?
            .ok_or_else(|| no_such_run(id))?;
        let journal = self.journal_text(id).await?;
        let held = if self.held_elsewhere(id).await? {
            Held::Running
        } else {
            Held::Free
        };
        let place = format!("{} (run {id})", self.url);
        summarize_stored(&place, row.get(0), row.get(1), &journal, held, texts).map_err(|e| {
            StoreError::Row {
                run: id.to_string(),
                why: e.to_string(),
            }
        })
    }

    /// The summaries of the newest `limit` runs, newest first.
    pub async fn summaries(&self, limit: i64) -> Result<Vec<RunSummary>, StoreError> {
        let mut all = Vec::new();
        for row in self.runs(limit).await? {
            all.push(self.summary(&row.id, None).await?);
        }
        Ok(all)
    }

    /// Whether another process holds run `id` (see `RunStore::hold`).
    async fn held_elsewhere(&self, id: &str) -> Result<bool, StoreError> {
        let free = self.try_hold(id).await?;
        if free {
            self.client
                .execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&id])
                .await?;
        }
        Ok(!free)
    }

    /// Submits a run for a host to run: its record, its script and what a
    /// host needs besides (`submission`: the fixture's text, if any).
    pub async fn submit(
        &self,
        id: &str,
        info: &Value,
        source: &str,
        submission: &Value,
    ) -> Result<(), StoreError> {
        self.client
            .execute(
                "INSERT INTO dsh_runs (id, info, source, state, submission)
                 VALUES ($1, $2, $3, 'queued', $4)",
                &[&id, info, &source, submission],
            )
            .await?;
        Ok(())
    }

    /// Claims the oldest run a host may take — one submitted and waiting,
    /// or one whose host is gone (its hold was let go without a result) —
    /// for `host`, and holds it. `None` when there is none.
    ///
    /// `running`: the runs this process runs already (it holds them, and a
    /// session's hold does not keep out the session itself).
    pub async fn claim(
        &self,
        host: &str,
        running: &[String],
    ) -> Result<Option<Claimed>, StoreError> {
        let candidates = self
            .client
            .query(
                "SELECT id FROM dsh_runs WHERE state IN ('queued', 'running')
                     AND id <> ALL($1)
                 ORDER BY created_at, id LIMIT 64",
                &[&running],
            )
            .await?;
        for row in candidates {
            let id: String = row.get(0);
            if self.hold_run(&id).await.is_err() {
                continue;
            }
            // Held now: nobody else runs it. Settled meanwhile? Let go.
            let claimed = self
                .client
                .query_opt(
                    "UPDATE dsh_runs SET state = 'running', owner = $2, claims = claims + 1,
                         updated_at = now()
                     WHERE id = $1 AND state IN ('queued', 'running')
                     RETURNING claims, submission",
                    &[&id, &host],
                )
                .await?;
            match claimed {
                Some(r) => {
                    return Ok(Some(Claimed {
                        id,
                        claims: r.get(0),
                        submission: r.get(1),
                    }));
                }
                None => self.let_go(&id).await?,
            }
        }
        Ok(None)
    }

    /// Lets go of run `id`, held by this process (every hold of it).
    pub async fn let_go(&self, id: &str) -> Result<(), StoreError> {
        for _ in 0..4 {
            let was: bool = self
                .client
                .query_one("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&id])
                .await?
                .get(0);
            if !was {
                break;
            }
        }
        Ok(())
    }

    /// Asks the process that runs run `id` to cancel it (`reason`).
    pub async fn request_cancel(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        let n = self
            .client
            .execute(
                "UPDATE dsh_runs SET cancel_requested = coalesce(cancel_requested, $2)
                 WHERE id = $1",
                &[&id, &reason],
            )
            .await?;
        if n == 0 {
            return Err(no_such_run(id));
        }
        Ok(())
    }

    /// The cancel asked for run `id`, if any.
    pub async fn cancel_requested(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .client
            .query_opt(
                "SELECT cancel_requested FROM dsh_runs WHERE id = $1",
                &[&id],
            )
            .await?
            .and_then(|r| r.get(0)))
    }

    /// Run `id`'s result document, once it has one.
    pub async fn result(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let row = self
            .client
            .query_opt("SELECT result FROM dsh_runs WHERE id = $1", &[&id])
            .await?
            .ok_or_else(|| no_such_run(id))?;
        Ok(row.get(0))
    }

    /// A writer for run `id`'s journal (see [`PgJournal`]).
    pub async fn journal(&self, id: &str) -> Result<PgJournal, StoreError> {
        PgJournal::open(&self.url, id).await
    }
}

#[async_trait::async_trait]
impl dsh_journal::RunStore for Store {
    fn location(&self) -> String {
        self.url.to_string()
    }

    async fn create(
        &self,
        id: &str,
        info: &Value,
        source: &str,
    ) -> Result<std::sync::Arc<dyn dsh_journal::JournalStore>, dsh_journal::RunStoreError> {
        self.hold_run(id).await.map_err(boxed)?;
        self.create_run(id, info, source).await.map_err(boxed)?;
        let journal = self.journal(id).await.map_err(boxed)?;
        Ok(std::sync::Arc::new(journal))
    }

    async fn describe(&self, id: &str, info: &Value) -> Result<(), dsh_journal::RunStoreError> {
        self.client
            .execute(
                "UPDATE dsh_runs SET info = $2, updated_at = now() WHERE id = $1",
                &[&id, info],
            )
            .await
            .map_err(|e| boxed(e.into()))?;
        Ok(())
    }

    async fn settle(
        &self,
        id: &str,
        attempt: u32,
        doc: &Value,
    ) -> Result<(), dsh_journal::RunStoreError> {
        let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
        self.set_result(id, attempt, doc).await.map_err(boxed)
    }

    async fn hold(
        &self,
        id: &str,
    ) -> Result<dsh_journal::StoredRecord, dsh_journal::RunStoreError> {
        let row = self
            .client
            .query_opt("SELECT info, source FROM dsh_runs WHERE id = $1", &[&id])
            .await
            .map_err(|e| boxed(e.into()))?
            .ok_or_else(|| boxed(no_such_run(id)))?;
        self.hold_run(id).await.map_err(boxed)?;
        let journal = self.journal_text(id).await.map_err(boxed)?;
        Ok(dsh_journal::StoredRecord {
            info: row.get(0),
            source: row.get(1),
            journal,
        })
    }

    async fn reopen(
        &self,
        id: &str,
    ) -> Result<std::sync::Arc<dyn dsh_journal::JournalStore>, dsh_journal::RunStoreError> {
        let journal = self.journal(id).await.map_err(boxed)?;
        Ok(std::sync::Arc::new(journal))
    }

    async fn keep_events(
        &self,
        id: &str,
        events: dsh_engine::events::EventStream,
        limit: u64,
    ) -> dsh_engine::events_file::Written {
        events::keep(&self.url, id, events, limit).await
    }

    async fn discard(&self, id: &str) -> Result<(), dsh_journal::RunStoreError> {
        self.client
            .execute("DELETE FROM dsh_runs WHERE id = $1", &[&id])
            .await
            .map_err(|e| boxed(e.into()))?;
        Ok(())
    }
}

impl Store {
    /// Takes the hold on run `id` if nobody else has it (a session's
    /// advisory lock: the session itself may take it again); whether it
    /// did.
    async fn try_hold(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .client
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                &[&id],
            )
            .await?
            .get(0))
    }

    /// Holds run `id` for this process: a session-level advisory lock on
    /// the store's connection, so it is let go when the process ends,
    /// however it ends. Refused while another process holds it.
    async fn hold_run(&self, id: &str) -> Result<(), StoreError> {
        if self.try_hold(id).await? {
            Ok(())
        } else {
            Err(StoreError::Row {
                run: id.to_string(),
                why: "another process holds it (the run is still running, or being resumed); \
                      wait for it to end, or end that process"
                    .into(),
            })
        }
    }
}

fn boxed(e: StoreError) -> dsh_journal::RunStoreError {
    dsh_journal::RunStoreError(Box::new(e))
}
