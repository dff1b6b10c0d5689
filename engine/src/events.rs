//! Run events (contract §8): data snapshots, never the live run.
//!
//! [`Hub`] keeps every event of the run (their number and size are bounded
//! by the run's limits: labels and phase titles are cut to
//! [`MAX_LABEL_CHARS`]) and fans them out to subscribers, each with a
//! bounded queue ([`SUBSCRIBER_QUEUE_BYTES`]): a slow subscriber misses events,
//! counted in [`EventStream::dropped`], and never slows the run or grows
//! the host; a dropped subscriber is simply forgotten. Each subscriber
//! first receives the history, so one that subscribes after `start()`
//! still sees `workflow/start`.
//!
//! The events themselves and their JSON are here; the fan-out (`Hub`,
//! `EventStream`, the subscribers' queues) is in `events/hub.rs`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::result::{RunError, usage_json};
use crate::script::Meta;
use dsh_protocol::StopReason;
use dsh_seam::ChildOrigin;
pub use dsh_seam::outcome::{AgentOutcomeKind, shown};

mod hub;
mod parse;

pub use hub::{EventStream, Hub, SUBSCRIBER_QUEUE_BYTES};

/// Labels and phase titles are cut to this many characters in events, the
/// run's ledger and the journal (the call's request keeps the whole text,
/// so fixture matching sees it): a script's 8 MB label must not be copied
/// into every event and held for the whole run.
pub const MAX_LABEL_CHARS: usize = 200;

/// A failed child's `reason` is cut to this many characters in its
/// `agent-end` event (the script's `agent()` rejection keeps it whole).
/// Above what the providers keep themselves (the command provider keeps
/// the last 4 KiB of a program's stderr), so only a reason from elsewhere —
/// a fixture's megabyte `fail` text — is cut.
pub const MAX_REASON_CHARS: usize = 8000;

