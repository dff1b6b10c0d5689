//! Durable runs for applications: a run that keeps its run directory and
//! journal ([`Durable::new_run`]), a stored run made ready to resume
//! ([`StoredRun::resume`]), and the run itself while it goes
//! ([`DurableRun`]). `dsh workflow run` and `dsh workflow resume` are thin
//! callers of these.
//!
//! Nothing here prints: what a user should hear about the run directory
//! (it could not be created, the last journal line was torn) is collected
//! as [`JournalWarning`]s for the caller to show.
//!
//! A new run and the run while it goes are here; resuming a stored run is
//! in `durable/resume.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::rundir::{
    self, ProviderSpec, RunDir, RunInfo, args_to_json, limits_to_json, sha256_hex,
};
use super::store::{JournalStore, RunStore, RunStoreError};
use super::writer::JournalWriter;
use super::{DEFAULT_JOURNAL_LIMIT, JournalError, JournalLayer, Journaling, Line};
use dsh_engine::result::RunResult;
use dsh_engine::run::{StartError, StartRequest, WorkflowRun, new_run_id, start};

mod events;
mod resume;

use events::EventsWriter;
pub use resume::{ResumeError, ResumeOptions, StoredRun, resume_stored};

/// Whether a run keeps a run directory and journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalMode {
    /// Keep `<runs-dir>/<id>/` with `run.json`, the script copy and the
    /// journal; the run can be resumed.
    Keep,
    /// Keep nothing (the run cannot be resumed); a recording still works.
    Off,
}

/// How a new durable run is kept.
#[derive(Debug, Clone)]
pub struct DurableOptions {
    /// Where run directories go (the CLI's default is [`rundir::DEFAULT_RUNS_DIR`]).
    pub runs_dir: PathBuf,
    /// Whether to keep a run directory and journal.
    pub journal: JournalMode,
    /// Also write this attempt's answers as a fixture file here.
    pub record: Option<PathBuf>,
    /// The journal's size limit in bytes; `None` is
    /// [`DEFAULT_JOURNAL_LIMIT`].
    /// A call that would take the journal past it fails with `BUDGET`.
    pub journal_limit: Option<u64>,
}

/// Something about the run directory the user should know; the run goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalWarning {
    /// No run directory could be made: the run keeps no journal.
    #[error(
        "{problem}; this run keeps no journal and cannot be resumed (pass --runs-dir DIR, or --no-journal to silence this)"
    )]
    NoJournal {
        /// Why the run directory could not be made.
        problem: String,
    },
    /// The run directory could not be locked or written once the run started.
    #[error("cannot keep the run directory ({problem}); this run cannot be resumed")]
    NoRunDir {
        /// What failed.
        problem: String,
    },
    /// `result.json` could not be written.
    #[error("cannot write the run's result ({problem})")]
    NoResult {
        /// What failed.
        problem: String,
    },
    /// Answers reached the script but not the journal (the disk filled up,
    /// or the file could not be written): a resume asks those calls again.
    #[error(
        "{} answer(s) reached the script but could not be journaled (calls {}); a resume will ask them again",
        seqs.len(),
        seqs.iter().map(|s| format!("#{s}")).collect::<Vec<_>>().join(", ")
    )]
    Unjournaled {
        /// The calls' `seq`s.
        seqs: Vec<u64>,
    },
    /// The run's events could not be kept in its run directory
    /// (`events.jsonl`): the report of this attempt has no logs.
    #[error("cannot keep the run's events in {path} ({problem}); its report will have no logs")]
    NoEvents {
        /// The events file, as displayed.
        path: String,
        /// What failed.
        problem: String,
    },
    /// The run's events reached the size limit of `events.jsonl` (the
    /// journal's limit): the later ones were not kept there.
    #[error(
        "{path} reached its size limit ({limit} bytes, the journal's: --journal-limit); the run's later events are not kept there, so its report's logs stop where the file does"
    )]
    EventsCapped {
        /// The events file, as displayed.
        path: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// A crash cut the journal's last line; it is ignored.
    #[error("{path}: the last line was cut off by a crash and is ignored")]
    TornLine {
        /// The journal file, as displayed.
        path: String,
    },
}

