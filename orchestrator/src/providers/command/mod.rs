//! The `command` provider: agent CLIs (`claude -p`, `codex exec`,
//! `gemini`) or any program, one process per `agent()` call.
//!
//! Each call runs `argv` (placeholders substituted, see [`template`]) in a
//! new process group with a clean environment (only `PATH`, `HOME` and the
//! variables listed in `env`), the prompt on stdin or in an argument, and
//! takes the final answer from stdout. With a `schema`, the answer is the
//! JSON value in stdout (the whole of it, or the last object/array after
//! some chatter), which the host validates. A non-zero exit fails the call
//! with the status and the end of stderr. Timeouts, the stdout cap and
//! cancellation stop the program's whole group: SIGTERM, the grace,
//! SIGKILL; nothing outlives the call ([`process`]). `isolation:
//! "worktree"` runs the program in a fresh git worktree, kept on a branch
//! when the program changed something ([`worktree`]).
//!
//! docs/providers.md ("The command provider") is the user's reference.

mod child;
mod extract;
mod process;
mod template;
mod worktree;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::provider::{AgentRequest, StartRefused, Subagent, SubagentProvider};
use crate::providers::SetupError;
use child::{CommandChild, Job, TempFile};
use process::{ProcLimits, ProcSpec};
use template::{ArgTemplate, Placeholder};
use worktree::Worktree;

pub use extract::extract_json;

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
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    pub timeout: Option<Duration>,
    /// stdout cap in bytes; more fails the call. Default 4 MiB.
    #[serde(
        default = "default_output_limit",
        deserialize_with = "crate::units::de::size"
    )]
    pub output_limit: u64,
    /// SIGTERM → SIGKILL delay when stopping the program. Default 5 s.
    #[serde(
        default = "default_grace",
        deserialize_with = "crate::units::de::duration"
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
        }
    }
}

/// A configuration checked against the file system.
struct Checked {
    program: PathBuf,
    args: Vec<ArgTemplate>,
    prompt: PromptMode,
    cwd: PathBuf,
    worktree_dir: PathBuf,
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
fn not_runnable(p: &Path) -> Option<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(p) {
        Err(_) => Some("does not exist"),
        Ok(m) if !m.is_file() => Some("is not a file"),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some("is not executable (chmod +x it)"),
        Ok(_) => None,
    }
}

