//! The chat-completions wire format: what one request body looks like and
//! what is taken from a response. Pure functions, no I/O.

use dsh_protocol::schema::{self, Violation};
use serde_json::{Map, Value, json};

use super::config::{OpenAiConfig, StructuredOutput};
use crate::provider::Usage;

/// Deepest schema nesting walked when deciding on strict mode (the schema
/// already passed the subset check, which bounds it the same way).
const MAX_DEPTH: usize = 64;

/// How much of a body a message quotes.
pub const EXCERPT_CHARS: usize = 300;

/// How many validation problems a correction or a failure lists.
const PROBLEM_LIMIT: usize = 20;

/// The system message: the configured system prompt (from
/// `[agent_types.NAME]`) and, for a schema call, the instruction to answer
/// with JSON matching the schema. `None` when there is neither.
pub fn system_message(system_prompt: Option<&str>, schema: Option<&Value>) -> Option<String> {
    let instruction = schema.map(|s| {
        let text = serde_json::to_string_pretty(s).unwrap_or_else(|_| s.to_string());
        format!(
            "Reply in json: a single JSON object that matches the JSON Schema below, with no \
             prose before or after it and no code fences.\n\nJSON Schema:\n{text}"
        )
    });
    match (system_prompt.filter(|s| !s.trim().is_empty()), instruction) {
        (Some(p), Some(i)) => Some(format!("{p}\n\n{i}")),
        (Some(p), None) => Some(p.to_string()),
        (None, i) => i,
    }
}

/// The opening messages of a call: the optional system message, then the
/// prompt.
pub fn opening_messages(
    system_prompt: Option<&str>,
    schema: Option<&Value>,
    prompt: &str,
) -> Vec<Value> {
    let mut messages = Vec::with_capacity(2);
    if let Some(system) = system_message(system_prompt, schema) {
        messages.push(json!({ "role": "system", "content": system }));
    }
    messages.push(json!({ "role": "user", "content": prompt }));
    messages
}

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

/// What one successful response carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub content: String,
    pub finish_reason: Option<String>,
}

/// Parses a response body: the answer (or why there is none) and the
/// usage, which is counted even when the answer is unusable.
pub fn parse_response(body: &[u8]) -> (Result<Reply, String>, Option<Usage>) {
    let root: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return (
                Err(format!(
                    "the API's response is not JSON ({e}); it starts: {}",
                    excerpt(body)
                )),
                None,
            );
        }
    };
    let usage = usage_of(&root);
    (reply_of(&root, body), usage)
}

fn usage_of(root: &Value) -> Option<Usage> {
    let u = root.get("usage")?.as_object()?;
    let input = u.get("prompt_tokens").and_then(Value::as_u64);
    let output = u.get("completion_tokens").and_then(Value::as_u64);
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        input: input.unwrap_or(0),
        output: output.unwrap_or(0),
    })
}

fn reply_of(root: &Value, body: &[u8]) -> Result<Reply, String> {
    if let Some(err) = root.get("error").filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| short(&err.to_string()));
        return Err(format!("the API answered with an error: {msg}"));
    }
    let Some(choice) = root
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    else {
        return Err(format!(
            "the API's response has no choices[0]; it starts: {}",
            excerpt(body)
        ));
    };
    let message = choice.get("message");
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    match message.and_then(|m| m.get("content")) {
        Some(Value::String(s)) => Ok(Reply {
            content: s.clone(),
            finish_reason,
        }),
        _ => {
            if let Some(r) = message
                .and_then(|m| m.get("refusal"))
                .and_then(Value::as_str)
            {
                return Err(format!("the model refused: {}", short(r)));
            }
            let why = finish_reason
                .map(|f| format!(" (finish_reason {f:?})"))
                .unwrap_or_default();
            Err(format!(
                "the API's response has no text in choices[0].message.content{why}"
            ))
        }
    }
}

/// Parses a structured answer and validates it. `Err` is the list of
/// problems, one a line, as it goes back to the model.
pub(crate) fn check_answer(schema: &Value, reply: &Reply) -> Result<Value, String> {
    let cut = if reply.finish_reason.as_deref() == Some("length") {
        " (the answer was cut off at the token limit)"
    } else {
        ""
    };
    let value: Value = serde_json::from_str(strip_fences(&reply.content))
        .map_err(|e| format!("the answer is not JSON{cut}: {e}"))?;
    let problems = schema::validate(schema, &value, "value");
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(list(&problems))
    }
}

fn list(problems: &[Violation]) -> String {
    let mut lines: Vec<String> = problems
        .iter()
        .take(PROBLEM_LIMIT)
        .map(|p| format!("- {p}"))
        .collect();
    if problems.len() > PROBLEM_LIMIT {
        lines.push(format!("- … and {} more", problems.len() - PROBLEM_LIMIT));
    }
    format!(
        "the answer does not match the schema:\n{}",
        lines.join("\n")
    )
}

/// The user message of the one corrective retry.
pub fn correction(problems: &str) -> String {
    format!(
        "Your previous reply cannot be used: {problems}\n\nReply in json again: only the \
         corrected JSON object that matches the JSON Schema from the system message."
    )
}

