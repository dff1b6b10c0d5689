//! The run's side of the agent pools: a call to a pooled provider
//! (`[store] pools`) is asked in the store, and an agent host answers it
//! (`dsh workflow host --agents POOL=N`, [`crate::agents`]).
//!
//! [`Pools`] is a handle on one task that owns the calls this process
//! waits for: it looks at them all in one statement every [`LOOK`], and
//! at once for a run whose call was answered (`dsh_call_settled`). A
//! [`PoolProvider`] — one per pool and run — asks for each call under its
//! place in the run ([`dsh_seam::CallSlot`], set by the journal, the same
//! in every attempt), so the attempt that continues a run after its host
//! died finds the call its predecessor asked for, answered or still being
//! answered, instead of asking twice.
//!
//! What it is not: the journal. The journal stays the run's own, in front
//! of this provider; an answer is journaled by the run's process when it
//! reaches it, as any provider's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_journal::Outcome;
use dsh_protocol::Usage;
use dsh_seam::{
    AgentRequest, ChildOutcome, ChildResult, Progress, ResultFault, StartRefused, Subagent,
    SubagentProvider,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::calls::wire::CallRequest;
use crate::calls::{CallId, CallState, Settled};
use crate::{Notice, Store, StoreError};

/// How often the calls this process waits for are looked at besides the
/// store's notices (a notice can be missed while the listener is down; an
/// agent host's signs of life send none).
pub const LOOK: Duration = Duration::from_secs(1);

/// How often asking for a call is tried while the store cannot be
/// reached, and the first wait between tries (doubling): about 8 s.
const TRIES: u32 = 6;
const FIRST_WAIT: Duration = Duration::from_millis(250);

type Answer = Result<ChildOutcome, ResultFault>;

enum Cmd {
    /// Wait for call `id`: its answer on `answer`, its signs of life on
    /// `progress`.
    Watch {
        id: CallId,
        answer: oneshot::Sender<Answer>,
        progress: Progress,
    },
    /// Stop waiting for call `id`.
    Forget(CallId),
}

struct Waiting {
    answer: oneshot::Sender<Answer>,
    progress: Progress,
    /// The last sign of life seen (seconds since the epoch), and by whom.
    seen: Option<(Option<String>, Option<f64>)>,
}

/// The calls this process waits for in the store (see the module docs):
/// a cheap handle on the task that owns them, which ends with the last
/// handle.
#[derive(Clone)]
pub struct Pools {
    store: Arc<Store>,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pools").finish_non_exhaustive()
    }
}

impl Pools {
    /// Starts the task that waits for this process's pooled calls in
    /// `store`. Inside a tokio runtime.
    pub fn start(store: Arc<Store>) -> Pools {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(watch_calls(store.clone(), rx));
        Pools { store, tx }
    }

    /// The provider that asks pool `pool`'s agent hosts for run `run`'s
    /// calls.
    pub fn provider(&self, run: &str, pool: &str) -> Arc<dyn SubagentProvider> {
        Arc::new(PoolProvider {
            pools: self.clone(),
            run: run.to_string(),
            // The claim this process holds the run under now: its asks and
            // cancels stay fenced by it after it lets the run go.
            fence: self.store.fence(run),
            pool: pool.to_string(),
        })
    }
}

/// What the waiting task looks at in one turn.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    Nothing,
    All,
    Runs(Vec<String>),
}

