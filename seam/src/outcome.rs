//! How one `agent()` call ended: [`CallOutcome`], decided once by the host
//! when the call settles (after the schema check, the stall and timeout
//! bounds, the frame limit) and then read by every view — the call's
//! `agent-end` event, the journal's `settled` line, `dsh workflow show`,
//! `runs` and `report`, and the live view's lines and summary.
//!
//! Before this record existed each view re-derived the outcome from what
//! it had: the journal kept the child's raw answer, so an answer the host
//! then failed against the call's schema read `completed` in `show` while
//! the live line said `failed`.

use serde::{Deserialize, Serialize};

/// How one call ended, with its reason. Every failure carries the reason
/// the script's `agent-end` and the user see; [`CallOutcome::word`] is
/// the one word every view prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The child answered: text, or a structured answer that matches the
    /// call's schema. `agent()` resolves with it.
    Completed,
    /// The child failed on its own terms (refused the task, its program
    /// exited non-zero, its provider gave up — an agent CLI's answer still
    /// wrong after its corrective turn included). `agent()` resolves `null`.
    Failed {
        /// Why, as the provider said it.
        reason: String,
    },
    /// The child answered, but not with what the call's schema asks for
    /// (checked by the host). `agent()` resolves `null`.
    Invalid {
        /// What is wrong with the answer.
        reason: String,
    },
    /// The provider made no progress for the call's stall bound; the
    /// child was abandoned. `agent()` resolves `null`.
    Stalled {
        /// Which bound fired (`stalled: no progress … (stallMs)`).
        reason: String,
    },
    /// The call ran past its timeout; the child was abandoned. `agent()`
    /// resolves `null`.
    TimedOut {
        /// Which bound fired (`timed out after …`).
        reason: String,
    },
    /// The answer could not be delivered to the script (a fault of the
    /// provider's plumbing, or an answer over the frame limit). `agent()`
    /// rejects with `AGENT_RESULT`.
    Undelivered {
        /// What went wrong.
        reason: String,
    },
    /// The child was cancelled before it answered (the run was cancelled,
    /// or ended with the child still running).
    Cancelled,
    /// The provider refused to start a child (`AGENT_START`, `BUDGET`, an
    /// unsupported option). `agent()` rejects; there was no child, so
    /// there are no `agent-start`/`agent-end` events (contract §8).
    Refused {
        /// The provider's message.
        reason: String,
    },
}

impl CallOutcome {
    /// The word every view prints: `completed`, `failed` (every failure
    /// of a started child: its reason says which), `cancelled` or
    /// `refused`. The first three are the `outcome` of the `agent-end`
    /// event (contract §8).
    pub fn word(&self) -> &'static str {
        match self {
            CallOutcome::Refused { .. } => "refused",
            other => other.event_kind().as_str(),
        }
    }

    /// The finer kind, as the journal spells it: `completed`, `failed`,
    /// `invalid`, `stalled`, `timed-out`, `undelivered`, `cancelled`,
    /// `refused`.
    pub fn kind(&self) -> &'static str {
        match self {
            CallOutcome::Completed => "completed",
            CallOutcome::Failed { .. } => "failed",
            CallOutcome::Invalid { .. } => "invalid",
            CallOutcome::Stalled { .. } => "stalled",
            CallOutcome::TimedOut { .. } => "timed-out",
            CallOutcome::Undelivered { .. } => "undelivered",
            CallOutcome::Cancelled => "cancelled",
            CallOutcome::Refused { .. } => "refused",
        }
    }

    /// The `outcome` of the call's `agent-end` event.
    pub fn event_kind(&self) -> AgentOutcomeKind {
        match self {
            CallOutcome::Completed => AgentOutcomeKind::Completed,
            CallOutcome::Cancelled => AgentOutcomeKind::Cancelled,
            _ => AgentOutcomeKind::Failed,
        }
    }

    /// Why it did not complete; `None` for a completed or cancelled call.
    pub fn reason(&self) -> Option<&str> {
        match self {
            CallOutcome::Completed | CallOutcome::Cancelled => None,
            CallOutcome::Failed { reason }
            | CallOutcome::Invalid { reason }
            | CallOutcome::Stalled { reason }
            | CallOutcome::TimedOut { reason }
            | CallOutcome::Undelivered { reason }
            | CallOutcome::Refused { reason } => Some(reason),
        }
    }

    /// A failure of any kind (a refusal included): what `--retry-failed`
    /// asks again and the summary lists.
    pub fn is_failure(&self) -> bool {
        !matches!(self, CallOutcome::Completed | CallOutcome::Cancelled)
    }

    /// The same outcome with its reason cut to `max` characters (see
    /// [`shown`]): what events and the journal keep.
    pub fn cut(mut self, max: usize) -> CallOutcome {
        match &mut self {
            CallOutcome::Completed | CallOutcome::Cancelled => {}
            CallOutcome::Failed { reason }
            | CallOutcome::Invalid { reason }
            | CallOutcome::Stalled { reason }
            | CallOutcome::TimedOut { reason }
            | CallOutcome::Undelivered { reason }
            | CallOutcome::Refused { reason } => {
                if reason.chars().count() > max {
                    *reason = shown(reason, max);
                }
            }
        }
        self
    }
}

/// `text` cut to `max` characters: the first `max - 1` and `…` when longer,
/// as the contract cuts a default label.
pub fn shown(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some(_) => {
            let keep = max.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            let mut s = String::with_capacity(end + '…'.len_utf8());
            s.push_str(&text[..end]);
            s.push('…');
            s
        }
    }
}

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

    /// The kind [`AgentOutcomeKind::as_str`] spells `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Completed, Self::Failed, Self::Cancelled]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_serialize_as_a_kind_and_a_reason() {
        let o = CallOutcome::TimedOut {
            reason: "timed out after 300 ms".into(),
        };
        assert_eq!(
            serde_json::to_value(&o).expect("json"),
            json!({"kind": "timed-out", "reason": "timed out after 300 ms"})
        );
        assert_eq!(
            serde_json::to_value(CallOutcome::Completed).expect("json"),
            json!({"kind": "completed"})
        );
        let back: CallOutcome =
            serde_json::from_value(json!({"kind": "invalid", "reason": "r"})).expect("read back");
        assert_eq!(back.word(), "failed");
        assert_eq!(back.kind(), "invalid");
        assert_eq!(back.reason(), Some("r"));
    }

    #[test]
    fn every_failure_of_a_started_child_is_failed_in_events() {
        for o in [
            CallOutcome::Failed { reason: "a".into() },
            CallOutcome::Invalid { reason: "a".into() },
            CallOutcome::Stalled { reason: "a".into() },
            CallOutcome::TimedOut { reason: "a".into() },
            CallOutcome::Undelivered { reason: "a".into() },
        ] {
            assert_eq!(o.word(), "failed");
            assert!(o.is_failure());
        }
        assert_eq!(
            CallOutcome::Refused { reason: "q".into() }.word(),
            "refused"
        );
        assert!(!CallOutcome::Cancelled.is_failure());
        assert_eq!(
            CallOutcome::Failed {
                reason: "x".repeat(10)
            }
            .cut(4)
            .reason(),
            Some("xxx…")
        );
    }
}
