//! From flags to a validated request: the configuration file, the limits
//! with their flag overrides, the args, the provider and the worker — and
//! the commands that need nothing more (`check`, `providers`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_orchestrator::agent_types::{self, AgentTypes};
use dsh_orchestrator::catalog::Catalog;
use dsh_orchestrator::config::{self, Config};
use dsh_orchestrator::files;
use dsh_orchestrator::journal::ProviderSpec;
use dsh_orchestrator::journal::durable::absolute;
use dsh_orchestrator::providers::dry_run::DryRunProvider;
use dsh_orchestrator::providers::registry::ToolHost;
use dsh_orchestrator::providers::router::{self, Router};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{
    ArgsInput, ErrorCode, ForkedWorker, Limits, Meta, SandboxPolicy, SpawnedWorker, StartRequest,
    SubagentProvider, WorkerCommand,
};
use serde_json::Value;

use crate::error::CliError;
use crate::flags::RunArgs;
use crate::stack::Answering;
use dsh_store::StoreUrl;

/// The runs directory: `--runs-dir`, else `DSH_RUNS_DIR`, else
/// `.dsh/runs` under the working directory.
pub fn runs_root(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("DSH_RUNS_DIR") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(dsh_orchestrator::journal::rundir::DEFAULT_RUNS_DIR),
    }
}

/// `dsh workflow check`: the script's meta (or the file-stem default), and
/// the `dsh: warning: FILE:LINE:COL: …` lines a run would emit for what
/// the meta carries that Claude Code accepts and dsh does not use.
pub fn check(script: &Path) -> Result<(Meta, Vec<String>), CliError> {
    let req = StartRequest::from_path(script, &Limits::default())?
        .with_meta_fallback(Meta::default_for(script));
    let (prepared, meta) = dsh_orchestrator::prepare(&req)?;
    let warnings = prepared
        .warnings
        .iter()
        .map(|w| {
            format!(
                "dsh: warning: {}:{}:{}: {}",
                w.file, w.line, w.column, w.message
            )
        })
        .collect();
    Ok((meta, warnings))
}

/// The request of `dsh workflow run`, and how a resume of it gets its
/// provider back.
pub fn build(a: &RunArgs) -> Result<Built, CliError> {
    if a.dry_run && a.fixture.is_some() {
        return Err(CliError::usage(
            "--dry-run and --fixture exclude each other: a dry run answers every agent() call itself, without any provider; drop one of them",
        ));
    }
    if a.provider.is_some() && (a.fixture.is_some() || a.dry_run) {
        return Err(CliError::usage(format!(
            "--provider and {} exclude each other: the fixture or the dry run answers every \
             agent() call; drop one of them",
            if a.dry_run { "--dry-run" } else { "--fixture" }
        )));
    }
    let config = load_config(a.config.as_deref())?;
    let store = store_url(a.store.as_deref(), &config)?;
    if store.is_some() && a.no_journal {
        return Err(CliError::usage(
            "--no-journal and a store exclude each other: a run kept in a store is journaled \
             there; drop --no-journal, or the store (--store, DSH_STORE, [store] url)",
        ));
    }
    let sandbox = a
        .sandbox
        .map(|a| a.0)
        .or(config.workflow.sandbox)
        .unwrap_or(SandboxPolicy::BestEffort);
    // The worker `main` forked gets its policy now, so that its sandbox
    // and engine build run beside the rest of this preparation, the run
    // directory and the script's parse. Without one (`resume`, a
    // `DSH_WORKER` program, a fork that failed) start() spawns the worker:
    // spawning it here ahead made no difference beyond the noise
    // (docs/performance.md).
    let worker = worker()?;
    let ahead =
        take_preforked().and_then(|forked| SpawnedWorker::adopt(forked, &worker, sandbox).ok());
    let limits = limits(a, config.workflow.limits())?;
    let args = args(a)?;

    let catalog = catalog(&config);
    let script = script_path(&a.script, &catalog)?;
    let mut req = StartRequest::from_path(&script, &limits)?
        .with_catalog(catalog.with_max_script_bytes(limits.max_script_bytes))
        .with_limits(limits)
        .with_args(args)
        .with_meta_fallback(Meta::default_for(&script))
        .with_worker(worker)
        .with_sandbox(sandbox);
    if let Some(ahead) = ahead {
        req = req.with_spawned_worker(ahead);
    }
    let mut note = None;
    let answering;
    let spec = if a.dry_run {
        let items = a
            .dry_run_items
            .unwrap_or(dsh_orchestrator::providers::dry_run::DEFAULT_ITEMS);
        answering = Answering::Scripted(
            Arc::new(DryRunProvider::new().with_items(items)),
            agent_types(&config),
        );
        ProviderSpec::DryRun
    } else if let Some(f) = &a.fixture {
        answering = Answering::Scripted(fixture(f)?, agent_types(&config));
        ProviderSpec::Fixture(absolute(f).display().to_string())
    } else {
        let pick = default_provider(&config, a.provider.clone(), |k| std::env::var_os(k));
        let router = providers_router(&config, pick.name.clone(), Some(sandbox), pick.from_key)?
            .with_keys_set(pick.competing);
        answering = Answering::Router(router);
        note = pick.note;
        ProviderSpec::Configured {
            config: config
                .path
                .as_deref()
                .map(absolute)
                .map(|p| p.display().to_string()),
            // The provider a key chose is recorded as if named, so a
            // resume asks the same one whatever keys are set then.
            provider: pick.name,
        }
    };
    Ok(Built {
        req,
        answering,
        spec,
        start_note: note,
        store,
        telemetry: config.telemetry.clone(),
    })
}

