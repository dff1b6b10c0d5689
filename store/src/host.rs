//! A host, in-process: what `dsh workflow host` runs, for any embedder.
//!
//! [`serve`] claims the store's runs while it has room ([`Store::claim`]),
//! runs each as a resume of the stored run (a submitted run is a stored
//! run with an empty journal; one taken over replays what its host
//! journaled), keeps their leases with a heartbeat ([`Store::renew`]),
//! hears submits and cancels ([`crate::Listener`]), and stops a run whose lease
//! it lost. What answers a run's calls, and what a run needs to start on
//! this host (its worker, its catalog), the embedder says through
//! [`Answerer`]; the host puts the run's journal in front.
//!
//! Draining and stopping are the embedder's: cancel [`HostControl::drain`]
//! to stop claiming and finish the runs it has, [`HostControl::stop`] to
//! cancel them too. What happens is reported as [`HostEvent`]s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_engine::catalog::{Catalog, Origin};
use dsh_engine::script::ScriptKind;
use dsh_engine::{StartRequest, SubagentProvider};
use dsh_journal::{ProviderSpec, Replay, ResumeError, ResumeOptions, RunStore, resume_stored};
use dsh_protocol::{ErrorCode, SandboxPolicy};
use dsh_seam::Stack;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::agents::Pool;
use crate::pool::Pools;
use crate::{Claimed, Notice, Store, StoreError};

/// How often a host with room looks for work besides the store's notices
/// (a lease that passes sends none; a notice can be missed while the
/// listener's connection is down).
pub const LOOK: Duration = Duration::from_secs(1);

/// Why a host stops a run it no longer holds.
pub const LEASE_LOST: &str = "this host lost its lease on the run (it was paused, or cut off \
                              from the store, for longer than the lease); another host runs it";

/// Why a claimed run cannot start on this host: recorded as the run's
/// result, so its waiters hear it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    /// The error code the run's result carries.
    pub code: ErrorCode,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl Refused {
    /// A run refused as `USAGE`.
    pub fn usage(message: impl Into<String>) -> Refused {
        Refused {
            code: ErrorCode::Usage,
            message: message.into(),
        }
    }
}

/// What the embedder gives a host: how to answer a run's calls, and how a
/// run is made ready to start here.
pub trait Answerer: Send + Sync + 'static {
    /// What answers the calls of run `run`, submitted with `spec` — and,
    /// when the submitter sent one, the fixture's text. Never anything the
    /// row names but this host's own configuration does not have. Calls
    /// of a provider the fleet pools go to `pools` ([`Pools::provider`]):
    /// agent hosts answer them.
    fn answering(
        &self,
        run: &str,
        spec: &ProviderSpec,
        fixture: Option<&str>,
        pools: &Pools,
    ) -> Result<Arc<dyn SubagentProvider>, Refused>;

    /// The run's request made ready on this host: its worker, its catalog.
    fn ready(&self, req: StartRequest) -> Result<StartRequest, Refused>;

    /// What answers the calls of pool `name` when this host serves it
    /// ([`HostOptions::pools`]): this host's own provider of that name.
    /// Asked once per pool, when the host starts. The default serves none.
    fn pool(&self, name: &str) -> Result<Arc<dyn SubagentProvider>, Refused> {
        Err(Refused::usage(format!(
            "this host has no provider to answer pool {name:?} with"
        )))
    }
}

/// How a host runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The host's name in the store (`owner`): unique per process.
    pub name: String,
    /// Runs at once (0: this host runs none, it only answers calls).
    pub runs: usize,
    /// The agent pools whose calls this host answers, for runs running
    /// anywhere ([`crate::agents`]); none by default.
    pub pools: Vec<Pool>,
    /// How long a run stays this host's without a heartbeat.
    pub lease: Duration,
    /// No run is run with a weaker sandbox than this: a row is data
    /// anyone with write access to the store could have changed.
    pub sandbox_floor: SandboxPolicy,
}

/// Tells a host to drain or stop (cancel one, then the other, or both).
#[derive(Debug, Clone, Default)]
pub struct HostControl {
    /// Stop claiming; finish the runs it has, keeping their leases.
    pub drain: CancellationToken,
    /// Cancel the runs it has (each settles as cancelled), then return.
    pub stop: CancellationToken,
}

