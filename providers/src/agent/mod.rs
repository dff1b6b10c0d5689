//! The agent loop of the API providers (`openai`, `anthropic`): a model
//! that may call tools, the tools run by dsh, the results fed back, until
//! the model answers.
//!
//! - [`conversation`]: the conversation in no API's format; each API
//!   module implements [`Model`] (one turn) over it.
//! - [`toolset`]: the tools' names and input shapes, and which tools a call
//!   gets (read-only by default).
//! - [`runner`]: one tool call in a sandboxed `dsh-worker tool` process.
//! - [`run_loop`] (here): turns, tool calls, limits, the `StructuredOutput`
//!   answer of a schema call and its one corrective turn, the usage summed
//!   over turns, the activity a progress view shows; one turn's steps are
//!   in `steps`, a schema answer's check in `answer`.
//! - [`LoopSettings`] (`settings`): the loop's keys of a provider's table.
//!
//! Not here: HTTP, retries and streaming (the API modules); the per-call
//! stall and timeout bounds (the host's supervisor, fed by [`Progress`]).

mod answer;
pub mod child;
pub mod conversation;
pub mod runner;
mod settings;
mod steps;
pub mod toolset;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::command::worktree::Worktree;
use conversation::{Input, Message, Reply, ToolResult};
use dsh_seam::{Activity, AgentRequest, ChildResult, KeptWorktree, Progress, Usage};
pub use runner::ToolHost;
use runner::{ToolContext, run_tool};
pub(crate) use settings::read_loop_settings;
pub use settings::{LOOP_KEYS, LoopSettings, WorkspaceUnusable};
use steps::LoopState;
use toolset::{STRUCTURED_OUTPUT, ToolSpec};

/// Default most model turns of one call.
pub const DEFAULT_MAX_TURNS: u32 = 30;
/// Default most tool calls of one call.
pub const DEFAULT_MAX_TOOL_CALLS: u32 = 100;
/// Default longest Bash command.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// Most bytes of text and tool arguments one model turn may bring.
const MAX_TURN_BYTES: usize = 1 << 20;
/// Most bytes the conversation of one call may grow to (it is sent again
/// every turn): a model or server that floods it fails the call instead.
const MAX_CONVERSATION_BYTES: usize = 16 << 20;

/// What one turn asks of the model.
pub struct Turn<'a> {
    /// The model's name.
    pub model: &'a str,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools it may call.
    pub tools: &'a [ToolSpec],
    /// The call's `effort`.
    pub effort: Option<&'a str>,
    /// The call's schema, for a model turn without tools (sent the API's
    /// own way); `None` when the schema travels as `StructuredOutput`.
    pub schema: Option<&'a Value>,
    /// The bytes of the first message shared with other calls (the call's
    /// `sharedHeadLength`), for APIs whose prompt cache is marked by the
    /// request (Anthropic's `cache_control`).
    pub shared_head: Option<usize>,
}

/// The byte length of the first `units` UTF-16 code units of `text` (as
/// JavaScript counts a string's length), at a character boundary; `None`
/// when that is none or all of it.
pub fn shared_head(text: &str, units: u64) -> Option<usize> {
    let mut seen = 0u64;
    for (i, c) in text.char_indices() {
        if seen >= units {
            return (i > 0).then_some(i);
        }
        seen += c.len_utf16() as u64;
    }
    None
}

/// One API's way of running a turn (with its retries and streaming).
#[async_trait]
pub trait Model: Send + Sync {
    /// Sends the conversation and returns the model's reply. `progress`
    /// hears every sign of life (and [`Activity::Tokens`] as the answer
    /// streams, counted from `so_far`). `held` is the call's share of the
    /// host's budget for model calls, covering its conversation: the turn
    /// grows it to cover its request and response (waiting only through
    /// [`budget::Held::wait_cover`], which holds nothing while it waits);
    /// the loop shrinks it back after the reply.
    ///
    /// [`budget::Held::wait_cover`]: crate::budget::Held::wait_cover
    async fn turn(
        &self,
        turn: &Turn<'_>,
        progress: &Progress,
        so_far: Usage,
        held: &mut crate::budget::Held<'static>,
    ) -> Result<Reply, dsh_seam::ProviderError>;
}

