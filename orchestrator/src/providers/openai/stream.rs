//! Reading a chat completion as it arrives: server-sent events
//! (`stream: true`) assembled into one reply — the text deltas, the tool
//! calls' names and argument pieces (by `index`), the finish reason, and
//! the usage of the last chunk (`stream_options.include_usage`). A server
//! that answers with a plain JSON body instead is read the old way.
//!
//! Every chunk is progress; the streamed pieces are counted as output
//! tokens so far and shown as [`Activity::Tokens`], at most every
//! [`TOKENS_EVERY`].

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::api;
use super::http::BodySink;
use crate::provider::{Activity, Progress, Usage};
use crate::providers::agent::conversation::{Input, Reply, ToolCall};
use crate::providers::sse::SseDecoder;

/// Most often a streaming turn reports its tokens so far.
pub const TOKENS_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No response yet.
    Waiting,
    /// `text/event-stream`.
    Events,
    /// Anything else: the whole body is one JSON completion.
    Whole,
}

#[derive(Debug, Default, Clone)]
struct PartialCall {
    id: String,
    name: String,
    args: String,
}

/// One turn's response, as it streams in.
pub struct ChatStream {
    mode: Mode,
    /// `Whole`: the body.
    buf: Vec<u8>,
    /// `Events`: the event stream's framing.
    sse: SseDecoder,
    text: String,
    calls: Vec<PartialCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    error: Option<String>,
    /// Text and argument pieces seen (≈ output tokens).
    pieces: u64,
    done: bool,
    progress: Progress,
    so_far: Usage,
    last_tokens: Option<Instant>,
}

impl ChatStream {
    /// A stream whose token reports start from `so_far` (the call's
    /// earlier turns).
    pub fn new(progress: Progress, so_far: Usage) -> Self {
        ChatStream {
            mode: Mode::Waiting,
            buf: Vec::new(),
            sse: SseDecoder::default(),
            text: String::new(),
            calls: Vec::new(),
            finish: None,
            usage: None,
            error: None,
            pieces: 0,
            done: false,
            progress,
            so_far,
            last_tokens: None,
        }
    }

    /// The assembled reply, or why there is none.
    pub fn finish(mut self) -> Result<Reply, String> {
        match self.mode {
            Mode::Waiting => Err("the API's response had no body".into()),
            Mode::Whole => api::loop_reply(&self.buf),
            Mode::Events => {
                let mut sse = std::mem::take(&mut self.sse);
                sse.end(&mut |data| self.event(data));
                if let Some(e) = self.error {
                    return Err(e);
                }
                let tool_calls: Vec<ToolCall> = self
                    .calls
                    .into_iter()
                    .enumerate()
                    .filter(|(_, c)| !c.name.is_empty())
                    .map(|(i, c)| ToolCall {
                        id: if c.id.is_empty() {
                            format!("call_{i}")
                        } else {
                            c.id
                        },
                        name: c.name,
                        input: Input::parse(&c.args),
                    })
                    .collect();
                if !self.done && self.finish.is_none() {
                    return Err(
                        "the API's event stream ended before the answer was complete (no \
                         finish_reason, no [DONE])"
                            .into(),
                    );
                }
                Ok(Reply {
                    text: self.text,
                    tool_calls,
                    finish_reason: self.finish,
                    usage: self.usage,
                })
            }
        }
    }

    /// One complete event: its data is a JSON chunk, or `[DONE]`.
    fn event(&mut self, data: &str) {
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                self.error.get_or_insert_with(|| {
                    format!(
                        "the API's event stream has a chunk that is not JSON ({e}): {}",
                        api::excerpt(data.as_bytes())
                    )
                });
                return;
            }
        };
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            self.error.get_or_insert_with(|| api::api_error(err));
            return;
        }
        if let Some(u) = api::usage_in(&chunk) {
            self.usage = Some(u);
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return;
        };
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
        let Some(delta) = choice.get("delta") else {
            return;
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str)
            && !t.is_empty()
        {
            self.text.push_str(t);
            self.pieces += 1;
        }
        for c in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let index = c
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(self.calls.len().saturating_sub(1));
            // A bounded table: a hostile index cannot allocate much.
            if index >= 1024 {
                continue;
            }
            if self.calls.len() <= index {
                self.calls.resize(index + 1, PartialCall::default());
            }
            let slot = &mut self.calls[index];
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                slot.id = id.to_string();
            }
            if let Some(f) = c.get("function") {
                if let Some(n) = f.get("name").and_then(Value::as_str) {
                    slot.name.push_str(n);
                }
                if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                    slot.args.push_str(a);
                    self.pieces += 1;
                }
            }
        }
        self.report_tokens();
    }

    fn report_tokens(&mut self) {
        let now = Instant::now();
        if self.last_tokens.is_some_and(|t| now < t + TOKENS_EVERY) {
            return;
        }
        self.last_tokens = Some(now);
        self.progress.activity(Activity::Tokens {
            usage: Usage {
                input: self.so_far.input,
                output: self.so_far.output.saturating_add(self.pieces),
            },
        });
    }
}

