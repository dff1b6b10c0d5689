//! The run's events kept in its run directory (`events.jsonl`), or in its
//! store, appended as they come by a task of their own, within the
//! journal's size limit.

use std::path::{Path, PathBuf};

use super::{Durable, JournalWarning};
use crate::DEFAULT_JOURNAL_LIMIT;
use crate::rundir;
use dsh_engine::run::WorkflowRun;

impl Durable {
    /// Appends the run's events to `events.jsonl` in its run directory as
    /// they come (a subscriber of its own, so a slow terminal never costs
    /// it events), so a report has the logs without any flag; within the
    /// journal's size limit ([`dsh_engine::events_file`]), on a thread of
    /// its own. `None` without a run directory, or when the file cannot be
    /// opened (said as a warning).
    pub(super) fn keep_events(&self, run: &WorkflowRun) -> Option<EventsWriter> {
        let limit = self
            .state
            .as_ref()
            .map_or(DEFAULT_JOURNAL_LIMIT, |s| s.limit());
        if let Some(stored) = &self.stored {
            let (store, id, events) = (
                stored.store.clone(),
                stored.info.id.clone(),
                run.subscribe(),
            );
            let shown = format!("{} (run {id})", store.location());
            return Some(EventsWriter {
                task: tokio::spawn(async move { store.keep_events(&id, events, limit).await }),
                path: None,
                shown,
                limit,
            });
        }
        let dir = self
            .dir
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(|d| d.path.clone()))?;
        // The journal's limit: the run directory's other file that grows
        // with the run, and the one bound the user sets for it.
        let path = dir.join(rundir::EVENTS_FILE);
        match open_events(&path) {
            Ok(file) => Some(EventsWriter {
                task: tokio::spawn(dsh_engine::events_file::write_events(
                    file,
                    run.subscribe(),
                    Some(limit),
                )),
                shown: path.display().to_string(),
                path: Some(path),
                limit,
            }),
            Err(e) => {
                self.warn(JournalWarning::NoEvents {
                    path: path.display().to_string(),
                    problem: e.to_string(),
                });
                None
            }
        }
    }
}

/// The task appending a run's events to its run directory.
pub(super) struct EventsWriter {
    task: tokio::task::JoinHandle<dsh_engine::events_file::Written>,
    /// The events file; `None` for a run kept in a store.
    pub(super) path: Option<PathBuf>,
    /// Where the events go, as a warning names it.
    shown: String,
    limit: u64,
}

/// Opens (creating) a run directory's events file for appending: never
/// through a symlink, and only a regular file (a run directory is data).
fn open_events(path: &Path) -> std::io::Result<std::fs::File> {
    dsh_exec::files::append_own(path)
}

impl EventsWriter {
    /// Waits for the writing to end and warns of what went wrong with it.
    pub(super) async fn finish(self, d: &Durable) {
        // Ends with the run's `workflow/end`, which came before the
        // result.
        if let Ok(written) = self.task.await {
            let path = self.shown;
            if let Some(e) = written.error {
                d.warn(JournalWarning::NoEvents {
                    path,
                    problem: e.to_string(),
                });
            } else if written.capped {
                d.warn(JournalWarning::EventsCapped {
                    path,
                    limit: self.limit,
                });
            }
        }
    }
}
