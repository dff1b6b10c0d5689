//! The instant in-process provider: answers every `agent()` call at once,
//! so the figures measure dsh, not a model.
//!
//! `start()` and the child's `result()` never await anything: both futures
//! are ready on their first poll, which lets the supervisor poll them inline
//! (its fast path for providers that answer at once). Prompts starting with
//! `hold` are the exception: their child waits until it is cancelled, so a
//! worker can be kept alive and idle, or cancelled while it waits.
//!
//! An optional [`CallClock`] records when the first and the last call
//! arrived, which gives the per-call round trip without the run's start-up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dsh_orchestrator::{
    AgentRequest, ChildOutcome, ChildResult, ResultFault, StartRefused, Subagent, SubagentProvider,
};
use tokio_util::sync::CancellationToken;

/// First and last arrival of the `agent()` calls of one run.
#[derive(Default)]
pub struct CallClock {
    inner: Mutex<ClockState>,
}

#[derive(Default, Clone, Copy)]
struct ClockState {
    first: Option<Instant>,
    last: Option<Instant>,
    count: u64,
}

impl CallClock {
    fn tick(&self) {
        let now = Instant::now();
        if let Ok(mut st) = self.inner.lock() {
            st.first.get_or_insert(now);
            st.last = Some(now);
            st.count += 1;
        }
    }

    /// `(calls, time from the first call's arrival to the last's)`.
    pub fn span(&self) -> (u64, Duration) {
        let st = self.inner.lock().map(|st| *st).unwrap_or_default();
        let span = match (st.first, st.last) {
            (Some(a), Some(b)) => b.duration_since(a),
            _ => Duration::ZERO,
        };
        (st.count, span)
    }
}

/// The provider. Cheap to create; one per run when a clock is wanted.
#[derive(Default)]
pub struct InstantProvider {
    clock: Option<Arc<CallClock>>,
}

impl InstantProvider {
    pub fn new() -> Self {
        InstantProvider { clock: None }
    }

    pub fn with_clock(clock: Arc<CallClock>) -> Self {
        InstantProvider { clock: Some(clock) }
    }
}

#[async_trait]
impl SubagentProvider for InstantProvider {
    async fn start(
        &self,
        request: AgentRequest,
        _cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        if let Some(clock) = &self.clock {
            clock.tick();
        }
        let hold = request.prompt.starts_with("hold");
        Ok(Arc::new(InstantChild {
            id: format!("bench-{}", request.seq),
            hold: hold.then(CancellationToken::new),
        }))
    }
}

struct InstantChild {
    id: String,
    /// `Some` for a child that waits until cancelled.
    hold: Option<CancellationToken>,
}

#[async_trait]
impl Subagent for InstantChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        if let Some(token) = &self.hold {
            token.cancelled().await;
            return Ok(ChildOutcome {
                result: ChildResult::Cancelled,
                usage: None,
            });
        }
        Ok(ChildOutcome {
            result: ChildResult::Text("ok".into()),
            usage: None,
        })
    }

    fn cancel(&self) {
        if let Some(token) = &self.hold {
            token.cancel();
        }
    }

    async fn dispose(&self) {
        self.cancel();
    }
}
