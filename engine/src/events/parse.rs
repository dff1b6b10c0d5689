//! Events read back from their JSON ([`Event::to_json`]): what a process
//! that follows a run it does not run (the store's `dsh_events`, `dsh
//! workflow wait`) turns into events again, to show them as `run` does.
//!
//! A line dsh did not write reads as `None`, not as an error: a follower
//! shows what it understands and skips the rest.

use std::sync::Arc;

use dsh_protocol::{ErrorCode, StopReason, Usage};
use dsh_seam::{Activity, ChildOrigin, KeptWorktree};
use serde_json::Value;

use super::{AgentOutcomeKind, Event, EventKind};
use crate::result::{RunError, RunResult};

/// The text at `key`, if it is one.
fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)?.as_str().map(str::to_string)
}

/// The number at `key`, if it is a whole one.
fn number(v: &Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64()
}

fn usage(v: Option<&Value>) -> Option<Usage> {
    serde_json::from_value(v?.clone()).ok()
}

/// The usage of an `agent-end` or a result: `usage`, and its cost beside
/// it (`cost`), where `to_json` puts it.
fn usage_and_cost(v: &Value) -> Option<Usage> {
    let mut u = usage(v.get("usage"))?;
    if u.cost_usd.is_none() {
        u.cost_usd = v.get("cost").and_then(Value::as_f64);
    }
    Some(u)
}

fn origin(v: &Value) -> ChildOrigin {
    if v["replayed"] == true {
        ChildOrigin::Replayed
    } else if v["dryRun"] == true {
        ChildOrigin::DryRun
    } else {
        ChildOrigin::Live
    }
}

fn run_error(v: &Value) -> Option<RunError> {
    Some(RunError::new(
        ErrorCode::parse(v.get("code")?.as_str()?)?,
        text(v, "message")?,
    ))
}

fn activity(v: &Value) -> Option<Activity> {
    Some(match v.get("activity")?.as_str()? {
        "turn" => Activity::Turn {
            turn: u32::try_from(number(v, "turn")?).ok()?,
        },
        "tokens" => Activity::Tokens {
            usage: usage(v.get("usage"))?,
        },
        "tool-call" => Activity::ToolCall {
            tool: text(v, "tool")?,
            detail: text(v, "detail")?,
        },
        "tool-end" => Activity::ToolEnd {
            tool: text(v, "tool")?,
            status: text(v, "status")?,
            ms: number(v, "ms")?,
            message: text(v, "message"),
        },
        "retry" => Activity::Retry {
            attempt: u32::try_from(number(v, "attempt")?).ok()?,
            reason: text(v, "reason")?,
            partial: v.get("partial")?.as_bool()?,
        },
        "held" => Activity::Held {
            shared_bytes: number(v, "sharedBytes")?,
        },
        "released" => Activity::Released {
            waited_ms: number(v, "waitedMs")?,
        },
        "concurrency" => Activity::Concurrency {
            limit: u32::try_from(number(v, "limit")?).ok()?,
            reason: text(v, "reason")?,
        },
        _ => return None,
    })
}

impl Event {
    /// The event `v` is the JSON of ([`Event::to_json`]); `None` when it is
    /// not an event dsh writes.
    pub fn from_json(v: &Value) -> Option<Event> {
        let seq = || number(v, "seq");
        let label = || text(v, "label");
        let workflow = text(v, "workflow");
        let phase = text(v, "phase");
        let kind = match v.get("type")?.as_str()? {
            "workflow/start" => EventKind::Start {
                meta: serde_json::from_value(v.get("meta")?.clone()).ok()?,
            },
            "workflow/phase" => EventKind::Phase {
                title: text(v, "title")?,
                workflow,
            },
            "workflow/log" => EventKind::Log {
                message: text(v, "message")?,
                workflow,
            },
            "workflow/warning" => EventKind::Warning {
                message: text(v, "message")?,
                path: text(v, "path"),
            },
            "workflow/agent-queued" => EventKind::AgentQueued {
                seq: seq()?,
                label: label()?,
                phase,
                waiting: v.get("waiting")?.as_bool()?,
                workflow,
            },
            "workflow/agent-start" => EventKind::AgentStart {
                seq: seq()?,
                label: label()?,
                phase,
                child_id: text(v, "childId")?,
                origin: origin(v),
                workflow,
            },
            "workflow/agent-end" => EventKind::AgentEnd {
                seq: seq()?,
                label: label()?,
                phase,
                child_id: text(v, "childId")?,
                outcome: AgentOutcomeKind::parse(v.get("outcome")?.as_str()?)?,
                origin: origin(v),
                usage: usage_and_cost(v),
                reason: text(v, "reason"),
                worktree: v.get("worktree").and_then(|w| {
                    Some(KeptWorktree {
                        path: text(w, "path")?.into(),
                        branch: text(w, "branch")?,
                    })
                }),
                workflow,
            },
            "workflow/agent-activity" => EventKind::AgentActivity {
                seq: seq()?,
                label: label()?,
                activity: activity(v)?,
                workflow,
            },
            "workflow/end" => EventKind::End {
                stop_reason: StopReason::parse(v.get("stopReason")?.as_str()?)?,
                error: v.get("error").and_then(run_error),
                agents_started: number(v, "agentsStarted")?,
                log_bytes_dropped: number(v, "logBytesDropped").unwrap_or(0),
            },
            _ => return None,
        };
        Some(Event {
            run_id: Arc::from(v.get("runId")?.as_str()?),
            t: number(v, "t")?,
            kind,
        })
    }
}

