//! The `dsh` command line: `dsh workflow run | check | types`.
//!
//! Everything here is the binary edge: it turns flags into a
//! [`StartRequest`](crate::StartRequest), renders events and the result,
//! and maps outcomes to exit codes (contract §12). Errors that prevent a run
//! print `error[CODE]: …` on stderr with an empty stdout and exit 2.

mod progress;
mod runs_cmd;
mod test_cmd;
mod units;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use dsh_protocol::{ErrorCode, StopReason};
use serde_json::Value;

use crate::providers::scripted::ScriptedProvider;
use crate::run::{ArgsInput, StartRequest, WorkerCommand, start};
use crate::script::Meta;
use crate::{Limits, RunResult};

pub use units::{parse_duration, parse_size};

/// Exit codes (contract §12).
pub mod exit {
    pub const COMPLETED: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const NOT_STARTED: i32 = 2;
    pub const TIMEOUT: i32 = 124;
    pub const CANCELLED: i32 = 130;
}

const TYPES: &str = include_str!("types.d.ts");

#[derive(Parser, Debug)]
#[command(
    name = "dsh",
    version,
    about = "Run TypeScript workflow scripts in supervised worker processes"
)]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand, Debug)]
enum Top {
    /// Workflow scripts: run, check, print the globals' types.
    Workflow {
        #[command(subcommand)]
        command: WorkflowCmd,
    },
}

#[derive(Subcommand, Debug)]
enum WorkflowCmd {
    /// Run a workflow script.
    Run(Box<RunArgs>),
    /// Parse a script and validate its meta, without running it.
    Check {
        /// The script (.ts, .mts, .js, .mjs).
        script: PathBuf,
    },
    /// Print the TypeScript declarations of the script globals.
    Types,
    /// Run workflows against their fixtures and compare with expected results.
    Test(test_cmd::TestArgs),
    /// List recent runs from their journals.
    Runs(runs_cmd::RunsArgs),
    /// Print one run's result and its agents.
    Show(runs_cmd::ShowArgs),
    /// Re-run a run, replaying the agent answers its journal holds.
    Resume(Box<runs_cmd::ResumeArgs>),
    /// List the configured providers and whether each is usable (never calls them).
    Providers {
        /// Configuration file (default: dsh.toml from the working directory upward).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum EventsMode {
    Jsonl,
    Pretty,
    None,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputMode {
    Value,
    Result,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The script (.ts, .mts, .js, .mjs).
    script: PathBuf,
    /// The script's `args` as JSON.
    #[arg(long, value_name = "JSON", group = "input")]
    args: Option<String>,
    /// The script's `args` as a string.
    #[arg(long, value_name = "TEXT", group = "input")]
    args_text: Option<String>,
    /// Read the script's `args` as JSON from a file.
    #[arg(long, value_name = "PATH", group = "input")]
    args_file: Option<PathBuf>,
    /// Answer agent() calls from this fixture file.
    #[arg(long, value_name = "FILE")]
    fixture: Option<PathBuf>,
    /// The default provider, by name (dsh.toml's [providers.NAME], or built-in deepseek/openai).
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// Write every agent() answer of this run to a fixture file (replay it with --fixture).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    runs_dir: Option<PathBuf>,
    /// Keep no run directory and no journal for this run (it cannot be resumed).
    #[arg(long)]
    no_journal: bool,
    /// How events are shown on stderr.
    #[arg(long, value_enum, default_value_t = EventsMode::Pretty)]
    events: EventsMode,
    /// Also write every event as a JSON line to this file, flushed as it happens.
    #[arg(long, value_name = "PATH")]
    events_file: Option<PathBuf>,
    /// What goes to stdout: the value, or the whole result object.
    #[arg(long, value_enum, default_value_t = OutputMode::Value)]
    output: OutputMode,
    /// Configuration file (default: dsh.toml from the working directory upward).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// At most N agents at once (default 16).
    #[arg(long, value_name = "N")]
    max_concurrent: Option<u32>,
    /// At most N agents per run (default and ceiling 1000).
    #[arg(long, value_name = "N")]
    max_agents: Option<u32>,
    /// Wall-clock budget of the whole run, e.g. 30s, 5m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<std::time::Duration>,
    /// Time between a cancel and the forced settle (default 5s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    grace: Option<std::time::Duration>,
    /// Longest synchronous slice of script code (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    sync_timeout: Option<std::time::Duration>,
    /// Output-token budget of the run.
    #[arg(long, value_name = "TOKENS")]
    budget: Option<u64>,
    /// Answer every agent() at once without any provider: placeholder text, or the
    /// smallest value that fits the call's schema (excludes --fixture).
    #[arg(long)]
    dry_run: bool,
    /// Sandbox policy: strict, best-effort (default) or off.
    #[arg(long, value_name = "POLICY")]
    sandbox: Option<String>,
    /// Script heap limit, e.g. 256MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    memory: Option<u64>,
    /// Log text budget of the run, e.g. 1MiB (default); later lines are dropped.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    log_limit: Option<u64>,
    /// CPU-time budget of the script, e.g. 10s (default: none).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    compute_timeout: Option<std::time::Duration>,
    /// Also print diagnostics on stderr: the sandbox the worker reached.
    #[arg(long, short = 'v')]
    verbose: bool,
}

/// A failure before the run exists: `error[CODE]: message`, exit 2.
struct NotStarted {
    code: ErrorCode,
    message: String,
}

impl NotStarted {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        NotStarted {
            code,
            message: message.into(),
        }
    }
}

fn usage(message: impl Into<String>) -> NotStarted {
    NotStarted::new(ErrorCode::Usage, message)
}

fn print_error(code: ErrorCode, message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "error[{code}]: {message}");
}

