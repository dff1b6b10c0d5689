//! A model's answer as it arrives over HTTP, for either API: server-sent
//! events (`text/event-stream`) handed one by one to the API's
//! [`EventParser`], or — when a server answers a streamed request with a
//! plain body — the whole body, for the API's non-streamed reader.
//!
//! Every event can move the running token count; it is reported as
//! [`Activity::Tokens`] at most every [`TOKENS_EVERY`].

use std::time::Duration;

use tokio::time::Instant;

use crate::http::{BodySink, SinkError};
use crate::sse::SseDecoder;
use dsh_seam::{Activity, Progress, Usage};

/// Most often a streaming turn reports its tokens so far.
pub const TOKENS_EVERY: Duration = Duration::from_millis(250);

/// One API's reading of its stream's events.
pub trait EventParser: Send {
    /// One event's data.
    fn event(&mut self, data: &str);
    /// Pieces streamed so far (text and argument deltas: about the output
    /// tokens).
    fn pieces(&self) -> u64;
    /// Input tokens the stream reported so far.
    fn input(&self) -> u64 {
        0
    }
    /// Whether any part of an answer arrived.
    fn has_content(&self) -> bool;
}

/// What a response brought.
pub enum Arrived<P> {
    /// No response body at all.
    Nothing,
    /// A plain (non-streamed) body.
    Whole(Vec<u8>),
    /// An event stream, read to its end.
    Events(P),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Waiting,
    Events,
    Whole,
}

/// One turn's response as it streams in; a `BodySink` for the request.
pub struct Streamed<P> {
    mode: Mode,
    body: Vec<u8>,
    sse: SseDecoder,
    parser: P,
    fresh: fn() -> P,
    progress: Progress,
    so_far: Usage,
    last_tokens: Option<Instant>,
}

impl<P: EventParser> Streamed<P> {
    /// A response to be read with parsers made by `fresh` (one per
    /// attempt); token reports start from `so_far` (the call's earlier
    /// turns).
    pub fn new(fresh: fn() -> P, progress: Progress, so_far: Usage) -> Self {
        Streamed {
            mode: Mode::Waiting,
            body: Vec::new(),
            sse: SseDecoder::default(),
            parser: fresh(),
            fresh,
            progress,
            so_far,
            last_tokens: None,
        }
    }

    /// What arrived (an event stream is ended first: a last event without
    /// its empty line still counts).
    pub fn arrived(mut self) -> Arrived<P> {
        match self.mode {
            Mode::Waiting => Arrived::Nothing,
            Mode::Whole => Arrived::Whole(self.body),
            Mode::Events => {
                let parser = &mut self.parser;
                self.sse.end(&mut |d| parser.event(d));
                Arrived::Events(self.parser)
            }
        }
    }

    fn report_tokens(&mut self) {
        let now = Instant::now();
        if self.last_tokens.is_some_and(|t| now < t + TOKENS_EVERY) {
            return;
        }
        self.last_tokens = Some(now);
        self.progress.activity(Activity::Tokens {
            usage: Usage::new(
                self.so_far.input.saturating_add(self.parser.input()),
                self.so_far.output.saturating_add(self.parser.pieces()),
            ),
        });
    }
}

impl<P: EventParser> BodySink for Streamed<P> {
    fn start(&mut self, content_type: Option<&str>) {
        self.mode = if content_type.is_some_and(|c| c.contains("text/event-stream")) {
            Mode::Events
        } else {
            Mode::Whole
        };
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        match self.mode {
            Mode::Whole | Mode::Waiting => {
                self.body.extend_from_slice(bytes);
                Ok(())
            }
            Mode::Events => {
                let before = self.parser.pieces();
                let parser = &mut self.parser;
                let fed = self.sse.feed(bytes, &mut |d| parser.event(d));
                if self.parser.pieces() != before {
                    self.report_tokens();
                }
                Ok(fed?)
            }
        }
    }

    fn restart(&mut self) -> bool {
        let had = !self.body.is_empty() || !self.sse.is_empty() || self.parser.has_content();
        self.mode = Mode::Waiting;
        self.body.clear();
        self.sse = SseDecoder::default();
        self.parser = (self.fresh)();
        had
    }
}
