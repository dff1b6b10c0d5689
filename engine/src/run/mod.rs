//! Starting and handling runs: [`start`], [`StartRequest`], [`WorkflowRun`].
//!
//! `start()` is synchronous and cheap: it prepares the script (parse, strip,
//! meta), validates the limits, spawns the worker, emits `workflow/start`
//! and hands the rest to the run's supervisor task (the private
//! `supervisor` module).

pub(crate) mod error;
mod launch;
mod supervisor;
pub(crate) mod worker;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dsh_protocol::ErrorCode;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

pub use error::{StartError, WorkerMissing};
pub use launch::WorkerSource;
use supervisor::{Command, Parts, Supervisor};
pub use worker::{ForkedWorker, SpawnedWorker, WorkerCommand};

use crate::cost::CostLayer;
use crate::events::{EventKind, EventStream, Hub};
use crate::limits::Limits;
use crate::result::RunResult;
use crate::script::{self, Meta, PreparedScript, ScriptKind};
use dsh_seam::{Stack, SubagentProvider};

/// The script's `args`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ArgsInput {
    /// `args` is `undefined`.
    #[default]
    None,
    /// `args` is this JSON value.
    Json(Value),
    /// `args` is this string.
    Text(String),
}

/// The sandbox policy of a [`StartRequest`] that names none.
pub(crate) const DEFAULT_SANDBOX: dsh_protocol::SandboxPolicy =
    dsh_protocol::SandboxPolicy::BestEffort;

/// Everything a run needs. Build with [`StartRequest::new`] or
/// [`StartRequest::from_path`] and the `with_*` methods.
#[derive(Clone)]
pub struct StartRequest {
    /// The name used in messages (normally the path as the user gave it).
    pub script_name: String,
    /// The script's text.
    pub source: String,
    /// TypeScript or JavaScript: how `source` is parsed.
    pub kind: ScriptKind,
    /// Meta from the caller; required when the file has none.
    pub meta: Option<Meta>,
    /// Meta used only when neither the caller nor the file gives one (the
    /// CLI's "file stem" default).
    pub meta_fallback: Option<Meta>,
    /// The script's `args` (default: `undefined`).
    pub args: ArgsInput,
    /// Sandbox policy for the worker.
    pub sandbox: dsh_protocol::SandboxPolicy,
    /// The run's limits (default: [`Limits::default`]).
    pub limits: Limits,
    /// Answers the script's `agent()` calls; with `None` every call fails
    /// to start (`AGENT_START`).
    pub provider: Option<Arc<dyn SubagentProvider>>,
    /// Where the worker comes from (default [`WorkerSource::Resolve`]).
    pub worker: WorkerSource,
    /// The run's id; a fresh one is made when `None`.
    pub run_id: Option<String>,
    /// Where `workflow()` finds nested workflows; with `None` every
    /// `workflow()` call rejects (reading files for a script is opt-in).
    pub catalog: Option<Arc<crate::catalog::Catalog>>,
}

impl StartRequest {
    /// A request for script text. `script_name` decides TypeScript vs
    /// JavaScript by its extension (default TypeScript).
    pub fn new(script_name: impl Into<String>, source: impl Into<String>) -> Self {
        let script_name = script_name.into();
        let kind = ScriptKind::from_path(Path::new(&script_name)).unwrap_or(ScriptKind::TypeScript);
        StartRequest {
            script_name,
            source: source.into(),
            kind,
            meta: None,
            meta_fallback: None,
            args: ArgsInput::None,
            sandbox: DEFAULT_SANDBOX,
            limits: Limits::default(),
            provider: None,
            worker: WorkerSource::Resolve,
            run_id: None,
            catalog: None,
        }
    }

