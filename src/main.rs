//! The `dsh` executable: the command line of dsh workflow. `dsh __worker …`
//! runs the worker instead (so one installed binary is enough).
//!
//! The layout follows the path of a command:
//! - [`flags`]: the raw command line, as clap parses it;
//! - [`request`]: flags and `dsh.toml` turned into a validated
//!   [`StartRequest`](dsh_orchestrator::StartRequest);
//! - [`execute`]: one run on a terminal — signals, events, the result, the
//!   exit code (contract §12);
//! - [`runs_cmd`], [`test_cmd`]: `runs`/`show`/`resume` over the library's
//!   journal, and `dsh workflow test`;
//! - [`error`]: the one error type every command exits through.
//!
//! Everything here is the binary edge; the library (`dsh-orchestrator`)
//! knows nothing of it.

mod detach;
mod error;
mod execute;
mod flags;
mod fleet;
mod inspect;
mod live;
mod mcp;
mod progress;
mod report;
mod request;
mod runs_cmd;
mod serve;
mod stack;
mod telemetry;
mod terminal;
mod test_cmd;
mod token;

use clap::Parser;

use dsh_orchestrator::ErrorCode;
use error::{CliError, exit, print_error};
use flags::{Cli, Top, WorkflowCmd};

/// A failed allocation in worker mode exits with the status the host reads
/// as `MEMORY`; the CLI keeps Rust's default behaviour (see the docs of
/// `dsh_worker::alloc`).
#[global_allocator]
static ALLOC: dsh_worker::alloc::WorkerAlloc = dsh_worker::alloc::WorkerAlloc;

/// The TypeScript declarations `dsh workflow types` prints.
const TYPES: &str = include_str!("types.d.ts");

fn main() {
    // Raw: a command line that is not UTF-8 is for clap to report.
    let mut argv = std::env::args_os().skip(1);
    let first = argv.next();
    let code = if first.as_deref() == Some("__worker".as_ref()) {
        dsh_worker::main_with_args(std::env::args().skip(2))
    } else {
        if first.as_deref() == Some("workflow".as_ref())
            && argv.next().as_deref() == Some("run".as_ref())
        {
            // First thing, while this process has its one thread.
            request::prefork_worker();
        }
        cli_main(std::env::args_os())
    };
    std::process::exit(code);
}

/// Runs the command line with the given argv (program name first) and
/// returns the exit code.
///
/// Never inlined into `main`: every worker starts in `main` too, and this
/// function's stack frame is about 17 KiB (clap, every command). Inlined,
/// `main`'s frame grew by that much, and the stack probes on entry touched
/// each of its pages — 16 KiB more private memory in every idle worker,
/// which never runs a line of this (docs/performance.md, "Memory").
#[inline(never)]
fn cli_main<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => return flags::clap_exit(&e),
    };
    init_tracing();
    let command = match cli.command {
        Top::Workflow { command } => command,
        Top::Completions { shell } => return completions(shell),
        Top::Man => return man_page(),
    };
    let outcome = match command {
        WorkflowCmd::Types => {
            print!("{TYPES}");
            Ok(exit::COMPLETED)
        }
        WorkflowCmd::Check { script } => request::check(&script).map(|(meta, warnings)| {
            for w in warnings {
                eprintln!("{w}");
            }
            println!("{}\n{}", meta.name, meta.description);
            exit::COMPLETED
        }),
        WorkflowCmd::Run(args) if args.detach => detach::detach(&args),
        WorkflowCmd::Run(args) => runtime().and_then(|rt| rt.block_on(execute::run(*args))),
        WorkflowCmd::Test(args) => runtime().and_then(|rt| rt.block_on(test_cmd::main(args))),
        WorkflowCmd::Runs(args) => runs_cmd::runs(&args),
        WorkflowCmd::Show(args) => runs_cmd::show(&args),
        WorkflowCmd::Report(args) => report::report(&args),
        WorkflowCmd::Resume(args) => runtime().and_then(|rt| rt.block_on(runs_cmd::resume(*args))),
        WorkflowCmd::Submit(args) => runtime().and_then(|rt| rt.block_on(fleet::submit(*args))),
        WorkflowCmd::Host(args) => runtime().and_then(|rt| rt.block_on(fleet::host(args))),
        WorkflowCmd::Wait(args) | WorkflowCmd::Attach(args) => {
            runtime().and_then(|rt| rt.block_on(fleet::wait(args)))
        }
        WorkflowCmd::Cancel(args) => runtime().and_then(|rt| rt.block_on(fleet::cancel(args))),
        WorkflowCmd::Mcp(args) => runtime().and_then(|rt| rt.block_on(mcp::serve(args))),
        WorkflowCmd::Serve(args) => runtime().and_then(|rt| rt.block_on(serve::serve(args))),
        WorkflowCmd::Providers { config, json } => inspect::providers(config.as_deref(), json),
        WorkflowCmd::List { config, json } => inspect::list(config.as_deref(), json),
        WorkflowCmd::Agents { config, json } => inspect::agents(config.as_deref(), json),
    };
    outcome.unwrap_or_else(|e| e.exit())
}

/// `dsh completions SHELL`: the completion script on stdout.
#[inline(never)]
fn completions(shell: clap_complete::Shell) -> i32 {
    use clap::CommandFactory as _;
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut Cli::command(), "dsh", &mut out);
    exit::COMPLETED
}

/// `dsh man`: the man page of `dsh` and its subcommands, as roff.
#[inline(never)]
fn man_page() -> i32 {
    use clap::CommandFactory as _;
    use std::io::Write as _;
    let mut page = Vec::new();
    if let Err(e) = clap_mangen::Man::new(Cli::command()).render(&mut page) {
        print_error(
            ErrorCode::Usage,
            &format!("cannot render the man page: {e}"),
        );
        return exit::ERROR;
    }
    // The commands under `dsh workflow`, as one more section of the page.
    if let Some(workflow) = Cli::command().find_subcommand("workflow")
        && let Err(e) =
            clap_mangen::Man::new(workflow.clone()).render_subcommands_section(&mut page)
    {
        print_error(
            ErrorCode::Usage,
            &format!("cannot render the man page: {e}"),
        );
        return exit::ERROR;
    }
    let mut out = std::io::stdout().lock();
    if out.write_all(&page).and_then(|()| out.flush()).is_err() {
        return exit::ERROR;
    }
    exit::COMPLETED
}

/// The async runtime of the commands that run workflows.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
