//! From flags to a validated request: the configuration file, the limits
//! with their flag overrides, the args, the provider and the worker — and
//! the commands that need nothing more (`check`, `providers`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_orchestrator::config::{self, Config};
use dsh_orchestrator::files;
use dsh_orchestrator::journal::ProviderSpec;
use dsh_orchestrator::journal::durable::absolute;
use dsh_orchestrator::providers::dry_run::DryRunProvider;
use dsh_orchestrator::providers::router::{self, Router};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{
    ArgsInput, ErrorCode, Limits, Meta, SandboxPolicy, StartRequest, SubagentProvider,
    WorkerCommand,
};
use serde_json::Value;

use crate::error::{CliError, exit};
use crate::flags::RunArgs;

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

/// `dsh workflow check`: the script's meta (or the file-stem default).
pub fn check(script: &Path) -> Result<Meta, CliError> {
    let req = StartRequest::from_path(script, &Limits::default())?
        .with_meta_fallback(Meta::default_for(script));
    let (_, meta) = dsh_orchestrator::prepare(&req)?;
    Ok(meta)
}

/// The request of `dsh workflow run`, and how a resume of it gets its
/// provider back.
pub fn build(a: &RunArgs) -> Result<(StartRequest, ProviderSpec), CliError> {
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
    let sandbox = a
        .sandbox
        .map(|a| a.0)
        .or(config.workflow.sandbox)
        .unwrap_or(SandboxPolicy::BestEffort);
    let limits = limits(a, config.workflow.limits())?;
    let args = args(a)?;

    let mut req = StartRequest::from_path(&a.script, &limits)?
        .with_limits(limits)
        .with_args(args)
        .with_meta_fallback(Meta::default_for(&a.script))
        .with_worker(worker()?)
        .with_sandbox(sandbox);
    let spec = if a.dry_run {
        req = req.with_provider(Arc::new(DryRunProvider::new()));
        ProviderSpec::DryRun
    } else if let Some(f) = &a.fixture {
        req.provider = Some(fixture(f)?);
        ProviderSpec::Fixture(absolute(f).display().to_string())
    } else {
        req = req.with_provider(Arc::new(providers_router(&config, a.provider.clone())?));
        ProviderSpec::Configured {
            config: config
                .path
                .as_deref()
                .map(absolute)
                .map(|p| p.display().to_string()),
            provider: a.provider.clone(),
        }
    };
    Ok((req, spec))
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
            .map_err(|e| CliError::usage(format!("--args: not valid JSON: {e}")));
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

/// The answering side of a resumed run: `--fixture`, else what the run
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
) -> Result<Option<Arc<dyn SubagentProvider>>, CliError> {
    Ok(match (flag, spec) {
        (Some(f), _) => Some(fixture(f)?),
        (None, ProviderSpec::Fixture(f)) => Some(fixture(Path::new(f))?),
        (None, ProviderSpec::DryRun) => Some(Arc::new(DryRunProvider::new())),
        (None, ProviderSpec::None) => None,
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
            Some(Arc::new(providers_router(&config, provider.clone())?))
        }
        (None, other) => {
            return Err(CliError::usage(format!(
                "the run was answered by a provider this dsh does not know how to make again \
                 ({other:?}); pass --fixture FILE to answer the calls that are not replayed"
            )));
        }
    })
}

/// `--config PATH`, else `dsh.toml` from the working directory upward,
/// else the built-in providers.
fn load_config(explicit: Option<&Path>) -> Result<Config, CliError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    Ok(Config::load(explicit, &cwd)?)
}

/// The router over the configured providers, with `flag` (`--provider`)
/// as the default when given. The default provider is built now: a missing
/// key or program stops the run before it starts.
fn providers_router(config: &Config, flag: Option<String>) -> Result<Router, CliError> {
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
    let where_ = if flag.is_some() {
        "--provider".to_string()
    } else {
        format!("{}: workflow.provider", config.location())
    };
    let router = Router::new(config, flag);
    router
        .check_default()
        .map_err(|m| CliError::new(ErrorCode::ConfigInvalid, format!("{where_}: {m}")))?;
    Ok(router)
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

/// A per-call bound as `providers` shows it: `300s`, or `1500ms`.
fn secs(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `dsh workflow providers`: one line per provider — name, kind, where it
/// is defined, and whether it is usable (key present, program found) —
/// without calling any. The default provider is marked `*`.
pub fn providers(config: Option<&Path>) -> Result<i32, CliError> {
    let config = load_config(config)?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "configuration: {}", config.location());
    let _ = writeln!(
        out,
        "  {:<14} {:<8} {:<24} STATUS",
        "NAME", "KIND", "DEFINED AT"
    );
    for (name, entry) in &config.providers {
        let mark = if config.workflow.provider.as_deref() == Some(name) {
            "*"
        } else {
            " "
        };
        let status = match router::usable(entry) {
            Ok(detail) => format!("usable: {detail}"),
            Err(problem) => format!("not usable: {problem}"),
        };
        let stall = entry
            .stall
            .map(|d| format!(" (stall {})", secs(d)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{mark} {name:<14} {:<8} {:<24} {status}{stall}",
            entry.kind.kind_name(),
            entry.defined_at
        );
    }
    for (name, route) in &config.agent_types {
        let _ = writeln!(
            out,
            "  agent type {name} → {}{}{}{}",
            route
                .provider
                .as_deref()
                .unwrap_or("(the default provider)"),
            route
                .model
                .as_deref()
                .map(|m| format!(", model {m}"))
                .unwrap_or_default(),
            route
                .stall
                .map(|d| format!(", stall {}", secs(d)))
                .unwrap_or_default(),
            route
                .timeout
                .map(|d| format!(", timeout {}", secs(d)))
                .unwrap_or_default()
        );
    }
    Ok(exit::COMPLETED)
}
