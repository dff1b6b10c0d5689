//! The messages, who sends each, when, and what the receiver does.
//!
//! Sequence of one run (see docs/protocol.md for the diagrams):
//!
//! ```text
//! worker                              host
//!   Hello{version, pid}  ──────────▶   check version (and pid)
//!                        ◀──────────   Init{script, args, limits, …}
//!   build engine, compile, sandbox
//!   Ready{sandbox}       ──────────▶
//!                        ◀──────────   Go            (or Cancel: body never runs)
//!   Phase / Log / ChildStart …  ───▶   events; start children via the provider
//!                        ◀──────────   ChildStarted / ChildStartError
//!                        ◀──────────   ChildSettled / ChildFailed
//!                        ◀──────────   Cancel{reason}   (any time)
//!   End{result}          ──────────▶   settle, reap, clean up
//! ```

use serde::{Deserialize, Serialize};

use crate::ErrorCode;

/// Correlates a worker's [`WorkerMsg::ChildStart`] with the host's replies.
/// It is also the call's `seq` in `workflow/agent-*` events: the worker
/// numbers calls 1, 2, 3 … in the order they passed validation.
pub type CallId = u64;

/// Worker → host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkerMsg {
    /// First frame after connecting. The host checks `protocol_version`
    /// against [`crate::PROTOCOL_VERSION`] and `pid` against the process it
    /// spawned; a mismatch ends the run with `WORKER_EXITED`.
    Hello { protocol_version: u32, pid: u32 },
    /// The engine is built and the body compiled; the worker waits for
    /// [`HostMsg::Go`] or [`HostMsg::Cancel`]. Sent exactly once, after
    /// [`HostMsg::Init`].
    Ready { sandbox: SandboxReport },
    /// The script called `phase(title)`. The host emits `workflow/phase`.
    Phase { title: String },
    /// The script called `log()` or `console.*`. The host emits `workflow/log`.
    Log { message: String },
    /// An `agent()` call got a concurrency slot: start a child. The host
    /// answers with exactly one of `ChildStarted` / `ChildStartError`, then
    /// (after `ChildStarted`) exactly one of `ChildSettled` / `ChildFailed`.
    ChildStart {
        call_id: CallId,
        request: ChildRequest,
    },
    /// The body settled (returned, threw, was cancelled or interrupted).
    /// Sent exactly once; the worker exits right after.
    End { result: EndResult },
}

/// Host → worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HostMsg {
    /// Everything the worker needs for the run. Sent once, after `Hello`.
    Init(Box<Init>),
    /// Run the body. Sent once, after `Ready`, unless the run was cancelled.
    Go,
    /// Cancel the run: every hook throws `CANCELLED` from now on, waiting
    /// `agent()` calls reject, a script still spinning is interrupted. May
    /// arrive before `Go` (the body then never runs) and more than once (the
    /// first wins).
    Cancel { reason: CancelReason },
    /// The provider started the child for `call_id`.
    ChildStarted { call_id: CallId, child_id: String },
    /// The provider refused to start the child: `agent()` rejects with `code`
    /// (normally `AGENT_START`).
    ChildStartError {
        call_id: CallId,
        code: ErrorCode,
        message: String,
    },
    /// The child settled on its own terms.
    ChildSettled {
        call_id: CallId,
        outcome: ChildOutcome,
        usage: Option<Usage>,
    },
    /// Infrastructure fault delivering the child's result: `agent()` rejects
    /// with `AGENT_RESULT`.
    ChildFailed { call_id: CallId, message: String },
}

/// The run's input and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Init {
    pub run_id: String,
    /// The name used in messages and stack traces (the script path as given).
    pub script_name: String,
    /// Prepared JavaScript: evaluating it yields the async body function.
    pub script_js: String,
    /// The run's meta as JSON text.
    pub meta_json: String,
    pub args: Args,
    pub limits: Limits,
    pub sandbox: SandboxPolicy,
}

/// The script's `args` global.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Args {
    /// `args` is `undefined`.
    None,
    /// `args` is this JSON value (text, parsed in the engine).
    Json(String),
    /// `args` is this string.
    Text(String),
}

/// Limits the worker enforces (contract §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_concurrent_agents: u32,
    pub max_total_agents: u32,
    pub max_items_per_call: u32,
    pub sync_timeout_ms: u64,
    /// Output-token budget (`budget.total`), `None` for unlimited.
    pub budget_tokens: Option<u64>,
    pub memory_bytes: u64,
    pub compute_ms: Option<u64>,
    pub log_bytes: u64,
    /// After a cancel, a synchronous slice still running after this long is
    /// interrupted in-process (the host's grace kill stays the backstop).
    pub cancel_interrupt_ms: u64,
}

/// Which sandbox the worker must apply (issue: sandbox and budgets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxPolicy {
    /// Full confinement or the run fails with `SANDBOX_UNAVAILABLE`.
    Strict,
    /// Every layer the kernel offers; the report names what is missing.
    BestEffort,
    /// No sandbox.
    Off,
}

