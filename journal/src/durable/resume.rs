//! Resuming a stored run: [`StoredRun`] finds and locks a run directory,
//! and [`StoredRun::resume`] reads its script, settings and journal into
//! the request and journal of the next attempt.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Durable, JournalWarning};
use crate::rundir::{
    self, ProviderSpec, RunDir, RunInfo, args_from_json, limits_from_json, sha256_hex,
};
use crate::store::{JournalStore, RunStore, RunStoreError};
use crate::writer::JournalWriter;
use crate::{DEFAULT_JOURNAL_LIMIT, JournalError, Journaling, Line, Replay, reader};
use dsh_engine::run::StartRequest;
use dsh_engine::script::Meta;

/// How a stored run is resumed.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// Run the script even if it changed; only calls whose keys still
    /// match are replayed.
    pub allow_changed: bool,
    /// Wall-clock budget of this attempt (default: the run's own).
    pub timeout: Option<std::time::Duration>,
    /// Write this attempt's answers as a fixture file here.
    pub record: Option<PathBuf>,
    /// The journal's size limit in bytes for this attempt (the journal as
    /// a whole, earlier attempts included); `None` is
    /// [`DEFAULT_JOURNAL_LIMIT`].
    pub journal_limit: Option<u64>,
    /// Which journaled answers are replayed (`--retry-failed`:
    /// [`Replay::Completed`]).
    pub replay: Replay,
}

/// Why a stored run cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError<E> {
    /// The run directory, its script or its journal (the message says
    /// which file and how to fix it).
    #[error("{0}")]
    Run(String),
    /// The provider for the calls that are not replayed could not be made.
    #[error(transparent)]
    Provider(E),
}

/// A run directory on disk, locked by this process while the value lives.
#[derive(Debug)]
pub struct StoredRun {
    dir: RunDir,
}

impl StoredRun {
    /// Finds a run by id under `runs_dir`, or by the path of its directory,
    /// and locks it (a run is never resumed twice at once).
    pub fn open(runs_dir: &Path, run: &str) -> Result<StoredRun, JournalError> {
        let path = rundir::resolve(runs_dir, run)?;
        Ok(StoredRun {
            dir: RunDir::open(&path)?,
        })
    }

    /// What `run.json` says.
    pub fn info(&self) -> &RunInfo {
        &self.dir.info
    }

    /// The run directory.
    pub fn path(&self) -> &Path {
        &self.dir.path
    }

    /// The request and journal of the next attempt: the script (its file
    /// if still there, else the copy; refused if it changed unless
    /// `allow_changed`), the run's args, limits and sandbox, and what
    /// `answering_for` (given the run's [`ProviderSpec`]) makes to answer
    /// the calls that are not replayed. The caller composes the request's
    /// provider from that and [`Durable::layer`], which replays the
    /// journaled answers. The request has no worker command: set one, or
    /// let [`start`](dsh_engine::run::start) resolve it.
    pub fn resume<T, E>(
        self,
        options: &ResumeOptions,
        answering_for: impl FnOnce(&ProviderSpec) -> Result<T, E>,
    ) -> Result<(StartRequest, Durable, T), ResumeError<E>> {
        let dir = self.dir;
        let info = dir.info.clone();
        let (script_path, source) = read_script(&dir, &info, options.allow_changed)?;
        let req = StartRequest::new(script_path.display().to_string(), source);
        let run_file = dir.path.join(rundir::RUN_FILE).display().to_string();
        let req = with_settings(req, &run_file, &info, options)?;
        let answering = answering_for(&info.provider).map_err(ResumeError::Provider)?;
        let (mut durable, state) =
            next_attempt(&dir, options).map_err(|e| ResumeError::Run(e.to_string()))?;

        let mut req = req.with_meta_fallback(Meta::default_for(Path::new(&info.script)));
        req.run_id = Some(info.id.clone());
        durable.dir = Mutex::new(Some(dir));
        durable.state = Some(state);
        durable.record = options.record.clone();
        durable.resumed = Some(info.id);
        Ok((req, durable, answering))
    }
}

