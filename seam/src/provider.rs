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
    /// The nested workflow (`workflow()`) that made the call, by name;
    /// `None` for the top-level script. Not part of the call's key: the
    /// same call answers the same wherever it is made.
    pub workflow: Option<String>,
    /// The call's schema, already checked against the supported subset.
    pub schema: Option<Value>,
    /// `model`, `provider`, `effort`, `agentType`, `isolation`, `stallMs`,
    /// `disallowedTools`: as the script gave them, the agent type's
    /// defaults filled in by the router.
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
    /// The agent type's bounds on the agent loop (set by the router), for
    /// providers of the loop.
    pub loop_limits: LoopLimits,
    /// Where the call's agent type comes from (set by the router); `None`
    /// without an `agentType`. An agent CLI that has the same built-in
    /// types uses its own for [`AgentTypeOrigin::BuiltIn`].
    pub agent_type_origin: Option<AgentTypeOrigin>,
    /// A session of an earlier attempt of this very call that was
    /// interrupted before it answered (set by the journal on `dsh workflow
    /// resume`): a provider that can continue it does, instead of starting
    /// afresh. Not part of the call's key.
    pub resume: Option<Session>,
    /// The most this call may spend, in US dollars: what is left of the
    /// run's cost budget when it starts (`--budget-usd`), for providers
    /// that can cap their own spend. Not part of the call's key.
    pub cost_cap_usd: Option<f64>,
}

/// Where an agent type is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentTypeOrigin {
    /// One of the types Claude Code has built in (`general-purpose`,
    /// `Explore`, `Plan`, …), not redefined by the project.
    BuiltIn,
    /// An agent file (`.claude/agents/NAME.md`) or `[agent_types.NAME]`.
    Defined,
}

/// An agent type's settings for the agent loop (`[agent_types.NAME]`
/// `max_turns`, `network`, `bash_timeout`); `None` keeps the provider's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopLimits {
    /// Most model turns.
    pub max_turns: Option<u32>,
    /// Whether `Bash` may use the network.
    pub network: Option<bool>,
    /// Longest a `Bash` command runs.
    pub bash_timeout: Option<std::time::Duration>,
}

impl AgentRequest {
    /// The system prompt a provider with no system prompt of its own puts
    /// in front of the prompt: a defined type's (its instructions must
    /// reach the child), never a built-in type's. Those are dsh's words for
    /// a type Claude Code defines, and Claude Code sends the prompt as the
    /// script wrote it (issue 33 §3): they go only where a system prompt
    /// goes (an API's system message, `{systemPrompt}`, a CLI's flag).
    pub fn system_prompt_to_prepend(&self) -> Option<&str> {
        if self.agent_type_origin == Some(AgentTypeOrigin::BuiltIn) {
            return None;
        }
        self.system_prompt
            .as_deref()
            .filter(|s| !s.trim().is_empty())
    }

    /// A request for call `seq` with `prompt`, labelled `label`, and no
    /// options (set the public fields for more). For embedders' tests and
    /// tools that drive a provider directly.
    pub fn new(seq: u64, prompt: impl Into<String>, label: impl Into<String>) -> Self {
        AgentRequest {
            seq,
            prompt: prompt.into(),
            label: label.into(),
            phase: None,
            workflow: None,
            schema: None,
            options: AgentOptions::default(),
            system_prompt: None,
            tools: None,
            disallowed_tools: Vec::new(),
            loop_limits: LoopLimits::default(),
            agent_type_origin: None,
            resume: None,
            cost_cap_usd: None,
        }
    }
}

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

/// An infrastructure fault while delivering a child's result: `agent()`
/// rejects with `AGENT_RESULT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResultFault(pub String);

/// A child's progress: a cheap clonable handle a provider creates for a
/// child ([`Progress::new`]) and calls [`Progress::report`] on whenever the
/// child shows signs of life (output, streamed bytes). The host reads it
/// through [`Subagent::progress`] to enforce the call's stall timeout
/// (`stallMs`, `stall` in `dsh.toml`): no report for that long and the
/// call fails with reason `stalled: …`. A child's answer always counts as
/// progress; a provider that never reports is judged by its answer alone.
///
/// A provider that can tell *what* its child is doing (a model turn, a tool
/// call, tokens so far) also hands that to [`Progress::activity`]; the host
/// turns each into a `workflow/agent-activity` event before the child's
/// `agent-end`.
#[derive(Clone)]
pub struct Progress(Arc<ProgressInner>);

struct ProgressInner {
    origin: tokio::time::Instant,
    /// Microseconds after `origin` of the last report.
    last_us: std::sync::atomic::AtomicU64,
    /// Activities not yet taken by the host, oldest first, at most
    /// [`MAX_PENDING_ACTIVITIES`].
    pending: std::sync::Mutex<std::collections::VecDeque<Activity>>,
    /// Wakes the host's [`Progress::next_activities`].
    arrived: tokio::sync::Notify,
    /// The child's resumable session, once its provider knows it.
    session: std::sync::Mutex<Option<Session>>,
    /// Wakes [`Progress::session_known`].
    session_set: tokio::sync::Notify,
}

/// A conversation an agent CLI keeps on disk and can continue (Claude
/// Code's session, Codex's thread): which provider started it, and the
/// CLI's id for it. The journal records it as soon as it is known, so a
/// call interrupted mid-flight continues it on `dsh workflow resume`
/// ([`AgentRequest::resume`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The provider's name (`[providers.NAME]`): only that provider is
    /// asked to continue it.
    pub provider: String,
    /// The CLI's own id of the session.
    pub id: String,
}

