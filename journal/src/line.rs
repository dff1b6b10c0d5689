//! The lines of `journal.jsonl`: one JSON object per line.
//!
//! ```text
//! {"type":"attempt","attempt":1,"pid":4242,"at":1764477512000}
//! {"type":"start","seq":1,"key":"9f…","label":"plan","prompt":"…","at":…}
//! {"type":"session","seq":1,"key":"9f…","provider":"claude","session":"6f0c…","at":…}
//! {"type":"settled","seq":1,"key":"9f…","childId":"scripted-1","outcome":{"text":"…"},"verdict":{"kind":"completed"},"usage":{"input":3,"output":5},"at":…}
//! ```
//!
//! A replayed call gets a `start` line with `"replayed": true` and no
//! `settled` line: its answer is already in the journal once, which keeps
//! "the n-th call with a key gets the n-th answer with that key" true
//! across any number of resumes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use dsh_seam::outcome::CallOutcome;
use dsh_seam::{AgentRequest, ChildOutcome, ChildResult, ResultFault, StartRefused, Usage};

/// One line of `journal.jsonl`, tagged by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum Line {
    /// A run or a resume of it began.
    Attempt {
        /// 1 for the run, one more for each resume.
        attempt: u32,
        /// The process id of the `dsh` process that made this attempt.
        pid: u32,
        /// When, in milliseconds since the Unix epoch.
        at: u64,
    },
    /// An `agent()` call was handed to the provider (or replayed).
    #[serde(rename_all = "camelCase")]
    Start {
        /// The call's `seq` in this attempt (1, 2, 3 …).
        seq: u64,
        /// The call's key ([`call_key`](super::call_key)).
        key: String,
        /// The call's display label.
        label: String,
        /// The call's phase (its `phase` option, else the script's current
        /// phase); `None` when there is neither, and in journals written
        /// before phases were journaled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        /// The nested workflow (`workflow()`) that made the call, by name;
        /// `None` for the top-level script.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workflow: Option<String>,
        /// The call's prompt.
        prompt: String,
        /// The call's schema; `None` for a text call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        /// The `model` option; `None` when not given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The `effort` option; `None` when not given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effort: Option<String>,
        /// The `agentType` option; `None` when not given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
        /// The `provider` option; `None` when not given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        /// The `isolation` option; `None` when not given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        isolation: Option<String>,
        /// Answered from the journal of an earlier attempt (no `settled`
        /// line follows).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        replayed: bool,
        /// When, in milliseconds since the Unix epoch.
        at: u64,
    },
    /// A live call's agent CLI named the session it runs in (Claude
    /// Code's session, Codex's thread): if the call is interrupted before
    /// it settles, `dsh workflow resume` continues that session.
    #[serde(rename_all = "camelCase")]
    Session {
        /// The `seq` of the call's `start` line.
        seq: u64,
        /// The call's key, as in its `start` line.
        key: String,
        /// The provider that runs the session (`[providers.NAME]`).
        provider: String,
        /// The CLI's id of the session.
        session: String,
        /// When, in milliseconds since the Unix epoch.
        at: u64,
    },
    /// A live call settled.
    #[serde(rename_all = "camelCase")]
    Settled {
        /// The `seq` of the call's `start` line.
        seq: u64,
        /// The call's key, as in its `start` line.
        key: String,
        /// The child's id; `None` when the provider refused to start one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child_id: Option<String>,
        /// What the child answered: replayed as it is on a resume, and
        /// recorded as it is by `--record`.
        outcome: Outcome,
        /// How the call ended as the host decided it (the answer checked
        /// against the schema, the stall and timeout bounds): what `show`,
        /// `runs` and `report` print. `None` in journals written before it
        /// was journaled; those are read from `outcome`
        /// ([`Outcome::call_outcome`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verdict: Option<CallOutcome>,
        /// The tokens the child reported; `None` when it reported none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// The git branch of the worktree the child changed and that was
        /// kept (`isolation: "worktree"`); `None` when none was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worktree: Option<String>,
        /// When, in milliseconds since the Unix epoch.
        at: u64,
    },
}

