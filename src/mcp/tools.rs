//! The MCP tools and resources: `workflow_start`, `workflow_status`,
//! `workflow_result`, `workflow_cancel`, `workflow_list`, `workflow_runs`,
//! `workflow_resume`; each run's result and report as resources.
//!
//! A request a tool refuses (a script that does not parse, a path outside
//! the allowed directories, a limit above the server's) is a tool result
//! with `isError` and a message that says what and how to fix it, so the
//! calling model reads it; a request that is not a tool call at all is
//! rmcp's protocol error.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser as _;
use dsh_orchestrator::journal::{rundir, summary};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListResourcesResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    RequestMetaObject, Resource, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::Options;
use super::follow::{Follower, Status};
use crate::detach::{self, Cancelled, Spawned};
use crate::error::CliError;
use crate::flags::{Cli, Top, WorkflowCmd};

/// What `workflow_start` teaches a model: the script language, in dsh's
/// own words.
const START_DOC: &str = include_str!("language.md");

/// The longest `workflow_status` waits, whatever it is asked.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// How often a waiting `workflow_status` looks at its run (and sends a
/// progress notification).
const TICK: Duration = Duration::from_millis(1000);

/// The largest inline script accepted (the engine's own limit).
const MAX_SCRIPT: usize = 1024 * 1024;

/// The largest `args` accepted, as JSON text.
const MAX_ARGS: usize = 1024 * 1024;

/// Runs `workflow_runs` and the resource list show at most.
const MAX_LISTED: usize = 200;

/// Where inline scripts wait for their run's process, under the runs
/// directory.
const INLINE_DIR: &str = ".mcp";

/// The MCP server: one per connection (stdio) or shared by every session
/// (HTTP); clones share the runs they count and follow.
#[derive(Clone)]
pub(crate) struct Server {
    options: Arc<Options>,
    /// Runs started by this server whose process is alive.
    live: Arc<AtomicUsize>,
    follower: Arc<Mutex<Follower>>,
    /// Starts made as MCP tasks, for clients that declare the extension.
    tasks: TaskManager,
    tool_router: ToolRouter<Server>,
}

/// `workflow_start`'s parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct StartParams {
    /// A saved workflow, by name (see workflow_list).
    pub name: Option<String>,
    /// The path of a script file (.ts, .mts, .js, .mjs) inside a directory this server allows.
    pub script_path: Option<String>,
    /// A workflow script you write: TypeScript or JavaScript, as described above.
    pub script: Option<String>,
    /// The script's `args`: any JSON value.
    pub args: Option<Value>,
    /// At most this many agent() calls in the run (at most the server's ceiling).
    pub max_agents: Option<u32>,
    /// At most this many agents at once.
    pub max_concurrent: Option<u32>,
    /// Wall-clock budget of the run in seconds (at most the server's ceiling).
    pub timeout_seconds: Option<u64>,
    /// Output-token budget of the run.
    pub budget_tokens: Option<u64>,
    /// Cost budget of the run in US dollars.
    pub budget_usd: Option<f64>,
}

/// The parameters of a tool about one run.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunParams {
    /// The run's id, as workflow_start returned it (or `latest`, or a unique start of it).
    pub run_id: String,
}

/// `workflow_status`'s parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct StatusParams {
    /// The run's id, as workflow_start returned it (or `latest`, or a unique start of it).
    pub run_id: String,
    /// Wait up to this many seconds (at most 60) for the run to settle, with progress notifications meanwhile; 0 answers at once.
    pub wait_seconds: Option<u64>,
}

/// `workflow_resume`'s parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ResumeParams {
    /// The run's id (or `latest`, or a unique start of it).
    pub run_id: String,
    /// Also make again the calls that failed, stalled or timed out (by default only unanswered calls are made).
    pub retry_failed: Option<bool>,
}

/// `workflow_runs`'s parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunsParams {
    /// At most this many runs, newest first (default 20, at most 200).
    pub limit: Option<usize>,
}

