//! The bounds the host enforces on one call once its child started:
//! [`CallLimits`] (a stall timeout and a timeout), each a [`CallLimit`].

use super::AgentRequest;

/// One host-enforced bound on a call: how long, and where it came from
/// (for the failure's reason: `stallMs`, `[agent_types.NAME] stall`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLimit {
    /// The bound.
    pub after: std::time::Duration,
    /// Where it was set, as the reason names it.
    pub source: String,
}

impl CallLimit {
    /// A bound of `after` set by `source`.
    pub fn new(after: std::time::Duration, source: impl Into<String>) -> Self {
        CallLimit {
            after,
            source: source.into(),
        }
    }
}

/// The bounds the host enforces on one call, from its start
/// (`agent-start`): a stall timeout (no [`Progress`](super::Progress) for that long) and a
/// timeout (no answer for that long). When one fires the host abandons the
/// child ([`Subagent::abandon`](super::Subagent::abandon)) and the call fails — `agent()` resolves
/// `null`, the `agent-end` reason says which bound fired; it is never
/// retried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallLimits {
    /// No progress for this long: the call fails with `stalled: …`.
    pub stall: Option<CallLimit>,
    /// No answer this long after the start: the call fails with
    /// `timed out after …`.
    pub timeout: Option<CallLimit>,
}

impl CallLimits {
    /// The call's own bounds: its `stallMs` option, no timeout.
    pub fn of_call(request: &AgentRequest) -> CallLimits {
        CallLimits {
            stall: request
                .options
                .stall_ms
                .map(|ms| CallLimit::new(std::time::Duration::from_millis(ms), "stallMs")),
            timeout: None,
        }
    }
}