/// The task that owns the calls waited for: looks, hears, answers.
async fn watch_calls(store: Arc<Store>, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let mut waiting: HashMap<CallId, Waiting> = HashMap::new();
    // Opened with the first call waited for (a process that asks none
    // keeps no connection for it); without one (the store was
    // unreachable then), the looks alone find the answers.
    let mut listener: Option<crate::Listener> = None;
    let mut next_look = tokio::time::Instant::now() + LOOK;
    loop {
        // What to look at this turn: nothing, every call waited for, or
        // the calls of some runs (the notices that came together).
        let mut look = Look::Nothing;
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Watch { id, answer, progress }) => {
                    // Asked a moment ago: it may be answered already (an
                    // earlier attempt's call).
                    look = Look::Runs(vec![id.run.clone()]);
                    waiting.insert(id, Waiting { answer, progress, seen: None });
                    if listener.is_none() {
                        listener = store.listen(&["dsh_call_settled"]).await.ok();
                    }
                }
                Some(Cmd::Forget(id)) => { waiting.remove(&id); }
                None => return,
            },
            Some(notice) = async {
                match listener.as_mut() {
                    Some(l) => l.next().await,
                    None => std::future::pending().await,
                }
            } => {
                let mut runs = Vec::new();
                let mut notice = Some(notice);
                while let Some(n) = notice {
                    match n {
                        Notice::Run { id: run, .. } => runs.push(run),
                        Notice::Resumed => look = Look::All,
                    }
                    notice = listener.as_mut().and_then(crate::Listener::ready);
                }
                if look != Look::All {
                    look = Look::Runs(runs);
                }
            },
            () = tokio::time::sleep_until(next_look) => look = Look::All,
        }
        if look == Look::All {
            next_look = tokio::time::Instant::now() + LOOK;
        }
        waiting.retain(|_, w| !w.answer.is_closed());
        let ids: Vec<CallId> = waiting
            .keys()
            .filter(|c| match &look {
                Look::Nothing => false,
                Look::All => true,
                Look::Runs(runs) => runs.contains(&c.run),
            })
            .cloned()
            .collect();
        if ids.is_empty() {
            continue;
        }
        // A store that cannot be reached now is looked at again later;
        // the call's own bounds (stall, timeout) end a wait that is too
        // long.
        let Ok(states) = store.look_calls(&ids).await else {
            continue;
        };
        for (id, state) in states {
            let answer = match state {
                CallState::Queued => None,
                CallState::Running { owner, active_at } => {
                    if let Some(w) = waiting.get_mut(&id) {
                        let now = Some((owner, active_at));
                        if w.seen != now {
                            w.progress.report();
                            w.seen = now;
                        }
                    }
                    None
                }
                CallState::Settled(settled) => Some(answer_of(&id, settled)),
                CallState::Gone => Some(Err(ResultFault(format!(
                    "{id}: its row was deleted from the store before it was answered"
                )))),
            };
            if let Some(answer) = answer
                && let Some(w) = waiting.remove(&id)
            {
                let _ = w.answer.send(answer);
            }
        }
    }
}

/// A settled row as the child's result.
fn answer_of(id: &CallId, settled: Result<Settled, String>) -> Answer {
    let fault = |why: String| ResultFault(format!("{id}: {why}"));
    let settled = settled.map_err(fault)?;
    let outcome: Outcome = serde_json::from_value(settled.outcome).map_err(|e| {
        fault(format!(
            "its answer in the store is not one dsh writes: {e}"
        ))
    })?;
    let usage = match settled.usage {
        Some(u) => Some(
            serde_json::from_value::<Usage>(u)
                .map_err(|e| fault(format!("its usage in the store is not one dsh writes: {e}")))?,
        ),
        None => None,
    };
    let result = match outcome {
        Outcome::Text(t) => ChildResult::Text(t),
        Outcome::Structured(v) => ChildResult::Structured(v),
        Outcome::Fail(m) => ChildResult::Failed(m),
        Outcome::Cancelled => ChildResult::Cancelled,
        Outcome::StartError(m) => {
            return Err(fault(format!("the agent host could not start it: {m}")));
        }
        Outcome::ResultError(m) => return Err(fault(format!("the agent host: {m}"))),
    };
    Ok(ChildOutcome { result, usage })
}

/// Asks pool `pool`'s agent hosts for run `run`'s calls (see the module
/// docs).
pub struct PoolProvider {
    pools: Pools,
    run: String,
    fence: Option<i32>,
    pool: String,
}