/// dsh's PATH (the program's too).
fn search_path() -> OsString {
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

    fn check(&self, base_dir: &Path) -> Result<Checked, SetupError> {
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
        let t0 = ArgTemplate::parse(arg0).map_err(|e| SetupError::invalid("argv[0]", e))?;
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
                    .map_err(|e| SetupError::invalid(format!("argv[{}]", i + 1), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
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

/// Runs a program per `agent()` call.
pub struct CommandProvider {
    name: String,
    /// `argv[0]` as configured (messages).
    display: String,
    program: PathBuf,
    args: Vec<ArgTemplate>,
    prompt: PromptMode,
    env: Vec<String>,
    cwd: PathBuf,
    limits: ProcLimits,
    schema_prompt: bool,
    system_in_args: bool,
    schema_file_in_args: bool,
    worktree_dir: PathBuf,
    next: AtomicU64,
}

impl fmt::Debug for CommandProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandProvider")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("prompt", &self.prompt)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl CommandProvider {
    /// Checks `cfg` (see [`CommandConfig::usable`]) and builds the provider.
    /// `base_dir` is the config file's directory.
    pub fn new(name: &str, cfg: &CommandConfig, base_dir: &Path) -> Result<Self, SetupError> {
        let c = cfg.check(base_dir)?;
        let system_in_args = c.args.iter().any(|a| a.uses(Placeholder::SystemPrompt));
        let schema_file_in_args = c.args.iter().any(|a| a.uses(Placeholder::SchemaFile));
        Ok(CommandProvider {
            name: name.into(),
            display: cfg.argv.first().cloned().unwrap_or_default(),
            program: c.program,
            args: c.args,
            prompt: c.prompt,
            env: cfg.env.clone(),
            cwd: c.cwd,
            limits: ProcLimits {
                timeout: cfg.timeout,
                output_limit: cfg.output_limit,
                grace: cfg.grace,
            },
            schema_prompt: cfg.schema_prompt,
            system_in_args,
            schema_file_in_args,
            worktree_dir: c.worktree_dir,
            next: AtomicU64::new(1),
        })
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program's environment: `PATH` and `HOME` from dsh's (PATH falls
    /// back to [`FALLBACK_PATH`]), plus each variable named in `env` that
    /// is set. Nothing else.
    fn child_env(&self) -> Vec<(OsString, OsString)> {
        let mut env = vec![(OsString::from("PATH"), search_path())];
        if let Some(home) = std::env::var_os("HOME") {
            env.push(("HOME".into(), home));
        }
        for name in &self.env {
            if name == "PATH" || name == "HOME" {
                continue;
            }
            if let Some(v) = std::env::var_os(name) {
                env.push((name.into(), v));
            }
        }
        env
    }

    /// The prompt as sent: the system prompt first when no argument takes
    /// `{systemPrompt}`, and the schema instruction last when asked for.
    fn compose_prompt(&self, req: &AgentRequest) -> String {
        let mut p = String::new();
        if !self.system_in_args
            && let Some(sp) = req
                .system_prompt
                .as_deref()
                .filter(|s| !s.trim().is_empty())
        {
            p.push_str(sp);
            p.push_str("\n\n");
        }
        p.push_str(&req.prompt);
        if self.schema_prompt
            && let Some(schema) = &req.schema
        {
            p.push_str(
                "\n\nAnswer with one JSON value that matches this JSON Schema, and print it last:\n",
            );
            p.push_str(&schema.to_string());
        }
        p
    }

    fn refuse(&self, what: String) -> StartRefused {
        StartRefused::agent_start(format!("provider {} (command): {what}", self.name))
    }

    /// The refusal for a program that could not be spawned.
    fn spawn_refusal(&self, cwd: &Path, e: &std::io::Error) -> StartRefused {
        if let Some(why) = not_runnable(&self.program) {
            return self.refuse(format!(
                "cannot start {:?}: {} {why}; install it or fix argv[0] in [providers.{}]",
                self.display,
                self.program.display(),
                self.name
            ));
        }
        if !cwd.is_dir() {
            return self.refuse(format!(
                "cannot start {:?}: its working directory {} does not exist; fix cwd in \
                 [providers.{}]",
                self.display,
                cwd.display(),
                self.name
            ));
        }
        self.refuse(format!(
            "cannot start {:?} ({}): {e}",
            self.display,
            self.program.display()
        ))
    }
}

#[async_trait]
impl SubagentProvider for CommandProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        if cancel.is_cancelled() {
            return Err(self.refuse("the run was cancelled before the program started".into()));
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{n}", self.name);

        let worktree = match request.options.isolation.as_deref() {
            None => None,
            Some("worktree") => Some(
                Worktree::create(&self.cwd, &self.worktree_dir, &id)
                    .await
                    .map_err(|m| self.refuse(m))?,
            ),
            Some(other) => {
                return Err(StartRefused {
                    code: ErrorCode::UnsupportedOption,
                    message: format!(
                        "provider {} (command): isolation {other:?} is not supported; the only \
                         isolation is \"worktree\"",
                        self.name
                    ),
                });
            }
        };
        let cwd = worktree
            .as_ref()
            .map_or_else(|| self.cwd.clone(), |w| w.run_dir.clone());

        let prompt = self.compose_prompt(&request);
        let schema = request.schema.as_ref().map(|s| s.to_string());
        let schema_file = match &schema {
            Some(s) if self.schema_file_in_args => match TempFile::write(&id, s) {
                Ok(f) => Some(f),
                Err(e) => {
                    if let Some(wt) = &worktree {
                        wt.remove().await;
                    }
                    return Err(self.refuse(format!("cannot write the schema file: {e}")));
                }
            },
            _ => None,
        };
        let schema_path = schema_file
            .as_ref()
            .map(|f| f.0.to_string_lossy().into_owned());
        let args: Vec<String> = self
            .args
            .iter()
            .filter_map(|t| {
                t.render(|p| match p {
                    Placeholder::Prompt => Some(prompt.as_str()),
                    Placeholder::Model => request.options.model.as_deref(),
                    Placeholder::Effort => request.options.effort.as_deref(),
                    Placeholder::AgentType => request.options.agent_type.as_deref(),
                    Placeholder::SystemPrompt => request.system_prompt.as_deref(),
                    Placeholder::Schema => schema.as_deref(),
                    Placeholder::SchemaFile => schema_path.as_deref(),
                })
            })
            .collect();
        if args.iter().any(|a| a.contains('\0')) {
            if let Some(wt) = &worktree {
                wt.remove().await;
            }
            // Cannot be an argument: this call fails, the run goes on.
            return Ok(Arc::new(CommandChild::failed(
                id,
                format!(
                    "{}: an argument would contain a NUL byte (from the prompt or an option), \
                     which no program can receive in its arguments; use prompt = \"stdin\"",
                    self.display
                ),
            )));
        }
        let spec = ProcSpec {
            program: self.program.clone(),
            args,
            env: self.child_env(),
            cwd: cwd.clone(),
            stdin: (self.prompt == PromptMode::Stdin).then(|| prompt.clone().into_bytes()),
        };
        let running = match process::spawn(&spec).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(wt) = &worktree {
                    wt.remove().await;
                }
                if e.raw_os_error() == Some(libc::E2BIG) {
                    // Too long for the kernel: this call fails, the run goes on.
                    return Ok(Arc::new(CommandChild::failed(
                        id,
                        format!(
                            "{}: the arguments are too long for the system (E2BIG; the prompt \
                             is {} bytes); use prompt = \"stdin\" for long prompts",
                            self.display,
                            prompt.len()
                        ),
                    )));
                }
                return Err(self.spawn_refusal(&cwd, &e));
            }
        };
        tracing::debug!(
            child = %id,
            pid = running.pid(),
            program = %self.program.display(),
            "command provider: started"
        );
        let job = Job {
            running,
            limits: self.limits,
            program: self.display.clone(),
            wants_json: request.schema.is_some(),
            worktree,
            schema_file,
        };
        Ok(Arc::new(CommandChild::launch(
            id,
            job,
            cancel.child_token(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn cfg(v: serde_json::Value) -> Result<CommandConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults() {
        let c = cfg(json!({ "argv": ["sh"] })).expect("valid");
        assert_eq!(c, CommandConfig::new(["sh"]));
        assert_eq!(c.output_limit, 4 << 20);
        assert_eq!(c.grace, Duration::from_secs(5));
        assert_eq!(c.timeout, None);
        assert!(c.schema_prompt);
    }

    #[test]
    fn units_are_parsed() {
        let c = cfg(json!({
            "argv": ["sh"], "timeout": "1m30s", "output_limit": "64KiB", "grace": "250ms"
        }))
        .expect("valid");
        assert_eq!(c.timeout, Some(Duration::from_secs(90)));
        assert_eq!(c.output_limit, 64 << 10);
        assert_eq!(c.grace, Duration::from_millis(250));
        let c = cfg(json!({ "argv": ["sh"], "timeout": 2, "output_limit": 100 })).expect("valid");
        assert_eq!(c.timeout, Some(Duration::from_secs(2)));
        assert_eq!(c.output_limit, 100);
    }

    #[rstest]
    #[case::unknown_key(json!({ "argv": ["sh"], "comand": "x" }), "comand")]
    #[case::bad_duration(json!({ "argv": ["sh"], "timeout": "soon" }), "soon")]
    #[case::bad_size(json!({ "argv": ["sh"], "output_limit": "lots" }), "lots")]
    #[case::bad_prompt(json!({ "argv": ["sh"], "prompt": "arg" }), "arg")]
    #[case::missing_argv(json!({ "prompt": "stdin" }), "argv")]
    fn serde_errors(#[case] v: serde_json::Value, #[case] mention: &str) {
        let err = cfg(v).expect_err("invalid");
        assert!(err.to_string().contains(mention), "{err}");
    }

    #[rstest]
    #[case::empty(json!({ "argv": [] }), "argv: must not be empty")]
    #[case::unknown_placeholder(json!({ "argv": ["sh", "-c", "{promt}"] }), "argv[2]: unknown placeholder {promt}")]
    #[case::program_placeholder(json!({ "argv": ["{model}"] }), "argv[0]")]
    #[case::argv_without_prompt(json!({ "argv": ["sh"], "prompt": "argv" }), "no argument contains {prompt}")]
    #[case::stdin_with_prompt(json!({ "argv": ["sh", "{prompt}"], "prompt": "stdin" }), "remove it from argv")]
    #[case::bad_env(json!({ "argv": ["sh"], "env": ["A=b"] }), "env[0]")]
    #[case::zero_limit(json!({ "argv": ["sh"], "output_limit": 0 }), "output_limit")]
    #[case::zero_timeout(json!({ "argv": ["sh"], "timeout": "0s" }), "timeout")]
    #[case::missing_cwd(json!({ "argv": ["sh"], "cwd": "no/such/dir" }), "cwd:")]
    #[case::not_on_path(json!({ "argv": ["dsh-no-such-program-xyz"] }), "not on PATH")]
    #[case::missing_path(json!({ "argv": ["./no-such-agent"] }), "does not exist")]
    fn config_errors(#[case] v: serde_json::Value, #[case] mention: &str) {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cfg(v).expect("deserializes");
        let err = c.usable(dir.path()).expect_err("unusable");
        assert!(err.to_string().contains(mention), "{err}");
        let err = CommandProvider::new("p", &c, dir.path()).expect_err("unusable");
        assert!(err.to_string().contains(mention), "{err}");
    }

    #[test]
    fn relative_programs_are_relative_to_the_config_dir() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("agent.sh");
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        let c = CommandConfig::new(["./agent.sh"]);
        let err = c.usable(dir.path()).expect_err("not executable yet");
        assert!(err.to_string().contains("not executable"), "{err}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let ok = c.usable(dir.path()).expect("usable");
        assert!(ok.contains("agent.sh") && ok.contains("stdin"), "{ok}");
    }

    #[rstest]
    #[case::stdin_default(&["cat"], PromptMode::Stdin)]
    #[case::argv_default(&["echo", "{prompt}"], PromptMode::Argv)]
    #[case::argv_embedded(&["echo", "--prompt={prompt}"], PromptMode::Argv)]
    fn prompt_mode_defaults(#[case] argv: &[&str], #[case] want: PromptMode) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = CommandProvider::new("p", &CommandConfig::new(argv.iter().copied()), dir.path())
            .expect("valid");
        assert_eq!(p.prompt, want);
    }

    fn request(prompt: &str) -> AgentRequest {
        AgentRequest::new(1, prompt, "l")
    }

    #[test]
    fn composed_prompts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = CommandProvider::new("p", &CommandConfig::new(["cat"]), dir.path()).expect("ok");
        let mut r = request("Do it.");
        assert_eq!(p.compose_prompt(&r), "Do it.");
        r.system_prompt = Some("You are terse.".into());
        r.schema = Some(json!({ "type": "object" }));
        let got = p.compose_prompt(&r);
        assert!(got.starts_with("You are terse.\n\nDo it.\n\n"), "{got}");
        assert!(got.ends_with("{\"type\":\"object\"}"), "{got}");

        // With {systemPrompt} in argv, and schema_prompt off: the prompt alone.
        let cfg = CommandConfig {
            schema_prompt: false,
            ..CommandConfig::new(["echo", "--sys={systemPrompt}"])
        };
        let p = CommandProvider::new("p", &cfg, dir.path()).expect("ok");
        assert_eq!(p.compose_prompt(&r), "Do it.");
    }

    #[test]
    fn the_environment_is_minimal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = CommandConfig {
            env: vec!["CARGO_PKG_NAME".into(), "DSH_SURELY_UNSET_VAR".into()],
            ..CommandConfig::new(["cat"])
        };
        let p = CommandProvider::new("p", &cfg, dir.path()).expect("ok");
        let names: Vec<String> = p
            .child_env()
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "PATH");
        for n in &names {
            assert!(
                ["PATH", "HOME", "CARGO_PKG_NAME"].contains(&n.as_str()),
                "{n}"
            );
        }
    }
}
