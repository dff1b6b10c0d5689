//! `dsh workflow test [PATH...]`: runs each workflow that has a sibling
//! fixture against it and compares the result with the expected file.
//!
//! For a script `X.ts` (or `.mts`, `.js`, `.mjs`) with a sibling
//! `X.fixture.json`, the run gets `args` from `X.args.json` when that
//! exists, and its result (and, where the expected file lists them, its
//! agents, logs and phases) is compared with `X.expected.json`
//! ([`expected`]). Runs go through the library exactly like `dsh workflow
//! run --fixture` (same worker, same limits) but write nothing besides the
//! expected files of `--update`. Each script runs under its file name (not
//! the path it was found by), so messages in its result do not depend on
//! the directory the tests were started from.

mod ci;
mod diff;
mod discover;
mod expected;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_orchestrator::agent_types::AgentTypes;
use dsh_orchestrator::catalog::Catalog;
use dsh_orchestrator::events::Event;
use dsh_orchestrator::files;
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::script::ScriptKind;
use dsh_orchestrator::{
    ArgsInput, ErrorCode, Limits, Meta, RunResult, StartRequest, Usage, WorkerCommand, start,
};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::error::{CliError, exit, print_error};
use crate::flags::TestArgs;
use crate::stack::{self, Answering};
use discover::discover;
use expected::{Actual, Expected, json_eq};

/// Lines of unchanged context around each change in a diff.
const DIFF_CONTEXT: usize = 3;

/// One workflow to test and the files next to it.
#[derive(Debug, Clone)]
struct Case {
    /// The script as found (joined onto the path it was found under).
    script: PathBuf,
    fixture: PathBuf,
    args: PathBuf,
    expected: PathBuf,
}

impl Case {
    /// The case for `script` when it has a sibling fixture.
    fn of(script: &Path) -> Option<Case> {
        ScriptKind::from_path(script)?;
        let stem = script.file_stem()?.to_str()?;
        let sibling = |suffix: &str| script.with_file_name(format!("{stem}.{suffix}"));
        let fixture = sibling("fixture.json");
        fixture.is_file().then(|| Case {
            script: script.to_path_buf(),
            fixture,
            args: sibling("args.json"),
            expected: sibling("expected.json"),
        })
    }
}

/// How one workflow fared.
#[derive(Debug)]
enum Verdict {
    Ok,
    /// `--update` wrote the expected file.
    New,
    /// Why, one line per entry (a message, or the lines of a diff).
    Fail(Vec<String>),
}

#[derive(Debug)]
struct Report {
    verdict: Verdict,
    /// How long the run took, when it ran.
    elapsed: Option<Duration>,
    /// The tokens (and cost) of the run's calls, when they reported any.
    usage: Option<Usage>,
    /// The script's line a run error names, if it names one.
    line: Option<u32>,
}

impl Report {
    fn fail(message: impl Into<String>) -> Report {
        Report {
            verdict: Verdict::Fail(vec![message.into()]),
            elapsed: None,
            usage: None,
            line: None,
        }
    }
}

/// Where the reports for a CI system go besides stdout (`ci.rs`).
struct CiReports {
    /// `--junit FILE`.
    junit: Option<PathBuf>,
    /// Under GitHub Actions (`GITHUB_ACTIONS=true`): annotations on
    /// stdout, and the summary appended to this file
    /// (`$GITHUB_STEP_SUMMARY`) when it is set.
    github: Option<Option<PathBuf>>,
}

/// What all workflows share.
struct Settings {
    worker: WorkerCommand,
    update: bool,
    /// The default limits, with `--timeout`.
    limits: Limits,
    /// Cancelled on SIGINT/SIGTERM.
    stop: CancellationToken,
}

