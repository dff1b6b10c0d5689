//! The journaling provider: wraps whatever answers the run. Every call is
//! journaled (start, then the settled outcome, on disk before the script
//! sees it); calls whose key has an unused journaled answer are replayed at
//! once instead of reaching the provider; and every call of this attempt
//! is remembered for `--record`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::line::{Line, Outcome};
use super::reader::Journal;
use super::record::Recorder;
use super::writer::JournalWriter;
use super::{call_key, now_ms};
use crate::provider::{
    AgentRequest, CallLimits, ChildOrigin, ChildOutcome, ChildResult, ResultFault, StartRefused,
    Subagent, SubagentProvider, Usage,
};
use crate::providers::answered::AnsweredChild;

/// The journal's size limit unless the run sets one (`--journal-limit`).
pub const DEFAULT_JOURNAL_LIMIT: u64 = 256 << 20;

/// A journaled answer waiting to be replayed.
#[derive(Debug, Clone)]
struct Answer {
    outcome: Outcome,
    usage: Option<Usage>,
    child_id: Option<String>,
}

/// What the journaling provider shares with its owner: counts, the
/// recorded calls, and the journal writer.
#[derive(Default)]
pub struct Journaling {
    writer: Option<JournalWriter>,
    /// Journaled answers by (key, slot): slot k of key K is the k-th call
    /// with key K in call order within an attempt.
    answers: Mutex<HashMap<(String, usize), Answer>>,
    /// How many calls with each key this attempt has seen (the next slot).
    next_slot: Mutex<HashMap<String, usize>>,
    /// `--record`: a call is entered as cancelled when it starts and gets
    /// its outcome when it settles, so a call still open at the end is
    /// there.
    recorder: Option<Recorder>,
    replayed: AtomicU64,
    live: AtomicU64,
    /// The journal's size limit in bytes (see [`Journaling::with_limit`]).
    limit: u64,
    /// Calls whose answer was handed on but could not be journaled (the
    /// disk filled up, say): a resume asks them again.
    unjournaled: Mutex<Vec<u64>>,
}

impl Journaling {
    /// Journals to `writer` (when given), replays the answers of `previous`
    /// (a journal read back for a resume), and records the calls for a
    /// fixture to be written to `recording` (`--record`).
    pub fn new(
        writer: Option<JournalWriter>,
        previous: Option<&Journal>,
        recording: Option<&std::path::Path>,
    ) -> Self {
        let answers = previous.map(answers_by_slot).unwrap_or_default();
        Journaling {
            writer,
            answers: Mutex::new(answers),
            recorder: recording.map(Recorder::new),
            limit: DEFAULT_JOURNAL_LIMIT,
            ..Journaling::default()
        }
    }

    /// Sets the journal's size limit: a call whose `start` line would take
    /// the journal past `limit` bytes is refused with `BUDGET` (and so is
    /// every later one), which ends the run before it fills the disk. The
    /// answers of calls already running are still journaled, so the file
    /// can exceed the limit by what they bring.
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }

    /// Journals a call's `start` line (and enters it in the recording),
    /// within the journal's limit.
    fn append_start(
        &self,
        r: &AgentRequest,
        key: &str,
        replayed: bool,
    ) -> Result<(), StartRefused> {
        if let Some(w) = &self.writer {
            w.append_within(Line::start_text(r, key, replayed), self.limit)
                .map_err(|full| self.full(full))?;
        }
        if let Some(rec) = &self.recorder {
            rec.start(
                r.seq,
                &r.prompt,
                r.schema.as_ref(),
                r.options.model.as_deref(),
            );
        }
        Ok(())
    }

    fn full(&self, full: super::writer::JournalFull) -> StartRefused {
        StartRefused {
            code: dsh_protocol::ErrorCode::Budget,
            message: format!(
                "agent(): the run's journal reached its size limit ({} bytes used of {}); the run \
                 stops here rather than fill the disk. Resume it with a larger limit \
                 (dsh workflow resume RUN --journal-limit SIZE), or start it with one (--journal-limit)",
                full.used, full.limit
            ),
        }
    }

    /// Calls answered from the journal so far.
    pub fn replayed(&self) -> u64 {
        self.replayed.load(Ordering::Relaxed)
    }

    /// Calls that went to the provider so far.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Writes the calls of this attempt, in call order, as a fixture to
    /// `path` (see [`Recorder::write`]); nothing when not recording.
    pub fn write_recording(&self, path: &std::path::Path) -> Result<(), super::JournalError> {
        match &self.recorder {
            Some(r) => r.write(path),
            None => Ok(()),
        }
    }

    /// Appends a line that is not about a call (e.g. a new attempt).
    pub fn append(&self, line: &Line) {
        if let Some(w) = &self.writer {
            w.append(line);
        }
    }

    /// Makes `paths` durable with the first answer (see
    /// [`JournalWriter::also_sync`]).
    pub fn also_sync(&self, paths: Vec<std::path::PathBuf>) {
        if let Some(w) = &self.writer {
            w.also_sync(paths);
        }
    }

    /// Waits until every line so far is written (answers are synced as
    /// they are journaled).
    pub async fn flush(&self) {
        if let Some(w) = &self.writer {
            w.flush().await;
        }
    }

    /// The next slot of `key` in this attempt, and its journaled answer if
    /// it has a replayable one. A slot without one runs live and never
    /// takes another slot's answer.
    fn take_replay(&self, key: &str) -> Option<Answer> {
        let slot = {
            let mut next = self.next_slot.lock().ok()?;
            let n = next.entry(key.to_string()).or_insert(0);
            let slot = *n;
            *n += 1;
            slot
        };
        self.answers.lock().ok()?.remove(&(key.to_string(), slot))
    }

    async fn settle(
        &self,
        seq: u64,
        key: &str,
        child_id: Option<String>,
        outcome: Outcome,
        usage: Option<Usage>,
        worktree: Option<String>,
    ) {
        if let Some(rec) = &self.recorder {
            rec.settle(seq, &outcome, usage);
        }
        if let Some(w) = &self.writer {
            let written = w
                .append_durable(&Line::Settled {
                    seq,
                    key: key.to_string(),
                    child_id,
                    outcome,
                    usage,
                    worktree,
                    at: now_ms(),
                })
                .await;
            if !written && let Ok(mut u) = self.unjournaled.lock() {
                u.push(seq);
            }
        }
    }

    /// The calls (by `seq`) whose answers reached the script but not the
    /// journal, in the order they settled.
    pub fn unjournaled(&self) -> Vec<u64> {
        self.unjournaled
            .lock()
            .map(|u| u.clone())
            .unwrap_or_default()
    }
}

