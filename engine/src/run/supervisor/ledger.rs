//! The child ledger: every `agent()` call from `ChildStart` to its
//! settling. A call is *pending* while its provider starts it, *live* once
//! its `agent-start` was emitted, and leaves the ledger with its
//! `agent-end` — so every start is paired, whatever ends the run.

use std::collections::HashMap;
use std::sync::Arc;

use dsh_protocol::{CallId, ChildOutcome as WireOutcome, ErrorCode, HostMsg, encode, schema};
use serde_json::Value;

use super::{Claim, Supervisor, guard, violation};
use crate::events::{EventKind, MAX_REASON_CHARS, shown_label};
use dsh_seam::outcome::CallOutcome;
use dsh_seam::{
    AgentRequest, CallLimits, ChildOutcome, ChildResult, ResultFault, StartRefused, Subagent,
};

/// Completions of provider work, sent by the tasks the supervisor spawns.
pub(super) enum Internal {
    Started {
        call_id: CallId,
        res: Result<Arc<dyn Subagent>, StartRefused>,
    },
    Settled {
        call_id: CallId,
        settled: Settlement,
    },
}

/// A settled call as the host decided it (off the supervisor's loop, in
/// the call's own task): the frame for the worker and the one outcome
/// every view reads.
pub(super) struct Settlement {
    msg: HostMsg,
    outcome: CallOutcome,
    usage: Option<dsh_protocol::Usage>,
}

/// A call as the host tracks it.
pub(super) struct CallInfo {
    label: String,
    phase: Option<String>,
    schema: Option<Value>,
    /// The nested workflow that made the call.
    workflow: Option<String>,
    /// The stall and timeout bounds enforced once the child started.
    limits: CallLimits,
}

/// A child whose `agent-start` was emitted and whose `agent-end` was not yet.
pub(super) struct Live {
    info: CallInfo,
    pub(super) child: Arc<dyn Subagent>,
}

/// The calls of one run.
#[derive(Default)]
pub(super) struct Ledger {
    /// Started by the provider, not yet announced.
    pub(super) pending: HashMap<CallId, CallInfo>,
    /// Announced (`agent-start`), not yet ended.
    pub(super) live: HashMap<CallId, Live>,
    last_call_id: CallId,
    /// Calls the host accepted (what `agentsStarted` says when the worker
    /// cannot).
    pub(super) host_count: u64,
    /// The usage (and cost) of every `agent-end` so far: the result's
    /// totals.
    pub(super) total: std::cell::Cell<Option<dsh_protocol::Usage>>,
}

