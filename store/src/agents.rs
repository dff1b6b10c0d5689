//! The agent host: answers the calls of the pools it serves
//! (`dsh workflow host --agents claude-code=4,deepseek=64`), for runs
//! running anywhere.
//!
//! It claims queued calls of each pool while the pool has free slots
//! ([`Store::claim_calls`]), runs each with its own provider of the pool's
//! name (from the embedder, [`crate::host::Answerer::pool`]) — never one a row names —
//! keeps them by a lease its heartbeat renews ([`Store::renew_calls`],
//! which also passes on each call's signs of life for the run's stall
//! bound), and writes each answer fenced by its claim on the call
//! ([`Store::answer_call`]): a host paused past its lease, whose call
//! another host answered since, writes nothing. A cancel asked by the
//! run's process reaches it at once (`dsh_call_cancel`) or at the next
//! heartbeat; a lost lease stops the call without a word; stopping hands
//! its calls back to the queue for another host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_journal::Outcome;
use dsh_seam::{Progress, SubagentProvider};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::calls::CallId;
use crate::host::{HostControl, HostEvent, LOOK};
use crate::{Notice, Store, StoreError};

/// A pool an agent host serves: the provider of that name, and how many of
/// its calls at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// The provider's name (`[providers.NAME]`, or a built-in one).
    pub name: String,
    /// Calls at once.
    pub slots: usize,
}

/// How long a call is given to end after its cancel before the host lets
/// it go (its provider ends its processes on its own).
const GRACE: Duration = Duration::from_secs(5);

/// Why a call ends before it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// The run's process cancelled it: the call is settled as cancelled.
    Cancelled(String),
    /// This host no longer holds it: nothing is written.
    Lost,
    /// This host is stopping: the call goes back to the queue.
    HandBack,
}

/// One call being answered here.
struct Answering {
    pool: usize,
    claims: i32,
    stop: watch::Sender<Option<Stop>>,
    /// The child's progress once it started, and the last sign of life
    /// passed on.
    progress: Arc<std::sync::Mutex<Option<Progress>>>,
    passed_on: Option<tokio::time::Instant>,
}

/// What a host is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Claiming,
    Draining,
    Stopping,
}

