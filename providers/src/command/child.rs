//! One `agent()` call answered by a program: the [`Subagent`] the host
//! holds, and the task that drives the program to its end.
//!
//! The driver is a spawned task that owns the process, so a `dispose()`
//! the host abandons (it bounds the wait) never leaves the program
//! half-stopped: the task finishes SIGTERM → grace → SIGKILL → reap on its
//! own. The outcome is published only after the program's group is gone
//! and the worktree (if any) is settled, so `kept_worktree()` is known when
//! the host asks for it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::extract::extract_json;
use super::process::{Ending, Finished, ProcLimits, Running, describe_status};
use super::worktree::Worktree;
use dsh_seam::{ChildOutcome, ChildResult, KeptWorktree, Progress, ResultFault, Subagent};

/// A temporary file removed when dropped (`{schemaFile}`).
#[derive(Debug)]
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    pub fn write(stem: &str, contents: &str) -> std::io::Result<TempFile> {
        use std::io::Write;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "dsh-{stem}-{}-{nanos:08x}.json",
            std::process::id()
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let file = TempFile(path);
        f.write_all(contents.as_bytes())?;
        Ok(file)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Everything the driver needs.
pub struct Job {
    pub running: Running,
    pub limits: ProcLimits,
    /// `argv[0]` as configured, for messages.
    pub program: String,
    /// The call asked for a schema: the answer is JSON.
    pub wants_json: bool,
    pub worktree: Option<Worktree>,
    pub schema_file: Option<TempFile>,
}

/// A child answered by one or more programs run by a driver task (the
/// command provider's one program, an agent CLI's runs).
pub struct CommandChild {
    id: String,
    /// Reported on any output of the program.
    progress: Progress,
    cancel: CancellationToken,
    outcome: watch::Receiver<Option<ChildOutcome>>,
    kept: Arc<Mutex<Option<KeptWorktree>>>,
    driver: Mutex<Option<JoinHandle<()>>>,
}

/// What a driver task ends with: the outcome, and the worktree it kept.
pub type Driven = (ChildOutcome, Option<KeptWorktree>);

impl CommandChild {
    /// Starts driving `job`; `cancel` stops it (the child's own token,
    /// linked to the run's).
    pub fn launch(id: String, job: Job, cancel: CancellationToken) -> CommandChild {
        let progress = Progress::new();
        let p = progress.clone();
        CommandChild::drive_with(id.clone(), cancel, progress, move |cancel| {
            drive(id, job, cancel, p)
        })
    }

    /// Runs `driver` as the child's task, with the child's cancel token.
    /// The outcome is published when it returns, after the worktree it
    /// kept (if any) is recorded, so `kept_worktree()` is known when the
    /// host asks. The task owns its processes: a `dispose()` the host
    /// abandons never leaves a program half-stopped.
    pub fn drive_with<F, Fut>(
        id: String,
        cancel: CancellationToken,
        progress: Progress,
        driver: F,
    ) -> CommandChild
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = Driven> + Send + 'static,
    {
        let (tx, rx) = watch::channel(None);
        let kept = Arc::new(Mutex::new(None));
        let slot = kept.clone();
        let fut = driver(cancel.clone());
        let driver = tokio::spawn(async move {
            let (outcome, k) = fut.await;
            if let Ok(mut s) = slot.lock() {
                *s = k;
            }
            let _ = tx.send(Some(outcome));
        });
        CommandChild {
            id,
            progress,
            cancel,
            outcome: rx,
            kept,
            driver: Mutex::new(Some(driver)),
        }
    }

    /// A child that failed before its program could run.
    pub fn failed(id: String, reason: String) -> CommandChild {
        let (_tx, rx) = watch::channel(Some(ChildOutcome {
            result: ChildResult::Failed(reason),
            usage: None,
        }));
        CommandChild {
            id,
            progress: Progress::new(),
            cancel: CancellationToken::new(),
            outcome: rx,
            kept: Arc::default(),
            driver: Mutex::new(None),
        }
    }
}

async fn drive(id: String, job: Job, cancel: CancellationToken, progress: Progress) -> Driven {
    let Job {
        running,
        limits,
        program,
        wants_json,
        worktree,
        schema_file,
    } = job;
    let finished = running.finish(limits, &cancel, progress, None).await;
    let result = interpret(&program, wants_json, &limits, finished);
    drop(schema_file);
    let kept = match worktree {
        Some(wt) => wt.finish(&id).await,
        None => None,
    };
    (
        ChildOutcome {
            result,
            usage: None,
        },
        kept,
    )
}

/// The stderr tail as text for a reason.
pub fn stderr_text(f: &Finished) -> String {
    let text = String::from_utf8_lossy(&f.stderr_tail);
    let text = text.trim();
    if text.is_empty() {
        "(nothing on stderr)".into()
    } else if f.stderr_truncated {
        format!("…{text}")
    } else {
        text.to_string()
    }
}

/// The beginning of `text`, for messages.
fn start_of(text: &str) -> String {
    let t: String = text.trim().chars().take(200).collect();
    if t.len() < text.trim().len() {
        format!("{t}…")
    } else {
        t
    }
}

/// Turns a finished program into the child's result.
pub fn interpret(program: &str, wants_json: bool, limits: &ProcLimits, f: Finished) -> ChildResult {
    match f.ending {
        Ending::Cancelled => return ChildResult::Cancelled,
        Ending::TimedOut => {
            let t = limits.timeout.unwrap_or_default();
            return ChildResult::Failed(format!(
                "{program} did not finish within the timeout of {t:?} and was stopped: {}",
                stderr_text(&f)
            ));
        }
        Ending::Overflow => {
            return ChildResult::Failed(format!(
                "{program} wrote more than output_limit = {} bytes to stdout and was stopped; \
                 raise output_limit or make it print less",
                limits.output_limit
            ));
        }
        Ending::Exited => {}
    }
    let Some(status) = f.status else {
        return ChildResult::Failed(format!(
            "{program} could not be reaped (stuck even after SIGKILL)"
        ));
    };
    if !status.success() {
        return ChildResult::Failed(format!(
            "{program} {}: {}",
            describe_status(status),
            stderr_text(&f)
        ));
    }
    let text = String::from_utf8_lossy(&f.stdout);
    let text = text.trim_end_matches(['\n', '\r']);
    if !wants_json {
        return ChildResult::Text(text.to_string());
    }
    match extract_json(text) {
        Some(v) => ChildResult::Structured(v),
        None if text.trim().is_empty() => ChildResult::Failed(format!(
            "{program} printed nothing on stdout; the call asks for a JSON value (schema)"
        )),
        None => ChildResult::Failed(format!(
            "{program} printed no JSON value on stdout; the call asks for one (schema). \
             Its output began: {}",
            start_of(text)
        )),
    }
}

#[async_trait]
impl Subagent for CommandChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let mut rx = self.outcome.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v
                .clone()
                .ok_or_else(|| ResultFault(format!("{}: the outcome vanished", self.id))),
            Err(_) => Err(ResultFault(format!(
                "{}: the task running the program ended without an outcome",
                self.id
            ))),
        }
    }

    fn cancel(&self) {
        self.cancel.cancel();
    }

    fn progress(&self) -> Option<Progress> {
        Some(self.progress.clone())
    }

    async fn dispose(&self) {
        self.cancel.cancel();
        let handle = self.driver.lock().ok().and_then(|mut g| g.take());
        if let Some(h) = handle {
            // The task stops the program on its own; waiting here only lets
            // the host know when it is done (it bounds this wait).
            let _ = h.await;
        }
    }

    fn kept_worktree(&self) -> Option<KeptWorktree> {
        self.kept.lock().ok().and_then(|k| k.clone())
    }
}
