//! The worker's end, without an `End`: the connection closed or broke, or
//! the process exited. What it wrote before exiting still counts; else
//! its exit status says how it died.

use tokio::time::Instant;

use super::{Claim, DRAIN_TIMEOUT, Supervisor};

impl Supervisor {
    pub(super) async fn claim_eof(&mut self) -> Claim {
        if let Err(e) = self.conn.inbound.finish_frames() {
            return Claim::Death(format!("protocol violation: {e}"));
        }
        self.claim_broken("the worker closed its connection".into())
            .await
    }

    /// The connection is gone: name the exit status when the process ends
    /// promptly (it normally has), else what happened to the connection.
    pub(super) async fn claim_broken(&mut self, otherwise: String) -> Claim {
        if tokio::time::timeout(DRAIN_TIMEOUT, self.process.exited())
            .await
            .is_err()
        {
            return Claim::Death(otherwise);
        }
        self.claim_exit().await
    }

    /// The worker exited: what it wrote before still counts (an `End`).
    pub(super) async fn drain_after_exit(&mut self) -> Claim {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while self.conn.inbound.read_for(deadline).await {
            if let Some(claim) = self.decode_frames() {
                if matches!(claim, Claim::Death(_)) {
                    // A violation in its last words: the exit status still
                    // decides how the death reads (MEMORY, TIMEOUT).
                    self.process.reap().await;
                }
                return claim;
            }
        }
        self.claim_exit().await
    }

    /// The worker exited without `End`: reap it (and whatever is left of
    /// its process group) and say how it ended.
    pub(super) async fn claim_exit(&mut self) -> Claim {
        match self.process.reap().await {
            Some(st) => Claim::Death(format!(
                "the worker process {}",
                dsh_exec::process::describe_status(st)
            )),
            None => Claim::Death("the worker process exited but could not be reaped".into()),
        }
    }
}
