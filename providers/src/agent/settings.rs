//! The agent loop's configuration: the keys of a provider's table every
//! provider of the loop shares, read out of the table and checked.

use std::path::PathBuf;
use std::time::Duration;

use dsh_seam::AgentRequest;

use super::toolset;
use super::{DEFAULT_BASH_TIMEOUT, DEFAULT_MAX_TOOL_CALLS, DEFAULT_MAX_TURNS, ToolHost};

/// The loop's configuration: the keys of a provider's table that every
/// provider of the loop shares (docs/providers.md, "The agent loop").
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopSettings {
    /// `tools`: the tools calls get when their agent type names none;
    /// `None` is [`toolset::READ_ONLY`]; empty is none (one completion per
    /// call).
    pub tools: Option<Vec<String>>,
    /// `max_turns`: most model turns of one call.
    pub max_turns: u32,
    /// `max_tool_calls`: most tool calls of one call.
    pub max_tool_calls: u32,
    /// `network`: `Bash` may open network connections.
    pub network: bool,
    /// `bash_timeout`: longest a `Bash` command runs.
    #[serde(deserialize_with = "dsh_seam::units::de::duration")]
    pub bash_timeout: Duration,
    /// `system_prompt`: put before the agent type's system prompt.
    pub system_prompt: Option<String>,
    /// `workspace`: where tools run; `None` is dsh's working directory.
    pub workspace: Option<PathBuf>,
    /// `worktree_dir`: where `isolation: "worktree"` makes its worktrees;
    /// `None` is the system's temporary directory.
    pub worktree_dir: Option<PathBuf>,
    /// The tool host program and its sandbox policy (set by the program
    /// that builds the provider, never read from a file).
    #[serde(skip)]
    pub host: ToolHost,
}

/// The keys of [`LoopSettings`], as a provider's table spells them.
pub const LOOP_KEYS: [&str; 8] = [
    "tools",
    "max_turns",
    "max_tool_calls",
    "network",
    "bash_timeout",
    "system_prompt",
    "workspace",
    "worktree_dir",
];

impl Default for LoopSettings {
    fn default() -> Self {
        LoopSettings {
            tools: None,
            max_turns: DEFAULT_MAX_TURNS,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            network: false,
            bash_timeout: DEFAULT_BASH_TIMEOUT,
            system_prompt: None,
            workspace: None,
            worktree_dir: None,
            host: ToolHost::default(),
        }
    }
}

impl LoopSettings {
    /// The tools `request` gets.
    pub fn tools_for(&self, request: &AgentRequest) -> Vec<&'static str> {
        toolset::selected(request, self.tools.as_deref())
    }

    /// The workspace of calls without a worktree.
    pub fn base_workspace(&self) -> Result<PathBuf, WorkspaceUnusable> {
        match &self.workspace {
            Some(p) => Ok(p.clone()),
            None => std::env::current_dir().map_err(WorkspaceUnusable),
        }
    }

    /// Where worktrees go.
    pub fn worktree_parent(&self) -> PathBuf {
        self.worktree_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("dsh-worktrees"))
    }
}

/// No `workspace` is set and dsh's working directory cannot be read (it
/// was removed under it): set `workspace` in the provider's table.
#[derive(Debug, thiserror::Error)]
#[error("dsh's working directory is unusable as the workspace: {0}")]
pub struct WorkspaceUnusable(std::io::Error);

/// Longest `bash_timeout` a configuration may set.
const MAX_BASH_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Most turns and tool calls a configuration may allow.
const MAX_LIMIT: u32 = 10_000;

impl LoopSettings {
    /// Checks the values: known tool names, limits in range.
    pub fn check(&self) -> Result<(), crate::SetupError> {
        check_keys(
            self.tools.as_deref(),
            self.max_turns,
            self.max_tool_calls,
            self.bash_timeout,
        )
    }

    /// These settings with an agent type's `max_turns`, `network` and
    /// `bash_timeout` in place of the provider's.
    pub fn limited(&self, l: &dsh_seam::LoopLimits) -> LoopSettings {
        LoopSettings {
            max_turns: l.max_turns.unwrap_or(self.max_turns),
            network: l.network.unwrap_or(self.network),
            bash_timeout: l.bash_timeout.unwrap_or(self.bash_timeout),
            ..self.clone()
        }
    }

    /// Makes relative `workspace` and `worktree_dir` relative to `base`
    /// (the configuration file's directory).
    pub fn resolve_paths(&mut self, base: &std::path::Path) {
        for p in [&mut self.workspace, &mut self.worktree_dir]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }
}

/// Takes the agent loop's keys ([`LOOP_KEYS`]) out of the table of an API
/// provider of kind `kind` and reads them (relative paths against
/// `base_dir`, the directory of `dsh.toml`); the rest of the table is the
/// kind's own.
pub(crate) fn read_loop_settings(
    provider: &str,
    kind: &'static str,
    table: &mut toml::Table,
    base_dir: &std::path::Path,
) -> Result<LoopSettings, crate::registry::TableError> {
    let mut keys = toml::Table::new();
    for k in LOOP_KEYS {
        if let Some(v) = table.remove(k) {
            keys.insert(k.to_string(), v);
        }
    }
    let mut settings: LoopSettings = crate::registry::read_keys(provider, kind, keys)?;
    settings.resolve_paths(base_dir);
    check_workspace(provider, &settings)?;
    Ok(settings)
}

/// The agent loop's `workspace` must be a directory now: a path that is
/// not there would only fail at the first call, after the run started.
fn check_workspace(
    provider: &str,
    agent: &LoopSettings,
) -> Result<(), crate::registry::TableError> {
    let Some(w) = &agent.workspace else {
        return Ok(());
    };
    if w.is_dir() {
        return Ok(());
    }
    let what = match std::fs::metadata(w) {
        Ok(_) => "not a directory",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no such directory",
        Err(_) => "not a directory dsh can use",
    };
    Err(crate::registry::TableError::Value {
        provider: provider.to_string(),
        key: "workspace".into(),
        problem: format!(
            "{}: {what}; set it to an existing directory (a relative path is relative to the \
             config file's directory), or leave it out for dsh's working directory",
            w.display()
        ),
    })
}

/// Checks the loop's keys of a provider's table.
pub(super) fn check_keys(
    tools: Option<&[String]>,
    max_turns: u32,
    max_tool_calls: u32,
    bash_timeout: Duration,
) -> Result<(), crate::SetupError> {
    use crate::SetupError;
    if let Some(t) = tools {
        let unknown = toolset::unknown(t);
        if !unknown.is_empty() {
            return Err(SetupError::invalid(
                "tools",
                format!(
                    "unknown tool{} {}; dsh runs {}",
                    if unknown.len() == 1 { "" } else { "s" },
                    unknown
                        .iter()
                        .map(|u| format!("{u:?}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    toolset::ALL.join(", ")
                ),
            ));
        }
    }
    for (key, v) in [("max_turns", max_turns), ("max_tool_calls", max_tool_calls)] {
        if v == 0 || v > MAX_LIMIT {
            return Err(SetupError::invalid(
                key,
                format!("must be between 1 and {MAX_LIMIT}, got {v}"),
            ));
        }
    }
    if bash_timeout.is_zero() || bash_timeout > MAX_BASH_TIMEOUT {
        return Err(SetupError::invalid(
            "bash_timeout",
            "must be longer than zero and at most 24h, e.g. \"120s\"",
        ));
    }
    Ok(())
}
