//! One run on a terminal: start it with its journal, show its events,
//! turn Ctrl-C into cancel (and a second one into terminate), keep its run
//! directory, print the result, and map it to the exit code (contract §12).

use std::io::{IsTerminal, Write};

use std::sync::Arc;

use dsh_orchestrator::journal::{Durable, DurableOptions, Finished, JournalMode};
use dsh_orchestrator::{ErrorCode, EventStream, RunResult, StartRequest, StopReason, WorkflowRun};

use crate::error::{CliError, exit, print_error, warn};
use crate::flags::{ColorMode, EventsMode, OutputMode, RunArgs, ShowFlags};
use crate::live::Live;
use crate::{progress, request, stack};

/// `dsh workflow run`.
pub async fn run(a: RunArgs) -> Result<i32, CliError> {
    let request::Built {
        mut req,
        mut answering,
        spec,
        start_note,
        store,
        telemetry,
    } = request::build(&a)?;
    let events_file = open_events_file(&a.show)?;
    let provider_name = crate::telemetry::provider_name(&spec);
    // A detached run starts under the id its `run --detach` printed, and
    // shows nothing: its events are in its run directory.
    let mut show = a.show.clone();
    if let Some(id) = &a.run_id {
        req.run_id = Some(id.clone());
        show.events = EventsMode::None;
    }
    let options = DurableOptions {
        runs_dir: request::runs_root(a.runs_dir.as_deref()),
        journal: if a.no_journal {
            JournalMode::Off
        } else {
            JournalMode::Keep
        },
        record: a.record.clone(),
        journal_limit: a.journal_limit,
    };
    let (durable, heartbeat) = match &store {
        None => (Durable::new_run(&mut req, &a.script, spec, &options), None),
        Some(url) => {
            // A script that cannot start makes no record in the store.
            dsh_orchestrator::prepare(&req)?;
            let owner = format!("{} (foreground)", request::host_name());
            let config = request::load_config(a.config.as_deref())?;
            let lease = config.store_lease.unwrap_or(FOREGROUND_LEASE);
            let store = Arc::new(request::open_store(url).await?.leasing(&owner, lease));
            let carried = crate::fleet::carried(&a, &req)?;
            let durable =
                Durable::new_run_in_store(&mut req, &a.script, spec, store.clone(), &options)
                    .await
                    .map_err(|e| CliError::usage(format!("the store {url}: {e}")))?;
            // What a host needs to continue the run if this process dies.
            if let Some(id) = &req.run_id
                && let Err(e) = store.carry(id, &carried.to_json()).await
            {
                // A run no host could continue is not left behind to be
                // claimed.
                let _ = dsh_orchestrator::journal::RunStore::discard(&*store, id).await;
                return Err(CliError::usage(format!("the store {url}: {e}")));
            }
            let id = req.run_id.clone().unwrap_or_default();
            // The calls of pooled providers go to the fleet's agent hosts.
            answering = crate::fleet::pooled(
                answering,
                &config,
                &dsh_store::pool::Pools::start(store.clone()),
                &id,
            )?;
            let (stop, task) = heartbeat(store.clone(), owner, id, lease);
            (durable, Some((stop, task, store)))
        }
    };
    req.provider = stack::compose(answering, durable.layer());
    let telemetry = crate::telemetry::for_run(&mut req, provider_name, &telemetry);
    let run_id = req.run_id.clone();
    let (stop, held) = match heartbeat {
        Some((stop, task, store)) => (Some(stop), Some((task, store))),
        None => (None, None),
    };
    let code = execute(
        req,
        durable,
        &show,
        events_file,
        start_note,
        stop,
        telemetry,
    )
    .await;
    if let (Some((task, store)), Some(id)) = (held, run_id) {
        task.abort();
        // A run that never started (its worker could not be had, …) is
        // not left for a host to claim once the lease passes: the user
        // was told it did not run. Fenced: a run another process took
        // over stays.
        if code == exit::NOT_STARTED {
            let _ = dsh_orchestrator::journal::RunStore::discard(&*store, &id).await;
        }
    }
    Ok(code)
}