/// Most activities a child's handle holds before the host takes them; past
/// it the oldest are dropped (a slow host never grows a child's queue).
const MAX_PENDING_ACTIVITIES: usize = 64;

/// What a child is doing, as its provider tells it; shown as a
/// `workflow/agent-activity` event.
#[derive(Debug, Clone, PartialEq)]
// Exhaustive on purpose: the engine (another crate) gives every variant
// its meaning, and a new one must be handled there, not fall through.
pub enum Activity {
    /// The child's model turn number `turn` (1, 2, …) began.
    Turn {
        /// The turn's number.
        turn: u32,
    },
    /// Tokens so far, summed over the child's turns (while a turn streams,
    /// `output` counts the streamed pieces).
    Tokens {
        /// The running total.
        usage: Usage,
    },
    /// The child called a tool.
    ToolCall {
        /// The tool's name (`Read`, `Bash`, …).
        tool: String,
        /// What it was called on (a path, a pattern, a command), cut short.
        detail: String,
    },
    /// A tool call ended.
    ToolEnd {
        /// The tool's name.
        tool: String,
        /// `ok`, `error`, `denied` (it tried to leave its workspace or
        /// was not allowed), `timeout`, `sandbox-unavailable`.
        status: String,
        /// How long it took.
        ms: u64,
        /// Why it did not succeed, cut short; `None` when it did.
        message: Option<String>,
    },
    /// A request of the child is being sent again.
    Retry {
        /// The attempt about to start (2, 3, …).
        attempt: u32,
        /// Why the previous attempt failed.
        reason: String,
        /// Part of the previous attempt's answer had already streamed in
        /// (and is discarded).
        partial: bool,
    },
    /// The request waits for an earlier one's answer to start, so that
    /// the prompt prefix they share is served from the provider's cache.
    Held {
        /// The bytes of the request body the two share.
        shared_bytes: u64,
    },
    /// The hold ended (the earlier answer started, failed, or the
    /// provider's `prefix_hold` passed); the request goes in line.
    Released {
        /// How long it was held.
        waited_ms: u64,
    },
    /// The provider's adaptive concurrency changed: requests it lets be in
    /// flight at once, for every call of the run.
    Concurrency {
        /// The new limit.
        limit: u32,
        /// Why: the 429/529 that lowered it, or `answers arriving`.
        reason: String,
    },
}

impl Progress {
    /// A handle whose last progress is now.
    pub fn new() -> Self {
        Progress(Arc::new(ProgressInner {
            origin: tokio::time::Instant::now(),
            last_us: std::sync::atomic::AtomicU64::new(0),
            pending: std::sync::Mutex::new(std::collections::VecDeque::new()),
            arrived: tokio::sync::Notify::new(),
            session: std::sync::Mutex::new(None),
            session_set: tokio::sync::Notify::new(),
        }))
    }

    /// The child's resumable session is `session` (a later call replaces
    /// it: a CLI that forks a session on resume names the new one).
    pub fn set_session(&self, session: Session) {
        let mut s = self.0.session.lock().unwrap_or_else(|e| e.into_inner());
        if s.as_ref() != Some(&session) {
            *s = Some(session);
            self.0.session_set.notify_waiters();
        }
    }

    /// The child's resumable session, if its provider named one.
    pub fn session(&self) -> Option<Session> {
        self.0
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until the session differs from `known` (none known: until
    /// there is one), and returns it.
    pub async fn session_changed(&self, known: Option<&Session>) -> Session {
        loop {
            let notified = self.0.session_set.notified();
            tokio::pin!(notified);
            // Registered before looking, so a change in between wakes us.
            notified.as_mut().enable();
            if let Some(s) = self.session()
                && Some(&s) != known
            {
                return s;
            }
            notified.await;
        }
    }

    /// The child is doing `what` (which is progress too). Never blocks; a
    /// [`Activity::Tokens`] replaces a pending one instead of queueing.
    pub fn activity(&self, what: Activity) {
        self.report();
        {
            let mut q = self.0.pending.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(what, Activity::Tokens { .. })
                && let Some(last) = q.back_mut()
                && matches!(last, Activity::Tokens { .. })
            {
                *last = what;
            } else {
                if q.len() >= MAX_PENDING_ACTIVITIES {
                    q.pop_front();
                }
                q.push_back(what);
            }
        }
        self.0.arrived.notify_one();
    }

    /// Takes every pending activity now, oldest first (none waiting: empty).
    pub fn take_activities(&self) -> Vec<Activity> {
        self.0
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Waits for activities and takes every pending one, oldest first.
    pub async fn next_activities(&self) -> Vec<Activity> {
        loop {
            let taken: Vec<Activity> = self
                .0
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
                .collect();
            if !taken.is_empty() {
                return taken;
            }
            self.0.arrived.notified().await;
        }
    }

    /// The child made progress now. Cheap (one atomic store); call it as
    /// often as you like.
    pub fn report(&self) {
        let us = u64::try_from(self.0.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.0
            .last_us
            .fetch_max(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// When progress was last reported (the handle's creation when never).
    pub fn last(&self) -> tokio::time::Instant {
        let us = self.0.last_us.load(std::sync::atomic::Ordering::Relaxed);
        self.0.origin + std::time::Duration::from_micros(us)
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("since_last", &self.last().elapsed())
            .finish()
    }
}

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
/// (`agent-start`): a stall timeout (no [`Progress`] for that long) and a
/// timeout (no answer for that long). When one fires the host abandons the
/// child ([`Subagent::abandon`]) and the call fails — `agent()` resolves
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

#[cfg(test)]
mod tests {
    use super::*;
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
