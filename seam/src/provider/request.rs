//! One `agent()` call as a provider sees it: [`AgentRequest`], with where
//! its agent type comes from and the agent type's bounds on the loop.

use dsh_protocol::AgentOptions;
use serde_json::Value;

use super::Session;

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
    /// Which call of its run this is, the same in every attempt of the
    /// run (set by the journal): a provider that hands calls to other
    /// processes (the store's agent pools) names the call by it, so the
    /// attempt that continues a run finds the call the last one started
    /// instead of starting it twice. `None` without a journal. Not part
    /// of the call's key.
    pub slot: Option<CallSlot>,
    /// The W3C `traceparent` of the span this call is traced as, when the
    /// run is traced (OpenTelemetry): a provider that starts a program
    /// which traces itself passes it on (agent CLIs read `TRACEPARENT`),
    /// so the program's spans nest under the call's. Not part of the
    /// call's key.
    pub trace_parent: Option<String>,
}

/// A call's place in its run, stable across attempts: the `n`-th call
/// (from 0) with content key `key` in call order. The journal's replay
/// rule is the same pair: the n-th call with a key gets the n-th answer
/// with that key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallSlot {
    /// The call's content key (a hash of what changes its answer).
    pub key: String,
    /// How many calls with the same key came before it in the attempt.
    pub n: u32,
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
            slot: None,
            trace_parent: None,
        }
    }
}
