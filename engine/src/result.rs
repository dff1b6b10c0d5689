//! The result of a run (contract §7). A run always settles with exactly one.

use dsh_protocol::{ErrorCode, SandboxReport, StopReason};
use serde_json::{Map, Value, json};

/// The `error` of a result that did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    /// The error's code (`SCRIPT_ERROR`, `TIMEOUT`, `CANCELLED` …).
    pub code: ErrorCode,
    /// What went wrong, for the user; script positions are those of the
    /// original source.
    pub message: String,
}

impl RunError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RunError {
            code,
            message: message.into(),
        }
    }

    /// The `error` object of results and `workflow/end`: `{ "code",
    /// "message" }`.
    pub fn to_json(&self) -> Value {
        error_json(self.code.as_str(), &self.message)
    }
}

/// How a run settled.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The return value when completed, else `null`.
    pub value: Value,
    /// How the run stopped: completed, error or cancelled.
    pub stop_reason: StopReason,
    /// Why the run did not complete; `None` when it completed.
    pub error: Option<RunError>,
    /// `agent()` calls admitted during the run.
    pub agents_started: u64,
    /// Log bytes dropped under the run's log limit
    /// ([`Limits::log_bytes`](crate::Limits::log_bytes)).
    pub log_bytes_dropped: u64,
    /// The sandbox the worker reached, when it got that far.
    pub sandbox: Option<SandboxReport>,
    /// The tokens (and cost) of every call the run made, replayed ones
    /// included; `None` when no child reported any.
    pub usage: Option<dsh_protocol::Usage>,
}

impl RunResult {
    pub(crate) fn failed(stop_reason: StopReason, error: RunError, agents_started: u64) -> Self {
        RunResult {
            value: Value::Null,
            stop_reason,
            error: Some(error),
            agents_started,
            log_bytes_dropped: 0,
            sandbox: None,
            usage: None,
        }
    }

    /// The result object of contract §7 (`--output result`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("value".into(), self.value.clone());
        m.insert("stopReason".into(), self.stop_reason.as_str().into());
        if let Some(e) = &self.error {
            m.insert("error".into(), e.to_json());
        }
        m.insert("agentsStarted".into(), self.agents_started.into());
        if self.log_bytes_dropped > 0 {
            m.insert("logBytesDropped".into(), self.log_bytes_dropped.into());
        }
        if let Some(u) = &self.usage {
            m.insert("usage".into(), usage_json(u));
            if let Some(c) = u.cost_usd {
                m.insert("cost".into(), c.into());
            }
        }
        if let Some(s) = &self.sandbox {
            m.insert("sandbox".into(), sandbox_json(s));
        }
        Value::Object(m)
    }

    /// Whether the run completed (`stopReason: completed`).
    pub fn is_completed(&self) -> bool {
        self.stop_reason == StopReason::Completed
    }
}

/// The `sandbox` object of `--output result`: `{ "level": "full" |
/// "partial" | "none", "landlockAbi": N | null, "enforced": [rule…],
/// "missing": ["rule (why)"…] }` (docs/sandbox.md).
pub fn sandbox_json(s: &SandboxReport) -> Value {
    serde_json::json!({
        "level": s.level.as_str(),
        "landlockAbi": s.landlock_abi,
        "enforced": s.enforced,
        "missing": s.missing,
    })
}

/// Builds the `error` object of results and `workflow/end`.
fn error_json(code: &str, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// A usage as events show it: `input`, `output`, and the cache's share of
/// the input when there was one (`cacheRead`, `cacheWrite`).
pub(crate) fn usage_json(u: &dsh_protocol::Usage) -> Value {
    let mut v = json!({ "input": u.input, "output": u.output });
    if u.cache_read > 0 {
        v["cacheRead"] = u.cache_read.into();
    }
    if u.cache_write > 0 {
        v["cacheWrite"] = u.cache_write.into();
    }
    v
}
