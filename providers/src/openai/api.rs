//! The chat-completions wire format: what one request body looks like and
//! what is taken from a response. Pure functions, no I/O.

use serde_json::{Map, Value, json};

use super::config::{OpenAiConfig, StructuredOutput};
use crate::agent::Turn;
use crate::agent::conversation::{Input, Message, Reply as LoopReply, ReplyError, ToolCall};
use crate::excerpt::{excerpt, short};
use dsh_seam::Usage;

/// Deepest schema nesting walked when deciding on strict mode (the schema
/// already passed the subset check, which bounds it the same way).
const MAX_DEPTH: usize = 64;

/// The `reasoning_effort` value for a call's `effort`: `max` (the top of
/// the scale scripts use) becomes `high`, the top of the chat-completions
/// scale; anything else is sent as written.
pub fn effort_value(effort: &str) -> &str {
    match effort {
        "max" => "high",
        other => other,
    }
}

/// The request body.
pub fn request_body(
    cfg: &OpenAiConfig,
    model: &str,
    messages: &[Value],
    schema: Option<&Value>,
    effort: Option<&str>,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("messages".into(), Value::Array(messages.to_vec()));
    body.insert("stream".into(), false.into());
    if let Some(t) = cfg.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(m) = cfg.max_tokens {
        body.insert("max_tokens".into(), m.into());
    }
    if cfg.reasoning_effort
        && let Some(e) = effort
    {
        body.insert("reasoning_effort".into(), effort_value(e).into());
    }
    if let Some(s) = schema
        && let Some(rf) = response_format(cfg.structured_output, cfg.strict, s)
    {
        body.insert("response_format".into(), rf);
    }
    Value::Object(body)
}

/// The `response_format` of a schema call.
pub fn response_format(mode: StructuredOutput, strict: bool, schema: &Value) -> Option<Value> {
    match mode {
        StructuredOutput::JsonSchema => Some(json!({
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "schema": schema,
                "strict": strict && strict_compatible(schema),
            }
        })),
        StructuredOutput::JsonObject => Some(json!({ "type": "json_object" })),
        StructuredOutput::None => None,
    }
}

/// Keywords a schema may use and still be sent in strict mode. OpenAI's
/// strict mode refuses many others (and the rules differ between models),
/// so anything beyond these plain shapes is sent non-strict, where the
/// host's own validation still enforces every keyword.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "description",
    "title",
];

/// Whether OpenAI's strict mode accepts `schema`: every object lists its
/// properties, has `additionalProperties: false` and requires every
/// property; only the keywords of [`STRICT_KEYWORDS`] (no `oneOf`,
/// `anyOf`, `$ref`, string or number constraints).
pub fn strict_compatible(schema: &Value) -> bool {
    fn walk(node: &Value, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        let Some(obj) = node.as_object() else {
            return true;
        };
        if !obj.keys().all(|k| STRICT_KEYWORDS.contains(&k.as_str())) {
            return false;
        }
        let is_object = match obj.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
            _ => false,
        };
        if is_object {
            let Some(props) = obj.get("properties").and_then(Value::as_object) else {
                return false;
            };
            if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
                return false;
            }
            let required: Vec<&str> = obj
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !props.keys().all(|k| required.contains(&k.as_str())) {
                return false;
            }
            if !props.values().all(|p| walk(p, depth + 1)) {
                return false;
            }
        }
        obj.get("items").is_none_or(|i| walk(i, depth + 1))
    }
    walk(schema, 1)
}

