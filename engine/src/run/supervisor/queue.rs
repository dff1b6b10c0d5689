//! The calls waiting in the worker's queue (`ChildQueued`): each gets a
//! `workflow/agent-queued` with `waiting: true`, and one with `waiting:
//! false` when its `ChildStart` comes or the run settles.

use dsh_protocol::CallId;

use super::{Claim, Supervisor, violation};
use crate::events::EventKind;

/// A call waiting for a slot, as its `workflow/agent-queued` said it.
pub(super) struct Queued {
    label: String,
    phase: Option<String>,
    workflow: Option<String>,
}

impl Supervisor {
    /// A call waits for a slot: `workflow/agent-queued` (`waiting: true`).
    /// Checked like a `ChildStart` is (a new call id, within
    /// `maxTotalAgents`), so a worker cannot grow the queue's record
    /// without bound.
    pub(super) fn on_child_queued(
        &mut self,
        call_id: CallId,
        label: String,
        phase: Option<String>,
        workflow: Option<String>,
    ) -> Option<Claim> {
        // Calls queue in admission order, so their ids only grow.
        if call_id <= self.last_queued {
            return violation(format_args!(
                "queued call id {call_id} reused or out of order"
            ));
        }
        self.last_queued = call_id;
        if call_id > u64::from(self.limits.max_total_agents) {
            return violation(format_args!(
                "queued call id {call_id} is above maxTotalAgents"
            ));
        }
        if self.phase.is_cancelling() {
            // The worker rejects its queued calls: none of them will run.
            return None;
        }
        let q = Queued {
            label: crate::events::shown_label(&label),
            phase: phase.as_deref().map(crate::events::shown_label),
            workflow: workflow.as_deref().map(crate::events::shown_label),
        };
        self.emit_queued(call_id, &q, true);
        self.queued.insert(call_id, q);
        None
    }

    /// A queued call left the queue (its `ChildStart` came): `waiting: false`.
    pub(super) fn unqueue(&mut self, call_id: CallId) {
        if let Some(q) = self.queued.remove(&call_id) {
            self.emit_queued(call_id, &q, false);
        }
    }

    /// `waiting: false` for every call still queued when the run settles:
    /// each `waiting: true` is paired before `workflow/end`.
    pub(super) fn emit_unqueued(&self) {
        for (id, q) in &self.queued {
            self.emit_queued(*id, q, false);
        }
    }

    fn emit_queued(&self, seq: CallId, q: &Queued, waiting: bool) {
        self.hub.emit(EventKind::AgentQueued {
            seq,
            label: q.label.clone(),
            phase: q.phase.clone(),
            waiting,
            workflow: q.workflow.clone(),
        });
    }
}
