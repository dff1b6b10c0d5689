//! Run events (contract §8): data snapshots, never the live run.
//!
//! [`Hub`] keeps every event of the run and fans them out to subscribers
//! over unbounded channels: a slow subscriber costs memory (bounded by the
//! run's own limits), never the run's progress, and a dropped subscriber is
//! simply forgotten. Each subscriber first receives the history, so one that
//! subscribes after `start()` still sees `workflow/start`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::provider::ChildOrigin;
use crate::result::RunError;
use crate::script::Meta;
use dsh_protocol::StopReason;

/// How an `agent-end` reports the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AgentOutcomeKind {
    /// The child answered (text, or a structured answer that matches the
    /// call's schema).
    Completed,
    /// The child failed, or its answer did not match the schema: `agent()`
    /// resolves `null`.
    Failed,
    /// The child was cancelled (also every child still running when the
    /// run settles).
    Cancelled,
}

impl AgentOutcomeKind {
    /// The `outcome` field as events spell it: `completed`, `failed` or
    /// `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentOutcomeKind::Completed => "completed",
            AgentOutcomeKind::Failed => "failed",
            AgentOutcomeKind::Cancelled => "cancelled",
        }
    }
}

/// The payload of one event.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// `workflow/start`: the run started; always the first event.
    Start {
        /// The script's `meta`.
        meta: Meta,
    },
    /// `workflow/phase`: the script called `phase(title)`.
    Phase {
        /// The phase's title, as the script gave it.
        title: String,
    },
    /// `workflow/log`: the script logged a line (`log()`, `console`).
    Log {
        /// The logged text.
        message: String,
    },
    /// `workflow/agent-start`: a child was started for an `agent()` call.
    AgentStart {
        /// The call's number in the run (1, 2, 3 …), as in
        /// [`AgentRequest::seq`](crate::AgentRequest::seq).
        seq: u64,
        /// The call's display label (`label`, or from the prompt's first
        /// line).
        label: String,
        /// The phase the call belongs to; `None` when there is none.
        phase: Option<String>,
        /// The child's id, from [`Subagent::id`](crate::Subagent::id).
        child_id: String,
        /// Whether the answer is live, replayed or a dry run.
        origin: ChildOrigin,
    },
    /// `workflow/agent-end`: the child of an `agent-start` settled; every
    /// `agent-start` gets exactly one, before `workflow/end`.
    AgentEnd {
        /// The call's number, as in its `agent-start`.
        seq: u64,
        /// The call's display label, as in its `agent-start`.
        label: String,
        /// The call's phase, as in its `agent-start`.
        phase: Option<String>,
        /// The child's id, as in its `agent-start`.
        child_id: String,
        /// How the child ended.
        outcome: AgentOutcomeKind,
        /// Whether the answer was live, replayed or a dry run.
        origin: ChildOrigin,
        /// Tokens the child reported, when it did.
        usage: Option<dsh_protocol::Usage>,
        /// Why a failed child failed.
        reason: Option<String>,
        /// A worktree the child changed, kept for the user.
        worktree: Option<crate::provider::KeptWorktree>,
    },
    /// `workflow/end`: the run settled; always the last event, carrying
    /// the same fields as the [`RunResult`](crate::RunResult).
    End {
        /// How the run stopped.
        stop_reason: StopReason,
        /// Why, when it did not complete; `None` when it completed.
        error: Option<RunError>,
        /// `agent()` calls admitted during the run.
        agents_started: u64,
        /// Log bytes dropped under the run's log limit.
        log_bytes_dropped: u64,
    },
}

