//! The supervisor's steps of the handshake ([`super::handshake`]): a cold
//! worker's `Hello` checked, `Init` sent with `Go` (or `Cancel`), `Ready`
//! taken. Apart from `handshake.rs`, which knows nothing of the
//! supervisor.

use dsh_protocol::{HostMsg, Init, SandboxReport, WorkerMsg};

use super::handshake::{Handshake, check_hello};
use super::{Claim, Phase, Supervisor, violation};

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
        match &mut self.phase {
            // The worker was told with `Init`, or since.
            Phase::Cancelling { handshake, .. } => *handshake = None,
            _ => self.phase = Phase::Running,
        }
    }
}
