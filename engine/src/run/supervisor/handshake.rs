//! The handshake: the worker says `Hello` (its protocol version and pid),
//! the host sends `Init` and `Go` in one write — or `Init` and `Cancel`
//! when the run was cancelled meanwhile, and the body never runs — the
//! worker applies its sandbox, builds the run, says `Ready` and runs the
//! body unless a `Cancel` is already in. A warm pool worker said `Hello`
//! to the pool ([`crate::pool`]); both check it with [`check_hello`]. The
//! supervisor's steps (`on_hello`, `send_init`, `on_ready`) are here too.

use dsh_protocol::{HostMsg, Init, PROTOCOL_VERSION, SandboxReport, WorkerMsg};
use tokio::time::Instant;

use super::{Claim, Phase, REFILL_AFTER, Supervisor, violation};

/// The step of the handshake the host waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Nothing was sent yet.
    AwaitHello,
    /// `Init` (and `Go` or `Cancel`) was sent.
    AwaitReady,
}

/// Whether the worker's `Hello` was already checked (by the pool) when
/// the run got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hello {
    /// A cold worker: its `Hello` is the first thing the supervisor reads.
    Expected,
    /// A warm pool worker: checked; `Init` goes out at once.
    Checked,
}

/// What is wrong with a worker's first message (a protocol violation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelloError {
    /// The worker binary is of another release than the host.
    #[error(
        "the worker speaks protocol version {got}, this host speaks {PROTOCOL_VERSION}; \
         install matching dsh and dsh-worker binaries"
    )]
    Version { got: u32 },
    /// The peer is not the process the host spawned.
    #[error("the peer says it is pid {said}, but the spawned worker is pid {spawned}")]
    Pid { said: u32, spawned: u32 },
    /// Something other than `Hello` came first.
    #[error("unexpected message {0} at this point")]
    Unexpected(&'static str),
}

/// The one check of a worker's first message: `Hello` with this host's
/// protocol version and the pid the host spawned.
pub(crate) fn check_hello(msg: &WorkerMsg, spawned_pid: u32) -> Result<(), HelloError> {
    match msg {
        WorkerMsg::Hello {
            protocol_version,
            pid,
        } => {
            if *protocol_version != PROTOCOL_VERSION {
                return Err(HelloError::Version {
                    got: *protocol_version,
                });
            }
            if *pid != spawned_pid {
                return Err(HelloError::Pid {
                    said: *pid,
                    spawned: spawned_pid,
                });
            }
            Ok(())
        }
        other => Err(HelloError::Unexpected(msg_name(other))),
    }
}

/// A worker message's name, for protocol-violation messages.
pub(super) fn msg_name(msg: &WorkerMsg) -> &'static str {
    match msg {
        WorkerMsg::Hello { .. } => "Hello",
        WorkerMsg::Ready { .. } => "Ready",
        WorkerMsg::Phase { .. } => "Phase",
        WorkerMsg::Log { .. } => "Log",
        WorkerMsg::Warning { .. } => "Warning",
        WorkerMsg::ChildStart { .. } => "ChildStart",
        WorkerMsg::WorkflowLoad { .. } => "WorkflowLoad",
        WorkerMsg::End { .. } => "End",
        WorkerMsg::ChildQueued { .. } => "ChildQueued",
    }
}

impl Supervisor {
    /// A cold worker's `Hello`: checked, then `Init` goes out.
    pub(super) fn on_hello(&mut self, msg: &WorkerMsg) -> Option<Claim> {
        if let Err(e) = check_hello(msg, self.process.pid()) {
            return violation(e);
        }
        self.send_init();
        None
    }

    pub(super) fn send_init(&mut self) {
        self.send(&HostMsg::Init(Box::new(Init {
            run_id: self.run_id.to_string(),
            script_name: self.prepared.display_name.clone(),
            script_js: self.prepared.code.clone(),
            meta_json: self.meta_json.clone(),
            args: self.args.clone(),
            limits: self.limits.to_wire(),
            sandbox: self.sandbox_policy,
        })));
        // `Go` goes with `Init`, in the same write, rather than after
        // `Ready`: the worker finds it waiting once it has built the run,
        // and a start saves a round trip (docs/performance.md round 11).
        // A run cancelled meanwhile sends `Cancel` after it; the worker
        // checks for one before it runs a line of the body.
        match self.phase.cancel_reason() {
            Some(reason) => {
                let reason = reason.clone();
                self.send(&HostMsg::Cancel { reason });
            }
            None => self.send(&HostMsg::Go),
        }
        self.set_handshake(Handshake::AwaitReady);
    }

    /// Moves the handshake on, in whichever phase it is awaited.
    pub(super) fn set_handshake(&mut self, step: Handshake) {
        match &mut self.phase {
            Phase::Starting(h) => *h = step,
            Phase::Cancelling { handshake, .. } => *handshake = Some(step),
            Phase::Running | Phase::Settled => {}
        }
    }

    /// `Ready`: the worker's sandbox report; the body runs (or, cancelled
    /// meanwhile, the handshake is over).
    pub(super) fn on_ready(&mut self, sandbox: SandboxReport) {
        self.sandbox = Some(sandbox);
        if self.refill.is_some() {
            self.refill_at = Some(Instant::now() + REFILL_AFTER);
        }
        match &mut self.phase {
            // The worker was told with `Init`, or since.
            Phase::Cancelling { handshake, .. } => *handshake = None,
            _ => self.phase = Phase::Running,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_must_name_the_version_and_the_pid() {
        let hello = |v, pid| WorkerMsg::Hello {
            protocol_version: v,
            pid,
        };
        assert_eq!(check_hello(&hello(PROTOCOL_VERSION, 7), 7), Ok(()));
        let e = check_hello(&hello(PROTOCOL_VERSION + 1, 7), 7)
            .expect_err("version")
            .to_string();
        assert!(e.contains("protocol version"), "{e}");
        let e = check_hello(&hello(PROTOCOL_VERSION, 8), 7)
            .expect_err("pid")
            .to_string();
        assert!(e.contains("pid 8"), "{e}");
        let e = check_hello(
            &WorkerMsg::Phase {
                title: "x".into(),
                workflow: None,
            },
            7,
        )
        .expect_err("not hello")
        .to_string();
        assert!(e.contains("unexpected message Phase"), "{e}");
    }
}