/// One event of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The id of the run that emitted it (`runId`).
    pub run_id: Arc<str>,
    /// Milliseconds since the run started.
    pub t: u64,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// The `type` field, e.g. `workflow/agent-start`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            EventKind::Start { .. } => "workflow/start",
            EventKind::Phase { .. } => "workflow/phase",
            EventKind::Log { .. } => "workflow/log",
            EventKind::AgentStart { .. } => "workflow/agent-start",
            EventKind::AgentEnd { .. } => "workflow/agent-end",
            EventKind::End { .. } => "workflow/end",
        }
    }

    /// The JSON object of contract §8, fields in the documented order.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), self.type_name().into());
        m.insert("runId".into(), Value::from(&*self.run_id));
        match &self.kind {
            EventKind::Start { meta } => {
                m.insert(
                    "meta".into(),
                    serde_json::to_value(meta).unwrap_or(Value::Null),
                );
            }
            EventKind::Phase { title } => {
                m.insert("title".into(), title.as_str().into());
            }
            EventKind::Log { message } => {
                m.insert("message".into(), message.as_str().into());
            }
            EventKind::AgentStart {
                seq,
                label,
                phase,
                child_id,
                origin,
            } => {
                m.insert("seq".into(), (*seq).into());
                m.insert("label".into(), label.as_str().into());
                m.insert("phase".into(), phase.clone().into());
                m.insert("childId".into(), child_id.as_str().into());
                insert_origin(&mut m, *origin);
            }
            EventKind::AgentEnd {
                seq,
                label,
                phase,
                child_id,
                outcome,
                origin,
                usage,
                reason,
                worktree,
            } => {
                m.insert("seq".into(), (*seq).into());
                m.insert("label".into(), label.as_str().into());
                m.insert("phase".into(), phase.clone().into());
                m.insert("childId".into(), child_id.as_str().into());
                m.insert("outcome".into(), outcome.as_str().into());
                insert_origin(&mut m, *origin);
                if let Some(u) = usage {
                    m.insert(
                        "usage".into(),
                        json!({ "input": u.input, "output": u.output }),
                    );
                }
                if let Some(r) = reason {
                    m.insert("reason".into(), r.as_str().into());
                }
                if let Some(w) = worktree {
                    m.insert(
                        "worktree".into(),
                        json!({ "path": w.path.display().to_string(), "branch": w.branch }),
                    );
                }
            }
            EventKind::End {
                stop_reason,
                error,
                agents_started,
                log_bytes_dropped,
            } => {
                m.insert("stopReason".into(), stop_reason.as_str().into());
                m.insert(
                    "error".into(),
                    error.as_ref().map(RunError::to_json).unwrap_or(Value::Null),
                );
                m.insert("agentsStarted".into(), (*agents_started).into());
                if *log_bytes_dropped > 0 {
                    m.insert("logBytesDropped".into(), (*log_bytes_dropped).into());
                }
            }
        }
        m.insert("t".into(), self.t.into());
        Value::Object(m)
    }
}

/// A subscription: every event of the run in order, ending after
/// `workflow/end`.
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<Event>,
}

impl EventStream {
    /// The next event; `None` after `workflow/end` was delivered.
    pub async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next event if one is ready now.
    pub fn try_next(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }
}

struct HubState {
    history: Vec<Event>,
    subscribers: Vec<mpsc::UnboundedSender<Event>>,
    ended: bool,
}

/// The run's event fan-out. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    run_id: Arc<str>,
    epoch: Instant,
    state: Arc<Mutex<HubState>>,
}

impl Hub {
    /// A hub for run `run_id` with no events yet; events' `t` counts from
    /// `epoch`.
    pub fn new(run_id: Arc<str>, epoch: Instant) -> Self {
        Hub {
            run_id,
            epoch,
            state: Arc::new(Mutex::new(HubState {
                history: Vec::new(),
                subscribers: Vec::new(),
                ended: false,
            })),
        }
    }

    /// Emits an event. Nothing is emitted after `workflow/end`.
    pub fn emit(&self, kind: EventKind) {
        let t = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let is_end = matches!(kind, EventKind::End { .. });
        let event = Event {
            run_id: self.run_id.clone(),
            t,
            kind,
        };
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.ended {
            return;
        }
        st.subscribers.retain(|tx| tx.send(event.clone()).is_ok());
        st.history.push(event);
        if is_end {
            st.ended = true;
            // Closing the senders ends every stream after workflow/end.
            st.subscribers.clear();
        }
    }

    /// A new subscription: the events so far, then each later one; a
    /// stream taken after `workflow/end` holds the history only.
    pub fn subscribe(&self) -> EventStream {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut st) = self.state.lock() {
            for e in &st.history {
                let _ = tx.send(e.clone());
            }
            if !st.ended {
                st.subscribers.push(tx);
            }
        }
        EventStream { rx }
    }
}

/// Builds the `error` object of results and `workflow/end`.
pub(crate) fn error_json(code: &str, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// `"replayed": true` / `"dryRun": true` on the events of a child that was
/// not answered live; nothing for a live one.
fn insert_origin(m: &mut Map<String, Value>, origin: ChildOrigin) {
    match origin {
        ChildOrigin::Live => {}
        ChildOrigin::Replayed => {
            m.insert("replayed".into(), true.into());
        }
        ChildOrigin::DryRun => {
            m.insert("dryRun".into(), true.into());
        }
    }
}