/// The store runs are kept in, if any: `--store`, else `DSH_STORE`, else
/// `[store] url` of `config`. A bad URL names where it came from.
pub fn store_url(flag: Option<&str>, config: &Config) -> Result<Option<StoreUrl>, CliError> {
    let env = std::env::var("DSH_STORE").ok().filter(|v| !v.is_empty());
    let (url, from) = match (flag, env, &config.store_url) {
        (Some(u), _, _) => (u.to_string(), "--store".to_string()),
        (None, Some(u), _) => (u, "DSH_STORE".to_string()),
        (None, None, Some(u)) => (u.clone(), format!("{}: store.url", config.location())),
        (None, None, None) => return Ok(None),
    };
    StoreUrl::parse(&url, |k| std::env::var(k).ok())
        .map(Some)
        .map_err(|e| {
            let code = if from.ends_with("store.url") {
                ErrorCode::ConfigInvalid
            } else {
                ErrorCode::Usage
            };
            CliError::new(code, format!("{from}: {e}"))
        })
}

/// Connects to the store named by `url` (`from`: where it was named).
pub async fn open_store(url: &StoreUrl) -> Result<dsh_store::Store, CliError> {
    dsh_store::Store::open(url).await.map_err(|e| {
        CliError::usage(format!(
            "{e}; check that the server is up and the URL (or the PG* variables) is right"
        ))
    })
}

/// What [`build`] makes of the flags: the request (its provider is
/// composed later, with the run's journal: [`crate::stack`]), what answers
/// its calls, how a resume gets that back, and what the start line adds
/// (the provider a key chose).
pub struct Built {
    pub req: StartRequest,
    pub answering: Answering,
    pub spec: ProviderSpec,
    /// Said after the start line in the readable modes, e.g.
    /// `provider deepseek (DEEPSEEK_API_KEY is set; no provider is configured)`.
    pub start_note: Option<String>,
    /// The store the run is kept in instead of a run directory.
    pub store: Option<StoreUrl>,
    /// `[telemetry]`, under the `OTEL_*` variables.
    pub telemetry: dsh_orchestrator::config::Telemetry,
}

/// The default provider of a run: `--provider`, else `workflow.provider`,
/// else — the README's promise that an exported `DEEPSEEK_API_KEY` is all
/// it takes — the one API provider whose key is set (`env`). With several
/// keys set there is no default, and a call without a provider says how
/// to choose.
struct DefaultPick {
    /// The provider to use as the default.
    name: Option<String>,
    /// The variable whose key chose `name`.
    from_key: Option<String>,
    /// With no default: the providers whose keys are set, when several.
    competing: Vec<(String, String)>,
    /// What the start line says about it.
    note: Option<String>,
}