/// `dsh workflow test`.
pub async fn main(args: TestArgs) -> Result<i32, CliError> {
    let jobs = match args.jobs {
        Some(0) => {
            return Err(CliError::usage(
                "-j: must be at least 1 (0 would never run a workflow)",
            ));
        }
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let limits = Limits {
        wall_timeout: args.timeout,
        ..Limits::default()
    };
    limits
        .validate()
        .map_err(|e| CliError::usage(format!("--timeout: {}", e.message)))?;
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let cases = discover(&paths).map_err(|e| CliError::usage(e.to_string()))?;
    if cases.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(CliError::usage(format!(
            "no workflows to test under {}: a workflow X.ts (or .mts, .js, .mjs) needs a sibling X.fixture.json",
            names.join(", ")
        )));
    }
    // `dsh` itself (a stock command): cases that overlap fork their
    // workers from the fork server runs share (docs/performance.md).
    let worker = crate::request::worker()?;
    let settings = Arc::new(Settings {
        worker,
        update: args.update,
        limits,
        stop: CancellationToken::new(),
    });
    let reports = CiReports {
        junit: args.junit.clone(),
        github: (std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true"))
            .then(|| std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from)),
    };
    Ok(run_all(cases, jobs, settings, &reports).await)
}

/// Runs every case, at most `jobs` at once, printing the reports in
/// discovery order as they become available; returns the exit code.
async fn run_all(
    cases: Vec<Case>,
    jobs: usize,
    settings: Arc<Settings>,
    reports: &CiReports,
) -> i32 {
    let mut signals = crate::execute::Signals::install();
    let semaphore = Arc::new(Semaphore::new(jobs));
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Report)>();
    for (i, case) in cases.iter().cloned().enumerate() {
        let (semaphore, tx, settings) = (semaphore.clone(), tx.clone(), settings.clone());
        tokio::spawn(async move {
            let Ok(_permit) = semaphore.acquire_owned().await else {
                return;
            };
            let report = if settings.stop.is_cancelled() {
                Report::fail("not run: interrupted")
            } else {
                run_case(&case, &settings).await
            };
            let _ = tx.send((i, report));
        });
    }
    drop(tx);

    let mut pending = BTreeMap::new();
    let mut shown: Vec<Report> = Vec::with_capacity(cases.len());
    let (mut passed, mut failed) = (0usize, 0usize);
    let mut show = |report: Report, shown: &mut Vec<Report>| {
        if matches!(report.verdict, Verdict::Fail(_)) {
            failed += 1;
        } else {
            passed += 1;
        }
        print_report(&cases[shown.len()], &report);
        shown.push(report);
    };
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some((i, report)) => {
                    pending.insert(i, report);
                    while let Some(report) = pending.remove(&shown.len()) {
                        show(report, &mut shown);
                    }
                }
                None => break,
            },
            _ = signals.next(), if !settings.stop.is_cancelled() => settings.stop.cancel(),
        }
    }
    // Only a task that panicked leaves a gap.
    while shown.len() < cases.len() {
        let report = pending.remove(&shown.len()).unwrap_or_else(|| {
            Report::fail("internal error: the test task ended without a report")
        });
        show(report, &mut shown);
    }
    // The CI reports before the totals: the totals stay the last line.
    let results: Vec<(&Case, &Report)> = cases.iter().zip(&shown).collect();
    let written = ci_reports(reports, &results);
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{passed} passed, {failed} failed");
    let _ = stdout.flush();
    drop(stdout);
    if !written {
        return exit::ERROR;
    }
    if settings.stop.is_cancelled() {
        print_error(
            ErrorCode::Cancelled,
            "the tests were cancelled: interrupted by signal",
        );
        exit::CANCELLED
    } else if failed > 0 {
        exit::ERROR
    } else {
        exit::COMPLETED
    }
}

