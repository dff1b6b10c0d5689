//! The handshake: the worker says `Hello` (its protocol version and pid),
//! the host sends `Init` and `Go` in one write — or `Init` and `Cancel`
//! when the run was cancelled meanwhile, and the body never runs — the
//! worker applies its sandbox, builds the run, says `Ready` and runs the
//! body unless a `Cancel` is already in.

use dsh_protocol::{PROTOCOL_VERSION, WorkerMsg};

/// The step of the handshake the host waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Nothing was sent yet.
    AwaitHello,
    /// `Init` (and `Go` or `Cancel`) was sent.
    AwaitReady,
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