impl Supervisor {
    pub(super) fn on_child_start(
        &mut self,
        call_id: CallId,
        req: dsh_protocol::ChildRequest,
    ) -> Option<Claim> {
        if call_id <= self.ledger.last_call_id {
            return violation(format_args!("call id {call_id} reused or out of order"));
        }
        if call_id > u64::from(self.limits.max_total_agents) {
            return violation(format_args!("call id {call_id} is above maxTotalAgents"));
        }
        let in_flight = self.ledger.pending.len() + self.ledger.live.len();
        if in_flight >= self.limits.max_concurrent_agents as usize {
            return violation(format_args!(
                "call {call_id} would exceed maxConcurrentAgents ({})",
                self.limits.max_concurrent_agents
            ));
        }
        let schema = match req
            .schema_json
            .as_deref()
            .map(serde_json::from_str::<Value>)
        {
            None => None,
            Some(Ok(v)) if schema::check_schema(&v, "options.schema").is_empty() => Some(v),
            Some(_) => {
                return violation(format_args!(
                    "call {call_id} carries a schema outside the subset"
                ));
            }
        };
        self.ledger.last_call_id = call_id;
        self.ledger.host_count += 1;
        if self.phase.is_cancelling() {
            self.send(&HostMsg::ChildStartError {
                call_id,
                code: ErrorCode::Cancelled,
                message: "the run was cancelled".into(),
            });
            return None;
        }
        let Some(provider) = self.provider.clone() else {
            self.send(&HostMsg::ChildStartError {
                call_id,
                code: ErrorCode::AgentStart,
                message: format!(
                    "agent(): no provider is configured to answer call #{call_id} (label {:?}); \
                     pass --fixture FILE, or give the run a provider",
                    shown_label(&req.label)
                ),
            });
            return None;
        };
        let label = shown_label(&req.label);
        let phase = req.phase.as_deref().map(shown_label);
        let workflow = req.workflow.as_deref().map(shown_label);
        // The call's own exclusions; its agent type may add more.
        let disallowed_tools = req.options.disallowed_tools.clone().unwrap_or_default();
        let mut request = AgentRequest {
            seq: call_id,
            prompt: req.prompt,
            label: req.label,
            phase: req.phase,
            workflow: req.workflow.clone(),
            schema: schema.clone(),
            options: req.options,
            system_prompt: None,
            tools: None,
            disallowed_tools,
            ..AgentRequest::new(0, "", "")
        };
        // Once, here, for the whole stack: every layer and the provider
        // below them start this prepared request (the journal keys it).
        provider.prepare(&mut request);
        // The ledger and the events keep bounded copies; the request (and
        // so the provider, fixture matching included) has the whole text.
        self.ledger.pending.insert(
            call_id,
            CallInfo {
                label,
                phase,
                schema,
                workflow,
                limits: provider.call_limits(&request),
            },
        );
        let token = self.run_token.child_token();
        let mut fut = Box::pin(async move { provider.start(request, token).await });
        // A provider that can answer at once (fixtures, caches) is handled
        // inline, so its events come out in call order, deterministically.
        if let Some(res) = poll_once(&mut fut) {
            self.on_internal(Internal::Started { call_id, res });
            return None;
        }
        let tx = self.internal_tx.clone();
        self.tasks.spawn(async move {
            let res = fut.await;
            let _ = tx.send(Internal::Started { call_id, res });
        });
        None
    }

    pub(super) fn on_internal(&mut self, ev: Internal) {
        match ev {
            Internal::Started { call_id, res } => {
                let Some(info) = self.ledger.pending.remove(&call_id) else {
                    return;
                };
                match res {
                    Ok(child) => {
                        self.hub.emit(EventKind::AgentStart {
                            seq: call_id,
                            label: info.label.clone(),
                            phase: info.phase.clone(),
                            child_id: child.id().to_string(),
                            origin: child.origin(),
                            workflow: info.workflow.clone(),
                        });
                        if self.phase.is_cancelling() {
                            child.cancel();
                        }
                        let watched = child.clone();
                        let limits = info.limits.clone();
                        let run = self.run_token.clone();
                        let grace = self.limits.dispose_grace;
                        let progress = child.progress();
                        let activity = progress.clone().map(|p| ActivityPump {
                            progress: p,
                            hub: self.hub.clone(),
                            seq: call_id,
                            label: info.label.clone(),
                            workflow: info.workflow.clone(),
                        });
                        let schema = info.schema.clone();
                        let settler = child.clone();
                        let mut fut = Box::pin(async move {
                            let guarded = guard::guarded_by(watched, progress, limits, run, grace);
                            let (res, bound) = match activity {
                                // Activities become events until the child
                                // settles; then its agent-end follows them.
                                Some(pump) => pump.while_running(guarded).await,
                                None => guarded.await,
                            };
                            let settled = judge(call_id, schema.as_ref(), res, bound);
                            // Recorded (journaled) before the script or any
                            // view hears of it.
                            settler.settled(&settled.outcome).await;
                            settled
                        });
                        match poll_once(&mut fut) {
                            // Settled at once (fixtures, caches): the
                            // settlement is the call's next frame, and a
                            // `ChildStarted` before it would tell the worker
                            // nothing (one frame fewer per call; protocol.md).
                            Some(settled) => {
                                self.ledger.live.insert(call_id, Live { info, child });
                                self.on_internal(Internal::Settled { call_id, settled });
                            }
                            None => {
                                self.send(&HostMsg::ChildStarted {
                                    call_id,
                                    child_id: child.id().to_string(),
                                });
                                self.ledger.live.insert(call_id, Live { info, child });
                                let tx = self.internal_tx.clone();
                                self.tasks.spawn(async move {
                                    let settled = fut.await;
                                    let _ = tx.send(Internal::Settled { call_id, settled });
                                });
                            }
                        }
                    }
                    Err(refused) => self.send(&HostMsg::ChildStartError {
                        call_id,
                        code: refused.code,
                        message: refused.message,
                    }),
                }
            }
            Internal::Settled { call_id, settled } => {
                let Some(live) = self.ledger.live.remove(&call_id) else {
                    return;
                };
                self.send(&settled.msg);
                self.emit_end(call_id, &live, &settled.outcome, settled.usage);
                let child = live.child;
                let grace = self.limits.dispose_grace;
                let mut disposed = Box::pin(async move {
                    let _ = tokio::time::timeout(grace, child.dispose()).await;
                });
                // Most children have nothing to dispose: no task for them.
                if poll_once(&mut disposed).is_none() {
                    self.tasks.spawn(disposed);
                }
            }
        }
    }

