//! A started child and what it settles with: the two traits of the seam
//! ([`SubagentProvider`] starts a [`Subagent`]), the child's result and
//! origin, and the refusals and faults at its start and end.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_protocol::{ErrorCode, Usage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{AgentRequest, CallLimits, Progress};

/// How a child ended on its own terms.
#[derive(Debug, Clone, PartialEq)]
// Exhaustive on purpose: the engine (another crate) gives every variant
// its meaning, and a new one must be handled there, not fall through.
pub enum ChildResult {
    /// Final text.
    Text(String),
    /// A structured answer. The host validates it against the call's schema.
    Structured(Value),
    /// The child ended unsuccessfully (refused, failed, gave up): `agent()`
    /// resolves `null`.
    Failed(String),
    /// The child was cancelled.
    Cancelled,
}

/// A settled child: its result and the tokens it reported.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildOutcome {
    /// How the child ended.
    pub result: ChildResult,
    /// The tokens the child reported; `None` when it reported none.
    pub usage: Option<Usage>,
}

/// Where a child's answer comes from. Anything but `Live` is marked in the
/// child's `agent-start`/`agent-end` events (`"replayed": true`,
/// `"dryRun": true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
// Exhaustive on purpose: the engine (another crate) gives every variant
// its meaning, and a new one must be handled there, not fall through.
pub enum ChildOrigin {
    /// Answered by the provider now.
    #[default]
    Live,
    /// Answered from a run's journal (`dsh workflow resume`).
    Replayed,
    /// Answered by `--dry-run` without any provider.
    DryRun,
}

/// A git worktree a child changed and that was therefore kept (the
/// `command` provider's `isolation: "worktree"`); shown in the child's
/// `agent-end` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptWorktree {
    /// The worktree's directory.
    pub path: std::path::PathBuf,
    /// The git branch that holds the child's changes.
    pub branch: String,
}

/// The provider refused to start a child.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StartRefused {
    /// `AGENT_START`, or `UNSUPPORTED_OPTION` for an option the provider
    /// cannot honour (e.g. `isolation`).
    pub code: ErrorCode,
    /// Why, for the user: `agent()` rejects with it.
    pub message: String,
}

impl StartRefused {
    /// A refusal with code `AGENT_START` and `message`.
    pub fn agent_start(message: impl Into<String>) -> Self {
        StartRefused {
            code: ErrorCode::AgentStart,
            message: message.into(),
        }
    }
}

/// An infrastructure fault while delivering a child's result: `agent()`
/// rejects with `AGENT_RESULT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResultFault(pub String);

/// Starts children. Implementations must be cheap to call concurrently.
#[async_trait]
pub trait SubagentProvider: Send + Sync + 'static {
    /// The bounds the host enforces on `request` once its child started
    /// (see [`CallLimits`]). The default is the call's own `stallMs`; the
    /// router adds the `stall` and `timeout` of its agent type and
    /// provider from `dsh.toml`. Wrappers forward it.
    fn call_limits(&self, request: &AgentRequest) -> CallLimits {
        CallLimits::of_call(request)
    }

    /// Fills in what this provider would add to `request` before starting
    /// it (a router: the agent type's model, effort and system prompt), so
    /// a wrapper that keys calls by what changes their answer (the journal)
    /// sees the same request the child will. The engine calls it once per
    /// call, on the outermost provider, before [`call_limits`] and
    /// [`start`]; a wrapper forwards it to the provider behind it. Must be
    /// idempotent; the default adds nothing.
    ///
    /// [`call_limits`]: SubagentProvider::call_limits
    /// [`start`]: SubagentProvider::start
    fn prepare(&self, _request: &mut AgentRequest) {}

    /// Starts a child for `request`, which [`prepare`] has prepared (a
    /// caller other than the engine calls `prepare` first). `cancel` fires
    /// when the run is cancelled before the start completes; a start that
    /// completes anyway is disposed by the host and never announced.
    ///
    /// [`prepare`]: SubagentProvider::prepare
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused>;
}

/// A started child.
#[async_trait]
pub trait Subagent: Send + Sync + 'static {
    /// A unique id (shown as `childId` in events).
    fn id(&self) -> &str;
    /// Waits for the child to settle. Called once by the host; must return
    /// promptly (with [`ChildResult::Cancelled`] or a fault) after
    /// [`Subagent::cancel`].
    async fn result(&self) -> Result<ChildOutcome, ResultFault>;
    /// Asks the child to stop. Idempotent, never blocks.
    fn cancel(&self);
    /// The host gives up on the child (a [`CallLimits`] bound fired): it
    /// must stop as for [`Subagent::cancel`], and the call ends as failed
    /// with `reason`. The default cancels; a wrapper that records outcomes
    /// (the journal) overrides it to record the failure.
    fn abandon(&self, _reason: &str) {
        self.cancel();
    }
    /// The child's progress handle, if its provider reports progress (see
    /// [`Progress`]); asked once, right after the start. The default is
    /// `None`: only the answer counts as progress.
    fn progress(&self) -> Option<Progress> {
        None
    }
    /// Releases everything the child holds. Called exactly once, last;
    /// should return promptly (the host bounds the wait anyway).
    async fn dispose(&self);
    /// Where the answer comes from (default: live).
    fn origin(&self) -> ChildOrigin {
        ChildOrigin::Live
    }
    /// The worktree the child changed and that was kept, if any; asked
    /// once the child settled.
    fn kept_worktree(&self) -> Option<KeptWorktree> {
        None
    }
    /// The host's verdict on the call, once it settled: the answer checked
    /// against the call's schema, the stall and timeout bounds applied.
    /// Called once, after [`Subagent::result`] (or instead of it, for a
    /// child abandoned that never answered), and awaited before the
    /// script sees the outcome. The default does nothing; a wrapper that
    /// records outcomes (the journal) records this one, so every view of
    /// the call reads the same outcome.
    async fn settled(&self, _outcome: &crate::outcome::CallOutcome) {}
}
