//! The `openai` provider: any OpenAI-compatible chat-completions API
//! (DeepSeek's by default).
//!
//! Each `agent()` call is one child: `start()` returns it at once and the
//! request runs in its own task — POST `{base_url}/chat/completions` with
//! the optional system message (the agent type's system prompt, plus for a
//! schema call the instruction to answer with JSON matching the schema) and
//! the prompt. A text call answers `choices[0].message.content`; a schema
//! call parses and validates it, and an invalid answer gets exactly one
//! corrective retry that shows the model its validation errors. 429, 5xx,
//! timeouts and connection errors are retried (the `http` module); every other
//! failure ends the child with a reason (`agent()` resolves `null`).
//!
//! Cancelling the child (or the run) drops the in-flight request at once;
//! `result()` then answers [`ChildResult::Cancelled`] and no later answer
//! is delivered. `dispose()` aborts the task and waits (bounded) for it to
//! be gone.
//!
//! Options: `model` overrides the configured model; `effort` is sent as
//! `reasoning_effort` only when the config says the endpoint takes it;
//! `agentType` reaches the provider as the router's `system_prompt`;
//! `isolation` is refused (`UNSUPPORTED_OPTION`).

mod api;
mod config;
pub(crate) mod http;
mod stream;
#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{MAX_DELAY, OpenAiConfig, StructuredOutput};

use crate::provider::{
    AgentRequest, ChildOutcome, ChildResult, KeptWorktree, Progress, ResultFault, StartRefused,
    Subagent, SubagentProvider, Usage,
};
use crate::providers::SetupError;
use crate::providers::agent::{self, conversation::Reply};

/// How long `dispose()` waits for an aborted request task to be gone.
const DISPOSE_WAIT: Duration = Duration::from_secs(2);

/// A provider for one `[providers.NAME]` entry. Cheap to build: the HTTP
/// client is created on the first call.
pub struct OpenAiProvider {
    name: String,
    shared: Arc<Shared>,
    next_child: AtomicU64,
}

/// What every child's task needs.
struct Shared {
    cfg: OpenAiConfig,
    settings: agent::LoopSettings,
    endpoint: http::Endpoint,
}

impl OpenAiProvider {
    /// Builds the provider named `name`, reading the key from the variable
    /// `cfg.api_key_env` names (none when that name is empty). Never calls
    /// the API.
    pub fn new(name: &str, cfg: &OpenAiConfig) -> Result<Self, SetupError> {
        cfg.check()?;
        if cfg.api_key_env.is_empty() {
            return Self::with_key(name, cfg, "");
        }
        match std::env::var(&cfg.api_key_env) {
            Ok(key) if !key.is_empty() => Self::with_key(name, cfg, &key),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(cfg.missing_key()),
            Err(std::env::VarError::NotUnicode(_)) => Err(SetupError::BadKey {
                env: cfg.api_key_env.clone(),
                problem: "it is not UTF-8".into(),
            }),
        }
    }

    /// Builds the provider with `key` given directly (embedders, tests);
    /// `api_key_env` is then only used in messages. An empty key sends no
    /// `Authorization` header.
    pub fn with_key(name: &str, cfg: &OpenAiConfig, key: &str) -> Result<Self, SetupError> {
        cfg.check()?;
        let key = (!key.is_empty()).then_some(key);
        Ok(OpenAiProvider {
            name: name.into(),
            shared: Arc::new(Shared {
                cfg: cfg.clone(),
                settings: cfg.loop_settings(),
                endpoint: http::Endpoint::new(cfg, key)?,
            }),
            next_child: AtomicU64::new(1),
        })
    }

    /// The name it was built with (the `NAME` of `[providers.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.shared.cfg
    }
}

#[async_trait]
impl SubagentProvider for OpenAiProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        Ok(self.start_child(request, cancel)?)
    }
}

impl OpenAiProvider {
    /// Starts the request task and returns its child at once.
    fn start_child(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<OpenAiChild>, StartRefused> {
        if let Some(isolation) = request.options.isolation.as_deref()
            && isolation != "worktree"
        {
            return Err(StartRefused {
                code: ErrorCode::UnsupportedOption,
                message: format!(
                    "agent(): provider {:?} (type openai) does not support isolation: \
                     {isolation:?}; use isolation: \"worktree\" or drop the option",
                    self.name
                ),
            });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StartRefused::agent_start(format!(
                "provider {:?}: start() must run inside a tokio runtime",
                self.name
            ))
        })?;
        let n = self.next_child.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{n}", self.name);
        let token = cancel.child_token();
        let usage = Arc::new(Mutex::new(None));
        let kept = Arc::new(Mutex::new(None));
        let progress = Progress::new();
        let (tx, rx) = oneshot::channel();
        let task = runtime.spawn({
            let shared = self.shared.clone();
            let token = token.clone();
            let usage = usage.clone();
            let kept = kept.clone();
            let progress = progress.clone();
            let id = id.clone();
            async move {
                let job = agent::Job {
                    model: shared.as_ref(),
                    settings: &shared.settings,
                    default_model: &shared.cfg.model,
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
        Ok(Arc::new(OpenAiChild {
            id,
            token,
            answer: Mutex::new(Some(rx)),
            task: Mutex::new(Some(task)),
            usage,
            progress,
            kept,
        }))
    }
}

#[async_trait]
impl agent::Model for Shared {
    async fn turn(
        &self,
        turn: &agent::Turn<'_>,
        progress: &Progress,
        so_far: Usage,
    ) -> Result<Reply, String> {
        let body = api::loop_body(&self.cfg, turn);
        let mut sink = stream::ChatStream::new(progress.clone(), so_far);
        self.endpoint.post_into(&body, progress, &mut sink).await?;
        sink.finish()
    }
}

/// One call in flight (or settled).
struct OpenAiChild {
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

impl OpenAiChild {
    fn usage(&self) -> Option<Usage> {
        *self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn task_finished(&self) -> bool {
        self.task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(JoinHandle::is_finished)
    }
}

#[async_trait]
impl Subagent for OpenAiChild {
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

impl Drop for OpenAiChild {
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
