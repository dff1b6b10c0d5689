//! The raw command line, exactly as clap parses it: no file is read and no
//! flag is combined with another here ([`crate::request`] does that).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use dsh_orchestrator::SandboxPolicy;
use dsh_orchestrator::units::{parse_duration, parse_size};

use crate::error::{exit, print_error};

#[derive(Parser, Debug)]
#[command(
    name = "dsh",
    version,
    about = "Run TypeScript workflow scripts in supervised worker processes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Top,
}

#[derive(Subcommand, Debug)]
pub enum Top {
    /// Workflow scripts: run, check, types, test, runs, show, report, resume, submit, host, wait, attach, cancel, mcp, serve, providers, list, agents.
    Workflow {
        #[command(subcommand)]
        command: WorkflowCmd,
    },
    /// Print a completion script for SHELL, e.g. `dsh completions bash > ~/.local/share/bash-completion/completions/dsh`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print dsh's man page (roff), e.g. `dsh man > ~/.local/share/man/man1/dsh.1`.
    Man,
}

#[derive(Subcommand, Debug)]
pub enum WorkflowCmd {
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
    Test(TestArgs),
    /// List recent runs from their journals.
    Runs(RunsArgs),
    /// Print one run's result and its agents, with timings, tokens and a timeline.
    Show(ShowArgs),
    /// Write one run as a self-contained HTML report (timeline, prompts, answers).
    Report(ReportArgs),
    /// Re-run a run, replaying the agent answers its journal holds.
    Resume(Box<ResumeArgs>),
    /// Submit a run to a store's hosts; prints its id (docs/scale.md).
    Submit(Box<RunArgs>),
    /// Run the runs submitted to a store, as many at once as --runs says, until SIGTERM.
    Host(HostArgs),
    /// Wait for a run (detached, or submitted to a store) to settle, showing it as `run` does; print and exit as `run` would.
    Wait(WaitArgs),
    /// Show the live view of a running run (detached, or in a store) until it ends; print and exit as `run` would.
    Attach(WaitArgs),
    /// Ask the process running a run (detached, or in a store) to cancel it.
    Cancel(CancelArgs),
    /// Serve workflows as MCP tools to an agent (Claude Code, Codex and others): stdio, or --http ADDR.
    Mcp(McpArgs),
    /// Serve the live web view of the runs (a list, and each run's timeline as it runs) on 127.0.0.1.
    Serve(ServeArgs),
    /// List the configured providers and whether each is usable (never calls them).
    Providers {
        /// Configuration file (default: dsh.toml from the working directory upward).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Print one JSON document instead of the text view.
        #[arg(long)]
        json: bool,
    },
    /// List the saved workflows (`run NAME`, `workflow("NAME")`) and where each came from.
    List {
        /// Configuration file (default: dsh.toml from the working directory upward); its
        /// directory's `workflows/` is searched last.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Print one JSON document instead of the text view.
        #[arg(long)]
        json: bool,
    },
    /// List the agent types (built-in, .claude/agents/*.md, dsh.toml) and where each comes from.
    Agents {
        /// Configuration file (default: dsh.toml from the working directory upward).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Print one JSON document instead of the text view.
        #[arg(long)]
        json: bool,
    },
}

/// `--events`: how events are shown on stderr.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EventsMode {
    Jsonl,
    /// Readable lines; on a terminal, below them a live status area.
    Pretty,
    /// Readable lines only, even on a terminal (what `pretty` prints off
    /// a terminal).
    Lines,
    None,
}

/// `--output`: what goes to stdout.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputMode {
    Value,
    Result,
}

/// `--sandbox`: the worker's sandbox policy (docs/sandbox.md), parsed by
/// clap like `--events`, with the names `dsh-protocol` gives the policies.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SandboxArg(pub SandboxPolicy);

