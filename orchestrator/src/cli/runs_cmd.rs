//! Durable runs on the command line: the run directory every `dsh workflow
//! run` keeps ([`Durable`]), `--record`, and the commands `runs`, `show`
//! and `resume` (docs/fixtures.md, "Durable runs").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clap::Args;
use dsh_protocol::ErrorCode;
use serde_json::{Value, json};

use super::{
    EventsMode, NotStarted, OutputMode, Presentation, absolute, cli_worker, default_meta, exit,
    print_error, usage,
};
pub use crate::journal::rundir::ProviderSpec;
use crate::journal::rundir::{
    self, DEFAULT_RUNS_DIR, RESULT_FILE, RunDir, RunInfo, args_from_json, args_to_json,
    limits_from_json, limits_to_json, sha256_hex,
};
use crate::journal::writer::JournalWriter;
use crate::journal::{Journaling, JournalingProvider, Line, Outcome, reader};
use crate::providers::scripted::ScriptedProvider;
use crate::run::{StartRequest, WorkflowRun};
use crate::{RunResult, SubagentProvider};

/// The runs directory: `--runs-dir`, else `DSH_RUNS_DIR`, else
/// `.dsh/runs` under the working directory.
fn runs_root(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("DSH_RUNS_DIR") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_RUNS_DIR),
    }
}

fn sandbox_name(p: dsh_protocol::SandboxPolicy) -> &'static str {
    match p {
        dsh_protocol::SandboxPolicy::Strict => "strict",
        dsh_protocol::SandboxPolicy::BestEffort => "best-effort",
        dsh_protocol::SandboxPolicy::Off => "off",
    }
}

fn sandbox_from_name(s: &str) -> Option<dsh_protocol::SandboxPolicy> {
    match s {
        "strict" => Some(dsh_protocol::SandboxPolicy::Strict),
        "best-effort" => Some(dsh_protocol::SandboxPolicy::BestEffort),
        "off" => Some(dsh_protocol::SandboxPolicy::Off),
        _ => None,
    }
}

/// The run directory, journal and recording of one CLI run (or resume).
pub struct Durable {
    /// Where the run directory goes and what `run.json` will say; `None`
    /// with `--no-journal`.
    pending: Option<(PathBuf, RunInfo, String)>,
    dir: Mutex<Option<RunDir>>,
    state: Option<Arc<Journaling>>,
    record: Option<PathBuf>,
    /// Set for a resume: what to say at the end.
    resumed: Option<String>,
    attempt: u32,
}

impl Durable {
    /// Neither a journal nor a recording.
    fn none() -> Durable {
        Durable {
            pending: None,
            dir: Mutex::new(None),
            state: None,
            record: None,
            resumed: None,
            attempt: 1,
        }
    }

    /// Prepares the run directory of a new run (unless `journal` is off)
    /// and wraps the request's provider with the journal.
    pub(super) fn new_run(
        req: &mut StartRequest,
        script: &Path,
        provider: ProviderSpec,
        runs_dir: Option<&Path>,
        journal: bool,
        record: Option<PathBuf>,
    ) -> Durable {
        if !journal && record.is_none() {
            return Durable::none();
        }
        let id = crate::run::new_run_id();
        req.run_id = Some(id.clone());
        let mut writer = None;
        let mut pending = None;
        let root = runs_root(runs_dir);
        let dir = root.join(&id);
        // A run matters more than its journal: where no run directory can
        // be kept (a read-only working directory, say), say so and run.
        let opened = if journal {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create the run directory {}: {e}", dir.display()))
                .and_then(|()| {
                    JournalWriter::open(&dir.join(rundir::JOURNAL_FILE), None)
                        .map_err(|e| e.to_string())
                })
                .map_err(|e| {
                    warn(&format!(
                        "{e}; this run keeps no journal and cannot be resumed (pass --runs-dir DIR, or --no-journal to silence this)"
                    ))
                })
                .ok()
        } else {
            None
        };
        if let Some(w) = opened {
            w.append(&Line::Attempt {
                attempt: 1,
                pid: std::process::id(),
                at: crate::journal::now_ms(),
            });
            writer = Some(w);
            let ext = script
                .extension()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_else(|| "ts".into());
            let args = args_to_json(&req.args);
            let info = RunInfo {
                version: 1,
                id: id.clone(),
                name: String::new(),
                script: absolute(script).display().to_string(),
                script_copy: format!("script.{ext}"),
                script_hash: sha256_hex(req.source.as_bytes()),
                args_hash: sha256_hex(args.to_string().as_bytes()),
                args,
                meta: Value::Null,
                limits: limits_to_json(&req.limits),
                sandbox: sandbox_name(req.sandbox).into(),
                provider,
                started_at: crate::journal::now_ms(),
            };
            pending = Some((root, info, req.source.clone()));
        }
        let state = Arc::new(Journaling::new(writer, None, record.is_some()));
        req.provider = Some(Arc::new(JournalingProvider::new(
            req.provider.take(),
            state.clone(),
        )));
        Durable {
            pending,
            dir: Mutex::new(None),
            state: Some(state),
            record,
            resumed: None,
            attempt: 1,
        }
    }