/// A tool's refusal, for the calling model to read.
fn refuse(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn refused(e: CliError) -> CallToolResult {
    refuse(e.message)
}

/// A counted slot of `--max-runs`, given back when dropped unless handed
/// to the thread that reaps the run's process.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tool_router]
impl Server {
    pub(crate) fn new(options: Options) -> Server {
        Server {
            options: Arc::new(options),
            live: Arc::new(AtomicUsize::new(0)),
            follower: Arc::new(Mutex::new(Follower::default())),
            tasks: TaskManager::new(),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = START_DOC)]
    async fn workflow_start(&self, Parameters(p): Parameters<StartParams>) -> CallToolResult {
        match self.start(p).await {
            Ok(id) => CallToolResult::structured(json!({
                "runId": id,
                "status": "running",
                "next": "call workflow_status with this runId (waitSeconds up to 60) until its status is not \"running\", then workflow_result",
            })),
            Err(e) => refused(e),
        }
    }

    #[tool(
        description = "Where a run stands: status (\"running\", \"completed\", \"failed\" or \"cancelled\"), its phase, its agents (queued, running, completed, failed) and its latest log lines. With waitSeconds it waits (up to 60 s) until the run settles, sending progress notifications meanwhile; call it again while the status is \"running\"."
    )]
    async fn workflow_status(
        &self,
        Parameters(p): Parameters<StatusParams>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let dir = match self.dir_of(&p.run_id) {
            Ok(d) => d,
            Err(e) => return refused(e),
        };
        let id = id_of(&dir);
        let wait = Duration::from_secs(p.wait_seconds.unwrap_or(0)).min(MAX_WAIT);
        let deadline = Instant::now() + wait;
        let token = meta.get_progress_token();
        let mut sent = 0u32;
        loop {
            let look = match self.follower.lock().await.look(&dir, &id) {
                Ok(l) => l,
                Err(e) => return refused(e),
            };
            if look.status != Status::Running || Instant::now() >= deadline {
                return CallToolResult::structured(look.json);
            }
            if let Some(token) = &token {
                sent += 1;
                // A client that went away is not this run's business.
                let _ = peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), f64::from(sent))
                            .with_message(look.line),
                    )
                    .await;
            }
            tokio::time::sleep_until(
                tokio::time::Instant::now() + TICK.min(deadline - Instant::now()),
            )
            .await;
        }
    }

    #[tool(
        description = "The result of a settled run: value (what the script returned), stopReason (\"completed\", \"error\" or \"cancelled\"), error (code and message, when it failed) and usage (tokens, cost, agents). A run still running is refused: wait with workflow_status first."
    )]
    async fn workflow_result(&self, Parameters(p): Parameters<RunParams>) -> CallToolResult {
        let dir = match self.dir_of(&p.run_id) {
            Ok(d) => d,
            Err(e) => return refused(e),
        };
        let id = id_of(&dir);
        if rundir::is_locked(&dir) {
            return refuse(format!(
                "run {id} is still running: wait for it with workflow_status, then ask again"
            ));
        }
        match detach::result_of(&dir) {
            Ok(Some(doc)) => {
                let mut result = doc["result"].clone();
                if let Some(o) = result.as_object_mut() {
                    o.insert("runId".into(), Value::String(id));
                }
                CallToolResult::structured(result)
            }
            Ok(None) => refuse(format!(
                "run {id} has no result: its process ended before it settled; continue it with \
                 workflow_resume"
            )),
            Err(e) => refused(e),
        }
    }

    #[tool(
        description = "Cancels a running run: its agents are stopped and it settles as \"cancelled\" within its grace period (watch it with workflow_status)."
    )]
    async fn workflow_cancel(&self, Parameters(p): Parameters<RunParams>) -> CallToolResult {
        if let Err(e) = self.dir_of(&p.run_id) {
            return refused(e);
        }
        match detach::cancel_in(&self.options.runs_root, &p.run_id) {
            Ok(Cancelled::Asked(id)) => CallToolResult::structured(json!({
                "runId": id,
                "status": "cancelling",
                "next": "call workflow_status until its status is \"cancelled\"",
            })),
            Ok(Cancelled::Settled(id)) => CallToolResult::structured(json!({
                "runId": id,
                "status": "settled",
                "next": "the run had settled already; workflow_result has its result",
            })),
            Err(e) => refused(e),
        }
    }

    #[tool(
        description = "The saved workflows workflow_start can run by name: each one's name, description, when to use it, and where it is defined."
    )]
    async fn workflow_list(&self) -> CallToolResult {
        match crate::inspect::list_json(self.options.config.as_deref()) {
            Ok(all) => CallToolResult::structured(json!({ "workflows": all })),
            Err(e) => refused(e),
        }
    }

    #[tool(
        description = "Recent runs, newest first: id, name, status, when each started, and its agents done/failed/replayed."
    )]
    async fn workflow_runs(&self, Parameters(p): Parameters<RunsParams>) -> CallToolResult {
        let limit = p.limit.unwrap_or(20).min(MAX_LISTED);
        match summary::list(&self.options.runs_root) {
            Ok(all) => {
                let runs: Vec<Value> = all
                    .unwrap_or_default()
                    .iter()
                    .take(limit)
                    .map(crate::runs_cmd::run_json)
                    .collect();
                CallToolResult::structured(json!({ "runs": runs }))
            }
            Err(e) => refuse(e.to_string()),
        }
    }

    #[tool(
        description = "Continues a run that was interrupted, failed or was cancelled: the agent answers its journal holds are replayed, the rest are asked again. Returns at once; follow it with workflow_status."
    )]
    async fn workflow_resume(&self, Parameters(p): Parameters<ResumeParams>) -> CallToolResult {
        match self.resume(p).await {
            Ok(id) => CallToolResult::structured(json!({
                "runId": id,
                "status": "running",
                "next": "call workflow_status with this runId until its status is not \"running\"",
            })),
            Err(e) => refused(e),
        }
    }
}

