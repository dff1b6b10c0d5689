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
mod http;
#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{MAX_DELAY, OpenAiConfig, StructuredOutput};

use crate::provider::{
    AgentRequest, ChildOutcome, ChildResult, Progress, ResultFault, StartRefused, Subagent,
    SubagentProvider, Usage,
};
use crate::providers::SetupError;

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
        if let Some(isolation) = &request.options.isolation {
            return Err(StartRefused {
                code: ErrorCode::UnsupportedOption,
                message: format!(
                    "agent(): provider {:?} (type openai) does not support isolation: {isolation:?}; \
                     drop the option, or send this call to a provider that runs the agent in a \
                     worktree (type command)",
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
        let token = cancel.child_token();
        let usage = Arc::new(Mutex::new(None));
        let progress = Progress::new();
        let (tx, rx) = oneshot::channel();
        let task = runtime.spawn({
            let shared = self.shared.clone();
            let token = token.clone();
            let usage = usage.clone();
            let progress = progress.clone();
            async move {
                // Cancelling drops the request future, and with it the
                // connection: the server sees the hang-up at once.
                tokio::select! {
                    biased;
                    _ = token.cancelled() => {}
                    result = shared.answer(request, &usage, &progress) => {
                        let _ = tx.send(result);
                    }
                }
            }
        });
        Ok(Arc::new(OpenAiChild {
            id: format!("{}-{n}", self.name),
            token,
            answer: Mutex::new(Some(rx)),
            task: Mutex::new(Some(task)),
            usage,
            progress,
        }))
    }
}

impl Shared {
    /// Runs one call to its end.
    async fn answer(
        &self,
        req: AgentRequest,
        usage: &Mutex<Option<Usage>>,
        progress: &Progress,
    ) -> ChildResult {
        let model = req.options.model.as_deref().unwrap_or(&self.cfg.model);
        let schema = req.schema.as_ref();
        let effort = req.options.effort.as_deref();
        let mut messages = api::opening_messages(req.system_prompt.as_deref(), schema, &req.prompt);
        let first = match self
            .exchange(model, &messages, schema, effort, usage, progress)
            .await
        {
            Ok(r) => r,
            Err(reason) => return ChildResult::Failed(reason),
        };
        let Some(schema) = schema else {
            return ChildResult::Text(first.content);
        };
        let problems = match api::check_answer(schema, &first) {
            Ok(v) => return ChildResult::Structured(v),
            Err(p) => p,
        };
        // One corrective retry: the conversation so far, the bad answer,
        // and what is wrong with it.
        messages.push(json!({ "role": "assistant", "content": first.content }));
        messages.push(json!({ "role": "user", "content": api::correction(&problems) }));
        let second = match self
            .exchange(model, &messages, Some(schema), effort, usage, progress)
            .await
        {
            Ok(r) => r,
            Err(reason) => {
                return ChildResult::Failed(format!(
                    "{problems}\nThe corrective request then failed: {reason}"
                ));
            }
        };
        match api::check_answer(schema, &second) {
            Ok(v) => ChildResult::Structured(v),
            Err(p) => ChildResult::Failed(format!("{p}\n(after one corrective retry)")),
        }
    }

    /// One request/response; the usage is added up as it arrives.
    async fn exchange(
        &self,
        model: &str,
        messages: &[Value],
        schema: Option<&Value>,
        effort: Option<&str>,
        usage: &Mutex<Option<Usage>>,
        progress: &Progress,
    ) -> Result<api::Reply, String> {
        let body = api::request_body(&self.cfg, model, messages, schema, effort);
        let bytes = self.endpoint.post(&body, progress).await?;
        let (reply, used) = api::parse_response(&bytes);
        if let Some(u) = used {
            let mut total = usage.lock().unwrap_or_else(|e| e.into_inner());
            let t = total.get_or_insert(Usage {
                input: 0,
                output: 0,
            });
            t.input = t.input.saturating_add(u.input);
            t.output = t.output.saturating_add(u.output);
        }
        reply
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

    async fn dispose(&self) {
        self.token.cancel();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            task.abort();
            let _ = tokio::time::timeout(DISPOSE_WAIT, task).await;
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
