//! What a run directory says about its run, read without locking it:
//! status, counts and the agents of the last attempt (`dsh workflow runs`
//! and `show`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::rundir::{self, RESULT_FILE, RunInfo};
use super::{JournalError, Line, Outcome, reader};

/// Where a run stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunStatus {
    /// A dsh process holds its lock; `last` is the stop reason of an
    /// earlier attempt, if one settled.
    Running {
        /// The stop reason in `result.json`; `None` when no attempt settled.
        last: Option<String>,
    },
    /// It settled with this stop reason.
    Settled(String),
    /// No process holds it and it has no result: it was killed.
    Interrupted,
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunStatus::Running { last: None } => f.write_str("running"),
            RunStatus::Running { last: Some(s) } => write!(f, "running (last: {s})"),
            RunStatus::Settled(s) => f.write_str(s),
            RunStatus::Interrupted => f.write_str("interrupted"),
        }
    }
}

/// What became of one call in the last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallState {
    /// Answered from the journal of an earlier attempt.
    Replayed,
    /// Started, not settled.
    Running,
    /// Answered with text or a structured answer.
    Completed,
    /// The child failed.
    Failed,
    /// The provider refused to start a child.
    StartError,
    /// An infrastructure fault delivering the result.
    ResultError,
    /// Cancelled before it answered.
    Cancelled,
}

impl CallState {
    /// The word `show` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Replayed => "replayed",
            CallState::Running => "running",
            CallState::Completed => "completed",
            CallState::Failed => "failed",
            CallState::StartError => "start error",
            CallState::ResultError => "result error",
            CallState::Cancelled => "cancelled",
        }
    }

    fn of(outcome: &Outcome) -> CallState {
        match outcome {
            Outcome::Text(_) | Outcome::Structured(_) => CallState::Completed,
            Outcome::Fail(_) => CallState::Failed,
            Outcome::StartError(_) => CallState::StartError,
            Outcome::ResultError(_) => CallState::ResultError,
            Outcome::Cancelled => CallState::Cancelled,
        }
    }
}

/// One call of the last attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSummary {
    /// The call's `seq` in the attempt.
    pub seq: u64,
    /// The call's display label.
    pub label: String,
    /// What became of it.
    pub state: CallState,
    /// Its answer came from the journal.
    pub replayed: bool,
}

/// What `runs` and `show` say about one run directory.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Its `run.json`.
    pub info: RunInfo,
    /// Where it stands.
    pub status: RunStatus,
    /// `result.json`, once an attempt settled.
    pub result: Option<Value>,
    /// Calls of the last attempt that completed live.
    pub done: u64,
    /// Calls of the last attempt that failed, were refused or faulted.
    pub failed: u64,
    /// Calls of the last attempt answered from the journal.
    pub replayed: u64,
    /// Milliseconds from the run's creation to the end of its last settled
    /// attempt; `None` without a result.
    pub elapsed_ms: Option<u64>,
    /// The calls of the last attempt, in call order.
    pub calls: Vec<CallSummary>,
    /// Calls of the last settled attempt whose answers reached the script
    /// but not the journal (`result.json`'s `unjournaled`).
    pub unjournaled: Vec<u64>,
}

/// Reads one run directory.
pub fn summarize(dir: &Path) -> Result<RunSummary, JournalError> {
    let info = rundir::read_info(dir)?;
    let result: Option<Value> = std::fs::read_to_string(dir.join(RESULT_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    // Streamed: one line in memory at a time, whatever the journal's size.
    let mut attempt_calls: BTreeMap<u64, CallSummary> = BTreeMap::new();
    reader::scan(&dir.join(rundir::JOURNAL_FILE), |line| match &line {
        Line::Attempt { .. } => attempt_calls.clear(),
        Line::Start {
            seq,
            label,
            replayed,
            ..
        } => {
            let state = if *replayed {
                CallState::Replayed
            } else {
                CallState::Running
            };
            attempt_calls.insert(
                *seq,
                CallSummary {
                    seq: *seq,
                    label: label.clone(),
                    state,
                    replayed: *replayed,
                },
            );
        }
        Line::Settled { seq, outcome, .. } => {
            if let Some(c) = attempt_calls.get_mut(seq) {
                c.state = CallState::of(outcome);
            }
        }
    })?;
    let (mut done, mut failed, mut replayed) = (0, 0, 0);
    for c in attempt_calls.values() {
        match c.state {
            CallState::Completed => done += 1,
            // A replayed call was answered (and counted) in an earlier
            // attempt; it is counted as replayed below.
            CallState::Replayed | CallState::Running | CallState::Cancelled => {}
            CallState::Failed | CallState::StartError | CallState::ResultError => failed += 1,
        }
        if c.replayed {
            replayed += 1;
        }
    }
    let last = result
        .as_ref()
        .and_then(|r| r["result"]["stopReason"].as_str())
        .map(str::to_string);
    let status = if rundir::is_locked(dir) {
        RunStatus::Running { last }
    } else {
        last.map_or(RunStatus::Interrupted, RunStatus::Settled)
    };
    let unjournaled = result
        .as_ref()
        .and_then(|r| r["unjournaled"].as_array())
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let elapsed_ms = result
        .as_ref()
        .and_then(|r| r["endedAt"].as_u64())
        .map(|end| end.saturating_sub(info.started_at));
    Ok(RunSummary {
        info,
        status,
        result,
        done,
        failed,
        replayed,
        elapsed_ms,
        unjournaled,
        calls: attempt_calls.into_values().collect(),
    })
}

/// Every readable run under `runs_dir`, newest first; `None` when there is
/// no such directory. Directories that are not runs are skipped.
pub fn list(runs_dir: &Path) -> Result<Option<Vec<RunSummary>>, JournalError> {
    let entries = match std::fs::read_dir(runs_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(JournalError::io(runs_dir, e)),
    };
    let mut all: Vec<RunSummary> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(rundir::RUN_FILE).is_file())
        .filter_map(|e| summarize(&e.path()).ok())
        .collect();
    all.sort_by_key(|s| std::cmp::Reverse(s.info.started_at));
    Ok(Some(all))
}