/// The lease of a run made by `run --store` unless `[store] lease` says
/// otherwise: renewed every third of it while this process runs; once it
/// has passed without (the process died, or was stopped that long), a host
/// serving the store continues the run. Longer than a host's: a
/// terminal's run may be paused by hand (Ctrl-Z).
pub const FOREGROUND_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// Keeps the lease of this process's stored run; says why the run must
/// stop — the lease was lost (another host continues the run), or a
/// cancel was asked for from anywhere (`dsh workflow cancel`).
fn heartbeat(
    store: Arc<dsh_store::Store>,
    owner: String,
    id: String,
    lease: std::time::Duration,
) -> (
    tokio::sync::oneshot::Receiver<String>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        // A cancel from anywhere is heard at once; without the listener,
        // at the next heartbeat.
        let mut listener = store.listen(&["dsh_cancel"]).await.ok();
        let mut tick = tokio::time::interval(lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut renewed = std::time::Instant::now();
        loop {
            // A cancel of this run, or notices missed while the listener
            // was away; not the cancels of other runs.
            let heard = async {
                loop {
                    match listener.as_mut() {
                        Some(l) => match l.next().await {
                            Some(dsh_store::Notice::Run { id: other, .. }) if other != id => {}
                            Some(_) => return,
                            None => std::future::pending::<()>().await,
                        },
                        None => std::future::pending::<()>().await,
                    }
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                _ = heard => {}
            }
            let stop = match store.renew(&owner, lease).await {
                Ok(r) if !r.lost.is_empty() => Some(dsh_store::host::LEASE_LOST.to_string()),
                Ok(r) => {
                    renewed = std::time::Instant::now();
                    r.cancels.into_iter().next().map(|(_, reason)| reason)
                }
                Err(_) if renewed.elapsed() >= lease => {
                    Some(dsh_store::host::LEASE_LOST.to_string())
                }
                Err(_) => None,
            };
            if let Some(reason) = stop {
                let _ = tx.send(reason);
                return;
            }
        }
    });
    (rx, task)
}

/// Creates `--events-file`: a new file or an existing regular one, never
/// through a symlink (`O_NOFOLLOW`) and never a device or FIFO.
pub fn open_events_file(show: &ShowFlags) -> Result<Option<std::fs::File>, CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(p) = &show.events_file else {
        return Ok(None);
    };
    let fail = |why: String| CliError::usage(format!("--events-file {}: {why}", p.display()));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| fail(format!("cannot create: {e}")))?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(fail(
            "not a regular file; name a regular file or a new path".into(),
        ));
    }
    f.set_len(0)
        .map_err(|e| fail(format!("cannot create: {e}")))?;
    Ok(Some(f))
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
    start_note: Option<String>,
    stop: Option<tokio::sync::oneshot::Receiver<String>>,
    telemetry: Option<crate::telemetry::ForRun>,
) -> i32 {
    print_warnings(durable.take_warnings());
    let budget = req.limits.budget_tokens;
    // Signals first, so a Ctrl-C during start-up is not lost.
    let mut signals = Signals::install();
    let durable_run = match durable.start(req) {
        Ok(r) => r,
        Err(e) => return CliError::from(e).exit(),
    };
    print_warnings(durable_run.take_warnings());
    let (mode, mut live) = display(show.events, show.color, budget, start_note);
    // `--events-file` naming the run directory's own events file (the
    // recipe from before the run directory kept one): the library writes
    // it already, and two writers would write every event twice.
    if let (Some(f), Some(kept)) = (&events_file, durable_run.events_file())
        && same_file(f, kept)
    {
        events_file = None;
    }
    let run = durable_run.run();
    let run_id = run.id().to_string();
    // The file is its own subscriber: a slow terminal never costs it events.
    let file_writer = events_file.take().map(|f| {
        // The writer the run directory's `events.jsonl` uses, without
        // its size limit: the user asked for this file. The first
        // write error stops it (said once at the end; the run goes
        // on).
        tokio::spawn(dsh_orchestrator::events_file::write_events(
            f,
            run.subscribe(),
            None,
        ))
    });
    // The trace has its own subscription, like the file.
    let traced = telemetry.map(|t| t.follow(run.subscribe()));
    let events = follow(run, &mode, live.as_mut(), &mut signals, stop).await;
    let run_dir = durable_run.run_dir();
    let mut finished = durable_run.finish().await;
    if let Some(l) = live.as_mut() {
        let kept = run_dir.as_ref().map(|_| run_id.as_str());
        l.finish(&finished.result, kept);
    }
    print_warnings(std::mem::take(&mut finished.warnings));
    let (events_error, file_dropped) = match file_writer {
        Some(task) => task.await.map_or((None, 0), |w| (w.error, w.dropped)),
        None => (None, 0),
    };
    warn_dropped(events.dropped(), file_dropped, &run_id);
    if let Some(task) = traced {
        crate::telemetry::finish(task).await;
    }
    let mut failed_output = report_journal(&finished);
    if let (Some(e), Some(p)) = (&events_error, &show.events_file) {
        print_error(
            ErrorCode::Usage,
            &format!("--events-file {}: cannot write: {e}", p.display()),
        );
        failed_output = true;
    }
    if show.verbose {
        print_sandbox(&finished.result);
        print_peak_memory();
    }
    let code = report(&finished.result, show.output);
    // A run that completed but whose output could not be kept (stdout,
    // --events-file, --record) does not exit 0.
    if code == exit::COMPLETED && failed_output {
        exit::ERROR
    } else {
        code
    }
}

