//! The journal's last attempt, as a summary reads it: streamed, one line
//! in memory at a time; earlier attempts leave only the answers a later
//! one replays (by call slot, the journal's replay rule).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

use super::{CallState, CallSummary, MAX_REASON_CHARS, cut};
use crate::rundir;
use crate::{JournalError, Line, Outcome, reader};
use dsh_seam::Usage;
use dsh_seam::outcome::CallOutcome;

/// What a settled call left for a later attempt that replays it.
#[derive(Debug, Clone)]
struct Answered {
    outcome: CallOutcome,
    usage: Option<Usage>,
    took_ms: u64,
    worktree: Option<String>,
    answer: Option<Value>,
}

/// An answer as a summary keeps it: a text, or a structured value whose
/// JSON text fits `max` characters; a larger structured value becomes its
/// JSON text, cut short (a string, so nobody mistakes it for the answer).
fn kept_answer(outcome: &Outcome, max: usize) -> Option<Value> {
    match outcome {
        Outcome::Text(t) => Some(Value::String(cut(t, max))),
        Outcome::Structured(v) => {
            let text = v.to_string();
            if text.chars().count() <= max {
                Some(v.clone())
            } else {
                Some(Value::String(cut(&text, max)))
            }
        }
        _ => None,
    }
}

/// One call of the attempt being read, with what the summary needs to
/// find its slot (its key) and whether its answer would be replayed.
pub(super) struct Read {
    pub(super) call: CallSummary,
    key: String,
    replayable: bool,
}

/// Numbers the calls of one attempt by slot (the n-th call with a key, in
/// `seq` order, is slot n: the journal's replay rule) and keeps each
/// replayable answer for the attempts after it.
fn close_attempt(calls: &BTreeMap<u64, Read>, answered: &mut HashMap<(String, usize), Answered>) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for r in calls.values() {
        let n = counts.entry(r.key.as_str()).or_insert(0);
        let slot = (r.key.clone(), *n);
        *n += 1;
        if r.call.replayed || !r.replayable {
            continue;
        }
        if let (Some(outcome), Some(took_ms)) = (&r.call.outcome, r.call.duration_ms()) {
            answered.insert(
                slot,
                Answered {
                    outcome: outcome.clone(),
                    usage: r.call.usage,
                    took_ms,
                    worktree: r.call.worktree.clone(),
                    answer: r.call.answer.clone(),
                },
            );
        }
    }
}

/// The slot of each replayed call of the last attempt, filled from the
/// attempt that answered it; without that attempt, completed.
fn fill_replayed(calls: &mut BTreeMap<u64, Read>, answered: &HashMap<(String, usize), Answered>) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for r in calls.values_mut() {
        let n = counts.entry(r.key.clone()).or_insert(0);
        let slot = (r.key.clone(), *n);
        *n += 1;
        if !r.call.replayed {
            continue;
        }
        if let Some(a) = answered.get(&slot) {
            let c = &mut r.call;
            c.reason = a.outcome.reason().map(|m| cut(m, MAX_REASON_CHARS));
            c.outcome = Some(a.outcome.clone());
            c.usage = a.usage;
            c.answered_in_ms = Some(a.took_ms);
            c.worktree = a.worktree.clone();
            c.answer = a.answer.clone();
        } else {
            // The journal no longer has the attempt that answered it (a
            // trimmed journal, a replay of a `--record` fixture): the
            // call was still answered as it started, so it reads
            // completed — neither `running` nor, once the attempt
            // settled, `cancelled`. What that answer's verdict was is
            // not known; `replayed` says where it came from.
            r.call.outcome = Some(CallOutcome::Completed);
        }
    }
}

/// The journal's last attempt: its calls (replayed ones with the answer
/// they replayed), when it started and its number.
pub(super) struct LastAttempt {
    pub(super) attempt_calls: BTreeMap<u64, Read>,
    pub(super) attempt_started_at: Option<u64>,
    pub(super) last_attempt: u32,
}