    pub(super) fn emit_end(
        &self,
        call_id: CallId,
        live: &Live,
        outcome: &CallOutcome,
        usage: Option<dsh_protocol::Usage>,
    ) {
        if let Some(u) = usage {
            let t = self.ledger.total.get();
            self.ledger.total.set(Some(t.map_or(u, |t| t.plus(u))));
        }
        self.hub.emit(EventKind::AgentEnd {
            seq: call_id,
            label: live.info.label.clone(),
            phase: live.info.phase.clone(),
            child_id: live.child.id().to_string(),
            outcome: outcome.event_kind(),
            origin: live.child.origin(),
            usage,
            // Already cut to MAX_REASON_CHARS by `judge`.
            reason: outcome.reason().map(str::to_string),
            worktree: live.child.kept_worktree(),
            workflow: live.info.workflow.clone(),
        });
    }
}

/// Decides how call `call_id` ended, once: the answer checked against
/// the call's schema, the bound that failed it (if one did), a fault in
/// delivering it, an answer too large for one frame. The frame for the
/// worker and the [`CallOutcome`] every view reads come from here.
fn judge(
    call_id: CallId,
    schema: Option<&Value>,
    res: Result<ChildOutcome, ResultFault>,
    bound: Option<guard::Bound>,
) -> Settlement {
    let (msg, outcome, usage) = match res {
        Ok(o) => {
            let (wire, outcome) = normalize(schema, o.result, bound);
            let msg = HostMsg::ChildSettled {
                call_id,
                outcome: wire,
                usage: o.usage,
            };
            (msg, outcome, o.usage)
        }
        Err(fault) => {
            let message =
                format!("agent(): delivering the result of call #{call_id} failed: {fault}");
            let msg = HostMsg::ChildFailed {
                call_id,
                message: message.clone(),
            };
            (msg, CallOutcome::Undelivered { reason: message }, None)
        }
    };
    if let Err(dsh_protocol::FrameError::TooLargeToSend { len, max }) =
        encode(&msg, dsh_protocol::DEFAULT_MAX_FRAME_BYTES)
    {
        // An answer too large for one frame is a delivery fault, never a
        // call left waiting forever.
        let message = format!(
            "agent(): the answer to call #{call_id} is {len} bytes, over the protocol's frame \
             limit of {max} bytes"
        );
        return Settlement {
            msg: HostMsg::ChildFailed {
                call_id,
                message: message.clone(),
            },
            outcome: CallOutcome::Undelivered { reason: message },
            usage,
        };
    }
    Settlement {
        msg,
        outcome: outcome.cut(MAX_REASON_CHARS),
        usage,
    }
}