impl Server {
    /// The run directory of `run` (an id, `latest`, a unique prefix).
    fn dir_of(&self, run: &str) -> Result<PathBuf, CliError> {
        // An id, never a path: a caller reaches only this server's runs.
        if run.contains('/') || run.starts_with('.') || run.is_empty() {
            return Err(CliError::usage(format!(
                "runId {run:?}: give a run id as workflow_start returned it (or `latest`, or a \
                 unique start of one), not a path"
            )));
        }
        rundir::resolve(&self.options.runs_root, run).map_err(|e| CliError::usage(e.to_string()))
    }

    /// A slot of `--max-runs`, or the refusal.
    fn slot(&self) -> Result<Slot, CliError> {
        let max = self.options.max_runs;
        let taken = self.live.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(self.live.clone());
        if taken >= max {
            return Err(CliError::usage(format!(
                "this server runs {max} runs already, its most (dsh workflow mcp --max-runs); wait \
                 for one to settle or cancel one with workflow_cancel"
            )));
        }
        Ok(slot)
    }

    async fn start(&self, p: StartParams) -> Result<String, CliError> {
        let slot = self.slot()?;
        let o = &self.options;
        if let Some(n) = p.max_agents
            && n > o.max_agents
        {
            return Err(CliError::usage(format!(
                "maxAgents {n} is above this server's ceiling of {}: ask for at most {} (dsh \
                 workflow mcp --max-agents sets it)",
                o.max_agents, o.max_agents
            )));
        }
        if let Some(s) = p.timeout_seconds
            && Duration::from_secs(s) > o.max_timeout
        {
            return Err(CliError::usage(format!(
                "timeoutSeconds {s} is above this server's ceiling of {}s: ask for at most that \
                 (dsh workflow mcp --max-timeout sets it)",
                o.max_timeout.as_secs()
            )));
        }
        if let Some(usd) = p.budget_usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(CliError::usage(format!(
                "budgetUsd {usd}: give a positive number of dollars"
            )));
        }
        let id = dsh_orchestrator::run::new_run_id();
        let mut inline = None;
        let script: OsString = match (&p.name, &p.script_path, &p.script) {
            (Some(name), None, None) => {
                let catalog = crate::request::catalog_for(o.config.as_deref())?;
                let entry = catalog.find(name).ok_or_else(|| {
                    CliError::usage(format!(
                        "no saved workflow is named {name:?}; workflow_list lists them"
                    ))
                })?;
                entry.path.into_os_string()
            }
            (None, Some(path), None) => self.allowed_path(path)?.into_os_string(),
            (None, None, Some(text)) => {
                if text.len() > MAX_SCRIPT {
                    return Err(CliError::usage(format!(
                        "script: {} bytes is more than the {MAX_SCRIPT} a script may have",
                        text.len()
                    )));
                }
                let path = write_inline(&o.runs_root, &id, text)?;
                inline = Some(path.clone());
                path.into_os_string()
            }
            _ => {
                return Err(CliError::usage(
                    "give exactly one of name (a saved workflow), scriptPath (a file) or script \
                     (the script's text)",
                ));
            }
        };
        let result = match self.start_argv(&p, script, &id) {
            Ok(argv) => {
                let ready_file = o.runs_root.join(&id).join(rundir::RUN_FILE);
                self.spawn(argv, id.clone(), slot, move || ready_file.is_file())
                    .await
            }
            Err(e) => Err(e),
        };
        if let Some(path) = inline {
            let _ = std::fs::remove_file(&path);
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
        result.map(|()| id)
    }

