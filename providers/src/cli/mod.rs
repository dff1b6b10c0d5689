//! Agent CLIs as providers: `kind = "claude-code"` (Claude Code's `claude
//! -p`), `"codex"` (`codex exec`), `"qwen"` (Qwen Code's `qwen -p`). Each
//! `agent()` call runs the CLI once (or a few times, see below) in the
//! configured directory or a fresh git worktree; dsh knows each CLI's
//! flags, so a table needs no `argv`.
//!
//! What a call gets, per CLI (the modules `claude`, `codex`, `qwen`):
//! - the prompt on stdin, the call's model, effort, agent type,
//!   disallowed tools and the table's permission mode and allowed tools as
//!   the CLI's own flags;
//! - a schema enforced by the CLI where it can (`--json-schema`,
//!   `--output-schema`), else put in the prompt; the answer is validated
//!   here, and a wrong one gets **one corrective turn** in the same
//!   session;
//! - its JSON stream read while it runs (module `stream`): tool calls, turns
//!   and tokens become activity events, any output is progress for
//!   `stallMs`, and the result line gives the answer, the usage and (for
//!   Claude Code) the cost;
//! - its session id reported as soon as known ([`dsh_seam::Session`]), so the
//!   journal can have an interrupted call **continue** its session on
//!   `dsh workflow resume` ([`AgentRequest::resume`]); a session that
//!   cannot be continued starts afresh, once, and says so.
//!
//! Processes are the command provider's (its `process` module): a
//! process group, SIGTERM → grace → SIGKILL, always reaped. On top of
//! that each CLI runs under dsh's reaper (`dsh __worker reap`), a child
//! subreaper that also stops what the CLI started in sessions of its own
//! (Claude Code's shell commands) — see docs/providers.md.
//!
//! This module is not a generic command runner: that is `kind =
//! "command"`.

mod call;
mod claude;
mod codex;
pub mod config;
mod kind;
pub mod probe;
mod qwen;
mod stream;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::SetupError;
use crate::command::process::{ProcLimits, ProcSpec, REAPER_MARGIN};
use crate::command::worktree::Worktree;
use crate::command::{CommandChild, TempFile, minimal_env, not_runnable};
use call::{CONTINUE_PROMPT, Call, SpawnError, drive};
use dsh_exec::WorkerCommand;
use dsh_seam::{AgentRequest, Progress, StartRefused, Subagent, SubagentProvider};
use stream::Dialect;

pub use config::{CliConfig, CliKind};
pub(crate) use kind::CliProviderKind;
pub use kind::CliSettings;

/// Whether a run starts a conversation or continues one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionUse {
    /// A new conversation; `id` when dsh picks it (Claude Code's
    /// `--session-id`).
    Fresh { id: Option<String> },
    /// Continue the CLI's session `id`.
    Resume { id: String },
}

/// One run of the CLI, as its flags are built from it.
pub(crate) struct Invocation<'a> {
    pub request: &'a AgentRequest,
    pub cfg: &'a CliConfig,
    pub session: SessionUse,
    /// The schema file (`codex --output-schema`), when the call has a
    /// schema.
    pub schema_file: Option<&'a Path>,
}

impl Invocation<'_> {
    /// The call's model, else the table's.
    pub fn model(&self) -> Option<&str> {
        self.request
            .options
            .model
            .as_deref()
            .or(self.cfg.model.as_deref())
    }

    /// The most this run may spend: the table's `max_budget_usd` and what
    /// is left of the run's cost budget, whichever is smaller.
    pub fn cost_cap(&self) -> Option<f64> {
        match (self.cfg.max_budget_usd, self.request.cost_cap_usd) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl CliKind {
    /// The CLI's arguments (after the program) for `inv`.
    fn args(self, inv: &Invocation<'_>) -> Vec<String> {
        match self {
            CliKind::ClaudeCode => claude::args(inv),
            CliKind::Codex => codex::args(inv),
            CliKind::Qwen => qwen::args(inv),
        }
    }

    /// A reader of the CLI's stream.
    fn dialect(self) -> Box<dyn Dialect> {
        match self {
            CliKind::ClaudeCode => Box::<claude::Lines>::default(),
            CliKind::Codex => Box::<codex::Lines>::default(),
            // Qwen Code's stream is Claude Code's format.
            CliKind::Qwen => Box::<claude::Lines>::default(),
        }
    }

    /// dsh picks the session id before the CLI starts (so the journal has
    /// it even if the CLI dies before saying it).
    fn picks_session_id(self) -> bool {
        matches!(self, CliKind::ClaudeCode | CliKind::Qwen)
    }

    /// How the CLI gets `schema`.
    fn schema_way(self, schema: &Value) -> SchemaWay {
        match self {
            CliKind::ClaudeCode | CliKind::Qwen => SchemaWay::Flag,
            CliKind::Codex if codex::strict_ready(schema) => SchemaWay::File,
            CliKind::Codex => SchemaWay::Prompt,
        }
    }

    /// The CLI takes a system prompt of its own (else it goes in front of
    /// the prompt).
    fn takes_system_prompt(self) -> bool {
        matches!(self, CliKind::ClaudeCode | CliKind::Qwen)
    }
}

/// How a call's schema reaches the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemaWay {
    /// As a flag the CLI enforces (`claude --json-schema`, `qwen
    /// --json-schema`).
    Flag,
    /// As a file the CLI enforces (`codex --output-schema`).
    File,
    /// In the prompt, with an instruction; dsh alone checks the answer.
    Prompt,
}