impl ValueEnum for SandboxArg {
    fn value_variants<'a>() -> &'a [Self] {
        const N: usize = SandboxPolicy::ALL.len();
        const ALL: [SandboxArg; N] = {
            let mut out = [SandboxArg(SandboxPolicy::ALL[0]); N];
            let mut i = 0;
            while i < N {
                out[i] = SandboxArg(SandboxPolicy::ALL[i]);
                i += 1;
            }
            out
        };
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The script (.ts, .mts, .js, .mjs), or the name of a saved workflow (`dsh workflow list`).
    pub script: PathBuf,
    /// The script's `args` as JSON.
    #[arg(long, value_name = "JSON", group = "input")]
    pub args: Option<String>,
    /// The script's `args` as a string.
    #[arg(long, value_name = "TEXT", group = "input")]
    pub args_text: Option<String>,
    /// Read the script's `args` as JSON from a file.
    #[arg(long, value_name = "PATH", group = "input")]
    pub args_file: Option<PathBuf>,
    /// Answer agent() calls from this fixture file.
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,
    /// The default provider, by name (dsh.toml's [providers.NAME], or built-in deepseek/openai).
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// Write every agent() answer of this run to a fixture file (replay it with --fixture).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// The run's journal may grow to this size (default 256MiB); a call past it fails with BUDGET.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub journal_limit: Option<u64>,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Keep no run directory and no journal for this run (it cannot be resumed).
    #[arg(long)]
    pub no_journal: bool,
    /// Run in the background: print the run's id (the last line on stdout) once it has started and return while it goes on, beyond this terminal; follow it with `attach`, end it with `cancel`.
    #[arg(long, conflicts_with_all = ["no_journal", "store"])]
    pub detach: bool,
    /// The id a detached run starts under (set by `--detach` for the process it starts).
    #[arg(long, hide = true, value_name = "ID", value_parser = run_id)]
    pub run_id: Option<String>,
    /// Keep the run in this PostgreSQL store instead of a run directory
    /// (postgres://USER@HOST:PORT/DB; or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    #[command(flatten)]
    pub show: ShowFlags,
    /// Configuration file (default: dsh.toml from the working directory upward).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// At most N agents at once (default 16).
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<u32>,
    /// At most N agents per run (default and ceiling 1000).
    #[arg(long, value_name = "N")]
    pub max_agents: Option<u32>,
    /// Wall-clock budget of the whole run, e.g. 30s, 5m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Time between a cancel and the forced settle (default 5s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub grace: Option<Duration>,
    /// Longest synchronous slice of script code (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sync_timeout: Option<Duration>,
    /// Output-token budget of the run.
    #[arg(long, value_name = "TOKENS")]
    pub budget: Option<u64>,
    /// Cost budget of the run in US dollars, as agent CLIs report cost (e.g. 2.50).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub budget_usd: Option<f64>,
    /// Answer every agent() at once without any provider: placeholder text, or the
    /// smallest value that fits the call's schema (excludes --fixture).
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: arrays get N elements (0 to 1000, default 1), within each schema's minItems/maxItems.
    #[arg(long, value_name = "N", requires = "dry_run", value_parser = dry_run_items)]
    pub dry_run_items: Option<u32>,
    /// Sandbox policy (default best-effort, or dsh.toml's workflow.sandbox).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub sandbox: Option<SandboxArg>,
    /// Script heap limit, e.g. 256MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Log text budget of the run, e.g. 1MiB (default); later lines are dropped.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub log_limit: Option<u64>,
    /// CPU-time budget of the script, e.g. 10s (default: none).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub compute_timeout: Option<Duration>,
}

/// How a run is shown: shared by `run` and `resume`.
#[derive(Args, Debug, Clone)]
pub struct ShowFlags {
    /// How events are shown on stderr.
    #[arg(long, value_enum, default_value_t = EventsMode::Pretty)]
    pub events: EventsMode,
    /// Also write every event as a JSON line to this file, flushed as it happens.
    #[arg(long, value_name = "PATH")]
    pub events_file: Option<PathBuf>,
    /// What goes to stdout: the value, or the whole result object.
    #[arg(long, value_enum, default_value_t = OutputMode::Value)]
    pub output: OutputMode,
    /// Also print diagnostics on stderr: the sandbox the worker reached.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Colour on stderr: auto (a terminal, and NO_COLOR unset), always, never.
    #[arg(long, value_enum, default_value_t = ColorMode::Auto)]
    pub color: ColorMode,
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorMode {
    Auto,
    Always,
    Never,
}

#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The run: its id (under the runs directory), `latest`, a unique prefix of its id, or the path of its run directory.
    pub run: String,
    /// Run the script even if it changed since the run; only calls whose keys still match are replayed.
    #[arg(long)]
    pub allow_changed: bool,
    /// Replay only completed answers: calls that failed, stalled or timed out are made again, by the provider as configured now.
    #[arg(long)]
    pub retry_failed: bool,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Resume a run kept in this PostgreSQL store (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Answer the calls that are not replayed from this fixture (default: the run's own provider).
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,
    /// The configuration the run used, when it is not the dsh.toml found from here.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Write every agent() answer of this attempt to a fixture file.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// The run's journal may grow to this size, earlier attempts included (default 256MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub journal_limit: Option<u64>,
    /// Wall-clock budget of this attempt (default: the run's own).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    #[command(flatten)]
    pub show: ShowFlags,
}

#[derive(Args, Debug)]
pub struct HostArgs {
    /// The PostgreSQL store whose runs this host runs (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// How many runs at once (default 4; 0 with --agents unless given: an agent host only).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub runs: Option<u32>,
    /// Answer agent calls of these pools for runs running anywhere: POOL=N,… (a pool is a provider of this host's dsh.toml; N calls at once), e.g. claude-code=4,deepseek=64.
    #[arg(long, value_name = "POOL=N,...")]
    pub agents: Option<String>,
    /// How long a run stays this host's without a heartbeat (renewed every third of it): a host dead, paused or cut off for longer loses its runs to another.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub lease: u32,
    /// The configuration file (default: dsh.toml from the working directory upward): its providers answer the runs' calls.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on; one that is not loopback needs a token in $DSH_SERVE_TOKEN.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8600")]
    pub addr: String,
    /// The environment variable that holds the token (default DSH_SERVE_TOKEN).
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Serve the runs of this PostgreSQL store instead (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Configuration file (default: dsh.toml from the working directory upward); a resume uses it.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct McpArgs {
    /// Serve MCP's streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio; an address that is not loopback needs a bearer token in $DSH_MCP_TOKEN.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// With --http: the environment variable that holds the bearer token clients must send (default DSH_MCP_TOKEN).
    #[arg(long, value_name = "VAR", requires = "http")]
    pub token_env: Option<String>,
    /// Where the runs it starts are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// A directory `scriptPath` may name scripts in (repeatable; default: the working directory).
    #[arg(long, value_name = "DIR")]
    pub allow_dir: Vec<PathBuf>,
    /// Configuration file for every run (default: dsh.toml from the working directory upward).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Answer every run's agent() calls from this fixture file (tests, demos).
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,
    /// The default provider of every run, by name.
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// Runs started by this server running at once; one more start is refused.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_runs: u32,
    /// Ceiling of agent() calls per run: a start may ask for fewer, never more.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_agents: u32,
    /// Ceiling of a run's wall-clock time: a start may ask for less, never more.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub max_timeout: Duration,
}

#[derive(Args, Debug)]
pub struct WaitArgs {
    /// The run: its id (as `submit` or `run --detach` printed it), `latest`, or a unique start of its id.
    pub run: String,
    /// Where run directories are kept, for a run without a store (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// The PostgreSQL store (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// What to print: the value, or the whole result.
    #[arg(long, value_enum, default_value_t = OutputMode::Value)]
    pub output: OutputMode,
    /// The run's events on stderr as they come, from its first, as `run` shows them.
    #[arg(long, value_enum, default_value_t = EventsMode::Pretty)]
    pub events: EventsMode,
    /// Colour on stderr: auto (a terminal, and NO_COLOR unset), always, never.
    #[arg(long, value_enum, default_value_t = ColorMode::Auto)]
    pub color: ColorMode,
}

#[derive(Args, Debug)]
pub struct CancelArgs {
    /// The run: its id, `latest`, or a unique start of its id.
    pub run: String,
    /// Where run directories are kept, for a run without a store (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// The PostgreSQL store (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunsArgs {
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// List the runs of this PostgreSQL store instead (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The configuration file (default: dsh.toml from the working directory upward).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Show at most N runs, newest first.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// Print a JSON array (one object per run) instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The run: its id, `latest`, a unique prefix of its id, or the path of its run directory.
    pub run: String,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Print one JSON object (run, totals, agents, result) instead of the text view.
    #[arg(long)]
    pub json: bool,
    /// Show a run kept in this PostgreSQL store (or DSH_STORE, or `[store] url` in dsh.toml).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The run: its id, `latest`, a unique prefix of its id, or the path of its run directory.
    pub run: String,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Where to write the report (default: report.html in the run directory).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Report a run kept in this PostgreSQL store (or DSH_STORE, or `[store] url` in dsh.toml); default output RUN.html.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Workflow files or directories to search (default: the current directory).
    pub paths: Vec<PathBuf>,
    /// Write (or overwrite) each X.expected.json from this run instead of comparing.
    #[arg(long)]
    pub update: bool,
    /// Run N workflows at once (default: the number of CPUs).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
    /// Wall-clock budget of each workflow, e.g. 30s (default: none).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Also write the results as a JUnit XML file (one test case per workflow).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// `--run-id`: an id as dsh makes them (`run-` and lowercase hex digits and
/// dashes), never a path.
fn run_id(text: &str) -> Result<String, String> {
    let ok = text.len() <= 64
        && text.strip_prefix("run-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c) || c == '-')
        });
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!("{text:?} is not a run id dsh makes"))
    }
}

/// `--dry-run-items N`: a whole number from 0 to
/// [`MAX_ITEMS`](dsh_orchestrator::providers::dry_run::MAX_ITEMS).
fn dry_run_items(text: &str) -> Result<u32, FlagError> {
    let max = dsh_orchestrator::providers::dry_run::MAX_ITEMS;
    match text.trim().parse::<u32>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(FlagError::DryRunItems {
            text: text.into(),
            max,
        }),
    }
}

/// A flag value clap hands to one of the parsers here and they refuse
/// (clap prints it after `invalid value … for '--flag'`).
#[derive(Debug, thiserror::Error)]
enum FlagError {
    #[error(
        "{text:?} is not a number of array elements from 0 to {max}; pass e.g. --dry-run-items 3"
    )]
    DryRunItems { text: String, max: u32 },
    #[error("{0:?} is not a positive amount of US dollars; give one such as 2.50")]
    Usd(String),
}