    /// Reads a script file; the extension must be `.ts`, `.mts`, `.js` or `.mjs`.
    /// Files over `limits.max_script_bytes` are refused before being read whole.
    pub fn from_path(path: impl AsRef<Path>, limits: &Limits) -> Result<Self, StartError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let kind = ScriptKind::from_path(path).ok_or_else(|| StartError::Usage {
            message: format!("{name}: a workflow script must end in .ts, .mts, .js or .mjs"),
        })?;
        let len = std::fs::metadata(path)
            .map_err(|e| StartError::Usage {
                message: format!("{name}: cannot read the script: {e}"),
            })?
            .len();
        if len > limits.max_script_bytes as u64 {
            return Err(StartError::TooLarge {
                name,
                bytes: len,
                limit: limits.max_script_bytes,
            });
        }
        // Only a regular file, at most the limit (a device or FIFO named
        // as the script is refused at once, not read forever).
        let source =
            dsh_exec::files::read_text(path, limits.max_script_bytes as u64).map_err(|e| {
                StartError::Usage {
                    message: format!("{name}: cannot read the script: {e}"),
                }
            })?;
        // NUL is no script text (a symlink to /proc/self/environ, a binary):
        // refused before a parse error could show a line of it.
        if source.contains('\0') {
            return Err(StartError::Usage {
                message: format!(
                    "{name}: cannot read the script: it contains NUL bytes, so it is not script \
                     text (write \\0 for a NUL character in a string)"
                ),
            });
        }
        let mut req = StartRequest::new(name, source);
        req.kind = kind;
        req.limits = limits.clone();
        Ok(req)
    }

    /// Gives the script's meta (used over the file's own `meta`).
    pub fn with_meta(mut self, meta: Meta) -> Self {
        self.meta = Some(meta);
        self
    }
    /// Sets the script's `args`.
    pub fn with_args(mut self, args: ArgsInput) -> Self {
        self.args = args;
        self
    }
    /// Sets the run's limits (checked by [`start`]).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    /// Lets the script's `workflow()` find nested workflows in `catalog`.
    pub fn with_catalog(mut self, catalog: crate::catalog::Catalog) -> Self {
        self.catalog = Some(Arc::new(catalog));
        self
    }

    /// Sets the provider that answers `agent()` calls.
    pub fn with_provider(mut self, provider: Arc<dyn SubagentProvider>) -> Self {
        self.provider = Some(provider);
        self
    }
    /// The sandbox policy (default `best-effort`; docs/sandbox.md).
    pub fn with_sandbox(mut self, policy: dsh_protocol::SandboxPolicy) -> Self {
        self.sandbox = policy;
        self
    }

    /// Where the worker comes from ([`WorkerSource`]).
    pub fn with_worker_source(mut self, source: WorkerSource) -> Self {
        self.worker = source;
        self
    }

    /// Runs in `worker`, spawned ahead of time ([`WorkerSource::Ahead`]),
    /// when it was made for this request's sandbox policy.
    pub fn with_spawned_worker(self, worker: SpawnedWorker) -> Self {
        self.with_worker_source(WorkerSource::Ahead(worker))
    }

    /// Uses `meta` only when neither the caller nor the file gives one
    /// (the CLI passes [`Meta::default_for`] the script's path).
    pub fn with_meta_fallback(mut self, meta: Meta) -> Self {
        self.meta_fallback = Some(meta);
        self
    }

    /// Starts the worker with `worker` instead of resolving one from the
    /// environment ([`WorkerSource::Command`]).
    pub fn with_worker(self, worker: WorkerCommand) -> Self {
        self.with_worker_source(WorkerSource::Command(worker))
    }
}

/// Prepares a script without running it (what `dsh workflow check` does).
pub fn prepare(request: &StartRequest) -> Result<(PreparedScript, Meta), StartError> {
    check_size(request)?;
    let prepared = script::prepare(&request.script_name, &request.source, request.kind)?;
    let meta = resolve_meta(&prepared, request)?;
    Ok((prepared, meta))
}

/// [`prepare`] for [`start`]: the same checks, the script served from the
/// cache of scripts this process prepared lately (`script::prepare_cached`).
fn prepare_for_start(request: &StartRequest) -> Result<(Arc<PreparedScript>, Meta), StartError> {
    check_size(request)?;
    let prepared = script::prepare_cached(&request.script_name, &request.source, request.kind)?;
    let meta = resolve_meta(&prepared, request)?;
    Ok((prepared, meta))
}

