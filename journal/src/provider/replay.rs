//! A journal read back for a resume: its replayable answers and the
//! sessions of unanswered calls, by call slot, and which answers
//! [`Replay`] keeps.

use std::collections::{BTreeMap, HashMap};

use crate::line::{Line, Outcome};
use crate::reader::Journal;
use dsh_seam::{Session, Usage};

/// Something per call slot: slot k of key K is the k-th call with key K
/// in call order within an attempt.
pub(super) type BySlot<T> = HashMap<(String, usize), T>;

/// A journaled answer waiting to be replayed.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) outcome: Outcome,
    pub(super) usage: Option<Usage>,
    pub(super) child_id: Option<String>,
}

/// A journal's replayable answers by (key, slot), and the sessions of the
/// slots it left unanswered. Within each attempt the calls with one key
/// are numbered in call (`seq`) order; an attempt's live answer for slot k
/// replaces an earlier attempt's, and a replayed call (no `settled` line)
/// keeps the answer it replayed. So the n-th call with a key gets the n-th
/// answer with that key, whatever order the calls settled in and however
/// many resumes came before. A slot's session is the last one journaled
/// for it, in any attempt; it is kept only while the slot has no answer.
///
/// With [`Replay::Completed`] (`--retry-failed`) a slot whose last answer
/// failed (the host's verdict: failed, invalid, stalled, timed out) has no
/// answer and no session: it is asked afresh.
pub(super) fn by_slot(journal: &Journal, replay: Replay) -> (BySlot<Answer>, BySlot<Session>) {
    let mut answers = HashMap::new();
    let mut sessions = HashMap::new();
    let mut retried = std::collections::HashSet::new();
    let mut attempt: Vec<&Line> = Vec::new();
    let mut flush = |lines: &mut Vec<&Line>| {
        // seq → (key, slot), from the start lines in seq order.
        let mut starts: BTreeMap<u64, &str> = BTreeMap::new();
        for l in lines.iter() {
            if let Line::Start { seq, key, .. } = l {
                starts.insert(*seq, key);
            }
        }
        let mut counts: HashMap<&str, usize> = HashMap::new();
        let mut slots: HashMap<u64, (String, usize)> = HashMap::new();
        for (seq, key) in starts {
            let n = counts.entry(key).or_insert(0);
            slots.insert(seq, (key.to_string(), *n));
            *n += 1;
        }
        for l in lines.iter() {
            match l {
                Line::Settled {
                    seq,
                    outcome,
                    verdict,
                    ..
                } if replay == Replay::Completed
                    && outcome.replayable()
                    && verdict
                        .clone()
                        .unwrap_or_else(|| outcome.call_outcome())
                        .is_failure() =>
                {
                    if let Some(slot) = slots.get(seq) {
                        answers.remove(slot);
                        retried.insert(slot.clone());
                    }
                }
                Line::Settled {
                    seq,
                    outcome,
                    usage,
                    child_id,
                    ..
                } if outcome.replayable() => {
                    if let Some(slot) = slots.get(seq) {
                        retried.remove(slot);
                        answers.insert(
                            slot.clone(),
                            Answer {
                                outcome: outcome.clone(),
                                usage: *usage,
                                child_id: child_id.clone(),
                            },
                        );
                    }
                }
                Line::Session {
                    seq,
                    provider,
                    session,
                    ..
                } => {
                    if let Some(slot) = slots.get(seq) {
                        sessions.insert(
                            slot.clone(),
                            Session {
                                provider: provider.clone(),
                                id: session.clone(),
                            },
                        );
                    }
                }
                _ => {}
            }
        }
        lines.clear();
    };
    for line in &journal.lines {
        if matches!(line, Line::Attempt { .. }) {
            flush(&mut attempt);
        }
        attempt.push(line);
    }
    flush(&mut attempt);
    sessions.retain(|slot, _| !answers.contains_key(slot) && !retried.contains(slot));
    (answers, sessions)
}

/// Which journaled answers a resume replays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Replay {
    /// Every answer a child gave, failures included (a failed call fails
    /// again at once, as it did): the default.
    #[default]
    Answers,
    /// Only completed answers (`dsh workflow resume --retry-failed`): a
    /// call that failed, whose answer did not match its schema, that
    /// stalled or timed out is asked again, by the provider as it is
    /// configured now.
    Completed,
}