/// The run directory, journal and recording of one run (or resume), before
/// the run starts. [`Durable::start`] starts the run with it.
pub struct Durable {
    /// Where the run directory goes and what `run.json` will say; `None`
    /// without a journal, or for a resume (its directory exists).
    pending: Option<(PathBuf, RunInfo, String)>,
    dir: Mutex<Option<RunDir>>,
    state: Option<Arc<Journaling>>,
    record: Option<PathBuf>,
    /// Set for a resume: the run's id.
    resumed: Option<String>,
    attempt: u32,
    warnings: Mutex<Vec<JournalWarning>>,
    /// Set for a run kept in a [`RunStore`] rather than a run directory.
    stored: Option<Stored>,
}

/// A run kept in a store: the store, and `run.json`'s document.
pub(super) struct Stored {
    pub(super) store: Arc<dyn RunStore>,
    pub(super) info: RunInfo,
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
            warnings: Mutex::new(Vec::new()),
            stored: None,
        }
    }

    /// Prepares the run directory of a new run (unless the journal is off)
    /// and gives the request its run id. The journal goes into the
    /// request's provider stack as [`Durable::layer`]. `script` is the
    /// file the request was read from (kept in `run.json` so a resume finds
    /// it); `provider` says how a resume answers the calls that were not
    /// journaled. Where no run directory can be made, the run goes on
    /// without one and a [`JournalWarning::NoJournal`] says so.
    pub fn new_run(
        req: &mut StartRequest,
        script: &Path,
        provider: ProviderSpec,
        options: &DurableOptions,
    ) -> Durable {
        let journal = options.journal == JournalMode::Keep;
        if !journal && options.record.is_none() {
            return Durable::none();
        }
        let mut durable = Durable::none();
        durable.record = options.record.clone();
        let root = options.runs_dir.clone();
        // An id given ahead (`run --detach` printed it) is kept when no run
        // has it yet; a run never takes over another's directory.
        let id = req
            .run_id
            .take()
            .filter(|id| !id.is_empty() && !id.contains('/') && !root.join(id).exists())
            .unwrap_or_else(new_run_id);
        req.run_id = Some(id.clone());
        let dir = root.join(&id);
        // A run matters more than its journal: where no run directory can
        // be kept (a read-only working directory, say), say so and run.
        let mut writer = None;
        if journal {
            let opened = std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create the run directory {}: {e}", dir.display()))
                .and_then(|()| {
                    JournalWriter::open(&dir.join(rundir::JOURNAL_FILE), None)
                        .map_err(|e| e.to_string())
                });
            match opened {
                Ok(w) => writer = Some(w),
                Err(problem) => durable.warn(JournalWarning::NoJournal { problem }),
            }
        }
        if let Some(w) = &writer {
            w.append(&Line::Attempt {
                attempt: 1,
                pid: std::process::id(),
                at: super::now_ms(),
            });
            let info = run_info(&id, req, script, provider);
            durable.pending = Some((root, info, req.source.clone()));
        }
        let state = Arc::new(
            Journaling::new(
                writer.map(|w| Arc::new(w) as Arc<dyn JournalStore>),
                None,
                options.record.as_deref(),
            )
            .with_limit(options.journal_limit.unwrap_or(DEFAULT_JOURNAL_LIMIT)),
        );
        durable.state = Some(state);
        durable
    }

    /// Keeps a new run in `store` instead of a run directory: its record
    /// (`run.json`'s document and the script) and its journal. Unlike
    /// [`Durable::new_run`], a store that cannot take the run is an error:
    /// the user named it, and a run it does not keep cannot be resumed or
    /// listed where they will look. Inside a tokio runtime.
    pub async fn new_run_in_store(
        req: &mut StartRequest,
        script: &Path,
        provider: ProviderSpec,
        store: Arc<dyn RunStore>,
        options: &DurableOptions,
    ) -> Result<Durable, RunStoreError> {
        let id = new_run_id();
        let info = run_info(&id, req, script, provider);
        let doc = serde_json::to_value(&info).unwrap_or(Value::Null);
        let journal = store.create(&id, &doc, &req.source).await?;
        journal.append(&Line::Attempt {
            attempt: 1,
            pid: std::process::id(),
            at: super::now_ms(),
        });
        req.run_id = Some(id.clone());
        let mut durable = Durable::none();
        durable.record = options.record.clone();
        durable.state = Some(Arc::new(
            Journaling::new(Some(journal), None, options.record.as_deref())
                .with_limit(options.journal_limit.unwrap_or(DEFAULT_JOURNAL_LIMIT)),
        ));
        durable.stored = Some(Stored { store, info });
        Ok(durable)
    }

    /// The journal as a layer of the run's provider stack: `None` when the
    /// run keeps neither a journal nor a recording. The provider of the
    /// request given to [`Durable::start`] must have been composed with it.
    pub fn layer(&self) -> Option<JournalLayer> {
        self.state.clone().map(JournalLayer::new)
    }

    /// What the user should hear so far (each warning once).
    pub fn take_warnings(&self) -> Vec<JournalWarning> {
        self.warnings
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }

    fn warn(&self, w: JournalWarning) {
        if let Ok(mut list) = self.warnings.lock() {
            list.push(w);
        }
    }

    /// Starts the run (see [`start`]). When it cannot start, the run
    /// directory prepared for it is removed and the error returned; so it
    /// is when the request's provider was not composed with
    /// [`Durable::layer`] (`USAGE`: its calls would not be journaled).
    pub fn start(self, req: StartRequest) -> Result<DurableRun, StartError> {
        if let Some(state) = &self.state
            && !state.layered.load(std::sync::atomic::Ordering::Relaxed)
        {
            self.abandon();
            return Err(StartError::Usage {
                message: "the run keeps a journal, but its provider is not behind it: put \
                          Durable::layer() into the provider's Stack before Durable::start \
                          (docs/embedding.md)"
                    .into(),
            });
        }
        match start(req) {
            Ok(run) => {
                self.started(&run);
                let events = self.keep_events(&run);
                Ok(DurableRun {
                    run,
                    durable: self,
                    events,
                })
            }
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// The run exists: lock its directory and write `run.json` with the
    /// meta the run resolved.
    fn started(&self, run: &WorkflowRun) {
        if let Some(stored) = &self.stored {
            let mut info = stored.info.clone();
            info.name = run.meta().name.clone();
            info.meta = serde_json::to_value(run.meta()).unwrap_or(Value::Null);
            let (store, id) = (stored.store.clone(), info.id.clone());
            let doc = serde_json::to_value(&info).unwrap_or(Value::Null);
            // Not waited for: `finish` records the result after it, on the
            // same store, whatever this found.
            tokio::spawn(async move {
                if let Err(e) = store.describe(&id, &doc).await {
                    tracing::warn!(
                        "{}: cannot record run {id}'s name and meta: {e}",
                        store.location()
                    );
                }
            });
            return;
        }
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
                        d.path.join(rundir::RUN_FILE),
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
            Err(e) => self.warn(JournalWarning::NoRunDir {
                problem: e.to_string(),
            }),
        }
    }

    /// The run never started: remove the directory prepared for it, or
    /// its record in the store (in the background: `start` is not async,
    /// and a caller that exits at once may leave the record, which then
    /// lists as interrupted).
    fn abandon(&self) {
        // A resumed run's record was there before this attempt, and stays.
        if let Some(stored) = &self.stored
            && self.resumed.is_none()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (store, id) = (stored.store.clone(), stored.info.id.clone());
            handle.spawn(async move {
                let _ = store.discard(&id).await;
            });
        }
        if let Some((root, info, _)) = &self.pending {
            let _ = std::fs::remove_dir_all(root.join(&info.id));
        }
    }
}