/// What a host did that its embedder may want to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostEvent {
    /// It claimed run `id` (`claims` > 1: it takes the run over).
    Claimed {
        /// The run.
        id: String,
        /// The claim's number.
        claims: i32,
    },
    /// Run `id` ended on this host.
    Ended {
        /// The run.
        id: String,
    },
    /// It lost its lease on run `id` and stops it ([`LEASE_LOST`]).
    Lost {
        /// The run.
        id: String,
    },
    /// Something went wrong that does not stop the host.
    Warning {
        /// The run it concerns, if one.
        id: Option<String>,
        /// What.
        text: String,
    },
    /// It stops claiming runs, with this many left to finish.
    Draining {
        /// Runs still running.
        running: usize,
    },
    /// It stops claiming calls of its pools, with this many left to
    /// answer.
    CallsDraining {
        /// Calls still being answered.
        answering: usize,
    },
    /// It claimed a call of one of its pools (`claims` > 1: another agent
    /// host had it before).
    CallClaimed {
        /// The call ([`crate::calls::CallId`] as text).
        call: String,
        /// The claim's number.
        claims: i32,
    },
    /// A call ended on this host (answered, cancelled or handed back).
    CallEnded {
        /// The call.
        call: String,
    },
    /// It lost its lease on a call, and stops it without writing.
    CallLost {
        /// The call.
        call: String,
    },
}

/// How much a policy confines: `off` < `best-effort` < `strict`.
fn strength(p: SandboxPolicy) -> u8 {
    match p {
        SandboxPolicy::Off => 0,
        SandboxPolicy::BestEffort => 1,
        SandboxPolicy::Strict => 2,
    }
}

/// What a host is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostState {
    Claiming,
    Draining,
    Stopping,
}

/// The host's runs: one task each, and the way to cancel each.
struct Running {
    tasks: JoinSet<()>,
    ids: HashMap<tokio::task::Id, String>,
    cancels: HashMap<String, watch::Sender<Option<String>>>,
}

impl Running {
    fn len(&self) -> usize {
        self.ids.len()
    }

    /// Cancels run `id` with `why` (the first reason stands).
    fn cancel(&self, id: &str, why: &str) {
        if let Some(tx) = self.cancels.get(id) {
            tx.send_if_modified(|r| {
                let first = r.is_none();
                if first {
                    *r = Some(why.to_string());
                }
                first
            });
        }
    }

    fn cancel_all(&self, why: &str) {
        for id in self.cancels.keys() {
            self.cancel(id, why);
        }
    }
}

