//! A child's signs of life: the [`Progress`] handle (last report, pending
//! [`Activity`]s, the resumable [`Session`]).

use std::sync::Arc;

use dsh_protocol::Usage;

/// A child's progress: a cheap clonable handle a provider creates for a
/// child ([`Progress::new`]) and calls [`Progress::report`] on whenever the
/// child shows signs of life (output, streamed bytes). The host reads it
/// through [`Subagent::progress`](super::Subagent::progress) to enforce the call's stall timeout
/// (`stallMs`, `stall` in `dsh.toml`): no report for that long and the
/// call fails with reason `stalled: …`. A child's answer always counts as
/// progress; a provider that never reports is judged by its answer alone.
///
/// A provider that can tell *what* its child is doing (a model turn, a tool
/// call, tokens so far) also hands that to [`Progress::activity`]; the host
/// turns each into a `workflow/agent-activity` event before the child's
/// `agent-end`.
#[derive(Clone)]
pub struct Progress(Arc<ProgressInner>);

struct ProgressInner {
    origin: tokio::time::Instant,
    /// Microseconds after `origin` of the last report.
    last_us: std::sync::atomic::AtomicU64,
    /// Activities not yet taken by the host, oldest first, at most
    /// [`MAX_PENDING_ACTIVITIES`].
    pending: std::sync::Mutex<std::collections::VecDeque<Activity>>,
    /// Wakes the host's [`Progress::next_activities`].
    arrived: tokio::sync::Notify,
    /// The child's resumable session, once its provider knows it.
    session: std::sync::Mutex<Option<Session>>,
    /// Wakes [`Progress::session_known`].
    session_set: tokio::sync::Notify,
}

/// A conversation an agent CLI keeps on disk and can continue (Claude
/// Code's session, Codex's thread): which provider started it, and the
/// CLI's id for it. The journal records it as soon as it is known, so a
/// call interrupted mid-flight continues it on `dsh workflow resume`
/// ([`AgentRequest::resume`](super::AgentRequest::resume)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The provider's name (`[providers.NAME]`): only that provider is
    /// asked to continue it.
    pub provider: String,
    /// The CLI's own id of the session.
    pub id: String,
}

/// Most activities a child's handle holds before the host takes them; past
/// it the oldest are dropped (a slow host never grows a child's queue).
const MAX_PENDING_ACTIVITIES: usize = 64;

/// What a child is doing, as its provider tells it; shown as a
/// `workflow/agent-activity` event.
#[derive(Debug, Clone, PartialEq)]
// Exhaustive on purpose: the engine (another crate) gives every variant
// its meaning, and a new one must be handled there, not fall through.
pub enum Activity {
    /// The child's model turn number `turn` (1, 2, …) began.
    Turn {
        /// The turn's number.
        turn: u32,
    },
    /// Tokens so far, summed over the child's turns (while a turn streams,
    /// `output` counts the streamed pieces).
    Tokens {
        /// The running total.
        usage: Usage,
    },
    /// The child called a tool.
    ToolCall {
        /// The tool's name (`Read`, `Bash`, …).
        tool: String,
        /// What it was called on (a path, a pattern, a command), cut short.
        detail: String,
    },
    /// A tool call ended.
    ToolEnd {
        /// The tool's name.
        tool: String,
        /// `ok`, `error`, `denied` (it tried to leave its workspace or
        /// was not allowed), `timeout`, `sandbox-unavailable`.
        status: String,
        /// How long it took.
        ms: u64,
        /// Why it did not succeed, cut short; `None` when it did.
        message: Option<String>,
    },
    /// A request of the child is being sent again.
    Retry {
        /// The attempt about to start (2, 3, …).
        attempt: u32,
        /// Why the previous attempt failed.
        reason: String,
        /// Part of the previous attempt's answer had already streamed in
        /// (and is discarded).
        partial: bool,
    },
    /// The request waits for an earlier one's answer to start, so that
    /// the prompt prefix they share is served from the provider's cache.
    Held {
        /// The bytes of the request body the two share.
        shared_bytes: u64,
    },
    /// The hold ended (the earlier answer started, failed, or the
    /// provider's `prefix_hold` passed); the request goes in line.
    Released {
        /// How long it was held.
        waited_ms: u64,
    },
    /// The provider's adaptive concurrency changed: requests it lets be in
    /// flight at once, for every call of the run.
    Concurrency {
        /// The new limit.
        limit: u32,
        /// Why: the 429/529 that lowered it, or `answers arriving`.
        reason: String,
    },
}

impl Progress {
    /// A handle whose last progress is now.
    pub fn new() -> Self {
        Progress(Arc::new(ProgressInner {
            origin: tokio::time::Instant::now(),
            last_us: std::sync::atomic::AtomicU64::new(0),
            pending: std::sync::Mutex::new(std::collections::VecDeque::new()),
            arrived: tokio::sync::Notify::new(),
            session: std::sync::Mutex::new(None),
            session_set: tokio::sync::Notify::new(),
        }))
    }

    /// The child's resumable session is `session` (a later call replaces
    /// it: a CLI that forks a session on resume names the new one).
    pub fn set_session(&self, session: Session) {
        let mut s = self.0.session.lock().unwrap_or_else(|e| e.into_inner());
        if s.as_ref() != Some(&session) {
            *s = Some(session);
            self.0.session_set.notify_waiters();
        }
    }

    /// The child's resumable session, if its provider named one.
    pub fn session(&self) -> Option<Session> {
        self.0
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until the session differs from `known` (none known: until
    /// there is one), and returns it.
    pub async fn session_changed(&self, known: Option<&Session>) -> Session {
        loop {
            let notified = self.0.session_set.notified();
            tokio::pin!(notified);
            // Registered before looking, so a change in between wakes us.
            notified.as_mut().enable();
            if let Some(s) = self.session()
                && Some(&s) != known
            {
                return s;
            }
            notified.await;
        }
    }

    /// The child is doing `what` (which is progress too). Never blocks; a
    /// [`Activity::Tokens`] replaces a pending one instead of queueing.
    pub fn activity(&self, what: Activity) {
        self.report();
        {
            let mut q = self.0.pending.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(what, Activity::Tokens { .. })
                && let Some(last) = q.back_mut()
                && matches!(last, Activity::Tokens { .. })
            {
                *last = what;
            } else {
                if q.len() >= MAX_PENDING_ACTIVITIES {
                    q.pop_front();
                }
                q.push_back(what);
            }
        }
        self.0.arrived.notify_one();
    }

    /// Takes every pending activity now, oldest first (none waiting: empty).
    pub fn take_activities(&self) -> Vec<Activity> {
        self.0
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Waits for activities and takes every pending one, oldest first.
    pub async fn next_activities(&self) -> Vec<Activity> {
        loop {
            let taken: Vec<Activity> = self
                .0
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
                .collect();
            if !taken.is_empty() {
                return taken;
            }
            self.0.arrived.notified().await;
        }
    }

    /// The child made progress now. Cheap (one atomic store); call it as
    /// often as you like.
    pub fn report(&self) {
        let us = u64::try_from(self.0.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.0
            .last_us
            .fetch_max(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// When progress was last reported (the handle's creation when never).
    pub fn last(&self) -> tokio::time::Instant {
        let us = self.0.last_us.load(std::sync::atomic::Ordering::Relaxed);
        self.0.origin + std::time::Duration::from_micros(us)
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("since_last", &self.last().elapsed())
            .finish()
    }
}