fn default_provider(
    config: &Config,
    flag: Option<String>,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> DefaultPick {
    let none = |name| DefaultPick {
        name,
        from_key: None,
        competing: Vec::new(),
        note: None,
    };
    if flag.is_some() || config.workflow.provider.is_some() {
        return none(flag);
    }
    let mut keyed = config.providers_with_keys(env);
    match keyed.len() {
        0 => none(None),
        1 => {
            let (name, var) = keyed.remove(0);
            DefaultPick {
                note: Some(format!(
                    "provider {name} ({var} is set; no provider is configured)"
                )),
                name: Some(name),
                from_key: Some(var),
                competing: Vec::new(),
            }
        }
        _ => DefaultPick {
            name: None,
            from_key: None,
            note: Some(format!(
                "no default provider: several API keys are set ({}); choose one with --provider \
                 NAME or workflow.provider in dsh.toml",
                router::keyed_list(&keyed)
            )),
            competing: keyed,
        },
    }
}

/// `dsh.toml`'s limits with the flags on top, validated; a bad value names
/// the flag it came from.
fn limits(a: &RunArgs, mut limits: Limits) -> Result<Limits, CliError> {
    if let Some(n) = a.max_concurrent {
        limits.max_concurrent_agents = n;
    }
    if let Some(n) = a.max_agents {
        limits.max_total_agents = n;
    }
    if a.timeout.is_some() {
        limits.wall_timeout = a.timeout;
    }
    if let Some(g) = a.grace {
        limits.dispose_grace = g;
    }
    if let Some(s) = a.sync_timeout {
        limits.sync_timeout = s;
    }
    if a.budget.is_some() {
        limits.budget_tokens = a.budget;
    }
    if a.budget_usd.is_some() {
        limits.budget_usd = a.budget_usd;
    }
    if let Some(m) = a.memory {
        limits.memory_bytes = m;
    }
    if let Some(l) = a.log_limit {
        limits.log_bytes = l;
    }
    if a.compute_timeout.is_some() {
        limits.compute = a.compute_timeout;
    }
    limits.validate().map_err(|e| {
        let flag = match e.knob {
            "maxConcurrentAgents" => "--max-concurrent",
            "maxTotalAgents" => "--max-agents",
            "wallTimeoutMs" => "--timeout",
            "syncTimeoutMs" => "--sync-timeout",
            "memoryBytes" => "--memory",
            "computeMs" => "--compute-timeout",
            other => other,
        };
        CliError::usage(format!("{flag}: {}", e.message))
    })?;
    Ok(limits)
}

/// `--args`, `--args-text` or `--args-file` (clap allows one at most),
/// nested at most [`MAX_JSON_DEPTH`](dsh_orchestrator::limits::MAX_JSON_DEPTH)
/// levels deep.
fn args(a: &RunArgs) -> Result<ArgsInput, CliError> {
    let input = args_input(a)?;
    if let ArgsInput::Json(v) = &input {
        let depth = dsh_orchestrator::limits::json_depth(v);
        let max = dsh_orchestrator::limits::MAX_JSON_DEPTH;
        if depth > max {
            let flag = if a.args.is_some() {
                "--args"
            } else {
                "--args-file"
            };
            return Err(CliError::usage(format!(
                "{flag}: the JSON nests arrays and objects {depth} levels deep; at most {max} are \
                 accepted (the run directory keeps the args and must read them back); pass a \
                 flatter value"
            )));
        }
    }
    Ok(input)
}

fn args_input(a: &RunArgs) -> Result<ArgsInput, CliError> {
    if let Some(json) = &a.args {
        return serde_json::from_str::<Value>(json)
            .map(ArgsInput::Json)
            .map_err(|e| {
                // The usual cause is plain text given where JSON is
                // expected (`--args "fix the bug"`): name the flag that
                // takes text as it is.
                CliError::usage(format!(
                    "--args: not valid JSON: {e}; to pass the args as a plain string, use \
                     --args-text instead (or give --args a JSON string, '\"...\"')"
                ))
            });
    }
    if let Some(text) = &a.args_text {
        return Ok(ArgsInput::Text(text.clone()));
    }
    if let Some(path) = &a.args_file {
        let text = files::read_text(path, files::ARGS_LIMIT).map_err(|e| {
            CliError::usage(format!("--args-file {}: cannot read: {e}", path.display()))
        })?;
        return serde_json::from_str::<Value>(&text)
            .map(ArgsInput::Json)
            .map_err(|e| {
                CliError::usage(format!(
                    "--args-file {}: not valid JSON: {e}",
                    path.display()
                ))
            });
    }
    Ok(ArgsInput::None)
}

/// A fixture named by `--fixture`: a missing file is a usage error
/// (contract §12); a file that is there but wrong is `FIXTURE_INVALID`.
pub fn fixture(path: &Path) -> Result<Arc<dyn SubagentProvider>, CliError> {
    let text = files::read_text(path, files::FIXTURE_LIMIT)
        .map_err(|e| CliError::usage(format!("--fixture {}: cannot read: {e}", path.display())))?;
    let p = ScriptedProvider::from_json_text(&path.display().to_string(), &text)
        .map_err(|e| CliError::new(ErrorCode::FixtureInvalid, e.to_string()))?;
    Ok(Arc::new(p))
}

/// What answers a resumed run's calls: `--fixture`, else what the run
/// used (its fixture, the dry run, or its configuration and provider).
///
/// The run directory is data, not the user's word: a configuration that
/// `run.json` names is used only when it is the one the user names now —
/// `--config`, or the `dsh.toml` found from the working directory — so an
/// edited `run.json` cannot make a resume run another configuration's
/// commands.
pub fn resume_provider(
    flag: Option<&Path>,
    config_flag: Option<&Path>,
    spec: &ProviderSpec,
) -> Result<Answering, CliError> {
    let scripted = |p: Arc<dyn SubagentProvider>| -> Result<Answering, CliError> {
        Ok(Answering::Scripted(
            p,
            agent_types(&load_config(config_flag)?),
        ))
    };
    Ok(match (flag, spec) {
        (Some(f), _) => scripted(fixture(f)?)?,
        (None, ProviderSpec::Fixture(f)) => scripted(fixture(Path::new(f))?)?,
        (None, ProviderSpec::DryRun) => scripted(Arc::new(DryRunProvider::new()))?,
        (None, ProviderSpec::None) => Answering::Nothing,
        (None, ProviderSpec::Configured { config, provider }) => {
            let config = match config {
                None => Config::builtin(),
                Some(c) => {
                    let path = Path::new(c);
                    if !path.is_file() {
                        return Err(CliError::usage(format!(
                            "the run's configuration file {c} is gone; restore it, or pass \
                             --fixture FILE to answer the calls that are not replayed"
                        )));
                    }
                    let named = match config_flag {
                        Some(p) => Some(p.to_path_buf()),
                        None => std::env::current_dir()
                            .ok()
                            .and_then(|d| config::discover(&d)),
                    };
                    let same = |a: &Path, b: &Path| {
                        matches!(
                            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
                            (Ok(x), Ok(y)) if x == y
                        )
                    };
                    if !named.as_deref().is_some_and(|n| same(n, path)) {
                        return Err(CliError::usage(format!(
                            "the run's configuration file {c} is not the one named now ({}); a \
                             run directory does not choose what runs: resume from the directory \
                             whose dsh.toml the run used, pass --config {c}, or pass --fixture \
                             FILE",
                            named.map_or_else(
                                || "none found from the working directory".to_string(),
                                |n| n.display().to_string()
                            )
                        )));
                    }
                    load_config(Some(path))?
                }
            };
            Answering::Router(providers_router(&config, provider.clone(), None, None)?)
        }
        (None, other) => {
            return Err(CliError::usage(format!(
                "the run was answered by a provider this dsh does not know how to make again \
                 ({other:?}); pass --fixture FILE to answer the calls that are not replayed"
            )));
        }
    })
}

/// This machine's name and this process's id: how a store names the
/// process that holds a run (`owner`).
pub fn host_name() -> String {
    format!(
        "{}:{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "host".into()),
        std::process::id()
    )
}

/// The saved workflows of the CLI: the project's `.claude/workflows/` (the
/// working directory's), the user's `~/.claude/workflows/`, then dsh's own
/// `workflows/` beside the `dsh.toml` in use (or in the working directory
/// when there is none).
pub fn catalog(config: &Config) -> Catalog {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let dsh_dir = config
        .path
        .as_deref()
        .and_then(Path::parent)
        .map_or_else(|| cwd.clone(), Path::to_path_buf)
        .join("workflows");
    Catalog::standard(&cwd, home.as_deref(), Some(&dsh_dir))
}

/// The catalog for a command that has only the `--config` flag.
pub fn catalog_for(config_flag: Option<&Path>) -> Result<Catalog, CliError> {
    Ok(catalog(&load_config(config_flag)?))
}

/// The script `run` names: a file, or — when no such file exists and the
/// argument is a bare name (no directory, no extension) — the saved
/// workflow of that name.
fn script_path(arg: &Path, catalog: &Catalog) -> Result<PathBuf, CliError> {
    let bare = arg.components().count() == 1 && arg.extension().is_none();
    if !bare || arg.exists() {
        return Ok(arg.to_path_buf());
    }
    let name = arg.to_string_lossy();
    if let Some(entry) = catalog.find(&name) {
        if let Some(why) = catalog.refusal(&entry) {
            return Err(CliError::usage(why));
        }
        return Ok(entry.path);
    }
    Err(CliError::usage(format!(
        "{name}: no such file, and no saved workflow has that name; {}; give a script's path, \
         or see `dsh workflow list`",
        catalog.known()
    )))
}

/// `--config PATH`, else `dsh.toml` from the working directory upward,
/// else the built-in providers.
pub(crate) fn load_config(explicit: Option<&Path>) -> Result<Config, CliError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    Ok(Config::load(explicit, &cwd)?)
}