/// Runs the CLI with `std::env::args()`. Returns the exit code.
pub fn main() -> i32 {
    main_with(std::env::args_os())
}

/// Runs the CLI with the given argv (program name first).
pub fn main_with<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return exit::COMPLETED;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
                return exit::NOT_STARTED;
            }
            let text = e.to_string();
            let text = text.trim_start_matches("error: ").trim_end();
            print_error(ErrorCode::Usage, text);
            return exit::NOT_STARTED;
        }
    };
    init_tracing();
    let Top::Workflow { command } = cli.command;
    match command {
        WorkflowCmd::Types => {
            print!("{TYPES}");
            exit::COMPLETED
        }
        WorkflowCmd::Check { script } => match check(&script) {
            Ok(meta) => {
                println!("{}\n{}", meta.name, meta.description);
                exit::COMPLETED
            }
            Err(e) => {
                print_error(e.code, &e.message);
                exit::NOT_STARTED
            }
        },
        WorkflowCmd::Run(args) => match runtime() {
            Ok(rt) => rt.block_on(run(*args)),
            Err(code) => code,
        },
        WorkflowCmd::Test(args) => match runtime() {
            Ok(rt) => rt.block_on(test_cmd::main(args)),
            Err(code) => code,
        },
        WorkflowCmd::Runs(args) => runs_cmd::runs(args),
        WorkflowCmd::Providers { config } => providers(config.as_deref()),
        WorkflowCmd::Show(args) => runs_cmd::show(args),
        WorkflowCmd::Resume(args) => match runtime() {
            Ok(rt) => rt.block_on(runs_cmd::resume(*args)),
            Err(code) => code,
        },
    }
}

/// The async runtime of the commands that run workflows; `Err` is the exit
/// code after the error was printed.
fn runtime() -> Result<tokio::runtime::Runtime, i32> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            print_error(
                ErrorCode::Usage,
                &format!("cannot start the async runtime: {e}"),
            );
            exit::NOT_STARTED
        })
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The CLI's default meta for a file without one.
fn default_meta(path: &Path) -> Meta {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "workflow".into());
    let file = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| stem.clone());
    Meta {
        name: stem,
        description: format!("workflow {file}"),
        when_to_use: None,
        phases: None,
    }
}

fn load_request(script: &Path, limits: &Limits) -> Result<StartRequest, NotStarted> {
    let req = StartRequest::from_path(script, limits)
        .map_err(|e| NotStarted::new(e.code(), e.to_string()))?;
    Ok(req)
}

