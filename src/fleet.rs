//! Runs on a store's hosts (docs/scale.md): `submit` records a run for a
//! host to run and prints its id; `host` claims submitted runs — and runs
//! whose host is gone — and runs each as `resume --store` would (a
//! submitted run is a stored run with an empty journal, a failed-over one
//! has the answers its first host journaled); `wait` prints a run's result
//! as `run` would, with its exit code; `cancel` asks the run's host to
//! cancel it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_orchestrator::journal::durable::run_info;
use dsh_orchestrator::journal::{ProviderSpec, Replay, ResumeError, ResumeOptions, resume_stored};
use dsh_orchestrator::providers::dry_run::DryRunProvider;
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{ErrorCode, SandboxPolicy, SubagentProvider};
use dsh_store::{Claimed, Notice, Store, StoreUrl};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::error::{CliError, exit, print_error};
use crate::flags::{CancelArgs, HostArgs, OutputMode, RunArgs, WaitArgs};
use crate::request::{self, agent_types, load_config, open_store, store_url};
use crate::stack::{self, Answering};

/// How often a host looks for work while it has room, and `wait` for the
/// result, besides the store's notices (which may be missed while a
/// connection is down).
const POLL: Duration = Duration::from_secs(1);

fn needs_store(url: Option<StoreUrl>, what: &str) -> Result<StoreUrl, CliError> {
    url.ok_or_else(|| {
        CliError::usage(format!(
            "{what} needs a store: pass --store postgres://USER@HOST:PORT/DB, or set DSH_STORE, \
             or [store] url in dsh.toml"
        ))
    })
}

/// `dsh workflow submit`: the run's record, script and fixture text in
/// the store, for a host; prints the run's id.
pub async fn submit(a: RunArgs) -> Result<i32, CliError> {
    let built = request::build(&a)?;
    let url = needs_store(built.store.clone(), "submit")?;
    // A script that cannot start is refused here, not by a host later.
    dsh_orchestrator::prepare(&built.req)?;
    let fixture = match &a.fixture {
        Some(f) => Some(
            dsh_orchestrator::files::read_text(f, dsh_orchestrator::files::FIXTURE_LIMIT).map_err(
                |e| CliError::usage(format!("--fixture {}: cannot read: {e}", f.display())),
            )?,
        ),
        None => None,
    };
    let store = open_store(&url).await?;
    let id = dsh_orchestrator::run::new_run_id();
    let info = run_info(&id, &built.req, &a.script, built.spec);
    let info = serde_json::to_value(&info).unwrap_or(Value::Null);
    store
        .submit(
            &id,
            &info,
            &built.req.source,
            &json!({ "fixture": fixture }),
        )
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    println!("{id}");
    Ok(exit::COMPLETED)
}

/// What a host is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostState {
    /// Claiming runs while it has room.
    Claiming,
    /// Told to stop (SIGTERM, SIGINT): claims nothing more, finishes the
    /// runs it has, keeps their leases meanwhile.
    Draining,
    /// Told twice: cancels the runs it has, then exits.
    Cancelling,
}

/// Why a host stops a run it no longer holds.
const LEASE_LOST: &str = "this host lost its lease on the run (it was paused, or cut off from \
                          the store, for longer than the lease); another host runs it";