/// The script to run: the original file if it is still there, else the
/// copy, with the path it was read from; refused if it changed since the
/// run started, unless `allow_changed`.
fn read_script<E>(
    dir: &RunDir,
    info: &RunInfo,
    allow_changed: bool,
) -> Result<(PathBuf, String), ResumeError<E>> {
    // Both are read bounded, regular files only: `run.json` is data a
    // cloned repository can ship, so its `script` may name `/dev/zero`
    // or a FIFO, and the copy is a file of the run directory (never
    // followed through a symlink, never a path out of it).
    let script_limit = limits_from_json(&info.limits)
        .map_or(dsh_engine::Limits::default().max_script_bytes, |l| {
            l.max_script_bytes
        }) as u64;
    let original = PathBuf::from(&info.script);
    let copy_name = Path::new(&info.script_copy);
    if copy_name.file_name() != Some(copy_name.as_os_str()) {
        return Err(ResumeError::Run(format!(
            "{}: the script copy's name {:?} is not a file name in the run directory; \
             the run directory was edited",
            dir.path.join(rundir::RUN_FILE).display(),
            info.script_copy
        )));
    }
    let copy = dir.path.join(copy_name);
    // Only a script file is read as the original: `run.json` could
    // name `~/.netrc`, whose lines a parse error (after
    // `--allow-changed`) would then quote.
    let original_text = match dsh_engine::script::ScriptKind::from_path(&original) {
        Some(_) => dsh_exec::files::read_text(&original, script_limit).map_err(|e| e.to_string()),
        None => Err("not a .ts, .mts, .js or .mjs file".to_string()),
    };
    let (script_path, source) = match original_text {
        Ok(text) => (original.clone(), text),
        Err(first) => {
            let text = dsh_exec::files::read_own_text(&copy, script_limit).map_err(|e| {
                ResumeError::Run(format!(
                    "{}: cannot read the script ({first}) or its copy {} ({e})",
                    info.script,
                    copy.display()
                ))
            })?;
            (copy.clone(), text)
        }
    };
    if sha256_hex(source.as_bytes()) != info.script_hash && !allow_changed {
        return Err(ResumeError::Run(format!(
            "{} changed since run {} started (the run kept the old version as {}); \
             resume it unchanged, or pass --allow-changed to run the new version and replay \
             only the calls whose prompt and options still match",
            script_path.display(),
            info.id,
            copy.display()
        )));
    }
    Ok((script_path, source))
}

/// `req` with the run's args, limits (its wall-clock budget replaced by
/// `--timeout`) and sandbox, as `run.json` keeps them.
fn with_settings<E>(
    req: StartRequest,
    run_file: &str,
    info: &RunInfo,
    options: &ResumeOptions,
) -> Result<StartRequest, ResumeError<E>> {
    let args = args_from_json(&info.args).ok_or_else(|| {
        ResumeError::Run(format!(
            "{run_file}: the run's args are not readable by this version of dsh"
        ))
    })?;
    let mut limits = limits_from_json(&info.limits).ok_or_else(|| {
        ResumeError::Run(format!(
            "{run_file}: the run's limits are not readable by this version of dsh"
        ))
    })?;
    // A stored record is data: its limits are checked as a caller's are.
    limits.validate().map_err(|e| {
        ResumeError::Run(format!(
            "{run_file}: the run's limit {}: {}",
            e.knob, e.message
        ))
    })?;
    if options.timeout.is_some() {
        limits.wall_timeout = options.timeout;
        limits
            .validate()
            .map_err(|e| ResumeError::Run(format!("--timeout: {}", e.message)))?;
    }
    let sandbox = info
        .sandbox
        .parse()
        .unwrap_or(dsh_protocol::SandboxPolicy::BestEffort);
    Ok(req
        .with_args(args)
        .with_limits(limits)
        .with_sandbox(sandbox))
}

