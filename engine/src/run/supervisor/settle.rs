//! Settling: one path for every way a run ends. Admission closes, the
//! result is decided and published (with every announced agent paired
//! first), then nothing is left: children disposed, the worker stopped the
//! way the claim calls for ([`Stop`]) and reaped with its process group,
//! every task finished.

use std::time::Duration;

use dsh_protocol::{CallId, EndOutcome, EndResult, ErrorCode, StopReason};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::cancel::cancel_error;
use super::ledger::Internal;
use super::{Claim, DRAIN_TIMEOUT, Phase, Supervisor};
use crate::events::EventKind;
use crate::limits::millis;
use crate::result::{RunError, RunResult};

/// Time between SIGTERM and SIGKILL when the worker is stopped.
const TERM_GRACE: Duration = Duration::from_millis(200);

/// How the worker is stopped once the run has its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// It said `End` and exits by itself: wait the grace, then terminate.
    AwaitExit,
    /// SIGTERM to its group, a short grace, SIGKILL.
    Terminate,
    /// SIGKILL at once (a forced termination).
    Kill,
}

impl Supervisor {
    pub(super) async fn settle(mut self, claim: Claim) {
        let cancel = self.phase.cancel_reason().map(cancel_error);
        let host_count = self.ledger.host_count;
        let (mut result, stop) = match claim {
            Claim::End(end) => {
                let agents = end.agents_started;
                let result = match cancel {
                    Some(err) => RunResult::failed(StopReason::Cancelled, err, agents),
                    None => self.result_from_end(end),
                };
                (result, Stop::AwaitExit)
            }
            Claim::Death(reason) => {
                let result = match cancel {
                    Some(err) => RunResult::failed(StopReason::Cancelled, err, host_count),
                    None => {
                        RunResult::failed(StopReason::Error, self.death_error(&reason), host_count)
                    }
                };
                (result, Stop::Terminate)
            }
            Claim::Grace | Claim::Forced => {
                let err = cancel.unwrap_or_else(|| {
                    RunError::new(ErrorCode::Cancelled, "the run was cancelled")
                });
                let stop = if matches!(claim, Claim::Forced) {
                    Stop::Kill
                } else {
                    Stop::Terminate
                };
                (
                    RunResult::failed(StopReason::Cancelled, err, host_count),
                    stop,
                )
            }
        };
        result.sandbox = self.sandbox.clone();

        // Admission is closed: no more worker messages are read, pending
        // provider starts are aborted and disposed when they land, nothing
        // more is sent.
        self.run_token.cancel();
        self.phase = Phase::Settled;
        let queued = self.conn.outbound.close_outbox();

        if stop == Stop::AwaitExit {
            // Normal end: strays are paired and the result is due now;
            // then children are disposed and the worker (which exits on
            // its own after End) is reaped. `dispose()` waits for that.
            self.emit_stray_ends();
            self.publish(result);
            self.dispose_children().await;
            self.stop_worker(stop).await;
        } else {
            // Death, grace or force: the result is due now.
            for live in self.ledger.live.values() {
                live.child.cancel();
            }
            self.emit_stray_ends();
            self.publish(result);
            self.stop_worker(stop).await;
            self.dispose_children().await;
        }
        self.finish_tasks(queued).await;
        // The worker is gone: this run no longer holds the shared fork
        // server up (the last lease ends it, before `done`).
        if let Some(lease) = self.lease.take() {
            lease.release().await;
        }
        let _ = self.done_tx.send(true);
    }

    /// Why a worker that died on its own ended the run. Two deaths are the
    /// sandbox's backstops doing their job and read as the budget they
    /// enforce: the out-of-memory exit under the data limit (`MEMORY`) and
    /// SIGXCPU from the CPU limit (`TIMEOUT`). Anything else is
    /// `WORKER_EXITED`.
    fn death_error(&self, reason: &str) -> RunError {
        use std::os::unix::process::ExitStatusExt;
        let status = self.process.status();
        if status.and_then(|s| s.code()) == Some(dsh_protocol::WORKER_EXIT_OUT_OF_MEMORY) {
            return RunError::new(
                ErrorCode::Memory,
                format!(
                    "the worker ran out of memory under its data limit (memoryBytes = {} bytes \
                     plus the engine's headroom) and was stopped; raise --memory or make the \
                     script hold less",
                    self.limits.memory_bytes
                ),
            );
        }
        if status.and_then(|s| s.signal()) == Some(libc::SIGXCPU) {
            let budget = self.limits.compute.map_or_else(
                || "its CPU limit".to_string(),
                |d| format!("computeMs ({} ms)", millis(d)),
            );
            return RunError::new(
                ErrorCode::Timeout,
                format!(
                    "the script used more CPU time than {budget} allows and the kernel's CPU \
                     limit stopped the worker"
                ),
            );
        }
        RunError::new(
            ErrorCode::WorkerExited,
            format!("the worker died before the run settled: {reason}"),
        )
    }

