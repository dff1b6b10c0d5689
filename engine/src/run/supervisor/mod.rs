//! The per-run supervisor: one task that owns all of a run's mutable state
//! (the worker process, the connection, the children, the cancel reason,
//! the timers) and talks to everything else through channels.
//!
//! - [`handshake`]: `Hello` → `Init` → `Ready` → `Go` (or `Cancel`), the
//!   supervisor's steps of it in [`init`];
//! - [`connection`]: the socket, frames in and out;
//! - [`ledger`]: the children — starting them through the provider,
//!   announcing them, settling them, pairing every `agent-start`;
//! - [`guard`]: a call's stall and timeout bounds while its child runs;
//! - [`queue`]: the calls waiting in the worker's queue
//!   (`workflow/agent-queued`);
//! - [`narration`]: `phase()`, `warn()`, `log()` as events, bounded;
//! - [`cancel`]: the cancel path (both channels, the grace);
//! - [`nested`]: `workflow()` — loading nested workflows for the worker;
//! - [`spin`]: spinning for the worker's answer after a write, and keeping
//!   the worker off this thread's CPU;
//! - [`death`]: the worker's end without an `End` (closed, broken, exited);
//! - [`settle`]: the one path every end of a run takes — the result,
//!   stray children, stopping and reaping the worker;
//! - [`stderr`]: the worker's stderr into tracing.
//!
//! The run ends by the first *terminal claim* (see [`Claim`]): the worker's
//! `End`, the worker's death or a protocol violation, the grace timer after
//! a cancel, or a forced termination. Later claims change nothing.

mod cancel;
mod connection;
mod death;
mod guard;
mod handshake;
mod init;
mod ledger;
mod narration;
mod nested;
mod queue;
mod settle;
mod spin;
mod stderr;

use std::sync::Arc;
use std::time::Duration;

use dsh_protocol::{CallId, CancelReason, EndResult, HostMsg, SandboxReport, WorkerMsg};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::connection::{Connection, Read};
use self::handshake::{Handshake, msg_name};
use self::ledger::{Internal, Ledger};
use self::narration::Narration;
use self::queue::Queued;
use crate::events::Hub;
use crate::limits::{Limits, millis};
use crate::result::RunResult;
use crate::script::PreparedScript;
use dsh_exec::process::ProcessGroup;
use dsh_exec::process::placement::Narrowed;
use dsh_seam::SubagentProvider;

/// A worker that has not said Hello and Ready within this long is treated
/// as dead. Generous: a loaded machine can be slow to exec.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound for reading what a worker wrote just before it exited.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// What the public handle can ask of the supervisor.
#[derive(Debug)]
pub(crate) enum Command {
    Cancel(String),
    /// Stop now: settle `cancelled` and kill the worker without grace.
    Terminate,
}

/// How the run came to an end; the first one wins.
enum Claim {
    End(EndResult),
    Death(String),
    Grace,
    Forced,
}

/// Where the run is.
enum Phase {
    /// The handshake is not done; the body is not running.
    Starting(Handshake),
    /// The worker said `Ready` (the `Go` went with `Init`): the body runs.
    Running,
    /// A cancel was asked for: the worker was told (or, before `Hello`,
    /// will be told with `Init`, in place of `Go`), every child was
    /// cancelled, and the run settles by `deadline` at the latest.
    /// `handshake` is the step still awaited when the cancel came before
    /// `Ready`.
    Cancelling {
        reason: CancelReason,
        deadline: Instant,
        handshake: Option<Handshake>,
    },
    /// The run has its result: nothing more goes to the worker.
    Settled,
}

impl Phase {
    /// The handshake step awaited, if the handshake is not done.
    fn handshake(&self) -> Option<Handshake> {
        match self {
            Phase::Starting(h) => Some(*h),
            Phase::Cancelling { handshake, .. } => *handshake,
            Phase::Running | Phase::Settled => None,
        }
    }

