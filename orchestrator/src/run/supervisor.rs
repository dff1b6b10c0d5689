//! The per-run supervisor: one task that owns all of a run's mutable state
//! (the worker process, the connection, the children, the ledger of
//! announced agents, the cancel reason, the timers) and talks to everything
//! else through channels.
//!
//! The run ends by the first *terminal claim* (see [`Claim`]): the worker's
//! `End`, the worker's death or a protocol violation, the grace timer after
//! a cancel, or a forced termination. Later claims change nothing. Settling
//! then follows one path for all of them (see [`Supervisor::settle`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dsh_protocol::{
    CallId, CancelReason, ChildOutcome as WireOutcome, EndOutcome, EndResult, ErrorCode,
    FrameBuffer, HostMsg, Init, PROTOCOL_VERSION, SandboxReport, StopReason, WorkerMsg, encode,
    schema,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::process::{WorkerProcess, describe_status};
use crate::events::{AgentOutcomeKind, EventKind, Hub};
use crate::limits::{Limits, millis};
use crate::provider::{
    AgentRequest, ChildOutcome, ChildResult, ResultFault, StartRefused, Subagent, SubagentProvider,
};
use crate::result::{RunError, RunResult};
use crate::script::PreparedScript;

/// A worker that has not said Hello and Ready within this long is treated
/// as dead. Generous: a loaded machine can be slow to exec.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound for reading what a worker wrote just before it exited.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);
const READ_CHUNK: usize = 64 * 1024;
/// Phase events kept per run; later `phase()` calls still set the phase in
/// the worker but emit nothing.
const MAX_PHASE_EVENTS: u64 = 10_000;
/// Room above `logBytes` for the worker's truncation marker line.
const LOG_MARKER_SLACK: u64 = 1024;

/// Narration counted on the host side.
#[derive(Default)]
struct Narration {
    phases: u64,
    log_bytes: u64,
}

/// What the public handle can ask of the supervisor.
#[derive(Debug)]
pub(crate) enum Command {
    Cancel(String),
    /// Stop now: settle `cancelled` and kill the worker without grace.
    Terminate,
}

/// Completions of provider work, sent by the tasks the supervisor spawns.
enum Internal {
    Started {
        call_id: CallId,
        res: Result<Arc<dyn Subagent>, StartRefused>,
    },
    Settled {
        call_id: CallId,
        res: Result<ChildOutcome, ResultFault>,
    },
}

/// How the run came to an end; the first one wins.
enum Claim {
    End(EndResult),
    Death(String),
    Grace,
    Forced,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    AwaitHello,
    AwaitReady,
    Running,
}

/// A call as the host tracks it.
struct CallInfo {
    label: String,
    phase: Option<String>,
    schema: Option<Value>,
}

/// A child whose `agent-start` was emitted and whose `agent-end` was not yet.
struct Live {
    info: CallInfo,
    child: Arc<dyn Subagent>,
}

pub(crate) struct Parts {
    pub run_id: Arc<str>,
    pub hub: Hub,
    pub prepared: Arc<PreparedScript>,
    pub meta_json: String,
    pub args: dsh_protocol::Args,
    pub limits: Limits,
    pub provider: Option<Arc<dyn SubagentProvider>>,
    pub sandbox: dsh_protocol::SandboxPolicy,
    pub proc: WorkerProcess,
    pub socket: tokio::net::UnixStream,
    pub stderr: Option<tokio::process::ChildStderr>,
    /// The worker came from the warm pool, which already checked its Hello.
    pub hello_done: bool,
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
    sandbox_policy: dsh_protocol::SandboxPolicy,
    proc: WorkerProcess,
    reader: OwnedReadHalf,
    frames: FrameBuffer,
    /// The write half, owned here: frames queued during one turn of the
    /// loop go out together at the start of the next (one write, one
    /// wake-up of the worker), without a hop through another task.
    writer: OwnedWriteHalf,
    /// Encoded frames not yet written (the worker may be slow to read).
    out: Vec<u8>,
    /// Cleared when the run settles: later frames are not sent.
    out_open: bool,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    cmds: mpsc::UnboundedReceiver<Command>,
    cmds_open: bool,
    result_tx: watch::Sender<Option<RunResult>>,
    done_tx: watch::Sender<bool>,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal_rx: mpsc::UnboundedReceiver<Internal>,