/// The running total of a call's tokens.
pub struct Tally<'a>(pub &'a Mutex<Option<Usage>>);

impl Tally<'_> {
    fn add(&self, u: Usage) -> Usage {
        let mut total = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let t = total.get_or_insert(Usage::new(0, 0));
        *t = t.plus(u);
        *t
    }

    fn now(&self) -> Usage {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or(Usage::new(0, 0))
    }
}

/// One call's loop: what it needs besides the model.
pub struct Call<'a> {
    /// The call.
    pub request: &'a AgentRequest,
    /// The model's name.
    pub model: &'a str,
    /// The provider's loop settings.
    pub settings: &'a LoopSettings,
    /// The directory its tools run in.
    pub workspace: PathBuf,
    /// The tools it may use.
    pub tools: Vec<&'static str>,
    /// What Bash may reach of git outside the workspace (read, change):
    /// [`runner::git_grants`].
    pub git: (Vec<PathBuf>, Vec<PathBuf>),
    /// Where its tokens are summed.
    pub usage: Tally<'a>,
    /// Its progress handle.
    pub progress: &'a Progress,
    /// Fires when it is cancelled.
    pub cancel: &'a CancellationToken,
}

/// One call of an API provider, from its request to its result: the
/// workspace (a fresh worktree under `isolation: "worktree"`, kept on a
/// branch when the call changed it), the tools, the loop, the
/// cancellation.
pub struct Job<'a> {
    /// The API.
    pub model: &'a dyn Model,
    /// The provider's loop settings.
    pub settings: &'a LoopSettings,
    /// The model when the call names none.
    pub default_model: &'a str,
    /// The child's id (names its worktree and branch).
    pub child_id: &'a str,
    /// The call.
    pub request: &'a AgentRequest,
    /// Where its tokens are summed.
    pub usage: &'a Mutex<Option<Usage>>,
    /// Its progress handle.
    pub progress: &'a Progress,
    /// Fires when it is cancelled.
    pub cancel: &'a CancellationToken,
    /// Where a kept worktree is reported.
    pub kept: &'a Mutex<Option<KeptWorktree>>,
}

impl Job<'_> {
    /// Runs the call; a cancel ends it with [`ChildResult::Cancelled`]
    /// (the request and any tool process stopped at once), after which a
    /// changed worktree is still kept.
    pub async fn run(self) -> ChildResult {
        let base = match self.settings.base_workspace() {
            Ok(b) => b,
            Err(e) => return ChildResult::Failed(e.to_string()),
        };
        let worktree = if self.request.options.isolation.as_deref() == Some("worktree") {
            match Worktree::create(&base, &self.settings.worktree_parent(), self.child_id).await {
                Ok(w) => Some(w),
                Err(e) => return ChildResult::Failed(e.to_string()),
            }
        } else {
            None
        };
        let workspace = worktree.as_ref().map_or(base, |w| w.run_dir.clone());
        let settings = self.settings.limited(&self.request.loop_limits);
        let tools = settings.tools_for(self.request);
        let git = if tools.contains(&"Bash") {
            runner::git_grants(worktree.as_ref().map(Worktree::git_dirs))
        } else {
            (Vec::new(), Vec::new())
        };
        let call = Call {
            request: self.request,
            model: self
                .request
                .options
                .model
                .as_deref()
                .unwrap_or(self.default_model),
            settings: &settings,
            workspace,
            tools,
            git,
            usage: Tally(self.usage),
            progress: self.progress,
            cancel: self.cancel,
        };
        // The loop watches the token itself: a model turn is dropped at
        // once, a tool process is stopped in steps (its shell's group
        // with it), never just dropped.
        let result = run_loop(self.model, call).await;
        if let Some(w) = worktree {
            let kept = w.finish(self.child_id).await;
            *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = kept;
        }
        result
    }
}