/// Runs an agent CLI per `agent()` call.
pub struct CliProvider {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    kind: CliKind,
    cfg: CliConfig,
    program: PathBuf,
    cwd: PathBuf,
    worktree_dir: PathBuf,
    /// dsh's reaper (`… reap --grace-ms N -- PROGRAM …`), when found.
    reaper: Option<WorkerCommand>,
    next: AtomicU64,
}

impl std::fmt::Debug for CliProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliProvider")
            .field("name", &self.shared.name)
            .field("kind", &self.shared.kind)
            .field("program", &self.shared.program)
            .finish_non_exhaustive()
    }
}

impl CliProvider {
    /// Checks `cfg` and builds the provider; `base_dir` is the config
    /// file's directory. `reaper` is dsh's worker program (it has the
    /// `reap` mode); without one the CLI runs directly, and what it starts
    /// in sessions of its own is not stopped with it.
    pub fn new(
        name: &str,
        kind: CliKind,
        cfg: &CliConfig,
        base_dir: &Path,
        reaper: Option<WorkerCommand>,
    ) -> Result<Self, SetupError> {
        let c = cfg.check(kind, base_dir)?;
        Ok(CliProvider {
            shared: Arc::new(Shared {
                name: name.into(),
                kind,
                cfg: cfg.clone(),
                program: c.program,
                cwd: c.cwd,
                worktree_dir: c.worktree_dir,
                reaper,
                next: AtomicU64::new(1),
            }),
        })
    }
}

impl Shared {
    fn refuse(&self, what: impl std::fmt::Display) -> StartRefused {
        StartRefused::agent_start(format!("provider {} ({}): {what}", self.name, self.kind))
    }

    fn limits(&self) -> ProcLimits {
        ProcLimits {
            timeout: self.cfg.timeout,
            output_limit: self.cfg.output_limit,
            grace: if self.reaper.is_some() {
                self.cfg.grace + REAPER_MARGIN
            } else {
                self.cfg.grace
            },
        }
    }

    /// The CLI's environment: `PATH`, `HOME`, the kind's variables and the
    /// table's `env`, each when set.
    fn env(&self) -> Vec<(OsString, OsString)> {
        minimal_env(
            self.kind
                .default_env()
                .iter()
                .copied()
                .chain(self.cfg.env.iter().map(String::as_str)),
        )
    }

    /// What to spawn for `args`: the CLI under the reaper, or alone.
    fn spec(&self, args: Vec<String>, cwd: &Path, stdin: Vec<u8>) -> ProcSpec {
        let (program, args) = match &self.reaper {
            Some(w) => {
                let mut a = w.args.clone();
                a.extend([
                    "reap".to_string(),
                    "--grace-ms".to_string(),
                    self.cfg.grace.as_millis().to_string(),
                    "--".to_string(),
                ]);
                a.push(self.program.to_string_lossy().into_owned());
                a.extend(args);
                (w.program.clone(), a)
            }
            None => (self.program.clone(), args),
        };
        ProcSpec {
            program,
            args,
            env: self.env(),
            cwd: cwd.to_path_buf(),
            stdin: Some(stdin),
        }
    }

    /// Why the CLI could not be spawned (`e`, the spawn's error), for the
    /// user: the likeliest cause is looked for before `e` is given as is.
    fn spawn_problem(&self, cwd: &Path, e: std::io::Error) -> SpawnError {
        let program = self.cfg.program_name(self.kind).to_string();
        if let Some(why) = not_runnable(&self.program) {
            return SpawnError::NotRunnable {
                program,
                path: self.program.clone(),
                why,
                package: self.kind.npm_package(),
                provider: self.name.clone(),
            };
        }
        if !cwd.is_dir() {
            return SpawnError::NoCwd {
                program,
                cwd: cwd.to_path_buf(),
            };
        }
        if e.raw_os_error() == Some(libc::E2BIG) {
            return SpawnError::TooLong { program };
        }
        if let Some(w) = &self.reaper
            && let Some(why) = not_runnable(&w.program)
        {
            return SpawnError::Reaper {
                path: w.program.clone(),
                why,
            };
        }
        SpawnError::Io {
            program,
            path: self.program.clone(),
            source: e,
        }
    }
}

