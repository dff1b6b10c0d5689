//! The `openai` provider: any OpenAI-compatible chat-completions API
//! (DeepSeek's by default).
//!
//! Each `agent()` call is one child running the agent loop
//! ([`crate::agent`]): POST `{base_url}/chat/completions` with
//! the system prompt, the conversation and the call's tools, the answer
//! streamed back (`stream: true`, the `stream` module); tool calls are run
//! and their results sent in the next turn until the model answers. With
//! no tools (`tools = []`) a call is one completion, a schema sent as
//! `response_format` and checked, with one corrective turn. 429, 5xx and
//! connection errors are retried (the `http` module); every other failure
//! ends the child with a reason (`agent()` resolves `null`).
//!
//! Options: `model` overrides the configured model; `effort` is sent as
//! `reasoning_effort` only when the config says the endpoint takes it;
//! `agentType` reaches the provider as the router's `system_prompt` and
//! tool set; `isolation: "worktree"` runs the tools in a fresh worktree;
//! other isolations are refused (`UNSUPPORTED_OPTION`).

pub(crate) mod api;
mod config;
mod kind;
mod stream;
#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

pub use config::{MAX_DELAY, OpenAiConfig, StructuredOutput};
pub(crate) use kind::OpenAiKind;

use crate::SetupError;
use crate::agent::{self, conversation::Reply};
use crate::http::{Endpoint, header_map, secret};
use dsh_seam::{
    AgentRequest, Progress, ProviderError, StartRefused, Subagent, SubagentProvider, Usage,
};

/// A provider for one `[providers.NAME]` entry. Cheap to build: the HTTP
/// client is created on the first call.
pub struct OpenAiProvider {
    name: String,
    shared: Arc<Shared>,
    next_child: AtomicU64,
}

/// What every child's task needs.
struct Shared {
    cfg: OpenAiConfig,
    settings: agent::LoopSettings,
    endpoint: Endpoint,
}

impl OpenAiProvider {
    /// Builds the provider named `name`, reading the key from the variable
    /// `cfg.api_key_env` names (none when that name is empty). Never calls
    /// the API.
    pub fn new(name: &str, cfg: &OpenAiConfig) -> Result<Self, SetupError> {
        cfg.check()?;
        if cfg.api_key_env.is_empty() {
            return Self::with_key(name, cfg, "");
        }
        match std::env::var(&cfg.api_key_env) {
            Ok(key) if !key.is_empty() => Self::with_key(name, cfg, &key),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(cfg.missing_key()),
            Err(std::env::VarError::NotUnicode(_)) => Err(SetupError::BadKey {
                env: cfg.api_key_env.clone(),
                problem: "it is not UTF-8".into(),
            }),
        }
    }

    /// Builds the provider with `key` given directly (embedders, tests);
    /// `api_key_env` is then only used in messages. An empty key sends no
    /// `Authorization` header.
    pub fn with_key(name: &str, cfg: &OpenAiConfig, key: &str) -> Result<Self, SetupError> {
        cfg.check()?;
        let key = (!key.is_empty()).then_some(key);
        Ok(OpenAiProvider {
            name: name.into(),
            shared: Arc::new(Shared {
                cfg: cfg.clone(),
                settings: cfg.agent.clone(),
                endpoint: endpoint(cfg, key)?,
            }),
            next_child: AtomicU64::new(1),
        })
    }

    /// The name it was built with (the `NAME` of `[providers.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.shared.cfg
    }
}

/// Where `cfg`'s requests go: `{base_url}/chat/completions`, its headers
/// and, with `key`, `Authorization: Bearer` (`None`: no such header). The
/// config must have passed [`OpenAiConfig::check`]; what it finds is
/// reported here too rather than trusted.
fn endpoint(cfg: &OpenAiConfig, key: Option<&str>) -> Result<Endpoint, SetupError> {
    let mut headers = header_map(&cfg.headers)?;
    if let Some(key) = key {
        let v = secret(&format!("Bearer {key}"), &cfg.api_key_env)?;
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    Ok(Endpoint::from_parts(
        format!("{}/chat/completions", cfg.base_url.trim_end_matches('/')),
        headers,
        cfg.timeout,
        cfg.max_attempts,
        cfg.backoff,
        cfg.dispatch(),
    ))
}

#[async_trait]
impl SubagentProvider for OpenAiProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        Ok(self.start_child(request, cancel)?)
    }
}

impl OpenAiProvider {
    /// Starts the request task and returns its child at once.
    fn start_child(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<agent::child::LoopChild>, StartRefused> {
        let n = self.next_child.fetch_add(1, Ordering::Relaxed);
        agent::child::LoopChild::start(
            &self.name,
            "openai",
            n,
            self.shared.clone(),
            request,
            cancel,
        )
    }
}

impl agent::child::Backend for Shared {
    fn settings(&self) -> &agent::LoopSettings {
        &self.settings
    }

    fn default_model(&self) -> &str {
        &self.cfg.model
    }
}

#[async_trait]
impl agent::Model for Shared {
    async fn turn(
        &self,
        turn: &agent::Turn<'_>,
        progress: &Progress,
        so_far: Usage,
        held: &mut crate::budget::Held<'static>,
    ) -> Result<Reply, ProviderError> {
        let body = api::loop_body(&self.cfg, turn);
        let mut sink = stream::sink(progress.clone(), so_far);
        // The call's share of the host's budget for model calls grows to
        // cover this turn; the loop shrinks it back once the answer is
        // parsed.
        self.endpoint
            .post_into(&body, progress, &mut sink, held)
            .await?;
        Ok(stream::reply(sink)?)
    }
}
