//! [`ProviderError`]: why a provider's call failed and whether trying again
//! may help, and how it becomes the seam's [`StartRefused`],
//! [`ChildResult::Failed`] and [`ResultFault`].

use dsh_protocol::ErrorCode;

use super::{ChildResult, ResultFault, StartRefused};

/// Why a provider's call failed, and what may be done about it: the kind
/// is what a retry loop reads (never the message), the reason is what the
/// user reads (an `agent-end` reason, an `agent()` rejection).
///
/// At the seam's edge it becomes today's types: a refusal before the start
/// a [`StartRefused`] (`From`), a failed child [`ChildResult::Failed`]
/// ([`ProviderError::into_child_result`]), a fault while delivering a
/// result a [`ResultFault`] (`From`); the text is the reason, unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ProviderError {
    /// Whether trying again may help.
    pub kind: FailureKind,
    /// What went wrong, for the user.
    pub reason: String,
}

/// Whether a failed call may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Exhaustive on purpose: the providers (another crate) decide retries by
// matching every variant.
pub enum FailureKind {
    /// Sending the same request again may succeed: the service was busy or
    /// failed on its side, or the connection broke.
    Retryable {
        /// What made it fail.
        cause: RetryCause,
        /// How long the service asked to be left alone (`Retry-After`);
        /// `None`: the provider's own backoff decides.
        after: Option<std::time::Duration>,
    },
    /// The provider declines the call as made (an option it cannot honour,
    /// a program it cannot run): asking again is declined the same way.
    /// `code` is what `agent()` rejects with.
    Refused {
        /// `AGENT_START`, or `UNSUPPORTED_OPTION`.
        code: ErrorCode,
    },
    /// The call cannot succeed as made and is not repeated: a 4xx answer
    /// other than 429 (a bad key, a bad request), a timeout (the request
    /// may have been answered and charged), an answer that cannot be read.
    Fatal,
}

/// Why a retryable failure happened; the dispatch answers a rate limit by
/// lowering its concurrency instead of counting a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Exhaustive on purpose: the providers (another crate) decide retries by
// matching every variant.
pub enum RetryCause {
    /// The service asked to slow down: HTTP 429, or 529 (Anthropic's
    /// "overloaded", a rate limit of the whole service).
    RateLimited,
    /// The service failed on its side: a 5xx answer.
    ServerError,
    /// No answer came back: the connection could not be made or broke.
    Connection,
}

impl ProviderError {
    /// A failure that may succeed if tried again.
    pub fn retryable(
        cause: RetryCause,
        after: Option<std::time::Duration>,
        reason: impl Into<String>,
    ) -> Self {
        ProviderError {
            kind: FailureKind::Retryable { cause, after },
            reason: reason.into(),
        }
    }

    /// A call the provider declines, with code `code`.
    pub fn refused(code: ErrorCode, reason: impl Into<String>) -> Self {
        ProviderError {
            kind: FailureKind::Refused { code },
            reason: reason.into(),
        }
    }

    /// A failure that trying again cannot mend.
    pub fn fatal(reason: impl Into<String>) -> Self {
        ProviderError {
            kind: FailureKind::Fatal,
            reason: reason.into(),
        }
    }

    /// Whether sending the request again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, FailureKind::Retryable { .. })
    }

    /// The same failure with its reason rewritten by `f` (the kind kept):
    /// for a caller that adds where it happened (`turn 3: …`).
    #[must_use]
    pub fn map_reason(self, f: impl FnOnce(String) -> String) -> Self {
        ProviderError {
            kind: self.kind,
            reason: f(self.reason),
        }
    }

    /// The child's result for this failure: `agent()` resolves `null`, the
    /// reason is the `agent-end` reason.
    pub fn into_child_result(self) -> ChildResult {
        ChildResult::Failed(self.reason)
    }
}

impl From<ProviderError> for StartRefused {
    /// A refusal keeps its code; any other failure before the start is
    /// `AGENT_START`.
    fn from(e: ProviderError) -> Self {
        let code = match e.kind {
            FailureKind::Refused { code } => code,
            FailureKind::Retryable { .. } | FailureKind::Fatal => ErrorCode::AgentStart,
        };
        StartRefused {
            code,
            message: e.reason,
        }
    }
}

impl From<StartRefused> for ProviderError {
    fn from(r: StartRefused) -> Self {
        ProviderError::refused(r.code, r.message)
    }
}

impl From<ProviderError> for ResultFault {
    fn from(e: ProviderError) -> Self {
        ResultFault(e.reason)
    }
}
