//! `dsh-seam`: the subagent seam of dsh workflow (contract §13) — what an
//! application implements to answer a script's `agent()` calls, and what
//! every built-in provider implements too.
//!
//! A [`SubagentProvider`] starts a [`Subagent`] for an [`AgentRequest`];
//! the child reports [`Progress`], settles with a [`ChildOutcome`], and the
//! host's verdict on it is one [`CallOutcome`]. [`AnsweredChild`] is the
//! child whose answer is known when it starts (a fixture, a dry run, a
//! journal's replay). A [`Layer`] goes in front of a provider and a
//! [`Stack`] composes layers in one expression. [`units`] reads durations and sizes as `dsh.toml`
//! spells them, for providers that read their own table.
//!
//! It is not the engine (that is `dsh-engine`, which runs the script and
//! calls a provider) and holds no provider and no HTTP client (those are in
//! `dsh-providers`): a crate that implements a provider depends on this one
//! alone.

#![warn(missing_docs)]

pub mod answered;
pub mod layer;
pub mod outcome;
pub mod provider;
pub mod units;

pub use answered::AnsweredChild;
pub use layer::{ChildHook, HookedChild, Layer, Stack};
pub use outcome::{AgentOutcomeKind, CallOutcome};
pub use provider::{
    Activity, AgentOptions, AgentRequest, AgentTypeOrigin, CallLimit, CallLimits, CallSlot,
    ChildOrigin, ChildOutcome, ChildResult, FailureKind, KeptWorktree, LoopLimits, Progress,
    ProviderError, ResultFault, RetryCause, Session, StartRefused, Subagent, SubagentProvider,
    Usage,
};