/// Runs `call` to its answer. Every failure is a reason (`agent()`
/// resolves `null`); nothing is retried here (the API module retries
/// requests).
pub async fn run_loop(model: &dyn Model, call: Call<'_>) -> ChildResult {
    let req = call.request;
    let schema = req.schema.as_ref();
    // With no tools the call is one completion, its schema sent the API's
    // own way; with tools, a schema call answers with StructuredOutput.
    let specs = if call.tools.is_empty() {
        Vec::new()
    } else {
        toolset::specs(&call.tools, schema)
    };
    let system = system_prompt(&call, schema.is_some() && !specs.is_empty());
    let mut messages = vec![Message::User(req.prompt.clone())];
    let mut state = LoopState {
        corrected: false,
        correcting: None,
        tool_calls: 0,
        conversation_bytes: req.prompt.len(),
        held: crate::budget::Held::new(),
    };
    for turn in 1..=call.settings.max_turns {
        let ask = Turn {
            model: call.model,
            system: system.as_deref(),
            messages: &messages,
            tools: &specs,
            effort: req.options.effort.as_deref(),
            schema: if specs.is_empty() { schema } else { None },
            shared_head: req
                .options
                .shared_head_length
                .and_then(|n| shared_head(&req.prompt, n)),
        };
        let reply = match state.ask(model, &call, turn, &ask).await {
            Ok(r) => r,
            Err(end) => return end,
        };
        let step = if reply.tool_calls.is_empty() {
            state.on_answer(&mut messages, schema, reply, !specs.is_empty())
        } else {
            state
                .on_tool_calls(&mut messages, &call, schema, reply)
                .await
        };
        if let Some(end) = step {
            return end;
        }
    }
    ChildResult::Failed(format!(
        "gave up: the model used all {} turns (max_turns) without answering; raise max_turns \
         in the provider's table or the agent type, or ask for less",
        call.settings.max_turns
    ))
}

/// Runs one tool call (or refuses a tool the call does not have) and
/// reports it as activity.
async fn run_one(call: &Call<'_>, name: &str, id: &str, input: &Input) -> ToolResult {
    let started = Instant::now();
    let value = input.as_value();
    call.progress.activity(Activity::ToolCall {
        tool: name.to_string(),
        detail: toolset::detail(name, &value),
    });
    let outcome = if !call.tools.contains(&name) {
        runner::ToolOutcome {
            status: "denied".into(),
            output: format!(
                "{name} is not one of your tools here; use one of: {}",
                if call.tools.is_empty() {
                    "(none)".to_string()
                } else {
                    call.tools.join(", ")
                }
            ),
        }
    } else if let Input::Unparsable(raw) = input {
        runner::ToolOutcome {
            status: "error".into(),
            output: format!(
                "{name}: the arguments are not a JSON object: {}",
                toolset::cut(raw, 200)
            ),
        }
    } else {
        let (shell_read, shell_write) = call.git.clone();
        let ctx = ToolContext {
            host: call.settings.host.clone(),
            workspace: call.workspace.clone(),
            network: call.settings.network,
            bash_timeout: call.settings.bash_timeout,
            shell_read,
            shell_write,
        };
        run_tool(&ctx, name, &value, call.cancel, call.progress).await
    };
    call.progress.activity(Activity::ToolEnd {
        tool: name.to_string(),
        status: outcome.status.clone(),
        ms: runner::ms_since(started),
        message: outcome
            .is_error()
            .then(|| toolset::cut(&outcome.output, 200)),
    });
    ToolResult {
        id: id.to_string(),
        is_error: outcome.is_error(),
        content: outcome.output,
    }
}