/// `dsh workflow host`: claims runs while it has room and runs them,
/// keeping their leases; on SIGTERM or SIGINT stops claiming and finishes
/// the ones it has (a second signal cancels them).
pub async fn host(a: HostArgs) -> Result<i32, CliError> {
    let config = load_config(a.config.as_deref())?;
    let url = needs_store(store_url(a.store.as_deref(), &config)?, "host")?;
    let store = Arc::new(open_store(&url).await?);
    let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
    let mut listener = store
        .listen(&["dsh_queued", "dsh_cancel"])
        .await
        .map_err(usage)?;
    let name = format!(
        "{}:{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "host".into()),
        std::process::id()
    );
    let lease = Duration::from_secs(u64::from(a.lease));
    let config = Arc::new(config);
    let mut signals = crate::execute::Signals::install();
    let mut runs: JoinSet<()> = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, String> = HashMap::new();
    let mut cancels: HashMap<String, watch::Sender<Option<String>>> = HashMap::new();
    let mut heartbeat = tokio::time::interval(lease / 3);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    let mut state = HostState::Claiming;
    // When to look for work next: at once at start, after a claim (a long
    // queue fills the host's room without a wait per run) and on a notice;
    // else a poll after the last look (a deadline, not a sleep made
    // afresh each turn of the loop, which the heartbeat would keep
    // putting off).
    let mut next_look = tokio::time::Instant::now();
    eprintln!(
        "dsh: host {name} runs up to {} run(s) of {url}, lease {}s",
        a.runs, a.lease
    );
    let cancel = |cancels: &HashMap<String, watch::Sender<Option<String>>>, id: &str, why: &str| {
        if let Some(tx) = cancels.get(id) {
            tx.send_if_modified(|r| {
                let first = r.is_none();
                if first {
                    *r = Some(why.to_string());
                }
                first
            });
        }
    };
    loop {
        let room = state == HostState::Claiming && running.len() < a.runs as usize;
        tokio::select! {
            _ = signals.next() => {
                state = match state {
                    HostState::Claiming => {
                        eprintln!(
                            "dsh: host {name} stops claiming; finishing {} run(s) (again to cancel them)",
                            running.len()
                        );
                        HostState::Draining
                    }
                    _ => {
                        for id in running.values() {
                            cancel(&cancels, id, "the host running it was told to stop");
                        }
                        HostState::Cancelling
                    }
                };
            }
            Some(done) = runs.join_next_with_id() => {
                let task = match done {
                    Ok((task, ())) => task,
                    Err(e) => {
                        eprintln!("dsh: host {name}: a run's task failed: {e}");
                        e.id()
                    }
                };
                if let Some(id) = running.remove(&task) {
                    cancels.remove(&id);
                }
            }
            _ = heartbeat.tick() => match store.renew(&name, lease).await {
                Ok(renewal) => {
                    renewed = Instant::now();
                    for id in &renewal.lost {
                        eprintln!("dsh: host {name}: run {id}: {LEASE_LOST}; stopping it");
                        cancel(&cancels, id, LEASE_LOST);
                    }
                    for (id, reason) in &renewal.cancels {
                        cancel(&cancels, id, reason);
                    }
                }
                Err(e) => {
                    eprintln!("dsh: host {name}: cannot renew its leases: {e}");
                    // Past the lease, other hosts may run these runs:
                    // this one must not go on with them.
                    if renewed.elapsed() >= lease {
                        for id in running.values() {
                            cancel(&cancels, id, LEASE_LOST);
                        }
                    }
                }
            },
            Some(notice) = listener.next() => match notice {
                Notice::Run { channel, id } if channel == "dsh_cancel" => {
                    if cancels.contains_key(&id)
                        && let Ok(Some(reason)) = store.cancel_requested(&id).await
                    {
                        cancel(&cancels, &id, &reason);
                    }
                }
                // Submitted, or the listener was away: look.
                Notice::Run { .. } | Notice::Resumed => next_look = tokio::time::Instant::now(),
            },
            () = tokio::time::sleep_until(next_look), if room => {
                next_look = tokio::time::Instant::now() + POLL;
                match store.claim(&name, lease).await {
                    Ok(Some(claimed)) => {
                        let id = claimed.id.clone();
                        let (tx, rx) = watch::channel(claimed.cancel_requested.clone());
                        let handle =
                            runs.spawn(run_claimed(store.clone(), claimed, config.clone(), rx));
                        running.insert(handle.id(), id.clone());
                        cancels.insert(id, tx);
                        next_look = tokio::time::Instant::now();
                    }
                    Ok(None) => {}
                    Err(e) => eprintln!("dsh: host {name}: cannot claim: {e}"),
                }
            }
        }
        if state != HostState::Claiming && running.is_empty() {
            break;
        }
    }
    Ok(exit::COMPLETED)
}

/// Runs one claimed run to its end and records its result; a run that
/// cannot start is recorded as failed, so its waiters hear why.
async fn run_claimed(
    store: Arc<Store>,
    claimed: Claimed,
    config: Arc<dsh_orchestrator::config::Config>,
    cancel: watch::Receiver<Option<String>>,
) {
    let id = claimed.id.clone();
    if let Err(e) = run_one(&store, &claimed, &config, cancel).await {
        let doc = json!({
            "result": {
                "value": null,
                "stopReason": "error",
                "error": { "code": e.code.as_str(), "message": e.message },
                "agentsStarted": 0
            },
            "endedAt": dsh_orchestrator::journal::now_ms(),
            "attempt": claimed.claims,
            "replayed": 0,
            "live": 0
        });
        if let Err(e) = store.set_result(&id, claimed.claims, &doc).await {
            eprintln!("dsh: run {id}: cannot record that it could not start: {e}");
        }
    }
    if let Err(e) = store.let_go(&id).await {
        eprintln!("dsh: run {id}: {e}");
    }
}

async fn run_one(
    store: &Arc<Store>,
    claimed: &Claimed,
    config: &dsh_orchestrator::config::Config,
    mut cancel: watch::Receiver<Option<String>>,
) -> Result<(), CliError> {
    let submission = claimed
        .submission
        .as_ref()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let fixture = submission
        .as_ref()
        .and_then(|s| s["fixture"].as_str())
        .map(str::to_string);
    let options = ResumeOptions {
        replay: Replay::Answers,
        ..ResumeOptions::default()
    };
    let runs_store: Arc<dyn dsh_orchestrator::journal::RunStore> = store.clone();
    let (mut req, durable, answering) = resume_stored(runs_store, &claimed.id, &options, |spec| {
        answering_for(spec, fixture.as_deref(), config)
    })
    .await
    .map_err(|e| match e {
        ResumeError::Run(message) => CliError::usage(message),
        ResumeError::Provider(e) => e,
    })?;
    req.provider = stack::compose(answering, durable.layer());
    // A row is data anyone with write access to the store could have
    // changed: its sandbox policy is never weaker than this host's own
    // (`[workflow] sandbox`, best-effort unless set).
    let floor = config.workflow.sandbox.unwrap_or(SandboxPolicy::BestEffort);
    if strength(req.sandbox) < strength(floor) {
        req.sandbox = floor;
    }
    let req = req
        .with_worker(request::worker()?)
        .with_catalog(request::catalog(config));
    let run = durable.start(req)?;
    // Cancelled while it waited, from anywhere since, or lost: the
    // host's heartbeat and listener say so through `cancel`.
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
    for w in finished.warnings {
        eprintln!("dsh: run {}: {w}", claimed.id);
    }
    Ok(())
}