/// Writes the CI reports of `results`; `false` when one could not be
/// written (said on stderr): a CI job must not pass without its report.
fn ci_reports(reports: &CiReports, results: &[(&Case, &Report)]) -> bool {
    let mut written = true;
    if let Some(path) = &reports.junit
        && let Err(e) = ci::write_junit(path, results)
    {
        print_error(
            ErrorCode::Usage,
            &format!("--junit {}: cannot write: {e}", path.display()),
        );
        written = false;
    }
    if let Some(summary) = &reports.github {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(ci::annotations(results).as_bytes());
        let _ = stdout.flush();
        if let Some(path) = summary
            && let Err(e) = append(path, &ci::summary(results))
        {
            print_error(
                ErrorCode::Usage,
                &format!("GITHUB_STEP_SUMMARY {}: cannot append: {e}", path.display()),
            );
            written = false;
        }
    }
    written
}

/// Appends `text` to the file at `path` (made if missing), never through
/// a symlink.
fn append(path: &Path, text: &str) -> std::io::Result<()> {
    dsh_orchestrator::files::append_own(path)?.write_all(text.as_bytes())
}

fn print_report(case: &Case, report: &Report) {
    let tag = match report.verdict {
        Verdict::Ok => "ok  ",
        Verdict::New => "new ",
        Verdict::Fail(_) => "FAIL",
    };
    let script = case.script.display().to_string();
    let mut line = format!("{tag} {}", crate::terminal::line(&script));
    if let Some(d) = report.elapsed {
        line.push_str(&format!(" ({} ms)", d.as_millis()));
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    match &report.verdict {
        Verdict::Fail(details) => {
            for d in details {
                let _ = writeln!(stdout, "    {}", crate::terminal::text(d));
            }
        }
        Verdict::New => {
            let _ = writeln!(stdout, "    wrote {}", case.expected.display());
        }
        Verdict::Ok => {}
    }
    let _ = stdout.flush();
}

// ---------------------------------------------------------------------------
// One workflow
// ---------------------------------------------------------------------------

async fn run_case(case: &Case, settings: &Settings) -> Report {
    let request = match request(case, settings) {
        Ok(r) => r,
        // The case fails with the line the command would have exited with.
        Err(e) => return Report::fail(format!("error[{}]: {}", e.code, e.message)),
    };
    let expected = if settings.update {
        None
    } else {
        // Bounded and a regular file only: the expected file is the
        // repository's, and a FIFO or a huge file there must fail the case,
        // not hang or exhaust the test run.
        match files::read_text(&case.expected, files::FIXTURE_LIMIT) {
            Ok(text) => match Expected::parse(&text) {
                Ok(e) => Some(e),
                Err(m) => return Report::fail(format!("{}: {m}", case.expected.display())),
            },
            Err(files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Report::fail(format!(
                    "no expected file {}; run `dsh workflow test --update {}` to write it from this run, then check it",
                    case.expected.display(),
                    case.script.display()
                ));
            }
            Err(e) => {
                return Report::fail(format!("{}: cannot read: {e}", case.expected.display()));
            }
        }
    };
    let started = Instant::now();
    let run = match start(request) {
        Ok(r) => r,
        Err(e) => return Report::fail(format!("error[{}]: {e}", e.code())),
    };
    let mut stream = run.subscribe();
    let mut events: Vec<Event> = Vec::new();
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => events.push(ev),
                None => break,
            },
            _ = settings.stop.cancelled() => {
                run.cancel("interrupted by signal");
                // Keep reading: the run still ends with workflow/end.
                while let Some(ev) = stream.next().await {
                    events.push(ev);
                }
                break;
            }
        }
    }
    let result: RunResult = run.dispose().await;
    let elapsed = Some(started.elapsed());
    let actual = Actual::new(&result, &events);
    let verdict = match expected {
        None => update(case, &actual),
        Some(expected) => compare(case, &expected, &actual),
    };
    let script_name = case
        .script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Report {
        verdict,
        elapsed,
        usage: result.usage,
        line: result
            .error
            .as_ref()
            .and_then(|e| ci::error_line(&e.message, &script_name)),
    }
}

