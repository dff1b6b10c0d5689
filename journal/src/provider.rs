//! The journaling provider: wraps whatever answers the run. Every call is
//! journaled (start, then the settled outcome, on disk before the script
//! sees it); calls whose key has an unused journaled answer are replayed at
//! once instead of reaching the provider; and every call of this attempt
//! is remembered for `--record`.
//!
//! The live child's wrapper is in `provider/child.rs`, the reading of a
//! journal into the answers a resume replays in `provider/replay.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::line::{Line, Outcome};
use super::reader::Journal;
use super::record::Recorder;
use super::{call_key, now_ms};
use crate::store::JournalStore;
use dsh_seam::answered::AnsweredChild;
use dsh_seam::outcome::CallOutcome;
use dsh_seam::{
    AgentRequest, CallLimits, CallSlot, ChildOrigin, ChildOutcome, Session, StartRefused, Subagent,
    SubagentProvider, Usage,
};

mod child;
mod replay;

use child::{JournaledChild, watch_sessions};
pub use replay::Replay;
use replay::{Answer, BySlot, by_slot};

/// The journal's size limit unless the run sets one (`--journal-limit`).
pub const DEFAULT_JOURNAL_LIMIT: u64 = 256 << 20;

/// What a call's slot holds on a resume.
enum Slot {
    /// A journaled answer to replay.
    Replay(Answer),
    /// Nothing to replay: the call runs live as call `n` of its key,
    /// continuing this session of an earlier attempt if there is one.
    Live(u32, Option<Session>),
}

/// What the journaling provider shares with its owner: counts, the
/// recorded calls, and the journal writer.
#[derive(Default)]
pub struct Journaling {
    writer: Option<Arc<dyn JournalStore>>,
    /// Journaled answers by (key, slot): slot k of key K is the k-th call
    /// with key K in call order within an attempt.
    answers: Mutex<BySlot<Answer>>,
    /// The sessions of calls an earlier attempt left unanswered, by (key,
    /// slot): continued when the slot runs live again.
    sessions: Mutex<BySlot<Session>>,
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
    /// Whether a [`crate::JournalLayer`] put a provider behind this state
    /// (what [`crate::Durable::start`] checks).
    pub(crate) layered: AtomicBool,
}

impl Journaling {
    /// Journals to `writer` (when given: the file journal, or another
    /// [`JournalStore`]), replays the answers of `previous`
    /// (a journal read back for a resume), and records the calls for a
    /// fixture to be written to `recording` (`--record`).
    pub fn new(
        writer: Option<Arc<dyn JournalStore>>,
        previous: Option<&Journal>,
        recording: Option<&std::path::Path>,
    ) -> Self {
        Journaling::replaying(writer, previous, Replay::Answers, recording)
    }