/// What a command line clap refused (or `--help`) exits with: help and
/// version print and exit 0, a bare `dsh` prints help and exits 2, anything
/// else is `error[USAGE]` and exit 2.
pub fn clap_exit(e: &clap::Error) -> i32 {
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
    print_error(dsh_orchestrator::ErrorCode::Usage, text);
    exit::NOT_STARTED
}

/// `--budget-usd`: a positive amount of US dollars (`2.5`, `0.10`).
fn parse_usd(s: &str) -> Result<f64, FlagError> {
    let t = s.trim().trim_start_matches('$');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(FlagError::Usd(s.into())),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `dsh --help` describes `workflow` by its subcommands; the line once
    /// named three of them while eight more existed.
    #[test]
    fn the_workflow_help_line_names_every_subcommand() {
        let cli = Cli::command();
        let workflow = cli
            .find_subcommand("workflow")
            .expect("the workflow subcommand");
        let about = workflow.get_about().expect("an about line").to_string();
        let listed: Vec<&str> = about
            .split_once(':')
            .expect("`Workflow scripts: …`")
            .1
            .trim_end_matches('.')
            .split(',')
            .map(str::trim)
            .collect();
        let subcommands: Vec<&str> = workflow
            .get_subcommands()
            .map(clap::Command::get_name)
            .filter(|n| *n != "help")
            .collect();
        assert_eq!(listed, subcommands, "{about}");
    }
}
