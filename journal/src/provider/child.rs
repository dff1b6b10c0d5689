//! A live child of the journaling provider: its outcome is journaled
//! (with the host's verdict) before it is handed on, and the sessions its
//! provider names are journaled as they come, for a resume to continue.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::Journaling;
use crate::line::Outcome;
use dsh_seam::outcome::CallOutcome;
use dsh_seam::{ChildOrigin, ChildOutcome, ChildResult, ResultFault, Session, Subagent, Usage};

/// A live child whose outcome is journaled before it is handed on.
pub(super) struct JournaledChild {
    pub(super) inner: Arc<dyn Subagent>,
    pub(super) seq: u64,
    pub(super) key: String,
    pub(super) state: Arc<Journaling>,
    /// Why the host gave up on the child (a stall or timeout), if it did:
    /// a child that then ends cancelled is journaled as failed with this
    /// reason, as the host reports it.
    pub(super) abandoned: Mutex<Option<String>>,
    /// What the child answered (its journaled `outcome` and usage), kept
    /// from [`Subagent::result`] until the host's verdict comes with
    /// [`Subagent::settled`] and the two are journaled together.
    pub(super) answer: Mutex<Option<(Outcome, Option<Usage>)>>,
    /// Stops the task journaling the child's sessions (when the child
    /// settles, or is dropped).
    pub(super) sessions: Option<CancellationToken>,
}

impl Drop for JournaledChild {
    fn drop(&mut self) {
        if let Some(t) = &self.sessions {
            t.cancel();
        }
    }
}

/// Journals every session the child's provider names, as it names it,
/// until the returned token is cancelled. `None` when the provider reports
/// no progress (and so no sessions).
pub(super) fn watch_sessions(
    progress: Option<dsh_seam::Progress>,
    state: Arc<Journaling>,
    seq: u64,
    key: String,
) -> Option<CancellationToken> {
    let progress = progress?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let mut known: Option<Session> = None;
        loop {
            tokio::select! {
                _ = stopped.cancelled() => break,
                s = progress.session_changed(known.as_ref()) => {
                    state.append_session(seq, &key, &s);
                    known = Some(s);
                }
            }
        }
    });
    Some(stop)
}

#[async_trait]
impl Subagent for JournaledChild {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let mut r = self.inner.result().await;
        // A settled call is replayed, never continued: its sessions are of
        // no more use.
        if let Some(t) = &self.sessions {
            t.cancel();
        }
        if let Ok(o) = &mut r
            && matches!(o.result, ChildResult::Cancelled)
            && let Some(reason) = self
                .abandoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        {
            o.result = ChildResult::Failed(reason);
        }
        *self.answer.lock().unwrap_or_else(|e| e.into_inner()) = Some(Outcome::from_result(&r));
        r
    }

    async fn settled(&self, verdict: &CallOutcome) {
        let answer = self.answer.lock().unwrap_or_else(|e| e.into_inner()).take();
        // No answer: the host gave up on a child that never returned one
        // (a stall or timeout past its grace); it is journaled as failed
        // with the host's reason, which a resume replays.
        let (outcome, usage) = answer.unwrap_or_else(|| {
            let reason = verdict.reason().unwrap_or("abandoned").to_string();
            (Outcome::Fail(reason), None)
        });
        // A provider decides whether to keep a worktree while its child
        // ends, so by now the branch (if any) is known.
        let worktree = self.inner.kept_worktree().map(|k| k.branch);
        self.state
            .settle(
                self.seq,
                &self.key,
                Some(self.inner.id().to_string()),
                outcome,
                verdict.clone(),
                usage,
                worktree,
            )
            .await;
    }

    fn cancel(&self) {
        self.inner.cancel();
    }

    fn abandon(&self, reason: &str) {
        *self.abandoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        self.inner.abandon(reason);
    }

    fn progress(&self) -> Option<dsh_seam::Progress> {
        self.inner.progress()
    }

    async fn dispose(&self) {
        self.inner.dispose().await;
    }

    fn origin(&self) -> ChildOrigin {
        self.inner.origin()
    }

    fn kept_worktree(&self) -> Option<dsh_seam::KeptWorktree> {
        self.inner.kept_worktree()
    }
}
