//! The messages, who sends each, when, and what the receiver does.
//!
//! Sequence of one run (see docs/protocol.md for the diagrams):
//!
//! ```text
//! worker                              host
//!   Hello{version, pid}  ──────────▶   check version (and pid)
//!                        ◀──────────   Init{script, args, limits, …}
//!                        ◀──────────   Go  (same write; or Cancel: body never runs)
//!   build engine, compile, sandbox
//!   Ready{sandbox}       ──────────▶   (a Cancel in by now: body never runs)
//!   Phase / Log / ChildStart …  ───▶   events; start children via the provider
//!                        ◀──────────   ChildStarted / ChildStartError
//!                        ◀──────────   ChildSettled / ChildFailed
//!   WorkflowLoad{target} ──────────▶   find and prepare a nested workflow
//!                        ◀──────────   WorkflowLoaded / WorkflowLoadError
//!                        ◀──────────   Cancel{reason}   (any time)
//!   End{result}          ──────────▶   settle, reap, clean up
//! ```

use serde::{Deserialize, Serialize};

use crate::ErrorCode;

mod sandbox;
mod usage;

pub use sandbox::{SandboxLevel, SandboxPolicy, SandboxReport, UnknownSandboxPolicy};
pub use usage::Usage;

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
    Hello {
        /// The [`crate::PROTOCOL_VERSION`] the worker was built with.
        protocol_version: u32,
        /// The worker's process id.
        pid: u32,
    },
    /// The engine is built and the body compiled; the worker runs the body
    /// on [`HostMsg::Go`] (sent with `Init`), unless a [`HostMsg::Cancel`]
    /// has arrived too. Sent exactly once, after [`HostMsg::Init`].
    Ready {
        /// The sandbox the worker reached.
        sandbox: SandboxReport,
    },
    /// The script called `phase(title)`. The host emits `workflow/phase`.
    Phase {
        /// The phase's title as the script gave it.
        title: String,
        /// The nested workflow that called it (its name), `None` for the
        /// run's own script.
        workflow: Option<String>,
    },
    /// The script called `log()` or `console.*`. The host emits `workflow/log`.
    Log {
        /// The text, as the worker's `log_bytes` budget admitted it.
        message: String,
        /// The nested workflow that logged it (its name), `None` for the
        /// run's own script.
        workflow: Option<String>,
    },
    /// The runtime accepted something dubious the way Claude Code does (an
    /// unknown option, a lossy value) and says so. Sent once per distinct
    /// message and path. The host emits `workflow/warning`.
    Warning {
        /// What was accepted and how it was taken.
        message: String,
        /// Where: a value path (`options.bogus`, `value.items[2]`) or a
        /// file position; `None` when there is none.
        path: Option<String>,
    },
    /// An `agent()` call got a concurrency slot: start a child. The host
    /// answers with `ChildStartError`, or with exactly one of
    /// `ChildSettled` / `ChildFailed`, preceded by `ChildStarted` unless the
    /// child settled at once (a fixture's answer: the frame would tell the
    /// worker nothing).
    ChildStart {
        /// The call's number; every reply names it.
        call_id: CallId,
        /// What to start.
        request: ChildRequest,
    },
    /// The script called `workflow(target, args)`: find the nested
    /// workflow and prepare it. The host answers with exactly one of
    /// `WorkflowLoaded` / `WorkflowLoadError`; the child then runs inside
    /// this worker, its `agent()` calls ordinary `ChildStart`s.
    WorkflowLoad {
        /// The load's number (its own sequence, not an agent call's).
        call_id: CallId,
        /// What the script asked for.
        target: WorkflowTarget,
    },
    /// The body settled (returned, threw, was cancelled or interrupted).
    /// Sent exactly once; the worker exits right after.
    End {
        /// How the body settled.
        result: EndResult,
    },
    /// An `agent()` call was admitted but every concurrency slot is taken:
    /// it waits in the worker's queue (first in, first out). Its
    /// `ChildStart` follows when a slot frees — nothing follows when the run
    /// is cancelled first. The host emits `workflow/agent-queued`, so a
    /// view can count the calls that wait. Last of the enum: the frames'
    /// variant numbers of the messages before it are unchanged.
    ChildQueued {
        /// The call's number, as its `ChildStart` will carry it.
        call_id: CallId,
        /// The call's label (the default one when the script gave none).
        label: String,
        /// The call's phase, when it has one.
        phase: Option<String>,
        /// The nested workflow that made the call, by name.
        workflow: Option<String>,
    },
}

