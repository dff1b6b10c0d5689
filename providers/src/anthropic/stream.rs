//! A Messages response as it streams: `message_start` (the input usage),
//! `content_block_start` / `content_block_delta` (text, and tool uses whose
//! input arrives as pieces of JSON), `message_delta` (the stop reason and
//! the output usage), `message_stop`; `error` ends it. A plain JSON body is
//! read whole.

use serde_json::Value;

use super::api;
use crate::agent::conversation::{Input, Reply, ReplyError, ToolCall};
use crate::streamed::{Arrived, EventParser, Streamed};
use dsh_seam::{Progress, Usage};

/// Most content blocks kept (a hostile index cannot allocate much).
const MAX_BLOCKS: usize = 1024;

#[derive(Debug, Clone)]
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

/// The events of one streamed Messages response.
#[derive(Debug, Default)]
pub struct MessageEvents {
    blocks: Vec<Block>,
    stop: Option<String>,
    input: Option<u64>,
    output: Option<u64>,
    /// Of the input, tokens read from and written to the prompt cache.
    cache: (u64, u64),
    error: Option<ReplyError>,
    stopped: bool,
    pieces: u64,
}

/// A response of the Messages API, as it streams in.
pub type MessageStream = Streamed<MessageEvents>;

/// A sink for one turn's response.
pub fn sink(progress: Progress, so_far: Usage) -> MessageStream {
    Streamed::new(MessageEvents::default, progress, so_far)
}

/// The turn's reply, or why there is none.
pub fn reply(stream: MessageStream) -> Result<Reply, ReplyError> {
    match stream.arrived() {
        Arrived::Nothing => Err(ReplyError::Malformed(
            "the API's response had no body".into(),
        )),
        Arrived::Whole(body) => api::reply(&body),
        Arrived::Events(events) => events.reply(),
    }
}

impl MessageEvents {
    fn reply(self) -> Result<Reply, ReplyError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !self.stopped && self.stop.is_none() {
            return Err(ReplyError::Malformed(
                "the API's event stream ended before the answer was complete (no \
                        message_stop)"
                    .into(),
            ));
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for b in self.blocks {
            match b {
                Block::Text(t) => text.push_str(&t),
                Block::Tool { id, name, json } => tool_calls.push(ToolCall {
                    id,
                    name,
                    input: Input::parse(&json),
                }),
                Block::Other => {}
            }
        }
        let usage = (self.input.is_some() || self.output.is_some()).then(|| Usage {
            cache_read: self.cache.0,
            cache_write: self.cache.1,
            ..Usage::new(self.input.unwrap_or(0), self.output.unwrap_or(0))
        });
        Ok(Reply {
            text,
            tool_calls,
            finish_reason: self.stop,
            usage,
        })
    }

    fn start_block(&mut self, index: Option<usize>, cb: Option<&Value>) {
        let Some(i) = index.filter(|i| *i < MAX_BLOCKS) else {
            return;
        };
        let s = |k: &str| {
            cb.and_then(|c| c.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let block = match cb.and_then(|c| c.get("type")).and_then(Value::as_str) {
            Some("text") => Block::Text(s("text")),
            Some("tool_use") => Block::Tool {
                id: s("id"),
                name: s("name"),
                json: String::new(),
            },
            _ => Block::Other,
        };
        if self.blocks.len() <= i {
            self.blocks.resize(i + 1, Block::Other);
        }
        self.blocks[i] = block;
    }

    fn delta(&mut self, index: Option<usize>, d: Option<&Value>) {
        let Some(b) = index.and_then(|i| self.blocks.get_mut(i)) else {
            return;
        };
        let s = |k: &str| {
            d.and_then(|d| d.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        match b {
            Block::Text(t) => t.push_str(s("text")),
            Block::Tool { json, .. } => json.push_str(s("partial_json")),
            Block::Other => {}
        }
        self.pieces += 1;
    }
}

impl EventParser for MessageEvents {
    fn event(&mut self, data: &str) {
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                self.error.get_or_insert_with(|| {
                    ReplyError::Malformed(format!(
                        "the API's event stream has an event that is not JSON ({e})"
                    ))
                });
                return;
            }
        };
        let index = v
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok());
        match v.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(u) = v.pointer("/message/usage").and_then(api::usage) {
                    self.input = Some(u.input);
                    self.output = Some(u.output);
                    self.cache = (u.cache_read, u.cache_write);
                }
            }
            Some("content_block_start") => self.start_block(index, v.get("content_block")),
            Some("content_block_delta") => self.delta(index, v.get("delta")),
            Some("message_delta") => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(r.to_string());
                }
                if let Some(o) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.output = Some(o);
                }
            }
            Some("message_stop") => self.stopped = true,
            Some("error") => {
                let e = ReplyError::Api(api::api_error(v.get("error").unwrap_or(&Value::Null)));
                self.error.get_or_insert(e);
            }
            _ => {}
        }
    }

    fn pieces(&self) -> u64 {
        self.pieces
    }

    fn input(&self) -> u64 {
        self.input.unwrap_or(0)
    }

    fn has_content(&self) -> bool {
        !self.blocks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::BodySink;

    #[test]
    fn a_streamed_tool_use_and_text() {
        let mut s = sink(Progress::new(), Usage::new(0, 0));
        s.start(Some("text/event-stream"));
        let events = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me look.\"}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu1\",\"name\":\"Glob\",\"input\":{}}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pattern\\\": \"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"**/*.rs\\\"}\"}}\n\n",
            "data: {\"type\":\"ping\"}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":30}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        for c in events.as_bytes().chunks(11) {
            s.chunk(c).expect("fed");
        }
        let r = reply(s).expect("reply");
        assert_eq!(r.text, "Let me look.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "Glob");
        assert_eq!(
            r.tool_calls[0].input,
            Input::Json(serde_json::json!({ "pattern": "**/*.rs" }))
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            r.usage,
            Some(Usage {
                cache_read: 5,
                ..Usage::new(25, 30)
            })
        );
    }

    #[test]
    fn an_error_event_fails_the_turn() {
        let mut s = sink(Progress::new(), Usage::new(0, 0));
        s.start(Some("text/event-stream"));
        s.chunk(b"data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
            .expect("fed");
        let e = reply(s).expect_err("an error").to_string();
        assert!(e.contains("overloaded_error: Overloaded"), "{e}");
    }
}
