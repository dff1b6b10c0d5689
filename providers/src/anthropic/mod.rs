//! The `anthropic` provider: Anthropic's Messages API
//! (`POST {base_url}/v1/messages`, key in `x-api-key` from
//! `ANTHROPIC_API_KEY`), running the same agent loop as `openai`
//! ([`crate::agent`]): streamed turns, tool use, the
//! `StructuredOutput` answer of a schema call, usage summed over turns.
//!
//! Options: `model` overrides the configured model; `effort` is not sent
//! (the Messages API has no such field); `agentType` gives the system
//! prompt and tools; `isolation: "worktree"` runs the tools in a fresh
//! worktree. A schema call without tools is asked for JSON in the system
//! prompt (the API has no response format) and checked the same way.

pub(crate) mod api;
mod config;
mod kind;
mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;

pub use config::AnthropicConfig;
pub(crate) use kind::AnthropicKind;

use crate::SetupError;
use crate::agent::{self, child::LoopChild, conversation::Reply};
use crate::http::{Endpoint, header_map, secret};
use dsh_seam::{
    AgentRequest, Progress, ProviderError, StartRefused, Subagent, SubagentProvider, Usage,
};

/// A provider for one `[providers.NAME]` entry of kind `anthropic`.
pub struct AnthropicProvider {
    name: String,
    shared: Arc<Shared>,
    next_child: AtomicU64,
}

struct Shared {
    cfg: AnthropicConfig,
    endpoint: Endpoint,
}

impl AnthropicProvider {
    /// Builds the provider, reading the key from `cfg.api_key_env` (none
    /// when that name is empty). Never calls the API.
    pub fn new(name: &str, cfg: &AnthropicConfig) -> Result<Self, SetupError> {
        cfg.check()?;
        if cfg.api_key_env.is_empty() {
            return Self::with_key(name, cfg, "");
        }
        match std::env::var(&cfg.api_key_env) {
            Ok(key) if !key.is_empty() => Self::with_key(name, cfg, &key),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(SetupError::MissingKey {
                env: cfg.api_key_env.clone(),
            }),
            Err(std::env::VarError::NotUnicode(_)) => Err(SetupError::BadKey {
                env: cfg.api_key_env.clone(),
                problem: "it is not UTF-8".into(),
            }),
        }
    }

    /// Builds the provider with `key` given directly (empty: none sent).
    pub fn with_key(name: &str, cfg: &AnthropicConfig, key: &str) -> Result<Self, SetupError> {
        cfg.check()?;
        let mut headers = header_map(&cfg.headers)?;
        if !key.is_empty() {
            headers.insert(
                HeaderName::from_static("x-api-key"),
                secret(key, &cfg.api_key_env)?,
            );
        }
        let version = HeaderValue::from_str(&cfg.anthropic_version).map_err(|_| {
            SetupError::invalid("anthropic_version", "not a valid HTTP header value")
        })?;
        headers.insert(HeaderName::from_static("anthropic-version"), version);
        let endpoint = Endpoint::from_parts(
            format!("{}/v1/messages", cfg.base_url.trim_end_matches('/')),
            headers,
            cfg.timeout,
            cfg.max_attempts,
            cfg.backoff,
            cfg.dispatch(),
        );
        Ok(AnthropicProvider {
            name: name.into(),
            shared: Arc::new(Shared {
                cfg: cfg.clone(),
                endpoint,
            }),
            next_child: AtomicU64::new(1),
        })
    }
}

#[async_trait]
impl SubagentProvider for AnthropicProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let n = self.next_child.fetch_add(1, Ordering::Relaxed);
        Ok(LoopChild::start(
            &self.name,
            "anthropic",
            n,
            self.shared.clone(),
            request,
            cancel,
        )?)
    }
}

impl agent::child::Backend for Shared {
    fn settings(&self) -> &agent::LoopSettings {
        &self.cfg.agent
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
        let body = api::body(&self.cfg, turn);
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