    fn cancel_reason(&self) -> Option<&CancelReason> {
        match self {
            Phase::Cancelling { reason, .. } => Some(reason),
            _ => None,
        }
    }

    fn is_cancelling(&self) -> bool {
        matches!(self, Phase::Cancelling { .. })
    }

    /// The body may be running: narration and `agent()` calls are legal.
    fn body_may_run(&self) -> bool {
        matches!(
            self,
            Phase::Running
                | Phase::Cancelling {
                    handshake: None,
                    ..
                }
        )
    }
}

/// What `start()` hands the supervisor.
pub(crate) struct Parts {
    pub run_id: Arc<str>,
    pub hub: Hub,
    pub prepared: Arc<PreparedScript>,
    pub meta_json: String,
    pub args: dsh_protocol::Args,
    pub limits: Limits,
    pub provider: Option<Arc<dyn SubagentProvider>>,
    pub catalog: Option<Arc<crate::catalog::Catalog>>,
    pub process: ProcessGroup,
    pub socket: tokio::net::UnixStream,
    pub stderr: Option<dsh_exec::process::group::Stderr>,
    /// For a run that took part in the fork server sharing: released
    /// once the worker is gone ([`crate::fork_server::shared`]).
    pub lease: Option<crate::fork_server::shared::Lease>,
    pub cmds: mpsc::UnboundedReceiver<Command>,
    pub result_tx: watch::Sender<Option<RunResult>>,
    pub done_tx: watch::Sender<bool>,
}

pub(crate) struct Supervisor {
    run_id: Arc<str>,
    hub: Hub,
    prepared: Arc<PreparedScript>,
    meta_json: String,
    args: dsh_protocol::Args,
    limits: Limits,
    provider: Option<Arc<dyn SubagentProvider>>,
    catalog: Option<Arc<crate::catalog::Catalog>>,
    process: ProcessGroup,
    conn: Connection,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    /// `None` once the handle is gone.
    cmds: Option<mpsc::UnboundedReceiver<Command>>,
    result_tx: watch::Sender<Option<RunResult>>,
    done_tx: watch::Sender<bool>,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal_rx: mpsc::UnboundedReceiver<Internal>,

    phase: Phase,
    run_token: CancellationToken,
    tasks: JoinSet<()>,
    ledger: Ledger,
    narration: Narration,
    /// The calls waiting in the worker's queue (`ChildQueued`), until their
    /// `ChildStart` comes or the run settles: each gets its
    /// `workflow/agent-queued` with `waiting: false` then.
    queued: std::collections::BTreeMap<CallId, Queued>,
    /// The last `ChildQueued` call id.
    last_queued: CallId,
    nested: nested::Nested,
    sandbox: Option<SandboxReport>,
    /// The run's part in the fork server sharing, released in `settle`
    /// once the worker is gone.
    lease: Option<crate::fork_server::shared::Lease>,
    /// How long to wait for the worker's next frame after a write before
    /// going back to the runtime.
    spin: dsh_protocol::spin::Spin,
    /// When the last write was made without spinning (the window was
    /// closed), until the worker's next frame.
    blocked_since: Option<std::time::Instant>,
    /// The worker moved off this thread's CPU, its mask to restore once
    /// the two answer each other apart (`process::placement`).
    narrowed: Option<Narrowed>,
    /// No placement check before this (they cost a `/proc` read).
    next_placement_check: std::time::Instant,
    wall_deadline: Option<Instant>,
    startup_deadline: Instant,
}

