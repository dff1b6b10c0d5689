//! The cancel path: a cancel (asked for, a dropped handle, the wall-clock
//! budget) goes through both channels — the worker is told, and every
//! child is cancelled here, since a wedged worker cannot relay anything —
//! and starts the grace after which the run settles regardless.

use dsh_protocol::{CancelReason, ErrorCode, HostMsg};
use tokio::time::Instant;

use super::handshake::Handshake;
use super::{Phase, Supervisor};
use crate::result::RunError;

impl Supervisor {
    /// Idempotent; the first reason wins.
    pub(super) fn request_cancel(&mut self, reason: CancelReason) {
        let handshake = match &self.phase {
            Phase::Starting(h) => Some(*h),
            Phase::Running => None,
            Phase::Cancelling { .. } | Phase::Settled => return,
        };
        // Before `Hello` nothing has gone to the worker: `Init` will carry
        // the cancel in place of `Go` (the body never runs). After it,
        // `Go` is on its way or read: the worker is told now, and one
        // that has not started the body yet never starts it.
        if handshake != Some(Handshake::AwaitHello) {
            self.send(&HostMsg::Cancel {
                reason: reason.clone(),
            });
        }
        self.phase = Phase::Cancelling {
            reason,
            deadline: Instant::now() + self.limits.dispose_grace,
            handshake,
        };
        self.run_token.cancel();
        for live in self.ledger.live.values() {
            live.child.cancel();
        }
    }
}

/// The run's error when `reason` cancelled it.
pub(super) fn cancel_error(reason: &CancelReason) -> RunError {
    match reason {
        CancelReason::Requested(why) => RunError::new(
            ErrorCode::Cancelled,
            if why.is_empty() {
                "the run was cancelled".to_string()
            } else {
                format!("the run was cancelled: {why}")
            },
        ),
        CancelReason::WallTimeout { limit_ms } => RunError::new(
            ErrorCode::Timeout,
            format!("the run's wall-clock budget of {limit_ms} ms ran out"),
        ),
    }
}