/// Reads the journal's last attempt, keeping `texts` characters of each
/// prompt and answer (`None`: none).
pub(super) fn read_last_attempt(
    dir: &Path,
    texts: Option<usize>,
) -> Result<LastAttempt, JournalError> {
    last_attempt_of(
        |each| reader::scan(&dir.join(rundir::JOURNAL_FILE), each).map(|_| ()),
        texts,
    )
}

/// [`read_last_attempt`] of a journal's text (a store's): `name` is only
/// named in errors.
pub(super) fn last_attempt_of_text(
    name: &str,
    text: &str,
    texts: Option<usize>,
) -> Result<LastAttempt, JournalError> {
    last_attempt_of(
        |each| reader::scan_bytes(Path::new(name), text.as_bytes(), each).map(|_| ()),
        texts,
    )
}

/// The last attempt of the journal `scan` hands over line by line.
fn last_attempt_of(
    scan: impl FnOnce(&mut dyn FnMut(Line)) -> Result<(), JournalError>,
    texts: Option<usize>,
) -> Result<LastAttempt, JournalError> {
    // Streamed: one line in memory at a time, whatever the journal's size;
    // earlier attempts leave only the answers a later one may replay.
    let mut attempt_calls: BTreeMap<u64, Read> = BTreeMap::new();
    let mut answered: HashMap<(String, usize), Answered> = HashMap::new();
    let mut attempt_started_at = None;
    let mut last_attempt = 0;
    scan(&mut |line| match line {
        Line::Attempt { at, attempt, .. } => {
            close_attempt(&attempt_calls, &mut answered);
            attempt_calls.clear();
            attempt_started_at = Some(at);
            last_attempt = attempt;
        }
        Line::Start {
            seq,
            key,
            label,
            phase,
            workflow,
            prompt,
            replayed,
            at,
            ..
        } => {
            attempt_calls.insert(
                seq,
                Read {
                    call: CallSummary {
                        seq,
                        label,
                        outcome: None,
                        state: CallState::Running,
                        replayed,
                        phase,
                        workflow,
                        started_at: at,
                        // A replayed call is answered as it starts.
                        settled_at: replayed.then_some(at),
                        answered_in_ms: None,
                        usage: None,
                        reason: None,
                        worktree: None,
                        session: None,
                        prompt: texts.map(|max| cut(&prompt, max)),
                        answer: None,
                    },
                    key,
                    replayable: false,
                },
            );
        }
        Line::Session { seq, session, .. } => {
            if let Some(r) = attempt_calls.get_mut(&seq) {
                r.call.session = Some(session);
            }
        }
        Line::Settled {
            seq,
            outcome,
            verdict,
            usage,
            worktree,
            at,
            ..
        } => {
            if let Some(r) = attempt_calls.get_mut(&seq) {
                // A journal older than verdicts: its answer says it.
                let verdict = verdict.unwrap_or_else(|| outcome.call_outcome());
                r.replayable = outcome.replayable();
                let c = &mut r.call;
                c.reason = verdict.reason().map(|m| cut(m, MAX_REASON_CHARS));
                c.outcome = Some(verdict);
                c.settled_at = Some(at);
                c.usage = usage;
                c.worktree = worktree;
                c.answer = texts.and_then(|max| kept_answer(&outcome, max));
            }
        }
    })?;
    fill_replayed(&mut attempt_calls, &answered);
    Ok(LastAttempt {
        attempt_calls,
        attempt_started_at,
        last_attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_large_structured_answer_is_kept_as_cut_text() {
        let small = Outcome::Structured(json!({"ok": true}));
        assert_eq!(kept_answer(&small, 100), Some(json!({"ok": true})));
        let large = Outcome::Structured(json!({"text": "x".repeat(50)}));
        let kept = kept_answer(&large, 10).expect("an answer");
        assert_eq!(kept.as_str().map(|s| s.chars().count()), Some(11));
        assert_eq!(kept_answer(&Outcome::Fail("no".into()), 10), None);
    }
}
