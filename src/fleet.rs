//! Runs on a store's hosts (docs/scale.md), the commands over
//! `dsh_store::host`: `submit` records a run for a host to run and prints
//! its id; `host` serves the store with this process's providers (its
//! `dsh.toml`, its keys); `wait` prints a run's result as `run` would,
//! with its exit code; `cancel` asks the run's host to cancel it.

use std::sync::Arc;
use std::time::Duration;

use dsh_orchestrator::journal::ProviderSpec;
use dsh_orchestrator::providers::dry_run::DryRunProvider;
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{ErrorCode, SandboxPolicy, StartRequest, SubagentProvider};
use dsh_store::StoreUrl;
use dsh_store::agents::Pool;
use dsh_store::host::{self, Carried, HostControl, HostEvent, HostOptions, Nested, Refused};
use dsh_store::pool::Pools;
use serde_json::Value;

use crate::error::{CliError, exit, print_error};
use crate::flags::{CancelArgs, EventsMode, HostArgs, OutputMode, RunArgs, WaitArgs};
use crate::live::Live;
use crate::progress;
use crate::request::{self, agent_types, load_config, open_store, store_url};
use crate::stack::{self, Answering};
use dsh_orchestrator::RunResult;

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
    let carried = carried(&a, &built.req)?;
    let store = open_store(&url).await?;
    let id = host::submit(&store, &built.req, &a.script, built.spec, carried)
        .await
        .map_err(|e| CliError::new(e.code, e.message))?;
    println!("{id}");
    Ok(exit::COMPLETED)
}

/// What a run kept in the store carries for a host to run (or continue)
/// it: the fixture's text, and the saved workflows it may call.
pub fn carried(a: &RunArgs, req: &StartRequest) -> Result<Carried, CliError> {
    let fixture = match &a.fixture {
        Some(f) => Some(
            dsh_orchestrator::files::read_text(f, dsh_orchestrator::files::FIXTURE_LIMIT).map_err(
                |e| CliError::usage(format!("--fixture {}: cannot read: {e}", f.display())),
            )?,
        ),
        None => None,
    };
    Ok(Carried {
        fixture,
        workflows: nested(req)?,
    })
}

/// The saved workflows a submitted run may call by name: every one of
/// this machine's catalog that can run (the first of each name), sent with
/// the run, so that the host runs the same ones.
fn nested(req: &StartRequest) -> Result<Vec<Nested>, CliError> {
    let Some(catalog) = &req.catalog else {
        return Ok(Vec::new());
    };
    let mut sent = Vec::new();
    for entry in catalog.list() {
        if entry.problem.is_some() || entry.shadowed_by.is_some() {
            continue;
        }
        let source =
            dsh_orchestrator::files::read_text(&entry.path, req.limits.max_script_bytes as u64)
                .map_err(|e| {
                    CliError::usage(format!(
                        "saved workflow {} ({}): cannot read it to send with the run: {e}",
                        entry.name,
                        entry.path.display()
                    ))
                })?;
        let file = entry
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        sent.push(Nested { file, source });
    }
    Ok(sent)
}

/// `dsh workflow host`: the store's host loop (`dsh_store::host::serve`)
/// with this process's providers; SIGTERM or SIGINT drains it (it stops
/// claiming and finishes the runs it has), a second signal cancels them.
pub async fn host(a: HostArgs) -> Result<i32, CliError> {
    let config = load_config(a.config.as_deref())?;
    let url = needs_store(store_url(a.store.as_deref(), &config)?, "host")?;
    let store = Arc::new(open_store(&url).await?);
    let name = request::host_name();
    let pools = match &a.agents {
        Some(text) => parse_pools(text, &config)?,
        None => Vec::new(),
    };
    // An agent host runs no runs unless told to.
    let runs = a.runs.unwrap_or(if pools.is_empty() { 4 } else { 0 });
    if runs == 0 && pools.is_empty() {
        return Err(CliError::usage(
            "--runs 0 without --agents: this host would serve nothing; give it runs              (--runs N) or pools (--agents POOL=N)",
        ));
    }
    let opts = HostOptions {
        name: name.clone(),
        runs: runs as usize,
        pools: pools.clone(),
        lease: Duration::from_secs(u64::from(a.lease)),
        // A row is data anyone with write access to the store could have
        // changed: its sandbox policy is never weaker than this host's own
        // (`[workflow] sandbox`, best-effort unless set).
        sandbox_floor: config.workflow.sandbox.unwrap_or(SandboxPolicy::BestEffort),
    };
    let control = HostControl::default();
    let signals = {
        let control = control.clone();
        tokio::spawn(async move {
            let mut signals = crate::execute::Signals::install();
            signals.next().await;
            control.drain.cancel();
            signals.next().await;
            control.stop.cancel();
        })
    };
    let (report, mut events) = tokio::sync::mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            say(&name, e);
        }
    });
    let serves = pools
        .iter()
        .map(|p| format!("{}={}", p.name, p.slots))
        .collect::<Vec<_>>();
    let calls = if serves.is_empty() {
        String::new()
    } else {
        format!(" and answers calls of {}", serves.join(","))
    };
    eprintln!(
        "dsh: host {} runs up to {runs} run(s){calls} of {url}, lease {}s",
        opts.name, a.lease
    );
    let answerer = Arc::new(ThisHost {
        config: Arc::new(config),
    });
    let served = host::serve(store, answerer, opts, control, report).await;
    signals.abort();
    let _ = printer.await;
    served.map_err(|e| CliError::usage(e.to_string()))?;
    Ok(exit::COMPLETED)
}

