//! The `command` provider: agent CLIs (`claude -p`, `codex exec`, …) or any
//! program. STUB: the agreed interface only; the implementation replaces
//! this file.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::provider::{AgentRequest, StartRefused, Subagent, SubagentProvider};

/// `[providers.NAME]` with `type = "command"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// Program and arguments, with `{prompt}`, `{model}`, `{effort}`,
    /// `{agentType}` placeholders.
    pub argv: Vec<String>,
}

impl CommandConfig {
    /// Whether the provider can be used, without running it.
    pub fn usable(&self, _base_dir: &Path) -> Result<String, String> {
        match self.argv.first() {
            Some(p) => Ok(p.clone()),
            None => Err(
                "argv is empty; give the program to run, e.g. argv = [\"claude\", \"-p\"]".into(),
            ),
        }
    }
}

pub struct CommandProvider {
    name: String,
}

impl CommandProvider {
    pub fn new(name: &str, cfg: &CommandConfig, base_dir: &Path) -> Result<Self, String> {
        cfg.usable(base_dir)?;
        Ok(CommandProvider { name: name.into() })
    }
}

#[async_trait]
impl SubagentProvider for CommandProvider {
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