/// How a call ended, in the fixture's words (contract §11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// The child's final text.
    Text(String),
    /// The child's structured answer.
    Structured(Value),
    /// The child failed, with this reason.
    Fail(String),
    /// The provider refused to start a child, with this message.
    StartError(String),
    /// An infrastructure fault delivering the result, with this message.
    ResultError(String),
    /// Cancelled before it answered: nothing to replay.
    Cancelled,
}

impl Outcome {
    /// The outcome and usage to journal for a child's result (a fault
    /// becomes [`Outcome::ResultError`], without usage).
    pub fn from_result(r: &Result<ChildOutcome, ResultFault>) -> (Outcome, Option<Usage>) {
        match r {
            Ok(o) => {
                let outcome = match &o.result {
                    ChildResult::Text(t) => Outcome::Text(t.clone()),
                    ChildResult::Structured(v) => Outcome::Structured(v.clone()),
                    ChildResult::Failed(m) => Outcome::Fail(m.clone()),
                    ChildResult::Cancelled => Outcome::Cancelled,
                };
                (outcome, o.usage)
            }
            Err(fault) => (Outcome::ResultError(fault.0.clone()), None),
        }
    }

    /// The outcome to journal for a refused start.
    pub fn from_refusal(r: &StartRefused) -> Outcome {
        Outcome::StartError(r.message.clone())
    }

    /// Answers that are replayed on resume: what a child actually said.
    /// Faults and cancellations are tried again.
    pub fn replayable(&self) -> bool {
        matches!(
            self,
            Outcome::Text(_) | Outcome::Structured(_) | Outcome::Fail(_)
        )
    }

    /// The call's outcome as a journal without a `verdict` says it (one
    /// written before verdicts were journaled): an answer completed, a
    /// failure failed, a refused start was refused.
    pub fn call_outcome(&self) -> CallOutcome {
        match self {
            Outcome::Text(_) | Outcome::Structured(_) => CallOutcome::Completed,
            Outcome::Fail(m) => CallOutcome::Failed { reason: m.clone() },
            Outcome::StartError(m) => CallOutcome::Refused { reason: m.clone() },
            Outcome::ResultError(m) => CallOutcome::Undelivered { reason: m.clone() },
            Outcome::Cancelled => CallOutcome::Cancelled,
        }
    }

    /// The child result a replayed call gets (`None` when not replayable).
    pub fn to_child_result(&self) -> Option<ChildResult> {
        match self {
            Outcome::Text(t) => Some(ChildResult::Text(t.clone())),
            Outcome::Structured(v) => Some(ChildResult::Structured(v.clone())),
            Outcome::Fail(m) => Some(ChildResult::Failed(m.clone())),
            _ => None,
        }
    }
}

impl Line {
    /// The `start` line of request `r` with call key `key`, stamped now.
    pub fn start(r: &AgentRequest, key: &str, replayed: bool) -> Line {
        Line::Start {
            seq: r.seq,
            key: key.to_string(),
            label: dsh_engine::events::shown_label(&r.label),
            phase: r.phase.as_deref().map(dsh_engine::events::shown_label),
            workflow: r.workflow.as_deref().map(dsh_engine::events::shown_label),
            prompt: r.prompt.clone(),
            schema: r.schema.clone(),
            model: r.options.model.clone(),
            effort: r.options.effort.clone(),
            agent_type: r.options.agent_type.clone(),
            provider: r.options.provider.clone(),
            isolation: r.options.isolation.clone(),
            replayed,
            at: super::now_ms(),
        }
    }

    /// The text of [`Line::start`] (with its newline), written from the
    /// request without copying it first: a prompt can be megabytes, and
    /// the host must not hold it twice.
    pub fn start_text(r: &AgentRequest, key: &str, replayed: bool) -> String {
        let line = StartRef {
            seq: r.seq,
            key,
            label: dsh_engine::events::shown_label(&r.label),
            phase: r.phase.as_deref().map(dsh_engine::events::shown_label),
            workflow: r.workflow.as_deref().map(dsh_engine::events::shown_label),
            prompt: &r.prompt,
            schema: r.schema.as_ref(),
            model: r.options.model.as_deref(),
            effort: r.options.effort.as_deref(),
            agent_type: r.options.agent_type.as_deref(),
            provider: r.options.provider.as_deref(),
            isolation: r.options.isolation.as_deref(),
            replayed,
            at: super::now_ms(),
        };
        let mut s = serde_json::to_string(&line).unwrap_or_else(|_| "{}".into());
        s.push('\n');
        s
    }