/// Answers the calls of `pools` (with `providers`, one each) until
/// drained or stopped and the calls it has are over (see the module
/// docs). Fails at the start if the store cannot be listened to.
pub(crate) async fn serve(
    store: Arc<Store>,
    providers: Vec<Arc<dyn SubagentProvider>>,
    name: &str,
    pools: &[Pool],
    lease: Duration,
    control: HostControl,
    report: mpsc::UnboundedSender<HostEvent>,
) -> Result<(), StoreError> {
    let mut listener = store
        .listen(&["dsh_call_queued", "dsh_call_cancel"])
        .await?;
    let say = |e: HostEvent| {
        let _ = report.send(e);
    };
    let mut tasks: JoinSet<CallId> = JoinSet::new();
    // Which call each task answers: a task that panicked returns nothing.
    let mut ids: HashMap<tokio::task::Id, CallId> = HashMap::new();
    let mut answering: HashMap<CallId, Answering> = HashMap::new();
    let mut busy = vec![0usize; pools.len()];
    let mut heartbeat = tokio::time::interval(lease / 3);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    let mut state = State::Claiming;
    let mut next_look = tokio::time::Instant::now();
    let mut trouble: Option<String> = None;
    loop {
        let room = state == State::Claiming && busy.iter().zip(pools).any(|(b, p)| *b < p.slots);
        tokio::select! {
            () = control.drain.cancelled(), if state == State::Claiming => {
                state = State::Draining;
                say(HostEvent::CallsDraining { answering: answering.len() });
            }
            () = control.stop.cancelled(), if state != State::Stopping => {
                state = State::Stopping;
                for a in answering.values() {
                    a.stop.send_if_modified(|s| first(s, Stop::HandBack));
                }
            }
            Some(done) = tasks.join_next_with_id() => {
                let (task, failed) = match done {
                    Ok((task, _)) => (task, None),
                    Err(e) => (e.id(), Some(e.to_string())),
                };
                let Some(id) = ids.remove(&task) else { continue };
                if let Some(why) = failed
                    && let Some(a) = answering.get(&id)
                {
                    // Its provider panicked: the call goes back to the
                    // queue (or is settled, if cancelled) for another try,
                    // not held here under a lease renewed for ever.
                    say(HostEvent::Warning { id: Some(id.run.clone()), text: format!("{id}: its task failed ({why}); handed back") });
                    if let Err(e) = store.hand_back_call(&id, a.claims).await {
                        say(HostEvent::Warning { id: Some(id.run.clone()), text: format!("{id}: cannot hand it back: {e}") });
                    }
                }
                if let Some(a) = answering.remove(&id) {
                    busy[a.pool] = busy[a.pool].saturating_sub(1);
                    say(HostEvent::CallEnded { call: id.to_string() });
                }
                next_look = tokio::time::Instant::now();
            }
            _ = heartbeat.tick() => {
                let held: Vec<(CallId, i32, bool)> = answering
                    .iter_mut()
                    .map(|(id, a)| {
                        let last = a.progress.lock().ok().and_then(|p| p.as_ref().map(Progress::last));
                        let active = last.is_some() && last != a.passed_on;
                        if active {
                            a.passed_on = last;
                        }
                        (id.clone(), a.claims, active)
                    })
                    .collect();
                match store.renew_calls(name, lease, &held).await {
                    Ok(renewal) => {
                        renewed = Instant::now();
                        for id in renewal.lost {
                            if let Some(a) = answering.get(&id) {
                                a.stop.send_replace(Some(Stop::Lost));
                                say(HostEvent::CallLost { call: id.to_string() });
                            }
                        }
                        for (id, reason) in renewal.cancels {
                            if let Some(a) = answering.get(&id) {
                                a.stop.send_if_modified(|s| first(s, Stop::Cancelled(reason)));
                            }
                        }
                    }
                    Err(e) => {
                        say(HostEvent::Warning { id: None, text: format!("cannot renew its calls' leases: {e}") });
                        if renewed.elapsed() >= lease {
                            for a in answering.values() {
                                a.stop.send_if_modified(|s| first(s, Stop::Lost));
                            }
                        }
                    }
                }
            }
            Some(notice) = listener.next() => {
                // The notices that came together are acted on once.
                let mut cancelled_runs: Vec<String> = Vec::new();
                let mut notice = Some(notice);
                while let Some(n) = notice {
                    match n {
                        Notice::Run { channel, id: run } if channel == "dsh_call_cancel" => {
                            if answering.keys().any(|c| c.run == run) && !cancelled_runs.contains(&run) {
                                cancelled_runs.push(run);
                            }
                        }
                        Notice::Run { id: pool, .. } => {
                            if pools.iter().any(|p| p.name == pool) {
                                next_look = tokio::time::Instant::now();
                            }
                        }
                        Notice::Resumed => next_look = tokio::time::Instant::now(),
                    }
                    notice = listener.ready();
                }
                for run in cancelled_runs {
                    if let Ok(cancels) = store.call_cancels(name, &run).await {
                        for (id, reason) in cancels {
                            if let Some(a) = answering.get(&id) {
                                a.stop.send_if_modified(|s| first(s, Stop::Cancelled(reason)));
                            }
                        }
                    }
                }
            }
            () = tokio::time::sleep_until(next_look), if room => {
                next_look = tokio::time::Instant::now() + LOOK;
                for (i, pool) in pools.iter().enumerate() {
                    let free = pool.slots.saturating_sub(busy[i]);
                    if free == 0 {
                        continue;
                    }
                    match store.claim_calls(name, &pool.name, free, lease).await {
                        Ok(claimed) => {
                            if trouble.take().is_some() {
                                say(HostEvent::Warning { id: None, text: "claims calls again".into() });
                            }
                            for c in claimed {
                                say(HostEvent::CallClaimed { call: c.id.to_string(), claims: c.claims });
                                let (stop, stopped) = watch::channel(None);
                                let progress = Arc::new(std::sync::Mutex::new(None));
                                answering.insert(c.id.clone(), Answering {
                                    pool: i,
                                    claims: c.claims,
                                    stop,
                                    progress: progress.clone(),
                                    passed_on: None,
                                });
                                busy[i] += 1;
                                let claim = Claim {
                                    store: store.clone(),
                                    id: c.id.clone(),
                                    claims: c.claims,
                                    lease,
                                    report: report.clone(),
                                };
                                let handle = tasks.spawn(answer(
                                    claim,
                                    providers[i].clone(),
                                    pool.name.clone(),
                                    c.request,
                                    stopped,
                                    progress,
                                ));
                                ids.insert(handle.id(), c.id);
                            }
                        }
                        Err(e) => {
                            let text = format!("cannot claim calls: {e}");
                            if trouble.as_ref() != Some(&text) {
                                say(HostEvent::Warning { id: None, text: text.clone() });
                                trouble = Some(text);
                            }
                        }
                    }
                }
            }
        }
        if state != State::Claiming && answering.is_empty() {
            return Ok(());
        }
    }
}

