//! The `command` provider: agent CLIs (`claude -p`, `codex exec`,
//! `gemini`) or any program, one process per `agent()` call.
//!
//! Each call runs `argv` (placeholders substituted, see the `template`
//! module) in a new process group with a clean environment (only `PATH`,
//! `HOME` and the variables listed in `env`), the prompt on stdin or in an
//! argument, and takes the final answer from stdout. With a `schema`, the
//! answer is the JSON value in stdout (the whole of it, or the last
//! object/array after some chatter), which the host validates. A non-zero
//! exit fails the call with the status and the end of stderr. Timeouts, the
//! stdout cap and cancellation stop the program's whole group: SIGTERM, the
//! grace, SIGKILL; nothing outlives the call (the `process` module).
//! `isolation: "worktree"` runs the program in a fresh git worktree, kept
//! on a branch when the program changed something (the `worktree` module).
//!
//! docs/providers.md ("The command provider") is the user's reference.

mod child;
mod config;
mod extract;
mod kind;
pub(crate) mod process;
mod template;
pub(crate) mod worktree;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::SetupError;
pub(crate) use child::{CommandChild, Driven, Job, TempFile, stderr_text};
use dsh_seam::{AgentRequest, StartRefused, Subagent, SubagentProvider};
use process::{ProcLimits, ProcSpec};
use template::{ArgTemplate, Placeholder};
use worktree::Worktree;

pub use config::{CommandConfig, DEFAULT_GRACE, DEFAULT_OUTPUT_LIMIT, FALLBACK_PATH, PromptMode};
pub use extract::extract_json;
pub(crate) use kind::CommandKind;

pub(crate) use config::{not_runnable, search_path};
/// `TRACEPARENT` (W3C trace context, which OpenTelemetry SDKs and
/// Claude Code read) in a program's environment, when the call is traced;
/// in place of one the environment passed through.
pub(crate) fn pass_trace_parent(env: &mut Vec<(OsString, OsString)>, trace_parent: Option<&str>) {
    let Some(tp) = trace_parent else { return };
    env.retain(|(k, _)| k != "TRACEPARENT");
    env.push(("TRACEPARENT".into(), tp.into()));
}