/// A model may wrap its JSON in a Markdown code fence even when asked not
/// to; the fence is not part of the answer.
fn strip_fences(s: &str) -> &str {
    let t = s.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let Some(inner) = rest.strip_suffix("```") else {
        return t;
    };
    // Drop the info string ("json") on the opening line.
    match inner.find('\n') {
        Some(i) => inner[i + 1..].trim(),
        None => inner.trim(),
    }
}

/// The start of a body, for messages: valid UTF-8, one line, bounded.
pub fn excerpt(body: &[u8]) -> String {
    short(&String::from_utf8_lossy(body))
}

fn short(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EXCERPT_CHARS + 1)
        .collect();
    let one_line = one_line.trim();
    if one_line.is_empty() {
        return "(empty)".into();
    }
    if one_line.chars().count() > EXCERPT_CHARS {
        let cut: String = one_line.chars().take(EXCERPT_CHARS).collect();
        format!("{cut}…")
    } else {
        one_line.to_string()
    }
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

    #[test]
    fn system_message_combines_prompt_and_schema() {
        assert_eq!(system_message(None, None), None);
        assert_eq!(system_message(Some("  "), None), None);
        assert_eq!(
            system_message(Some("You review code."), None).as_deref(),
            Some("You review code.")
        );
        let s = system_message(Some("You review code."), Some(&schema())).expect("some");
        assert!(s.starts_with("You review code.\n\nReply in json"), "{s}");
        assert!(s.contains("\"additionalProperties\": false"), "{s}");
        let only = system_message(None, Some(&schema())).expect("some");
        assert!(only.starts_with("Reply in json"), "{only}");
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
        let cfg = OpenAiConfig::default();
        let msgs = opening_messages(None, None, "hi");
        let body = request_body(&cfg, "m", &msgs, None, None);
        assert_eq!(
            body,
            json!({ "model": "m", "messages": [{ "role": "user", "content": "hi" }], "stream": false })
        );
        let cfg = OpenAiConfig {
            temperature: Some(0.5),
            max_tokens: Some(64),
            ..OpenAiConfig::default()
        };
        let body = request_body(&cfg, "m", &msgs, Some(&schema()), None);
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["response_format"], json!({ "type": "json_object" }));
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
        let (reply, _) = parse_response(body);
        let err = reply.expect_err("malformed");
        assert!(err.contains(want), "{err} should contain {want}");
    }

    #[test]
    fn content_and_usage() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        let (reply, usage) = parse_response(body);
        assert_eq!(
            reply,
            Ok(Reply {
                content: "hi".into(),
                finish_reason: Some("stop".into())
            })
        );
        assert_eq!(
            usage,
            Some(Usage {
                input: 12,
                output: 3
            })
        );
        // Usage is counted even when the answer is unusable.
        let (reply, usage) =
            parse_response(br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":0}}"#);
        assert!(reply.is_err());
        assert_eq!(
            usage,
            Some(Usage {
                input: 5,
                output: 0
            })
        );
        let (_, usage) = parse_response(br#"{"choices":[],"usage":{"prompt_tokens":"x"}}"#);
        assert_eq!(usage, None);
    }

    #[rstest]
    #[case::plain(r#"{"ok":true}"#, Ok(json!({ "ok": true })))]
    #[case::fenced("```json\n{\"ok\":false}\n```", Ok(json!({ "ok": false })))]
    #[case::bare_fence("```{\"ok\":false}```", Ok(json!({ "ok": false })))]
    #[case::wrong_type(r#"{"ok":"yes"}"#, Err("value.ok"))]
    #[case::missing(r#"{}"#, Err("value: missing required property \"ok\""))]
    #[case::prose("Sure! Here it is", Err("the answer is not JSON"))]
    fn answers_are_checked(#[case] content: &str, #[case] want: Result<Value, &str>) {
        let reply = Reply {
            content: content.into(),
            finish_reason: None,
        };
        match (check_answer(&schema(), &reply), want) {
            (Ok(v), Ok(w)) => assert_eq!(v, w),
            (Err(e), Err(w)) => assert!(e.contains(w), "{e} should contain {w}"),
            (got, want) => panic!("got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn a_cut_off_answer_says_so() {
        let reply = Reply {
            content: "{\"ok\": tr".into(),
            finish_reason: Some("length".into()),
        };
        let err = check_answer(&schema(), &reply).expect_err("cut");
        assert!(err.contains("cut off"), "{err}");
    }

    #[test]
    fn excerpts_are_short_single_lines() {
        assert_eq!(excerpt(b""), "(empty)");
        assert_eq!(excerpt(b"a\nb\r\n"), "a b");
        let long = "x".repeat(1000);
        let e = excerpt(long.as_bytes());
        assert_eq!(e.chars().count(), EXCERPT_CHARS + 1);
        assert!(e.ends_with('…'));
        assert_eq!(excerpt(&[0xff, b'a']), "\u{fffd}a");
    }
}