/// A source over `maxScriptBytes` is refused before it is parsed.
fn check_size(request: &StartRequest) -> Result<(), StartError> {
    if request.source.len() > request.limits.max_script_bytes {
        return Err(StartError::TooLarge {
            name: request.script_name.clone(),
            bytes: request.source.len() as u64,
            limit: request.limits.max_script_bytes,
        });
    }
    Ok(())
}

/// The run's meta: the request's, else the script's, else the fallback.
fn resolve_meta(prepared: &PreparedScript, request: &StartRequest) -> Result<Meta, StartError> {
    let meta = match (&prepared.meta, &request.meta) {
        (_, Some(m)) => m.clone(),
        (Some(m), None) => m.clone(),
        (None, None) => match &request.meta_fallback {
            Some(m) => m.clone(),
            None => {
                return Err(StartError::MissingMeta {
                    name: request.script_name.clone(),
                });
            }
        },
    };
    Ok(meta)
}

/// A new run id: unique on this host, sortable by start time (the journal
/// names a run directory before the run starts).
pub fn new_run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("run-{:x}-{:x}-{n}", nanos as u64, std::process::id())
}

/// The run's args as the worker gets them; JSON nested deeper than a run
/// directory reads back is refused.
fn wire_args(args: &ArgsInput) -> Result<dsh_protocol::Args, StartError> {
    if let ArgsInput::Json(v) = args {
        let depth = crate::limits::json_depth(v);
        if depth > crate::limits::MAX_JSON_DEPTH {
            return Err(StartError::Usage {
                message: format!(
                    "args: the value nests arrays and objects {depth} levels deep; at most {} are \
                     accepted (a run directory keeps the args and must read them back)",
                    crate::limits::MAX_JSON_DEPTH
                ),
            });
        }
    }
    Ok(match args {
        ArgsInput::None => dsh_protocol::Args::None,
        ArgsInput::Json(v) => dsh_protocol::Args::Json(v.to_string()),
        ArgsInput::Text(t) => dsh_protocol::Args::Text(t.clone()),
    })
}

/// Starts a run. Must be called inside a tokio runtime. Returns as soon as
/// the worker is on its way (`launch::launch`: a spawn is handed to the
/// spawner thread; a fork from a fork server is one round trip to it, made
/// on the calling thread).
pub fn start(request: StartRequest) -> Result<WorkflowRun, StartError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
    request.limits.validate()?;
    let (prepared, meta) = prepare_for_start(&request)?;
    let args = wire_args(&request.args)?;
    let launch::Launched {
        spawned,
        command,
        lease,
    } = launch::launch(&request.worker, request.sandbox, &handle)?;
    let worker::Spawned {
        mut process,
        socket,
    } = spawned;
    let stderr = process.take_stderr();
    let worker_pid = process.pid();
    // Entering the runtime is what lets a std socket become a tokio one.
    let socket = {
        let _enter = handle.enter();
        tokio::net::UnixStream::from_std(socket)
    };
    let socket = match socket {
        Ok(s) => s,
        Err(source) => {
            // Do not leave the spawned worker behind.
            handle.spawn(async move {
                process.kill().await;
            });
            return Err(StartError::spawn(&command, source));
        }
    };

    let run_id: Arc<str> = request.run_id.clone().unwrap_or_else(new_run_id).into();
    let hub = Hub::new(run_id.clone(), Instant::now());
    hub.emit(EventKind::Start { meta: meta.clone() });
    if request.meta.is_none() {
        // What the file's meta carried that Claude Code accepts and dsh
        // does not use, said once the run has started.
        for w in &prepared.warnings {
            hub.emit(EventKind::Warning {
                message: w.message.clone(),
                path: Some(format!("{}:{}:{}", w.file, w.line, w.column)),
            });
        }
    }
    let (cmd_tx, cmds) = mpsc::unbounded_channel();
    let (result_tx, result_rx) = watch::channel(None);
    let (done_tx, done_rx) = watch::channel(false);
    let grace = request.limits.dispose_grace;
    let meta_json = serde_json::to_string(&meta).unwrap_or_else(|_| "{}".into());
    let sup = Supervisor::new(Parts {
        run_id: run_id.clone(),
        hub: hub.clone(),
        prepared,
        meta_json,
        args,
        // The run's own layers go in front of the provider it was given.
        provider: request.provider.map(|p| {
            Stack::new()
                .option_layer(request.limits.budget_usd.map(CostLayer::new))
                .provider(p)
        }),
        limits: request.limits,
        catalog: request.catalog,
        process,
        socket,
        stderr,
        lease,
        cmds,
        result_tx,
        done_tx,
    });
    handle.spawn(sup.run());
    Ok(WorkflowRun {
        id: run_id,
        meta,
        hub,
        cmd_tx,
        result_rx,
        done_rx,
        grace,
        worker_pid,
    })
}

