//! The `openai` provider: any OpenAI-compatible chat-completions API
//! (DeepSeek's by default). STUB: the agreed interface only; the
//! implementation replaces this file.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::provider::{AgentRequest, StartRefused, Subagent, SubagentProvider};

/// `[providers.NAME]` with `type = "openai"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    #[serde(default = "default_base_url")]
    pub base_url: String,
    #[serde(default = "default_model")]
    pub model: String,
    #[serde(default = "default_key_env")]
    pub api_key_env: String,
}

fn default_base_url() -> String {
    "https://api.deepseek.com".into()
}
fn default_model() -> String {
    "deepseek-chat".into()
}
fn default_key_env() -> String {
    "DEEPSEEK_API_KEY".into()
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: default_base_url(),
            model: default_model(),
            api_key_env: default_key_env(),
        }
    }
}

impl OpenAiConfig {
    /// The built-in `openai` entry: api.openai.com, `OPENAI_API_KEY`.
    pub fn openai() -> Self {
        OpenAiConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
        }
    }

    /// Whether the provider can be used, without calling it: `Ok(detail)`
    /// or `Err(problem and fix)`.
    pub fn usable(&self) -> Result<String, String> {
        match std::env::var_os(&self.api_key_env) {
            Some(v) if !v.is_empty() => Ok(format!(
                "{} ({}), key from {}",
                self.base_url, self.model, self.api_key_env
            )),
            _ => Err(format!(
                "{} is not set; export it, or set api_key_env to the variable that holds the key",
                self.api_key_env
            )),
        }
    }
}

pub struct OpenAiProvider {
    name: String,
}

impl OpenAiProvider {
    pub fn new(name: &str, cfg: &OpenAiConfig) -> Result<Self, String> {
        cfg.usable()?;
        Ok(OpenAiProvider { name: name.into() })
    }
}

#[async_trait]
impl SubagentProvider for OpenAiProvider {
    async fn start(
        &self,
        _request: AgentRequest,
        _cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        Err(StartRefused::agent_start(format!(
            "provider {}: not implemented yet",
            self.name
        )))
    }
}
