//! The `[providers.NAME]` table of a command provider ([`CommandConfig`])
//! and its check: argv and its placeholders, the prompt mode, env, cwd,
//! limits, and finding the program — everything that can be wrong before
//! anything runs.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::template::{ArgTemplate, Placeholder};
use crate::SetupError;

/// Default `output_limit`: 4 MiB.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 4 << 20;
/// Default `grace`: 5 s.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// `PATH` for the program when dsh itself has none.
pub const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How the prompt reaches the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptMode {
    /// In the arguments, where `{prompt}` is.
    Argv,
    /// On stdin, which is then closed.
    Stdin,
}

impl fmt::Display for PromptMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PromptMode::Argv => "argv",
            PromptMode::Stdin => "stdin",
        })
    }
}

/// `[providers.NAME]` with `type = "command"`. Every key but `argv` is
/// optional; docs/providers.md lists them with their defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// Program and arguments, with `{prompt}`, `{model}`, `{effort}`,
    /// `{agentType}`, `{systemPrompt}`, `{schema}`, `{schemaFile}`
    /// placeholders. An argument using a placeholder without a value is
    /// dropped.
    pub argv: Vec<String>,
    /// `"argv"` or `"stdin"`; default: `"argv"` when an argument contains
    /// `{prompt}`, else `"stdin"`.
    #[serde(default)]
    pub prompt: Option<PromptMode>,
    /// Names of variables passed through from dsh's environment (besides
    /// `PATH` and `HOME`, which always are).
    #[serde(default)]
    pub env: Vec<String>,
    /// Working directory, relative to the config file's directory;
    /// default: dsh's working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Per-call time limit; default: none.
    #[serde(default, deserialize_with = "dsh_seam::units::de::opt_duration")]
    pub timeout: Option<Duration>,
    /// stdout cap in bytes; more fails the call. Default 4 MiB.
    #[serde(
        default = "default_output_limit",
        deserialize_with = "dsh_seam::units::de::size"
    )]
    pub output_limit: u64,
    /// SIGTERM → SIGKILL delay when stopping the program. Default 5 s.
    #[serde(
        default = "default_grace",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub grace: Duration,
    /// With a `schema`, append to the prompt an instruction to answer with
    /// JSON matching it (the schema included). Default true.
    #[serde(default = "default_true")]
    pub schema_prompt: bool,
    /// Where `isolation: "worktree"` worktrees are made, relative to the
    /// config file's directory; default: the system temporary directory.
    #[serde(default)]
    pub worktree_dir: Option<PathBuf>,
    /// dsh's reaper, which every program runs under (not a key of the
    /// file: set by the host program, like the agent CLIs' —
    /// [`crate::registry::ProviderConfig::set_tool_host`]; `None`: the program runs
    /// directly). See [`super::CommandProvider::with_reaper`].
    #[serde(skip)]
    pub reaper: Option<dsh_exec::WorkerCommand>,
}

fn default_output_limit() -> u64 {
    DEFAULT_OUTPUT_LIMIT
}
fn default_grace() -> Duration {
    DEFAULT_GRACE
}
fn default_true() -> bool {
    true
}

impl Default for CommandConfig {
    fn default() -> Self {
        CommandConfig {
            argv: Vec::new(),
            prompt: None,
            env: Vec::new(),
            cwd: None,
            timeout: None,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            grace: DEFAULT_GRACE,
            schema_prompt: true,
            worktree_dir: None,
            reaper: None,
        }
    }
}

/// A configuration checked against the file system.
pub(super) struct Checked {
    pub(super) program: PathBuf,
    pub(super) args: Vec<ArgTemplate>,
    pub(super) prompt: PromptMode,
    pub(super) cwd: PathBuf,
    pub(super) worktree_dir: PathBuf,
}

/// `p` made absolute against dsh's working directory.
fn absolutize(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        return p;
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(p),
        Err(_) => p,
    }
}

/// Why `p` cannot be run, if it cannot.
pub(crate) fn not_runnable(p: &Path) -> Option<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(p) {
        Err(_) => Some("does not exist"),
        Ok(m) if !m.is_file() => Some("is not a file"),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some("is not executable (chmod +x it)"),
        Ok(_) => None,
    }
}

/// dsh's PATH (the program's too).
pub(crate) fn search_path() -> OsString {
    std::env::var_os("PATH").unwrap_or_else(|| FALLBACK_PATH.into())
}

/// Finds the program: a path (relative to `base_dir`) when it has a `/`,
/// else on PATH. Runs nothing.
fn resolve_program(arg0: &str, base_dir: &Path) -> Result<PathBuf, SetupError> {
    if arg0.contains('/') {
        let p = absolutize(base_dir.join(arg0));
        return match not_runnable(&p) {
            None => Ok(p),
            Some(why) => Err(SetupError::invalid(
                "argv[0]",
                format!(
                    "the program {arg0:?} ({}) {why}; fix the path (a relative path is \
                     relative to the config file's directory)",
                    p.display()
                ),
            )),
        };
    }
    let path = search_path();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(arg0);
        if not_runnable(&candidate).is_none() {
            return Ok(absolutize(candidate));
        }
    }
    Err(SetupError::invalid(
        "argv[0]",
        format!(
            "the program {arg0:?} is not on PATH ({}); install it, or give its full path in \
             argv[0]",
            path.to_string_lossy()
        ),
    ))
}