/// [`shown`] for a label or phase title ([`MAX_LABEL_CHARS`]).
pub fn shown_label(text: &str) -> String {
    shown(text, MAX_LABEL_CHARS)
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
        /// The nested workflow that set it (`workflow()`), by name; `None`
        /// for the run's own script.
        workflow: Option<String>,
    },
    /// `workflow/log`: the script logged a line (`log()`, `console`).
    Log {
        /// The logged text.
        message: String,
        /// The nested workflow that logged it, by name; `None` for the
        /// run's own script.
        workflow: Option<String>,
    },
    /// `workflow/warning`: the runtime accepted something dubious the way
    /// Claude Code does (an unknown option, a lossy value) and says so,
    /// once per distinct message and path.
    Warning {
        /// What was accepted and how it was taken.
        message: String,
        /// Where: a value path or file position, when there is one.
        path: Option<String>,
    },
    /// `workflow/agent-queued`: an `agent()` call waits for a concurrency
    /// slot (`waiting: true`), or no longer does (`waiting: false`): its
    /// `ChildStart` reached the host (its `agent-start` follows unless the
    /// start is refused), or the run settled while it waited. Every
    /// `waiting: true` gets exactly one `waiting: false`, before
    /// `workflow/end`. A call that got a slot at once has neither.
    AgentQueued {
        /// The call's number, as its `agent-start` will carry it.
        seq: u64,
        /// The call's display label.
        label: String,
        /// The phase the call belongs to; `None` when there is none.
        phase: Option<String>,
        /// Whether the call now waits (`true`) or has stopped waiting.
        waiting: bool,
        /// The nested workflow that made the call, by name; `None` for the
        /// run's own script.
        workflow: Option<String>,
    },
    /// `workflow/agent-start`: a child was started for an `agent()` call.
    AgentStart {
        /// The call's number in the run (1, 2, 3 …), as in
        /// [`AgentRequest::seq`](dsh_seam::AgentRequest::seq).
        seq: u64,
        /// The call's display label (`label`, or from the prompt's first
        /// line).
        label: String,
        /// The phase the call belongs to; `None` when there is none.
        phase: Option<String>,
        /// The child's id, from [`Subagent::id`](dsh_seam::Subagent::id).
        child_id: String,
        /// Whether the answer is live, replayed or a dry run.
        origin: ChildOrigin,
        /// The nested workflow that made the call, by name; `None` for the
        /// run's own script.
        workflow: Option<String>,
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
        worktree: Option<dsh_seam::KeptWorktree>,
        /// The nested workflow that made the call, as in its `agent-start`.
        workflow: Option<String>,
    },
    /// `workflow/agent-activity`: what a running child is doing (a model
    /// turn, a tool call, tokens so far), as its provider tells it;
    /// always between the child's `agent-start` and `agent-end`.
    AgentActivity {
        /// The call's number, as in its `agent-start`.
        seq: u64,
        /// The call's display label, as in its `agent-start`.
        label: String,
        /// What the child is doing.
        activity: dsh_seam::Activity,
        /// The nested workflow that made the call, as in its `agent-start`.
        workflow: Option<String>,
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
    /// About how many bytes the event holds: its strings plus a fixed
    /// overhead. What a subscriber's queue is bounded by.
    pub fn weight(&self) -> usize {
        const OVERHEAD: usize = 256;
        let strings = match &self.kind {
            EventKind::Start { .. } => 0,
            EventKind::Phase { title, workflow } => {
                title.len() + workflow.as_ref().map_or(0, String::len)
            }
            EventKind::Log { message, workflow } => {
                message.len() + workflow.as_ref().map_or(0, String::len)
            }
            EventKind::Warning { message, path } => {
                message.len() + path.as_ref().map_or(0, String::len)
            }
            EventKind::AgentQueued {
                label,
                phase,
                workflow,
                ..
            } => {
                label.len()
                    + phase.as_ref().map_or(0, String::len)
                    + workflow.as_ref().map_or(0, String::len)
            }
            EventKind::AgentStart {
                label,
                phase,
                child_id,
                ..
            } => label.len() + phase.as_ref().map_or(0, String::len) + child_id.len(),
            EventKind::AgentEnd {
                label,
                phase,
                child_id,
                reason,
                ..
            } => {
                label.len()
                    + phase.as_ref().map_or(0, String::len)
                    + child_id.len()
                    + reason.as_ref().map_or(0, String::len)
            }
            EventKind::AgentActivity {
                label, activity, ..
            } => label.len() + activity_weight(activity),
            EventKind::End { error, .. } => error.as_ref().map_or(0, |e| e.message.len()),
        };
        OVERHEAD + strings
    }

    /// The `type` field, e.g. `workflow/agent-start`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            EventKind::Start { .. } => "workflow/start",
            EventKind::Phase { .. } => "workflow/phase",
            EventKind::Log { .. } => "workflow/log",
            EventKind::Warning { .. } => "workflow/warning",
            EventKind::AgentQueued { .. } => "workflow/agent-queued",
            EventKind::AgentStart { .. } => "workflow/agent-start",
            EventKind::AgentEnd { .. } => "workflow/agent-end",
            EventKind::AgentActivity { .. } => "workflow/agent-activity",
            EventKind::End { .. } => "workflow/end",
        }
    }

    /// The JSON object of contract §8, fields in the documented order.
    // Long because: one flat arm per event kind, each its fields in order.
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
            EventKind::Phase { title, workflow } => {
                m.insert("title".into(), title.as_str().into());
                insert_workflow(&mut m, workflow);
            }
            EventKind::Log { message, workflow } => {
                m.insert("message".into(), message.as_str().into());
                insert_workflow(&mut m, workflow);
            }
            EventKind::Warning { message, path } => {
                m.insert("message".into(), message.as_str().into());
                if let Some(p) = path {
                    m.insert("path".into(), p.as_str().into());
                }
            }
            EventKind::AgentQueued {
                seq,
                label,
                phase,
                waiting,
                workflow,
            } => {
                m.insert("seq".into(), (*seq).into());
                m.insert("label".into(), label.as_str().into());
                m.insert("phase".into(), phase.clone().into());
                m.insert("waiting".into(), (*waiting).into());
                insert_workflow(&mut m, workflow);
            }
            EventKind::AgentStart {
                seq,
                label,
                phase,
                child_id,
                origin,
                workflow,
            } => {
                m.insert("seq".into(), (*seq).into());
                m.insert("label".into(), label.as_str().into());
                m.insert("phase".into(), phase.clone().into());
                m.insert("childId".into(), child_id.as_str().into());
                insert_origin(&mut m, *origin);
                insert_workflow(&mut m, workflow);
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
                workflow,
            } => {
                m.insert("seq".into(), (*seq).into());
                m.insert("label".into(), label.as_str().into());
                m.insert("phase".into(), phase.clone().into());
                m.insert("childId".into(), child_id.as_str().into());
                m.insert("outcome".into(), outcome.as_str().into());
                insert_origin(&mut m, *origin);
                if let Some(u) = usage {
                    m.insert("usage".into(), usage_json(u));
                    if let Some(c) = u.cost_usd {
                        m.insert("cost".into(), json!(c));
                    }
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
                insert_workflow(&mut m, workflow);
            }
            EventKind::AgentActivity {
                seq,
                label,
                activity,
                workflow,
            } => {
                m.insert("seq".into(), (*seq).into());
                m.insert("label".into(), label.as_str().into());
                insert_activity(&mut m, activity);
                insert_workflow(&mut m, workflow);
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

/// The strings an activity holds, for [`Event::weight`].
fn activity_weight(a: &dsh_seam::Activity) -> usize {
    use dsh_seam::Activity as A;
    match a {
        A::Turn { .. } | A::Tokens { .. } | A::Held { .. } | A::Released { .. } => 0,
        A::ToolCall { tool, detail } => tool.len() + detail.len(),
        A::ToolEnd { tool, message, .. } => tool.len() + message.as_ref().map_or(0, String::len),
        A::Retry { reason, .. } | A::Concurrency { reason, .. } => reason.len(),
    }
}

/// An activity's fields: `"activity"` names its kind (`turn`, `tokens`,
/// `tool-call`, `tool-end`, `retry`, `held`, `released`, `concurrency`),
/// the rest are its values.
fn insert_activity(m: &mut Map<String, Value>, a: &dsh_seam::Activity) {
    use dsh_seam::Activity as A;
    match a {
        A::Turn { turn } => {
            m.insert("activity".into(), "turn".into());
            m.insert("turn".into(), (*turn).into());
        }
        A::Tokens { usage } => {
            m.insert("activity".into(), "tokens".into());
            m.insert("usage".into(), usage_json(usage));
        }
        A::ToolCall { tool, detail } => {
            m.insert("activity".into(), "tool-call".into());
            m.insert("tool".into(), tool.as_str().into());
            m.insert("detail".into(), detail.as_str().into());
        }
        A::ToolEnd {
            tool,
            status,
            ms,
            message,
        } => {
            m.insert("activity".into(), "tool-end".into());
            m.insert("tool".into(), tool.as_str().into());
            m.insert("status".into(), status.as_str().into());
            m.insert("ms".into(), (*ms).into());
            if let Some(msg) = message {
                m.insert("message".into(), msg.as_str().into());
            }
        }
        A::Retry {
            attempt,
            reason,
            partial,
        } => {
            m.insert("activity".into(), "retry".into());
            m.insert("attempt".into(), (*attempt).into());
            m.insert("reason".into(), reason.as_str().into());
            m.insert("partial".into(), (*partial).into());
        }
        A::Held { shared_bytes } => {
            m.insert("activity".into(), "held".into());
            m.insert("sharedBytes".into(), (*shared_bytes).into());
        }
        A::Released { waited_ms } => {
            m.insert("activity".into(), "released".into());
            m.insert("waitedMs".into(), (*waited_ms).into());
        }
        A::Concurrency { limit, reason } => {
            m.insert("activity".into(), "concurrency".into());
            m.insert("limit".into(), (*limit).into());
            m.insert("reason".into(), reason.as_str().into());
        }
    }
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

/// `"workflow": NAME` for what a nested workflow did; nothing otherwise.
fn insert_workflow(m: &mut Map<String, Value>, workflow: &Option<String>) {
    if let Some(w) = workflow {
        m.insert("workflow".into(), w.as_str().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_are_cut_with_an_ellipsis_on_a_character_boundary() {
        assert_eq!(shown("short", 10), "short");
        assert_eq!(shown("0123456789", 10), "0123456789");
        assert_eq!(shown("0123456789X", 10), "012345678…");
        let wide = "é".repeat(300);
        let cut = shown_label(&wide);
        assert_eq!(cut.chars().count(), MAX_LABEL_CHARS);
        assert!(cut.ends_with('…'));
    }
}
