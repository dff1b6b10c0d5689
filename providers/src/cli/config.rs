//! The `[providers.NAME]` table of an agent CLI provider
//! (`kind = "claude-code"`, `"codex"`, `"qwen"`): [`CliConfig`], and its
//! check, which reuses the command provider's (program on `PATH`, `env`
//! names, `cwd`, limits).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::SetupError;
use crate::command::CommandConfig;

/// Default `output_limit` of an agent CLI's stream: 256 MiB (a long
/// session echoes every tool result; the stream is read as it arrives and
/// only its last answer is kept).
pub const DEFAULT_STREAM_LIMIT: u64 = 256 << 20;

/// Default `grace` of an agent CLI: 3 s. With the reaper's margin (1 s)
/// the host's SIGKILL comes after 4 s, within a run's own default grace
/// (5 s), so a cancelled run's CLIs are stopped — and what they started
/// cleaned up — before the run settles.
pub const DEFAULT_CLI_GRACE: Duration = Duration::from_secs(3);

/// Which agent CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CliKind {
    /// Claude Code: `claude -p --output-format stream-json`.
    ClaudeCode,
    /// Codex: `codex exec --json`.
    Codex,
    /// Qwen Code: `qwen -p --output-format stream-json`.
    Qwen,
}

impl CliKind {
    /// Every kind, in the order `dsh workflow providers` lists them.
    pub const ALL: [CliKind; 3] = [CliKind::ClaudeCode, CliKind::Codex, CliKind::Qwen];

    /// The `kind` as dsh.toml spells it.
    pub fn kind_name(self) -> &'static str {
        match self {
            CliKind::ClaudeCode => "claude-code",
            CliKind::Codex => "codex",
            CliKind::Qwen => "qwen",
        }
    }

    /// The kind `name` spells, if any.
    pub fn from_kind_name(name: &str) -> Option<CliKind> {
        CliKind::ALL.into_iter().find(|k| k.kind_name() == name)
    }

    /// The program run when the table names none.
    pub fn default_program(self) -> &'static str {
        match self {
            CliKind::ClaudeCode => "claude",
            CliKind::Codex => "codex",
            CliKind::Qwen => "qwen",
        }
    }

    /// The npm package the CLI comes from.
    pub fn npm_package(self) -> &'static str {
        match self {
            CliKind::ClaudeCode => "@anthropic-ai/claude-code",
            CliKind::Codex => "@openai/codex",
            CliKind::Qwen => "@qwen-code/qwen-code",
        }
    }

    /// The versions dsh's integration tests ran against.
    pub fn tested_versions(self) -> &'static [&'static str] {
        match self {
            CliKind::ClaudeCode => &["2.1.332"],
            CliKind::Codex => &["0.171.0"],
            CliKind::Qwen => &["0.24.4"],
        }
    }

    /// Variables the CLI reads its key, endpoint and home from: passed
    /// through from dsh's environment when set, besides `PATH`, `HOME`
    /// and the table's `env`.
    pub fn default_env(self) -> &'static [&'static str] {
        match self {
            CliKind::ClaudeCode => &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_MODEL",
                "CLAUDE_CONFIG_DIR",
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_USE_VERTEX",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "DISABLE_TELEMETRY",
                "DISABLE_AUTOUPDATER",
                "DISABLE_ERROR_REPORTING",
                "IS_SANDBOX",
                "TMPDIR",
            ],
            CliKind::Codex => &["OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME", "TMPDIR"],
            CliKind::Qwen => &[
                "OPENAI_API_KEY",
                "OPENAI_BASE_URL",
                "OPENAI_MODEL",
                "QWEN_CODE_NO_RELAUNCH",
                "QWEN_USAGE_STATISTICS_ENABLED",
                "QWEN_CODE_SUPPRESS_YOLO_WARNING",
                "QWEN_STREAM_IDLE_TIMEOUT_MS",
                "TMPDIR",
            ],
        }
    }
}

impl std::fmt::Display for CliKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind_name())
    }
}