/// How much a policy confines: `off` < `best-effort` < `strict`.
fn strength(p: SandboxPolicy) -> u8 {
    match p {
        SandboxPolicy::Off => 0,
        SandboxPolicy::BestEffort => 1,
        SandboxPolicy::Strict => 2,
    }
}

/// What answers a hosted run's calls: the fixture it was submitted with,
/// the dry run, or this host's own providers (its keys, its `dsh.toml`).
fn answering_for(
    spec: &ProviderSpec,
    fixture: Option<&str>,
    config: &dsh_orchestrator::config::Config,
) -> Result<Answering, CliError> {
    let scripted = |p: Arc<dyn SubagentProvider>| Answering::Scripted(p, agent_types(config));
    Ok(match (spec, fixture) {
        (_, Some(text)) => {
            let p = ScriptedProvider::from_json_text("the submitted fixture", text)
                .map_err(|e| CliError::new(ErrorCode::FixtureInvalid, e.to_string()))?;
            scripted(Arc::new(p))
        }
        (ProviderSpec::DryRun, None) => scripted(Arc::new(DryRunProvider::new())),
        (ProviderSpec::Configured { provider, .. }, None) => {
            Answering::Router(request::host_router(config, provider.clone())?)
        }
        (other, None) => {
            return Err(CliError::usage(format!(
                "the run names no provider this host can make ({other:?})"
            )));
        }
    })
}

/// `dsh workflow wait`: waits for the run's result and prints it as `run`
/// does, with `run`'s exit code.
pub async fn wait(a: WaitArgs) -> Result<i32, CliError> {
    let config = load_config(None).unwrap_or_else(|_| dsh_orchestrator::config::Config::builtin());
    let url = needs_store(store_url(a.store.as_deref(), &config)?, "wait")?;
    let store = open_store(&url).await?;
    // Listening before the first look: a result recorded between the two
    // is heard, not missed.
    let mut listener = store
        .listen(&["dsh_settled"])
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    let mut signals = crate::execute::Signals::install();
    let doc = loop {
        match store.result(&a.run).await {
            Ok(Some(doc)) => break doc,
            Ok(None) => {}
            Err(e) => return Err(CliError::usage(e.to_string())),
        }
        // Until a notice for this run (or a missed one) or the poll.
        let heard = async {
            loop {
                match listener.next().await {
                    Some(Notice::Run { id, .. }) if id != a.run => {}
                    Some(_) => return,
                    None => return std::future::pending().await,
                }
            }
        };
        tokio::select! {
            () = heard => {}
            () = tokio::time::sleep(POLL) => {}
            // Waiting is not running: an interrupt ends the wait, not the run.
            _ = signals.next() => return Ok(exit::CANCELLED),
        }
    };
    Ok(print_result(&doc["result"], a.output))
}

/// Prints a stored result as `run` prints its own: the value (or the whole
/// result) on stdout, the error line on stderr; returns `run`'s exit code.
fn print_result(result: &Value, output: OutputMode) -> i32 {
    let shown = match output {
        OutputMode::Value => &result["value"],
        OutputMode::Result => result,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(shown).unwrap_or_else(|_| "null".into())
    );
    let code = result["error"]["code"].as_str();
    if let (Some(c), Some(m)) = (code, result["error"]["message"].as_str()) {
        let c = ErrorCode::parse(c).unwrap_or(ErrorCode::ScriptError);
        print_error(c, m);
    }
    match result["stopReason"].as_str() {
        Some("completed") => exit::COMPLETED,
        Some("cancelled") if code == Some("TIMEOUT") => exit::TIMEOUT,
        Some("cancelled") => exit::CANCELLED,
        _ => exit::ERROR,
    }
}

/// `dsh workflow cancel`: records the cancel; the store notifies the run's
/// host, which cancels it at once (or at its next heartbeat, a third of
/// its lease, if the notice was missed).
pub async fn cancel(a: CancelArgs) -> Result<i32, CliError> {
    let config = load_config(None).unwrap_or_else(|_| dsh_orchestrator::config::Config::builtin());
    let url = needs_store(store_url(a.store.as_deref(), &config)?, "cancel")?;
    let store = open_store(&url).await?;
    store
        .request_cancel(&a.run, "cancelled with dsh workflow cancel")
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(exit::COMPLETED)
}
