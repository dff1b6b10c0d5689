//! A scripted HTTP/1.1 server on 127.0.0.1 for the openai provider's tests
//! (the unit tests next to the provider, and `tests/openai_provider.rs`,
//! which includes this file by path). It answers each request with the next
//! scripted [`Reply`], records every request, and reports when a client
//! hangs up on a request still waiting for its answer — the server-side
//! signal the cancellation tests synchronize on.
//!
//! Just enough HTTP for reqwest: request line, headers, a `Content-Length`
//! body, keep-alive. Every wait is bounded by [`BOUND`].

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Upper bound of every wait of the tests (never the thing measured).
pub const BOUND: Duration = Duration::from_secs(30);

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response.
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// The reply, after a delay; a client hanging up first is recorded as
    /// a drop and gets nothing.
    After(Duration, Box<Reply>),
    /// Never answers; a client hanging up is recorded as a drop.
    Hang,
    /// These bytes as they are, then the connection is closed.
    Raw(Vec<u8>),
    /// These bytes (say, the head of a response), then nothing more; a
    /// client hanging up is recorded as a drop.
    Stall(Vec<u8>),
}

impl Reply {
    pub fn json(status: u16, v: &Value) -> Reply {
        Reply::Http {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: v.to_string().into_bytes(),
        }
    }