    stage: Stage,
    cancel: Option<CancelReason>,
    run_token: CancellationToken,
    tasks: JoinSet<()>,
    pending: HashMap<CallId, CallInfo>,
    live: HashMap<CallId, Live>,
    last_call_id: CallId,
    host_count: u64,
    narration: Narration,
    sandbox: Option<SandboxReport>,
    grace_deadline: Option<Instant>,
    wall_deadline: Option<Instant>,
    startup_deadline: Instant,
    exited: bool,
}

impl Supervisor {
    pub(crate) fn new(p: Parts) -> Self {
        let (reader, writer_half) = p.socket.into_split();
        let stderr_task = p
            .stderr
            .map(|s| tokio::spawn(drain_stderr(s, p.run_id.clone())));
        let (internal_tx, internal_rx) = mpsc::unbounded_channel();
        let now = Instant::now();
        let hello_done = p.hello_done;
        let mut sup = Supervisor {
            wall_deadline: p.limits.wall_timeout.map(|d| now + d),
            startup_deadline: now + STARTUP_TIMEOUT,
            run_id: p.run_id,
            hub: p.hub,
            prepared: p.prepared,
            meta_json: p.meta_json,
            args: p.args,
            limits: p.limits,
            provider: p.provider,
            sandbox_policy: p.sandbox,
            proc: p.proc,
            reader,
            frames: FrameBuffer::new(dsh_protocol::DEFAULT_MAX_FRAME_BYTES),
            writer: writer_half,
            out: Vec::new(),
            out_open: true,
            stderr_task,
            cmds: p.cmds,
            cmds_open: true,
            result_tx: p.result_tx,
            done_tx: p.done_tx,
            internal_tx,
            internal_rx,
            stage: Stage::AwaitHello,
            cancel: None,
            run_token: CancellationToken::new(),
            tasks: JoinSet::new(),
            pending: HashMap::new(),
            live: HashMap::new(),
            last_call_id: 0,
            host_count: 0,
            narration: Narration::default(),
            sandbox: None,
            grace_deadline: None,
            exited: false,
        };
        if hello_done {
            sup.send_init();
        }
        sup
    }

    fn send_init(&mut self) {
        self.send(&HostMsg::Init(Box::new(Init {
            run_id: self.run_id.to_string(),
            script_name: self.prepared.display_name.clone(),
            script_js: self.prepared.code.clone(),
            meta_json: self.meta_json.clone(),
            args: self.args.clone(),
            limits: self.limits.to_wire(),
            sandbox: self.sandbox_policy,
        })));
        self.stage = Stage::AwaitReady;
    }

    pub(crate) async fn run(mut self) {
        let claim = self.main_loop().await;
        self.settle(claim).await;
    }

    fn send(&mut self, msg: &HostMsg) {
        if self.out_open {
            match encode(msg, dsh_protocol::DEFAULT_MAX_FRAME_BYTES) {
                Ok(frame) => self.out.extend_from_slice(&frame),
                Err(e) => {
                    tracing::warn!(run = %self.run_id, "cannot encode a message for the worker: {e}")
                }
            }
        }
    }