/// Host → worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HostMsg {
    /// Everything the worker needs for the run. Sent once, after `Hello`.
    Init(Box<Init>),
    /// Run the body once it is built. Sent once, in the same write as
    /// `Init`, unless the run was cancelled before `Hello`.
    Go,
    /// Cancel the run: every hook throws `CANCELLED` from now on, waiting
    /// `agent()` calls reject, a script still spinning is interrupted. May
    /// arrive in place of `Go` or before the worker has said `Ready` (the
    /// body then never runs) and more than once (the first wins).
    Cancel {
        /// Why; decides the code the run settles with.
        reason: CancelReason,
    },
    /// The provider started the child for `call_id`, and it did not settle
    /// at once.
    ChildStarted {
        /// The call this answers.
        call_id: CallId,
        /// The provider's id of the child.
        child_id: String,
    },
    /// The provider refused to start the child: `agent()` rejects with `code`
    /// (normally `AGENT_START`).
    ChildStartError {
        /// The call this answers.
        call_id: CallId,
        /// The code `agent()` rejects with.
        code: ErrorCode,
        /// The rejection's message.
        message: String,
    },
    /// The child settled on its own terms.
    ChildSettled {
        /// The call this answers.
        call_id: CallId,
        /// How the child ended.
        outcome: ChildOutcome,
        /// The tokens the child reported, if it did.
        usage: Option<Usage>,
    },
    /// Infrastructure fault delivering the child's result: `agent()` rejects
    /// with `AGENT_RESULT`.
    ChildFailed {
        /// The call this answers.
        call_id: CallId,
        /// What went wrong.
        message: String,
    },
    /// The nested workflow of a `WorkflowLoad`, prepared.
    WorkflowLoaded {
        /// The load this answers.
        call_id: CallId,
        /// The prepared child.
        workflow: LoadedWorkflow,
    },
    /// The nested workflow could not be found or prepared: `workflow()`
    /// rejects with `code` and `message`.
    WorkflowLoadError {
        /// The load this answers.
        call_id: CallId,
        /// `INVALID_ARGUMENT` (no such workflow), `SCRIPT_PARSE` or
        /// `META_INVALID` (the child's file is broken).
        code: ErrorCode,
        /// Why, naming the child's file.
        message: String,
    },
}

/// What `workflow()` names: a saved workflow by name, or a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkflowTarget {
    /// `workflow("name")`: looked up among the saved workflows.
    Name(String),
    /// `workflow({scriptPath})`: a file, relative to the run's directory.
    ScriptPath(String),
}

/// A nested workflow, ready to compile in the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedWorkflow {
    /// Its name (its meta's `name`), as events and log lines show it.
    pub name: String,
    /// The name used in its stack traces (its file).
    pub script_name: String,
    /// JavaScript that evaluates to a function of the child's own hooks
    /// `(agent, phase, log, console, workflow, args)` returning the async
    /// body function.
    pub script_js: String,
}

/// The run's input and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Init {
    /// The run's id (as in its events).
    pub run_id: String,
    /// The name used in messages and stack traces (the script path as given).
    pub script_name: String,
    /// Prepared JavaScript: evaluating it yields the async body function.
    pub script_js: String,
    /// The run's meta as JSON text.
    pub meta_json: String,
    /// The script's `args` global.
    pub args: Args,
    /// What the worker enforces. (The sandbox policy is not here: the
    /// worker read it from the [`crate::policy_line`] before `Hello`.)
    pub limits: Limits,
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
    /// `agent()` calls running at once; later ones wait for a slot.
    pub max_concurrent_agents: u32,
    /// `agent()` calls per run (`AGENT_CAP`).
    pub max_total_agents: u32,
    /// Items in one `parallel`/`pipeline` call (`ITEM_CAP`).
    pub max_items_per_call: u32,
    /// Longest synchronous slice of script code (`TIMEOUT`).
    pub sync_timeout_ms: u64,
    /// Output-token budget (`budget.total`), `None` for unlimited.
    pub budget_tokens: Option<u64>,
    /// The script heap's limit (`MEMORY`); the sandbox's data limit is
    /// derived from it.
    pub memory_bytes: u64,
    /// The script's CPU-time budget (`TIMEOUT`), `None` for unlimited.
    pub compute_ms: Option<u64>,
    /// Log text per run; later lines are dropped.
    pub log_bytes: u64,
    /// After a cancel, a synchronous slice still running after this long is
    /// interrupted in-process (the host's grace kill stays the backstop).
    pub cancel_interrupt_ms: u64,
}

