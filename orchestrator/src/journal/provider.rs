//! The journaling provider: wraps whatever answers the run. Every call is
//! journaled (start, then the settled outcome, on disk before the script
//! sees it); calls whose key has an unused journaled answer are replayed at
//! once instead of reaching the provider; and every call of this attempt
//! is remembered for `--record`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::line::{Line, Outcome};
use super::reader::Journal;
use super::record::Recorded;
use super::writer::JournalWriter;
use super::{call_key, now_ms};
use crate::provider::{
    AgentRequest, ChildOrigin, ChildOutcome, ResultFault, StartRefused, Subagent, SubagentProvider,
    Usage,
};

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
    replay: Mutex<HashMap<String, VecDeque<Answer>>>,
    recording: bool,
    /// By seq: a call is entered as cancelled when it starts and gets its
    /// outcome when it settles, so a call still open at the end is there.
    recorded: Mutex<std::collections::BTreeMap<u64, Recorded>>,
    replayed: AtomicU64,
    live: AtomicU64,
}

impl Journaling {
    /// Journals to `writer` (when given), replays the answers of `previous`
    /// (a journal read back for a resume), and remembers calls for
    /// `--record` when `recording`.
    pub fn new(writer: Option<JournalWriter>, previous: Option<&Journal>, recording: bool) -> Self {
        let mut replay: HashMap<String, VecDeque<Answer>> = HashMap::new();
        for line in previous.map(|j| j.lines.as_slice()).unwrap_or_default() {
            if let Line::Settled {
                key,
                outcome,
                usage,
                child_id,
                ..
            } = line
                && outcome.replayable()
            {
                replay.entry(key.clone()).or_default().push_back(Answer {
                    outcome: outcome.clone(),
                    usage: *usage,
                    child_id: child_id.clone(),
                });
            }
        }
        Journaling {
            writer,
            replay: Mutex::new(replay),
            recording,
            ..Journaling::default()
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

    /// The calls of this attempt with their outcomes, in call order.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.recorded
            .lock()
            .map(|r| r.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Appends a line that is not about a call (e.g. a new attempt).
    pub fn append(&self, line: &Line) {
        if let Some(w) = &self.writer {
            w.append(line);
        }
    }

    /// Waits until every line so far is written (answers are synced as
    /// they are journaled).
    pub async fn flush(&self) {
        if let Some(w) = &self.writer {
            w.flush().await;
        }
    }

    fn take_replay(&self, key: &str) -> Option<Answer> {
        let mut map = self.replay.lock().ok()?;
        let queue = map.get_mut(key)?;
        queue.pop_front()
    }

    async fn settle(
        &self,
        request: &AgentRequest,
        key: &str,
        child_id: Option<String>,
        outcome: Outcome,
        usage: Option<Usage>,
    ) {
        if let Some(w) = &self.writer {
            w.append_durable(&Line::Settled {
                seq: request.seq,
                key: key.to_string(),
                child_id,
                outcome: outcome.clone(),
                usage,
                at: now_ms(),
            })
            .await;
        }
        self.record(request, outcome, usage);
    }

    fn record(&self, request: &AgentRequest, outcome: Outcome, usage: Option<Usage>) {
        if !self.recording {
            return;
        }
        if let Ok(mut r) = self.recorded.lock() {
            r.insert(
                request.seq,
                Recorded {
                    seq: request.seq,
                    prompt: request.prompt.clone(),
                    schema: request.schema.clone(),
                    model: request.model.clone(),
                    outcome,
                    usage,
                },
            );
        }
    }
}

/// Wraps the run's provider (or none) with the journal.
pub struct JournalingProvider {
    inner: Option<Arc<dyn SubagentProvider>>,
    state: Arc<Journaling>,
}

impl JournalingProvider {
    pub fn new(inner: Option<Arc<dyn SubagentProvider>>, state: Arc<Journaling>) -> Self {
        JournalingProvider { inner, state }
    }
}

#[async_trait]
impl SubagentProvider for JournalingProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let key = call_key(&request);
        if let Some(answer) = self.state.take_replay(&key) {
            self.state.append(&Line::start(&request, &key, true));
            self.state.replayed.fetch_add(1, Ordering::Relaxed);
            self.state
                .record(&request, answer.outcome.clone(), answer.usage);
            let result = answer.outcome.to_child_result().ok_or_else(|| {
                StartRefused::agent_start("journal: an unreplayable answer was queued for replay")
            })?;
            return Ok(Arc::new(ReplayedChild {
                id: format!(
                    "replayed:{}",
                    answer.child_id.unwrap_or_else(|| request.seq.to_string())
                ),
                outcome: ChildOutcome {
                    result,
                    usage: answer.usage,
                },
            }));
        }
        self.state.append(&Line::start(&request, &key, false));
        self.state.live.fetch_add(1, Ordering::Relaxed);
        self.state.record(&request, Outcome::Cancelled, None);
        let started = match &self.inner {
            Some(p) => p.start(request.clone(), cancel).await,
            None => Err(StartRefused::agent_start(format!(
                "agent(): no provider is configured to answer call #{} (label {:?}); \
                 pass --fixture FILE, or give the run a provider",
                request.seq, request.label
            ))),
        };
        match started {
            Ok(child) => Ok(Arc::new(JournaledChild {
                inner: child,
                request,
                key,
                state: self.state.clone(),
            })),
            Err(refused) => {
                self.state
                    .settle(&request, &key, None, Outcome::from_refusal(&refused), None)
                    .await;
                Err(refused)
            }
        }
    }
}

/// A live child whose outcome is journaled before it is handed on.
struct JournaledChild {
    inner: Arc<dyn Subagent>,
    request: AgentRequest,
    key: String,
    state: Arc<Journaling>,
}

#[async_trait]
impl Subagent for JournaledChild {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let r = self.inner.result().await;
        let (outcome, usage) = Outcome::from_result(&r);
        self.state
            .settle(
                &self.request,
                &self.key,
                Some(self.inner.id().to_string()),
                outcome,
                usage,
            )
            .await;
        r
    }

    fn cancel(&self) {
        self.inner.cancel();
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

/// A call answered from the journal: settled from the start.
struct ReplayedChild {
    id: String,
    outcome: ChildOutcome,
}

#[async_trait]
impl Subagent for ReplayedChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        Ok(self.outcome.clone())
    }

    fn cancel(&self) {}

    async fn dispose(&self) {}

    fn origin(&self) -> ChildOrigin {
        ChildOrigin::Replayed
    }
}