/// The system prompt: the provider's, the agent type's, and how to work
/// (and answer a schema call).
fn system_prompt(call: &Call<'_>, structured_tool: bool) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(p) = call
        .settings
        .system_prompt
        .as_deref()
        .filter(|p| !p.trim().is_empty())
    {
        parts.push(p.to_string());
    }
    if let Some(p) = call
        .request
        .system_prompt
        .as_deref()
        .filter(|p| !p.trim().is_empty())
    {
        parts.push(p.to_string());
    }
    if !call.tools.is_empty() {
        parts.push(format!(
            "You work in the directory {} (your workspace); tool paths are relative to it. \
             Your tools: {}. Use them to look at the actual files before you answer, and \
             report only work you have done.",
            call.workspace.display(),
            call.tools.join(", ")
        ));
    }
    if let Some(schema) = call.request.schema.as_ref() {
        if structured_tool {
            parts.push(format!(
                "When the task is done, call the {STRUCTURED_OUTPUT} tool once with your answer; \
                 its input must match the tool's schema."
            ));
        } else {
            let text = serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string());
            parts.push(format!(
                "Reply in json: a single JSON object that matches the JSON Schema below, with \
                 no prose before or after it and no code fences.\n\nJSON Schema:\n{text}"
            ));
        }
    }
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::answer::{structured_answer, text_answer};
    use super::settings::check_keys;
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::ascii("abcdef", 3, Some(3))]
    #[case::none("abc", 0, None)]
    #[case::all("abc", 3, None)]
    #[case::beyond("abc", 10, None)]
    // é is one UTF-16 unit and two bytes; 😀 two units and four bytes.
    #[case::two_byte("éa", 1, Some(2))]
    #[case::astral("😀ab", 2, Some(4))]
    // Half of a surrogate pair: the cut goes after the whole character.
    #[case::half_pair("😀ab", 1, Some(4))]
    fn shared_heads_count_as_javascript_does(
        #[case] text: &str,
        #[case] units: u64,
        #[case] want: Option<usize>,
    ) {
        assert_eq!(shared_head(text, units), want);
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": { "ok": { "type": "boolean" }, "n": { "type": "integer" } },
            "required": ["ok"],
            "additionalProperties": false
        })
    }

    fn reply(text: &str, finish: Option<&str>) -> Reply {
        Reply {
            text: text.into(),
            finish_reason: finish.map(str::to_string),
            ..Reply::default()
        }
    }

    #[rstest]
    #[case::plain(r#"{"ok":true}"#, Ok(json!({ "ok": true })))]
    #[case::fenced("```json\n{\"ok\":false}\n```", Ok(json!({ "ok": false })))]
    #[case::bare_fence("```{\"ok\":false}```", Ok(json!({ "ok": false })))]
    #[case::wrong_type(r#"{"ok":"yes"}"#, Err("value.ok"))]
    #[case::missing(r#"{}"#, Err("value: missing required property \"ok\""))]
    #[case::prose("Sure! Here it is", Err("the answer is not JSON"))]
    fn text_answers_are_checked(#[case] content: &str, #[case] want: Result<Value, &str>) {
        match (text_answer(&schema(), &reply(content, None)), want) {
            (Ok(v), Ok(w)) => assert_eq!(v, w),
            (Err(e), Err(w)) => assert!(e.0.contains(w), "{e} should contain {w}"),
            (got, want) => panic!("got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn a_cut_off_answer_says_so() {
        let err = text_answer(&schema(), &reply("{\"ok\": tr", Some("length"))).expect_err("cut");
        assert!(err.0.contains("cut off"), "{err}");
    }

    #[test]
    fn structured_output_inputs_are_checked_and_unwrapped() {
        assert_eq!(
            structured_answer(&schema(), &Input::Json(json!({ "ok": true }))),
            Ok(json!({ "ok": true }))
        );
        let e = structured_answer(&schema(), &Input::Json(json!({ "ok": 1 }))).expect_err("bad");
        assert!(e.0.contains("value.ok"), "{e}");
        let e = structured_answer(&schema(), &Input::Unparsable("{".into())).expect_err("bad");
        assert!(e.0.contains("not JSON"), "{e}");
        let list = json!({ "type": "array", "items": { "type": "integer" } });
        assert_eq!(
            structured_answer(&list, &Input::Json(json!({ "value": [1, 2] }))),
            Ok(json!([1, 2]))
        );
    }

    #[rstest]
    #[case::zero_turns(None, 0, 10, "max_turns")]
    #[case::too_many_calls(None, 5, 20_000, "max_tool_calls")]
    #[case::unknown_tool(Some(vec!["Read".to_string(), "WebFetch".to_string()]), 5, 5, "unknown tool \"WebFetch\"")]
    fn loop_keys_are_checked(
        #[case] tools: Option<Vec<String>>,
        #[case] turns: u32,
        #[case] calls: u32,
        #[case] want: &str,
    ) {
        let e = check_keys(tools.as_deref(), turns, calls, DEFAULT_BASH_TIMEOUT).expect_err("bad");
        assert!(e.to_string().contains(want), "{e}");
    }
}