/// The usage object of a response or of a stream's last chunk.
pub fn usage_of(root: &Value) -> Option<Usage> {
    let u = root.get("usage")?.as_object()?;
    let input = u.get("prompt_tokens").and_then(Value::as_u64);
    let output = u.get("completion_tokens").and_then(Value::as_u64);
    if input.is_none() && output.is_none() {
        return None;
    }
    let input = input.unwrap_or(0);
    // Of the prompt tokens, those served from the provider's prompt cache
    // (OpenAI's `prompt_tokens_details`; DeepSeek's
    // `prompt_cache_hit_tokens`).
    let cached = u
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .or_else(|| u.get("prompt_cache_hit_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(input);
    Some(Usage {
        cache_read: cached,
        ..Usage::new(input, output.unwrap_or(0))
    })
}

// ------------------------------------------------------------------ the loop

/// The chat-completions messages of a loop turn.
pub fn loop_messages(turn: &Turn<'_>) -> Vec<Value> {
    let mut out = Vec::with_capacity(turn.messages.len() + 1);
    if let Some(system) = turn.system {
        out.push(json!({ "role": "system", "content": system }));
    }
    for m in turn.messages {
        match m {
            Message::User(text) => out.push(json!({ "role": "user", "content": text })),
            Message::Assistant { text, tool_calls } => {
                let mut a = Map::new();
                a.insert("role".into(), "assistant".into());
                a.insert(
                    "content".into(),
                    if text.is_empty() && !tool_calls.is_empty() {
                        Value::Null
                    } else {
                        text.as_str().into()
                    },
                );
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            let args = match &c.input {
                                Input::Json(v) => v.to_string(),
                                Input::Unparsable(raw) => raw.clone(),
                            };
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": { "name": c.name, "arguments": args },
                            })
                        })
                        .collect();
                    a.insert("tool_calls".into(), Value::Array(calls));
                }
                out.push(Value::Object(a));
            }
            Message::ToolResults(results) => {
                for r in results {
                    let content = if r.is_error {
                        format!("Error: {}", r.content)
                    } else {
                        r.content.clone()
                    };
                    out.push(json!({ "role": "tool", "tool_call_id": r.id, "content": content }));
                }
            }
        }
    }
    out
}

/// The request body of a loop turn.
pub fn loop_body(cfg: &OpenAiConfig, turn: &Turn<'_>) -> Value {
    let messages = loop_messages(turn);
    let mut body = request_body(cfg, turn.model, &messages, turn.schema, turn.effort);
    if let Value::Object(m) = &mut body {
        m.insert("stream".into(), cfg.stream.into());
        if cfg.stream {
            m.insert("stream_options".into(), json!({ "include_usage": true }));
        }
        if !turn.tools.is_empty() {
            let tools: Vec<Value> = turn
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.input_schema,
                        }
                    })
                })
                .collect();
            m.insert("tools".into(), Value::Array(tools));
        }
    }
    body
}

/// A whole (non-streamed) chat completion as a loop reply: the text, the
/// tool calls, the usage.
pub fn loop_reply(body: &[u8]) -> Result<LoopReply, ReplyError> {
    let root: Value = serde_json::from_slice(body).map_err(|e| {
        ReplyError::Malformed(format!(
            "the API's response is not JSON ({e}); it starts: {}",
            excerpt(body)
        ))
    })?;
    let usage = usage_of(&root);
    if let Some(err) = root.get("error").filter(|e| !e.is_null()) {
        return Err(ReplyError::Api(api_error(err)));
    }
    let Some(choice) = root
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    else {
        return Err(ReplyError::Malformed(format!(
            "the API's response has no choices[0]; it starts: {}",
            excerpt(body)
        )));
    };
    let message = choice.get("message");
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let text = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut tool_calls = Vec::new();
    for (i, c) in message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let f = c.get("function");
        tool_calls.push(ToolCall {
            id: c
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{i}"), str::to_string),
            name: f
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            input: Input::parse(
                f.and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            ),
        });
    }
    if text.is_empty() && tool_calls.is_empty() {
        if let Some(r) = message
            .and_then(|m| m.get("refusal"))
            .and_then(Value::as_str)
        {
            return Err(ReplyError::Refused(format!(
                "the model refused: {}",
                short(r)
            )));
        }
        if message
            .and_then(|m| m.get("content"))
            .is_none_or(|c| !c.is_string())
        {
            let why = finish_reason
                .as_ref()
                .map(|f| format!(" (finish_reason {f:?})"))
                .unwrap_or_default();
            return Err(ReplyError::Malformed(format!(
                "the API's response has no text in choices[0].message.content{why}"
            )));
        }
    }
    Ok(LoopReply {
        text,
        tool_calls,
        finish_reason,
        usage,
    })
}

