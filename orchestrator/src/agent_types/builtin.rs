//! The agent types Claude Code has built in (`general-purpose`, `Explore`,
//! `Plan`, …), each a system prompt in dsh's own words.

use std::collections::BTreeMap;

use crate::config::AgentTypeRoute;

/// The `defined_at` of the built-in agent types.
pub const BUILT_IN: &str = "built-in";

/// The tool set of the read-only built-ins (`Explore`, `Plan`): reading
/// and searching, no writing and no shell.
pub const READ_ONLY_TOOLS: [&str; 3] = ["Read", "Grep", "Glob"];

/// The agent types Claude Code has built in, so scripts that name them run
/// here too: each a system prompt in dsh's own words, routed to the run's
/// default provider. `Explore` and `Plan` are read-only: by instruction,
/// and by their tool set ([`READ_ONLY_TOOLS`]) for providers that have
/// tools. A file in `.claude/agents` or `[agent_types.NAME]` in dsh.toml
/// replaces one (see [`crate::agent_types`]).
pub fn builtin_agent_types() -> BTreeMap<String, AgentTypeRoute> {
    let general = "You are a capable general-purpose agent working on one task of a larger \
                   workflow. Do the whole task and answer with its result, stated plainly.";
    let explore = "You are an exploration agent. Investigate the code base or material the \
                   task names to answer its question: read and search, but change nothing. \
                   Answer with what you found, citing file paths and lines.";
    let plan = "You are a planning agent. Study the task and the code it concerns, change \
                nothing, and answer with a concrete, ordered plan: the steps, the files each \
                touches, and the risks.";
    let statusline = "You are an agent that sets up a terminal status line. Do what the task \
                      asks and answer with what you configured.";
    let read_only = || Some(READ_ONLY_TOOLS.iter().map(|t| t.to_string()).collect());
    [
        (
            "general-purpose",
            general,
            "General-purpose agent for multi-step tasks",
            None,
        ),
        (
            "claude",
            general,
            "General-purpose agent (Claude Code's `claude` type)",
            None,
        ),
        (
            "Explore",
            explore,
            "Read-only agent that searches and reads code",
            read_only(),
        ),
        (
            "Plan",
            plan,
            "Read-only agent that plans an implementation",
            read_only(),
        ),
        (
            "statusline-setup",
            statusline,
            "Sets up a terminal status line",
            None,
        ),
    ]
    .into_iter()
    .map(|(name, prompt, description, tools)| {
        (
            name.to_string(),
            AgentTypeRoute {
                system_prompt: Some(prompt.to_string()),
                description: Some(description.to_string()),
                tools,
                defined_at: Some(BUILT_IN.into()),
                ..AgentTypeRoute::default()
            },
        )
    })
    .collect()
}
