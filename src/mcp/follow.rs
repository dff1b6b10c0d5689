//! What `workflow_status` knows of a run: its phase, its agents by state
//! and its latest log lines, folded from the run directory's
//! `events.jsonl` as it grows (only the new lines are read at each look),
//! and whether it has settled (`result.json`, the run's lock).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use dsh_orchestrator::events::{Event, EventKind};
use dsh_orchestrator::journal::rundir;
use serde_json::{Value, json};

use crate::detach::{EventsFile, result_of};
use crate::error::CliError;

/// Log lines a status keeps and shows, newest last.
const LOGS_KEPT: usize = 10;

/// Longest log line a status shows, in characters.
const LOG_CHARS: usize = 500;

/// Runs followed at once; past it the least recently looked at is
/// forgotten (and read again from its first event if asked for again).
const FOLLOWED: usize = 256;

/// Where a run stands, in the words MCP clients rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// The status a settled run's `stopReason` gives.
    fn of_stop(stop: &str) -> Status {
        match stop {
            "completed" => Status::Completed,
            "cancelled" => Status::Cancelled,
            _ => Status::Failed,
        }
    }
}

/// One run as its events tell it.
struct Followed {
    events: EventsFile,
    phase: Option<String>,
    queued: u64,
    running: u64,
    completed: u64,
    failed: u64,
    logs: VecDeque<String>,
    warnings: u64,
    last_look: u64,
}

impl Followed {
    fn new(dir: &Path) -> Self {
        Followed {
            events: EventsFile::new(dir.join(rundir::EVENTS_FILE)),
            phase: None,
            queued: 0,
            running: 0,
            completed: 0,
            failed: 0,
            logs: VecDeque::new(),
            warnings: 0,
            last_look: 0,
        }
    }

    fn fold(&mut self, e: &Event) {
        match &e.kind {
            // A resume's attempt starts from nothing: its replayed calls
            // are counted again as they are answered.
            EventKind::Start { .. } => {
                let events = std::mem::replace(&mut self.events, EventsFile::new(PathBuf::new()));
                *self = Followed {
                    events,
                    last_look: self.last_look,
                    ..Followed::new(Path::new(""))
                };
            }
            EventKind::Phase { title, .. } => self.phase = Some(title.clone()),
            EventKind::Log { message, .. } => {
                if self.logs.len() == LOGS_KEPT {
                    self.logs.pop_front();
                }
                self.logs
                    .push_back(message.chars().take(LOG_CHARS).collect());
            }
            EventKind::Warning { .. } => self.warnings += 1,
            EventKind::AgentQueued { waiting: true, .. } => self.queued += 1,
            EventKind::AgentQueued { waiting: false, .. } => {
                self.queued = self.queued.saturating_sub(1);
            }
            EventKind::AgentStart { .. } => self.running += 1,
            EventKind::AgentEnd { outcome, .. } => {
                self.running = self.running.saturating_sub(1);
                if outcome.as_str() == "completed" {
                    self.completed += 1;
                } else {
                    self.failed += 1;
                }
            }
            _ => {}
        }
    }
}

/// A run's status at one look.
#[derive(Debug, Clone)]
pub(crate) struct Look {
    pub status: Status,
    /// The status as JSON, for `workflow_status`.
    pub json: Value,
    /// One line for a progress notification.
    pub line: String,
}

/// The runs this server has been asked about.
#[derive(Default)]
pub(crate) struct Follower {
    runs: HashMap<PathBuf, Followed>,
    looks: u64,
}

impl Follower {
    /// Reads what `dir`'s run wrote since the last look and says where it
    /// stands.
    pub(crate) fn look(&mut self, dir: &Path, id: &str) -> Result<Look, CliError> {
        if !self.runs.contains_key(dir) && self.runs.len() >= FOLLOWED {
            let oldest = self
                .runs
                .iter()
                .min_by_key(|(_, f)| f.last_look)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.runs.remove(&k);
            }
        }
        self.looks += 1;
        let f = self
            .runs
            .entry(dir.to_path_buf())
            .or_insert_with(|| Followed::new(dir));
        f.last_look = self.looks;
        for line in f.events.read_new()? {
            if let Some(e) = serde_json::from_str(&line)
                .ok()
                .and_then(|v| Event::from_json(&v))
            {
                f.fold(&e);
            }
        }
        // The lock first: a resumed run has the result of its earlier
        // attempt while it runs again.
        let locked = rundir::is_locked(dir);
        let result = if locked { None } else { result_of(dir)? };
        let (status, stop, error) = match &result {
            Some(doc) => {
                let stop = doc["result"]["stopReason"].as_str().unwrap_or("error");
                (
                    Status::of_stop(stop),
                    Some(stop.to_string()),
                    doc["result"]["error"].get("message").cloned(),
                )
            }
            None if locked => (Status::Running, None, None),
            // A run writes its result before it lets go of its lock, and
            // takes its lock before `run.json` is written (a start
            // returns once it is): unlocked without a result, it was
            // interrupted.
            None => (
                Status::Failed,
                Some("interrupted".to_string()),
                Some(Value::String(
                    "its process ended before the run settled; continue it with workflow_resume"
                        .into(),
                )),
            ),
        };
        let next = match status {
            Status::Running => "call workflow_status again to keep waiting",
            _ => "call workflow_result for the run's value and usage",
        };
        let phase = f.phase.clone();
        let line = format!(
            "{}{}: {} running, {} done, {} failed{}",
            status.as_str(),
            phase
                .as_deref()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default(),
            f.running,
            f.completed,
            f.failed,
            f.logs.back().map(|l| format!("; {l}")).unwrap_or_default()
        );
        let json = json!({
            "runId": id,
            "status": status.as_str(),
            "phase": phase,
            "agents": {
                "queued": f.queued,
                "running": f.running,
                "completed": f.completed,
                "failed": f.failed,
            },
            "logs": f.logs.iter().collect::<Vec<_>>(),
            "warnings": f.warnings,
            "stopReason": stop,
            "error": error,
            "next": next,
        });
        Ok(Look { status, json, line })
    }
}