    /// The run exists: lock its directory and write `run.json` with the
    /// meta the run resolved.
    pub(super) fn started(&self, run: &WorkflowRun) {
        let Some((root, info, source)) = &self.pending else {
            return;
        };
        let mut info = info.clone();
        info.name = run.meta().name.clone();
        info.meta = serde_json::to_value(run.meta()).unwrap_or(Value::Null);
        match RunDir::create(root, info, source) {
            Ok(d) => {
                // What a resume after a power loss needs besides the
                // journal: synced with the first answer, so runs that have
                // nothing to resume pay nothing.
                if let Some(state) = &self.state {
                    state.also_sync(vec![
                        d.path.join(crate::journal::rundir::RUN_FILE),
                        d.path.join(&d.info.script_copy),
                        d.path.clone(),
                        root.clone(),
                        root.parent().map(Path::to_path_buf).unwrap_or_default(),
                    ]);
                }
                if let Ok(mut slot) = self.dir.lock() {
                    *slot = Some(d);
                }
            }
            Err(e) => warn(&format!(
                "cannot keep the run directory ({e}); this run cannot be resumed"
            )),
        }
    }

    /// The run never started: remove the directory prepared for it.
    pub(super) fn abandon(&self) {
        if let Some((root, info, _)) = &self.pending {
            let _ = std::fs::remove_dir_all(root.join(&info.id));
        }
    }

    /// The run settled: journal synced, `result.json` written, the
    /// recording written, the resume summary printed.
    pub(super) async fn finish(&self, result: &RunResult) {
        let Some(state) = &self.state else {
            return;
        };
        state.flush().await;
        let dir = self.dir.lock().ok().and_then(|mut d| d.take());
        if let Some(dir) = &dir {
            let doc = json!({
                "result": result.to_json(),
                "endedAt": crate::journal::now_ms(),
                "attempt": self.attempt,
                "replayed": state.replayed(),
                "live": state.live(),
            });
            if let Err(e) = dir.write_result(&doc) {
                warn(&format!("cannot write the run's result ({e})"));
            }
        }
        if let Some(path) = &self.record
            && let Err(e) = crate::journal::record::write(path, &state.recorded())
        {
            print_error(
                ErrorCode::Usage,
                &format!("--record {}: cannot write the fixture: {e}", path.display()),
            );
        }
        if let Some(id) = &self.resumed {
            warn(&format!(
                "resumed run {id}: {} call(s) replayed from the journal, {} ran live",
                state.replayed(),
                state.live()
            ));
        }
    }
}

fn warn(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "dsh: {message}");
}

// ------------------------------------------------------------------ resume

