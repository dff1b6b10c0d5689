//! The router: the provider of a run that has a configuration. Each call
//! goes to the provider its `provider` option names, else the one its
//! `agentType` is routed to (`[agent_types.NAME]`), else the run's default.
//! An agent type also supplies a model and effort (when the call gives
//! none) and a system prompt.
//!
//! Providers are built on first use, once: building one reads its API key
//! or finds its program, and a run that never calls a provider must not
//! pay for it (or fail because of it). A provider that cannot be built
//! refuses its calls with `AGENT_START` saying why.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::agent_types::{AgentFileError, AgentTypes};
use crate::config::{AgentTypeRoute, Config, ProviderEntry};
use crate::provider::{
    AgentRequest, AgentTypeOrigin, CallLimit, CallLimits, StartRefused, Subagent, SubagentProvider,
};
use crate::providers::SetupError;
use dsh_seam::Layer;

struct Slot {
    entry: ProviderEntry,
    built: OnceLock<Result<Arc<dyn SubagentProvider>, SetupError>>,
}

impl Slot {
    fn get(&self) -> Result<Arc<dyn SubagentProvider>, SetupError> {
        self.built.get_or_init(|| build(&self.entry)).clone()
    }
}

/// Builds the provider of one entry (its kind knows how).
pub fn build(entry: &ProviderEntry) -> Result<Arc<dyn SubagentProvider>, SetupError> {
    entry.kind.build(&entry.name, &entry.base_dir)
}

/// Whether an entry can be used, without calling it: `Ok(detail)` or
/// why not (`dsh workflow providers`).
pub fn usable(entry: &ProviderEntry) -> Result<String, SetupError> {
    entry.kind.usable(&entry.base_dir)
}

pub use crate::agent_types::builtin::{BUILT_IN, READ_ONLY_TOOLS, builtin_agent_types};

/// Routes each call to a configured provider.
pub struct Router {
    default: Option<String>,
    slots: BTreeMap<String, Slot>,
    /// Each type's route, or why it cannot be used (a broken agent file).
    agent_types: TypeTable,
    /// With no default: the providers whose API keys are set, when more
    /// than one is (see [`Router::with_keys_set`]).
    keyed: Vec<(String, String)>,
}