    /// The command line of the run's process, checked as `run` checks it
    /// (the script parsed, its limits valid) before anything starts, with
    /// the server's ceilings on what the script and `dsh.toml` leave
    /// unbounded.
    fn start_argv(
        &self,
        p: &StartParams,
        script: OsString,
        id: &str,
    ) -> Result<Vec<OsString>, CliError> {
        let o = &self.options;
        let mut argv: Vec<OsString> = vec!["workflow".into(), "run".into(), script];
        let mut flag = |name: &str, value: OsString| {
            argv.push(name.into());
            argv.push(value);
        };
        flag("--run-id", id.into());
        flag("--runs-dir", o.runs_root.clone().into());
        flag("--events", "none".into());
        if let Some(args) = &p.args {
            let text = args.to_string();
            if text.len() > MAX_ARGS {
                return Err(CliError::usage(format!(
                    "args: {} bytes of JSON is more than the {MAX_ARGS} accepted",
                    text.len()
                )));
            }
            flag("--args", text.into());
        }
        if let Some(c) = &o.config {
            flag("--config", c.clone().into());
        }
        if let Some(f) = &o.fixture {
            flag("--fixture", f.clone().into());
        }
        if let Some(name) = &o.provider {
            flag("--provider", name.into());
        }
        if let Some(n) = p.max_agents {
            flag("--max-agents", n.to_string().into());
        }
        if let Some(n) = p.max_concurrent {
            flag("--max-concurrent", n.to_string().into());
        }
        if let Some(s) = p.timeout_seconds {
            flag("--timeout", format!("{s}s").into());
        }
        if let Some(n) = p.budget_tokens {
            flag("--budget", n.to_string().into());
        }
        if let Some(usd) = p.budget_usd {
            flag("--budget-usd", usd.to_string().into());
        }
        let built = build(&argv)?;
        // What dsh.toml leaves above the server's ceilings comes down to
        // them.
        let limits = &built.req.limits;
        if limits.max_total_agents > o.max_agents {
            argv.extend(["--max-agents".into(), o.max_agents.to_string().into()]);
        }
        if limits.wall_timeout.is_none_or(|t| t > o.max_timeout) {
            argv.extend([
                "--timeout".into(),
                format!("{}s", o.max_timeout.as_secs()).into(),
            ]);
        }
        let built = build(&argv)?;
        dsh_orchestrator::prepare(&built.req)?;
        Ok(argv)
    }

