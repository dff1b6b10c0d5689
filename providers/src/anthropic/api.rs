//! The Messages API wire format: the request body of a loop turn, and a
//! whole (non-streamed) response read as a loop reply. Pure functions.

use serde_json::{Map, Value, json};

use super::config::AnthropicConfig;
use crate::agent::Turn;
use crate::agent::conversation::{Input, Message, Reply, ReplyError, ToolCall};
use crate::excerpt::excerpt;
use dsh_seam::Usage;

/// The `messages` of a turn: user and assistant turns, tool uses as
/// `tool_use` blocks, their results as `tool_result` blocks of a user turn.
pub fn messages(turn: &Turn<'_>) -> Vec<Value> {
    let mut out = Vec::with_capacity(turn.messages.len());
    for (i, m) in turn.messages.iter().enumerate() {
        match m {
            // The head other calls share is its own block, marked for the
            // prompt cache: the API caches up to a marked block only.
            Message::User(text) if i == 0 && turn.shared_head.is_some_and(|h| h < text.len()) => {
                let h = turn.shared_head.unwrap_or(0);
                let (head, tail) = text.split_at(h);
                out.push(json!({ "role": "user", "content": [
                    { "type": "text", "text": head, "cache_control": cache_mark() },
                    { "type": "text", "text": tail },
                ] }));
            }
            Message::User(text) => out.push(json!({ "role": "user", "content": text })),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for c in tool_calls {
                    // The API wants an object; arguments that were not
                    // one are answered by an error result anyway.
                    let input = match &c.input {
                        Input::Json(v @ Value::Object(_)) => v.clone(),
                        _ => Value::Object(Map::new()),
                    };
                    blocks.push(json!({
                        "type": "tool_use", "id": c.id, "name": c.name, "input": input,
                    }));
                }
                if blocks.is_empty() {
                    blocks.push(json!({ "type": "text", "text": "(no answer)" }));
                }
                out.push(json!({ "role": "assistant", "content": blocks }));
            }
            Message::ToolResults(results) => {
                let blocks: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        json!({
                            "type": "tool_result",
                            "tool_use_id": r.id,
                            "content": r.content,
                            "is_error": r.is_error,
                        })
                    })
                    .collect();
                out.push(json!({ "role": "user", "content": blocks }));
            }
        }
    }
    out
}

/// `{"type": "ephemeral"}`: cache the request up to this block.
fn cache_mark() -> Value {
    json!({ "type": "ephemeral" })
}

/// The request body of a turn. A turn of the agent loop (it has tools)
/// marks the end of the conversation for the prompt cache, so the next
/// turn reads everything before its own new messages from cache (the
/// API keeps it five minutes; a write costs 1.25× input, a read 0.1×).
pub fn body(cfg: &AnthropicConfig, turn: &Turn<'_>) -> Value {
    let mut b = Map::new();
    b.insert("model".into(), turn.model.into());
    b.insert("max_tokens".into(), cfg.max_tokens.into());
    if let Some(s) = turn.system {
        b.insert("system".into(), s.into());
    }
    let mut msgs = messages(turn);
    if !turn.tools.is_empty() {
        mark_last_block(&mut msgs);
    }
    b.insert("messages".into(), Value::Array(msgs));
    if let Some(t) = cfg.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if !turn.tools.is_empty() {
        let tools: Vec<Value> = turn
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
        b.insert("tools".into(), Value::Array(tools));
    }
    if cfg.stream {
        b.insert("stream".into(), true.into());
    }
    Value::Object(b)
}

/// Marks the last content block of the last message for the prompt
/// cache (a string content becomes one text block).
fn mark_last_block(msgs: &mut [Value]) {
    let Some(last) = msgs.last_mut() else {
        return;
    };
    if let Some(text) = last["content"].as_str().map(str::to_string) {
        last["content"] = json!([{ "type": "text", "text": text }]);
    }
    if let Some(block) = last["content"]
        .as_array_mut()
        .and_then(|b| b.last_mut())
        .and_then(Value::as_object_mut)
    {
        block.insert("cache_control".into(), cache_mark());
    }
}

/// The tokens of a `usage` object: every kind of input (cached or not)
/// counts as input.
pub fn usage(u: &Value) -> Option<Usage> {
    let u = u.as_object()?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| n(k))
    .fold(None, |acc: Option<u64>, x| {
        Some(acc.unwrap_or(0).saturating_add(x))
    });
    let output = n("output_tokens");
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        cache_read: n("cache_read_input_tokens").unwrap_or(0),
        cache_write: n("cache_creation_input_tokens").unwrap_or(0),
        ..Usage::new(input.unwrap_or(0), output.unwrap_or(0))
    })
}

/// An `error` object in words.
pub fn api_error(err: &Value) -> String {
    let kind = err.get("type").and_then(Value::as_str).unwrap_or("error");
    let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
    format!("the API answered with an error: {kind}: {msg}")
}

/// A whole Messages response as a loop reply.
pub fn reply(body: &[u8]) -> Result<Reply, ReplyError> {
    let root: Value = serde_json::from_slice(body).map_err(|e| {
        ReplyError::Malformed(format!(
            "the API's response is not JSON ({e}); it starts: {}",
            excerpt(body)
        ))
    })?;
    if root.get("type").and_then(Value::as_str) == Some("error") {
        return Err(ReplyError::Api(api_error(
            root.get("error").unwrap_or(&Value::Null),
        )));
    }
    let Some(content) = root.get("content").and_then(Value::as_array) else {
        return Err(ReplyError::Malformed(format!(
            "the API's response has no content; it starts: {}",
            excerpt(body)
        )));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                input: Input::Json(block.get("input").cloned().unwrap_or(Value::Null)),
            }),
            _ => {}
        }
    }
    Ok(Reply {
        text,
        tool_calls,
        finish_reason: root
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage: root.get("usage").and_then(usage),
    })
}