fn check(script: &Path) -> Result<Meta, NotStarted> {
    let req = load_request(script, &Limits::default())?;
    let req = req.clone().with_meta_fallback(default_meta(script));
    let (_, meta) =
        crate::run::prepare(&req).map_err(|e| NotStarted::new(e.code(), e.to_string()))?;
    Ok(meta)
}

impl StartRequest {
    /// Uses `meta` only when the file has no meta of its own (the CLI's
    /// defaulting rule).
    fn with_meta_fallback(mut self, meta: Meta) -> Self {
        self.meta_fallback = Some(meta);
        self
    }
}

fn build_request(a: &RunArgs) -> Result<StartRequest, NotStarted> {
    if a.dry_run && a.fixture.is_some() {
        return Err(usage(
            "--dry-run and --fixture exclude each other: a dry run answers every agent() call itself, without any provider; drop one of them",
        ));
    }
    if a.provider.is_some() && (a.fixture.is_some() || a.dry_run) {
        return Err(usage(format!(
            "--provider and {} exclude each other: the fixture or the dry run answers every \
             agent() call; drop one of them",
            if a.dry_run { "--dry-run" } else { "--fixture" }
        )));
    }
    let config = load_config(a.config.as_deref())?;
    let sandbox = match a.sandbox.as_deref() {
        None => config
            .workflow
            .sandbox
            .unwrap_or(dsh_protocol::SandboxPolicy::BestEffort),
        Some("best-effort") => dsh_protocol::SandboxPolicy::BestEffort,
        Some("off") => dsh_protocol::SandboxPolicy::Off,
        Some("strict") => dsh_protocol::SandboxPolicy::Strict,
        Some(other) => {
            return Err(usage(format!(
                "--sandbox: unknown policy {other:?}; use strict, best-effort or off"
            )));
        }
    };
    let mut limits = config.workflow.limits();
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
        usage(format!("{flag}: {}", e.message))
    })?;

    let args = if let Some(json) = &a.args {
        ArgsInput::Json(
            serde_json::from_str::<Value>(json)
                .map_err(|e| usage(format!("--args: not valid JSON: {e}")))?,
        )
    } else if let Some(text) = &a.args_text {
        ArgsInput::Text(text.clone())
    } else if let Some(path) = &a.args_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("--args-file {}: cannot read: {e}", path.display())))?;
        ArgsInput::Json(serde_json::from_str::<Value>(&text).map_err(|e| {
            usage(format!(
                "--args-file {}: not valid JSON: {e}",
                path.display()
            ))
        })?)
    } else {
        ArgsInput::None
    };

    let mut req = load_request(&a.script, &limits)?
        .with_limits(limits)
        .with_args(args)
        .with_meta_fallback(default_meta(&a.script))
        .with_worker(cli_worker()?);
    req.sandbox = sandbox;
    if let Some(f) = &a.fixture {
        // A missing file is a usage error (contract §12); a file that is
        // there but wrong is FIXTURE_INVALID.
        let text = std::fs::read_to_string(f)
            .map_err(|e| usage(format!("--fixture {}: cannot read: {e}", f.display())))?;
        let p = ScriptedProvider::from_json_text(&f.display().to_string(), &text)
            .map_err(|e| NotStarted::new(ErrorCode::FixtureInvalid, e.to_string()))?;
        req = req.with_provider(Arc::new(p));
    }
    if a.dry_run {
        req = req.with_provider(Arc::new(crate::providers::dry_run::DryRunProvider::new()));
    }
    if a.fixture.is_none() && !a.dry_run {
        req = req.with_provider(Arc::new(router(&config, a.provider.clone())?));
    }
    Ok(req)
}

/// `dsh workflow providers`: one line per provider — name, kind, where it
/// is defined, and whether it is usable (key present, program found) —
/// without calling any. The default provider is marked `*`.
fn providers(config: Option<&Path>) -> i32 {
    let config = match load_config(config) {
        Ok(c) => c,
        Err(e) => {
            print_error(e.code, &e.message);
            return exit::NOT_STARTED;
        }
    };
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
        let status = match crate::providers::router::usable(entry) {
            Ok(detail) => format!("usable: {detail}"),
            Err(problem) => format!("not usable: {problem}"),
        };
        let _ = writeln!(
            out,
            "{mark} {name:<14} {:<8} {:<24} {status}",
            entry.kind.kind_name(),
            entry.defined_at
        );
    }
    for (name, route) in &config.agent_types {
        let _ = writeln!(
            out,
            "  agent type {name} → {}{}",
            route
                .provider
                .as_deref()
                .unwrap_or("(the default provider)"),
            route
                .model
                .as_deref()
                .map(|m| format!(", model {m}"))
                .unwrap_or_default()
        );
    }
    exit::COMPLETED
}