/// The run's agent types: the built-ins, `<cwd>/.claude/agents/*.md`,
/// `$HOME/.claude/agents/*.md` and `config`'s `[agent_types.NAME]`.
pub(crate) fn agent_types(config: &Config) -> AgentTypes {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    AgentTypes::resolve(config, &agent_types::default_dirs(&cwd))
}

/// The router a host answers a submitted run's calls with: this host's
/// configured providers, `provider` (the one the submitter chose) as the
/// default.
pub fn host_router(config: &Config, provider: Option<String>) -> Result<Router, CliError> {
    providers_router(config, provider, None, None)
}

/// The router over the configured providers, with `flag` (`--provider`)
/// as the default when given. The default provider is built now: a missing
/// key or program stops the run before it starts.
/// The configured providers behind the run's agent types. The agent
/// loop's tools run in `dsh __worker tool` (or `DSH_WORKER tool`) under
/// `sandbox` (default: the configuration's `workflow.sandbox`, else
/// best-effort).
fn providers_router(
    config: &Config,
    flag: Option<String>,
    sandbox: Option<SandboxPolicy>,
    from_key: Option<String>,
) -> Result<Router, CliError> {
    let mut config = config.clone();
    config.set_tool_host(&ToolHost {
        command: Some(worker()?),
        sandbox: sandbox
            .or(config.workflow.sandbox)
            .unwrap_or(SandboxPolicy::BestEffort),
    });
    let config = &config;
    if let Some(p) = &flag
        && !config.providers.contains_key(p)
    {
        return Err(CliError::usage(format!(
            "--provider: unknown provider {p:?}; known providers: {} (define more in {})",
            config.provider_names().join(", "),
            config.path.as_ref().map_or_else(
                || config::FILE_NAME.to_string(),
                |p| p.display().to_string()
            )
        )));
    }
    let where_ = if let Some(var) = from_key {
        format!(
            "provider {} (chosen because {var} is set and no provider is configured)",
            flag.as_deref().unwrap_or_default()
        )
    } else if flag.is_some() {
        "--provider".to_string()
    } else {
        format!("{}: workflow.provider", config.location())
    };
    let router = Router::new(config, flag).with_agent_types(&agent_types(config));
    router
        .check_default()
        .map_err(|m| CliError::new(ErrorCode::ConfigInvalid, format!("{where_}: {m}")))?;
    Ok(router)
}

