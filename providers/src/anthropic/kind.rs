//! The `anthropic` kind: reads `[providers.NAME]` with `kind = "anthropic"`
//! (the agent loop's keys with it) and builds an [`AnthropicProvider`].

use std::path::Path;
use std::sync::Arc;

use dsh_seam::SubagentProvider;

use super::{AnthropicConfig, AnthropicProvider};
use crate::SetupError;
use crate::registry::{ProviderConfig, ProviderKind, TableError, ToolHost, read_keys};

/// `kind = "anthropic"`: Anthropic's Messages API.
pub(crate) struct AnthropicKind;

impl ProviderKind for AnthropicKind {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn read(
        &self,
        provider: &str,
        mut table: toml::Table,
        base_dir: &Path,
    ) -> Result<Box<dyn ProviderConfig>, TableError> {
        let agent = crate::agent::read_loop_settings(provider, self.name(), &mut table, base_dir)?;
        let cfg: AnthropicConfig = read_keys(provider, self.name(), table)?;
        Ok(Box::new(AnthropicConfig { agent, ..cfg }))
    }

    fn builtins(&self) -> Vec<(&'static str, Box<dyn ProviderConfig>)> {
        vec![(
            "anthropic",
            Box::new(AnthropicConfig::default()) as Box<dyn ProviderConfig>,
        )]
    }
}

impl ProviderConfig for AnthropicConfig {
    fn kind_name(&self) -> &'static str {
        "anthropic"
    }

    fn build(&self, name: &str, _base_dir: &Path) -> Result<Arc<dyn SubagentProvider>, SetupError> {
        AnthropicProvider::new(name, self).map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
    }

    fn usable(&self, _base_dir: &Path) -> Result<String, SetupError> {
        AnthropicConfig::usable(self)
    }

    fn set_tool_host(&mut self, host: &ToolHost) {
        self.agent.host = host.clone();
    }

    fn api_key_env(&self) -> Option<&str> {
        Some(&self.api_key_env)
    }
}
