//! The provider stack of a run, composed in one place: `run`, `resume`
//! and `test` all get their run's provider from [`compose`].
//!
//! Outermost first — the order a call goes through:
//! 1. the journal ([`JournalLayer`]): a call with a journaled answer is
//!    replayed here and goes no further; every other call is journaled
//!    (its key is the request as prepared below it);
//! 2. the agent-type gate ([`AgentTypeLayer`]), in front of a fixture or
//!    the dry run: an unknown `agentType` is refused as with configured
//!    providers, and as in Claude Code. The router needs none: it routes
//!    by agent type itself;
//! 3. what answers: the router over the configured providers, a fixture,
//!    or the dry run.
//!
//! The cost budget (`--budget-usd`) is not here: it is a limit of the run,
//! like its time and memory, and the engine's `start()` puts it in front
//! of whatever provider the run is given, so an embedder that sets
//! `Limits::budget_usd` gets it enforced without composing anything
//! (docs/architecture.md, "The provider stack").

use std::sync::Arc;

use dsh_orchestrator::SubagentProvider;
use dsh_orchestrator::agent_types::AgentTypes;
use dsh_orchestrator::journal::JournalLayer;
use dsh_orchestrator::providers::router::{AgentTypeLayer, Router};
use dsh_seam::Stack;

/// What answers a run's calls, before the run's layers.
pub enum Answering {
    /// The configured providers.
    Router(Router),
    /// A fixture or the dry run, behind these agent types.
    Scripted(Arc<dyn SubagentProvider>, AgentTypes),
    /// Nothing (a resumed run that had no provider): the journaled answers
    /// replay, every other call is refused.
    Nothing,
}

/// The run's provider: `answering` behind the run's layers (see the
/// module docs); `None` only when nothing answers and there is no journal.
pub fn compose(
    answering: Answering,
    journal: Option<JournalLayer>,
) -> Option<Arc<dyn SubagentProvider>> {
    let (answering, gate): (Arc<dyn SubagentProvider>, _) = match answering {
        Answering::Router(router) => (Arc::new(router), None),
        Answering::Scripted(provider, types) => (provider, Some(AgentTypeLayer::new(&types))),
        Answering::Nothing => return journal.map(|j| j.alone()),
    };
    Some(
        Stack::new()
            .option_layer(journal)
            .option_layer(gate)
            .provider(answering),
    )
}
