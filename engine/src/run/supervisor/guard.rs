//! The per-call bounds the host enforces while it awaits a child
//! ([`CallLimits`]): a stall timer that every [`Progress`] report pushes
//! back, and a timeout from the child's start. When one fires the child
//! is abandoned ([`Subagent::abandon`]: it is cancelled) and, unless it
//! answered anyway, the call ends as failed with a reason saying which
//! bound fired. Nothing is retried: the call is over.
//!
//! The bounds stand down once the run is being cancelled: a child stopped
//! by the run's cancel ends `cancelled`, never `stalled`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use dsh_seam::{CallLimit, CallLimits, ChildOutcome, ChildResult, Progress, ResultFault, Subagent};

/// Bounds further out than this are treated as none (no `Instant`
/// overflow, no timer that can never matter).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Which of a call's bounds fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound {
    /// No progress for the stall bound.
    Stall,
    /// No answer within the timeout.
    Timeout,
}

/// [`guarded_by`] without the bound that fired (the unit tests' view).
#[cfg(test)]
pub(super) async fn guarded(
    child: Arc<dyn Subagent>,
    progress: Option<Progress>,
    limits: CallLimits,
    run: CancellationToken,
    grace: Duration,
) -> Result<ChildOutcome, ResultFault> {
    guarded_by(child, progress, limits, run, grace).await.0
}

/// Awaits `child`'s result under `limits`. `run` is the run's token: once
/// it fires the bounds no longer apply. After abandoning a child its
/// result is awaited for at most `grace` (a child must settle promptly
/// after a cancel; one that does not is failed anyway). Also returns the
/// bound that failed the call, if one did (an answer that came in anyway
/// stands, and then no bound is named).
pub(super) async fn guarded_by(
    child: Arc<dyn Subagent>,
    progress: Option<Progress>,
    limits: CallLimits,
    run: CancellationToken,
    grace: Duration,
) -> (Result<ChildOutcome, ResultFault>, Option<Bound>) {
    if limits.stall.is_none() && limits.timeout.is_none() {
        return (child.result().await, None);
    }
    let started = Instant::now();
    let result = child.result();
    tokio::pin!(result);
    let fired = tokio::select! {
        biased;
        r = &mut result => return (r, None),
        _ = run.cancelled() => None,
        fired = first_bound(&limits, progress.as_ref(), started) => Some(fired),
    };
    let Some((bound, reason)) = fired else {
        // The run is being cancelled: the child was (or is about to be)
        // cancelled by the run, and ends as that says.
        return (result.await, None);
    };
    tracing::debug!(child = child.id(), %reason, "abandoning a child");
    child.abandon(&reason);
    match tokio::time::timeout(grace, &mut result).await {
        // It answered before it stopped: the answer stands.
        Ok(Ok(o)) if !matches!(o.result, ChildResult::Cancelled) => {
            let failed = matches!(o.result, ChildResult::Failed(_));
            (Ok(o), failed.then_some(bound))
        }
        Ok(Ok(o)) => (
            Ok(ChildOutcome {
                result: ChildResult::Failed(reason),
                usage: o.usage,
            }),
            Some(bound),
        ),
        Ok(Err(_)) | Err(_) => (
            Ok(ChildOutcome {
                result: ChildResult::Failed(reason),
                usage: None,
            }),
            Some(bound),
        ),
    }
}

