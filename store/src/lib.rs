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
//! It is also the queue hosts share: [`Store::submit`] records a run for
//! a host, [`Store::claim`] takes the oldest claimable one (`FOR UPDATE
//! SKIP LOCKED`) under a lease that [`Store::renew`] keeps, and every
//! write of a run — journal, events, record, result — is fenced by the
//! claim it is made under (`claims`), so a host paused past its lease
//! cannot overwrite its successor's. [`Listener`] hears what changed
//! (`LISTEN/NOTIFY`) instead of asking. [`host::serve`] is a whole host
//! in-process — what `dsh workflow host` runs — for any embedder, and
//! [`host::wait`] waits for a run's result.
//!
//! Agent calls of pooled providers (`[store] pools`) are rows too
//! ([`calls`]): the run's process asks for them ([`pool::Pools`]) and agent
//! hosts answer them ([`agents`]), under the same leases and fences.
//!
//! What it is not: a second journal format. The file journal stays the embedded default; nothing of this
//! crate runs unless a store URL is given.

pub mod agents;
pub mod calls;
mod events;
pub mod host;
mod journal;
mod lines;
mod listen;
pub mod migrate;
pub mod pool;
mod url;

pub use journal::PgJournal;
pub use listen::{Listener, Notice};
pub use url::StoreUrl;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
    /// A pool an agent host was told to serve that it cannot.
    #[error("pool {pool:?}: {why}")]
    Pool {
        /// The pool (a provider's name).
        pool: String,
        /// Why, and how to fix it.
        why: String,
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

/// The most a host reads of a stored run's fields. A row is data anyone
/// with write access to the store could have changed: a field past its
/// bound is refused by its length, before it is read, and the run is
/// recorded as failed saying which field and why.
pub mod bounds {
    /// The script (`source`): sixteen times the default script limit.
    pub const SOURCE: i64 = 16 << 20;
    /// The record (`info`): the args' own limit (a frame) and 1 MiB.
    pub const INFO: i64 = 17 << 20;
    /// What was submitted besides (`submission`): the fixture's limit and
    /// 1 MiB.
    pub const SUBMISSION: i64 = 65 << 20;
    /// The journal read back for a resume: the journal's default limit.
    pub const JOURNAL: i64 = 256 << 20;
    /// A call asked of an agent host (`dsh_calls.request`): the prompt's
    /// own limit (a frame) and 1 MiB.
    pub const CALL: i64 = 17 << 20;
}

/// Refuses field `what` of run `id` at `len` bytes when over `bound`.
fn within(id: &str, what: &str, len: Option<i64>, bound: i64) -> Result<(), StoreError> {
    match len {
        Some(n) if n > bound => Err(StoreError::Row {
            run: id.to_string(),
            why: format!(
                "its {what} is {n} bytes, over the {bound} bytes a host reads; the row was not \
                 written by dsh (or not by this version): submit the run again"
            ),
        }),
        _ => Ok(()),
    }
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
#[derive(Debug)]
pub struct Claimed {
    /// The run's id.
    pub id: String,
    /// How many times it has been claimed, this claim included (more than
    /// one: an earlier host is gone, and this one resumes it). Every write
    /// of the run is fenced by it.
    pub claims: i32,
    /// What the submitter gave besides the record (the fixture's text);
    /// why not, when it is past its bound ([`bounds::SUBMISSION`]).
    pub submission: Result<Option<Value>, StoreError>,
    /// The cancel asked for it already, if any (while it was queued).
    pub cancel_requested: Option<String>,
}

/// What a heartbeat found ([`Store::renew`]).
#[derive(Debug, Default)]
pub struct Renewal {
    /// Runs whose lease this host no longer has: another host claimed
    /// them (this one was paused or cut off past the lease), or they were
    /// settled elsewhere. This host must stop them.
    pub lost: Vec<String>,
    /// Runs a cancel was asked for, with its reason.
    pub cancels: Vec<(String, String)>,
}

/// How this process holds a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldKind {
    /// By a lease a host renews ([`Store::claim`], [`Store::renew`]).
    Lease,
    /// By a session advisory lock on the store's connection: a run this
    /// process resumed (`resume --store`), or made without a lease. The
    /// lock only keeps a second process from starting it; the fence keeps
    /// the writes apart.
    Session,
    /// Both: a run this process made in the foreground (`run --store`,
    /// [`Store::leasing`]). The lock says at once that the process is
    /// gone (a resume by hand may take the run); the lease lets hosts
    /// continue it once it has passed.
    Foreground,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    claim: i32,
    kind: HoldKind,
}

fn no_such_run(id: &str) -> StoreError {
    StoreError::Row {
        run: id.to_string(),
        why: "no such run in this store (neither its id nor the start of one); see `dsh \
              workflow runs --store URL`, or say `latest`"
            .into(),
    }
}

/// The store: one connection (opened again when it breaks), the schema up
/// to date, and the runs this process holds with the claim of each.
pub struct Store {
    url: StoreUrl,
    client: Mutex<Arc<Client>>,
    held: Mutex<HashMap<String, Hold>>,
    /// The owner and lease of the runs this process makes, when it holds
    /// them by a lease too ([`Store::leasing`]).
    foreground: Option<(String, Duration)>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url).finish()
    }
}