/// `--config PATH`, else `dsh.toml` from the working directory upward,
/// else the built-in providers. A missing `--config` file is a usage
/// error; a file that is there but wrong is `CONFIG_INVALID`.
fn load_config(explicit: Option<&Path>) -> Result<crate::config::Config, NotStarted> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    crate::config::Config::load(explicit, &cwd).map_err(|e| {
        let code = if e.location == "--config" {
            ErrorCode::Usage
        } else {
            ErrorCode::ConfigInvalid
        };
        NotStarted::new(code, e.to_string())
    })
}

/// The router over the configured providers, with `flag` (`--provider`)
/// as the default when given. The default provider is built now: a missing
/// key or program stops the run before it starts.
fn router(
    config: &crate::config::Config,
    flag: Option<String>,
) -> Result<crate::providers::router::Router, NotStarted> {
    if let Some(p) = &flag
        && !config.providers.contains_key(p)
    {
        return Err(usage(format!(
            "--provider: unknown provider {p:?}; known providers: {} (define more in {})",
            config.provider_names().join(", "),
            config.path.as_ref().map_or_else(
                || crate::config::FILE_NAME.to_string(),
                |p| p.display().to_string()
            )
        )));
    }
    let where_ = if flag.is_some() {
        "--provider".to_string()
    } else {
        format!("{}: workflow.provider", config.location())
    };
    let router = crate::providers::router::Router::new(config, flag);
    router
        .check_default()
        .map_err(|m| NotStarted::new(ErrorCode::ConfigInvalid, format!("{where_}: {m}")))?;
    Ok(router)
}

/// The worker for CLI runs: the program `DSH_WORKER` names, else `dsh`
/// itself (it is also a worker). A separately built `dsh-worker` next to
/// `dsh` is deliberately not preferred: a stale one left in the target
/// directory would run old hook code with a matching protocol version.
fn cli_worker() -> Result<WorkerCommand, NotStarted> {
    if std::env::var_os("DSH_WORKER").is_some() {
        return WorkerCommand::resolve().map_err(|m| NotStarted::new(ErrorCode::Usage, m));
    }
    std::env::current_exe()
        .map(WorkerCommand::dsh)
        .map_err(|e| {
            NotStarted::new(
                ErrorCode::WorkerExited,
                format!("cannot locate the dsh executable: {e}"),
            )
        })
}

async fn run(a: RunArgs) -> i32 {
    let mut req = match build_request(&a) {
        Ok(r) => r,
        Err(e) => {
            print_error(e.code, &e.message);
            return exit::NOT_STARTED;
        }
    };
    let show = Presentation {
        events: a.events,
        events_file: a.events_file.clone(),
        output: a.output,
        verbose: a.verbose,
    };
    let events_file = match show.open_events_file() {
        Ok(f) => f,
        Err(code) => return code,
    };
    let spec = if a.dry_run {
        runs_cmd::ProviderSpec::DryRun
    } else if let Some(f) = &a.fixture {
        runs_cmd::ProviderSpec::Fixture(absolute(f).display().to_string())
    } else {
        runs_cmd::ProviderSpec::Configured {
            config: a
                .config
                .as_deref()
                .map(absolute)
                .or_else(|| {
                    std::env::current_dir()
                        .ok()
                        .and_then(|d| crate::config::discover(&d))
                })
                .map(|p| p.display().to_string()),
            provider: a.provider.clone(),
        }
    };
    let durable = runs_cmd::Durable::new_run(
        &mut req,
        &a.script,
        spec,
        a.runs_dir.as_deref(),
        !a.no_journal,
        a.record.clone(),
    );
    execute(req, durable, &show, events_file).await
}