/// Wraps the run's provider (or none) with the journal.
pub struct JournalingProvider {
    inner: Option<Arc<dyn SubagentProvider>>,
    state: Arc<Journaling>,
}

impl JournalingProvider {
    /// Journals and replays through `state`; calls that are not replayed
    /// go to `inner` (with `None`, they are refused with `AGENT_START`).
    pub fn new(inner: Option<Arc<dyn SubagentProvider>>, state: Arc<Journaling>) -> Self {
        JournalingProvider { inner, state }
    }
}

#[async_trait]
impl SubagentProvider for JournalingProvider {
    fn prepare(&self, request: &mut AgentRequest) {
        if let Some(p) = &self.inner {
            p.prepare(request);
        }
    }

    fn call_limits(&self, request: &AgentRequest) -> CallLimits {
        match &self.inner {
            Some(p) => p.call_limits(request),
            None => CallLimits::of_call(request),
        }
    }

    async fn start(
        &self,
        mut request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        // Key what the child will actually be asked (an agent type's
        // model and system prompt included).
        self.prepare(&mut request);
        let key = call_key(&request);
        if let Some(answer) = self.state.take_replay(&key) {
            self.state.append_start(&request, &key, true)?;
            self.state.replayed.fetch_add(1, Ordering::Relaxed);
            if let Some(rec) = &self.state.recorder {
                rec.settle(request.seq, &answer.outcome, answer.usage);
            }
            let result = answer.outcome.to_child_result().ok_or_else(|| {
                StartRefused::agent_start("journal: an unreplayable answer was queued for replay")
            })?;
            let id = format!(
                "replayed:{}",
                answer.child_id.unwrap_or_else(|| request.seq.to_string())
            );
            let outcome = ChildOutcome {
                result,
                usage: answer.usage,
            };
            return Ok(Arc::new(
                AnsweredChild::new(id, ChildOrigin::Replayed, Ok(outcome)).answer_stands(),
            ));
        }
        self.state.append_start(&request, &key, false)?;
        self.state.live.fetch_add(1, Ordering::Relaxed);
        let seq = request.seq;
        // The request goes to the provider whole; the journal keeps only
        // its seq and key from here (a prompt can be megabytes).
        let started = match &self.inner {
            Some(p) => p.start(request, cancel).await,
            None => Err(StartRefused::agent_start(format!(
                "agent(): no provider is configured to answer call #{} (label {:?}); \
                 pass --fixture FILE, or give the run a provider",
                seq,
                crate::events::shown_label(&request.label)
            ))),
        };
        match started {
            Ok(child) => Ok(Arc::new(JournaledChild {
                inner: child,
                seq,
                key,
                state: self.state.clone(),
                abandoned: Mutex::new(None),
            })),
            Err(refused) => {
                self.state
                    .settle(seq, &key, None, Outcome::from_refusal(&refused), None, None)
                    .await;
                Err(refused)
            }
        }
    }
}

/// A live child whose outcome is journaled before it is handed on.
struct JournaledChild {
    inner: Arc<dyn Subagent>,
    seq: u64,
    key: String,
    state: Arc<Journaling>,
    /// Why the host gave up on the child (a stall or timeout), if it did:
    /// a child that then ends cancelled is journaled as failed with this
    /// reason, as the host reports it.
    abandoned: Mutex<Option<String>>,
}

