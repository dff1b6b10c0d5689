//! The child of one API-provider call: the task that runs its [`Job`],
//! its answer, cancel and dispose. Shared by every provider of the loop
//! (`openai`, `anthropic`); each gives a [`Backend`].
//!
//! Cancelling the child (or the run) stops the request and any tool at
//! once; `result()` then answers [`ChildResult::Cancelled`] and no later
//! answer is delivered. `dispose()` waits (bounded) for the task to settle
//! its worktree, then aborts it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Job, LoopSettings, Model};
use dsh_protocol::ErrorCode;

use dsh_seam::{
    AgentRequest, ChildOutcome, ChildResult, KeptWorktree, Progress, ResultFault, StartRefused,
    Subagent, Usage,
};

/// How long `dispose()` waits for a cancelled task to be gone.
const DISPOSE_WAIT: Duration = Duration::from_secs(2);

/// A provider of the loop: its API ([`Model`]), its settings, its model.
pub trait Backend: Model + Send + Sync + 'static {
    /// The loop's settings.
    fn settings(&self) -> &LoopSettings;
    /// The model when the call names none.
    fn default_model(&self) -> &str;
}

/// One call in flight (or settled).
pub struct LoopChild {
    id: String,
    /// Fires on `cancel()`, `dispose()`, drop, or the run's cancellation.
    token: CancellationToken,
    answer: Mutex<Option<oneshot::Receiver<ChildResult>>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Tokens reported so far (also on failure and cancellation: they were
    /// spent).
    usage: Arc<Mutex<Option<Usage>>>,
    /// Reported when a response arrives and on each chunk of its body.
    progress: Progress,
    /// The call's worktree, when it changed it and it was kept.
    kept: Arc<Mutex<Option<KeptWorktree>>>,
}

impl LoopChild {
    /// Starts call `n` of provider `name` (of `kind`, for messages): an
    /// isolation other than `"worktree"` is refused with
    /// `UNSUPPORTED_OPTION`; otherwise the job runs in its own task and
    /// the child (`NAME-n`) is returned at once.
    pub fn start<B: Backend>(
        name: &str,
        kind: &str,
        n: u64,
        backend: Arc<B>,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<LoopChild>, StartRefused> {
        if let Some(isolation) = request.options.isolation.as_deref()
            && isolation != "worktree"
        {
            return Err(StartRefused {
                code: ErrorCode::UnsupportedOption,
                message: format!(
                    "agent(): provider {name:?} (type {kind}) does not support isolation: \
                     {isolation:?}; use isolation: \"worktree\" or drop the option"
                ),
            });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StartRefused::agent_start(format!(
                "provider {name:?}: start() must run inside a tokio runtime"
            ))
        })?;
        Ok(Self::spawn(
            format!("{name}-{n}"),
            backend,
            request,
            cancel,
            runtime,
        ))
    }

    fn spawn<B: Backend>(
        id: String,
        backend: Arc<B>,
        request: AgentRequest,
        cancel: CancellationToken,
        runtime: tokio::runtime::Handle,
    ) -> Arc<LoopChild> {
        let token = cancel.child_token();
        let usage = Arc::new(Mutex::new(None));
        let kept = Arc::new(Mutex::new(None));
        let progress = Progress::new();
        let (tx, rx) = oneshot::channel();
        let task = runtime.spawn({
            let token = token.clone();
            let usage = usage.clone();
            let kept = kept.clone();
            let progress = progress.clone();
            let id = id.clone();
            async move {
                let job = Job {
                    model: backend.as_ref(),
                    settings: backend.settings(),
                    default_model: backend.default_model(),
                    child_id: &id,
                    request: &request,
                    usage: &usage,
                    progress: &progress,
                    cancel: &token,
                    kept: &kept,
                };
                let result = job.run().await;
                let _ = tx.send(result);
            }
        });
        Arc::new(LoopChild {
            id,
            token,
            answer: Mutex::new(Some(rx)),
            task: Mutex::new(Some(task)),
            usage,
            progress,
            kept,
        })
    }

    fn usage(&self) -> Option<Usage> {
        *self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    pub(crate) fn task_finished(&self) -> bool {
        self.task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(JoinHandle::is_finished)
    }
}

#[async_trait]
impl Subagent for LoopChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let rx = self.answer.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(rx) = rx else {
            return Err(ResultFault(format!(
                "the result of {} was already taken",
                self.id
            )));
        };
        let got = tokio::select! {
            biased;
            _ = self.token.cancelled() => None,
            r = rx => r.ok(),
        };
        let result = match got {
            // A cancel that raced a finished answer still wins: no answer
            // is delivered after cancel().
            _ if self.token.is_cancelled() => ChildResult::Cancelled,
            Some(r) => r,
            None => {
                return Err(ResultFault(format!(
                    "the request task of {} ended without an answer",
                    self.id
                )));
            }
        };
        Ok(ChildOutcome {
            result,
            usage: self.usage(),
        })
    }

    fn cancel(&self) {
        self.token.cancel();
    }

    fn progress(&self) -> Option<Progress> {
        Some(self.progress.clone())
    }

    fn kept_worktree(&self) -> Option<KeptWorktree> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn dispose(&self) {
        self.token.cancel();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut task) = task {
            // The cancelled task stops its request and tool at once, then
            // settles its worktree (kept when changed); only a task that
            // does not end in time is aborted.
            if tokio::time::timeout(DISPOSE_WAIT, &mut task).await.is_err() {
                task.abort();
                let _ = tokio::time::timeout(DISPOSE_WAIT, task).await;
            }
        }
    }
}

impl Drop for LoopChild {
    fn drop(&mut self) {
        // A child dropped without dispose() leaves no request behind.
        self.token.cancel();
        let task = self
            .task
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            task.abort();
        }
    }
}