    fn result_from_end(&self, end: EndResult) -> RunResult {
        let stop = end.stop();
        let mut result = match end.outcome {
            EndOutcome::Completed { value_json } => {
                match serde_json::from_str::<Value>(&value_json)
                    .map_err(|e| {
                        if e.to_string().starts_with("recursion limit exceeded") {
                            too_deep(None)
                        } else {
                            format!("value: the return value cannot be represented as JSON: {e}")
                        }
                    })
                    .and_then(|value| match crate::limits::json_depth(&value) {
                        d if d > crate::limits::MAX_JSON_DEPTH => Err(too_deep(Some(d))),
                        _ => Ok(value),
                    }) {
                    Ok(value) => RunResult {
                        value,
                        stop_reason: StopReason::Completed,
                        error: None,
                        agents_started: end.agents_started,
                        log_bytes_dropped: end.log_bytes_dropped,
                        sandbox: None,
                        usage: None,
                    },
                    Err(e) => RunResult::failed(
                        StopReason::Error,
                        RunError::new(ErrorCode::ResultUnserializable, e),
                        end.agents_started,
                    ),
                }
            }
            EndOutcome::Failed { error: e } | EndOutcome::Cancelled { error: e } => {
                let error = RunError::new(e.code, self.map_positions(&e.message));
                RunResult::failed(stop, error, end.agents_started)
            }
        };
        result.log_bytes_dropped = end.log_bytes_dropped;
        result
    }

    /// `agent-end` (cancelled) for every child still on the ledger, in seq
    /// order, so every `agent-start` is paired before `workflow/end`.
    fn emit_stray_ends(&self) {
        // Calls still waiting for a slot first: they never started.
        self.emit_unqueued();
        let mut ids: Vec<CallId> = self.ledger.live.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(live) = self.ledger.live.get(&id) {
                self.emit_end(id, live, &dsh_seam::outcome::CallOutcome::Cancelled, None);
            }
        }
    }

    fn publish(&self, mut result: RunResult) {
        result.usage = self.ledger.total.get();
        self.hub.emit(EventKind::End {
            stop_reason: result.stop_reason,
            error: result.error.clone(),
            agents_started: result.agents_started,
            log_bytes_dropped: result.log_bytes_dropped,
        });
        let _ = self.result_tx.send(Some(result));
    }

    /// Cancels and disposes every child still held, including ones whose
    /// start lands now; bounded by the grace.
    async fn dispose_children(&mut self) {
        let grace = self.limits.dispose_grace;
        let deadline = Instant::now() + grace;
        let mut disposals = JoinSet::new();
        for (_, live) in self.ledger.live.drain() {
            live.child.cancel();
            let child = live.child;
            disposals.spawn(async move { child.dispose().await });
        }
        // Starts still in flight: their results arrive on the internal
        // channel; a child that starts now is disposed, never announced.
        while !self.ledger.pending.is_empty() {
            match tokio::time::timeout_at(deadline, self.internal_rx.recv()).await {
                Ok(Some(Internal::Started { call_id, res })) => {
                    self.ledger.pending.remove(&call_id);
                    if let Ok(child) = res {
                        child.cancel();
                        disposals.spawn(async move { child.dispose().await });
                    }
                }
                Ok(Some(Internal::Settled { .. })) => {}
                Ok(None) | Err(_) => break,
            }
        }
        while !disposals.is_empty() {
            if tokio::time::timeout_at(deadline, disposals.join_next())
                .await
                .is_err()
            {
                disposals.abort_all();
                break;
            }
        }
    }

    /// Stops the worker the way `stop` says; its process group goes with
    /// it (a grandchild of a `--sandbox off` worker too).
    async fn stop_worker(&mut self, stop: Stop) {
        match stop {
            Stop::AwaitExit => {
                let grace = self.limits.dispose_grace;
                if tokio::time::timeout(grace, self.process.exited())
                    .await
                    .is_ok()
                {
                    self.process.reap().await;
                } else {
                    self.process.terminate(TERM_GRACE).await;
                }
            }
            Stop::Terminate => {
                self.process.terminate(TERM_GRACE).await;
            }
            Stop::Kill => {
                self.process.kill().await;
            }
        }
    }

    async fn finish_tasks(&mut self, queued: Vec<u8>) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        // Frames queued before the settle still go out, bounded.
        if !self.conn.outbound.shutdown(queued, DRAIN_TIMEOUT).await {
            tracing::debug!(run = %self.run_id, "could not flush the last frames to the worker");
        }
        if let Some(t) = self.stderr_task.take() {
            let abort = t.abort_handle();
            if tokio::time::timeout(DRAIN_TIMEOUT, t).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// The message for a return value nested `depth` levels (`None`: so deep
/// that the JSON reader gave up, at 128).
fn too_deep(depth: Option<usize>) -> String {
    let max = crate::limits::MAX_JSON_DEPTH;
    let depth = depth.map_or_else(|| "128 or more".to_string(), |d| d.to_string());
    format!(
        "value: the return value nests arrays and objects {depth} levels deep; dsh keeps at most \
         {max} (its run directory must read the result back); return a flatter value"
    )
}