#[async_trait]
impl Subagent for JournaledChild {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let mut r = self.inner.result().await;
        if let Ok(o) = &mut r
            && matches!(o.result, ChildResult::Cancelled)
            && let Some(reason) = self
                .abandoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        {
            o.result = ChildResult::Failed(reason);
        }
        let (outcome, usage) = Outcome::from_result(&r);
        // A provider decides whether to keep a worktree while its child
        // ends, so by now the branch (if any) is known.
        let worktree = self.inner.kept_worktree().map(|k| k.branch);
        self.state
            .settle(
                self.seq,
                &self.key,
                Some(self.inner.id().to_string()),
                outcome,
                usage,
                worktree,
            )
            .await;
        r
    }

    fn cancel(&self) {
        self.inner.cancel();
    }

    fn abandon(&self, reason: &str) {
        *self.abandoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        self.inner.abandon(reason);
    }

    fn progress(&self) -> Option<crate::provider::Progress> {
        self.inner.progress()
    }

    async fn dispose(&self) {
        self.inner.dispose().await;
    }

    fn origin(&self) -> ChildOrigin {
        self.inner.origin()
    }

    fn kept_worktree(&self) -> Option<crate::provider::KeptWorktree> {
        self.inner.kept_worktree()
    }
}

/// The replayable answers of a journal by (key, slot). Within each attempt
/// the calls with one key are numbered in call (`seq`) order; an attempt's
/// live answer for slot k replaces an earlier attempt's, and a replayed
/// call (no `settled` line) keeps the answer it replayed. So the n-th call
/// with a key gets the n-th answer with that key, whatever order the calls
/// settled in and however many resumes came before.
fn answers_by_slot(journal: &Journal) -> HashMap<(String, usize), Answer> {
    let mut answers = HashMap::new();
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
            if let Line::Settled {
                seq,
                outcome,
                usage,
                child_id,
                ..
            } = l
                && outcome.replayable()
                && let Some(slot) = slots.get(seq)
            {
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
        lines.clear();
    };
    for line in &journal.lines {
        if matches!(line, Line::Attempt { .. }) {
            flush(&mut attempt);
        }
        attempt.push(line);
    }
    flush(&mut attempt);
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(seq: u64, key: &str, replayed: bool) -> Line {
        Line::Start {
            seq,
            key: key.into(),
            label: format!("l{seq}"),
            phase: None,
            workflow: None,
            prompt: "p".into(),
            schema: None,
            model: None,
            effort: None,
            agent_type: None,
            provider: None,
            isolation: None,
            replayed,
            at: 0,
        }
    }

    fn settled(seq: u64, key: &str, outcome: Outcome) -> Line {
        Line::Settled {
            seq,
            key: key.into(),
            child_id: Some(format!("c{seq}")),
            outcome,
            usage: None,
            worktree: None,
            at: 0,
        }
    }

    fn attempt(n: u32) -> Line {
        Line::Attempt {
            attempt: n,
            pid: 1,
            at: 0,
        }
    }

    fn text(slot: &HashMap<(String, usize), Answer>, key: &str, n: usize) -> Option<String> {
        slot.get(&(key.to_string(), n)).map(|a| match &a.outcome {
            Outcome::Text(t) => t.clone(),
            other => format!("{other:?}"),
        })
    }

    #[test]
    fn slots_follow_call_order_not_settle_order_and_faults_keep_their_slot() {
        let j = Journal {
            lines: vec![
                attempt(1),
                start(1, "k", false),
                start(2, "k", false),
                start(3, "k", false),
                // Settled out of order; the first call's answer was a fault.
                settled(3, "k", Outcome::Text("third".into())),
                settled(2, "k", Outcome::Text("second".into())),
                settled(1, "k", Outcome::ResultError("reset".into())),
                // A resume: slot 0 ran live, slots 1 and 2 were replayed.
                attempt(2),
                start(1, "k", false),
                start(2, "k", true),
                start(3, "k", true),
                settled(1, "k", Outcome::Text("first, live".into())),
            ],
            ..Journal::default()
        };
        let a = answers_by_slot(&j);
        assert_eq!(text(&a, "k", 0).as_deref(), Some("first, live"));
        assert_eq!(text(&a, "k", 1).as_deref(), Some("second"));
        assert_eq!(text(&a, "k", 2).as_deref(), Some("third"));
    }

    #[test]
    fn a_replayed_slot_is_taken_once_per_attempt() {
        let j = Journal {
            lines: vec![
                attempt(1),
                start(1, "k", false),
                settled(1, "k", Outcome::Text("only".into())),
            ],
            ..Journal::default()
        };
        let state = Journaling::new(None, Some(&j), None);
        assert!(state.take_replay("k").is_some());
        assert!(state.take_replay("k").is_none(), "slot 1 has no answer");
        assert!(state.take_replay("other").is_none());
    }
}