    /// A 200 chat completion answering `content`, with usage.
    pub fn chat_usage(content: &str, input: u64, output: u64) -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "model": "test-model",
                "choices": [{
                    "index": 0,
                    "message": { "role": "assistant", "content": content },
                    "finish_reason": "stop"
                }],
                "usage": {
                    "prompt_tokens": input,
                    "completion_tokens": output,
                    "total_tokens": input + output
                }
            }),
        )
    }

    /// A 200 chat completion answering `content` (usage 10 in, 5 out).
    pub fn chat(content: &str) -> Reply {
        Reply::chat_usage(content, 10, 5)
    }

    /// A status with a plain-text body.
    pub fn status(status: u16, body: &str) -> Reply {
        Reply::Http {
            status,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// A 200 whose body is `body` as it is.
    pub fn body(body: &str) -> Reply {
        Reply::Http {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Http { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// A 200 event stream (`text/event-stream`) of these `data:` payloads.
    pub fn events(data: &[Value]) -> Reply {
        let mut body = String::new();
        for d in data {
            body.push_str(&format!("data: {d}\n\n"));
        }
        Reply::Http {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            body: body.into_bytes(),
        }
    }

    /// A streamed chat completion answering `text`: the text in two
    /// pieces, the finish reason, the usage chunk, `[DONE]`.
    pub fn stream_text(text: &str, input: u64, output: u64) -> Reply {
        let (a, b) = text.split_at(
            text.char_indices()
                .nth(text.chars().count() / 2)
                .map_or(0, |(i, _)| i),
        );
        let mut r = Reply::events(&[
            json!({ "choices": [{ "index": 0, "delta": { "role": "assistant", "content": a } }] }),
            json!({ "choices": [{ "index": 0, "delta": { "content": b } }] }),
            json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
            json!({ "choices": [], "usage": { "prompt_tokens": input, "completion_tokens": output } }),
        ]);
        if let Reply::Http { body, .. } = &mut r {
            body.extend_from_slice(b"data: [DONE]\n\n");
        }
        r
    }

    /// A streamed chat completion calling tools: `(name, arguments)`, ids
    /// `call_1`, `call_2` …; each call's arguments in two pieces.
    pub fn stream_tools(calls: &[(&str, Value)], input: u64, output: u64) -> Reply {
        let mut data = Vec::new();
        for (i, (name, args)) in calls.iter().enumerate() {
            let args = args.to_string();
            let (a, b) = args.split_at(args.len() / 2);
            data.push(json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
                { "index": i, "id": format!("call_{}", i + 1), "type": "function", "function": { "name": name, "arguments": a } }
            ] } }] }));
            data.push(json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
                { "index": i, "function": { "arguments": b } }
            ] } }] }));
        }
        data.push(
            json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
        );
        data.push(json!({ "choices": [], "usage": { "prompt_tokens": input, "completion_tokens": output } }));
        let mut r = Reply::events(&data);
        if let Reply::Http { body, .. } = &mut r {
            body.extend_from_slice(b"data: [DONE]\n\n");
        }
        r
    }

    /// A streamed Messages API answer (Anthropic) with `text` and these
    /// tool uses (`(name, input)`, ids `toolu_N_1`, `toolu_N_2` … in the
    /// N-th reply built).
    /// Message ids are `msg_1`, `msg_2`, … in the order replies are built,
    /// as an API gives each message its own.
    pub fn anthropic(text: &str, calls: &[(&str, Value)], input: u64, output: u64) -> Reply {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("msg_{n}");
        let mut data = vec![json!({ "type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "content": [],
            "usage": { "input_tokens": input, "output_tokens": 1 }
        } })];
        let mut index = 0;
        if !text.is_empty() {
            data.push(json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }));
            data.push(json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } }));
            data.push(json!({ "type": "content_block_stop", "index": 0 }));
            index = 1;
        }
        for (i, (name, args)) in calls.iter().enumerate() {
            let at = index + i;
            let args = args.to_string();
            let (a, b) = args.split_at(args.len() / 2);
            data.push(json!({ "type": "content_block_start", "index": at, "content_block": { "type": "tool_use", "id": format!("toolu_{n}_{}", i + 1), "name": name, "input": {} } }));
            data.push(json!({ "type": "content_block_delta", "index": at, "delta": { "type": "input_json_delta", "partial_json": a } }));
            data.push(json!({ "type": "content_block_delta", "index": at, "delta": { "type": "input_json_delta", "partial_json": b } }));
            data.push(json!({ "type": "content_block_stop", "index": at }));
        }
        let stop = if calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        data.push(json!({ "type": "message_delta", "delta": { "stop_reason": stop }, "usage": { "output_tokens": output } }));
        data.push(json!({ "type": "message_stop" }));
        // A request id, as the API sends one.
        Reply::named_events(&data).header("request-id", &format!("req_{n}"))
    }

    /// A 200 event stream of these payloads, each a named event (`event:
    /// TYPE`, the payload's `type`), as Anthropic's and OpenAI's Responses
    /// APIs send them and their SDKs read them.
    pub fn named_events(data: &[Value]) -> Reply {
        let mut body = String::new();
        for d in data {
            body.push_str(&format!(
                "event: {}\ndata: {d}\n\n",
                d["type"].as_str().unwrap_or("")
            ));
        }
        Reply::Http {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            body: body.into_bytes(),
        }
    }

    /// A streamed Responses API answer (OpenAI's `/v1/responses`, as Codex
    /// reads it): each of `items` as a finished output item, then the
    /// completed response with this usage.
    pub fn responses(items: &[Value], input: u64, output: u64) -> Reply {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut data = vec![json!({ "type": "response.created", "response": {
            "id": format!("resp_{n}"), "object": "response", "status": "in_progress", "output": []
        } })];
        for (i, item) in items.iter().enumerate() {
            data.push(
                json!({ "type": "response.output_item.done", "output_index": i, "item": item }),
            );
        }
        data.push(json!({ "type": "response.completed", "response": {
            "id": format!("resp_{n}"), "object": "response", "status": "completed",
            "usage": { "input_tokens": input, "input_tokens_details": { "cached_tokens": 0 },
                       "output_tokens": output, "output_tokens_details": { "reasoning_tokens": 0 },
                       "total_tokens": input + output }
        } }));
        Reply::named_events(&data)
    }

    pub fn after(self, delay: Duration) -> Reply {
        Reply::After(delay, Box::new(self))
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics otherwise: a test helper).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "request body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// What the server has seen so far.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub requests: Vec<Recorded>,
    /// Requests whose client hung up before the (delayed or never coming)
    /// answer.
    pub dropped: usize,
    /// Delayed answers written to a client still connected.
    pub late_answers: usize,
}

pub struct TestServer {
    addr: SocketAddr,
    seen: watch::Receiver<Seen>,
    task: tokio::task::JoinHandle<()>,
}

/// Computes the reply to a request (a model played by the test).
pub type Handler = Box<dyn Fn(&Recorded) -> Reply + Send + Sync>;