impl RunResult {
    /// The result `v` is the JSON of ([`RunResult::to_json`], what
    /// `result.json` holds); `None` when it is not one dsh writes. The
    /// sandbox report is not read back.
    pub fn from_json(v: &Value) -> Option<RunResult> {
        Some(RunResult {
            value: v.get("value").cloned().unwrap_or(Value::Null),
            stop_reason: StopReason::parse(v.get("stopReason")?.as_str()?)?,
            error: v.get("error").and_then(run_error),
            agents_started: number(v, "agentsStarted").unwrap_or(0),
            log_bytes_dropped: number(v, "logBytesDropped").unwrap_or(0),
            sandbox: None,
            usage: usage_and_cost(v),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Meta;
    use serde_json::json;

    fn event(kind: EventKind) -> Event {
        Event {
            run_id: Arc::from("r1"),
            t: 42,
            kind,
        }
    }

    /// Every kind of event comes back from its JSON as it was.
    #[test]
    fn every_event_comes_back_from_its_json() {
        let usage = Usage {
            input: 3,
            output: 5,
            cache_read: 1,
            cache_write: 0,
            cost_usd: Some(0.25),
        };
        let mut kinds = vec![
            EventKind::Start {
                meta: Meta {
                    name: "n".into(),
                    description: "d".into(),
                    when_to_use: None,
                    phases: None,
                },
            },
            EventKind::Phase {
                title: "Plan".into(),
                workflow: Some("child".into()),
            },
            EventKind::Log {
                message: "hi".into(),
                workflow: None,
            },
            EventKind::Warning {
                message: "w".into(),
                path: Some("args.x".into()),
            },
            EventKind::AgentQueued {
                seq: 2,
                label: "l".into(),
                phase: None,
                waiting: true,
                workflow: None,
            },
            EventKind::AgentStart {
                seq: 2,
                label: "l".into(),
                phase: Some("Plan".into()),
                child_id: "c".into(),
                origin: ChildOrigin::Replayed,
                workflow: None,
            },
            EventKind::AgentEnd {
                seq: 2,
                label: "l".into(),
                phase: Some("Plan".into()),
                child_id: "c".into(),
                outcome: AgentOutcomeKind::Failed,
                origin: ChildOrigin::DryRun,
                usage: Some(usage),
                reason: Some("why".into()),
                worktree: Some(KeptWorktree {
                    path: "/w".into(),
                    branch: "b".into(),
                }),
                workflow: Some("child".into()),
            },
            EventKind::End {
                stop_reason: StopReason::Error,
                error: Some(RunError::new(ErrorCode::Timeout, "late")),
                agents_started: 4,
                log_bytes_dropped: 9,
            },
        ];
        for activity in [
            Activity::Turn { turn: 2 },
            // A running total has no cost yet.
            Activity::Tokens {
                usage: Usage {
                    cost_usd: None,
                    ..usage
                },
            },
            Activity::ToolCall {
                tool: "Read".into(),
                detail: "a.rs".into(),
            },
            Activity::ToolEnd {
                tool: "Bash".into(),
                status: "error".into(),
                ms: 7,
                message: Some("boom".into()),
            },
            Activity::Retry {
                attempt: 2,
                reason: "429".into(),
                partial: true,
            },
            Activity::Held { shared_bytes: 10 },
            Activity::Released { waited_ms: 11 },
            Activity::Concurrency {
                limit: 3,
                reason: "429".into(),
            },
        ] {
            kinds.push(EventKind::AgentActivity {
                seq: 2,
                label: "l".into(),
                activity,
                workflow: None,
            });
        }
        for kind in kinds {
            let e = event(kind);
            assert_eq!(Event::from_json(&e.to_json()).as_ref(), Some(&e));
        }
    }

    #[test]
    fn a_line_dsh_does_not_write_is_none() {
        for v in [
            json!({}),
            json!({"type": "workflow/bogus", "runId": "r", "t": 1}),
            json!({"type": "workflow/log", "runId": "r", "t": 1}),
            json!({"type": "workflow/end", "runId": "r", "t": 1, "stopReason": "exploded", "agentsStarted": 0}),
        ] {
            assert_eq!(Event::from_json(&v), None, "{v}");
        }
    }

    #[test]
    fn a_result_comes_back_from_its_json() {
        let r = RunResult {
            value: json!([1, "a"]),
            stop_reason: StopReason::Cancelled,
            error: Some(RunError::new(ErrorCode::Cancelled, "stop")),
            agents_started: 2,
            log_bytes_dropped: 0,
            sandbox: None,
            usage: Some(Usage {
                input: 1,
                output: 2,
                ..Usage::default()
            }),
        };
        assert_eq!(RunResult::from_json(&r.to_json()), Some(r));
    }
}
