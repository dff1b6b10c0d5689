//! The agent CLI kinds (`claude-code`, `codex`, `qwen`): each reads its
//! `[providers.NAME]` table into a [`CliConfig`] and builds a
//! [`CliProvider`] under dsh's reaper.

use std::path::Path;
use std::sync::Arc;

use dsh_exec::WorkerCommand;
use dsh_seam::SubagentProvider;

use super::{CliConfig, CliKind, CliProvider};
use crate::SetupError;
use crate::registry::{ProviderConfig, ProviderKind, TableError, ToolHost, read_keys};

/// `kind = "claude-code"`, `"codex"` or `"qwen"`: an agent CLI dsh knows
/// the flags of; one registered kind per CLI.
pub(crate) struct CliProviderKind(pub(crate) CliKind);

impl ProviderKind for CliProviderKind {
    fn name(&self) -> &'static str {
        self.0.kind_name()
    }

    fn read(
        &self,
        provider: &str,
        table: toml::Table,
        _base_dir: &Path,
    ) -> Result<Box<dyn ProviderConfig>, TableError> {
        let cfg: CliConfig = read_keys(provider, self.name(), table)?;
        Ok(Box::new(CliSettings {
            kind: self.0,
            cfg,
            reaper: None,
        }))
    }

    /// Claude Code and Codex under their kind's name, with every default.
    fn builtins(&self) -> Vec<(&'static str, Box<dyn ProviderConfig>)> {
        match self.0 {
            CliKind::ClaudeCode | CliKind::Codex => vec![(
                self.name(),
                Box::new(CliSettings {
                    kind: self.0,
                    cfg: CliConfig::default(),
                    reaper: None,
                }) as Box<dyn ProviderConfig>,
            )],
            CliKind::Qwen => Vec::new(),
        }
    }
}

/// An agent CLI provider's settings: which CLI, its table, and the reaper.
#[derive(Debug, Clone, PartialEq)]
pub struct CliSettings {
    /// Which CLI.
    pub kind: CliKind,
    /// The table's keys.
    pub cfg: CliConfig,
    /// dsh's reaper, which the CLI runs under (set by the host program:
    /// [`ProviderConfig::set_tool_host`]); `None` finds it like a run's
    /// worker, or runs the CLI directly.
    pub reaper: Option<WorkerCommand>,
}

impl ProviderConfig for CliSettings {
    fn kind_name(&self) -> &'static str {
        self.kind.kind_name()
    }

    fn build(&self, name: &str, base_dir: &Path) -> Result<Arc<dyn SubagentProvider>, SetupError> {
        // Without a reaper from the host program, look for dsh's worker as
        // a run does; none found: the CLI runs directly.
        let reaper = self
            .reaper
            .clone()
            .or_else(|| WorkerCommand::resolve().ok());
        CliProvider::new(name, self.kind, &self.cfg, base_dir, reaper)
            .map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
    }

    fn usable(&self, base_dir: &Path) -> Result<String, SetupError> {
        self.cfg.usable(self.kind, base_dir)
    }

    fn set_tool_host(&mut self, host: &ToolHost) {
        self.reaper.clone_from(&host.command);
    }

    fn agent_cli(&self) -> Option<(CliKind, &CliConfig)> {
        Some((self.kind, &self.cfg))
    }
}