/// Runs a host until it is drained or stopped and its runs and calls have
/// ended (see the module docs): the runs it has room for, and the calls of
/// its pools ([`crate::agents`]). Fails only at the start: the store
/// cannot be listened to, or a pool cannot be served here; later trouble
/// with the store is reported and ridden out.
pub async fn serve(
    store: Arc<Store>,
    answerer: Arc<dyn Answerer>,
    opts: HostOptions,
    control: HostControl,
    report: mpsc::UnboundedSender<HostEvent>,
) -> Result<(), StoreError> {
    // Every pool's provider first: a pool this host cannot serve is an
    // error before anything is claimed.
    let providers = opts
        .pools
        .iter()
        .map(|p| {
            answerer.pool(&p.name).map_err(|e| StoreError::Pool {
                pool: p.name.clone(),
                why: e.message,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let runs = async {
        if opts.runs == 0 {
            return Ok(());
        }
        serve_runs(
            store.clone(),
            answerer.clone(),
            &opts,
            control.clone(),
            report.clone(),
        )
        .await
    };
    let calls = async {
        if opts.pools.is_empty() {
            return Ok(());
        }
        crate::agents::serve(
            store.clone(),
            providers,
            &opts.name,
            &opts.pools,
            opts.lease,
            control.clone(),
            report.clone(),
        )
        .await
    };
    tokio::try_join!(runs, calls).map(|_| ())
}

/// The runs' half of [`serve`].
async fn serve_runs(
    store: Arc<Store>,
    answerer: Arc<dyn Answerer>,
    opts: &HostOptions,
    control: HostControl,
    report: mpsc::UnboundedSender<HostEvent>,
) -> Result<(), StoreError> {
    let mut listener = store.listen(&["dsh_queued", "dsh_cancel"]).await?;
    // The pooled calls of every run here are waited for by one task.
    let pools = Pools::start(store.clone());
    let say = |e: HostEvent| {
        let _ = report.send(e);
    };
    let mut running = Running {
        tasks: JoinSet::new(),
        ids: HashMap::new(),
        cancels: HashMap::new(),
    };
    let mut heartbeat = tokio::time::interval(opts.lease / 3);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    let mut state = HostState::Claiming;
    // When to look for work next: at once at start, after a claim (a long
    // queue fills the host's room without a wait per run) and on a notice;
    // else a look after the last. A deadline, not a sleep made afresh each
    // turn of the loop, which the heartbeat would keep putting off.
    let mut next_look = tokio::time::Instant::now();
    // The store's trouble is said when it starts or changes, not every
    // second while it lasts: one slot for claiming, one for renewing.
    let mut trouble: [Option<String>; 2] = [None, None];
    let mut said = |slot: usize, text: Option<String>| {
        if text != trouble[slot] {
            if let Some(t) = &text {
                let _ = report.send(HostEvent::Warning {
                    id: None,
                    text: t.clone(),
                });
            }
            trouble[slot] = text;
        }
    };
    const CLAIM: usize = 0;
    const RENEW: usize = 1;
    loop {
        let room = state == HostState::Claiming && running.len() < opts.runs;
        tokio::select! {
            () = control.drain.cancelled(), if state == HostState::Claiming => {
                state = HostState::Draining;
                say(HostEvent::Draining { running: running.len() });
            }
            () = control.stop.cancelled(), if state != HostState::Stopping => {
                state = HostState::Stopping;
                running.cancel_all("the host running it was told to stop");
            }
            Some(done) = running.tasks.join_next_with_id() => {
                let task = match done {
                    Ok((task, ())) => task,
                    Err(e) => {
                        say(HostEvent::Warning { id: None, text: format!("a run's task failed: {e}") });
                        e.id()
                    }
                };
                if let Some(id) = running.ids.remove(&task) {
                    running.cancels.remove(&id);
                    say(HostEvent::Ended { id });
                }
            }
            _ = heartbeat.tick() => match store.renew(&opts.name, opts.lease).await {
                Ok(renewal) => {
                    said(RENEW, None);
                    renewed = Instant::now();
                    for id in renewal.lost {
                        running.cancel(&id, LEASE_LOST);
                        say(HostEvent::Lost { id });
                    }
                    for (id, reason) in &renewal.cancels {
                        running.cancel(id, reason);
                    }
                }
                Err(e) => {
                    said(RENEW, Some(format!("cannot renew its leases: {e}")));
                    // Past the lease, other hosts may run these runs: this
                    // one must not go on with them.
                    if renewed.elapsed() >= opts.lease {
                        running.cancel_all(LEASE_LOST);
                    }
                }
            },
            Some(notice) = listener.next() => match notice {
                Notice::Run { channel, id } if channel == "dsh_cancel" => {
                    if running.cancels.contains_key(&id)
                        && let Ok(Some(reason)) = store.cancel_requested(&id).await
                    {
                        running.cancel(&id, &reason);
                    }
                }
                // Submitted, or the listener was away: look.
                Notice::Run { .. } | Notice::Resumed => next_look = tokio::time::Instant::now(),
            },
            () = tokio::time::sleep_until(next_look), if room => {
                next_look = tokio::time::Instant::now() + LOOK;
                match store.claim(&opts.name, opts.lease).await {
                    Ok(Some(claimed)) => {
                        said(CLAIM, None);
                        let id = claimed.id.clone();
                        say(HostEvent::Claimed { id: id.clone(), claims: claimed.claims });
                        let (tx, rx) = watch::channel(claimed.cancel_requested.clone());
                        let handle = running.tasks.spawn(run_claimed(
                            store.clone(),
                            answerer.clone(),
                            pools.clone(),
                            opts.sandbox_floor,
                            claimed,
                            rx,
                            report.clone(),
                        ));
                        running.ids.insert(handle.id(), id.clone());
                        running.cancels.insert(id, tx);
                        next_look = tokio::time::Instant::now();
                    }
                    Ok(None) => said(CLAIM, None),
                    Err(e) => said(CLAIM, Some(format!("cannot claim: {e}"))),
                }
            }
        }
        if state != HostState::Claiming && running.len() == 0 {
            return Ok(());
        }
    }
}

/// Runs one claimed run to its end and records its result; a run that
/// cannot start is recorded as failed, so its waiters hear why.
async fn run_claimed(
    store: Arc<Store>,
    answerer: Arc<dyn Answerer>,
    pools: Pools,
    floor: SandboxPolicy,
    claimed: Claimed,
    cancel: watch::Receiver<Option<String>>,
    report: mpsc::UnboundedSender<HostEvent>,
) {
    let id = claimed.id.clone();
    let warn = |text: String| {
        let _ = report.send(HostEvent::Warning {
            id: Some(id.clone()),
            text,
        });
    };
    match run_one(&store, answerer.as_ref(), &pools, floor, &claimed, cancel).await {
        Ok(warnings) => warnings.into_iter().for_each(warn),
        Err(refused) => {
            let doc = refused_result(&refused, claimed.claims);
            if let Err(e) = store.set_result(&id, claimed.claims, &doc).await {
                warn(format!("cannot record that it could not start: {e}"));
            }
        }
    }
    if let Err(e) = store.let_go(&id).await {
        warn(e.to_string());
    }
}

/// The result document of a run that could not start.
fn refused_result(refused: &Refused, attempt: i32) -> Value {
    json!({
        "result": {
            "value": null,
            "stopReason": "error",
            "error": { "code": refused.code.as_str(), "message": refused.message },
            "agentsStarted": 0
        },
        "endedAt": dsh_journal::now_ms(),
        "attempt": attempt,
        "replayed": 0,
        "live": 0
    })
}

/// Runs a claimed run; the warnings of its end.
async fn run_one(
    store: &Arc<Store>,
    answerer: &dyn Answerer,
    pools: &Pools,
    floor: SandboxPolicy,
    claimed: &Claimed,
    mut cancel: watch::Receiver<Option<String>>,
) -> Result<Vec<String>, Refused> {
    let submission = claimed
        .submission
        .as_ref()
        .map_err(|e| Refused::usage(e.to_string()))?;
    let fixture = submission
        .as_ref()
        .and_then(|s| s["fixture"].as_str())
        .map(str::to_string);
    let options = ResumeOptions {
        replay: Replay::Answers,
        ..ResumeOptions::default()
    };
    let runs: Arc<dyn RunStore> = store.clone();
    let (mut req, durable, answering) = resume_stored(runs, &claimed.id, &options, |spec| {
        answerer.answering(&claimed.id, spec, fixture.as_deref(), pools)
    })
    .await
    .map_err(|e| match e {
        ResumeError::Run(message) => Refused::usage(message),
        ResumeError::Provider(e) => e,
    })?;
    req.provider = Some(
        Stack::new()
            .option_layer(durable.layer())
            .provider(answering),
    );
    if strength(req.sandbox) < strength(floor) {
        req.sandbox = floor;
    }
    let mut req = answerer.ready(req)?;
    // The workflows sent with the run, in a directory of its own for the
    // run's length; a run submitted without (by an older dsh) finds them
    // in the host's catalog.
    let _nested = match submission.as_ref().map(|s| &s["workflows"]) {
        Some(Value::Array(sent)) => {
            let (dir, catalog) = nested_catalog(sent)?;
            let catalog = catalog.with_max_script_bytes(req.limits.max_script_bytes);
            req.catalog = Some(Arc::new(catalog));
            Some(dir)
        }
        _ => None,
    };
    let run = durable.start(req).map_err(|e| Refused {
        code: e.code(),
        message: e.to_string(),
    })?;
    // Cancelled while it waited, from anywhere since, or lost: the host's
    // heartbeat and listener say so through `cancel`.
    let cancelled = async {
        loop {
            if let Some(reason) = cancel.borrow_and_update().clone() {
                return reason;
            }
            if cancel.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    tokio::select! {
        _ = run.run().result() => {}
        reason = cancelled => run.run().cancel(reason),
    }
    let finished = run.finish().await;
    Ok(finished.warnings.iter().map(ToString::to_string).collect())
}

/// A saved workflow sent with a run, for its `workflow("name")` calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nested {
    /// The file's name on the submitter's machine: its extension says its
    /// language; the name it is called by is its meta's, as always.
    pub file: String,
    /// The file's text.
    pub source: String,
}

/// What a submitted run carries besides its record.
#[derive(Debug, Clone, Default)]
pub struct Carried {
    /// A fixture's text, when a fixture answers the run.
    pub fixture: Option<String>,
    /// The saved workflows it may call by name (the submitter's catalog);
    /// the host finds `workflow("name")` among these, never in its own.
    pub workflows: Vec<Nested>,
}

impl Carried {
    /// As the store keeps it (`dsh_runs.submission`).
    pub fn to_json(&self) -> Value {
        json!({
            "fixture": self.fixture,
            "workflows": self.workflows.iter()
                .map(|w| json!({ "file": w.file, "source": w.source }))
                .collect::<Vec<_>>(),
        })
    }
}

/// Submits a run for a host to run: `req`'s script, args, limits and
/// sandbox policy, recorded with `spec` (what answers it: the host's own
/// providers, a fixture, the dry run) and what it `carried`, as `script`
/// (the script's path, as the user named it) would be run. A script that
/// cannot start is refused here, not by a host later. The run's id.
pub async fn submit(
    store: &Store,
    req: &StartRequest,
    script: &std::path::Path,
    spec: ProviderSpec,
    carried: Carried,
) -> Result<String, Refused> {
    dsh_engine::prepare(req).map_err(|e| Refused {
        code: e.code(),
        message: e.to_string(),
    })?;
    let id = dsh_engine::run::new_run_id();
    let info = dsh_journal::durable::run_info(&id, req, script, spec);
    let info = serde_json::to_value(&info).map_err(|e| Refused::usage(e.to_string()))?;
    store
        .submit(&id, &info, &req.source, &carried.to_json())
        .await
        .map_err(|e| Refused::usage(e.to_string()))?;
    Ok(id)
}

/// A catalog of only the workflows `sent` with a run, written to a private
/// directory that lives as long as the returned value. The files' names
/// are made here (`w0.ts`, `w1.js`, …: only the sent name's extension is
/// kept, and only a script's), never taken from the row.
fn nested_catalog(sent: &[Value]) -> Result<(tempfile::TempDir, Catalog), Refused> {
    let problem = |why: String| Refused::usage(format!("the workflows sent with the run: {why}"));
    if sent.len() > dsh_engine::catalog::MAX_FILES_PER_DIR {
        return Err(problem(format!(
            "{} of them, over the {} a catalog directory holds",
            sent.len(),
            dsh_engine::catalog::MAX_FILES_PER_DIR
        )));
    }
    let dir = tempfile::Builder::new()
        .prefix("dsh-nested-")
        .tempdir()
        .map_err(|e| problem(format!("cannot make a directory for them: {e}")))?;
    for (i, w) in sent.iter().enumerate() {
        let (Some(file), Some(source)) = (w["file"].as_str(), w["source"].as_str()) else {
            return Err(problem(format!("[{i}] is not {{\"file\", \"source\"}}")));
        };
        let ext = match ScriptKind::from_path(std::path::Path::new(file)) {
            Some(ScriptKind::TypeScript) => "ts",
            Some(ScriptKind::JavaScript) => "js",
            None => {
                return Err(problem(format!(
                    "[{i}] {file:?} is not a .ts, .mts, .js or .mjs file"
                )));
            }
        };
        std::fs::write(dir.path().join(format!("w{i}.{ext}")), source)
            .map_err(|e| problem(format!("cannot write [{i}]: {e}")))?;
    }
    let catalog = Catalog::new(dir.path()).with_dir(dir.path(), Origin::Other);
    Ok((dir, catalog))
}

/// Waits for run `id`'s result document: its notice, or a look every
/// [`LOOK`] (a notice can be missed while the listener's connection is
/// down).
pub async fn wait(store: &Store, id: &str) -> Result<Value, StoreError> {
    // Listening before the first look: a result recorded between the two
    // is heard, not missed.
    let mut listener = store.listen(&["dsh_settled"]).await?;
    loop {
        // Held, the run is running (again, after a resume by hand): a
        // result it has is an earlier attempt's.
        if !store.is_held(id).await?
            && let Some(doc) = store.result(id).await?
        {
            return Ok(doc);
        }
        let heard = async {
            loop {
                match listener.next().await {
                    Some(Notice::Run { id: other, .. }) if other != id => {}
                    Some(_) => return,
                    None => return std::future::pending().await,
                }
            }
        };
        tokio::select! {
            () = heard => {}
            () = tokio::time::sleep(LOOK) => {}
        }
    }
}