/// The worker `main` forked for this run (see [`prefork_worker`]), until
/// [`build`] takes it.
static PREFORKED: std::sync::Mutex<Option<ForkedWorker>> = std::sync::Mutex::new(None);

/// Forks this process into the worker of the run it is about to make
/// (`dsh_worker::prefork`: no second exec of this binary; about 1 ms of a
/// `dsh workflow run`, docs/performance.md). Not when `DSH_WORKER` names
/// another worker program. A fork that fails costs nothing: the run
/// spawns its worker as before. A worker no run takes (a usage error,
/// `--help`) dies with this process, by its parent-death signal.
///
/// Must be called while the process has one thread: first thing in
/// `main`.
pub fn prefork_worker() {
    if std::env::var_os("DSH_WORKER").is_some() {
        return;
    }
    // A fork that fails has nothing to report: the run spawns its worker
    // and says why if that fails too.
    // SAFETY: called first thing in `main`, before the runtime or any
    // other thread exists (see above).
    if let Ok(p) = unsafe { dsh_worker::prefork::prefork() }
        && let Ok(mut slot) = PREFORKED.lock()
    {
        *slot = Some(ForkedWorker {
            pid: p.pid,
            socket: p.socket,
            stderr: p.stderr,
        });
    }
}

/// The worker forked by [`prefork_worker`], for the run's default worker
/// (`dsh` itself) only.
fn take_preforked() -> Option<ForkedWorker> {
    PREFORKED.lock().ok()?.take()
}

/// The worker for CLI runs: the program `DSH_WORKER` names, else `dsh`
/// itself (it is also a worker). A separately built `dsh-worker` next to
/// `dsh` is deliberately not preferred: a stale one left in the target
/// directory would run old hook code with a matching protocol version.
pub fn worker() -> Result<WorkerCommand, CliError> {
    if std::env::var_os("DSH_WORKER").is_some() {
        return Ok(WorkerCommand::resolve()?);
    }
    std::env::current_exe()
        .map(WorkerCommand::dsh)
        .map_err(|e| {
            CliError::new(
                ErrorCode::WorkerExited,
                format!("cannot locate the dsh executable: {e}"),
            )
        })
}