/// Resolves with the failure reason of the first bound to fire.
async fn first_bound(
    limits: &CallLimits,
    progress: Option<&Progress>,
    started: Instant,
) -> (Bound, String) {
    let stall = async {
        match &limits.stall {
            Some(l) if l.after < FOREVER => {
                stalled(l.after, progress, started).await;
                (Bound::Stall, stall_reason(l))
            }
            _ => std::future::pending().await,
        }
    };
    let timeout = async {
        match &limits.timeout {
            Some(l) if l.after < FOREVER => {
                tokio::time::sleep_until(started + l.after).await;
                (Bound::Timeout, timeout_reason(l))
            }
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        r = stall => r,
        r = timeout => r,
    }
}

/// Returns once no progress was reported for `after` (counting from
/// `started` when the last report is older, or there is no handle).
async fn stalled(after: Duration, progress: Option<&Progress>, started: Instant) {
    loop {
        let last = progress.map_or(started, |p| p.last().max(started));
        let deadline = last + after;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// The reason of a call whose stall bound fired.
pub(crate) fn stall_reason(l: &CallLimit) -> String {
    format!(
        "stalled: no progress from the provider for {} ({}); the call is not retried",
        show(l.after),
        l.source
    )
}

/// The reason of a call whose timeout fired.
pub(crate) fn timeout_reason(l: &CallLimit) -> String {
    format!(
        "timed out after {} ({}); the call is not retried",
        show(l.after),
        l.source
    )
}

/// `300 ms`: the unit `stallMs` is given in.
fn show(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use std::sync::Mutex;
    use tokio::sync::Notify;

    /// A child that answers when told, reports progress when told, and
    /// ends `Cancelled` once cancelled.
    struct Fake {
        progress: Progress,
        answer: Mutex<Option<ChildResult>>,
        wake: Notify,
        cancelled: std::sync::atomic::AtomicBool,
        abandoned: Mutex<Option<String>>,
        /// Ignores cancel() (a misbehaving child).
        deaf: bool,
    }

    impl Fake {
        fn new(deaf: bool) -> Arc<Fake> {
            Arc::new(Fake {
                progress: Progress::new(),
                answer: Mutex::new(None),
                wake: Notify::new(),
                cancelled: false.into(),
                abandoned: Mutex::new(None),
                deaf,
            })
        }
        fn answer(&self, r: ChildResult) {
            *self.answer.lock().unwrap() = Some(r);
            self.wake.notify_one();
        }
    }

    #[async_trait]
    impl Subagent for Fake {
        fn id(&self) -> &str {
            "fake"
        }
        async fn result(&self) -> Result<ChildOutcome, ResultFault> {
            loop {
                if let Some(r) = self.answer.lock().unwrap().take() {
                    return Ok(ChildOutcome {
                        result: r,
                        usage: None,
                    });
                }
                if !self.deaf && self.cancelled.load(std::sync::atomic::Ordering::SeqCst) {
                    return Ok(ChildOutcome {
                        result: ChildResult::Cancelled,
                        usage: None,
                    });
                }
                self.wake.notified().await;
            }
        }
        fn cancel(&self) {
            self.cancelled
                .store(true, std::sync::atomic::Ordering::SeqCst);
            self.wake.notify_one();
        }
        fn abandon(&self, reason: &str) {
            *self.abandoned.lock().unwrap() = Some(reason.to_string());
            self.cancel();
        }
        async fn dispose(&self) {}
        fn progress(&self) -> Option<Progress> {
            Some(self.progress.clone())
        }
    }

    fn stall(ms: u64) -> CallLimits {
        CallLimits {
            stall: Some(CallLimit::new(Duration::from_millis(ms), "stallMs")),
            timeout: None,
        }
    }

    const GRACE: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn no_progress_for_the_stall_bound_fails_the_call_and_abandons_the_child() {
        let child = Fake::new(false);
        let t0 = Instant::now();
        let out = guarded(
            child.clone(),
            child.progress(),
            stall(300),
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(t0.elapsed(), Duration::from_millis(300));
        let ChildResult::Failed(reason) = out.result else {
            panic!("not failed: {out:?}");
        };
        assert!(
            reason.starts_with("stalled: no progress from the provider for 300 ms (stallMs)"),
            "{reason}"
        );
        assert_eq!(
            child.abandoned.lock().unwrap().as_deref(),
            Some(reason.as_str())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn progress_pushes_the_stall_back() {
        let child = Fake::new(false);
        let reporter = child.clone();
        tokio::spawn(async move {
            // Ten reports 200 ms apart: 2 s of a 300 ms bound, never stalled.
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                reporter.progress.report();
            }
            reporter.answer(ChildResult::Text("done".into()));
        });
        let out = guarded(
            child.clone(),
            child.progress(),
            stall(300),
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(out.result, ChildResult::Text("done".into()));
        assert_eq!(*child.abandoned.lock().unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_last_report_the_stall_still_fires() {
        let child = Fake::new(false);
        let reporter = child.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            reporter.progress.report();
        });
        let t0 = Instant::now();
        let out = guarded(
            child.clone(),
            child.progress(),
            stall(300),
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
        assert!(matches!(out.result, ChildResult::Failed(r) if r.starts_with("stalled")));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeout_fires_whatever_the_progress() {
        let child = Fake::new(false);
        let reporter = child.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                reporter.progress.report();
            }
        });
        let limits = CallLimits {
            stall: Some(CallLimit::new(Duration::from_millis(100), "stallMs")),
            timeout: Some(CallLimit::new(
                Duration::from_secs(2),
                "[agent_types.slow] timeout",
            )),
        };
        let t0 = Instant::now();
        let out = guarded(
            child.clone(),
            child.progress(),
            limits,
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        let ChildResult::Failed(reason) = out.result else {
            panic!("not failed");
        };
        assert!(
            reason.starts_with("timed out after 2000 ms ([agent_types.slow] timeout)"),
            "{reason}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_stands_and_no_bound_means_no_timer() {
        let child = Fake::new(false);
        child.answer(ChildResult::Text("quick".into()));
        let out = guarded(
            child.clone(),
            child.progress(),
            stall(300),
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(out.result, ChildResult::Text("quick".into()));

        let child = Fake::new(false);
        let answering = child.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            answering.answer(ChildResult::Text("late".into()));
        });
        let out = guarded(
            child,
            None,
            CallLimits::default(),
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(out.result, ChildResult::Text("late".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_cancel_stands_the_bounds_down() {
        let child = Fake::new(false);
        let run = CancellationToken::new();
        let canceller = (child.clone(), run.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            canceller.1.cancel();
            canceller.0.cancel();
        });
        let out = guarded(child.clone(), child.progress(), stall(300), run, GRACE)
            .await
            .expect("an outcome");
        assert_eq!(out.result, ChildResult::Cancelled);
        assert_eq!(*child.abandoned.lock().unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_deaf_to_cancel_is_failed_after_the_grace() {
        let child = Fake::new(true);
        let t0 = Instant::now();
        let out = guarded(
            child.clone(),
            child.progress(),
            stall(300),
            CancellationToken::new(),
            GRACE,
        )
        .await
        .expect("an outcome");
        assert_eq!(t0.elapsed(), Duration::from_millis(300) + GRACE);
        assert!(matches!(out.result, ChildResult::Failed(r) if r.starts_with("stalled")));
    }
}