/// Applies the schema rules every provider gets for free: text answers to
/// schema calls are parsed and validated, structured answers are validated,
/// a structured answer to a plain call becomes its JSON text. A failure is
/// [`CallOutcome::Stalled`] or [`CallOutcome::TimedOut`] when `bound`
/// failed the call.
fn normalize(
    schema: Option<&Value>,
    result: ChildResult,
    bound: Option<guard::Bound>,
) -> (WireOutcome, CallOutcome) {
    let invalid = |reason: String| {
        (
            WireOutcome::Failed(reason.clone()),
            CallOutcome::Invalid { reason },
        )
    };
    let checked = |v: Value, schema: &Value| -> (WireOutcome, CallOutcome) {
        let problems = schema::validate(schema, &v, "value");
        if problems.is_empty() {
            (
                WireOutcome::Structured(v.to_string()),
                CallOutcome::Completed,
            )
        } else {
            let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            invalid(format!(
                "the structured answer does not match the schema: {}",
                list.join("; ")
            ))
        }
    };
    match (result, schema) {
        (ChildResult::Text(t), Some(s)) => match serde_json::from_str::<Value>(&t) {
            Ok(v) => checked(v, s),
            Err(e) => invalid(format!(
                "the answer is not the JSON the schema asks for: {e}"
            )),
        },
        (ChildResult::Text(t), None) => (WireOutcome::Text(t), CallOutcome::Completed),
        (ChildResult::Structured(v), Some(s)) => checked(v, s),
        (ChildResult::Structured(v), None) => {
            (WireOutcome::Text(v.to_string()), CallOutcome::Completed)
        }
        (ChildResult::Failed(r), _) => {
            let outcome = match bound {
                Some(guard::Bound::Stall) => CallOutcome::Stalled { reason: r.clone() },
                Some(guard::Bound::Timeout) => CallOutcome::TimedOut { reason: r.clone() },
                None => CallOutcome::Failed { reason: r.clone() },
            };
            (WireOutcome::Failed(r), outcome)
        }
        (ChildResult::Cancelled, _) => (WireOutcome::Cancelled, CallOutcome::Cancelled),
    }
}

/// Polls a future once without a real waker: `Some` when it is already
/// done. A pending future is then moved into a task, which polls it again
/// with a real waker (futures must accept a new waker on every poll).
fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(fut).poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Turns a running child's [`Activity`](dsh_seam::Activity) reports
/// into `workflow/agent-activity` events, at most
/// [`MAX_ACTIVITY_EVENTS`] per call (a chatty provider cannot grow the
/// run's event history without bound).
struct ActivityPump {
    progress: dsh_seam::Progress,
    hub: crate::events::Hub,
    seq: u64,
    label: String,
    workflow: Option<String>,
}

/// Most activity events one call emits; later ones are dropped.
const MAX_ACTIVITY_EVENTS: usize = 2000;

impl ActivityPump {
    /// Awaits `settle`, emitting activities meanwhile; returns its output.
    async fn while_running<T>(self, settle: impl std::future::Future<Output = T>) -> T {
        tokio::pin!(settle);
        let mut emitted = 0usize;
        loop {
            tokio::select! {
                biased;
                out = &mut settle => {
                    // What came with the answer still precedes agent-end.
                    let last = self.progress.take_activities();
                    self.emit(last, &mut emitted);
                    return out;
                }
                batch = self.progress.next_activities() => self.emit(batch, &mut emitted),
            }
        }
    }

    fn emit(&self, batch: Vec<dsh_seam::Activity>, emitted: &mut usize) {
        for activity in batch {
            if *emitted >= MAX_ACTIVITY_EVENTS {
                return;
            }
            *emitted += 1;
            self.hub.emit(EventKind::AgentActivity {
                seq: self.seq,
                label: self.label.clone(),
                activity,
                workflow: self.workflow.clone(),
            });
        }
    }
}