/// A lock whose holder panicked still guards plain data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Store {
    /// Connects to `url` and brings its schema to this dsh's version.
    /// Inside a tokio runtime.
    pub async fn open(url: &StoreUrl) -> Result<Store, StoreError> {
        let mut client = connect(url).await?;
        migrate::migrate(&mut client).await?;
        Ok(Store {
            url: url.clone(),
            client: Mutex::new(Arc::new(client)),
            held: Mutex::new(HashMap::new()),
            foreground: None,
        })
    }

    /// Holds the runs this process makes ([`Store::create_run`]) by a
    /// lease as well, under `owner`, which the caller renews
    /// ([`Store::renew`]): if the process dies, a host continues the run
    /// once the lease has passed.
    pub fn leasing(mut self, owner: impl Into<String>, lease: Duration) -> Store {
        self.foreground = Some((owner.into(), lease));
        self
    }

    /// Where the store is.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The store's connection, opened again if it broke (the server
    /// restarted, the network was cut). A session's advisory locks do not
    /// survive that; leases and fences do.
    async fn db(&self) -> Result<Arc<Client>, StoreError> {
        let current = lock(&self.client).clone();
        if !current.is_closed() {
            return Ok(current);
        }
        let fresh = Arc::new(connect(&self.url).await?);
        *lock(&self.client) = fresh.clone();
        Ok(fresh)
    }

    /// The claim run `id` is held under by this process, if it holds it.
    pub(crate) fn fence(&self, id: &str) -> Option<i32> {
        lock(&self.held).get(id).map(|h| h.claim)
    }

    /// Records a new run: its `run.json` document and script, held by this
    /// process under its first claim.
    pub async fn create_run(&self, id: &str, info: &Value, source: &str) -> Result<(), StoreError> {
        let (owner, lease) = match &self.foreground {
            Some((owner, lease)) => (Some(owner.as_str()), Some(lease.as_secs_f64())),
            None => (None, None),
        };
        self.db()
            .await?
            .execute(
                "INSERT INTO dsh_runs (id, info, source, claims, owner, lease_until)
                 VALUES ($1, $2, $3, 1, $4, now() + make_interval(secs => $5))",
                &[&id, info, &source, &owner, &lease],
            )
            .await?;
        let kind = match self.foreground {
            Some(_) => HoldKind::Foreground,
            None => HoldKind::Session,
        };
        lock(&self.held).insert(id.to_string(), Hold { claim: 1, kind });
        Ok(())
    }

    /// Records how attempt `attempt` of run `id` settled — unless this
    /// process's claim on it is no longer the run's (another host took it
    /// over), or a later attempt has settled it already: a process that
    /// lost the run and settles late never overwrites the newer result.
    pub async fn set_result(&self, id: &str, attempt: i32, doc: &Value) -> Result<(), StoreError> {
        let fence = self.fence(id);
        let n = self
            .db()
            .await?
            .execute(
                "UPDATE dsh_runs SET result = $2, attempt = $3, state = 'settled',
                     lease_until = NULL, updated_at = now()
                 WHERE id = $1 AND ($4::integer IS NULL OR claims = $4)
                     AND (result IS NULL OR attempt <= $3)",
                &[&id, doc, &attempt, &fence],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::Row {
                run: id.to_string(),
                why: format!(
                    "another host claimed it, or a later attempt than {attempt} settled it, after \
                     this process lost its hold on the run; that result stands"
                ),
            });
        }
        Ok(())
    }

    /// The newest `limit` runs, newest first.
    pub async fn runs(&self, limit: i64) -> Result<Vec<RunRow>, StoreError> {
        let rows = self
            .db()
            .await?
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
            .db()
            .await?
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
            .db()
            .await?
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

    /// The id of the run `run` names: its id, `latest` (the newest run),
    /// or the start of one id (with or without its `run-`), as run
    /// directories are named. Errors say which runs an ambiguous start
    /// matches.
    pub async fn resolve(&self, run: &str) -> Result<String, StoreError> {
        let db = self.db().await?;
        if run == "latest" {
            return db
                .query_opt(
                    "SELECT id FROM dsh_runs ORDER BY created_at DESC, id DESC LIMIT 1",
                    &[],
                )
                .await?
                .map(|r| r.get(0))
                .ok_or_else(|| StoreError::Row {
                    run: run.to_string(),
                    why: "there are no runs in this store yet".into(),
                });
        }
        if db
            .query_opt("SELECT 1 FROM dsh_runs WHERE id = $1", &[&run])
            .await?
            .is_some()
        {
            return Ok(run.to_string());
        }
        if run.is_empty() {
            return Err(no_such_run(run));
        }
        let rows = db
            .query(
                "SELECT id FROM dsh_runs
                 WHERE starts_with(id, $1) OR starts_with(id, 'run-' || $1)
                 ORDER BY id LIMIT 4",
                &[&run],
            )
            .await?;
        let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(no_such_run(run)),
            many => Err(StoreError::Row {
                run: run.to_string(),
                why: format!(
                    "it is the start of more than one run's id ({}{}); give more of it",
                    many.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                    if many.len() > 3 { ", …" } else { "" }
                ),
            }),
        }
    }

    /// Run `id`'s event lines after line `after` (its `seq`), in order, at
    /// most `limit`: what a follower of the run reads as they come.
    pub async fn events_after(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = self
            .db()
            .await?
            .query(
                // A line longer than an event can be (a row not written
                // by dsh) is skipped, not read.
                "SELECT seq, event FROM dsh_events WHERE run_id = $1 AND seq > $2
                     AND octet_length(event) <= $4::bigint
                 ORDER BY seq LIMIT $3",
                &[&id, &after, &limit, &bounds::INFO],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// What `runs`, `show` and `report` say about run `id`, as for a run
    /// directory; `texts` keeps that many characters of each prompt and
    /// answer (`None`: none).
    pub async fn summary(&self, id: &str, texts: Option<usize>) -> Result<RunSummary, StoreError> {
        let row = self
            .db()
            .await?
            .query_opt(
                "SELECT info, result, state = 'running' AND lease_until > now(), owner
                 FROM dsh_runs WHERE id = $1",
                &[&id],
            )
            .await?
            .ok_or_else(|| no_such_run(id))?;
        let journal = self.journal_text(id).await?;
        let leased: Option<bool> = row.get(2);
        let held = if leased == Some(true) || self.held_elsewhere(id).await? {
            Held::Running
        } else {
            Held::Free
        };
        let place = format!("{} (run {id})", self.url);
        let mut summary = summarize_stored(&place, row.get(0), row.get(1), &journal, held, texts)
            .map_err(|e| StoreError::Row {
            run: id.to_string(),
            why: e.to_string(),
        })?;
        if held == Held::Running {
            summary.holder = row.get(3);
        }
        Ok(summary)
    }

    /// The summaries of the newest `limit` runs, newest first.
    pub async fn summaries(&self, limit: i64) -> Result<Vec<RunSummary>, StoreError> {
        let mut all = Vec::new();
        for row in self.runs(limit).await? {
            all.push(self.summary(&row.id, None).await?);
        }
        Ok(all)
    }

    /// Whether another process holds run `id` by its session lock.
    /// Whether a process runs run `id` now: a host under a current lease,
    /// or a process holding its session lock (`run --store`, a resume by
    /// hand). A result it has then is an earlier attempt's.
    pub async fn is_held(&self, id: &str) -> Result<bool, StoreError> {
        let leased: Option<bool> = self
            .db()
            .await?
            .query_opt(
                "SELECT state = 'running' AND lease_until > now() FROM dsh_runs WHERE id = $1",
                &[&id],
            )
            .await?
            .ok_or_else(|| no_such_run(id))?
            .get(0);
        Ok(leased == Some(true) || self.held_elsewhere(id).await?)
    }

    async fn held_elsewhere(&self, id: &str) -> Result<bool, StoreError> {
        let free = self.try_lock(id).await?;
        if free {
            self.unlock(id).await?;
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
        self.db()
            .await?
            .execute(
                "INSERT INTO dsh_runs (id, info, source, state, submission)
                 VALUES ($1, $2, $3, 'queued', $4)",
                &[&id, info, &source, submission],
            )
            .await?;
        Ok(())
    }

    /// Records what run `id`, made by this process, carries for a host
    /// that may continue it (see [`host::Carried`]).
    pub async fn carry(&self, id: &str, submission: &Value) -> Result<(), StoreError> {
        let fence = self.fence(id);
        self.db()
            .await?
            .execute(
                "UPDATE dsh_runs SET submission = $2
                 WHERE id = $1 AND ($3::integer IS NULL OR claims = $3)",
                &[&id, submission, &fence],
            )
            .await?;
        Ok(())
    }

    /// Claims, for `host` and for `lease`, the oldest run a host may take
    /// — one submitted and waiting, or one whose host's lease has passed
    /// (it died, or was paused or cut off) — and holds it under the new
    /// claim. `None` when there is none. Hosts that claim together never
    /// wait for each other or take one run twice: `FOR UPDATE SKIP
    /// LOCKED`.
    pub async fn claim(&self, host: &str, lease: Duration) -> Result<Option<Claimed>, StoreError> {
        let mine: Vec<String> = lock(&self.held).keys().cloned().collect();
        let row = self
            .db()
            .await?
            .query_opt(
                "UPDATE dsh_runs SET state = 'running', owner = $1, claims = claims + 1,
                     lease_until = now() + make_interval(secs => $2), updated_at = now()
                 WHERE id = (
                     SELECT id FROM dsh_runs
                     WHERE (state = 'queued'
                            OR (state = 'running'
                                AND (lease_until IS NULL OR lease_until < now()))
                            -- A foreground run whose process died; one
                            -- made without a lease is resumed by hand.
                            OR (state = 'local' AND lease_until < now()))
                         AND id <> ALL($3)
                         -- dsh's ids are short; a row with a giant one
                         -- (written by hand) is never claimed: its
                         -- notices could not be sent.
                         AND octet_length(id) <= 200
                     ORDER BY created_at, id LIMIT 1
                     FOR UPDATE SKIP LOCKED)
                 RETURNING id, claims,
                     CASE WHEN octet_length(submission::text) <= $4::bigint THEN submission END,
                     cancel_requested, octet_length(submission::text)::bigint",
                &[&host, &lease.as_secs_f64(), &mine, &bounds::SUBMISSION],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id: String = row.get(0);
        let submission =
            within(&id, "submission", row.get(4), bounds::SUBMISSION).map(|()| row.get(2));
        let claimed = Claimed {
            id,
            claims: row.get(1),
            submission,
            cancel_requested: row.get(3),
        };
        lock(&self.held).insert(
            claimed.id.clone(),
            Hold {
                claim: claimed.claims,
                kind: HoldKind::Lease,
            },
        );
        Ok(Some(claimed))
    }

    /// The heartbeat: extends by `lease` the lease of every run `host`
    /// holds by one, and says which it no longer holds and which a cancel
    /// was asked for.
    pub async fn renew(&self, host: &str, lease: Duration) -> Result<Renewal, StoreError> {
        let (ids, claims): (Vec<String>, Vec<i32>) = lock(&self.held)
            .iter()
            .filter(|(_, h)| h.kind != HoldKind::Session)
            .map(|(id, h)| (id.clone(), h.claim))
            .unzip();
        if ids.is_empty() {
            return Ok(Renewal::default());
        }
        let rows = self
            .db()
            .await?
            .query(
                "UPDATE dsh_runs r SET lease_until = now() + make_interval(secs => $2)
                 FROM unnest($3::text[], $4::integer[]) AS h(id, claims)
                 WHERE r.id = h.id AND r.claims = h.claims AND r.owner = $1
                     -- Settled by this host a moment ago, not yet let go: still its own.
                     AND r.state IN ('running', 'local', 'settled')
                 RETURNING r.id, r.cancel_requested",
                &[&host, &lease.as_secs_f64(), &ids, &claims],
            )
            .await?;
        let mut renewal = Renewal::default();
        let kept: HashMap<String, Option<String>> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        for id in ids {
            match kept.get(&id) {
                None => renewal.lost.push(id),
                Some(Some(reason)) => renewal.cancels.push((id, reason.clone())),
                Some(None) => {}
            }
        }
        Ok(renewal)
    }

    /// Lets go of run `id`: this process writes it no more.
    pub async fn let_go(&self, id: &str) -> Result<(), StoreError> {
        let hold = lock(&self.held).remove(id);
        if hold.is_some_and(|h| h.kind != HoldKind::Lease) {
            self.unlock(id).await?;
        }
        Ok(())
    }

    /// Asks the process that runs run `id` to cancel it (`reason`).
    pub async fn request_cancel(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        let n = self
            .db()
            .await?
            .query_one(
                // The run's calls at agent hosts too: they stop within a
                // second even when the run's host is gone.
                "WITH run AS (
                     UPDATE dsh_runs SET cancel_requested = coalesce(cancel_requested, $2)
                     WHERE id = $1 RETURNING id),
                 calls AS (
                     UPDATE dsh_calls SET cancel_requested = coalesce(cancel_requested, $2),
                         -- One no agent host has is settled now; one being
                         -- answered is settled by its host.
                         state = CASE WHEN state = 'queued' THEN 'settled' ELSE state END,
                         outcome = CASE WHEN state = 'queued' THEN '\"cancelled\"'::jsonb
                                        ELSE outcome END,
                         settled_at = CASE WHEN state = 'queued' THEN now() ELSE settled_at END
                     WHERE run_id IN (SELECT id FROM run) AND state <> 'settled'
                     RETURNING 1)
                 SELECT (SELECT count(*) FROM run)",
                &[&id, &reason],
            )
            .await?
            .get::<_, i64>(0);
        if n == 0 {
            return Err(no_such_run(id));
        }
        Ok(())
    }

    /// The cancel asked for run `id`, if any.
    pub async fn cancel_requested(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .db()
            .await?
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
            .db()
            .await?
            .query_opt("SELECT result FROM dsh_runs WHERE id = $1", &[&id])
            .await?
            .ok_or_else(|| no_such_run(id))?;
        Ok(row.get(0))
    }

    /// A writer for run `id`'s journal, fenced by this process's claim on
    /// it (see [`PgJournal`]).
    pub async fn journal(&self, id: &str) -> Result<PgJournal, StoreError> {
        PgJournal::open(&self.url, id, self.fence(id)).await
    }

    /// Hears the store's notices on `channels` (see [`Listener`]).
    pub async fn listen(&self, channels: &[&str]) -> Result<Listener, StoreError> {
        Listener::start(&self.url, channels).await
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
    ) -> Result<Arc<dyn dsh_journal::JournalStore>, dsh_journal::RunStoreError> {
        self.lock_run(id).await.map_err(boxed)?;
        self.create_run(id, info, source).await.map_err(boxed)?;
        let journal = self.journal(id).await.map_err(boxed)?;
        Ok(Arc::new(journal))
    }

    async fn describe(&self, id: &str, info: &Value) -> Result<(), dsh_journal::RunStoreError> {
        let fence = self.fence(id);
        self.db()
            .await
            .map_err(boxed)?
            .execute(
                "UPDATE dsh_runs SET info = $2, updated_at = now()
                 WHERE id = $1 AND ($3::integer IS NULL OR claims = $3)",
                &[&id, info, &fence],
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
        // A run this host claimed is held already, under its lease.
        if self.fence(id).is_none() {
            self.take_over(id).await.map_err(boxed)?;
        }
        let db = self.db().await.map_err(boxed)?;
        let sizes = db
            .query_opt(
                "SELECT octet_length(source)::bigint, octet_length(info::text)::bigint,
                     (SELECT sum(octet_length(line))::bigint FROM dsh_journal WHERE run_id = $1)
                 FROM dsh_runs WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(|e| boxed(e.into()))?
            .ok_or_else(|| boxed(no_such_run(id)))?;
        within(id, "script", sizes.get(0), bounds::SOURCE).map_err(boxed)?;
        within(id, "record (info)", sizes.get(1), bounds::INFO).map_err(boxed)?;
        within(id, "journal", sizes.get(2), bounds::JOURNAL).map_err(boxed)?;
        let row = db
            .query_opt("SELECT info, source FROM dsh_runs WHERE id = $1", &[&id])
            .await
            .map_err(|e| boxed(e.into()))?
            .ok_or_else(|| boxed(no_such_run(id)))?;
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
    ) -> Result<Arc<dyn dsh_journal::JournalStore>, dsh_journal::RunStoreError> {
        let journal = self.journal(id).await.map_err(boxed)?;
        Ok(Arc::new(journal))
    }

    async fn keep_events(
        &self,
        id: &str,
        events: dsh_engine::events::EventStream,
        limit: u64,
    ) -> dsh_engine::events_file::Written {
        events::keep(&self.url, id, self.fence(id), events, limit).await
    }

    /// Fenced: a run another process has claimed since is not this
    /// process's to forget.
    async fn discard(&self, id: &str) -> Result<(), dsh_journal::RunStoreError> {
        let fence = self.fence(id);
        self.db()
            .await
            .map_err(boxed)?
            .execute(
                "DELETE FROM dsh_runs WHERE id = $1 AND ($2::integer IS NULL OR claims = $2)",
                &[&id, &fence],
            )
            .await
            .map_err(|e| boxed(e.into()))?;
        Ok(())
    }
}

impl Store {
    /// Takes the session lock on run `id` if nobody else has it (the
    /// session itself may take it again); whether it did.
    async fn try_lock(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .db()
            .await?
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                &[&id],
            )
            .await?
            .get(0))
    }

    /// Lets go of every session lock on run `id` this session has.
    async fn unlock(&self, id: &str) -> Result<(), StoreError> {
        let db = self.db().await?;
        for _ in 0..4 {
            let was: bool = db
                .query_one("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&id])
                .await?
                .get(0);
            if !was {
                break;
            }
        }
        Ok(())
    }

    /// Holds run `id` by the session lock: refused while another process
    /// holds it so.
    async fn lock_run(&self, id: &str) -> Result<(), StoreError> {
        if self.try_lock(id).await? {
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

    /// Takes run `id` over for a resume by this process (`resume --store`):
    /// its session lock, and a new claim — refused while a host's lease on
    /// it runs, or while it waits for a host.
    async fn take_over(&self, id: &str) -> Result<(), StoreError> {
        self.lock_run(id).await?;
        let taken = self
            .db()
            .await?
            .query_opt(
                // A resume by hand is the user asking for the run again:
                // a cancel asked of an earlier attempt is not this one's.
                "UPDATE dsh_runs SET claims = claims + 1, state = 'local', owner = NULL,
                     lease_until = NULL, cancel_requested = NULL, updated_at = now()
                 WHERE id = $1 AND (state IN ('local', 'settled')
                     OR (state = 'running' AND (lease_until IS NULL OR lease_until < now())))
                 RETURNING claims",
                &[&id],
            )
            .await?;
        let Some(row) = taken else {
            self.unlock(id).await?;
            let state = self
                .db()
                .await?
                .query_opt("SELECT state, owner FROM dsh_runs WHERE id = $1", &[&id])
                .await?
                .ok_or_else(|| no_such_run(id))?;
            let (state, owner): (String, Option<String>) = (state.get(0), state.get(1));
            let why = match state.as_str() {
                "queued" => "it waits for a host (`dsh workflow host`); cancel it first \
                             (`dsh workflow cancel`) to resume it by hand"
                    .to_string(),
                _ => format!(
                    "host {} runs it (its lease is current); wait for it, or cancel it",
                    owner.as_deref().unwrap_or("?")
                ),
            };
            return Err(StoreError::Row {
                run: id.to_string(),
                why,
            });
        };
        lock(&self.held).insert(
            id.to_string(),
            Hold {
                claim: row.get(0),
                kind: HoldKind::Session,
            },
        );
        Ok(())
    }
}

fn boxed(e: StoreError) -> dsh_journal::RunStoreError {
    dsh_journal::RunStoreError(Box::new(e))
}
