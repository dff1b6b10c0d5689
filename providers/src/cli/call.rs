//! One call of an agent CLI across its runs: the first, a fresh start for
//! a session that cannot be continued, the one corrective turn — each
//! run spawned, its end judged (`Verdict`), and the call driven to its
//! answer.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_protocol::schema;
use tokio_util::sync::CancellationToken;

use super::stream::{self, CliStream, Observed, cut};
use super::{CliKind, Invocation, SchemaWay, SessionUse, Shared};
use crate::command::process::{self, Ending, Finished, Running};
use crate::command::worktree::Worktree;
use crate::command::{Driven, TempFile, extract_json, stderr_text};
use crate::problems::problem_list;
use dsh_seam::{Activity, AgentRequest, ChildOutcome, ChildResult, Progress, Usage};

/// Why a run of the CLI could not be started.
#[derive(Debug, thiserror::Error)]
pub(super) enum SpawnError {
    /// An argument built from the call holds a NUL byte.
    #[error(
        "{kind}: an argument would contain a NUL byte (from an option, a schema or a system \
         prompt), which no program can receive"
    )]
    NulArgument { kind: CliKind },
    /// The CLI's program is not (any longer) a runnable file.
    #[error(
        "cannot start {program:?}: {} {why}; install it (npm install -g {package}) or set \
         program in [providers.{provider}]",
        path.display()
    )]
    NotRunnable {
        program: String,
        path: PathBuf,
        why: &'static str,
        package: &'static str,
        provider: String,
    },
    /// The working directory is gone.
    #[error("cannot start {program:?}: its working directory {} does not exist", cwd.display())]
    NoCwd { program: String, cwd: PathBuf },
    /// The arguments exceed the system's limit.
    #[error(
        "cannot start {program:?}: its arguments are too long for the system (E2BIG; a \
         very large schema or system prompt)"
    )]
    TooLong { program: String },
    /// dsh's reaper is not (any longer) a runnable file.
    #[error("cannot start dsh's reaper {}: {why}", path.display())]
    Reaper { path: PathBuf, why: &'static str },
    /// Anything else the system said.
    #[error("cannot start {program:?} ({}): {source}", path.display())]
    Io {
        program: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The prompt that continues an interrupted session.
pub(super) const CONTINUE_PROMPT: &str = "Your work on this task was interrupted before you gave your final \
     answer. Check what you already did, continue from there, and give the final answer the task \
     asks for.";

/// The prompt of the one corrective turn.
fn correction(problems: &str) -> String {
    format!(
        "{problems}\nAnswer again: give only the corrected JSON value, fixing every problem listed."
    )
}

/// The call's state across its runs of the CLI.
pub(super) struct Call {
    pub(super) shared: Arc<Shared>,
    /// The child's id (`NAME-N`): a kept worktree's branch is `dsh/ID`.
    pub(super) id: String,
    pub(super) request: AgentRequest,
    pub(super) worktree: Option<Worktree>,
    pub(super) cwd: PathBuf,
    pub(super) schema_file: Option<TempFile>,
    /// How the next run starts.
    pub(super) session: SessionUse,
    /// The next run's prompt.
    pub(super) prompt: String,
    /// A resumed session that failed was replaced by a fresh one.
    pub(super) fell_back: bool,
    /// The one corrective turn was spent.
    pub(super) corrected: bool,
}

impl Call {
    fn invocation(&self) -> Invocation<'_> {
        Invocation {
            request: &self.request,
            cfg: &self.shared.cfg,
            session: self.session.clone(),
            schema_file: self.schema_file.as_ref().map(|f| f.0.as_path()),
        }
    }

    /// The first prompt: the call's own, after a defined agent type's system
    /// prompt when the CLI takes none of its own (a built-in's never: see
    /// [`AgentRequest::system_prompt_to_prepend`]), and with the schema
    /// instruction when the CLI cannot enforce the schema.
    pub(super) fn first_prompt(kind: CliKind, request: &AgentRequest) -> String {
        let mut p = String::new();
        if !kind.takes_system_prompt()
            && let Some(sp) = request.system_prompt_to_prepend()
        {
            p.push_str(sp);
            p.push_str("\n\n");
        }
        p.push_str(&request.prompt);
        if let Some(schema) = &request.schema
            && kind.schema_way(schema) == SchemaWay::Prompt
        {
            p.push_str(
                "\n\nAnswer with one JSON value that matches this JSON Schema, and print it last:\n",
            );
            p.push_str(&schema.to_string());
        }
        p
    }

    pub(super) fn fresh_session(kind: CliKind) -> SessionUse {
        SessionUse::Fresh {
            id: kind
                .picks_session_id()
                .then(|| uuid::Uuid::new_v4().to_string()),
        }
    }

    pub(super) async fn spawn(&self) -> Result<Running, SpawnError> {
        let sh = &self.shared;
        let args = sh.kind.args(&self.invocation());
        if args.iter().any(|a| a.contains('\0')) {
            return Err(SpawnError::NulArgument { kind: sh.kind });
        }
        let mut spec = sh.spec(args, &self.cwd, self.prompt.clone().into_bytes());
        // A traced run: the CLI's own spans nest under this call's.
        crate::command::pass_trace_parent(&mut spec.env, self.request.trace_parent.as_deref());
        process::spawn(&spec)
            .await
            .map_err(|e| sh.spawn_problem(&self.cwd, e))
    }

    /// What to make of a finished run: the answer, or another run.
    pub(super) fn judge(&mut self, finished: &Finished, seen: Observed, skipped: u64) -> Verdict {
        let kind = self.shared.kind;
        let limits = self.shared.limits();
        match finished.ending {
            Ending::Cancelled => return Verdict::Done(ChildResult::Cancelled),
            Ending::TimedOut => {
                return Verdict::Done(ChildResult::Failed(format!(
                    "{kind} did not finish within the timeout of {:?} and was stopped",
                    limits.timeout.unwrap_or_default()
                )));
            }
            Ending::Overflow => {
                return Verdict::Done(ChildResult::Failed(format!(
                    "{kind} streamed more than output_limit = {} bytes and was stopped; raise \
                     output_limit",
                    limits.output_limit
                )));
            }
            Ending::Exited => {}
        }
        let status_ok = finished.status.is_some_and(|s| s.success());
        let answered = seen.finished && seen.error.is_none() && status_ok;
        // A session that could not be continued (gone, or made by another
        // version): start afresh, once, before any model turn was spent.
        if let SessionUse::Resume { id } = self.session.clone()
            && !answered
            && seen.turns == 0
            && !self.fell_back
        {
            let why = seen
                .error
                .clone()
                .unwrap_or_else(|| failure_text(kind, finished, skipped));
            self.fell_back = true;
            self.session = Self::fresh_session(kind);
            self.prompt = Self::first_prompt(kind, &self.request);
            return Verdict::Again(format!(
                "could not continue session {id} ({}); starting afresh",
                cut(&why, 300)
            ));
        }
        if let Some(e) = seen.error {
            return Verdict::Done(ChildResult::Failed(format!("{kind}: {e}")));
        }
        if !answered {
            return Verdict::Done(ChildResult::Failed(failure_text(kind, finished, skipped)));
        }
        let Some(schema) = self.request.schema.clone() else {
            return Verdict::Done(ChildResult::Text(seen.text.unwrap_or_default()));
        };
        let text = seen.text.unwrap_or_default();
        let problems = match seen.structured.or_else(|| extract_json(&text)) {
            Some(v) => {
                let problems = schema::validate(&schema, &v, "value");
                if problems.is_empty() {
                    return Verdict::Done(ChildResult::Structured(v));
                }
                problem_list(&problems)
            }
            None => format!(
                "the answer is not a JSON value; it starts: {}",
                cut(&text, 200)
            ),
        };
        match seen.session {
            Some(id) if !self.corrected => {
                self.corrected = true;
                self.session = SessionUse::Resume { id };
                self.prompt = correction(&problems);
                Verdict::Again(format!("a corrective turn: {}", cut(&problems, 300)))
            }
            _ if self.corrected => Verdict::Done(ChildResult::Failed(format!(
                "{problems}\n(after one corrective turn)"
            ))),
            _ => Verdict::Done(ChildResult::Failed(problems)),
        }
    }
}

/// What a finished run of the CLI leads to.
pub(super) enum Verdict {
    /// The call's result.
    Done(ChildResult),
    /// Run the CLI again (a fresh session, or the corrective turn), for
    /// this reason.
    Again(String),
}

/// Why a run that gave no answer failed: its exit and the end of stderr.
fn failure_text(kind: CliKind, f: &Finished, skipped: u64) -> String {
    let how = match f.status {
        Some(s) if !s.success() => process::describe_status(s),
        Some(_) => "exited without a final result".to_string(),
        None => "could not be reaped (stuck even after SIGKILL)".to_string(),
    };
    let skipped = if skipped > 0 {
        format!(
            " ({skipped} line(s) over {} MiB were skipped)",
            stream::MAX_LINE >> 20
        )
    } else {
        String::new()
    };
    format!("{kind} {how}{skipped}: {}", stderr_text(f))
}

/// Runs the call to its answer: the first run (already spawned), then a
/// fresh start for a session that could not be continued, or the one
/// corrective turn.
pub(super) async fn drive(
    mut call: Call,
    first: Running,
    cancel: CancellationToken,
    progress: Progress,
) -> Driven {
    let sh = call.shared.clone();
    let mut running = Some(first);
    let mut usage: Option<Usage> = None;
    // The session total the last run of this call reported (a CLI whose
    // usage is the session's total: a resumed run adds only the rest).
    let mut session_total: Option<(String, Usage)> = None;
    let mut attempt = 1u32;
    let result = loop {
        let run = match running.take() {
            Some(r) => r,
            None => match call.spawn().await {
                Ok(r) => r,
                Err(problem) => break ChildResult::Failed(problem.to_string()),
            },
        };
        let mut stream = CliStream::new(sh.kind.dialect(), sh.name.clone(), progress.clone());
        let finished = {
            let mut tap = |d: &[u8]| stream.feed(d);
            run.finish(sh.limits(), &cancel, progress.clone(), Some(&mut tap))
                .await
        };
        let (seen, skipped) = stream.end();
        if let Some(mut u) = seen.usage {
            if seen.usage_is_session_total {
                if let (Some((id, before)), Some(now)) = (&session_total, &seen.session)
                    && id == now
                {
                    u = u.minus(*before);
                }
                if let Some(id) = &seen.session {
                    session_total = Some((id.clone(), seen.usage.unwrap_or(u)));
                }
            }
            usage = Some(usage.map_or(u, |t| t.plus(u)));
        }
        let reason = match call.judge(&finished, seen, skipped) {
            Verdict::Done(r) => break r,
            Verdict::Again(reason) => reason,
        };
        attempt += 1;
        progress.activity(Activity::Retry {
            attempt,
            reason,
            partial: false,
        });
    };
    drop(call.schema_file.take());
    let kept = match call.worktree.take() {
        Some(wt) => wt.finish(&call.id).await,
        None => None,
    };
    (ChildOutcome { result, usage }, kept)
}