/// `DEEPSEEK_API_KEY for deepseek, OPENAI_API_KEY for openai`.
pub fn keyed_list(keyed: &[(String, String)]) -> String {
    keyed
        .iter()
        .map(|(name, var)| format!("{var} for {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Router {
    /// A router over `config`'s providers with `default` as the default
    /// provider (the `--provider` flag, else `workflow.provider`).
    pub fn new(config: &Config, default: Option<String>) -> Router {
        Router {
            default: default.or_else(|| config.workflow.provider.clone()),
            slots: config
                .providers
                .iter()
                .map(|(name, entry)| {
                    (
                        name.clone(),
                        Slot {
                            entry: entry.clone(),
                            built: OnceLock::new(),
                        },
                    )
                })
                .collect(),
            agent_types: BTreeMap::new(),
            keyed: Vec::new(),
        }
        // Claude Code's built-in types, overridden by dsh.toml's
        // [agent_types.NAME] of the same name; no agent files.
        .with_agent_types(&AgentTypes::from_config(config))
    }

    /// Uses `types` (built-ins, agent files, dsh.toml; see
    /// [`AgentTypes::resolve`]) as the run's agent types.
    pub fn with_agent_types(mut self, types: &AgentTypes) -> Router {
        self.agent_types = type_table(types);
        self
    }

    /// The providers whose API keys are set
    /// ([`Config::providers_with_keys`]), for a router without a default:
    /// the host picks the one when there is one, and when there are several
    /// a call without a provider says which keys compete and how to choose.
    pub fn with_keys_set(mut self, keyed: Vec<(String, String)>) -> Router {
        self.keyed = keyed;
        self
    }

    /// Builds the default provider now, so a missing key or program is an
    /// error before the run starts rather than at its first call.
    pub fn check_default(&self) -> Result<(), SetupError> {
        match &self.default {
            Some(name) => self.provider(name).map(|_| ()),
            None => Ok(()),
        }
    }

    fn known(&self) -> String {
        self.slots.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Answers the calls routed to provider `name` with `provider` instead
    /// of building `name`'s own (its `stall` still applies): how a run's
    /// calls for a pool go to the store's agent hosts
    /// ([`Config::store_pools`]).
    pub fn with_provider(
        mut self,
        name: &str,
        provider: Arc<dyn SubagentProvider>,
    ) -> Result<Router, SetupError> {
        let known = self.slots.keys().cloned().collect();
        let slot = self
            .slots
            .get_mut(name)
            .ok_or_else(|| SetupError::UnknownProvider {
                name: name.to_string(),
                known,
            })?;
        slot.built = OnceLock::from(Ok(provider));
        Ok(self)
    }

    /// Provider `name` itself, built on first use: what an agent host
    /// answers a pool's calls with (the calls come routed and prepared).
    pub fn provider(&self, name: &str) -> Result<Arc<dyn SubagentProvider>, SetupError> {
        let slot = self
            .slots
            .get(name)
            .ok_or_else(|| SetupError::UnknownProvider {
                name: name.to_string(),
                known: self.slots.keys().cloned().collect(),
            })?;
        slot.get().map_err(|e| SetupError::Unusable {
            name: name.to_string(),
            defined_at: slot.entry.defined_at.clone(),
            source: Box::new(e),
        })
    }
}

/// The agent types of a run: each type's route, or why it cannot be used.
type TypeTable = BTreeMap<String, Result<AgentTypeRoute, AgentFileError>>;

fn type_table(types: &AgentTypes) -> TypeTable {
    types
        .types
        .iter()
        .map(|(name, def)| (name.clone(), def.route.clone()))
        .collect()
}

/// Fills in what the call's agent type adds: its model and effort (when
/// the call gives none), system prompt and tools. Idempotent.
fn apply_agent_type(types: &TypeTable, request: &mut AgentRequest) {
    if let Some(Ok(r)) = request
        .options
        .agent_type
        .as_ref()
        .and_then(|t| types.get(t))
    {
        if request.options.model.is_none() {
            request.options.model = r.model.clone();
        }
        if request.options.effort.is_none() {
            request.options.effort = r.effort.clone();
        }
        if request.system_prompt.is_none() {
            request.system_prompt = r.system_prompt.clone();
        }
        if request.tools.is_none() {
            request.tools = r.tools.clone();
        }
        request.agent_type_origin = Some(if r.defined_at.as_deref() == Some(BUILT_IN) {
            AgentTypeOrigin::BuiltIn
        } else {
            AgentTypeOrigin::Defined
        });
        let l = &mut request.loop_limits;
        l.max_turns = l.max_turns.or(r.max_turns);
        l.network = l.network.or(r.network);
        l.bash_timeout = l.bash_timeout.or(r.bash_timeout);
        // Both the call's and the type's exclusions apply (idempotent).
        for t in &r.disallowed_tools {
            if !request.disallowed_tools.contains(t) {
                request.disallowed_tools.push(t.clone());
            }
        }
    }
}

/// The call's `stallMs`, else its agent type's `stall`, else
/// `provider_stall` (its provider's `stall`); the agent type's `timeout`.
fn limits_of(
    types: &TypeTable,
    request: &AgentRequest,
    provider_stall: Option<CallLimit>,
) -> CallLimits {
    let route = request
        .options
        .agent_type
        .as_ref()
        .and_then(|t| types.get(t).and_then(|r| r.as_ref().ok()).map(|r| (t, r)));
    let own = CallLimits::of_call(request);
    let stall = own
        .stall
        .or_else(|| {
            route.and_then(|(t, r)| {
                r.stall
                    .map(|d| CallLimit::new(d, format!("stall of [agent_types.{t}]")))
            })
        })
        .or(provider_stall);
    let timeout = route.and_then(|(t, r)| {
        r.timeout
            .map(|d| CallLimit::new(d, format!("timeout of [agent_types.{t}]")))
    });
    CallLimits { stall, timeout }
}

/// The route of the call's agent type (`None` without one), or the
/// refusal: contract §3, an unknown agent type is `AGENT_START` listing
/// the known ones. A type only meant to reach a command provider's
/// `{agentType}` is declared with an empty `[agent_types.NAME]` table.
fn agent_type_route(
    types: &TypeTable,
    request: &AgentRequest,
) -> Result<Option<AgentTypeRoute>, StartRefused> {
    let Some(t) = &request.options.agent_type else {
        return Ok(None);
    };
    match types.get(t) {
        Some(Ok(route)) => Ok(Some(route.clone())),
        Some(Err(problem)) => Err(StartRefused::agent_start(format!(
            "agent(): agentType {t:?} for call #{} (label {:?}) cannot be used: {problem}",
            request.seq, request.label
        ))),
        None => {
            let known: Vec<&str> = types.keys().map(String::as_str).collect();
            Err(StartRefused::agent_start(format!(
                "agent(): unknown agentType {t:?} for call #{} (label {:?}); known agent types: \
                 {} (define it as [agent_types.{t}] in dsh.toml, or in .claude/agents/{t}.md)",
                request.seq,
                request.label,
                if known.is_empty() {
                    "none configured".to_string()
                } else {
                    known.join(", ")
                }
            )))
        }
    }
}

/// The agent types in front of one provider that knows none of them (a
/// fixture, the dry run): unknown types are refused as the router refuses
/// them — as Claude Code refuses them — and known ones fill in their
/// model, system prompt and tools, so fixtures can match on them.
pub struct AgentTypeGate {
    inner: Arc<dyn SubagentProvider>,
    agent_types: TypeTable,
}

impl AgentTypeGate {
    /// `inner` behind the agent types `types`.
    pub fn new(inner: Arc<dyn SubagentProvider>, types: &AgentTypes) -> Self {
        AgentTypeGate {
            inner,
            agent_types: type_table(types),
        }
    }
}

/// The [`Layer`] that puts the run's agent types in front of a provider
/// that knows none of them ([`AgentTypeGate`]).
pub struct AgentTypeLayer {
    agent_types: TypeTable,
}

impl AgentTypeLayer {
    /// The agent types `types`.
    pub fn new(types: &AgentTypes) -> Self {
        AgentTypeLayer {
            agent_types: type_table(types),
        }
    }
}

impl Layer for AgentTypeLayer {
    fn layer(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider> {
        Arc::new(AgentTypeGate {
            inner,
            agent_types: self.agent_types.clone(),
        })
    }
}

#[async_trait]
impl SubagentProvider for AgentTypeGate {
    /// The call's `stallMs`, else its agent type's `stall`; the agent
    /// type's `timeout`.
    fn call_limits(&self, request: &AgentRequest) -> CallLimits {
        limits_of(&self.agent_types, request, None)
    }

    fn prepare(&self, request: &mut AgentRequest) {
        apply_agent_type(&self.agent_types, request);
        self.inner.prepare(request);
    }

    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        agent_type_route(&self.agent_types, &request)?;
        self.inner.start(request, cancel).await
    }
}

#[async_trait]
impl SubagentProvider for Router {
    /// The call's `stallMs`, else its agent type's `stall`, else its
    /// provider's `stall`; the agent type's `timeout`.
    fn call_limits(&self, request: &AgentRequest) -> CallLimits {
        let type_provider = request
            .options
            .agent_type
            .as_ref()
            .and_then(|t| self.agent_types.get(t))
            .and_then(|r| r.as_ref().ok())
            .and_then(|r| r.provider.as_ref());
        let provider_stall = request
            .options
            .provider
            .as_ref()
            .or(type_provider)
            .or(self.default.as_ref())
            .and_then(|n| self.slots.get(n))
            .and_then(|s| {
                s.entry
                    .stall
                    .map(|d| CallLimit::new(d, format!("stall of [providers.{}]", s.entry.name)))
            });
        limits_of(&self.agent_types, request, provider_stall)
    }

    fn prepare(&self, request: &mut AgentRequest) {
        apply_agent_type(&self.agent_types, request);
    }

    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let route = agent_type_route(&self.agent_types, &request)?;
        let name = request
            .options
            .provider
            .clone()
            .or_else(|| route.as_ref().and_then(|r| r.provider.clone()))
            .or_else(|| self.default.clone());
        let Some(name) = name else {
            if self.keyed.len() > 1 {
                return Err(StartRefused::agent_start(format!(
                    "agent(): no provider is configured to answer call #{} (label {:?}), and \
                     several API keys are set ({}), so dsh does not guess which to use; choose \
                     one with --provider NAME or workflow.provider in dsh.toml (or unset the \
                     keys you do not mean)",
                    request.seq,
                    request.label,
                    keyed_list(&self.keyed)
                )));
            }
            return Err(StartRefused::agent_start(format!(
                "agent(): no provider is configured to answer call #{} (label {:?}); pass \
                 --fixture FILE or --provider NAME, set workflow.provider in dsh.toml, or give \
                 the call a provider option (known providers: {})",
                request.seq,
                request.label,
                self.known()
            )));
        };
        let Some(slot) = self.slots.get(&name) else {
            return Err(StartRefused::agent_start(format!(
                "agent(): unknown provider {name:?} for call #{} (label {:?}); known providers: {} \
                 (configure more in dsh.toml)",
                request.seq,
                request.label,
                self.known()
            )));
        };
        let provider = slot.get().map_err(|e| {
            StartRefused::agent_start(format!(
                "agent(): provider {name:?} cannot be used for call #{}: {e}",
                request.seq
            ))
        })?;
        provider.start(request, cancel).await
    }
}