#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The run id (under the runs directory), or the path of its run directory.
    pub run: String,
    /// Run the script even if it changed since the run; only calls whose keys still match are replayed.
    #[arg(long)]
    pub allow_changed: bool,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Answer the calls that are not replayed from this fixture (default: the run's own provider).
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,
    /// Write every agent() answer of this attempt to a fixture file.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Wall-clock budget of this attempt (default: the run's own).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// How events are shown on stderr.
    #[arg(long, value_enum, default_value_t = EventsMode::Pretty)]
    pub events: EventsMode,
    /// Also write every event as a JSON line to this file.
    #[arg(long, value_name = "PATH")]
    pub events_file: Option<PathBuf>,
    /// What goes to stdout: the value, or the whole result object.
    #[arg(long, value_enum, default_value_t = OutputMode::Value)]
    pub output: OutputMode,
    /// Also print the sandbox the worker reached.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

pub async fn resume(a: ResumeArgs) -> i32 {
    let show = Presentation {
        events: a.events,
        events_file: a.events_file.clone(),
        output: a.output,
        verbose: a.verbose,
    };
    let (req, durable) = match prepare_resume(&a) {
        Ok(x) => x,
        Err(e) => {
            print_error(e.code, &e.message);
            return exit::NOT_STARTED;
        }
    };
    let events_file = match show.open_events_file() {
        Ok(f) => f,
        Err(code) => return code,
    };
    super::execute(req, durable, &show, events_file).await
}

fn prepare_resume(a: &ResumeArgs) -> Result<(StartRequest, Durable), NotStarted> {
    let root = runs_root(a.runs_dir.as_deref());
    let path = rundir::resolve(&root, &a.run).map_err(|e| usage(e.to_string()))?;
    let dir = RunDir::open(&path).map_err(|e| usage(e.to_string()))?;
    let info = dir.info.clone();

    // The script: the original file if it is still there, else the copy.
    let original = PathBuf::from(&info.script);
    let copy = dir.path.join(&info.script_copy);
    let (script_path, source) = match std::fs::read_to_string(&original) {
        Ok(text) => (original.clone(), text),
        Err(_) => {
            let text = std::fs::read_to_string(&copy).map_err(|e| {
                usage(format!(
                    "{}: cannot read the script or its copy: {e}",
                    info.script
                ))
            })?;
            (copy.clone(), text)
        }
    };
    if sha256_hex(source.as_bytes()) != info.script_hash && !a.allow_changed {
        return Err(usage(format!(
            "{} changed since run {} started (the run kept the old version as {}); \
             resume it unchanged, or pass --allow-changed to run the new version and replay \
             only the calls whose prompt and options still match",
            script_path.display(),
            info.id,
            copy.display()
        )));
    }
    let args = args_from_json(&info.args).ok_or_else(|| {
        usage(format!(
            "{}: the run's args are not readable by this version of dsh",
            dir.path.join(rundir::RUN_FILE).display()
        ))
    })?;
    let mut limits = limits_from_json(&info.limits).ok_or_else(|| {
        usage(format!(
            "{}: the run's limits are not readable by this version of dsh",
            dir.path.join(rundir::RUN_FILE).display()
        ))
    })?;
    if a.timeout.is_some() {
        limits.wall_timeout = a.timeout;
        limits
            .validate()
            .map_err(|e| usage(format!("--timeout: {}", e.message)))?;
    }
    let sandbox =
        sandbox_from_name(&info.sandbox).unwrap_or(dsh_protocol::SandboxPolicy::BestEffort);

    let provider: Option<Arc<dyn SubagentProvider>> = match (&a.fixture, &info.provider) {
        (Some(f), _) => Some(load_fixture(f)?),
        (None, ProviderSpec::Fixture(f)) => Some(load_fixture(Path::new(f))?),
        (None, ProviderSpec::DryRun) => {
            Some(Arc::new(crate::providers::dry_run::DryRunProvider::new()))
        }
        (None, ProviderSpec::None) => None,
        (None, ProviderSpec::Configured { config, provider }) => {
            if let Some(c) = config
                && !Path::new(c).is_file()
            {
                return Err(usage(format!(
                    "the run's configuration file {c} is gone; restore it, or pass --fixture FILE \
                     to answer the calls that are not replayed"
                )));
            }
            let config = super::load_config(config.as_deref().map(Path::new))?;
            Some(Arc::new(super::router(&config, provider.clone())?))
        }
    };

    let journal_path = dir.journal_path();
    let previous = reader::read(&journal_path).map_err(|e| usage(e.to_string()))?;
    if previous.torn {
        warn(&format!(
            "{}: the last line was cut off by a crash and is ignored",
            journal_path.display()
        ));
    }
    let attempt = previous.attempts() + 1;
    let writer = JournalWriter::open(&journal_path, Some(previous.valid_len))
        .map_err(|e| usage(e.to_string()))?;
    writer.append(&Line::Attempt {
        attempt,
        pid: std::process::id(),
        at: crate::journal::now_ms(),
    });
    let state = Arc::new(Journaling::new(
        Some(writer),
        Some(&previous),
        a.record.is_some(),
    ));

    let mut req = StartRequest::new(script_path.display().to_string(), source)
        .with_args(args)
        .with_limits(limits)
        .with_worker(cli_worker()?)
        .with_sandbox(sandbox);
    req.meta_fallback = Some(default_meta(&original));
    req.run_id = Some(info.id.clone());
    req.provider = Some(Arc::new(JournalingProvider::new(provider, state.clone())));
    let id = info.id.clone();
    Ok((
        req,
        Durable {
            pending: None,
            dir: Mutex::new(Some(dir)),
            state: Some(state),
            record: a.record.clone(),
            resumed: Some(id),
            attempt,
        },
    ))
}

fn load_fixture(path: &Path) -> Result<Arc<dyn SubagentProvider>, NotStarted> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--fixture {}: cannot read: {e}", path.display())))?;
    let p = ScriptedProvider::from_json_text(&path.display().to_string(), &text)
        .map_err(|e| NotStarted::new(ErrorCode::FixtureInvalid, e.to_string()))?;
    Ok(Arc::new(p))
}