impl BodySink for ChatStream {
    fn start(&mut self, content_type: Option<&str>) {
        self.mode = if content_type.is_some_and(|c| c.contains("text/event-stream")) {
            Mode::Events
        } else {
            Mode::Whole
        };
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<(), String> {
        match self.mode {
            Mode::Whole | Mode::Waiting => self.buf.extend_from_slice(bytes),
            Mode::Events => {
                let mut sse = std::mem::take(&mut self.sse);
                let fed = sse.feed(bytes, &mut |data| self.event(data));
                self.sse = sse;
                fed?;
            }
        }
        Ok(())
    }

    fn restart(&mut self) -> bool {
        let had = !self.buf.is_empty()
            || !self.sse.is_empty()
            || !self.text.is_empty()
            || !self.calls.is_empty();
        let (progress, so_far) = (self.progress.clone(), self.so_far);
        *self = ChatStream::new(progress, so_far);
        had
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(chunks: &[&str]) -> Result<Reply, String> {
        let mut s = ChatStream::new(
            Progress::new(),
            Usage {
                input: 0,
                output: 0,
            },
        );
        s.start(Some("text/event-stream; charset=utf-8"));
        for c in chunks {
            s.chunk(c.as_bytes())?;
        }
        s.finish()
    }

    #[test]
    fn text_and_tool_calls_are_assembled_across_chunk_boundaries() {
        let events = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
            ": a comment\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"Read\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"file_path\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.rs\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7}}\n\n",
            "data: [DONE]\n\n",
        );
        // Split at every 7 bytes: lines and events straddle chunks.
        let bytes = events.as_bytes();
        let pieces: Vec<String> = bytes
            .chunks(7)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        // (7-byte pieces of ASCII text stay valid UTF-8.)
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let r = feed(&refs).expect("a reply");
        assert_eq!(r.text, "Hello");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "c1");
        assert_eq!(r.tool_calls[0].name, "Read");
        assert_eq!(
            r.tool_calls[0].input,
            Input::Json(serde_json::json!({ "file_path": "a.rs" }))
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 11,
                output: 7
            })
        );
    }

    #[test]
    fn a_cut_stream_and_an_error_chunk_are_failures() {
        let cut = feed(&["data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n"]);
        assert!(cut.unwrap_err().contains("ended before"));
        let err = feed(&["data: {\"error\":{\"message\":\"overloaded\"}}\n\n"]);
        assert!(err.unwrap_err().contains("overloaded"));
        let bad = feed(&["data: {nope\n\ndata: [DONE]\n\n"]);
        assert!(bad.unwrap_err().contains("not JSON"));
    }

    #[test]
    fn a_plain_json_body_is_read_whole() {
        let mut s = ChatStream::new(
            Progress::new(),
            Usage {
                input: 0,
                output: 0,
            },
        );
        s.start(Some("application/json"));
        s.chunk(br#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#)
            .expect("fed");
        let r = s.finish().expect("reply");
        assert_eq!(r.text, "hi");
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 1,
                output: 2
            })
        );
    }

    #[test]
    fn restart_forgets_a_partial_answer_and_says_so() {
        let mut s = ChatStream::new(
            Progress::new(),
            Usage {
                input: 0,
                output: 0,
            },
        );
        s.start(Some("text/event-stream"));
        s.chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n")
            .expect("fed");
        assert!(s.restart(), "part of an answer had streamed");
        assert!(!s.restart(), "nothing since");
        s.start(Some("text/event-stream"));
        s.chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"whole\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n").expect("fed");
        assert_eq!(s.finish().expect("reply").text, "whole");
    }
}