/// Says on stderr what the host did that a person watching it needs.
fn say(name: &str, e: HostEvent) {
    match e {
        HostEvent::Claimed { .. }
        | HostEvent::Ended { .. }
        | HostEvent::CallClaimed { .. }
        | HostEvent::CallEnded { .. } => {}
        HostEvent::CallLost { call } => {
            eprintln!("dsh: host {name}: {call}: this host lost its lease on the call; stopping it")
        }
        HostEvent::Lost { id } => {
            eprintln!(
                "dsh: host {name}: run {id}: {}; stopping it",
                host::LEASE_LOST
            );
        }
        HostEvent::Warning { id: Some(id), text } => {
            eprintln!("dsh: host {name}: run {id}: {text}")
        }
        HostEvent::Warning { id: None, text } => eprintln!("dsh: host {name}: {text}"),
        HostEvent::Draining { running } => eprintln!(
            "dsh: host {name} stops claiming; finishing {running} run(s) (again to cancel them)"
        ),
        HostEvent::CallsDraining { answering } => eprintln!(
            "dsh: host {name} stops claiming calls; answering {answering} call(s) (again to hand them back)"
        ),
    }
}

/// This process's providers and worker, for the runs it hosts.
struct ThisHost {
    config: Arc<dsh_orchestrator::config::Config>,
}

impl host::Answerer for ThisHost {
    fn answering(
        &self,
        run: &str,
        spec: &ProviderSpec,
        fixture: Option<&str>,
        pools: &Pools,
    ) -> Result<Arc<dyn SubagentProvider>, Refused> {
        let answering = answering_for(spec, fixture, &self.config).map_err(refused)?;
        let answering = pooled(answering, &self.config, pools, run).map_err(refused)?;
        stack::compose(answering, None).ok_or_else(|| Refused::usage("nothing answers this run"))
    }

    fn pool(&self, name: &str) -> Result<Arc<dyn SubagentProvider>, Refused> {
        request::host_router(&self.config, None)
            .map_err(refused)?
            .provider(name)
            .map_err(|e| Refused::usage(e.to_string()))
    }

    fn ready(&self, req: StartRequest) -> Result<StartRequest, Refused> {
        Ok(req
            .with_worker(request::worker().map_err(refused)?)
            .with_catalog(request::catalog(&self.config)))
    }
}

/// `answering` with the calls of the providers `[store] pools` names
/// asked of the store's agent hosts (a fixture or the dry run answers on
/// its own).
pub fn pooled(
    answering: Answering,
    config: &dsh_orchestrator::config::Config,
    pools: &Pools,
    run: &str,
) -> Result<Answering, CliError> {
    let Answering::Router(mut router) = answering else {
        return Ok(answering);
    };
    for pool in &config.store_pools {
        router = router
            .with_provider(pool, pools.provider(run, pool))
            .map_err(|e| CliError::usage(format!("[store] pools: {e}")))?;
    }
    Ok(Answering::Router(router))
}

