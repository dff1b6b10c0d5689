//! The `openai` kind: reads `[providers.NAME]` with `kind = "openai"`
//! (the agent loop's keys with it) and builds an [`OpenAiProvider`].

use std::path::Path;
use std::sync::Arc;

use dsh_seam::SubagentProvider;

use super::{OpenAiConfig, OpenAiProvider};
use crate::SetupError;
use crate::registry::{ProviderConfig, ProviderKind, TableError, ToolHost, read_keys};

/// `kind = "openai"`: an OpenAI-compatible chat-completions API.
pub(crate) struct OpenAiKind;

impl ProviderKind for OpenAiKind {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn read(
        &self,
        provider: &str,
        mut table: toml::Table,
        base_dir: &Path,
    ) -> Result<Box<dyn ProviderConfig>, TableError> {
        let agent = crate::agent::read_loop_settings(provider, self.name(), &mut table, base_dir)?;
        let cfg: OpenAiConfig = read_keys(provider, self.name(), table)?;
        Ok(Box::new(OpenAiConfig { agent, ..cfg }))
    }

    fn builtins(&self) -> Vec<(&'static str, Box<dyn ProviderConfig>)> {
        vec![
            (
                "deepseek",
                Box::new(OpenAiConfig::default()) as Box<dyn ProviderConfig>,
            ),
            (
                "openai",
                Box::new(OpenAiConfig::openai()) as Box<dyn ProviderConfig>,
            ),
        ]
    }
}

impl ProviderConfig for OpenAiConfig {
    fn kind_name(&self) -> &'static str {
        "openai"
    }

    fn build(&self, name: &str, _base_dir: &Path) -> Result<Arc<dyn SubagentProvider>, SetupError> {
        OpenAiProvider::new(name, self).map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
    }

    fn usable(&self, _base_dir: &Path) -> Result<String, SetupError> {
        OpenAiConfig::usable(self)
    }

    fn set_tool_host(&mut self, host: &ToolHost) {
        self.agent.host = host.clone();
    }

    fn api_key_env(&self) -> Option<&str> {
        Some(&self.api_key_env)
    }
}