/// An API `error` object in words.
pub fn api_error(err: &Value) -> String {
    let msg = err
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| short(&err.to_string()));
    format!("the API answered with an error: {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": { "ok": { "type": "boolean" }, "n": { "type": "integer" } },
            "required": ["ok"],
            "additionalProperties": false
        })
    }

    fn turn<'a>(
        system: Option<&'a str>,
        messages: &'a [Message],
        tools: &'a [crate::agent::toolset::ToolSpec],
    ) -> Turn<'a> {
        Turn {
            model: "m",
            system,
            messages,
            tools,
            effort: None,
            schema: None,
            shared_head: None,
        }
    }

    #[test]
    fn the_conversation_becomes_chat_messages() {
        let messages = vec![
            Message::User("review a.rs".into()),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "Read".into(),
                    input: Input::Json(json!({ "file_path": "a.rs" })),
                }],
            },
            Message::ToolResults(vec![crate::agent::conversation::ToolResult {
                id: "c1".into(),
                content: "no such file".into(),
                is_error: true,
            }]),
        ];
        let specs = crate::agent::toolset::specs(&["Read"], None);
        let t = turn(Some("be careful"), &messages, &specs);
        assert_eq!(
            loop_messages(&t),
            vec![
                json!({ "role": "system", "content": "be careful" }),
                json!({ "role": "user", "content": "review a.rs" }),
                json!({ "role": "assistant", "content": null, "tool_calls": [
                    { "id": "c1", "type": "function", "function": { "name": "Read", "arguments": "{\"file_path\":\"a.rs\"}" } }
                ] }),
                json!({ "role": "tool", "tool_call_id": "c1", "content": "Error: no such file" }),
            ]
        );
        let body = loop_body(&OpenAiConfig::default(), &t);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({ "include_usage": true }));
        assert_eq!(body["tools"][0]["function"]["name"], "Read");
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["required"],
            json!(["file_path"])
        );
    }

    #[rstest]
    #[case::object(StructuredOutput::JsonObject, false, Some(json!({ "type": "json_object" })))]
    #[case::none(StructuredOutput::None, true, None)]
    #[case::schema(StructuredOutput::JsonSchema, false, Some(json!({
        "type": "json_schema",
        "json_schema": { "name": "answer", "schema": schema(), "strict": false }
    })))]
    fn response_formats(
        #[case] mode: StructuredOutput,
        #[case] strict: bool,
        #[case] want: Option<Value>,
    ) {
        assert_eq!(response_format(mode, strict, &schema()), want);
    }

    #[rstest]
    #[case::optional_property(schema(), false)]
    #[case::all_required(json!({
        "type": "object",
        "properties": { "a": { "type": "array", "items": { "type": "object", "properties": { "x": { "type": "string" } }, "required": ["x"], "additionalProperties": false } } },
        "required": ["a"], "additionalProperties": false
    }), true)]
    #[case::open_nested(json!({
        "type": "object",
        "properties": { "a": { "type": "array", "items": { "type": "object", "properties": {}, "additionalProperties": true } } },
        "required": ["a"], "additionalProperties": false
    }), false)]
    #[case::one_of(json!({
        "type": "object",
        "properties": { "a": { "oneOf": [{ "type": "string" }, { "type": "null" }] } },
        "required": ["a"], "additionalProperties": false
    }), false)]
    #[case::nullable_type_array(json!({
        "type": "object",
        "properties": { "a": { "type": ["string", "null"] } },
        "required": ["a"], "additionalProperties": false
    }), true)]
    #[case::open_object_behind_type_array(json!({
        "type": "object",
        "properties": { "a": { "type": ["object", "null"], "properties": {} } },
        "required": ["a"], "additionalProperties": false
    }), false)]
    #[case::ref_and_defs(json!({
        "type": "object", "$defs": { "s": { "type": "string" } },
        "properties": { "a": { "$ref": "#/$defs/s" } },
        "required": ["a"], "additionalProperties": false
    }), false)]
    #[case::string_constraint(json!({
        "type": "object",
        "properties": { "a": { "type": "string", "minLength": 1 } },
        "required": ["a"], "additionalProperties": false
    }), false)]
    fn strict_mode_only_for_schemas_that_allow_it(#[case] s: Value, #[case] strict: bool) {
        assert_eq!(strict_compatible(&s), strict);
        let rf = response_format(StructuredOutput::JsonSchema, true, &s).expect("some");
        assert_eq!(rf["json_schema"]["strict"], strict);
    }

    #[rstest]
    #[case::off(false, Some("low"), None)]
    #[case::on(true, Some("low"), Some("low"))]
    #[case::max(true, Some("max"), Some("high"))]
    #[case::absent(true, None, None)]
    fn reasoning_effort_only_when_enabled(
        #[case] enabled: bool,
        #[case] effort: Option<&str>,
        #[case] sent: Option<&str>,
    ) {
        let cfg = OpenAiConfig {
            reasoning_effort: enabled,
            ..OpenAiConfig::default()
        };
        let body = request_body(&cfg, "m", &[], None, effort);
        assert_eq!(body.get("reasoning_effort").and_then(Value::as_str), sent);
    }

    #[test]
    fn optional_knobs_are_sent_only_when_set() {
        let cfg = OpenAiConfig {
            stream: false,
            ..OpenAiConfig::default()
        };
        let messages = vec![Message::User("hi".into())];
        let body = loop_body(&cfg, &turn(None, &messages, &[]));
        assert_eq!(
            body,
            json!({ "model": "m", "messages": [{ "role": "user", "content": "hi" }], "stream": false })
        );
        let cfg = OpenAiConfig {
            temperature: Some(0.5),
            max_tokens: Some(64),
            ..OpenAiConfig::default()
        };
        let mut t = turn(None, &messages, &[]);
        let s = schema();
        t.schema = Some(&s);
        let body = loop_body(&cfg, &t);
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["response_format"], json!({ "type": "json_object" }));
        assert!(body.get("tools").is_none(), "no tools, no tools field");
    }

    #[rstest]
    #[case::not_json(b"<html>busy</html>".as_slice(), "not JSON")]
    #[case::no_choices(br#"{"id":"x"}"#.as_slice(), "no choices[0]")]
    #[case::empty_choices(br#"{"choices":[]}"#.as_slice(), "no choices[0]")]
    #[case::choices_not_array(br#"{"choices":{}}"#.as_slice(), "no choices[0]")]
    #[case::null_content(br#"{"choices":[{"message":{"content":null},"finish_reason":"stop"}]}"#.as_slice(), "no text in choices[0].message.content (finish_reason \"stop\")")]
    #[case::number_content(br#"{"choices":[{"message":{"content":7}}]}"#.as_slice(), "no text")]
    #[case::no_message(br#"{"choices":[{}]}"#.as_slice(), "no text")]
    #[case::refusal(br#"{"choices":[{"message":{"content":null,"refusal":"I can't"}}]}"#.as_slice(), "the model refused: I can't")]
    #[case::error_object(br#"{"error":{"message":"quota exceeded"}}"#.as_slice(), "quota exceeded")]
    fn malformed_responses_have_clear_reasons(#[case] body: &[u8], #[case] want: &str) {
        let err = loop_reply(body).expect_err("malformed").to_string();
        assert!(err.contains(want), "{err} should contain {want}");
    }

    #[test]
    fn content_tool_calls_and_usage() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        let reply = loop_reply(body).expect("a reply");
        assert_eq!(reply.text, "hi");
        assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        assert_eq!(reply.usage, Some(Usage::new(12, 3)));
        let body = br#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"Grep","arguments":"{\"pattern\":\"fn\"}"}},{"function":{"name":"LS","arguments":"nope"}}]},"finish_reason":"tool_calls"}]}"#;
        let reply = loop_reply(body).expect("a reply");
        assert_eq!(reply.text, "");
        assert_eq!(reply.tool_calls.len(), 2);
        assert_eq!(
            reply.tool_calls[0].input,
            Input::Json(json!({ "pattern": "fn" }))
        );
        assert_eq!(reply.tool_calls[1].id, "call_1");
        assert_eq!(reply.tool_calls[1].input, Input::Unparsable("nope".into()));
        assert_eq!(
            usage_of(&json!({ "usage": { "prompt_tokens": "x" } })),
            None
        );
    }
}
