//! What a run directory says about its run, read without locking it:
//! status, counts and the agents of the last attempt with their timings,
//! tokens and outcomes (`dsh workflow runs`, `show` and `report`). The
//! journal's last attempt is read in `summary/attempt.rs`.

use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::JournalError;
use super::rundir::{self, RESULT_FILE, RunInfo};
use dsh_seam::Usage;
use dsh_seam::outcome::CallOutcome;

mod attempt;

use attempt::{LastAttempt, Read, last_attempt_of_text, read_last_attempt};

/// Longest failure reason a summary keeps, in characters: a reason can be
/// a child's whole stderr, and a 1,000-agent run must stay small in memory.
pub const MAX_REASON_CHARS: usize = 2000;

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

/// What became of one call in the last attempt, in short: derived from
/// [`CallSummary::outcome`] (and `replayed`), which holds the reason too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallState {
    /// Answered from the journal of an earlier attempt.
    Replayed,
    /// Started, not settled.
    Running,
    /// Answered with text or a structured answer.
    Completed,
    /// The child failed, its answer did not match the schema, or it
    /// stalled or timed out.
    Failed,
    /// The provider refused to start a child.
    StartError,
    /// An infrastructure fault delivering the result.
    ResultError,
    /// Cancelled before it answered.
    Cancelled,
}

impl CallState {
    /// The word of the state: `replayed`, `running`, or the outcome's
    /// [`CallOutcome::word`].
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Replayed => "replayed",
            CallState::Running => "running",
            CallState::Completed => "completed",
            CallState::Failed | CallState::ResultError => "failed",
            CallState::StartError => "refused",
            CallState::Cancelled => "cancelled",
        }
    }

    fn of(replayed: bool, outcome: Option<&CallOutcome>) -> CallState {
        match outcome {
            _ if replayed => CallState::Replayed,
            None => CallState::Running,
            Some(CallOutcome::Completed) => CallState::Completed,
            Some(CallOutcome::Cancelled) => CallState::Cancelled,
            Some(CallOutcome::Refused { .. }) => CallState::StartError,
            Some(CallOutcome::Undelivered { .. }) => CallState::ResultError,
            Some(_) => CallState::Failed,
        }
    }
}

/// One call of the last attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSummary {
    /// The call's `seq` in the attempt.
    pub seq: u64,
    /// The call's display label.
    pub label: String,
    /// How it ended, as the host decided it (the journal's `verdict`; for
    /// a replayed call, the verdict of the attempt that answered it, or
    /// [`CallOutcome::Completed`] when the journal no longer has that
    /// attempt); `None` while it runs, or if it never settled.
    pub outcome: Option<CallOutcome>,
    /// The same in short (see [`CallState`]).
    pub state: CallState,
    /// Its answer came from the journal of an earlier attempt.
    pub replayed: bool,
    /// Its phase; `None` without one (or in a journal older than phases).
    pub phase: Option<String>,
    /// The nested workflow that made it; `None` for the top-level script.
    pub workflow: Option<String>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at: u64,
    /// When it settled; `None` while running. A replayed call settles as
    /// it starts.
    pub settled_at: Option<u64>,
    /// How long the attempt that answered a replayed call took to answer
    /// it; `None` for a live call (see [`CallSummary::duration_ms`]), or
    /// when the journal does not have that attempt's answer.
    pub answered_in_ms: Option<u64>,
    /// The tokens its child reported (for a replayed call, the child of
    /// the attempt that answered it).
    pub usage: Option<Usage>,
    /// Why it did not complete (the outcome's reason), cut to
    /// [`MAX_REASON_CHARS`]; `None` otherwise.
    pub reason: Option<String>,
    /// The branch of the worktree its child changed and that was kept.
    pub worktree: Option<String>,
    /// The agent CLI session the call ran in (the last one named).
    pub session: Option<String>,
    /// Its prompt, cut to the summary's text limit; `None` unless texts
    /// were asked for ([`summarize_with_texts`]).
    pub prompt: Option<String>,
    /// Its answer (a text answer as a JSON string), cut to the summary's
    /// text limit; `None` unless texts were asked for, or without one.
    pub answer: Option<Value>,
}

impl CallSummary {
    /// Milliseconds from its start to its end; `None` while unsettled. For
    /// a replayed call: how long the attempt that answered it took.
    pub fn duration_ms(&self) -> Option<u64> {
        if self.replayed {
            return self.answered_in_ms;
        }
        self.settled_at
            .map(|end| end.saturating_sub(self.started_at))
    }

    /// The word views print for it: its outcome's
    /// ([`CallOutcome::word`]), or `running`.
    pub fn word(&self) -> &'static str {
        self.outcome.as_ref().map_or("running", CallOutcome::word)
    }
}

/// `s` cut to at most `max` characters, with `…` where it was cut.
pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
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
    /// When the last attempt began (its `attempt` line); `None` for a
    /// journal without one.
    pub attempt_started_at: Option<u64>,
    /// What could not be read and was left out (a `result.json` that is a
    /// symlink, a FIFO, too large, not JSON), one line each, naming the
    /// file; the caller shows them.
    pub warnings: Vec<String>,
    /// The process that holds a running run, when its store names it (a
    /// host, or a `run --store`: `HOST:PID`); `None` for a run directory.
    pub holder: Option<String>,
}

