//! One run on a terminal: start it with its journal, show its events,
//! turn Ctrl-C into cancel (and a second one into terminate), keep its run
//! directory, print the result, and map it to the exit code (contract §12).

use std::io::{IsTerminal, Write};

use dsh_orchestrator::journal::{Durable, DurableOptions, Finished, JournalMode};
use dsh_orchestrator::{ErrorCode, RunResult, StartRequest, StopReason};

use crate::error::{CliError, exit, print_error, warn};
use crate::flags::{EventsMode, OutputMode, RunArgs, ShowFlags};
use crate::{progress, request};

/// `dsh workflow run`.
pub async fn run(a: RunArgs) -> Result<i32, CliError> {
    let (mut req, spec) = request::build(&a)?;
    let events_file = open_events_file(&a.show)?;
    let options = DurableOptions {
        runs_dir: request::runs_root(a.runs_dir.as_deref()),
        journal: if a.no_journal {
            JournalMode::Off
        } else {
            JournalMode::Keep
        },
        record: a.record.clone(),
    };
    let durable = Durable::new_run(&mut req, &a.script, spec, &options);
    Ok(execute(req, durable, &a.show, events_file).await)
}

/// Creates `--events-file`.
pub fn open_events_file(show: &ShowFlags) -> Result<Option<std::fs::File>, CliError> {
    match &show.events_file {
        None => Ok(None),
        Some(p) => std::fs::File::create(p).map(Some).map_err(|e| {
            CliError::usage(format!("--events-file {}: cannot create: {e}", p.display()))
        }),
    }
}

fn print_warnings(warnings: Vec<dsh_orchestrator::journal::JournalWarning>) {
    for w in warnings {
        warn(&w.to_string());
    }
}

/// Starts the run, shows its events, handles signals, keeps its run
/// directory, and prints the result. Returns the exit code.
pub async fn execute(
    req: StartRequest,
    durable: Durable,
    show: &ShowFlags,
    mut events_file: Option<std::fs::File>,
) -> i32 {
    print_warnings(durable.take_warnings());
    // Signals first, so a Ctrl-C during start-up is not lost.
    let mut signals = Signals::install();
    let durable_run = match durable.start(req) {
        Ok(r) => r,
        Err(e) => return CliError::from(e).exit(),
    };
    print_warnings(durable_run.take_warnings());
    let mode = match show.events {
        EventsMode::Jsonl => progress::Mode::Jsonl,
        EventsMode::None => progress::Mode::None,
        EventsMode::Pretty => progress::Mode::Lines {
            color: std::io::stderr().is_terminal(),
        },
    };
    let run = durable_run.run();
    let mut events = run.subscribe();
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
    let mut finished = durable_run.finish().await;
    print_warnings(std::mem::take(&mut finished.warnings));
    report_journal(&finished);
    if show.verbose {
        print_sandbox(&finished.result);
    }
    report(&finished.result, show.output)
}

/// What the journal has to say once the run settled: a recording that
/// could not be written, and the summary of a resume.
fn report_journal(f: &Finished) {
    if let Some((path, e)) = &f.record_error {
        print_error(
            ErrorCode::Usage,
            &format!("--record {}: cannot write the fixture: {e}", path.display()),
        );
    }
    if let Some(id) = &f.resumed {
        warn(&format!(
            "resumed run {id}: {} call(s) replayed from the journal, {} ran live",
            f.replayed, f.live
        ));
    }
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
            let level = s.level.as_str();
            let mut line = format!(
                "dsh: sandbox {level} ({abi}); enforced: {}",
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

/// The result on stdout, its error on stderr; the exit code.
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
    exit_code(result)
}

/// Contract §12: 0 completed, 1 error, 124 `--timeout`, 130 cancelled.
pub fn exit_code(result: &RunResult) -> i32 {
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
pub struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    pub async fn next(&mut self) {
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