#[async_trait]
impl SubagentProvider for CliProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let sh = &self.shared;
        if cancel.is_cancelled() {
            return Err(sh.refuse("the run was cancelled before the CLI started"));
        }
        let n = sh.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{n}", sh.name);
        let worktree = match request.options.isolation.as_deref() {
            None => None,
            Some("worktree") => Some(
                Worktree::create(&sh.cwd, &sh.worktree_dir, &id)
                    .await
                    .map_err(|e| sh.refuse(e))?,
            ),
            Some(other) => {
                return Err(StartRefused {
                    code: ErrorCode::UnsupportedOption,
                    message: format!(
                        "provider {} ({}): isolation {other:?} is not supported; the only \
                         isolation is \"worktree\"",
                        sh.name, sh.kind
                    ),
                });
            }
        };
        let cwd = worktree
            .as_ref()
            .map_or_else(|| sh.cwd.clone(), |w| w.run_dir.clone());
        let schema_file = match &request.schema {
            Some(s) if sh.kind.schema_way(s) == SchemaWay::File => {
                match TempFile::write(&id, &s.to_string()) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        if let Some(wt) = &worktree {
                            wt.remove().await;
                        }
                        return Err(sh.refuse(format!("cannot write the schema file: {e}")));
                    }
                }
            }
            _ => None,
        };
        // An earlier attempt's session of this call, if this provider made
        // it: continued instead of started afresh.
        let resume = request
            .resume
            .as_ref()
            .filter(|s| s.provider == sh.name)
            .map(|s| s.id.clone());
        let (session, prompt) = match resume {
            Some(id) => (SessionUse::Resume { id }, CONTINUE_PROMPT.to_string()),
            None => (
                Call::fresh_session(sh.kind),
                Call::first_prompt(sh.kind, &request),
            ),
        };
        let call = Call {
            shared: sh.clone(),
            id: id.clone(),
            request,
            worktree,
            cwd,
            schema_file,
            session,
            prompt,
            fell_back: false,
            corrected: false,
        };
        let progress = Progress::new();
        // A session dsh picked is known before the CLI says it.
        if let SessionUse::Fresh { id: Some(id) } | SessionUse::Resume { id } = &call.session {
            progress.set_session(dsh_seam::Session {
                provider: sh.name.clone(),
                id: id.clone(),
            });
        }
        let running = match call.spawn().await {
            Ok(r) => r,
            Err(problem) => {
                if let Some(wt) = &call.worktree {
                    wt.remove().await;
                }
                return Err(sh.refuse(problem));
            }
        };
        tracing::debug!(child = %id, pid = running.pid(), kind = %sh.kind, "agent CLI: started");
        let p = progress.clone();
        Ok(Arc::new(CommandChild::drive_with(
            id,
            cancel.child_token(),
            progress,
            move |cancel| drive(call, running, cancel, p),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::call::Verdict;
    use super::stream::Observed;
    use super::*;
    use crate::command::process::{Ending, Finished};
    use dsh_seam::ChildResult;
    use serde_json::json;
    use std::os::unix::process::ExitStatusExt;

    /// Issue 33 §3: a CLI without a system prompt of its own gets a
    /// built-in type's call with the prompt unchanged, a defined type's
    /// with its system prompt in front.
    #[test]
    fn a_built_in_types_system_prompt_is_not_put_in_the_prompt() {
        use dsh_seam::AgentTypeOrigin;
        let mut r = AgentRequest::new(1, "Find it.", "l");
        r.options.agent_type = Some("Explore".into());
        r.system_prompt = Some("dsh's words for Explore".into());
        r.agent_type_origin = Some(AgentTypeOrigin::BuiltIn);
        assert_eq!(Call::first_prompt(CliKind::Codex, &r), "Find it.");
        r.agent_type_origin = Some(AgentTypeOrigin::Defined);
        assert_eq!(
            Call::first_prompt(CliKind::Codex, &r),
            "dsh's words for Explore\n\nFind it."
        );
    }

    fn call(kind: CliKind, request: AgentRequest, session: SessionUse) -> Call {
        let dir = std::env::temp_dir();
        Call {
            shared: Arc::new(Shared {
                name: "p".into(),
                kind,
                cfg: CliConfig::default(),
                program: "/bin/true".into(),
                cwd: dir.clone(),
                worktree_dir: dir.clone(),
                reaper: None,
                next: AtomicU64::new(1),
            }),
            id: "p-1".into(),
            prompt: Call::first_prompt(kind, &request),
            request,
            worktree: None,
            cwd: dir,
            schema_file: None,
            session,
            fell_back: false,
            corrected: false,
        }
    }

    fn exited(code: i32) -> Finished {
        Finished {
            ending: Ending::Exited,
            status: Some(std::process::ExitStatus::from_raw(code << 8)),
            stdout: Vec::new(),
            stderr_tail: b"No conversation found".to_vec(),
            stderr_truncated: false,
        }
    }

    fn answered(text: &str, session: &str) -> Observed {
        Observed {
            session: Some(session.into()),
            text: Some(text.into()),
            finished: true,
            turns: 1,
            ..Observed::default()
        }
    }

    #[test]
    fn a_session_that_cannot_be_continued_starts_afresh_once() {
        let mut c = call(
            CliKind::ClaudeCode,
            AgentRequest::new(1, "the task", "l"),
            SessionUse::Resume { id: "gone".into() },
        );
        c.prompt = CONTINUE_PROMPT.into();
        let v = c.judge(&exited(1), Observed::default(), 0);
        assert!(
            matches!(v, Verdict::Again(ref r) if r.contains("could not continue session gone"))
        );
        assert!(
            matches!(c.session, SessionUse::Fresh { id: Some(_) }),
            "a new id for Claude Code"
        );
        assert_eq!(c.prompt, "the task");
        // A second failure is the call's.
        let v = c.judge(&exited(1), Observed::default(), 0);
        assert!(
            matches!(v, Verdict::Done(ChildResult::Failed(ref m)) if m.contains("exited with status 1"))
        );
    }

    #[test]
    fn a_wrong_answer_gets_one_corrective_turn_in_its_session() {
        let mut req = AgentRequest::new(1, "count", "l");
        req.schema = Some(
            json!({ "type": "object", "properties": { "n": { "type": "integer" } }, "required": ["n"] }),
        );
        let mut c = call(CliKind::Codex, req, SessionUse::Fresh { id: None });
        // Codex gets a loose schema in its prompt.
        assert!(c.prompt.contains("\"required\":[\"n\"]"), "{}", c.prompt);
        let v = c.judge(&exited(0), answered("{\"n\": \"two\"}", "t-1"), 0);
        assert!(matches!(v, Verdict::Again(ref r) if r.contains("corrective")));
        assert_eq!(c.session, SessionUse::Resume { id: "t-1".into() });
        assert!(c.prompt.contains("value.n"), "{}", c.prompt);
        let v = c.judge(&exited(0), answered("still not", "t-1"), 0);
        assert!(
            matches!(v, Verdict::Done(ChildResult::Failed(ref m)) if m.contains("after one corrective turn"))
        );
    }

    #[test]
    fn a_right_answer_and_a_cancel_end_the_call() {
        let mut req = AgentRequest::new(1, "count", "l");
        req.schema = Some(json!({ "type": "object" }));
        let mut c = call(CliKind::ClaudeCode, req, SessionUse::Fresh { id: None });
        let mut seen = answered("", "s");
        seen.structured = Some(json!({ "n": 2 }));
        assert!(matches!(
            c.judge(&exited(0), seen, 0),
            Verdict::Done(ChildResult::Structured(v)) if v == json!({ "n": 2 })
        ));
        let mut f = exited(0);
        f.ending = Ending::Cancelled;
        assert!(matches!(
            c.judge(&f, Observed::default(), 0),
            Verdict::Done(ChildResult::Cancelled)
        ));
    }

    #[test]
    fn the_cost_cap_is_the_smaller_of_the_two() {
        let mut req = AgentRequest::new(1, "p", "l");
        let mut cfg = CliConfig::default();
        let inv = |req: &AgentRequest, cfg: &CliConfig| {
            Invocation {
                request: req,
                cfg,
                session: SessionUse::Fresh { id: None },
                schema_file: None,
            }
            .cost_cap()
        };
        assert_eq!(inv(&req, &cfg), None);
        cfg.max_budget_usd = Some(2.0);
        assert_eq!(inv(&req, &cfg), Some(2.0));
        req.cost_cap_usd = Some(0.5);
        assert_eq!(inv(&req, &cfg), Some(0.5));
        cfg.max_budget_usd = None;
        assert_eq!(inv(&req, &cfg), Some(0.5));
    }
}