/// How the events are shown: the progress mode, and the live view on a
/// terminal that asked for pretty events.
pub(crate) fn display(
    events: EventsMode,
    color: ColorMode,
    budget: Option<u64>,
    start_note: Option<String>,
) -> (progress::Mode, Option<Live>) {
    let terminal =
        std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
    let color = match color {
        ColorMode::Always => true,
        ColorMode::Never => false,
        ColorMode::Auto => terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    let mode = match events {
        EventsMode::Jsonl => progress::Mode::Jsonl,
        EventsMode::None => progress::Mode::None,
        EventsMode::Pretty | EventsMode::Lines => progress::Mode::Lines {
            color,
            start_note: start_note.clone(),
        },
    };
    // On a terminal the pretty lines scroll above a redrawn status area;
    // anywhere else (CI, pipes) they are printed exactly as they are.
    let live =
        (events == EventsMode::Pretty && terminal).then(|| Live::new(color, budget, start_note));
    (mode, live)
}

/// Shows the run's events until its last, redraws the live view, and
/// turns signals into cancel (the first) and terminate (any later one).
/// Returns the stream, which knows how many events it dropped.
async fn follow(
    run: &WorkflowRun,
    mode: &progress::Mode,
    mut live: Option<&mut Live>,
    signals: &mut Signals,
    stop: Option<tokio::sync::oneshot::Receiver<String>>,
) -> EventStream {
    // Told to stop from outside (the store: a cancel, a lost lease).
    let stopped = async {
        match stop {
            Some(rx) => match rx.await {
                Ok(reason) => reason,
                Err(_) => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stopped);
    let mut stop_said = false;
    let mut events = run.subscribe();
    let mut ticks = tokio::time::interval(crate::live::FLUSH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut interrupts = 0u32;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(ev) => match live.as_mut() {
                    Some(l) => l.event(&ev),
                    None => progress::show(mode, &ev),
                },
                None => break,
            },
            _ = ticks.tick(), if live.is_some() => {
                if let Some(l) = live.as_mut() {
                    l.tick();
                }
            }
            reason = &mut stopped, if !stop_said => {
                stop_said = true;
                run.cancel(reason);
            }
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
    events
}

/// Says how many events were not shown (or written to `--events-file`),
/// if any.
fn warn_dropped(events_dropped: u64, file_dropped: u64, run_id: &str) {
    let dropped = events_dropped + file_dropped;
    if dropped > 0 {
        warn(&format!(
            "{dropped} event(s) were not shown: the event output (stderr{}) was read slower than \
             the run produced them, and dsh keeps at most {} MiB of them waiting rather than slow the run \
             or grow without bound; the run itself (result, journal) lost nothing (run {})",
            if file_dropped > 0 {
                ", --events-file"
            } else {
                ""
            },
            dsh_orchestrator::events::SUBSCRIBER_QUEUE_BYTES >> 20,
            run_id,
        ));
    }
}

/// Whether `f` is the file at `path` (same device and inode).
fn same_file(f: &std::fs::File, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// What the journal has to say once the run settled: a recording that
/// could not be written (`true`), and the summary of a resume.
fn report_journal(f: &Finished) -> bool {
    let failed = f.record_error.is_some();
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
    failed
}

/// `--verbose`: the host's own peak memory (not the worker's), e.g.
/// `dsh: host peak memory 21.3 MiB (RSS)`: what a script can make the
/// host hold is bounded, and this is where to see it.
fn print_peak_memory() {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct it is
    // given; nothing else reads or aliases it meanwhile.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is this process only, not its workers.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
        // ru_maxrss is in KiB on Linux.
        let kib = usage.ru_maxrss.max(0) as f64;
        eprintln!("dsh: host peak memory {:.1} MiB (RSS)", kib / 1024.0);
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
    let written = {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{text}").and_then(|()| stdout.flush())
    };
    if let Some(e) = &result.error {
        print_error(e.code, &e.message);
    }
    match written {
        // A result nobody received is no success (`> /dev/full`).
        Err(e) if result.stop_reason == StopReason::Completed => {
            print_error(
                ErrorCode::Usage,
                &format!("cannot write the result to stdout: {e}"),
            );
            exit::ERROR
        }
        _ => exit_code(result),
    }
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
