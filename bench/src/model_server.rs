//! A loopback model server that prices requests the way providers do, for
//! the cheaper-runs figures (`dsh-bench`) and their tests
//! (`tests/cheap_runs.rs`, which include this file by path).
//!
//! It answers OpenAI chat completions (`POST …/chat/completions`, always a
//! plain JSON body, which the `openai` provider reads whether or not it
//! asked for a stream) after [`Options::latency`], and models:
//!
//! - **a prompt cache**: a request's prompt (its messages' contents, in
//!   order) is served from cache for as many whole [`Options::block`]s as
//!   an earlier request's prompt had, once that request was answered (the
//!   cache is read when a request arrives, written when it is answered); the
//!   answer's `usage.prompt_tokens_details.cached_tokens` says how many
//!   (a token is 4 bytes here);
//! - **a rate limit**: at most `n` requests accepted per window (windows
//!   counted from the server's start); beyond it `429` with `Retry-After`
//!   (whole seconds, rounded up) and `retry-after-ms` (OpenAI's), the
//!   time to the next window.
//!
//! Just enough HTTP/1.1 for reqwest: request line, headers, a
//! `Content-Length` body, keep-alive.

#![allow(dead_code)]

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// From a request's arrival to its answer.
    pub latency: Duration,
    /// `(n, window)`: at most `n` requests accepted per `window`.
    pub rate: Option<(u32, Duration)>,
    /// The cache's granularity, in bytes of prompt.
    pub block: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            latency: Duration::from_millis(20),
            rate: None,
            block: 64,
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Since the server started.
    pub arrived: Duration,
    /// When its answer went out (`None`: refused with 429, or the client
    /// hung up).
    pub answered: Option<Duration>,
    pub status: u16,
    /// Prompt tokens, and of them those served from cache.
    pub input: u64,
    pub cached: u64,
    /// The last message's content (the call's prompt).
    pub prompt: String,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Hashes of the block prefixes of answered prompts.
    cache: HashSet<u64>,
    /// Requests accepted in the current window, and its index.
    window: (u64, u32),
    in_flight: u32,
    max_in_flight: u32,
}

/// The running server; dropped, it stops.
pub struct ModelServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    started: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    opts: Options,
    state: Arc<Mutex<State>>,
    started: Instant,
    hasher: std::collections::hash_map::RandomState,
}

impl ModelServer {
    /// Listens on 127.0.0.1 (a free port).
    pub async fn start(opts: Options) -> std::io::Result<ModelServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let started = Instant::now();
        let shared = Arc::new(Shared {
            opts,
            state: state.clone(),
            started,
            hasher: std::collections::hash_map::RandomState::new(),
        });
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, &shared).await;
                });
            }
        });
        Ok(ModelServer {
            addr,
            state,
            started,
            task,
        })
    }

    /// `base_url` for an `openai` provider.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state
            .lock()
            .map(|s| s.seen.clone())
            .unwrap_or_default()
    }

    /// Most requests it was answering at once.
    pub fn max_in_flight(&self) -> u32 {
        self.state.lock().map(|s| s.max_in_flight).unwrap_or(0)
    }

    /// Since the server started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Tokens of `bytes` of prompt (4 bytes a token, rounded up).
pub fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

async fn serve(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let Some((head_len, body_len)) = read_head(&mut stream, &mut buf).await? else {
            return Ok(());
        };
        while buf.len() < head_len + body_len {
            let mut chunk = [0u8; 16 << 10];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body: Value =
            serde_json::from_slice(&buf[head_len..head_len + body_len]).unwrap_or(Value::Null);
        buf.drain(..head_len + body_len);
        let response = answer(shared, &body).await;
        stream.write_all(&response).await?;
    }
}

/// Reads up to the end of a request's head: `(head length, Content-Length)`;
/// `None` when the client closed the connection.
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(usize, usize)>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            return Ok(Some((end + 4, len)));
        }
        let mut chunk = [0u8; 16 << 10];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The prompt as the cache sees it: every message's content, in order.
fn prompt_of(body: &Value) -> (Vec<u8>, String) {
    let mut text = Vec::new();
    let mut last = String::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        if let Some(c) = m["content"].as_str() {
            text.extend_from_slice(c.as_bytes());
            text.push(0);
            last = c.to_string();
        }
    }
    (text, last)
}

async fn answer(shared: &Shared, body: &Value) -> Vec<u8> {
    let arrived = shared.started.elapsed();
    let (prompt, last) = prompt_of(body);
    let input = tokens(prompt.len());
    // The rate limit is checked on arrival.
    let (refused, index) = {
        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let refused = shared.opts.rate.and_then(|(n, window)| {
            let index = (arrived.as_nanos() / window.as_nanos().max(1)) as u64;
            if st.window.0 != index {
                st.window = (index, 0);
            }
            if st.window.1 >= n {
                let next = window.mul_f64((index + 1) as f64);
                Some(next.saturating_sub(arrived))
            } else {
                st.window.1 += 1;
                None
            }
        });
        if refused.is_none() {
            st.in_flight += 1;
            st.max_in_flight = st.max_in_flight.max(st.in_flight);
        }
        st.seen.push(Seen {
            arrived,
            answered: None,
            status: if refused.is_some() { 429 } else { 200 },
            input,
            cached: 0,
            prompt: last.clone(),
        });
        (refused, st.seen.len() - 1)
    };
    if let Some(wait) = refused {
        let ms = wait.as_millis() + 1;
        let body = json!({ "error": { "type": "rate_limit", "message": "rate limited" } });
        return http(
            429,
            &[
                ("Retry-After", ms.div_ceil(1000).to_string()),
                ("retry-after-ms", ms.to_string()),
            ],
            &body,
        );
    }
    // What of this prompt an answered one had is read on arrival (the
    // provider reads its prompt first); its own blocks are cached once it
    // is answered.
    let block = shared.opts.block.max(1);
    let prefixes: Vec<u64> = {
        let mut h = shared.hasher.build_hasher();
        prompt
            .chunks_exact(block)
            .map(|b| {
                h.write(b);
                h.finish()
            })
            .collect()
    };
    let cached_bytes = {
        let st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        block * prefixes.iter().take_while(|k| st.cache.contains(k)).count()
    };
    tokio::time::sleep(shared.opts.latency).await;
    let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    st.cache.extend(prefixes);
    let cached = tokens(cached_bytes).min(input);
    st.in_flight -= 1;
    let answered = shared.started.elapsed();
    if let Some(s) = st.seen.get_mut(index) {
        s.answered = Some(answered);
        s.cached = cached;
    }
    drop(st);
    let body = json!({
        "id": format!("cmpl-{index}"),
        "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "stop",
                      "message": { "role": "assistant", "content": format!("ok {index}") } }],
        "usage": { "prompt_tokens": input, "completion_tokens": 2,
                   "prompt_tokens_details": { "cached_tokens": cached } },
    });
    http(200, &[], &body)
}

fn http(status: u16, headers: &[(&str, String)], body: &Value) -> Vec<u8> {
    let body = body.to_string();
    let reason = if status == 200 {
        "OK"
    } else {
        "Too Many Requests"
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}