/// Sets `why` unless a reason is there already (the first one stands).
fn first(slot: &mut Option<Stop>, why: Stop) -> bool {
    if slot.is_some() {
        return false;
    }
    *slot = Some(why);
    true
}

/// One claimed call's place in the store: what its answer is written
/// under, and where its trouble is said.
struct Claim {
    store: Arc<Store>,
    id: CallId,
    claims: i32,
    lease: Duration,
    report: mpsc::UnboundedSender<HostEvent>,
}

impl Claim {
    fn warn(&self, text: String) {
        let _ = self.report.send(HostEvent::Warning {
            id: Some(self.id.run.clone()),
            text,
        });
    }

    /// What a call stopped before it answered leaves in the store.
    async fn stopped(&self, why: Stop) {
        match why {
            Stop::Cancelled(_) => self.write(&Outcome::Cancelled, None, None).await,
            Stop::Lost => {}
            Stop::HandBack => {
                if let Err(e) = self.store.hand_back_call(&self.id, self.claims).await {
                    self.warn(format!(
                        "{}: cannot hand it back ({e}); another host takes it once its lease \
                         has passed",
                        self.id
                    ));
                }
            }
        }
    }

    /// Writes the call's answer under its claim, trying again while the
    /// store cannot be reached and the lease may still hold.
    async fn write(&self, outcome: &Outcome, usage: Option<Value>, child_id: Option<&str>) {
        let id = &self.id;
        let outcome = match serde_json::to_value(outcome) {
            Ok(v) => v,
            Err(e) => {
                self.warn(format!("{id}: cannot write its answer: {e}"));
                return;
            }
        };
        let since = Instant::now();
        let mut wait = Duration::from_millis(250);
        loop {
            match self
                .store
                .answer_call(id, self.claims, &outcome, usage.as_ref(), child_id)
                .await
            {
                Ok(true) => return,
                Ok(false) => {
                    self.warn(format!(
                        "{id}: its answer came after this host lost the call to another (it was \
                         paused or cut off past its lease); that host's answer stands, this one \
                         was not written"
                    ));
                    return;
                }
                Err(e) if since.elapsed() + wait < self.lease => {
                    tracing::debug!("{id}: writing its answer: {e}");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => {
                    self.warn(format!(
                        "{id}: cannot write its answer ({e}); another host answers it once its \
                         lease has passed"
                    ));
                    return;
                }
            }
        }
    }
}

/// Answers one claimed call with `provider` and writes its answer (or
/// hands it back); returns its id.
async fn answer(
    claim: Claim,
    provider: Arc<dyn SubagentProvider>,
    pool: String,
    request: Result<crate::calls::wire::CallRequest, String>,
    mut stop: watch::Receiver<Option<Stop>>,
    progress_slot: Arc<std::sync::Mutex<Option<Progress>>>,
) -> CallId {
    let stopped = async {
        loop {
            if let Some(why) = stop.borrow_and_update().clone() {
                return why;
            }
            if stop.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    tokio::pin!(stopped);
    let request = match request {
        Ok(r) => r.into_request(&pool),
        Err(why) => {
            let outcome = Outcome::ResultError(format!("{}: {why}", claim.id));
            claim.write(&outcome, None, None).await;
            return claim.id;
        }
    };
    let token = CancellationToken::new();
    let started = provider.start(request, token.clone());
    tokio::pin!(started);
    let child = tokio::select! {
        started = &mut started => started,
        why = &mut stopped => {
            // The start is told, and awaited rather than dropped: a child
            // it made anyway is stopped and disposed, not left running.
            token.cancel();
            if let Ok(child) = started.await {
                child.cancel();
                let _ = tokio::time::timeout(GRACE, child.result()).await;
                child.dispose().await;
            }
            claim.stopped(why).await;
            return claim.id;
        }
    };
    let child = match child {
        Ok(c) => c,
        Err(refused) => {
            claim
                .write(&Outcome::from_refusal(&refused), None, None)
                .await;
            return claim.id;
        }
    };
    if let Some(p) = child.progress()
        && let Ok(mut slot) = progress_slot.lock()
    {
        *slot = Some(p);
    }
    tokio::select! {
        result = child.result() => {
            let (outcome, usage) = Outcome::from_result(&result);
            let usage = usage.and_then(|u| serde_json::to_value(u).ok());
            claim.write(&outcome, usage, Some(child.id())).await;
        }
        why = &mut stopped => {
            child.cancel();
            let _ = tokio::time::timeout(GRACE, child.result()).await;
            claim.stopped(why).await;
        }
    }
    child.dispose().await;
    claim.id
}