impl SandboxPolicy {
    /// Every policy, in the order users see them listed.
    pub const ALL: [SandboxPolicy; 3] = [
        SandboxPolicy::Strict,
        SandboxPolicy::BestEffort,
        SandboxPolicy::Off,
    ];

    /// The policy's name as users spell it (`--sandbox`, `dsh.toml`):
    /// `strict`, `best-effort` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxPolicy::Strict => "strict",
            SandboxPolicy::BestEffort => "best-effort",
            SandboxPolicy::Off => "off",
        }
    }
}

impl std::fmt::Display for SandboxPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`SandboxPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sandbox policy {name:?}: expected one of {}",
    SandboxPolicy::ALL.map(SandboxPolicy::as_str).join(", ")
)]
pub struct UnknownSandboxPolicy {
    /// The name as given.
    pub name: String,
}

impl std::str::FromStr for SandboxPolicy {
    type Err = UnknownSandboxPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxPolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownSandboxPolicy { name: s.into() })
    }
}

/// The sandbox the worker actually reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    pub level: SandboxLevel,
    pub landlock_abi: Option<u32>,
    /// Names of the rules that were enforced (docs/sandbox.md lists them).
    pub enforced: Vec<String>,
    /// Rules that are part of `Full` but were not enforced, each with why.
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxLevel {
    Full,
    Partial,
    None,
}

/// Why a run was cancelled. Decides the error code the run settles with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelReason {
    /// A library `cancel()`, SIGINT or SIGTERM. Settles `CANCELLED`.
    Requested(String),
    /// The wall-clock budget ran out. Settles `TIMEOUT`.
    WallTimeout { limit_ms: u64 },
}

/// One `agent()` call as the host's provider sees it. Defaults (label,
/// phase) are already resolved by the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildRequest {
    pub prompt: String,
    pub label: String,
    pub phase: Option<String>,
    /// The call's JSON Schema as JSON text, already checked against the subset.
    pub schema_json: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub effort: Option<String>,
    pub agent_type: Option<String>,
    pub isolation: Option<String>,
}

/// How a child settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChildOutcome {
    /// Final text (a call without schema).
    Text(String),
    /// Structured value as JSON text, validated by the host against the call's schema.
    Structured(String),
    /// The child ended unsuccessfully for its own reasons: `agent()` is `null`.
    Failed(String),
    /// The child was cancelled: `agent()` rejects with `CANCELLED` when the run
    /// is cancelled, else resolves `null`.
    Cancelled,
}

/// Token usage a child reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

/// How the body settled, as the worker saw it. Every `EndOutcome` is a
/// legal end: a completed run carries a value, a failed or cancelled one an
/// error, and nothing else can be expressed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndResult {
    pub outcome: EndOutcome,
    pub agents_started: u64,
    pub log_bytes_dropped: u64,
}

/// The three ways a body can settle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EndOutcome {
    /// The body returned; its value as JSON text.
    Completed { value_json: String },
    /// The body threw, was interrupted, or the worker could not run it.
    Failed { error: WireError },
    /// The run was cancelled (`CANCELLED`, or `TIMEOUT` for the wall budget).
    Cancelled { error: WireError },
}

impl EndOutcome {
    /// The body returned `value_json`.
    pub fn completed(value_json: impl Into<String>) -> Self {
        EndOutcome::Completed {
            value_json: value_json.into(),
        }
    }

    /// The run failed with `code`.
    pub fn failed(code: ErrorCode, message: impl Into<String>) -> Self {
        EndOutcome::Failed {
            error: WireError::new(code, message),
        }
    }

    /// The run was cancelled with `code`.
    pub fn cancelled(code: ErrorCode, message: impl Into<String>) -> Self {
        EndOutcome::Cancelled {
            error: WireError::new(code, message),
        }
    }

    /// The stop reason this outcome reports.
    pub fn stop(&self) -> StopReason {
        match self {
            EndOutcome::Completed { .. } => StopReason::Completed,
            EndOutcome::Failed { .. } => StopReason::Error,
            EndOutcome::Cancelled { .. } => StopReason::Cancelled,
        }
    }

    /// The error of a failed or cancelled run.
    pub fn error(&self) -> Option<&WireError> {
        match self {
            EndOutcome::Completed { .. } => None,
            EndOutcome::Failed { error } | EndOutcome::Cancelled { error } => Some(error),
        }
    }
}

impl EndResult {
    /// An end with `outcome`, no log bytes dropped (yet).
    pub fn new(outcome: EndOutcome, agents_started: u64) -> Self {
        EndResult {
            outcome,
            agents_started,
            log_bytes_dropped: 0,
        }
    }

    /// The stop reason the outcome reports.
    pub fn stop(&self) -> StopReason {
        self.outcome.stop()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    Completed,
    Error,
    Cancelled,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Error => "error",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// An error as it crosses the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
}

impl WireError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        WireError {
            code,
            message: message.into(),
        }
    }
}