/// A program's environment: `PATH` and `HOME` from dsh's (PATH falls back
/// to [`FALLBACK_PATH`]), plus each variable of `names` that is set.
/// Nothing else.
pub(crate) fn minimal_env<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(OsString, OsString)> {
    let mut env = vec![(OsString::from("PATH"), search_path())];
    if let Some(home) = std::env::var_os("HOME") {
        env.push(("HOME".into(), home));
    }
    for name in names {
        if name == "PATH" || name == "HOME" || env.iter().any(|(k, _)| k == name) {
            continue;
        }
        if let Some(v) = std::env::var_os(name) {
            env.push((name.into(), v));
        }
    }
    env
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
    /// dsh's reaper (`… reap --grace-ms N -- PROGRAM …`), when the
    /// provider runs its programs under it ([`CommandProvider::with_reaper`]).
    reaper: Option<dsh_exec::WorkerCommand>,
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
            reaper: None,
            next: AtomicU64::new(1),
        }
        .with_reaper(cfg.reaper.clone()))
    }

    /// Runs every program under dsh's reaper `reaper` (a `dsh-worker`, or
    /// `dsh __worker`: its `reap` mode), as agent CLIs run: a child
    /// subreaper that stops everything the program started, in its group
    /// or not, when the program ends, when it is stopped, and when dsh
    /// itself dies (its parent-death signal is SIGTERM, which it answers
    /// by stopping the whole subtree). Without it (`None`, the default of
    /// [`CommandProvider::new`]) a program's group is killed when the call
    /// ends, but a dsh killed outright leaves the program's background
    /// jobs running. [`CommandProvider::new`] takes it from the
    /// configuration's `reaper`, which dsh's own configuration
    /// (`dsh.toml`) always sets when the worker program is found.
    #[must_use]
    pub fn with_reaper(mut self, reaper: Option<dsh_exec::WorkerCommand>) -> Self {
        if reaper.is_some() && self.reaper.is_none() {
            // The reaper stops the leftovers within the program's grace;
            // the host must not SIGKILL it while it does.
            self.limits.grace += process::REAPER_MARGIN;
        }
        self.reaper = reaper;
        self
    }

    /// What to spawn: the program under the reaper, or alone.
    fn spawn_target(&self, args: Vec<String>) -> (PathBuf, Vec<String>) {
        match &self.reaper {
            Some(w) => {
                let grace = self.limits.grace.saturating_sub(process::REAPER_MARGIN);
                let mut a = w.args.clone();
                a.extend([
                    "reap".to_string(),
                    "--grace-ms".to_string(),
                    // The reaper's own ceiling is an hour.
                    grace.as_millis().min(3_600_000).to_string(),
                    "--".to_string(),
                    self.program.to_string_lossy().into_owned(),
                ]);
                a.extend(args);
                (w.program.clone(), a)
            }
            None => (self.program.clone(), args),
        }
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program's environment (see [`minimal_env`]).
    fn child_env(&self) -> Vec<(OsString, OsString)> {
        minimal_env(self.env.iter().map(String::as_str))
    }

    /// The prompt as sent: a defined agent type's system prompt first when
    /// no argument takes `{systemPrompt}` (a built-in's never: see
    /// [`AgentRequest::system_prompt_to_prepend`]), and the schema
    /// instruction last when asked for.
    fn compose_prompt(&self, req: &AgentRequest) -> String {
        let mut p = String::new();
        if !self.system_in_args
            && let Some(sp) = req.system_prompt_to_prepend()
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

/// Removes the worktree of a call that did not start.
async fn remove_worktree(worktree: Option<&Worktree>) {
    if let Some(wt) = worktree {
        wt.remove().await;
    }
}

impl CommandProvider {
    /// The call's worktree under `isolation: "worktree"` (named `id`);
    /// `None` without isolation; any other isolation is refused.
    async fn isolate(
        &self,
        request: &AgentRequest,
        id: &str,
    ) -> Result<Option<Worktree>, StartRefused> {
        match request.options.isolation.as_deref() {
            None => Ok(None),
            Some("worktree") => Worktree::create(&self.cwd, &self.worktree_dir, id)
                .await
                .map(Some)
                .map_err(|e| self.refuse(e.to_string())),
            Some(other) => Err(StartRefused {
                code: ErrorCode::UnsupportedOption,
                message: format!(
                    "provider {} (command): isolation {other:?} is not supported; the only \
                     isolation is \"worktree\"",
                    self.name
                ),
            }),
        }
    }

    /// The program's arguments for one call: each `argv` template with the
    /// call's values (an argument whose value is absent is dropped).
    fn render_args(
        &self,
        request: &AgentRequest,
        prompt: &str,
        schema: Option<&str>,
        schema_path: Option<&str>,
    ) -> Vec<String> {
        let tools = request.tools.as_ref().map(|t| t.join(","));
        let disallowed = request.disallowed_tools.join(",");
        self.args
            .iter()
            .filter_map(|t| {
                t.render(|p| match p {
                    Placeholder::Prompt => Some(prompt),
                    Placeholder::Model => request.options.model.as_deref(),
                    Placeholder::Effort => request.options.effort.as_deref(),
                    Placeholder::AgentType => request.options.agent_type.as_deref(),
                    Placeholder::SystemPrompt => request.system_prompt.as_deref(),
                    Placeholder::Schema => schema,
                    Placeholder::SchemaFile => schema_path,
                    Placeholder::Tools => tools.as_deref(),
                    Placeholder::DisallowedTools => Some(disallowed.as_str()),
                })
            })
            .collect()
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

        let worktree = self.isolate(&request, &id).await?;
        let cwd = worktree
            .as_ref()
            .map_or_else(|| self.cwd.clone(), |w| w.run_dir.clone());

        let prompt = self.compose_prompt(&request);
        let schema = request.schema.as_ref().map(|s| s.to_string());
        let schema_file = match &schema {
            Some(s) if self.schema_file_in_args => match TempFile::write(&id, s) {
                Ok(f) => Some(f),
                Err(e) => {
                    remove_worktree(worktree.as_ref()).await;
                    return Err(self.refuse(format!("cannot write the schema file: {e}")));
                }
            },
            _ => None,
        };
        let schema_path = schema_file
            .as_ref()
            .map(|f| f.0.to_string_lossy().into_owned());
        let args = self.render_args(&request, &prompt, schema.as_deref(), schema_path.as_deref());
        if args.iter().any(|a| a.contains('\0')) {
            remove_worktree(worktree.as_ref()).await;
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
        // Under the reaper a missing program would only show as its exit
        // status 127: refuse the start the way a direct spawn does.
        if self.reaper.is_some() && not_runnable(&self.program).is_some() {
            remove_worktree(worktree.as_ref()).await;
            return Err(
                self.spawn_refusal(&cwd, &std::io::Error::from(std::io::ErrorKind::NotFound))
            );
        }
        let (program, args) = self.spawn_target(args);
        let spec = ProcSpec {
            program,
            args,
            env: {
                let mut env = self.child_env();
                pass_trace_parent(&mut env, request.trace_parent.as_deref());
                env
            },
            cwd: cwd.clone(),
            stdin: (self.prompt == PromptMode::Stdin).then(|| prompt.clone().into_bytes()),
        };
        let running = match process::spawn(&spec).await {
            Ok(r) => r,
            Err(e) => {
                remove_worktree(worktree.as_ref()).await;
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
    use std::time::Duration;

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

    /// Issue 33 §3: Claude Code sends a built-in type's call with the prompt
    /// as the script wrote it, so a command gets it unchanged; dsh's words
    /// for the type reach only `{systemPrompt}`. A defined type's system
    /// prompt is still put in front (its instructions must not be lost).
    #[test]
    fn a_built_in_types_system_prompt_is_never_prepended() {
        use dsh_seam::AgentTypeOrigin;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = CommandProvider::new("p", &CommandConfig::new(["cat"]), dir.path()).expect("ok");
        let mut r = request("Do it.");
        r.options.agent_type = Some("general-purpose".into());
        r.system_prompt = Some("dsh's words for general-purpose".into());
        r.agent_type_origin = Some(AgentTypeOrigin::BuiltIn);
        assert_eq!(p.compose_prompt(&r), "Do it.");
        r.agent_type_origin = Some(AgentTypeOrigin::Defined);
        assert_eq!(
            p.compose_prompt(&r),
            "dsh's words for general-purpose\n\nDo it."
        );
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