impl Supervisor {
    pub(crate) fn new(p: Parts) -> Self {
        let stderr_task = p
            .stderr
            .map(|s| tokio::spawn(stderr::drain(s, p.run_id.clone())));
        let (internal_tx, internal_rx) = mpsc::unbounded_channel();
        let now = Instant::now();
        Supervisor {
            wall_deadline: p.limits.wall_timeout.map(|d| now + d),
            startup_deadline: now + STARTUP_TIMEOUT,
            run_id: p.run_id,
            hub: p.hub,
            prepared: p.prepared,
            meta_json: p.meta_json,
            args: p.args,
            limits: p.limits,
            provider: p.provider,
            catalog: p.catalog,
            process: p.process,
            conn: Connection::new(p.socket),
            stderr_task,
            cmds: Some(p.cmds),
            result_tx: p.result_tx,
            done_tx: p.done_tx,
            internal_tx,
            internal_rx,
            phase: Phase::Starting(Handshake::AwaitHello),
            run_token: CancellationToken::new(),
            tasks: JoinSet::new(),
            ledger: Ledger::default(),
            narration: Narration::default(),
            queued: std::collections::BTreeMap::new(),
            last_queued: 0,
            nested: nested::Nested::default(),
            sandbox: None,
            lease: p.lease,
            spin: dsh_protocol::spin::Spin::default(),
            blocked_since: None,
            narrowed: None,
            next_placement_check: std::time::Instant::now(),
        }
    }

    pub(crate) async fn run(mut self) {
        let claim = self.main_loop().await;
        self.settle(claim).await;
    }

    fn send(&mut self, msg: &HostMsg) {
        if let Err(e) = self.conn.outbound.send(msg) {
            tracing::warn!(run = %self.run_id, "cannot encode a message for the worker: {e}");
        }
    }

    /// A command from the run's handle; `None` when the handle is gone.
    fn on_command(&mut self, cmd: Option<Command>) -> Option<Claim> {
        match cmd {
            Some(Command::Cancel(reason)) => self.request_cancel(CancelReason::Requested(reason)),
            Some(Command::Terminate) => {
                self.request_cancel(CancelReason::Requested("terminated".into()));
                return Some(Claim::Forced);
            }
            None => {
                // The handle is gone: nobody can observe the run any
                // more, so wind it down rather than leak it.
                self.cmds = None;
                self.request_cancel(CancelReason::Requested("the run handle was dropped".into()));
            }
        }
        None
    }

    async fn main_loop(&mut self) -> Claim {
        // What the handle asked before this task first ran goes before the
        // first write: a run cancelled as it was started on a warm worker
        // sends `Cancel` with `Init`, never `Go`.
        while let Some(cmds) = &mut self.cmds {
            let cmd = match cmds.try_recv() {
                Ok(cmd) => Some(cmd),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            };
            if let Some(claim) = self.on_command(cmd) {
                return claim;
            }
        }
        loop {
            let wrote = match self.conn.outbound.flush() {
                Ok(wrote) => wrote,
                Err(death) => return Claim::Death(death.to_string()),
            };
            if wrote
                && matches!(self.phase, Phase::Running)
                && let Some(claim) = self.spin_for_worker().await
            {
                return claim;
            }
            let grace = match &self.phase {
                Phase::Cancelling { deadline, .. } => Some(*deadline),
                _ => None,
            };
            let wall = self.wall_deadline.filter(|_| !self.phase.is_cancelling());
            let starting = self.phase.handshake().is_some();
            tokio::select! {
                biased;
                cmd = recv_opt(&mut self.cmds) => if let Some(claim) = self.on_command(cmd) {
                    return claim;
                },
                _ = sleep_until_opt(grace), if grace.is_some() => return Claim::Grace,
                _ = sleep_until_opt(wall), if wall.is_some() => {
                    let limit_ms = self.limits.wall_timeout.map(millis).unwrap_or(0);
                    self.request_cancel(CancelReason::WallTimeout { limit_ms });
                }
                _ = tokio::time::sleep_until(self.startup_deadline), if starting => {
                    return Claim::Death(format!(
                        "the worker did not complete its handshake within {} s",
                        STARTUP_TIMEOUT.as_secs()
                    ));
                }
                read = self.conn.inbound.read() => {
                    if let (Read::Data, Some(since)) = (&read, self.blocked_since.take()) {
                        self.spin.blocked_for(since.elapsed());
                        if !self.spin.window().is_zero() {
                            // The worker answered fast although the spins
                            // missed: the signature of the two sharing a CPU.
                            self.keep_apart();
                        }
                    }
                    if let Some(claim) = self.on_read(read).await {
                        return claim;
                    }
                }
                Some(ev) = self.internal_rx.recv() => self.on_internal(ev),
                _ = self.conn.outbound.writable() => {}
                _ = self.process.exited() => {
                    // The worker may have written its End just before exiting.
                    return self.drain_after_exit().await;
                }
            }
        }
    }