/// `[providers.NAME]` with `kind = "claude-code"`, `"codex"` or `"qwen"`.
/// Every key is optional; docs/providers.md lists them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliConfig {
    /// The CLI's program (a name on `PATH` or a path, relative to the
    /// config file's directory); default: the kind's (`claude`, `codex`,
    /// `qwen`).
    #[serde(default)]
    pub program: Option<String>,
    /// The model, unless the call or its agent type names one.
    #[serde(default)]
    pub model: Option<String>,
    /// The CLI's permission mode: Claude Code's `--permission-mode`
    /// (`acceptEdits`, `bypassPermissions`, …), Codex's sandbox mode
    /// (`read-only`, `workspace-write`, `danger-full-access`), Qwen Code's
    /// `--approval-mode` (`plan`, `default`, `auto-edit`, `auto`, `yolo`).
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Tools allowed without asking (Claude Code `--allowedTools`, Qwen
    /// `--allowed-tools`), e.g. `["Bash(git *)", "Edit"]`.
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    /// More arguments, placed before the CLI's own (`--add-dir`, `-c
    /// key=value`, …).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Names of variables passed through from dsh's environment besides
    /// `PATH`, `HOME` and the kind's own (keys, endpoints).
    #[serde(default)]
    pub env: Vec<String>,
    /// Working directory, relative to the config file's directory;
    /// default: dsh's working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Per-call time limit; default: none (`stall` and `stallMs` watch a
    /// CLI that stops streaming).
    #[serde(default, deserialize_with = "dsh_seam::units::de::opt_duration")]
    pub timeout: Option<Duration>,
    /// Most bytes of the CLI's stream per call; more fails the call.
    /// Default 256 MiB.
    #[serde(
        default = "default_stream_limit",
        deserialize_with = "dsh_seam::units::de::size"
    )]
    pub output_limit: u64,
    /// SIGTERM → SIGKILL delay when stopping the CLI. Default 3 s
    /// ([`DEFAULT_CLI_GRACE`]).
    #[serde(
        default = "default_grace",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub grace: Duration,
    /// Where `isolation: "worktree"` worktrees are made, relative to the
    /// config file's directory; default: the system temporary directory.
    #[serde(default)]
    pub worktree_dir: Option<PathBuf>,
    /// Claude Code only: the most one call may spend, in US dollars
    /// (`--max-budget-usd`).
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
}

fn default_stream_limit() -> u64 {
    DEFAULT_STREAM_LIMIT
}
fn default_grace() -> Duration {
    DEFAULT_CLI_GRACE
}

impl Default for CliConfig {
    fn default() -> Self {
        CliConfig {
            program: None,
            model: None,
            permission_mode: None,
            allowed_tools: Vec::new(),
            extra_args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            timeout: None,
            output_limit: DEFAULT_STREAM_LIMIT,
            grace: DEFAULT_CLI_GRACE,
            worktree_dir: None,
            max_budget_usd: None,
        }
    }
}

/// A configuration checked against the file system.
#[derive(Debug, Clone)]
pub(super) struct Checked {
    pub(super) program: PathBuf,
    pub(super) cwd: PathBuf,
    pub(super) worktree_dir: PathBuf,
}

impl CliConfig {
    /// The program as configured (its default when none).
    pub fn program_name(&self, kind: CliKind) -> &str {
        self.program.as_deref().unwrap_or(kind.default_program())
    }

    /// Whether the provider can be used, without running the CLI: `Ok`
    /// describes it (`/usr/local/bin/claude, in /home/me/project`), `Err`
    /// names the key and the fix.
    pub fn usable(&self, kind: CliKind, base_dir: &Path) -> Result<String, SetupError> {
        let c = self.check(kind, base_dir)?;
        Ok(format!("{}, in {}", c.program.display(), c.cwd.display()))
    }

    /// The command provider's check of the same keys; its `argv[0]` is
    /// this table's `program`.
    pub(super) fn check(&self, kind: CliKind, base_dir: &Path) -> Result<Checked, SetupError> {
        let as_command = CommandConfig {
            argv: vec![self.program_name(kind).to_string()],
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            output_limit: self.output_limit,
            grace: self.grace,
            worktree_dir: self.worktree_dir.clone(),
            ..CommandConfig::default()
        };
        let c = as_command.checked(base_dir).map_err(|e| match e {
            SetupError::Invalid { key, problem } if key == "argv[0]" => SetupError::Invalid {
                key: "program".into(),
                problem: problem.replace("argv[0]", "program"),
            },
            other => other,
        })?;
        if let Some(b) = self.max_budget_usd
            && !(b.is_finite() && b > 0.0)
        {
            return Err(SetupError::invalid(
                "max_budget_usd",
                format!("{b} is not a positive amount of US dollars, e.g. max_budget_usd = 0.5"),
            ));
        }
        if self.max_budget_usd.is_some() && kind != CliKind::ClaudeCode {
            return Err(SetupError::invalid(
                "max_budget_usd",
                format!("only Claude Code can cap its own spend; {kind} cannot, remove the key"),
            ));
        }
        for (i, a) in self.extra_args.iter().enumerate() {
            if a.contains('\0') {
                return Err(SetupError::invalid(
                    format!("extra_args[{i}]"),
                    "contains a NUL byte, which no program can receive; remove it",
                ));
            }
        }
        Ok(Checked {
            program: c.0,
            cwd: c.1,
            worktree_dir: c.2,
        })
    }
}