/// A running durable run: the [`WorkflowRun`] (reach it with
/// [`DurableRun::run`]) and its journal. [`DurableRun::finish`] disposes
/// the run and keeps its result.
pub struct DurableRun {
    run: WorkflowRun,
    durable: Durable,
    events: Option<EventsWriter>,
}

/// What [`DurableRun::finish`] reports.
#[derive(Debug)]
pub struct Finished {
    /// How the run settled.
    pub result: RunResult,
    /// Calls answered from the journal of an earlier attempt.
    pub replayed: u64,
    /// Calls that ran live in this attempt.
    pub live: u64,
    /// The run's id when this was a resume.
    pub resumed: Option<String>,
    /// The recording could not be written (`record` of the options).
    pub record_error: Option<(PathBuf, JournalError)>,
    /// What the user should hear that was not taken yet
    /// ([`DurableRun::take_warnings`]).
    pub warnings: Vec<JournalWarning>,
}

impl DurableRun {
    /// The run: its events, cancel, terminate.
    pub fn run(&self) -> &WorkflowRun {
        &self.run
    }

    /// See [`Durable::take_warnings`].
    pub fn take_warnings(&self) -> Vec<JournalWarning> {
        self.durable.take_warnings()
    }

    /// The run directory's events file, when the run keeps one (see
    /// [`rundir::EVENTS_FILE`]).
    pub fn events_file(&self) -> Option<&Path> {
        self.events.as_ref().and_then(|w| w.path.as_deref())
    }