impl PoolProvider {
    /// Asks for `id`, trying again while the store cannot be reached.
    async fn ask(&self, id: &CallId, body: &serde_json::Value) -> Result<(), StoreError> {
        let mut wait = FIRST_WAIT;
        let mut tries = 0;
        loop {
            match self.pools.store.ask(id, self.fence, &self.pool, body).await {
                Err(StoreError::Db(_)) if tries + 1 < TRIES => {
                    tries += 1;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                done => return done,
            }
        }
    }
}

#[async_trait]
impl SubagentProvider for PoolProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let Some(slot) = &request.slot else {
            return Err(StartRefused::agent_start(format!(
                "agent(): call #{} is for pool {:?}, whose calls are asked in the store under \
                 their place in the run, and this run has no journal to give it one",
                request.seq, self.pool
            )));
        };
        let id = CallId::of(&self.run, slot);
        let body = serde_json::to_value(CallRequest::from(&request)).map_err(|e| {
            StartRefused::agent_start(format!("agent(): call #{}: {e}", request.seq))
        })?;
        tokio::select! {
            asked = self.ask(&id, &body) => asked.map_err(|e| {
                StartRefused::agent_start(format!(
                    "agent(): call #{} could not be asked of pool {:?}: {e}",
                    request.seq, self.pool
                ))
            })?,
            () = cancel.cancelled() => {
                // The ask may have landed: it is cancelled too.
                let _ = tokio::time::timeout(
                    CANCEL_BOUND,
                    self.pools.store.cancel_call(&id, self.fence, "cancelled while it was asked"),
                )
                .await;
                return Err(StartRefused::agent_start("cancelled before it was asked"));
            }
        }
        let (answer_tx, answer_rx) = oneshot::channel();
        let progress = Progress::new();
        let child = Arc::new(PooledChild {
            id: format!("{}:{}-{}", self.pool, self.run, request.seq),
            call: id.clone(),
            fence: self.fence,
            pools: self.pools.clone(),
            answer: Mutex::new(Some(answer_rx)),
            cancelled: CancellationToken::new(),
            cancelling: Mutex::new(None),
            progress: progress.clone(),
        });
        // The task is gone only with the last handle, and this provider
        // holds one.
        let _ = self.pools.tx.send(Cmd::Watch {
            id,
            answer: answer_tx,
            progress,
        });
        Ok(child)
    }
}

/// A call asked of a pool, as the run's process waits for it.
struct PooledChild {
    id: String,
    call: CallId,
    fence: Option<i32>,
    pools: Pools,
    answer: Mutex<Option<oneshot::Receiver<Answer>>>,
    cancelled: CancellationToken,
    /// The cancel's write to the store, awaited by `dispose` (so a process
    /// that ends right after a cancel still makes it).
    cancelling: Mutex<Option<tokio::task::JoinHandle<()>>>,
    progress: Progress,
}

/// How long a child's disposal waits for its cancel to reach the store.
const CANCEL_BOUND: Duration = Duration::from_secs(5);

impl PooledChild {
    /// Cancels the call in the store, in the background: the child ends
    /// at once, without waiting for the agent host; `dispose` waits for
    /// the write.
    fn cancel_with(&self, reason: &str) {
        if self.cancelled.is_cancelled() {
            return;
        }
        self.cancelled.cancel();
        let store = self.pools.store.clone();
        let call = self.call.clone();
        let fence = self.fence;
        let reason = reason.to_string();
        let task = tokio::spawn(async move {
            if let Err(e) = store.cancel_call(&call, fence, &reason).await {
                tracing::debug!("{call}: cannot ask for its cancel: {e}");
            }
        });
        *self
            .cancelling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
    }
}

#[async_trait]
impl Subagent for PooledChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let rx = self
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(rx) = rx else {
            return Err(ResultFault(format!(
                "{}: its result was asked twice",
                self.call
            )));
        };
        tokio::select! {
            answer = rx => answer.unwrap_or_else(|_| {
                Err(ResultFault(format!("{}: the wait for it ended", self.call)))
            }),
            () = self.cancelled.cancelled() => Ok(ChildOutcome {
                result: ChildResult::Cancelled,
                usage: None,
            }),
        }
    }

    fn cancel(&self) {
        self.cancel_with("the run cancelled the call");
    }

    fn abandon(&self, reason: &str) {
        self.cancel_with(reason);
    }

    fn progress(&self) -> Option<Progress> {
        Some(self.progress.clone())
    }

    async fn dispose(&self) {
        let _ = self.pools.tx.send(Cmd::Forget(self.call.clone()));
        let cancelling = self
            .cancelling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = cancelling {
            let _ = tokio::time::timeout(CANCEL_BOUND, task).await;
        }
    }
}
