//! Reading a streamed chat completion (`stream: true`): the events'
//! text deltas, the tool calls' names and argument pieces (by `index`),
//! the finish reason, and the usage of the last chunk
//! (`stream_options.include_usage`), assembled into one reply. A server
//! that answers with a plain JSON body instead is read the old way.

use serde_json::Value;

use super::api;
use crate::agent::conversation::{Input, Reply, ReplyError, ToolCall};
use crate::streamed::{Arrived, EventParser, Streamed};
use dsh_seam::{Progress, Usage};

/// Most tool calls one answer may carry (a hostile index cannot allocate
/// much).
const MAX_CALLS: usize = 1024;

#[derive(Debug, Default, Clone)]
struct PartialCall {
    id: String,
    name: String,
    args: String,
}

/// The events of one streamed chat completion.
#[derive(Debug, Default)]
pub struct ChatEvents {
    text: String,
    calls: Vec<PartialCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    error: Option<ReplyError>,
    /// Text and argument pieces seen (≈ output tokens).
    pieces: u64,
    done: bool,
}

/// A response of the chat-completions API, as it streams in.
pub type ChatStream = Streamed<ChatEvents>;

/// A sink for one turn's response.
pub fn sink(progress: Progress, so_far: Usage) -> ChatStream {
    Streamed::new(ChatEvents::default, progress, so_far)
}

/// The turn's reply, or why there is none.
pub fn reply(stream: ChatStream) -> Result<Reply, ReplyError> {
    match stream.arrived() {
        Arrived::Nothing => Err(ReplyError::Malformed(
            "the API's response had no body".into(),
        )),
        Arrived::Whole(body) => api::loop_reply(&body),
        Arrived::Events(events) => events.reply(),
    }
}

impl ChatEvents {
    fn reply(self) -> Result<Reply, ReplyError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !self.done && self.finish.is_none() {
            return Err(ReplyError::Malformed(
                "the API's event stream ended before the answer was complete (no finish_reason, \
                 no [DONE])"
                    .into(),
            ));
        }
        let tool_calls = self
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
        Ok(Reply {
            text: self.text,
            tool_calls,
            finish_reason: self.finish,
            usage: self.usage,
        })
    }

    fn delta(&mut self, delta: &Value) {
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
            if index >= MAX_CALLS {
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
    }
}

impl EventParser for ChatEvents {
    /// One event: a JSON chunk, or `[DONE]`.
    fn event(&mut self, data: &str) {
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                self.error.get_or_insert_with(|| {
                    ReplyError::Malformed(format!(
                        "the API's event stream has a chunk that is not JSON ({e}): {}",
                        crate::excerpt::excerpt(data.as_bytes())
                    ))
                });
                return;
            }
        };
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            self.error
                .get_or_insert_with(|| ReplyError::Api(api::api_error(err)));
            return;
        }
        if let Some(u) = api::usage_of(&chunk) {
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
        if let Some(delta) = choice.get("delta") {
            self.delta(delta);
        }
    }

    fn pieces(&self) -> u64 {
        self.pieces
    }

    fn has_content(&self) -> bool {
        !self.text.is_empty() || !self.calls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::BodySink;

    fn feed(chunks: &[&[u8]]) -> Result<Reply, ReplyError> {
        let mut s = sink(Progress::new(), Usage::new(0, 0));
        s.start(Some("text/event-stream; charset=utf-8"));
        for c in chunks {
            s.chunk(c).expect("a line within the bound");
        }
        reply(s)
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
        let pieces: Vec<&[u8]> = events.as_bytes().chunks(7).collect();
        let r = feed(&pieces).expect("a reply");
        assert_eq!(r.text, "Hello");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "c1");
        assert_eq!(r.tool_calls[0].name, "Read");
        assert_eq!(
            r.tool_calls[0].input,
            Input::Json(serde_json::json!({ "file_path": "a.rs" }))
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage, Some(Usage::new(11, 7)));
    }

    #[test]
    fn a_cut_stream_and_an_error_chunk_are_failures() {
        let cut = feed(&[b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n"]);
        assert!(cut.unwrap_err().to_string().contains("ended before"));
        let err = feed(&[b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n"]);
        assert!(err.unwrap_err().to_string().contains("overloaded"));
        let bad = feed(&[b"data: {nope\n\ndata: [DONE]\n\n"]);
        assert!(bad.unwrap_err().to_string().contains("not JSON"));
    }

    #[test]
    fn a_plain_json_body_is_read_whole() {
        let mut s = sink(Progress::new(), Usage::new(0, 0));
        s.start(Some("application/json"));
        s.chunk(br#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#)
            .expect("fed");
        let r = reply(s).expect("reply");
        assert_eq!(r.text, "hi");
        assert_eq!(r.usage, Some(Usage::new(1, 2)));
    }

    #[test]
    fn restart_forgets_a_partial_answer_and_says_so() {
        let mut s = sink(Progress::new(), Usage::new(0, 0));
        s.start(Some("text/event-stream"));
        s.chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n")
            .expect("fed");
        assert!(s.restart(), "part of an answer had streamed");
        assert!(!s.restart(), "nothing since");
        s.start(Some("text/event-stream"));
        s.chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"whole\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
            .expect("fed");
        assert_eq!(reply(s).expect("reply").text, "whole");
    }

    #[test]
    fn tokens_so_far_are_reported_while_streaming() {
        let progress = Progress::new();
        let mut s = sink(progress.clone(), Usage::new(100, 10));
        s.start(Some("text/event-stream"));
        s.chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
            .expect("fed");
        let got = futures_now(progress.next_activities());
        assert_eq!(
            got,
            vec![dsh_seam::Activity::Tokens {
                usage: Usage::new(100, 11)
            }]
        );
    }

    /// Polls a future that is ready at once.
    fn futures_now<F: std::future::Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("not ready"),
        }
    }
}