/// The journal of the next attempt: the lines so far read (a torn last
/// line warned of and cut), an `attempt` line appended, and the state that
/// replays the journaled answers and journals the rest.
fn next_attempt(
    dir: &RunDir,
    options: &ResumeOptions,
) -> Result<(Durable, Arc<Journaling>), JournalError> {
    let journal_path = dir.journal_path();
    let previous = reader::read(&journal_path)?;
    let mut durable = Durable::none();
    if previous.torn {
        durable.warn(JournalWarning::TornLine {
            path: journal_path.display().to_string(),
        });
    }
    let writer = JournalWriter::open(&journal_path, Some(previous.valid_len))?;
    let (attempt, state) = next_journaling(Arc::new(writer), &previous, options);
    durable.attempt = attempt;
    Ok((durable, state))
}

/// The next attempt's journaling over `journal`, which holds `previous`:
/// its `attempt` line appended, and the state that replays what
/// `previous` answered and journals the rest. Returns the attempt's
/// number with it.
fn next_journaling(
    journal: Arc<dyn JournalStore>,
    previous: &reader::Journal,
    options: &ResumeOptions,
) -> (u32, Arc<Journaling>) {
    let attempt = previous.attempts() + 1;
    journal.append(&Line::Attempt {
        attempt,
        pid: std::process::id(),
        at: crate::now_ms(),
    });
    let state = Journaling::replaying(
        Some(journal),
        Some(previous),
        options.replay,
        options.record.as_deref(),
    )
    .with_limit(options.journal_limit.unwrap_or(DEFAULT_JOURNAL_LIMIT));
    (attempt, Arc::new(state))
}

/// Resumes run `id` kept in `store` (see [`StoredRun::resume`]): the
/// script as the store keeps it, the run's args, limits and sandbox, the
/// journaled answers replayed, and what `answering_for` makes for the
/// rest; the next attempt is journaled in the store. The store holds the
/// run for this process meanwhile ([`RunStore::hold`]). Inside a tokio
/// runtime.
pub async fn resume_stored<T, E>(
    store: Arc<dyn RunStore>,
    id: &str,
    options: &ResumeOptions,
    answering_for: impl FnOnce(&ProviderSpec) -> Result<T, E>,
) -> Result<(StartRequest, Durable, T), ResumeError<E>> {
    let place = format!("{} (run {id})", store.location());
    let run_problem = |e: RunStoreError| ResumeError::Run(format!("{place}: {e}"));
    let record = store.hold(id).await.map_err(run_problem)?;
    let info: RunInfo = serde_json::from_value(record.info).map_err(|e| {
        ResumeError::Run(format!(
            "{place}: the run's record is not readable by this version of dsh: {e}"
        ))
    })?;
    let name = Path::new(&info.script)
        .file_name()
        .map_or_else(|| info.script.clone(), |n| n.to_string_lossy().into_owned());
    let req = StartRequest::new(name, record.source);
    let req = with_settings(req, &place, &info, options)?;
    let answering = answering_for(&info.provider).map_err(ResumeError::Provider)?;
    let previous = reader::parse(Path::new(&place), record.journal.as_bytes())
        .map_err(|e| ResumeError::Run(e.to_string()))?;
    let journal = store.reopen(id).await.map_err(run_problem)?;
    let (attempt, state) = next_journaling(journal, &previous, options);
    let mut req = req.with_meta_fallback(Meta::default_for(Path::new(&info.script)));
    req.run_id = Some(info.id.clone());
    let mut durable = Durable::none();
    durable.state = Some(state);
    durable.record = options.record.clone();
    durable.resumed = Some(info.id.clone());
    durable.attempt = attempt;
    durable.stored = Some(super::Stored { store, info });
    Ok((req, durable, answering))
}
