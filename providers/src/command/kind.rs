//! The `command` kind: reads `[providers.NAME]` with `kind = "command"`
//! (in the provider's spelling or the contract's) into a
//! [`CommandConfig`] and builds a [`CommandProvider`] under dsh's reaper.

use std::path::Path;
use std::sync::Arc;

use dsh_seam::SubagentProvider;

use super::{CommandConfig, CommandProvider};
use crate::SetupError;
use crate::registry::{ProviderConfig, ProviderKind, TableError, ToolHost, read_keys};

/// `kind = "command"`: a program (an agent CLI or any other) runs once per
/// call and answers on stdout.
pub(crate) struct CommandKind;

impl ProviderKind for CommandKind {
    fn name(&self) -> &'static str {
        "command"
    }

    fn read(
        &self,
        provider: &str,
        mut table: toml::Table,
        _base_dir: &Path,
    ) -> Result<Box<dyn ProviderConfig>, TableError> {
        contract_command_spelling(&mut table);
        let cfg: CommandConfig = read_keys(provider, self.name(), table)?;
        Ok(Box::new(cfg))
    }
}

impl ProviderConfig for CommandConfig {
    fn kind_name(&self) -> &'static str {
        "command"
    }

    fn build(&self, name: &str, base_dir: &Path) -> Result<Arc<dyn SubagentProvider>, SetupError> {
        // Under dsh's reaper when its worker is found, as agent CLIs are:
        // nothing a program starts outlives it, nor a killed dsh.
        let mut cfg = self.clone();
        if cfg.reaper.is_none() {
            cfg.reaper = dsh_exec::WorkerCommand::resolve().ok();
        }
        CommandProvider::new(name, &cfg, base_dir).map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
    }

    fn usable(&self, base_dir: &Path) -> Result<String, SetupError> {
        CommandConfig::usable(self, base_dir)
    }

    fn set_tool_host(&mut self, host: &ToolHost) {
        self.reaper.clone_from(&host.command);
    }
}

/// The contract spells a command provider `command = [...]` and
/// `prompt = "stdin" | "arg"`; the provider's own keys are `argv` and
/// `prompt = "stdin" | "argv"`. Accept both: `command` becomes `argv`, and
/// `prompt = "arg"` without a `{prompt}` placeholder appends one.
fn contract_command_spelling(table: &mut toml::Table) {
    if !table.contains_key("argv")
        && let Some(cmd) = table.remove("command")
    {
        table.insert("argv".into(), cmd);
    }
    let wants_arg = matches!(table.get("prompt"), Some(toml::Value::String(s)) if s == "arg");
    if wants_arg {
        table.insert("prompt".into(), toml::Value::String("argv".into()));
        if let Some(toml::Value::Array(argv)) = table.get_mut("argv") {
            let has_placeholder = argv
                .iter()
                .any(|a| a.as_str().is_some_and(|s| s.contains("{prompt}")));
            if !has_placeholder {
                argv.push(toml::Value::String("{prompt}".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_prompt_arg_appends_a_placeholder() {
        let mut t: toml::Table =
            toml::from_str("command = [\"agent\", \"run\"]\nprompt = \"arg\"\n").expect("toml");
        contract_command_spelling(&mut t);
        assert_eq!(
            t["argv"],
            toml::Value::Array(vec!["agent".into(), "run".into(), "{prompt}".into()])
        );
        assert_eq!(t["prompt"], toml::Value::String("argv".into()));
    }
}
