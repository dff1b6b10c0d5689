//! Where `dsh workflow serve` reads runs: a runs directory (the file
//! journal), or a PostgreSQL store when `--store`, `DSH_STORE` or
//! `[store] url` names one — the same choice `runs` and `show` make.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_orchestrator::journal::rundir;
use dsh_orchestrator::journal::summary::{self, RunStatus};
use serde_json::Value;

use crate::detach::{self, Cancelled, EventsFile, Spawned};
use crate::error::CliError;
use crate::flags::ServeArgs;
use crate::runs_cmd::{cost, run_json, show_json};

/// Runs the list shows at most.
const LISTED: usize = 200;

/// Events one look reads at most from a store.
const STORE_BATCH: i64 = 500;

pub(super) enum Source {
    Dir {
        root: PathBuf,
        config: Option<PathBuf>,
    },
    Store {
        store: Arc<dsh_store::Store>,
        /// Its URL as given, for the resumes this server starts.
        url: String,
        config: Option<PathBuf>,
    },
}

/// An event stream being followed: what was sent so far.
pub(super) enum Follow {
    Dir {
        dir: PathBuf,
        events: EventsFile,
        /// Lines read so far (sent or skipped).
        lines: u64,
        /// Lines the client has already.
        after: u64,
    },
    Store {
        id: String,
        last: i64,
    },
}

impl Source {
    pub(super) async fn open(a: &ServeArgs) -> Result<Source, CliError> {
        let config = crate::request::load_config(a.config.as_deref())
            .unwrap_or_else(|_| dsh_orchestrator::config::Config::builtin());
        if let Some(url) = crate::request::store_url(a.store.as_deref(), &config)? {
            let store = crate::request::open_store(&url).await?;
            return Ok(Source::Store {
                store: Arc::new(store),
                url: url.to_string(),
                config: a.config.clone(),
            });
        }
        let root = crate::request::runs_root(a.runs_dir.as_deref());
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir()
                .map_err(|e| CliError::usage(format!("cannot read the working directory: {e}")))?
                .join(root)
        };
        Ok(Source::Dir {
            root,
            config: a.config.clone(),
        })
    }

    /// The run directory of `id` (an id, `latest`, a prefix; never a path).
    fn dir_of(root: &Path, id: &str) -> Result<PathBuf, CliError> {
        if id.contains('/') || id.starts_with('.') || id.is_empty() {
            return Err(CliError::usage(format!("{id:?} is not a run id")));
        }
        rundir::resolve(root, id).map_err(|e| CliError::usage(e.to_string()))
    }

    /// The run list: `runs --json`'s objects with their cost.
    pub(super) async fn runs(&self) -> Result<Value, CliError> {
        let all = match self {
            Source::Dir { root, .. } => {
                let root = root.clone();
                tokio::task::spawn_blocking(move || summary::list(&root))
                    .await
                    .map_err(|e| CliError::usage(e.to_string()))?
                    .map_err(|e| CliError::usage(e.to_string()))?
                    .unwrap_or_default()
            }
            Source::Store { store, .. } => store
                .summaries(LISTED as i64)
                .await
                .map_err(|e| CliError::usage(e.to_string()))?,
        };
        Ok(Value::Array(
            all.iter()
                .take(LISTED)
                .map(|s| {
                    let mut v = run_json(s);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("costUsd".into(), cost(&s.calls).into());
                    }
                    v
                })
                .collect(),
        ))
    }

    /// One run as `show --json` has it.
    pub(super) async fn run(&self, id: &str) -> Result<Value, CliError> {
        let s = match self {
            Source::Dir { root, .. } => {
                let dir = Self::dir_of(root, id)?;
                tokio::task::spawn_blocking(move || summary::summarize(&dir))
                    .await
                    .map_err(|e| CliError::usage(e.to_string()))?
                    .map_err(|e| CliError::usage(e.to_string()))?
            }
            Source::Store { store, .. } => {
                let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
                let id = store.resolve(id).await.map_err(usage)?;
                store.summary(&id, None).await.map_err(usage)?
            }
        };
        Ok(show_json(&s))
    }

    /// Cancels a running run; what happened, in words.
    pub(super) async fn cancel(&self, id: &str) -> Result<String, CliError> {
        match self {
            Source::Dir { root, .. } => {
                Self::dir_of(root, id)?;
                match detach::cancel_in(root, id)? {
                    Cancelled::Asked(id) => Ok(format!("run {id} is being cancelled")),
                    Cancelled::Settled(id) => Ok(format!("run {id} had settled already")),
                }
            }
            Source::Store { store, .. } => {
                let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
                let id = store.resolve(id).await.map_err(usage)?;
                store
                    .request_cancel(&id, "cancelled from dsh workflow serve")
                    .await
                    .map_err(usage)?;
                Ok(format!("run {id} is being cancelled"))
            }
        }
    }

    /// Resumes a run that no process runs, in a process of its own
    /// session, as `dsh workflow resume` would.
    pub(super) async fn resume(&self, id: &str) -> Result<String, CliError> {
        let (root, config) = match self {
            Source::Dir { root, config } => (root.clone(), config.clone()),
            Source::Store { store, url, config } => {
                return resume_stored(store, url, config.as_deref(), id).await;
            }
        };
        let dir = Self::dir_of(&root, id)?;
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if rundir::is_locked(&dir) {
            return Err(CliError::usage(format!(
                "run {id} is running: nothing to resume"
            )));
        }
        let argv = detach::resume_argv(&root, &id, false, config.as_deref(), None);
        let ready = detach::resumed_ready(&dir);
        let spawn_id = id.clone();
        let spawned =
            tokio::task::spawn_blocking(move || detach::spawn(&root, &spawn_id, argv, &ready))
                .await
                .map_err(|e| CliError::usage(e.to_string()))??;
        match spawned {
            Spawned::Started(mut child) => {
                // Reaped when it ends; the run does not depend on this
                // server.
                std::thread::spawn(move || child.wait());
                Ok(format!("run {id} is resuming"))
            }
            Spawned::Ended { code, said } => Err(CliError::usage(format!(
                "the resume of run {id} ended at once (exit {code}): {}",
                said.trim()
            ))),
        }
    }

    /// Starts following a run's events after the `after`-th.
    pub(super) async fn follow(&self, id: &str, after: u64) -> Result<Follow, CliError> {
        match self {
            Source::Dir { root, .. } => {
                let dir = Self::dir_of(root, id)?;
                Ok(Follow::Dir {
                    events: EventsFile::new(dir.join(rundir::EVENTS_FILE)),
                    dir,
                    lines: 0,
                    after,
                })
            }
            Source::Store { store, .. } => {
                let id = store
                    .resolve(id)
                    .await
                    .map_err(|e| CliError::usage(e.to_string()))?;
                Ok(Follow::Store {
                    id,
                    last: i64::try_from(after).unwrap_or(i64::MAX),
                })
            }
        }
    }
}

