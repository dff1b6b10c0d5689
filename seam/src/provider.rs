//! The subagent seam (contract §13): what an embedding application
//! implements to answer `agent()` calls, and what the built-in providers
//! implement too.
//!
//! A provider *starts* a child for a request; the child then exposes its id,
//! its result, `cancel()` and `dispose()`. The supervisor owns every child it
//! was given: it cancels children when the run is cancelled, and disposes
//! every child (finished or not) before the run settles.
//!
//! The seam's parts are in submodules, every item re-exported here (its
//! path is `dsh_seam::provider::X`): `request.rs` (the call), `child.rs`
//! (the two traits and what a child settles with), `progress.rs` (what a
//! child is doing), `limits.rs` (the host's bounds on a call), `error.rs`
//! (a provider's failure and its kind).

mod child;
mod error;
mod limits;
mod progress;
mod request;

pub use child::{
    ChildOrigin, ChildOutcome, ChildResult, KeptWorktree, ResultFault, StartRefused, Subagent,
    SubagentProvider,
};
pub use dsh_protocol::{AgentOptions, Usage};
pub use error::{FailureKind, ProviderError, RetryCause};
pub use limits::{CallLimit, CallLimits};
pub use progress::{Activity, Progress, Session};
pub use request::{AgentRequest, AgentTypeOrigin, CallSlot, LoopLimits};

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_protocol::ErrorCode;
    use rstest::rstest;

    /// At the seam's edge a failure keeps its text: a refusal its code,
    /// any other failure before the start is `AGENT_START`.
    #[rstest]
    #[case::refused(
        ProviderError::refused(ErrorCode::UnsupportedOption, "no isolation"),
        ErrorCode::UnsupportedOption
    )]
    #[case::fatal(
        ProviderError::fatal("HTTP 401 Unauthorized: bad key"),
        ErrorCode::AgentStart
    )]
    #[case::retryable(
        ProviderError::retryable(RetryCause::ServerError, None, "HTTP 503"),
        ErrorCode::AgentStart
    )]
    fn a_failure_before_the_start_is_a_refusal_with_the_same_text(
        #[case] e: ProviderError,
        #[case] code: ErrorCode,
    ) {
        let text = e.to_string();
        let r = StartRefused::from(e.clone());
        assert_eq!((r.code, r.message.as_str()), (code, text.as_str()));
        assert_eq!(ResultFault::from(e.clone()).0, text);
        assert_eq!(e.into_child_result(), ChildResult::Failed(text));
    }

    #[rstest]
    #[case::rate_limited(ProviderError::retryable(RetryCause::RateLimited, None, "429"), true)]
    #[case::connection(ProviderError::retryable(RetryCause::Connection, None, "reset"), true)]
    #[case::fatal(ProviderError::fatal("HTTP 400"), false)]
    #[case::refused(ProviderError::from(StartRefused::agent_start("no")), false)]
    fn only_the_retryable_kind_is_retried(#[case] e: ProviderError, #[case] retried: bool) {
        assert_eq!(e.is_retryable(), retried);
    }

    #[test]
    fn a_reason_is_rewritten_its_kind_kept() {
        let e = ProviderError::retryable(RetryCause::Connection, None, "reset")
            .map_reason(|r| format!("turn 2: {r}"));
        assert_eq!(e.to_string(), "turn 2: reset");
        assert!(e.is_retryable());
    }
}
