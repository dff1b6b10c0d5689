//! A conversation with a model, in no API's wire format: what the agent
//! loop keeps between turns. Each API module (`openai`, `anthropic`)
//! turns it into its own messages.

use serde_json::Value;

use dsh_seam::Usage;

/// One message after the system prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The task, or a correction from dsh.
    User(String),
    /// What the model said: text, tool calls, or both.
    Assistant {
        /// Its text (may be empty).
        text: String,
        /// The tools it called, in order.
        tool_calls: Vec<ToolCall>,
    },
    /// The results of the previous assistant message's tool calls, in the
    /// same order.
    ToolResults(Vec<ToolResult>),
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The API's id for the call (the result must name it).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments: the parsed JSON object, or what the model sent when
    /// that was not JSON (kept, so the model can be told).
    pub input: Input,
}

/// A tool call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A JSON value (normally an object).
    Json(Value),
    /// Arguments that were not JSON, as sent.
    Unparsable(String),
}

impl Input {
    /// The arguments as the API expects them back in the conversation.
    pub fn as_value(&self) -> Value {
        match self {
            Input::Json(v) => v.clone(),
            Input::Unparsable(s) => Value::String(s.clone()),
        }
    }

    /// Parses the arguments of a streamed call (empty means `{}`).
    pub fn parse(raw: &str) -> Input {
        if raw.trim().is_empty() {
            return Input::Json(Value::Object(serde_json::Map::new()));
        }
        match serde_json::from_str(raw) {
            Ok(v) => Input::Json(v),
            Err(_) => Input::Unparsable(raw.to_string()),
        }
    }
}

/// The result of one tool call, for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call's id.
    pub id: String,
    /// What the tool returned (or why it failed).
    pub content: String,
    /// The call failed (the model should read `content` as an error).
    pub is_error: bool,
}

/// Why a 2xx answer of a model API is not a reply. Never retried: the
/// same request would get the same answer (and be charged again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The API answered with an error object (its type and message).
    #[error("{0}")]
    Api(String),
    /// The model declined to answer (OpenAI's `refusal`).
    #[error("{0}")]
    Refused(String),
    /// The body is not the answer the API documents: no body, not JSON,
    /// a missing field, a stream that ended early. Says what was missing.
    #[error("{0}")]
    Malformed(String),
}

impl From<ReplyError> for dsh_seam::ProviderError {
    fn from(e: ReplyError) -> Self {
        use dsh_seam::ProviderError;
        match e {
            // A refusal before any start would be `AGENT_START`; here the
            // call resolves null with the reason.
            ReplyError::Refused(r) => {
                ProviderError::refused(dsh_protocol::ErrorCode::AgentStart, r)
            }
            ReplyError::Api(r) | ReplyError::Malformed(r) => ProviderError::fatal(r),
        }
    }
}

/// One model turn's answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    /// The text.
    pub text: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped (`stop`, `tool_calls`, `length`, `end_turn` …).
    pub finish_reason: Option<String>,
    /// The turn's tokens, when the API said.
    pub usage: Option<Usage>,
}

#[cfg(test)]
mod reply_error_tests {
    use super::*;
    use dsh_protocol::ErrorCode;
    use dsh_seam::{FailureKind, ProviderError};
    use rstest::rstest;

    /// A model's refusal is a refusal; an error object or an unreadable
    /// answer is final. None is retried, and the text is unchanged.
    #[rstest]
    #[case::refusal(
        ReplyError::Refused("the model refused: no".into()),
        FailureKind::Refused { code: ErrorCode::AgentStart }
    )]
    #[case::api(ReplyError::Api("the API answered with an error: x: y".into()), FailureKind::Fatal)]
    #[case::malformed(ReplyError::Malformed("the API's response had no body".into()), FailureKind::Fatal)]
    fn a_reply_error_has_its_kind(#[case] e: ReplyError, #[case] kind: FailureKind) {
        let text = e.to_string();
        let p = ProviderError::from(e);
        assert_eq!((p.kind, p.reason), (kind, text));
    }
}