/// A started run. Dropping it cancels the run (and still cleans up).
pub struct WorkflowRun {
    id: Arc<str>,
    meta: Meta,
    hub: Hub,
    cmd_tx: mpsc::UnboundedSender<Command>,
    result_rx: watch::Receiver<Option<RunResult>>,
    done_rx: watch::Receiver<bool>,
    grace: Duration,
    worker_pid: u32,
}

/// Extra time `dispose()` allows beyond the grace for the kill and reap.
const DISPOSE_SLACK: Duration = Duration::from_secs(5);

impl WorkflowRun {
    /// The run's id (`runId` in events).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The meta the run started with (the request's, the file's, or the
    /// fallback).
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The worker's process id (also its process group id), for
    /// diagnostics and leak checks. The process may already be gone.
    pub fn worker_pid(&self) -> u32 {
        self.worker_pid
    }

    /// Every event of the run, from `workflow/start` on.
    pub fn subscribe(&self) -> EventStream {
        self.hub.subscribe()
    }

    /// Cancels the run. Idempotent: the first reason wins.
    pub fn cancel(&self, reason: impl Into<String>) {
        let _ = self.cmd_tx.send(Command::Cancel(reason.into()));
    }

    /// Settles the run as `cancelled` at once and kills the worker without
    /// grace (the CLI's second Ctrl-C).
    pub fn terminate(&self) {
        let _ = self.cmd_tx.send(Command::Terminate);
    }

    /// The result. Never fails; settles within the grace of a cancel.
    pub async fn result(&self) -> RunResult {
        let mut rx = self.result_rx.clone();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                // The supervisor is gone without a result: only a panic
                // could do that. Report it rather than hang.
                return RunResult::failed(
                    dsh_protocol::StopReason::Error,
                    crate::result::RunError::new(
                        ErrorCode::WorkerExited,
                        "the run's supervisor stopped unexpectedly",
                    ),
                    0,
                );
            }
        }
    }

    /// The result if the run has settled.
    pub fn try_result(&self) -> Option<RunResult> {
        self.result_rx.borrow().clone()
    }

    /// Cancels if needed, waits (bounded) for the result and for quiescence:
    /// children disposed, worker reaped, tasks finished. Idempotent.
    pub async fn dispose(&self) -> RunResult {
        if self.try_result().is_none() {
            self.cancel("disposed");
        }
        let bound = self.grace + DISPOSE_SLACK;
        let result = match tokio::time::timeout(bound, self.result()).await {
            Ok(r) => r,
            Err(_) => {
                self.terminate();
                self.result().await
            }
        };
        let mut done = self.done_rx.clone();
        let _ = tokio::time::timeout(bound, done.wait_for(|d| *d)).await;
        result
    }

    /// True once children are disposed and the worker is reaped.
    pub fn is_quiescent(&self) -> bool {
        *self.done_rx.borrow()
    }
}