impl Follow {
    /// The events written since the last look, numbered, and whether the
    /// run has ended with all of them read.
    pub(super) async fn next(
        &mut self,
        source: &Source,
    ) -> Result<(Vec<(u64, String)>, bool), CliError> {
        match (self, source) {
            (
                Follow::Dir {
                    dir,
                    events,
                    lines,
                    after,
                },
                _,
            ) => {
                // Looked at before the read: a run that lets go of its
                // lock has written its last event.
                let running = rundir::is_locked(dir);
                let mut out = Vec::new();
                for line in events.read_new()? {
                    *lines += 1;
                    if *lines > *after {
                        out.push((*lines, line));
                    }
                }
                let ended = !running && out.is_empty();
                Ok((out, ended))
            }
            (Follow::Store { id, last }, Source::Store { store, .. }) => {
                let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
                // A stored run no process holds and without a result is
                // queued, or waits for a host to take it over: not ended.
                let running = !matches!(
                    store.summary(id, None).await.map_err(usage)?.status,
                    RunStatus::Settled(_)
                );
                let rows = store
                    .events_after(id, *last, STORE_BATCH)
                    .await
                    .map_err(usage)?;
                let mut out = Vec::new();
                for (seq, line) in rows {
                    *last = seq;
                    out.push((u64::try_from(seq).unwrap_or(0), line));
                }
                let ended = !running && out.is_empty();
                Ok((out, ended))
            }
            (Follow::Store { .. }, Source::Dir { .. }) => Ok((Vec::new(), true)),
        }
    }
}

/// Resumes a stored run that no process holds, as `dsh workflow resume ID
/// --store URL` in a process of its own session on this machine (under
/// its own lease, as a resume by hand), and returns once the store shows
/// it held again (or settled again).
async fn resume_stored(
    store: &Arc<dsh_store::Store>,
    url: &str,
    config: Option<&Path>,
    run: &str,
) -> Result<String, CliError> {
    let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
    let id = store.resolve(run).await.map_err(usage)?;
    let before = store.summary(&id, None).await.map_err(usage)?;
    if matches!(before.status, RunStatus::Running { .. }) {
        return Err(CliError::usage(format!(
            "run {id} is running: nothing to resume"
        )));
    }
    let mut argv: Vec<std::ffi::OsString> = vec![
        "workflow".into(),
        "resume".into(),
        id.clone().into(),
        "--store".into(),
        url.into(),
        "--events".into(),
        "none".into(),
    ];
    if let Some(c) = config {
        argv.extend(["--config".into(), c.into()]);
    }
    // What the process says before it holds the run is kept here, and
    // said if it ends first.
    let logs = std::env::temp_dir().join(format!("dsh-serve-{}", std::process::id()));
    let logs_dir = logs.clone();
    // Held again, or settled by a new attempt: the store says so, looked
    // at from this task while the start waits.
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let (store, id, ready) = (store.clone(), id.clone(), ready.clone());
        let started_before = before.attempt_started_at;
        tokio::spawn(async move {
            loop {
                if let Ok(s) = store.summary(&id, None).await
                    && (matches!(s.status, RunStatus::Running { .. })
                        || s.attempt_started_at != started_before)
                {
                    ready.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
    };
    let spawn_id = id.clone();
    let seen = ready.clone();
    let spawned = tokio::task::spawn_blocking(move || {
        detach::spawn(&logs, &spawn_id, argv, &|| {
            seen.load(std::sync::atomic::Ordering::SeqCst)
        })
    })
    .await
    .map_err(|e| CliError::usage(e.to_string()));
    watch.abort();
    // The log moved into nothing (a stored run has no directory here) or
    // was said: the scratch directory goes, unless another resume uses it.
    let _ = std::fs::remove_dir(logs_dir.join(".detached"));
    let _ = std::fs::remove_dir(&logs_dir);
    match spawned?? {
        Spawned::Started(mut child) => {
            std::thread::spawn(move || child.wait());
            Ok(format!("run {id} is resuming"))
        }
        Spawned::Ended { code, said } => Err(CliError::usage(format!(
            "the resume of run {id} ended at once (exit {code}): {}",
            said.trim()
        ))),
    }
}