/// `--agents POOL=N,…`: each pool a provider of this host's configuration,
/// named once, with 1 to 10,000 slots.
fn parse_pools(
    text: &str,
    config: &dsh_orchestrator::config::Config,
) -> Result<Vec<Pool>, CliError> {
    let bad = |why: String| CliError::usage(format!("--agents {text:?}: {why}"));
    let mut pools: Vec<Pool> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, slots)) = part.split_once('=') else {
            return Err(bad(format!(
                "{part:?} is not POOL=N (a provider's name and how many of its calls at once), \
                 e.g. claude-code=4"
            )));
        };
        let name = name.trim();
        let slots: usize = match slots.trim().parse() {
            Ok(n @ 1..=10_000) => n,
            _ => {
                return Err(bad(format!(
                    "{part:?}: the slots must be a whole number from 1 to 10000"
                )));
            }
        };
        if !config.providers.contains_key(name) {
            return Err(bad(format!(
                "{name:?} is not a provider of this host's configuration (known: {}); a pool is \
                 answered by the provider of its name",
                config.provider_names().join(", ")
            )));
        }
        if pools.iter().any(|p| p.name == name) {
            return Err(bad(format!("{name:?} is named twice")));
        }
        pools.push(Pool {
            name: name.to_string(),
            slots,
        });
    }
    if pools.is_empty() {
        return Err(bad("no pool is named; e.g. --agents claude-code=4".into()));
    }
    Ok(pools)
}

fn refused(e: CliError) -> Refused {
    Refused {
        code: e.code,
        message: e.message,
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
    // Without a store, the run is a run directory of this machine's.
    let Some(url) = store_url(a.store.as_deref(), &config)? else {
        return crate::detach::wait(&a).await;
    };
    let store = open_store(&url).await?;
    let mut signals = crate::execute::Signals::install();
    let run = store
        .resolve(&a.run)
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    let (mode, mut live) = crate::execute::display(a.events, a.color, None, None);
    let waited = async {
        match a.events {
            EventsMode::None => host::wait(&store, &run).await,
            _ => follow(&store, &run, &mode, live.as_mut()).await,
        }
    };
    let doc = tokio::select! {
        doc = waited => doc.map_err(|e| CliError::usage(e.to_string()))?,
        // Waiting is not running: an interrupt ends the wait, not the run.
        () = signals.next() => return Ok(exit::CANCELLED),
    };
    if let Some(l) = live.as_mut()
        && let Some(result) = RunResult::from_json(&doc["result"])
    {
        l.finish(&result, Some(&run));
    }
    Ok(print_result(&doc["result"], a.output))
}

/// How often `wait --events` reads the run's new events.
const FOLLOW: Duration = Duration::from_millis(200);

/// Shows run `id`'s events as they come, from its first, as `run` shows
/// its own (`mode`, or the live view), until it has a result and its last
/// event (`workflow/end`) is out; its result document.
async fn follow(
    store: &dsh_store::Store,
    id: &str,
    mode: &progress::Mode,
    mut live: Option<&mut Live>,
) -> Result<Value, dsh_store::StoreError> {
    let mut last = 0;
    let mut settled_at: Option<std::time::Instant> = None;
    let mut ended = false;
    loop {
        let lines = store.events_after(id, last, 1000).await?;
        for (seq, line) in &lines {
            last = *seq;
            ended = crate::detach::show_stored(line, mode, live.as_deref_mut()).fold(ended);
        }
        if let Some(l) = live.as_mut() {
            l.tick();
        }
        if lines.len() == 1000 {
            continue;
        }
        // Held, the run is running (again, after a resume): a result is
        // an earlier attempt's.
        let result = if store.is_held(id).await? {
            None
        } else {
            store.result(id).await?
        };
        match result {
            // The result is written after the run's last event is handed
            // to its writer; a writer that lost the store never writes it,
            // so the wait for it is bounded.
            Some(doc)
                if ended || settled_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(2)) =>
            {
                return Ok(doc);
            }
            Some(_) => {
                settled_at.get_or_insert_with(std::time::Instant::now);
            }
            None => {}
        }
        tokio::time::sleep(FOLLOW).await;
    }
}

/// Prints a stored result as `run` prints its own: the value (or the whole
/// result) on stdout, the error line on stderr; returns `run`'s exit code.
pub(crate) fn print_result(result: &Value, output: OutputMode) -> i32 {
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
    let Some(url) = store_url(a.store.as_deref(), &config)? else {
        return crate::detach::cancel(&a.run, a.runs_dir.as_deref());
    };
    let store = open_store(&url).await?;
    let run = store
        .resolve(&a.run)
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    store
        .request_cancel(&run, "cancelled with dsh workflow cancel")
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(exit::COMPLETED)
}