    /// Writes queued frames without blocking; what does not fit waits for
    /// the socket to become writable. A worker that stops reading never
    /// blocks the supervisor.
    fn flush_out(&mut self) -> Option<Claim> {
        let mut written = 0;
        let res = loop {
            if written == self.out.len() {
                break None;
            }
            match self.writer.try_write(&self.out[written..]) {
                Ok(0) => break None,
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // The worker is gone: the read side and the process wait
                // report how (with its exit status).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    self.out.clear();
                    return None;
                }
                // Anything else: a frame that cannot be delivered would leave
                // the script waiting forever, so the run ends here.
                Err(e) => {
                    break Some(Claim::Death(format!("writing to the worker failed: {e}")));
                }
            }
        };
        // One move of what is left, not one per partial write.
        self.out.drain(..written);
        if res.is_some() {
            self.out.clear();
        }
        res
    }

    async fn main_loop(&mut self) -> Claim {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            if let Some(claim) = self.flush_out() {
                return claim;
            }
            let pending_out = !self.out.is_empty();
            let grace = self.grace_deadline;
            let wall = self.wall_deadline.filter(|_| self.cancel.is_none());
            let starting = self.stage != Stage::Running;
            tokio::select! {
                biased;
                cmd = self.cmds.recv(), if self.cmds_open => match cmd {
                    Some(Command::Cancel(reason)) => self.request_cancel(CancelReason::Requested(reason)),
                    Some(Command::Terminate) => {
                        self.request_cancel(CancelReason::Requested("terminated".into()));
                        return Claim::Forced;
                    }
                    None => {
                        // The handle is gone: nobody can observe the run any
                        // more, so wind it down rather than leak it.
                        self.cmds_open = false;
                        self.request_cancel(CancelReason::Requested("the run handle was dropped".into()));
                    }
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
                n = self.reader.read(&mut buf) => {
                    match n {
                        Ok(0) => return self.claim_eof().await,
                        Ok(n) => {
                            self.frames.push(&buf[..n]);
                            if let Some(claim) = self.decode_frames() {
                                return claim;
                            }
                        }
                        // A reset usually means the worker died: report
                        // how, as for a clean end of stream.
                        Err(e) => return self.claim_broken(format!("the connection to the worker failed: {e}")).await,
                    }
                }
                Some(ev) = self.internal_rx.recv() => self.on_internal(ev),
                _ = writable(&self.writer, pending_out) => {}
                _ = self.proc.wait(), if !self.exited => {
                    self.exited = true;
                    // The worker may have written its End just before exiting.
                    return self.drain_after_exit(&mut buf).await;
                }
            }
        }
    }

    fn decode_frames(&mut self) -> Option<Claim> {
        loop {
            match self.frames.next_msg::<WorkerMsg>() {
                Ok(Some(msg)) => {
                    if let Some(claim) = self.on_worker(msg) {
                        return Some(claim);
                    }
                }
                Ok(None) => return None,
                Err(e) => return Some(Claim::Death(format!("protocol violation: {e}"))),
            }
        }
    }

    async fn claim_eof(&mut self) -> Claim {
        if let Err(e) = self.frames.finish() {
            return Claim::Death(format!("protocol violation: {e}"));
        }
        self.claim_broken("the worker closed its connection".into())
            .await
    }

    /// The connection is gone: name the exit status when the process ends
    /// promptly (it normally has), else what happened to the connection.
    async fn claim_broken(&mut self, otherwise: String) -> Claim {
        let status = tokio::time::timeout(DRAIN_TIMEOUT, self.proc.wait()).await;
        self.exited = status.is_ok();
        match status {
            Ok(st) => Claim::Death(format!("the worker process {}", describe_status(st))),
            Err(_) => Claim::Death(otherwise),
        }
    }

    async fn drain_after_exit(&mut self, buf: &mut [u8]) -> Claim {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.reader.read(buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => {
                    self.frames.push(&buf[..n]);
                    if let Some(claim) = self.decode_frames() {
                        return claim;
                    }
                }
            }
        }
        let st = self.proc.wait().await;
        Claim::Death(format!("the worker process {}", describe_status(st)))
    }

    fn violation(&self, what: impl std::fmt::Display) -> Option<Claim> {
        Some(Claim::Death(format!("protocol violation: {what}")))
    }

    fn on_worker(&mut self, msg: WorkerMsg) -> Option<Claim> {
        match (self.stage, msg) {
            (
                Stage::AwaitHello,
                WorkerMsg::Hello {
                    protocol_version,
                    pid,
                },
            ) => {
                if protocol_version != PROTOCOL_VERSION {
                    return self.violation(format_args!(
                        "the worker speaks protocol version {protocol_version}, this host speaks {PROTOCOL_VERSION}; \
                         install matching dsh and dsh-worker binaries"
                    ));
                }
                if pid != self.proc.pid() {
                    return self.violation(format_args!(
                        "the peer says it is pid {pid}, but the spawned worker is pid {}",
                        self.proc.pid()
                    ));
                }
                self.send_init();
                None
            }
            (Stage::AwaitReady, WorkerMsg::Ready { sandbox }) => {
                self.sandbox = Some(sandbox);
                self.stage = Stage::Running;
                match &self.cancel {
                    // Cancelled before Go: the body never runs.
                    Some(reason) => self.send(&HostMsg::Cancel {
                        reason: reason.clone(),
                    }),
                    None => self.send(&HostMsg::Go),
                }
                None
            }
            // A worker may end before Go (sandbox refused, engine failure).
            (_, WorkerMsg::End { result }) => Some(Claim::End(result)),
            (Stage::Running, WorkerMsg::Phase { title }) => {
                // The host bounds narration itself rather than trusting the
                // worker's budget: a hostile worker cannot grow the event
                // history without limit.
                self.narration.phases += 1;
                if self.cancel.is_none() && self.narration.phases <= MAX_PHASE_EVENTS {
                    self.hub.emit(EventKind::Phase { title });
                }
                None
            }
            (Stage::Running, WorkerMsg::Log { message }) => {
                // Counted like the worker counts: newlines are free.
                self.narration.log_bytes += message.bytes().filter(|b| *b != b'\n').count() as u64;
                let allowed = self.limits.log_bytes + LOG_MARKER_SLACK;
                if self.cancel.is_none() && self.narration.log_bytes <= allowed {
                    self.hub.emit(EventKind::Log { message });
                }
                None
            }
            (Stage::Running, WorkerMsg::ChildStart { call_id, request }) => {
                self.on_child_start(call_id, request)
            }
            (_, msg) => self.violation(format_args!(
                "unexpected message {} at this point",
                msg_name(&msg)
            )),
        }
    }

    fn on_child_start(
        &mut self,
        call_id: CallId,
        req: dsh_protocol::ChildRequest,
    ) -> Option<Claim> {
        if call_id <= self.last_call_id {
            return self.violation(format_args!("call id {call_id} reused or out of order"));
        }
        if call_id > u64::from(self.limits.max_total_agents) {
            return self.violation(format_args!("call id {call_id} is above maxTotalAgents"));
        }
        let in_flight = self.pending.len() + self.live.len();
        if in_flight >= self.limits.max_concurrent_agents as usize {
            return self.violation(format_args!(
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
                return self.violation(format_args!(
                    "call {call_id} carries a schema outside the subset"
                ));
            }
        };
        self.last_call_id = call_id;
        self.host_count += 1;
        if self.cancel.is_some() {
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
                    req.label
                ),
            });
            return None;
        };
        let request = AgentRequest {
            seq: call_id,
            prompt: req.prompt,
            label: req.label.clone(),
            phase: req.phase.clone(),
            schema: schema.clone(),
            model: req.model,
            provider: req.provider,
            effort: req.effort,
            agent_type: req.agent_type,
            isolation: req.isolation,
            system_prompt: None,
        };
        self.pending.insert(
            call_id,
            CallInfo {
                label: req.label,
                phase: req.phase,
                schema,
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

    fn on_internal(&mut self, ev: Internal) {
        match ev {
            Internal::Started { call_id, res } => {
                let Some(info) = self.pending.remove(&call_id) else {
                    return;
                };
                match res {
                    Ok(child) => {
                        let child_id = child.id().to_string();
                        self.send(&HostMsg::ChildStarted {
                            call_id,
                            child_id: child_id.clone(),
                        });
                        self.hub.emit(EventKind::AgentStart {
                            seq: call_id,
                            label: info.label.clone(),
                            phase: info.phase.clone(),
                            child_id,
                            origin: child.origin(),
                        });
                        if self.cancel.is_some() {
                            child.cancel();
                        }
                        let watched = child.clone();
                        let mut fut = Box::pin(async move { watched.result().await });
                        let ready = poll_once(&mut fut);
                        self.live.insert(call_id, Live { info, child });
                        match ready {
                            Some(res) => self.on_internal(Internal::Settled { call_id, res }),
                            None => {
                                let tx = self.internal_tx.clone();
                                self.tasks.spawn(async move {
                                    let res = fut.await;
                                    let _ = tx.send(Internal::Settled { call_id, res });
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
            Internal::Settled { call_id, res } => {
                let Some(live) = self.live.remove(&call_id) else {
                    return;
                };
                let mut usage = None;
                let (msg, kind, mut reason) = match res {
                    Ok(outcome) => {
                        usage = outcome.usage;
                        let (wire, kind) = normalize(live.info.schema.as_ref(), outcome.result);
                        let reason = match &wire {
                            WireOutcome::Failed(r) => Some(r.clone()),
                            _ => None,
                        };
                        (
                            HostMsg::ChildSettled {
                                call_id,
                                outcome: wire,
                                usage: outcome.usage,
                            },
                            kind,
                            reason,
                        )
                    }
                    Err(fault) => {
                        let message = format!(
                            "agent(): delivering the result of call #{call_id} failed: {fault}"
                        );
                        (
                            HostMsg::ChildFailed {
                                call_id,
                                message: message.clone(),
                            },
                            AgentOutcomeKind::Failed,
                            Some(message),
                        )
                    }
                };
                let kind = match encode(&msg, dsh_protocol::DEFAULT_MAX_FRAME_BYTES) {
                    Err(dsh_protocol::FrameError::TooLargeToSend { len, max }) => {
                        // An answer too large for one frame is a delivery
                        // fault, never a call left waiting forever.
                        let message = format!(
                            "agent(): the answer to call #{call_id} is {len} bytes, over the \
                             protocol's frame limit of {max} bytes"
                        );
                        self.send(&HostMsg::ChildFailed {
                            call_id,
                            message: message.clone(),
                        });
                        reason = Some(message);
                        AgentOutcomeKind::Failed
                    }
                    _ => {
                        self.send(&msg);
                        kind
                    }
                };
                self.emit_end(call_id, &live, kind, usage, reason);
                let child = live.child;
                let grace = self.limits.dispose_grace;
                self.tasks.spawn(async move {
                    let _ = tokio::time::timeout(grace, child.dispose()).await;
                });
            }
        }
    }

    fn emit_end(
        &self,
        call_id: CallId,
        live: &Live,
        outcome: AgentOutcomeKind,
        usage: Option<dsh_protocol::Usage>,
        reason: Option<String>,
    ) {
        self.hub.emit(EventKind::AgentEnd {
            seq: call_id,
            label: live.info.label.clone(),
            phase: live.info.phase.clone(),
            child_id: live.child.id().to_string(),
            outcome,
            origin: live.child.origin(),
            usage,
            reason,
            worktree: live.child.kept_worktree(),
        });
    }

    /// Cancel through both channels: tell the worker, and cancel every
    /// child here (a wedged worker cannot relay anything). Idempotent; the
    /// first reason wins.
    fn request_cancel(&mut self, reason: CancelReason) {
        if self.cancel.is_some() {
            return;
        }
        if self.stage == Stage::Running {
            self.send(&HostMsg::Cancel {
                reason: reason.clone(),
            });
        }
        self.cancel = Some(reason);
        self.run_token.cancel();
        for live in self.live.values() {
            live.child.cancel();
        }
        self.grace_deadline = Some(Instant::now() + self.limits.dispose_grace);
    }

    fn cancel_error(&self) -> Option<RunError> {
        self.cancel.as_ref().map(|reason| match reason {
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
        })
    }

    /// Why a worker that died on its own ended the run. Two deaths are the
    /// sandbox's backstops doing their job and read as the budget they
    /// enforce: the out-of-memory exit under the data limit (`MEMORY`) and
    /// SIGXCPU from the CPU limit (`TIMEOUT`). Anything else is
    /// `WORKER_EXITED`.
    fn death_error(&self, reason: &str) -> RunError {
        use std::os::unix::process::ExitStatusExt;
        let status = self.proc.status();
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
                match serde_json::from_str::<Value>(&value_json) {
                    Ok(value) => RunResult {
                        value,
                        stop_reason: StopReason::Completed,
                        error: None,
                        agents_started: end.agents_started,
                        log_bytes_dropped: end.log_bytes_dropped,
                        sandbox: None,
                    },
                    Err(e) => RunResult::failed(
                        StopReason::Error,
                        RunError::new(
                            ErrorCode::ResultUnserializable,
                            format!("value: the return value cannot be represented as JSON: {e}"),
                        ),
                        end.agents_started,
                    ),
                }
            }
            EndOutcome::Failed { error: e } | EndOutcome::Cancelled { error: e } => {
                let error = RunError::new(e.code, self.prepared.map_positions(&e.message));
                RunResult::failed(stop, error, end.agents_started)
            }
        };
        result.log_bytes_dropped = end.log_bytes_dropped;
        result
    }

    /// One path for every claim: close admission, decide the result, pair
    /// every announced agent, emit `workflow/end`, then make sure nothing is
    /// left: children disposed, the worker reaped, every task finished.
    async fn settle(mut self, claim: Claim) {
        let forced = matches!(claim, Claim::Forced);
        let mut worker_ok = false;
        let mut result = match claim {
            Claim::End(end) => {
                worker_ok = true;
                let agents = end.agents_started;
                match self.cancel_error() {
                    Some(err) => RunResult::failed(StopReason::Cancelled, err, agents),
                    None => self.result_from_end(end),
                }
            }
            Claim::Death(reason) => match self.cancel_error() {
                Some(err) => RunResult::failed(StopReason::Cancelled, err, self.host_count),
                None => RunResult::failed(
                    StopReason::Error,
                    self.death_error(&reason),
                    self.host_count,
                ),
            },
            Claim::Grace | Claim::Forced => {
                let err = self.cancel_error().unwrap_or_else(|| {
                    RunError::new(ErrorCode::Cancelled, "the run was cancelled")
                });
                RunResult::failed(StopReason::Cancelled, err, self.host_count)
            }
        };
        result.sandbox = self.sandbox.clone();

        // Admission is closed: no more worker messages are read, pending
        // provider starts are aborted and disposed when they land.
        self.run_token.cancel();
        self.out_open = false;

        if worker_ok {
            // Normal end: strays are paired and the result is due now;
            // then children are disposed and the worker (which exits on
            // its own after End) is reaped. `dispose()` waits for that.
            self.emit_stray_ends();
            self.publish(result);
            self.dispose_children().await;
            self.reap_worker(false, true).await;
        } else {
            // Death, grace or force: the result is due now.
            for live in self.live.values() {
                live.child.cancel();
            }
            self.emit_stray_ends();
            self.publish(result);
            self.reap_worker(forced, false).await;
            self.dispose_children().await;
        }
        self.finish_tasks().await;
        let _ = self.done_tx.send(true);
    }

    /// `agent-end` (cancelled) for every child still on the ledger, in seq
    /// order, so every `agent-start` is paired before `workflow/end`.
    fn emit_stray_ends(&self) {
        let mut ids: Vec<CallId> = self.live.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(live) = self.live.get(&id) {
                self.emit_end(id, live, AgentOutcomeKind::Cancelled, None, None);
            }
        }
    }

    fn publish(&self, result: RunResult) {
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
        for (_, live) in self.live.drain() {
            live.child.cancel();
            let child = live.child;
            disposals.spawn(async move { child.dispose().await });
        }
        // Starts still in flight: their results arrive on the internal
        // channel; a child that starts now is disposed, never announced.
        while !self.pending.is_empty() {
            match tokio::time::timeout_at(deadline, self.internal_rx.recv()).await {
                Ok(Some(Internal::Started { call_id, res })) => {
                    self.pending.remove(&call_id);
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

    async fn reap_worker(&mut self, forced: bool, graceful_exit_expected: bool) {
        if graceful_exit_expected {
            // It said End and is about to exit by itself.
            if tokio::time::timeout(self.limits.dispose_grace, self.proc.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        if forced {
            self.proc.kill(libc::SIGKILL).await;
        } else {
            self.proc.terminate().await;
        }
    }

    async fn finish_tasks(&mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        // Frames queued before the settle still go out, bounded.
        let out = std::mem::take(&mut self.out);
        let writer = &mut self.writer;
        let flushed = tokio::time::timeout(DRAIN_TIMEOUT, async {
            if !out.is_empty() {
                writer.write_all(&out).await?;
            }
            writer.shutdown().await
        })
        .await;
        if !matches!(flushed, Ok(Ok(()))) {
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

/// Applies the schema rules every provider gets for free: text answers to
/// schema calls are parsed and validated, structured answers are validated,
/// a structured answer to a plain call becomes its JSON text.
fn normalize(schema: Option<&Value>, result: ChildResult) -> (WireOutcome, AgentOutcomeKind) {
    let checked = |v: Value, schema: &Value| -> (WireOutcome, AgentOutcomeKind) {
        let problems = schema::validate(schema, &v, "value");
        if problems.is_empty() {
            (
                WireOutcome::Structured(v.to_string()),
                AgentOutcomeKind::Completed,
            )
        } else {
            let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            (
                WireOutcome::Failed(format!(
                    "the structured answer does not match the schema: {}",
                    list.join("; ")
                )),
                AgentOutcomeKind::Failed,
            )
        }
    };
    match (result, schema) {
        (ChildResult::Text(t), Some(s)) => match serde_json::from_str::<Value>(&t) {
            Ok(v) => checked(v, s),
            Err(e) => (
                WireOutcome::Failed(format!(
                    "the answer is not the JSON the schema asks for: {e}"
                )),
                AgentOutcomeKind::Failed,
            ),
        },
        (ChildResult::Text(t), None) => (WireOutcome::Text(t), AgentOutcomeKind::Completed),
        (ChildResult::Structured(v), Some(s)) => checked(v, s),
        (ChildResult::Structured(v), None) => (
            WireOutcome::Text(v.to_string()),
            AgentOutcomeKind::Completed,
        ),
        (ChildResult::Failed(r), _) => (WireOutcome::Failed(r), AgentOutcomeKind::Failed),
        (ChildResult::Cancelled, _) => (WireOutcome::Cancelled, AgentOutcomeKind::Cancelled),
    }
}

fn msg_name(msg: &WorkerMsg) -> &'static str {
    match msg {
        WorkerMsg::Hello { .. } => "Hello",
        WorkerMsg::Ready { .. } => "Ready",
        WorkerMsg::Phase { .. } => "Phase",
        WorkerMsg::Log { .. } => "Log",
        WorkerMsg::ChildStart { .. } => "ChildStart",
        WorkerMsg::End { .. } => "End",
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

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits until the socket can take more, or forever when nothing waits.
async fn writable(w: &OwnedWriteHalf, pending: bool) -> std::io::Result<()> {
    if pending {
        w.writable().await
    } else {
        std::future::pending().await
    }
}

/// The worker's stderr goes to the host's tracing, drained continuously so
/// a chatty worker never blocks on a full pipe. Lines are cut at
/// [`STDERR_LINE_MAX`] bytes, so a worker cannot make the host buffer an
/// unbounded line.
async fn drain_stderr(mut stderr: tokio::process::ChildStderr, run_id: Arc<str>) {
    let mut chunk = [0u8; 4096];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                tracing::debug!(target: "dsh::worker", run = %run_id, "{}", String::from_utf8_lossy(&line));
                line.clear();
            } else if line.len() < STDERR_LINE_MAX {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        tracing::debug!(target: "dsh::worker", run = %run_id, "{}", String::from_utf8_lossy(&line));
    }
}

const STDERR_LINE_MAX: usize = 4096;