/// The run request of a case: `dsh workflow run X.ts --fixture
/// X.fixture.json [--args-file X.args.json]`, under the script's file name.
fn request(case: &Case, settings: &Settings) -> Result<StartRequest, CliError> {
    let text = files::read_text(&case.fixture, files::FIXTURE_LIMIT).map_err(|e| {
        CliError::usage(format!(
            "{}: cannot read the fixture: {e}",
            case.fixture.display()
        ))
    })?;
    let provider = ScriptedProvider::from_json_text(&case.fixture.display().to_string(), &text)
        .map_err(|e| CliError::new(ErrorCode::FixtureInvalid, e.to_string()))?;
    let args = match files::read_text(&case.args, files::ARGS_LIMIT) {
        Ok(text) => ArgsInput::Json(serde_json::from_str::<Value>(&text).map_err(|e| {
            CliError::usage(format!("{}: not valid JSON: {e}", case.args.display()))
        })?),
        Err(files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => ArgsInput::None,
        Err(e) => {
            return Err(CliError::usage(format!(
                "{}: cannot read: {e}",
                case.args.display()
            )));
        }
    };
    let mut req = StartRequest::from_path(&case.script, &settings.limits)?
        .with_limits(settings.limits.clone())
        .with_args(args)
        .with_meta_fallback(Meta::default_for(&case.script))
        .with_worker(settings.worker.clone())
        .with_catalog(test_catalog(&case.script));
    req.provider = stack::compose(
        Answering::Scripted(Arc::new(provider), test_agent_types(&case.script)),
        None,
    );
    if let Some(name) = case.script.file_name() {
        req.script_name = name.to_string_lossy().into_owned();
    }
    Ok(req)
}

/// The saved workflows a test case sees: the `.claude/workflows/` beside
/// its script only — never the user's own, nor the working directory's, so
/// a test means the same wherever and by whomever it is run.
fn test_catalog(script: &Path) -> Catalog {
    Catalog::standard(case_dir(script), None, None)
}

/// The directory of a case's script.
fn case_dir(script: &Path) -> &Path {
    script
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The agent types a test case sees: the built-ins and the
/// `.claude/agents/` beside its script — again never the user's own.
fn test_agent_types(script: &Path) -> AgentTypes {
    AgentTypes::resolve(
        &dsh_orchestrator::config::Config::builtin(),
        &[case_dir(script).join(".claude").join("agents")],
    )
}

fn compare(case: &Case, expected: &Expected, actual: &Actual) -> Verdict {
    let want = expected.document();
    let got = actual.shaped_like(expected).document();
    if json_eq(&want, &got) {
        return Verdict::Ok;
    }
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    let mut lines = vec![
        format!("--- expected ({})", case.expected.display()),
        "+++ actual".to_string(),
    ];
    lines.extend(diff::line_diff(&pretty(&want), &pretty(&got), DIFF_CONTEXT));
    Verdict::Fail(lines)
}

/// `--update`: writes the expected file unless it already says the same.
/// A new file gets the result and every event part; an existing one keeps
/// the event parts it has (an author may leave out a part whose order
/// depends on timing), with its values refreshed.
fn update(case: &Case, actual: &Actual) -> Verdict {
    let old = files::read_text(&case.expected, files::FIXTURE_LIMIT)
        .ok()
        .and_then(|t| Expected::parse(&t).ok());
    let new = match &old {
        Some(old) => actual.shaped_like(old),
        None => actual.full(),
    };
    if old.is_some_and(|old| json_eq(&old.document(), &new.document())) {
        return Verdict::Ok;
    }
    let text = match serde_json::to_string_pretty(&new.document()) {
        Ok(t) => t + "\n",
        Err(e) => return Verdict::Fail(vec![format!("cannot render the expected file: {e}")]),
    };
    // A new file renamed into place, never written through what is there
    // (a symlink, or a FIFO that would block the write forever).
    match dsh_orchestrator::journal::rundir::write_atomic(&case.expected, text.as_bytes()) {
        Ok(()) => Verdict::New,
        Err(e) => Verdict::Fail(vec![format!("cannot write: {e}")]),
    }
}