// ------------------------------------------------------------------ runs, show

#[derive(Args, Debug)]
pub struct RunsArgs {
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Show at most N runs, newest first.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The run id, or the path of its run directory.
    pub run: String,
    /// Where run directories are kept (default .dsh/runs; or DSH_RUNS_DIR).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
}

/// What `runs` and `show` say about one run directory.
struct Summary {
    info: RunInfo,
    status: String,
    result: Option<Value>,
    done: u64,
    failed: u64,
    replayed: u64,
    elapsed_ms: Option<u64>,
    agents: Vec<(u64, String, String, bool)>,
}

fn summarize(dir: &Path) -> Result<Summary, String> {
    let info = rundir::read_info(dir).map_err(|e| e.to_string())?;
    let result: Option<Value> = std::fs::read_to_string(dir.join(RESULT_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let journal = reader::read(&dir.join(rundir::JOURNAL_FILE)).map_err(|e| e.to_string())?;
    let mut agents: Vec<(u64, String, String, bool)> = Vec::new();
    let (mut done, mut failed, mut replayed) = (0, 0, 0);
    let mut attempt_agents = std::collections::BTreeMap::new();
    for line in &journal.lines {
        match line {
            Line::Attempt { .. } => attempt_agents.clear(),
            Line::Start {
                seq,
                label,
                replayed: r,
                ..
            } => {
                let outcome = if *r { "replayed" } else { "running" };
                attempt_agents.insert(*seq, (label.clone(), outcome.to_string(), *r));
            }
            Line::Settled { seq, outcome, .. } => {
                if let Some(a) = attempt_agents.get_mut(seq) {
                    a.1 = match outcome {
                        Outcome::Text(_) | Outcome::Structured(_) => "completed",
                        Outcome::Fail(_) => "failed",
                        Outcome::StartError(_) => "start error",
                        Outcome::ResultError(_) => "result error",
                        Outcome::Cancelled => "cancelled",
                    }
                    .to_string();
                }
            }
        }
    }
    for (seq, (label, outcome, r)) in attempt_agents {
        match outcome.as_str() {
            "completed" => done += 1,
            // Counted as replayed below (the answer was given in an
            // earlier attempt).
            "replayed" | "running" | "cancelled" => {}
            _ => failed += 1,
        }
        if r {
            replayed += 1;
        }
        agents.push((seq, label, outcome, r));
    }
    let status = match result
        .as_ref()
        .and_then(|r| r["result"]["stopReason"].as_str())
    {
        Some(s) if rundir::is_locked(dir) => format!("running (last: {s})"),
        Some(s) => s.to_string(),
        None if rundir::is_locked(dir) => "running".into(),
        None => "interrupted".into(),
    };
    let elapsed_ms = result
        .as_ref()
        .and_then(|r| r["endedAt"].as_u64())
        .map(|end| end.saturating_sub(info.started_at));
    Ok(Summary {
        info,
        status,
        result,
        done,
        failed,
        replayed,
        elapsed_ms,
        agents,
    })
}

/// `2026-11-30 04:38:12Z` for milliseconds since the epoch (UTC).
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn elapsed(ms: Option<u64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) if ms < 10_000 => format!("{ms}ms"),
        Some(ms) => format!("{}s", ms / 1000),
    }
}