struct State {
    replies: Mutex<VecDeque<Reply>>,
    /// When set, answers every request instead of `replies`.
    handler: Option<Handler>,
    seen: watch::Sender<Seen>,
}

impl TestServer {
    /// Listens on 127.0.0.1 (a free port) and answers with `replies` in
    /// order; once they are used up, with a 500 saying so.
    pub async fn start(replies: Vec<Reply>) -> TestServer {
        Self::launch(replies, None).await
    }

    /// Listens on 127.0.0.1 and answers each request with what `handler`
    /// computes from it.
    pub async fn with_handler(handler: Handler) -> TestServer {
        Self::launch(Vec::new(), Some(handler)).await
    }

    async fn launch(replies: Vec<Reply>, handler: Option<Handler>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = watch::channel(Seen::default());
        let state = Arc::new(State {
            replies: Mutex::new(replies.into()),
            handler,
            seen: tx,
        });
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            conns.spawn(serve(stream, state.clone()));
                        }
                        Err(_) => return,
                    },
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        TestServer {
            addr,
            seen: rx,
            task,
        }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT` (Anthropic's base URL has no `/v1`).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Seen {
        self.seen.borrow().clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.seen.borrow().requests.clone()
    }

    /// Waits (bounded) until `pred` holds.
    pub async fn wait(&self, what: &str, pred: impl Fn(&Seen) -> bool) -> Seen {
        let mut rx = self.seen.clone();
        match tokio::time::timeout(BOUND, rx.wait_for(|s| pred(s))).await {
            Ok(Ok(s)) => s.clone(),
            Ok(Err(_)) => panic!("the test server stopped before {what}"),
            Err(_) => panic!(
                "no {what} within {BOUND:?}; the server saw {:#?}",
                self.seen()
            ),
        }
    }

    /// Waits (bounded) until the server has received `n` requests.
    pub async fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        self.wait(&format!("{n} requests"), |s| s.requests.len() >= n)
            .await
            .requests
    }

    /// Waits (bounded) until `n` clients hung up on a pending answer.
    pub async fn wait_dropped(&self, n: usize) {
        self.wait(&format!("{n} dropped requests"), |s| s.dropped >= n)
            .await;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every
        // connection task.
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, state: Arc<State>) {
    let mut buf = Vec::new();
    loop {
        let Some(req) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let computed = state.handler.as_ref().map(|h| h(&req));
        state.seen.send_modify(|s| s.requests.push(req));
        let reply = computed.unwrap_or_else(|| {
            state
                .replies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front()
                .unwrap_or_else(|| Reply::status(500, "test server: no scripted reply left"))
        });
        if !answer(&mut stream, reply, &state).await {
            return;
        }
    }
}

/// Writes `reply`; false when the connection is finished.
async fn answer(stream: &mut TcpStream, reply: Reply, state: &State) -> bool {
    match reply {
        Reply::Http {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (n, v) in &headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            stream.write_all(head.as_bytes()).await.is_ok()
                && stream.write_all(&body).await.is_ok()
                && stream.flush().await.is_ok()
        }
        Reply::Raw(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
            false
        }
        Reply::Stall(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.flush().await;
            wait_hangup(stream).await;
            state.seen.send_modify(|s| s.dropped += 1);
            false
        }
        Reply::Hang => {
            wait_hangup(stream).await;
            state.seen.send_modify(|s| s.dropped += 1);
            false
        }
        Reply::After(delay, inner) => {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {
                    state.seen.send_modify(|s| s.late_answers += 1);
                    Box::pin(answer(stream, *inner, state)).await
                }
                _ = wait_hangup(stream) => {
                    state.seen.send_modify(|s| s.dropped += 1);
                    false
                }
            }
        }
    }
}

/// Returns when the client closes the connection (or it fails).
async fn wait_hangup(stream: &mut TcpStream) {
    let mut scratch = [0u8; 1024];
    loop {
        match stream.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Reads one request; `None` when the connection closed or is unusable.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buf.len() < body_start + len {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[body_start..body_start + len].to_vec();
    buf.drain(..body_start + len);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