    /// [`Journaling::new`], replaying the answers of `previous` that
    /// `replay` names.
    pub fn replaying(
        writer: Option<Arc<dyn JournalStore>>,
        previous: Option<&Journal>,
        replay: Replay,
        recording: Option<&std::path::Path>,
    ) -> Self {
        let (answers, sessions) = previous.map(|j| by_slot(j, replay)).unwrap_or_default();
        Journaling {
            writer,
            answers: Mutex::new(answers),
            sessions: Mutex::new(sessions),
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

    fn full(&self, full: crate::store::JournalFull) -> StartRefused {
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

    /// The journal's size limit in bytes (see [`Journaling::with_limit`]).
    pub fn limit(&self) -> u64 {
        self.limit
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
    /// [`JournalStore::also_sync`]).
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

    /// The next slot of `key` in this attempt: its journaled answer if it
    /// has a replayable one, else the session an earlier attempt left it
    /// in, if any. A slot without an answer runs live and never takes
    /// another slot's answer.
    fn take_slot(&self, key: &str) -> Slot {
        let slot = {
            let mut next = self.next_slot.lock().unwrap_or_else(|e| e.into_inner());
            let n = next.entry(key.to_string()).or_insert(0);
            let slot = *n;
            *n += 1;
            (key.to_string(), slot)
        };
        let answer = self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&slot);
        match answer {
            Some(a) => Slot::Replay(a),
            None => Slot::Live(
                u32::try_from(slot.1).unwrap_or(u32::MAX),
                self.sessions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&slot),
            ),
        }
    }

    /// Journals that call `seq`'s CLI runs `session` (not durable: it is
    /// of use only if the call never settles, and a lost line only costs
    /// the continuation).
    fn append_session(&self, seq: u64, key: &str, session: &Session) {
        if let Some(w) = &self.writer {
            w.append(&Line::Session {
                seq,
                key: key.to_string(),
                provider: session.provider.clone(),
                session: session.id.clone(),
                at: now_ms(),
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn settle(
        &self,
        seq: u64,
        key: &str,
        child_id: Option<String>,
        outcome: Outcome,
        verdict: CallOutcome,
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
                    verdict: Some(verdict),
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
        // The request comes prepared (`SubagentProvider::prepare`): the key
        // is what the child will actually be asked (an agent type's model
        // and system prompt included).
        let key = call_key(&request);
        let answer = match self.state.take_slot(&key) {
            Slot::Replay(answer) => Some(answer),
            Slot::Live(n, session) => {
                request.resume = session;
                request.slot = Some(CallSlot {
                    key: key.clone(),
                    n,
                });
                None
            }
        };
        if let Some(answer) = answer {
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
                dsh_engine::events::shown_label(&request.label)
            ))),
        };
        match started {
            Ok(child) => {
                let sessions = self.state.writer.is_some().then(|| {
                    watch_sessions(child.progress(), self.state.clone(), seq, key.clone())
                });
                Ok(Arc::new(JournaledChild {
                    inner: child,
                    seq,
                    key,
                    state: self.state.clone(),
                    abandoned: Mutex::new(None),
                    answer: Mutex::new(None),
                    sessions: sessions.flatten(),
                }))
            }
            Err(refused) => {
                let verdict = CallOutcome::Refused {
                    reason: refused.message.clone(),
                }
                .cut(dsh_engine::events::MAX_REASON_CHARS);
                self.state
                    .settle(
                        seq,
                        &key,
                        None,
                        Outcome::from_refusal(&refused),
                        verdict,
                        None,
                        None,
                    )
                    .await;
                Err(refused)
            }
        }
    }
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
            verdict: None,
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
        let (a, _) = by_slot(&j, Replay::Answers);
        assert_eq!(text(&a, "k", 0).as_deref(), Some("first, live"));
        assert_eq!(text(&a, "k", 1).as_deref(), Some("second"));
        assert_eq!(text(&a, "k", 2).as_deref(), Some("third"));
    }

    fn session(seq: u64, key: &str, id: &str) -> Line {
        Line::Session {
            seq,
            key: key.into(),
            provider: "claude".into(),
            session: id.into(),
            at: 0,
        }
    }

    #[test]
    fn an_unanswered_slot_keeps_its_last_session() {
        let j = Journal {
            lines: vec![
                attempt(1),
                start(1, "k", false),
                start(2, "k", false),
                start(3, "j", false),
                session(1, "k", "s1"),
                session(2, "k", "s2"),
                session(3, "j", "s3"),
                // Slot k/0 answered; k/1 and j/0 interrupted.
                settled(1, "k", Outcome::Text("done".into())),
                // A resume: j/0 ran again in a new session and was
                // interrupted again; k/1 was cancelled.
                attempt(2),
                start(1, "k", true),
                start(2, "k", false),
                start(3, "j", false),
                session(3, "j", "s3b"),
                settled(2, "k", Outcome::Cancelled),
            ],
            ..Journal::default()
        };
        let (answers, sessions) = by_slot(&j, Replay::Answers);
        assert_eq!(answers.len(), 1);
        let id = |k: &str, n: usize| sessions.get(&(k.to_string(), n)).map(|s| s.id.clone());
        assert_eq!(id("k", 0), None, "answered: replayed, not continued");
        assert_eq!(id("k", 1).as_deref(), Some("s2"));
        assert_eq!(
            id("j", 0).as_deref(),
            Some("s3b"),
            "the later attempt's session"
        );
        let state = Journaling::new(None, Some(&j), None);
        assert!(matches!(state.take_slot("k"), Slot::Replay(_)));
        assert!(
            matches!(state.take_slot("k"), Slot::Live(_, Some(s)) if s.id == "s2" && s.provider == "claude")
        );
    }

    #[test]
    fn retrying_failed_calls_replays_only_completed_answers() {
        let verdict = |seq: u64, outcome: Outcome, verdict: CallOutcome| {
            let mut line = settled(seq, "k", outcome);
            if let Line::Settled { verdict: v, .. } = &mut line {
                *v = Some(verdict);
            }
            line
        };
        let j = Journal {
            lines: vec![
                attempt(1),
                start(1, "k", false),
                start(2, "k", false),
                start(3, "k", false),
                start(4, "k", false),
                session(3, "k", "s3"),
                verdict(1, Outcome::Text("ok".into()), CallOutcome::Completed),
                // A journal from before verdicts: its answer says failed.
                settled(2, "k", Outcome::Fail("no".into())),
                verdict(
                    3,
                    Outcome::Fail("stalled: …".into()),
                    CallOutcome::Stalled {
                        reason: "stalled: …".into(),
                    },
                ),
                verdict(
                    4,
                    Outcome::Text("not json".into()),
                    CallOutcome::Invalid {
                        reason: "not json".into(),
                    },
                ),
            ],
            ..Journal::default()
        };
        let (all, _) = by_slot(&j, Replay::Answers);
        assert_eq!(all.len(), 4, "by default every answer replays");
        let (answers, sessions) = by_slot(&j, Replay::Completed);
        assert_eq!(text(&answers, "k", 0).as_deref(), Some("ok"));
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert!(sessions.is_empty(), "a retried call starts afresh");
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
        assert!(matches!(state.take_slot("k"), Slot::Replay(_)));
        assert!(
            matches!(state.take_slot("k"), Slot::Live(_, None)),
            "slot 1 has no answer"
        );
        assert!(matches!(state.take_slot("other"), Slot::Live(_, None)));
    }
}
