//! A layer in front of the run's provider that notes down, per call, what
//! the run's events do not carry: the provider and model asked for, the
//! agent type, and (only when content capture is on) the prompt and the
//! answer. The follower takes each call's note when the call ends.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_orchestrator::SubagentProvider;
use dsh_seam::provider::{
    AgentRequest, CallLimits, ChildOutcome, ChildResult, ResultFault, StartRefused, Subagent,
};
use dsh_seam::{ChildHook, HookedChild, Layer};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
use tokio_util::sync::CancellationToken;

/// Notes kept at most; past it new calls are not noted (their spans carry
/// what the events say).
const MAX_NOTES: usize = 4096;

/// Longest prompt or answer exported, in characters.
const CONTENT_CHARS: usize = 16 * 1024;

/// What the layer noted of one call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Note {
    pub model: Option<String>,
    pub provider: Option<String>,
    pub agent_type: Option<String>,
    pub prompt: Option<String>,
    pub answer: Option<String>,
    /// The id the call's span gets: chosen here, before the call starts,
    /// so that a program the call starts can be given its `traceparent`.
    pub span_id: Option<SpanId>,
}

/// The notes of a run's calls, by call number.
#[derive(Debug, Clone, Default)]
pub(crate) struct Calls(super::Shared<HashMap<u64, Note>>);

impl Calls {
    /// The span id chosen for call `seq`, if it was noted.
    pub(crate) fn span_id(&self, seq: u64) -> Option<SpanId> {
        self.0
            .lock()
            .ok()
            .and_then(|m| m.get(&seq).and_then(|n| n.span_id))
    }

    /// Takes the note of call `seq`.
    pub(crate) fn take(&self, seq: u64) -> Note {
        self.0
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&seq))
            .unwrap_or_default()
    }

    fn put(&self, seq: u64, note: Note) {
        if let Ok(mut m) = self.0.lock()
            && m.len() < MAX_NOTES
        {
            m.insert(seq, note);
        }
    }

    fn answer(&self, seq: u64, answer: String) {
        if let Ok(mut m) = self.0.lock()
            && let Some(n) = m.get_mut(&seq)
        {
            n.answer = Some(answer);
        }
    }
}

fn cut(s: &str) -> String {
    s.chars().take(CONTENT_CHARS).collect()
}

/// The layer (`Stack::layer`).
pub(crate) struct TelemetryLayer {
    calls: Calls,
    capture: bool,
    trace_id: TraceId,
}

impl TelemetryLayer {
    pub(crate) fn new(calls: Calls, capture: bool, trace_id: TraceId) -> Self {
        TelemetryLayer {
            calls,
            capture,
            trace_id,
        }
    }
}

impl Layer for TelemetryLayer {
    fn layer(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider> {
        Arc::new(Noting {
            inner,
            calls: self.calls.clone(),
            capture: self.capture,
            trace_id: self.trace_id,
        })
    }
}

struct Noting {
    inner: Arc<dyn SubagentProvider>,
    calls: Calls,
    capture: bool,
    trace_id: TraceId,
}

#[async_trait]
impl SubagentProvider for Noting {
    fn call_limits(&self, request: &AgentRequest) -> CallLimits {
        self.inner.call_limits(request)
    }

    fn prepare(&self, request: &mut AgentRequest) {
        self.inner.prepare(request);
    }

    async fn start(
        &self,
        mut request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let seq = request.seq;
        let span_id = RandomIdGenerator::default().new_span_id();
        request.trace_parent = Some(format!("00-{}-{span_id}-01", self.trace_id));
        self.calls.put(
            seq,
            Note {
                model: request.options.model.clone(),
                provider: request.options.provider.clone(),
                agent_type: request.options.agent_type.clone(),
                prompt: self.capture.then(|| cut(&request.prompt)),
                answer: None,
                span_id: Some(span_id),
            },
        );
        let child = self.inner.start(request, cancel).await?;
        if !self.capture {
            return Ok(child);
        }
        Ok(Arc::new(HookedChild::new(
            child,
            Answer {
                seq,
                calls: self.calls.clone(),
            },
        )))
    }
}

/// Notes a call's answer (content capture only).
struct Answer {
    seq: u64,
    calls: Calls,
}

#[async_trait]
impl ChildHook for Answer {
    async fn result(
        &self,
        result: Result<ChildOutcome, ResultFault>,
    ) -> Result<ChildOutcome, ResultFault> {
        if let Ok(o) = &result {
            let text = match &o.result {
                ChildResult::Text(t) => Some(cut(t)),
                ChildResult::Structured(v) => Some(cut(&v.to_string())),
                ChildResult::Failed(_) | ChildResult::Cancelled => None,
            };
            if let Some(text) = text {
                self.calls.answer(self.seq, text);
            }
        }
        result
    }
}