    /// The task of a start made as an MCP task: the run's result once it
    /// settles (polled as `workflow_status` polls); a `tasks/cancel`
    /// cancels the run and settles the task once the run has settled.
    async fn settle(&self, id: String, ctx: TaskContext) -> Result<CallToolResult, TaskExit> {
        let internal = |e: CliError| TaskExit::Error(ErrorData::internal_error(e.message, None));
        let dir = self.dir_of(&id).map_err(internal)?;
        let mut cancelled = false;
        loop {
            let look = self
                .follower
                .lock()
                .await
                .look(&dir, &id)
                .map_err(internal)?;
            if look.status != Status::Running {
                if cancelled {
                    return Err(TaskExit::Cancelled);
                }
                let doc = detach::result_of(&dir).map_err(internal)?;
                let mut result = doc.map_or(look.json, |d| d["result"].clone());
                if let Some(o) = result.as_object_mut() {
                    o.insert("runId".into(), Value::String(id));
                }
                return Ok(CallToolResult::structured(result));
            }
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                () = ctx.cancelled(), if !cancelled => {
                    cancelled = true;
                    // A run that settled meanwhile has nothing to cancel.
                    let _ = detach::cancel_in(&self.options.runs_root, &id);
                }
            }
        }
    }

    /// `scriptPath`, if it names a file inside an allowed directory.
    fn allowed_path(&self, path: &str) -> Result<PathBuf, CliError> {
        let real = std::fs::canonicalize(path)
            .map_err(|e| CliError::usage(format!("scriptPath {path:?}: {e}")))?;
        if !self.options.allowed.iter().any(|d| real.starts_with(d)) {
            let dirs: Vec<String> = self
                .options
                .allowed
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            return Err(CliError::usage(format!(
                "scriptPath {path:?} is outside the directories this server runs scripts from \
                 ({}); give a script there, or its text as `script`",
                dirs.join(", ")
            )));
        }
        if !real.is_file() {
            return Err(CliError::usage(format!(
                "scriptPath {path:?}: not a regular file"
            )));
        }
        Ok(real)
    }

    /// Starts the run's process and returns once `ready()`; a thread
    /// reaps it and gives back its slot.
    async fn spawn(
        &self,
        argv: Vec<OsString>,
        id: String,
        slot: Slot,
        ready: impl Fn() -> bool + Send + 'static,
    ) -> Result<(), CliError> {
        let root = self.options.runs_root.clone();
        let spawned = tokio::task::spawn_blocking(move || detach::spawn(&root, &id, argv, &ready))
            .await
            .map_err(|e| CliError::usage(format!("the start of the run failed: {e}")))??;
        match spawned {
            Spawned::Started(mut child) => {
                // The slot is the process's until it ends.
                std::thread::Builder::new()
                    .name("dsh-mcp-reap".into())
                    .spawn(move || {
                        let _ = child.wait();
                        drop(slot);
                    })
                    .map_err(|e| CliError::usage(format!("cannot start a thread: {e}")))?;
                Ok(())
            }
            Spawned::Ended { code, said } => Err(CliError::usage(format!(
                "the run did not start (its process exited with {code}): {}",
                said.trim()
            ))),
        }
    }

    async fn resume(&self, p: ResumeParams) -> Result<String, CliError> {
        let slot = self.slot()?;
        let dir = self.dir_of(&p.run_id)?;
        let id = id_of(&dir);
        if rundir::is_locked(&dir) {
            return Err(CliError::usage(format!(
                "run {id} is running: it needs no resume (follow it with workflow_status)"
            )));
        }
        let o = &self.options;
        let argv = detach::resume_argv(
            &o.runs_root,
            &id,
            p.retry_failed == Some(true),
            o.config.as_deref(),
            o.fixture.as_deref(),
        );
        let ready = detach::resumed_ready(&dir);
        self.spawn(argv, id.clone(), slot, ready).await?;
        Ok(id)
    }
}

/// Parses a run's command line as `dsh` would and builds its request.
fn build(argv: &[OsString]) -> Result<crate::request::Built, CliError> {
    let cli =
        Cli::try_parse_from(std::iter::once(OsString::from("dsh")).chain(argv.iter().cloned()))
            .map_err(|e| CliError::usage(e.to_string()))?;
    match cli.command {
        Top::Workflow {
            command: WorkflowCmd::Run(a),
        } => crate::request::build(&a),
        _ => Err(CliError::usage("not a run command line")),
    }
}