/// `path` made absolute against the working directory.
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

/// How a run is shown: shared by `run` and `resume`.
struct Presentation {
    events: EventsMode,
    events_file: Option<PathBuf>,
    output: OutputMode,
    verbose: bool,
}

impl Presentation {
    /// Creates `--events-file`; `Err` is the exit code after the error
    /// was printed.
    fn open_events_file(&self) -> Result<Option<std::fs::File>, i32> {
        match &self.events_file {
            None => Ok(None),
            Some(p) => std::fs::File::create(p).map(Some).map_err(|e| {
                print_error(
                    ErrorCode::Usage,
                    &format!("--events-file {}: cannot create: {e}", p.display()),
                );
                exit::NOT_STARTED
            }),
        }
    }
}

/// Starts the run, shows its events, handles signals, keeps its run
/// directory, and prints the result. Returns the exit code.
async fn execute(
    req: StartRequest,
    durable: runs_cmd::Durable,
    show: &Presentation,
    mut events_file: Option<std::fs::File>,
) -> i32 {
    // Signals first, so a Ctrl-C during start-up is not lost.
    let signals = Signals::install();
    let run = match start(req) {
        Ok(r) => r,
        Err(e) => {
            durable.abandon();
            print_error(e.code(), &e.to_string());
            return exit::NOT_STARTED;
        }
    };
    durable.started(&run);
    let mode = match show.events {
        EventsMode::Jsonl => progress::Mode::Jsonl,
        EventsMode::None => progress::Mode::None,
        EventsMode::Pretty => progress::Mode::Lines {
            color: std::io::stderr().is_terminal(),
        },
    };
    let mut events = run.subscribe();
    let mut signals = signals;
    let mut interrupts = 0u32;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(ev) => {
                    if let Some(f) = events_file.as_mut() {
                        let _ = writeln!(f, "{}", ev.to_json());
                        let _ = f.flush();
                    }
                    progress::show(&mode, &ev);
                }
                None => break,
            },
            _ = signals.next() => {
                interrupts += 1;
                if interrupts == 1 {
                    run.cancel("interrupted by signal");
                } else {
                    run.terminate();
                }
            }
        }
    }
    let result = run.dispose().await;
    durable.finish(&result).await;
    if show.verbose {
        print_sandbox(&result);
    }
    report(&result, show.output)
}

/// `--verbose`: the sandbox the worker reached, e.g.
/// `dsh: sandbox full (Landlock ABI 7): rlimit:core=0, …`.
fn print_sandbox(result: &RunResult) {
    let line = match &result.sandbox {
        None => "dsh: sandbox: unknown (the worker did not get as far as reporting it)".to_string(),
        Some(s) => {
            let abi = s.landlock_abi.map_or_else(
                || "Landlock not tried".to_string(),
                |n| format!("Landlock ABI {n}"),
            );
            let mut line = format!(
                "dsh: sandbox {} ({abi}); enforced: {}",
                crate::result::sandbox_level_str(s.level),
                if s.enforced.is_empty() {
                    "nothing".to_string()
                } else {
                    s.enforced.join(", ")
                }
            );
            if !s.missing.is_empty() {
                line.push_str(&format!("; not enforced: {}", s.missing.join("; ")));
            }
            line
        }
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn report(result: &RunResult, output: OutputMode) -> i32 {
    let out = match output {
        OutputMode::Value => &result.value,
        OutputMode::Result => &result.to_json(),
    };
    let text = serde_json::to_string_pretty(out).unwrap_or_else(|_| "null".into());
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{text}");
        let _ = stdout.flush();
    }
    if let Some(e) = &result.error {
        print_error(e.code, &e.message);
    }
    match result.stop_reason {
        StopReason::Completed => exit::COMPLETED,
        StopReason::Error => exit::ERROR,
        StopReason::Cancelled => match &result.error {
            Some(e) if e.code == ErrorCode::Timeout => exit::TIMEOUT,
            _ => exit::CANCELLED,
        },
    }
}

/// SIGINT and SIGTERM as one stream.
struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    async fn next(&mut self) {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    if s.recv().await.is_none() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.int) => {}
            _ = recv(&mut self.term) => {}
        }
    }
}
