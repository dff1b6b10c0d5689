//! The error codes of the user-facing contract (contract §6 and §12).

use serde::{Deserialize, Serialize};

/// Every error code a run or the CLI can report. New codes may be added:
/// match with a wildcard arm, or go through [`ErrorCode::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `SCRIPT_PARSE`: the script does not parse or uses unsupported syntax.
    ScriptParse,
    /// `SCRIPT_ERROR`: the script threw or rejected and nothing caught it.
    ScriptError,
    /// `META_INVALID`: `meta` is not a static literal or breaks its rules.
    MetaInvalid,
    /// `INVALID_ARGUMENT`: a hook got malformed arguments.
    InvalidArgument,
    /// `UNSUPPORTED_OPTION`: an unknown `agent()` option, or one the
    /// provider cannot honour.
    UnsupportedOption,
    /// `UNSUPPORTED_SCHEMA`: a `schema` outside the supported subset.
    UnsupportedSchema,
    /// `AGENT_CAP`: more `agent()` calls than `maxTotalAgents`.
    AgentCap,
    /// `ITEM_CAP`: more items in one `parallel`/`pipeline` call than
    /// `maxItemsPerCall`.
    ItemCap,
    /// `AGENT_START`: the provider refused or failed to start a child.
    AgentStart,
    /// `AGENT_RESULT`: an infrastructure fault delivering a child's result.
    AgentResult,
    /// `RESULT_UNSERIALIZABLE`: the return value is not plain JSON, or too
    /// large for one frame.
    ResultUnserializable,
    /// `BUDGET`: the output-token budget is spent.
    Budget,
    /// `CANCELLED`: the run was cancelled.
    Cancelled,
    /// `TIMEOUT`: a synchronous slice, the CPU budget or the wall clock ran out.
    Timeout,
    /// `MEMORY`: the script exceeded its memory limit.
    Memory,
    /// `WORKER_EXITED`: the worker died or broke the protocol before settling.
    WorkerExited,
    /// `SANDBOX_UNAVAILABLE`: `strict` was asked for and cannot be enforced.
    SandboxUnavailable,
    // CLI-only codes (contract §12).
    /// `USAGE`: bad command-line use (CLI only).
    Usage,
    /// `CONFIG_INVALID`: a malformed configuration file (CLI only).
    ConfigInvalid,
    /// `FIXTURE_INVALID`: a malformed fixture file (CLI only).
    FixtureInvalid,
    /// `SCRIPT_TOO_LARGE`: the script is over `maxScriptBytes` (CLI only).
    ScriptTooLarge,
}

impl ErrorCode {
    /// All codes, for exhaustive tests and docs.
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::ScriptParse,
        ErrorCode::ScriptError,
        ErrorCode::MetaInvalid,
        ErrorCode::InvalidArgument,
        ErrorCode::UnsupportedOption,
        ErrorCode::UnsupportedSchema,
        ErrorCode::AgentCap,
        ErrorCode::ItemCap,
        ErrorCode::AgentStart,
        ErrorCode::AgentResult,
        ErrorCode::ResultUnserializable,
        ErrorCode::Budget,
        ErrorCode::Cancelled,
        ErrorCode::Timeout,
        ErrorCode::Memory,
        ErrorCode::WorkerExited,
        ErrorCode::SandboxUnavailable,
        ErrorCode::Usage,
        ErrorCode::ConfigInvalid,
        ErrorCode::FixtureInvalid,
        ErrorCode::ScriptTooLarge,
    ];

    /// The code as users see it, e.g. `SCRIPT_PARSE`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ScriptParse => "SCRIPT_PARSE",
            ErrorCode::ScriptError => "SCRIPT_ERROR",
            ErrorCode::MetaInvalid => "META_INVALID",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::UnsupportedOption => "UNSUPPORTED_OPTION",
            ErrorCode::UnsupportedSchema => "UNSUPPORTED_SCHEMA",
            ErrorCode::AgentCap => "AGENT_CAP",
            ErrorCode::ItemCap => "ITEM_CAP",
            ErrorCode::AgentStart => "AGENT_START",
            ErrorCode::AgentResult => "AGENT_RESULT",
            ErrorCode::ResultUnserializable => "RESULT_UNSERIALIZABLE",
            ErrorCode::Budget => "BUDGET",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Memory => "MEMORY",
            ErrorCode::WorkerExited => "WORKER_EXITED",
            ErrorCode::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            ErrorCode::Usage => "USAGE",
            ErrorCode::ConfigInvalid => "CONFIG_INVALID",
            ErrorCode::FixtureInvalid => "FIXTURE_INVALID",
            ErrorCode::ScriptTooLarge => "SCRIPT_TOO_LARGE",
        }
    }

    /// Parses the user-facing spelling.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_name() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("NOPE"), None);
    }
}
