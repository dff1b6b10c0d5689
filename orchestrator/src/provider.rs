//! The subagent seam (contract §13): what an embedding application
//! implements to answer `agent()` calls, and what the built-in providers
//! implement too.
//!
//! A provider *starts* a child for a request; the child then exposes its id,
//! its result, `cancel()` and `dispose()`. The supervisor owns every child it
//! was given: it cancels children when the run is cancelled, and disposes
//! every child (finished or not) before the run settles.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use dsh_protocol::{AgentOptions, Usage};

/// One `agent()` call, as a provider sees it. Defaults are resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRequest {
    /// The call's `seq` in events (1, 2, 3 … per run).
    pub seq: u64,
    /// The prompt, as the script gave it.
    pub prompt: String,
    /// The display label: the `label` option, else from the prompt's first
    /// line.
    pub label: String,
    /// The `phase` option, else the script's current phase; `None` when
    /// there is neither.
    pub phase: Option<String>,
    /// The call's schema, already checked against the supported subset.
    pub schema: Option<Value>,
    /// `model`, `provider`, `effort`, `agentType`, `isolation`: as the
    /// script gave them, the agent type's defaults filled in by the router.
    pub options: AgentOptions,
    /// A system prompt from the configuration (`[agent_types.NAME]`), set
    /// by the router; never from the script.
    pub system_prompt: Option<String>,
    /// The tools the child may use, for providers that have tools (the
    /// agent type's `tools`, set by the router); `None` is all of them.
    pub tools: Option<Vec<String>>,
    /// Tools the child may not use (the agent type's `disallowedTools`,
    /// set by the router).
    pub disallowed_tools: Vec<String>,
}

impl AgentRequest {
    /// A request for call `seq` with `prompt`, labelled `label`, and no
    /// options (set the public fields for more). For embedders' tests and
    /// tools that drive a provider directly.
    pub fn new(seq: u64, prompt: impl Into<String>, label: impl Into<String>) -> Self {
        AgentRequest {
            seq,
            prompt: prompt.into(),
            label: label.into(),
            phase: None,
            schema: None,
            options: AgentOptions::default(),
            system_prompt: None,
            tools: None,
            disallowed_tools: Vec::new(),
        }
    }
}

/// How a child ended on its own terms.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
#[non_exhaustive]
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
    /// Fills in what this provider would add to `request` before starting
    /// it (a router: the agent type's model, effort and system prompt), so
    /// a wrapper that keys calls by what changes their answer (the journal)
    /// sees the same request the child will. Must be idempotent; the
    /// default adds nothing.
    fn prepare(&self, _request: &mut AgentRequest) {}

    /// Starts a child for `request`. `cancel` fires when the run is
    /// cancelled before the start completes; a start that completes anyway
    /// is disposed by the host and never announced.
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
}