/// Reads one run directory, without prompts and answers.
pub fn summarize(dir: &Path) -> Result<RunSummary, JournalError> {
    summarize_inner(dir, None)
}

/// Reads one run directory with each call's prompt and answer, each cut
/// to `max_chars` characters (`dsh workflow report`).
pub fn summarize_with_texts(dir: &Path, max_chars: usize) -> Result<RunSummary, JournalError> {
    summarize_inner(dir, Some(max_chars))
}

fn summarize_inner(dir: &Path, texts: Option<usize>) -> Result<RunSummary, JournalError> {
    let info = rundir::read_info(dir)?;
    let mut warnings = Vec::new();
    let result = read_result(&dir.join(RESULT_FILE), &mut warnings);
    let last = read_last_attempt(dir, texts)?;
    let held = if rundir::is_locked(dir) {
        Held::Running
    } else {
        Held::Free
    };
    Ok(from_parts(info, result, last, held, warnings))
}

/// Whether a process holds a run (it runs, or is being resumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A process holds it: it is running.
    Running,
    /// Nobody holds it.
    Free,
}

/// What `runs`, `show` and `report` say about a run kept in a store: its
/// `run.json` document, `result.json`'s (if any), its journal's text and
/// whether a process holds it; `texts` as in [`summarize_with_texts`]
/// (`None`: no prompts and answers). `place` names the run in errors.
pub fn summarize_stored(
    place: &str,
    info: Value,
    result: Option<Value>,
    journal: &str,
    held: Held,
    texts: Option<usize>,
) -> Result<RunSummary, JournalError> {
    let info: RunInfo = serde_json::from_value(info).map_err(|e| JournalError::Invalid {
        path: place.to_string(),
        message: format!("the run's record is not readable by this version of dsh: {e}"),
    })?;
    let last = last_attempt_of_text(place, journal, texts)?;
    Ok(from_parts(info, result, last, held, Vec::new()))
}

fn from_parts(
    info: RunInfo,
    result: Option<Value>,
    last: LastAttempt,
    held: Held,
    warnings: Vec<String>,
) -> RunSummary {
    let LastAttempt {
        mut attempt_calls,
        attempt_started_at,
        last_attempt,
    } = last;
    // The last attempt settled (its result is written) with calls still
    // open: the run ended around them (a kill, a forced stop) and their
    // `agent-end`s said `cancelled`; so does the summary.
    let settled_attempt = result
        .as_ref()
        .and_then(|r| r["attempt"].as_u64())
        .is_some_and(|a| a == u64::from(last_attempt));
    if settled_attempt {
        for r in attempt_calls.values_mut() {
            if r.call.outcome.is_none() {
                r.call.outcome = Some(CallOutcome::Cancelled);
            }
        }
    }
    for r in attempt_calls.values_mut() {
        r.call.state = CallState::of(r.call.replayed, r.call.outcome.as_ref());
    }
    let (mut done, mut failed, mut replayed) = (0, 0, 0);
    for Read { call: c, .. } in attempt_calls.values() {
        if c.replayed {
            // Answered (and counted) in an earlier attempt.
            replayed += 1;
            continue;
        }
        match &c.outcome {
            Some(CallOutcome::Completed) => done += 1,
            Some(o) if o.is_failure() => failed += 1,
            _ => {}
        }
    }
    let last = result
        .as_ref()
        .and_then(|r| r["result"]["stopReason"].as_str())
        .map(str::to_string);
    let status = match held {
        Held::Running => RunStatus::Running { last },
        Held::Free => last.map_or(RunStatus::Interrupted, RunStatus::Settled),
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
    RunSummary {
        info,
        status,
        result,
        done,
        failed,
        replayed,
        elapsed_ms,
        unjournaled,
        attempt_started_at,
        calls: attempt_calls.into_values().map(|r| r.call).collect(),
        warnings,
        holder: None,
    }
}

/// `result.json`, read the one bounded way a run directory's files are
/// (a cloned repository can ship a run directory whose `result.json` is a
/// link to `/dev/zero`, a FIFO or a huge file): `None` when there is none,
/// or — with a warning naming the file — when it cannot be read.
fn read_result(path: &Path, warnings: &mut Vec<String>) -> Option<Value> {
    let text = match dsh_exec::files::read_own_text(path, dsh_exec::files::RESULT_LIMIT) {
        Ok(t) => t,
        Err(dsh_exec::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return None;
        }
        Err(e) => {
            warnings.push(format!(
                "{}: cannot read: {e}; the run is shown without its result",
                path.display()
            ));
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            warnings.push(format!(
                "{}: not a result of this dsh version ({e}); the run is shown without its result",
                path.display()
            ));
            None
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_marks_a_cut() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("äbcd", 2), "äb…");
        assert_eq!(cut("", 0), "");
    }
}