    /// What a read brought, whether the runtime woke us for it or a spin
    /// found it: frames to handle, or the end of the connection.
    async fn on_read(&mut self, read: Read) -> Option<Claim> {
        match read {
            Read::Data => self.decode_frames(),
            Read::Eof => Some(self.claim_eof().await),
            // A Unix socket's peer that closes with bytes of ours unread
            // (the policy line, `Init`) resets rather than ends the
            // stream: it closed its connection all the same.
            Read::Failed(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                Some(self.claim_eof().await)
            }
            // Any other failure usually means the worker died: report how,
            // as for a clean end of stream.
            Read::Failed(e) => Some(
                self.claim_broken(format!("the connection to the worker failed: {e}"))
                    .await,
            ),
        }
    }

    fn decode_frames(&mut self) -> Option<Claim> {
        loop {
            match self.conn.inbound.next_msg() {
                Ok(Some(msg)) => {
                    if let Some(claim) = self.on_worker(msg) {
                        return Some(claim);
                    }
                }
                Ok(None) => return None,
                Err(e) => return violation(e),
            }
        }
    }

    fn on_worker(&mut self, msg: WorkerMsg) -> Option<Claim> {
        let handshake = self.phase.handshake();
        match (handshake, msg) {
            (Some(Handshake::AwaitHello), msg @ WorkerMsg::Hello { .. }) => self.on_hello(&msg),
            (Some(Handshake::AwaitReady), WorkerMsg::Ready { sandbox }) => {
                self.on_ready(sandbox);
                None
            }
            // A worker may end before Go (sandbox refused, engine failure).
            (handshake, WorkerMsg::End { mut result }) => {
                // Only a worker that never said Ready may report its
                // sandbox here (a strict refusal); afterwards `Ready`'s
                // report stands.
                if matches!(handshake, Some(Handshake::AwaitReady)) && self.sandbox.is_none() {
                    self.sandbox = result.sandbox.take();
                }
                Some(Claim::End(result))
            }
            (None, WorkerMsg::Phase { title, workflow }) if self.phase.body_may_run() => {
                self.on_phase(&title, workflow.as_deref());
                None
            }
            (None, WorkerMsg::Warning { message, path }) if self.phase.body_may_run() => {
                self.on_warning(&message, path.as_deref());
                None
            }
            (None, WorkerMsg::Log { message, workflow }) if self.phase.body_may_run() => {
                self.on_log(message, workflow.as_deref());
                None
            }
            (None, WorkerMsg::ChildStart { call_id, request }) if self.phase.body_may_run() => {
                self.unqueue(call_id);
                self.on_child_start(call_id, request)
            }
            (
                None,
                WorkerMsg::ChildQueued {
                    call_id,
                    label,
                    phase,
                    workflow,
                },
            ) if self.phase.body_may_run() => self.on_child_queued(call_id, label, phase, workflow),
            (None, WorkerMsg::WorkflowLoad { call_id, target }) if self.phase.body_may_run() => {
                self.on_workflow_load(call_id, target);
                None
            }
            (_, msg) => violation(format_args!(
                "unexpected message {} at this point",
                msg_name(&msg)
            )),
        }
    }
}

fn violation(what: impl std::fmt::Display) -> Option<Claim> {
    Some(Claim::Death(format!("protocol violation: {what}")))
}

async fn recv_opt(cmds: &mut Option<mpsc::UnboundedReceiver<Command>>) -> Option<Command> {
    match cmds {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