pub fn runs(a: RunsArgs) -> i32 {
    let root = runs_root(a.runs_dir.as_deref());
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no runs under {}", root.display());
            return exit::COMPLETED;
        }
        Err(e) => {
            print_error(
                ErrorCode::Usage,
                &format!("{}: cannot list: {e}", root.display()),
            );
            return exit::NOT_STARTED;
        }
    };
    let mut all: Vec<Summary> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(rundir::RUN_FILE).is_file())
        .filter_map(|e| summarize(&e.path()).ok())
        .collect();
    all.sort_by_key(|s| std::cmp::Reverse(s.info.started_at));
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<34} {:<20} {:<12} {:<20} {:>13} {:>8}",
        "ID", "NAME", "STATUS", "STARTED", "DONE/FAIL/REP", "ELAPSED"
    );
    for s in all.iter().take(a.limit) {
        let _ = writeln!(
            out,
            "{:<34} {:<20} {:<12} {:<20} {:>13} {:>8}",
            s.info.id,
            s.info.name,
            s.status,
            utc(s.info.started_at),
            format!("{}/{}/{}", s.done, s.failed, s.replayed),
            elapsed(s.elapsed_ms)
        );
    }
    exit::COMPLETED
}

pub fn show(a: ShowArgs) -> i32 {
    let root = runs_root(a.runs_dir.as_deref());
    let s = match rundir::resolve(&root, &a.run)
        .map_err(|e| e.to_string())
        .and_then(|p| summarize(&p))
    {
        Ok(s) => s,
        Err(e) => {
            print_error(ErrorCode::Usage, &e);
            return exit::NOT_STARTED;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "run      {}", s.info.id);
    let _ = writeln!(out, "name     {}", s.info.name);
    let _ = writeln!(out, "script   {}", s.info.script);
    let _ = writeln!(out, "status   {}", s.status);
    let _ = writeln!(out, "started  {}", utc(s.info.started_at));
    let _ = writeln!(out, "elapsed  {}", elapsed(s.elapsed_ms));
    let _ = writeln!(
        out,
        "agents   {} done, {} failed, {} replayed",
        s.done, s.failed, s.replayed
    );
    // A replayed call's outcome column says `replayed`: its answer was
    // given (and counted) in an earlier attempt.
    for (seq, label, outcome, _) in &s.agents {
        let _ = writeln!(out, "  #{seq:<4} {outcome:<12} {label}");
    }
    let result = s
        .result
        .as_ref()
        .map(|r| r["result"].clone())
        .unwrap_or(Value::Null);
    let _ = writeln!(
        out,
        "result\n{}",
        serde_json::to_string_pretty(&result).unwrap_or_else(|_| "null".into())
    );
    exit::COMPLETED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_the_epoch_and_a_leap_day() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(utc(1_796_013_512_000), "2026-11-30 04:38:32Z");
    }
}