    /// One line of JSON text with its newline.
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| "{}".into());
        s.push('\n');
        s
    }
}

/// [`Line::Start`] by reference, serialized the same way.
#[derive(Serialize)]
#[serde(tag = "type", rename = "start", rename_all = "camelCase")]
struct StartRef<'a> {
    seq: u64,
    key: &'a str,
    label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workflow: Option<String>,
    prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    isolation: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
    at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_start_line_written_by_reference_reads_back_as_the_line() {
        let mut r = AgentRequest::new(4, "the prompt", "lbl");
        r.schema = Some(json!({"type": "object"}));
        r.options.model = Some("m".into());
        r.phase = Some("Review".into());
        r.workflow = Some("nested".into());
        let text = Line::start_text(&r, "k", true);
        let mut back: Line = serde_json::from_str(&text).expect("a start line");
        if let Line::Start { at, .. } = &mut back {
            *at = 0;
        }
        let mut direct = Line::start(&r, "k", true);
        if let Line::Start { at, .. } = &mut direct {
            *at = 0;
        }
        assert_eq!(back, direct);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn lines_round_trip_in_the_documented_shape() {
        let l = Line::Settled {
            seq: 3,
            key: "k".into(),
            child_id: Some("c".into()),
            outcome: Outcome::Structured(json!({"ok": true})),
            verdict: None,
            usage: Some(Usage::new(1, 2)),
            worktree: None,
            at: 5,
        };
        let text = l.to_text();
        assert_eq!(
            serde_json::from_str::<Value>(&text).expect("json"),
            json!({"type": "settled", "seq": 3, "key": "k", "childId": "c",
                   "outcome": {"structured": {"ok": true}},
                   "usage": {"input": 1, "output": 2}, "at": 5})
        );
        assert_eq!(serde_json::from_str::<Line>(&text).expect("line"), l);
        let c: Line = serde_json::from_str(
            r#"{"type":"settled","seq":1,"key":"k","outcome":"cancelled","at":0}"#,
        )
        .expect("cancelled");
        assert!(matches!(
            c,
            Line::Settled {
                outcome: Outcome::Cancelled,
                ..
            }
        ));
    }

    /// A journal written before verdicts (by an older dsh) still reads,
    /// and its calls' outcomes come from their answers; a new line keeps
    /// the host's verdict apart from the answer a resume replays.
    #[test]
    fn a_settled_line_without_a_verdict_reads_from_its_answer() {
        let old: Line = serde_json::from_str(
            r#"{"type":"settled","seq":1,"key":"k","outcome":{"startError":"quota"},"at":0}"#,
        )
        .expect("an old line");
        let Line::Settled {
            outcome, verdict, ..
        } = old
        else {
            panic!("a settled line");
        };
        assert_eq!(verdict, None);
        assert_eq!(
            outcome.call_outcome(),
            CallOutcome::Refused {
                reason: "quota".into()
            }
        );
        let new = Line::Settled {
            seq: 1,
            key: "k".into(),
            child_id: None,
            outcome: Outcome::Text("{}".into()),
            verdict: Some(CallOutcome::Invalid {
                reason: "no ok".into(),
            }),
            usage: None,
            worktree: None,
            at: 0,
        };
        let v: Value = serde_json::from_str(&new.to_text()).expect("json");
        assert_eq!(v["outcome"], json!({"text": "{}"}));
        assert_eq!(v["verdict"], json!({"kind": "invalid", "reason": "no ok"}));
    }

    #[test]
    fn only_answers_are_replayable() {
        assert!(Outcome::Text("t".into()).replayable());
        assert!(Outcome::Fail("no".into()).replayable());
        assert!(!Outcome::ResultError("reset".into()).replayable());
        assert!(!Outcome::StartError("quota".into()).replayable());
        assert!(!Outcome::Cancelled.replayable());
    }
}