/// The id of the run in `dir`.
fn id_of(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Writes an inline script to `root/.mcp/ID/inline.ts`, for the run's process
/// to read: never through a symlink, never over a file. The run keeps its
/// own copy (a resume reads that once this file is gone), so the file is
/// removed once the run has started.
fn write_inline(root: &Path, id: &str, text: &str) -> Result<PathBuf, CliError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = root.join(INLINE_DIR);
    let fail = |e: std::io::Error| {
        CliError::usage(format!("cannot keep the script in {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(root).map_err(fail)?;
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        other => other.map_err(fail)?,
    }
    // A runs directory can come with a cloned repository.
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(fail(std::io::Error::other("not a directory (a symlink?)")));
    }
    // A directory per run, so that the run is named `inline` (a script
    // without a meta name is named by its file).
    let dir = dir.join(id);
    std::fs::create_dir(&dir).map_err(fail)?;
    let path = dir.join("inline.ts");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(fail)?;
    f.write_all(text.as_bytes()).map_err(fail)?;
    Ok(path)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_tasks()
                .build(),
        )
        .with_server_info(rmcp::model::Implementation::new(
            "dsh",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "dsh runs workflow scripts: fan-outs of AI agents written as TypeScript. Start one \
             with workflow_start (a saved workflow, a file, or a script you write), follow it \
             with workflow_status, read it with workflow_result. Runs go on in the background, \
             beyond this connection.",
        )
    }

    /// `workflow_start` as an MCP task when the client declares the tasks
    /// extension: the task settles with the run's result. Every other
    /// call (and every client without tasks) goes to the tools as they
    /// are.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if tasks && request.name == "workflow_start" {
            let p: StartParams = serde_json::from_value(Value::Object(
                request.arguments.clone().unwrap_or_default(),
            ))
            .map_err(|e| {
                ErrorData::invalid_params(format!("failed to deserialize parameters: {e}"), None)
            })?;
            // Started here: a refusal is an answer at once, not a failed task.
            let id = match self.start(p).await {
                Ok(id) => id,
                Err(e) => return Ok(CallToolResponse::Complete(refused(e))),
            };
            let server = self.clone();
            let keep = self.options.max_timeout + Duration::from_secs(3600);
            let task = self.tasks.spawn(
                TaskOptions::new()
                    .with_poll_interval_ms(TICK.as_millis() as u64)
                    .with_ttl_ms(keep.as_millis() as u64),
                move |ctx| Box::pin(async move { server.settle(id, ctx).await }),
            );
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let all = summary::list(&self.options.runs_root)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .unwrap_or_default();
        let mut resources = Vec::new();
        for s in all.iter().take(MAX_LISTED) {
            let id = &s.info.id;
            resources.push(
                Resource::new(format!("dsh://runs/{id}/result"), format!("{id} result"))
                    .with_mime_type("application/json"),
            );
            resources.push(
                Resource::new(format!("dsh://runs/{id}/report"), format!("{id} report"))
                    .with_mime_type("application/json"),
            );
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let not_found = || {
            ErrorData::resource_not_found(
                format!(
                    "{uri}: not a resource of this server (dsh://runs/ID/result or dsh://runs/ID/report)"
                ),
                None,
            )
        };
        let rest = uri.strip_prefix("dsh://runs/").ok_or_else(not_found)?;
        let (run, what) = rest.split_once('/').ok_or_else(not_found)?;
        let dir = self
            .dir_of(run)
            .map_err(|e| ErrorData::resource_not_found(e.message, None))?;
        let body = match what {
            "result" => detach::result_of(&dir)
                .map_err(|e| ErrorData::internal_error(e.message, None))?
                .map(|doc| doc["result"].clone())
                .ok_or_else(|| {
                    ErrorData::resource_not_found(format!("{uri}: the run has no result yet"), None)
                })?,
            "report" => summary::summarize(&dir)
                .map(|s| crate::runs_cmd::show_json(&s))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?,
            _ => return Err(not_found()),
        };
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            serde_json::to_string_pretty(&body).unwrap_or_default(),
            uri,
        )])
        .into())
    }
}