impl CommandConfig {
    /// A configuration running `argv`, everything else default.
    pub fn new(argv: impl IntoIterator<Item = impl Into<String>>) -> Self {
        CommandConfig {
            argv: argv.into_iter().map(Into::into).collect(),
            ..CommandConfig::default()
        }
    }

    pub(super) fn check(&self, base_dir: &Path) -> Result<Checked, SetupError> {
        let (arg0, args) = self.templates()?;
        let in_args = args.iter().any(|a| a.uses(Placeholder::Prompt));
        let prompt = match self.prompt {
            Some(PromptMode::Argv) if !in_args => {
                return Err(SetupError::invalid(
                    "prompt",
                    "\"argv\" but no argument contains {prompt}; add \"{prompt}\" to argv, or use \
                     prompt = \"stdin\"",
                ));
            }
            Some(PromptMode::Stdin) if in_args => {
                return Err(SetupError::invalid(
                    "prompt",
                    "\"stdin\" but argv also contains {prompt}; remove it from argv, or use \
                     prompt = \"argv\"",
                ));
            }
            Some(m) => m,
            None if in_args => PromptMode::Argv,
            None => PromptMode::Stdin,
        };
        for (i, name) in self.env.iter().enumerate() {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(SetupError::invalid(
                    format!("env[{i}]"),
                    format!(
                        "{name:?} is not a variable name; env lists names of variables to pass \
                         through, e.g. env = [\"ANTHROPIC_API_KEY\"]"
                    ),
                ));
            }
        }
        if self.output_limit == 0 {
            return Err(SetupError::invalid(
                "output_limit",
                "must be at least 1 byte, e.g. \"4MiB\"",
            ));
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(SetupError::invalid(
                "timeout",
                "must be more than 0; leave it out for no per-call timeout",
            ));
        }
        let cwd = match &self.cwd {
            Some(c) => absolutize(base_dir.join(c)),
            None => std::env::current_dir().map_err(|e| {
                SetupError::invalid("cwd", format!("dsh's working directory is unusable: {e}"))
            })?,
        };
        if !cwd.is_dir() {
            return Err(SetupError::invalid(
                "cwd",
                format!(
                    "{} is not a directory (a relative cwd is relative to the config file's \
                     directory)",
                    cwd.display()
                ),
            ));
        }
        let worktree_dir = match &self.worktree_dir {
            Some(d) => absolutize(base_dir.join(d)),
            None => std::env::temp_dir(),
        };
        let program = resolve_program(arg0, base_dir)?;
        Ok(Checked {
            program,
            args,
            prompt,
            cwd,
            worktree_dir,
        })
    }

    /// `argv` parsed: the program (literal, never a placeholder) and the
    /// arguments' templates.
    fn templates(&self) -> Result<(&str, Vec<ArgTemplate>), SetupError> {
        let Some(arg0) = self.argv.first() else {
            return Err(SetupError::invalid(
                "argv",
                "must not be empty; give the program to run, e.g. argv = [\"claude\", \"-p\"]",
            ));
        };
        if arg0.trim().is_empty() {
            return Err(SetupError::invalid(
                "argv[0]",
                "must not be empty; give the program to run",
            ));
        }
        let t0 =
            ArgTemplate::parse(arg0).map_err(|e| SetupError::invalid("argv[0]", e.to_string()))?;
        if !t0.is_literal() {
            return Err(SetupError::invalid(
                "argv[0]",
                format!("the program cannot come from a placeholder ({arg0:?}); name it literally"),
            ));
        }
        let args = self.argv[1..]
            .iter()
            .enumerate()
            .map(|(i, a)| {
                ArgTemplate::parse(a)
                    .map_err(|e| SetupError::invalid(format!("argv[{}]", i + 1), e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((arg0, args))
    }

    /// The checked program, working directory and worktree directory (for
    /// the agent CLI providers, which check the same keys).
    pub(crate) fn checked(
        &self,
        base_dir: &Path,
    ) -> Result<(PathBuf, PathBuf, PathBuf), SetupError> {
        let c = self.check(base_dir)?;
        Ok((c.program, c.cwd, c.worktree_dir))
    }

    /// Whether the provider can be used, without running anything: the
    /// configuration is valid and the program exists and is executable.
    /// `Ok` describes it (`/usr/bin/claude, prompt on stdin`); `Err` names
    /// the key, the problem and the fix.
    pub fn usable(&self, base_dir: &Path) -> Result<String, SetupError> {
        let c = self.check(base_dir)?;
        Ok(format!(
            "{}, prompt on {}, in {}",
            c.program.display(),
            c.prompt,
            c.cwd.display()
        ))
    }
}