/// Why a run was cancelled. Decides the error code the run settles with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelReason {
    /// A library `cancel()`, SIGINT or SIGTERM. Settles `CANCELLED`.
    Requested(String),
    /// The wall-clock budget ran out. Settles `TIMEOUT`.
    WallTimeout {
        /// The wall-clock budget that ran out.
        limit_ms: u64,
    },
}

/// One `agent()` call as the worker sends it. Defaults (label, phase) are
/// already resolved by the worker. The prelude writes it as camelCase JSON
/// (`schema`, `options.agentType`), which is why it also has JSON names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildRequest {
    /// The prompt text.
    pub prompt: String,
    /// The call's label (the default already applied).
    pub label: String,
    /// The phase the call belongs to (the current one by default).
    pub phase: Option<String>,
    /// The call's JSON Schema as JSON text, already checked against the subset.
    #[serde(rename = "schema")]
    pub schema_json: Option<String>,
    /// The options that route and shape the call.
    pub options: AgentOptions,
    /// The nested workflow that made the call (its name), `None` for the
    /// run's own script.
    #[serde(default)]
    pub workflow: Option<String>,
}

/// The options of an `agent()` call that say who answers it and how, as
/// the script gave them (the host's router may fill in defaults).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentOptions {
    /// The `model` option.
    pub model: Option<String>,
    /// The `provider` option.
    pub provider: Option<String>,
    /// The `effort` option.
    pub effort: Option<String>,
    /// The `agentType` option.
    pub agent_type: Option<String>,
    /// The `isolation` option (`"worktree"`).
    pub isolation: Option<String>,
    /// The `stallMs` option: the call fails (reason `stalled: …`) when its
    /// provider reports no progress for this many milliseconds. The
    /// prelude sends only a positive whole number. Not part of the
    /// journal's call key: it does not change the answer.
    #[serde(default)]
    pub stall_ms: Option<u64>,
    /// The `disallowedTools` option: tools the child may not use, for
    /// providers that have tools.
    #[serde(default)]
    pub disallowed_tools: Option<Vec<String>>,
    /// The `sharedHeadLength` option: the prompt's first this many
    /// characters (UTF-16 code units, as JavaScript counts) are shared with
    /// other calls, a hint for the provider's prompt cache. Not part of the
    /// journal's call key.
    #[serde(default)]
    pub shared_head_length: Option<u64>,
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

/// How the body settled, as the worker saw it. Every `EndOutcome` is a
/// legal end: a completed run carries a value, a failed or cancelled one an
/// error, and nothing else can be expressed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndResult {
    /// Completed, failed or cancelled, with what each carries.
    pub outcome: EndOutcome,
    /// `agent()` calls admitted during the run.
    pub agents_started: u64,
    /// Log bytes dropped under the `log_bytes` budget.
    pub log_bytes_dropped: u64,
    /// The sandbox the worker reached, sent here only when it ends before
    /// [`WorkerMsg::Ready`] (a `strict` refusal): the result then still
    /// says what was and was not enforced. Otherwise `None`; the host has
    /// the report from `Ready`.
    pub sandbox: Option<SandboxReport>,
}

/// The three ways a body can settle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EndOutcome {
    /// The body returned; its value as JSON text.
    Completed {
        /// The return value as JSON text.
        value_json: String,
    },
    /// The body threw, was interrupted, or the worker could not run it.
    Failed {
        /// Why.
        error: WireError,
    },
    /// The run was cancelled (`CANCELLED`, or `TIMEOUT` for the wall budget).
    Cancelled {
        /// The cancel's code and message.
        error: WireError,
    },
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
            sandbox: None,
        }
    }

    /// The stop reason the outcome reports.
    pub fn stop(&self) -> StopReason {
        self.outcome.stop()
    }
}

/// How a run stopped, as its result and `workflow/end` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The body returned a value.
    Completed,
    /// The run failed.
    Error,
    /// The run was cancelled.
    Cancelled,
}

impl StopReason {
    /// The reason as users see it: `completed`, `error` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Error => "error",
            StopReason::Cancelled => "cancelled",
        }
    }

    /// The reason [`StopReason::as_str`] spells `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Completed, Self::Error, Self::Cancelled]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// An error as it crosses the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// The error's code.
    pub code: ErrorCode,
    /// The message for users.
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