    /// The run directory the journal is kept in; `None` without a journal.
    pub fn run_dir(&self) -> Option<PathBuf> {
        self.durable
            .dir
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(|d| d.path.clone()))
    }

    /// Waits for the run to settle (cancel it through [`DurableRun::run`]
    /// to stop it sooner), disposes it ([`WorkflowRun::dispose`]), then
    /// syncs the journal and writes `result.json` and the recording.
    pub async fn finish(self) -> Finished {
        self.run.result().await;
        let result = self.run.dispose().await;
        let d = &self.durable;
        if let Some(w) = self.events {
            w.finish(d).await;
        }
        let mut finished = Finished {
            result,
            replayed: 0,
            live: 0,
            resumed: d.resumed.clone(),
            record_error: None,
            warnings: Vec::new(),
        };
        let Some(state) = &d.state else {
            finished.warnings = d.take_warnings();
            return finished;
        };
        state.flush().await;
        finished.replayed = state.replayed();
        finished.live = state.live();
        let unjournaled = state.unjournaled();
        if !unjournaled.is_empty() {
            d.warn(JournalWarning::Unjournaled {
                seqs: unjournaled.clone(),
            });
        }
        let mut doc = json!({
            "result": finished.result.to_json(),
            "endedAt": super::now_ms(),
            "attempt": d.attempt,
            "replayed": finished.replayed,
            "live": finished.live,
        });
        if !unjournaled.is_empty() {
            doc["unjournaled"] = json!(unjournaled);
        }
        let dir = d.dir.lock().ok().and_then(|mut slot| slot.take());
        if let Some(dir) = &dir
            && let Err(e) = dir.write_result(&doc)
        {
            d.warn(JournalWarning::NoResult {
                problem: e.to_string(),
            });
        }
        if let Some(stored) = &d.stored
            && let Err(e) = stored.store.settle(&stored.info.id, d.attempt, &doc).await
        {
            d.warn(JournalWarning::NoResult {
                problem: format!("{}: {e}", stored.store.location()),
            });
        }
        if let Some(path) = &d.record
            && let Err(e) = state.write_recording(path)
        {
            finished.record_error = Some((path.clone(), e));
        }
        finished.warnings = d.take_warnings();
        finished
    }
}

/// `path` made absolute against the working directory.
pub fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

/// `run.json`'s document of a new run `id` of `req`, read from `script`
/// (also what a run submitted to a store's hosts records).
pub fn run_info(id: &str, req: &StartRequest, script: &Path, provider: ProviderSpec) -> RunInfo {
    let ext = script
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "ts".into());
    let args = args_to_json(&req.args);
    RunInfo {
        version: 1,
        id: id.to_string(),
        name: String::new(),
        script: absolute(script).display().to_string(),
        script_copy: format!("script.{ext}"),
        script_hash: sha256_hex(req.source.as_bytes()),
        args_hash: sha256_hex(args.to_string().as_bytes()),
        args,
        meta: Value::Null,
        limits: limits_to_json(&req.limits),
        sandbox: req.sandbox.as_str().into(),
        provider,
        started_at: super::now_ms(),
    }
}
