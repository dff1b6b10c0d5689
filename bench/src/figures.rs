//! The dsh side of every figure: one sample per call, measured through the
//! public library API (`start` → `WorkflowRun`) or the `dsh` CLI.
//!
//! Every wait that is not the thing measured is bounded, and every sample
//! checks its run's result, so a broken run fails the bench instead of
//! producing a fast-looking number.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use dsh_orchestrator::{
    EventKind, Limits, RunResult, SandboxPolicy, SandboxReport, StartRequest, StopReason,
    SubagentProvider, WorkerCommand, WorkerSource, WorkflowRun, start,
};
use serde_json::json;

use crate::machine::{ProcMemory, heap_in_use_kib, proc_memory, self_rss_kib};
use crate::provider::{CallClock, InstantProvider};

/// Upper bound for anything the bench waits on that is not measured.
const BOUND: Duration = Duration::from_secs(60);

macro_rules! meta {
    () => {
        "export const meta = { name: \"bench\", description: \"benchmark workflow\" };\n"
    };
}

/// The trivial script, as a user would write it (meta included).
pub const TRIVIAL: &str = concat!(meta!(), "return 1;\n");
const FANOUT: &str = concat!(
    meta!(),
    "const r = await parallel(Array.from({ length: 200 }, (_, i) => () => agent(`item ${i}`)));\n",
    "return r.filter(Boolean).length;\n"
);
pub const SEQ_CALLS: u64 = 1000;
const SEQ: &str = concat!(
    meta!(),
    "for (let i = 0; i < 1000; i++) await agent(`q ${i}`);\n",
    "return 1000;\n"
);
pub const LANES: u64 = 16;
pub const PER_LANE: u64 = 250;
const OUTSTANDING: &str = concat!(
    meta!(),
    "const lanes = await parallel(Array.from({ length: 16 }, (_, l) => async () => {\n",
    "  for (let i = 0; i < 250; i++) await agent(`q ${l} ${i}`);\n",
    "  return 1;\n",
    "}));\n",
    "return lanes.filter(Boolean).length;\n"
);
const HOLD: &str = concat!(meta!(), "await agent(\"hold\");\nreturn 0;\n");
const SPIN: &str = concat!(meta!(), "await agent(\"x\");\nwhile (true) {}\n");

/// Live idle workers per memory sample (the peer uses the same number).
pub const IDLE_WORKERS: usize = 20;
/// Runs started at once in the burst figure.
pub const BURST: usize = 100;
/// The grace of the SIGSTOP figure (settled by the grace kill).
pub const STOPPED_GRACE: Duration = Duration::from_millis(250);

pub struct Ctx {
    pub dsh: PathBuf,
    pub worker: WorkerCommand,
    pub provider: Arc<dyn SubagentProvider>,
    /// Holds `trivial.ts` for the CLI figure (and its `.dsh/runs/`).
    pub cli_dir: PathBuf,
}

impl Ctx {
    pub fn new(dsh: &Path, cli_dir: &Path) -> Result<Ctx> {
        std::fs::write(cli_dir.join("trivial.ts"), TRIVIAL)?;
        Ok(Ctx {
            dsh: dsh.to_path_buf(),
            worker: WorkerCommand::dsh(dsh),
            provider: Arc::new(InstantProvider::new()),
            cli_dir: cli_dir.to_path_buf(),
        })
    }

    fn request(&self, source: &str) -> StartRequest {
        StartRequest::new("bench.ts", source)
            .with_provider(self.provider.clone())
            .with_worker(self.worker.clone())
    }
}

/// Limits that allow the 4000 calls of the 16-outstanding figure.
fn many_calls() -> Limits {
    Limits {
        max_total_agents: 100_000,
        max_total_agents_ceiling: 100_000,
        ..Limits::default()
    }
}

async fn bounded_result(run: &WorkflowRun, what: &str) -> Result<RunResult> {
    tokio::time::timeout(BOUND, run.result())
        .await
        .map_err(|_| anyhow!("{what}: no result within {BOUND:?}"))
}

fn expect_value(r: &RunResult, want: serde_json::Value, what: &str) -> Result<()> {
    if !r.is_completed() || r.value != want {
        bail!("{what}: expected completed {want}, got {}", r.to_json());
    }
    Ok(())
}

/// Waits (bounded) until the run emits an event that satisfies `pred`.
async fn wait_event(
    run: &WorkflowRun,
    what: &str,
    pred: impl Fn(&EventKind) -> bool,
) -> Result<()> {
    let mut events = run.subscribe();
    let found = tokio::time::timeout(BOUND, async {
        while let Some(e) = events.next().await {
            if pred(&e.kind) {
                return true;
            }
        }
        false
    })
    .await;
    match found {
        Ok(true) => Ok(()),
        Ok(false) => {
            let r = run.try_result().map(|r| r.to_json());
            bail!("{what}: the run ended first: {r:?}")
        }
        Err(_) => bail!("{what}: not seen within {BOUND:?}"),
    }
}

fn is_agent_start(kind: &EventKind) -> bool {
    matches!(kind, EventKind::AgentStart { .. })
}

fn is_first_agent_end(kind: &EventKind) -> bool {
    matches!(kind, EventKind::AgentEnd { seq: 1, .. })
}

/// One trivial run: `(start → result, start → disposed and reaped)`, and
/// the sandbox the worker reached.
pub async fn trivial(ctx: &Ctx) -> Result<(Duration, Duration, Option<SandboxReport>)> {
    trivial_with(ctx, SandboxPolicy::BestEffort).await
}

/// [`trivial`] with a given sandbox policy (the breakdown runs it `off`).
pub async fn trivial_with(
    ctx: &Ctx,
    sandbox: SandboxPolicy,
) -> Result<(Duration, Duration, Option<SandboxReport>)> {
    let req = ctx.request(TRIVIAL).with_sandbox(sandbox);
    let t = Instant::now();
    let run = start(req)?;
    let r = bounded_result(&run, "trivial").await?;
    let to_result = t.elapsed();
    run.dispose().await;
    let to_reaped = t.elapsed();
    expect_value(&r, json!(1), "trivial")?;
    Ok((to_result, to_reaped, r.sandbox))
}

/// The host-side preparation alone (parse, strip types, meta) of the
/// trivial script, as `start()` does it.
pub fn prepare(ctx: &Ctx) -> Result<Duration> {
    let req = ctx.request(TRIVIAL);
    let t = Instant::now();
    dsh_orchestrator::prepare(&req)?;
    Ok(t.elapsed())
}

/// Spawn + wait of `dsh --version`: what exec'ing the dsh binary (dynamic
/// linking, runtime start-up) costs before the worker does anything.
pub fn exec_dsh(ctx: &Ctx) -> Result<Duration> {
    let mut cmd = Command::new(&ctx.dsh);
    cmd.arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let t = Instant::now();
    let status = tokio::task::block_in_place(|| cmd.status()).context("running dsh --version")?;
    let elapsed = t.elapsed();
    if !status.success() {
        bail!("dsh --version: {status}");
    }
    Ok(elapsed)
}

/// How the burst's runs get their workers.
pub enum Workers {
    /// As a host that asks for nothing: the default, which forks from the
    /// fork server overlapping runs share.
    Default,
    /// Every worker spawned (`WorkerSource::Spawn`).
    Spawned,
}

/// 100 runs started at once → every result.
pub async fn burst(ctx: &Ctx, workers: Workers) -> Result<Duration> {
    let reqs: Vec<StartRequest> = (0..BURST)
        .map(|_| {
            let req = ctx.request(TRIVIAL);
            match workers {
                Workers::Default => req,
                Workers::Spawned => req.with_worker_source(WorkerSource::Spawn(ctx.worker.clone())),
            }
        })
        .collect();
    let t = Instant::now();
    let runs = reqs
        .into_iter()
        .map(start)
        .collect::<Result<Vec<_>, _>>()
        .context("starting 100 runs")?;
    let mut results = Vec::with_capacity(BURST);
    for run in &runs {
        results.push(bounded_result(run, "burst").await?);
    }
    let elapsed = t.elapsed();
    for run in &runs {
        run.dispose().await;
    }
    for r in &results {
        expect_value(r, json!(1), "burst")?;
    }
    Ok(elapsed)
}

/// A 200-agent `parallel()` fan-out: start → result.
pub async fn fanout(ctx: &Ctx) -> Result<Duration> {
    let req = ctx.request(FANOUT);
    let t = Instant::now();
    let run = start(req)?;
    let r = bounded_result(&run, "fanout").await?;
    let elapsed = t.elapsed();
    run.dispose().await;
    expect_value(&r, json!(200), "fanout")?;
    Ok(elapsed)
}

/// Runs `source` with a clocked provider; returns the calls and their span.
async fn clocked(ctx: &Ctx, source: &str, want: u64, what: &str) -> Result<(u64, Duration)> {
    let clock = Arc::new(CallClock::default());
    let req = ctx
        .request(source)
        .with_provider(Arc::new(InstantProvider::with_clock(clock.clone())))
        .with_limits(many_calls());
    let run = start(req)?;
    let r = bounded_result(&run, what).await?;
    run.dispose().await;
    expect_value(&r, json!(want), what)?;
    Ok(clock.span())
}

/// 1000 sequential `agent()` calls: µs per round trip, from the first
/// call's arrival at the provider to the last's, / (calls − 1).
pub async fn agent_seq(ctx: &Ctx) -> Result<f64> {
    let (calls, span) = clocked(ctx, SEQ, SEQ_CALLS, "agent_seq").await?;
    if calls != SEQ_CALLS {
        bail!("agent_seq: {calls} calls");
    }
    Ok(span.as_secs_f64() * 1e6 / (calls - 1) as f64)
}

/// 16 lanes × 250 sequential calls (16 outstanding): calls per second.
pub async fn agent16(ctx: &Ctx) -> Result<f64> {
    let (calls, span) = clocked(ctx, OUTSTANDING, LANES, "agent16").await?;
    if calls != LANES * PER_LANE {
        bail!("agent16: {calls} calls");
    }
    Ok((calls - 1) as f64 / span.as_secs_f64())
}

/// One memory sample: 20 live workers, each idle in `await agent()`.
pub struct MemorySample {
    pub workers: Vec<ProcMemory>,
    /// The host's (this process's) heap growth per live run, in KiB (RSS
    /// growth where the heap cannot be read).
    pub host_kib_per_run: f64,
}

/// What the host holds: heap in use where glibc tells, else the RSS.
fn host_kib() -> Result<f64> {
    match heap_in_use_kib() {
        Some(k) => Ok(k),
        None => self_rss_kib(),
    }
}

pub async fn memory(ctx: &Ctx) -> Result<MemorySample> {
    let host0 = host_kib()?;
    // Spawned workers, each a process of its own: a forked worker's PSS
    // would leave out the share of the server it was forked from.
    let runs = (0..IDLE_WORKERS)
        .map(|_| {
            start(
                ctx.request(HOLD)
                    .with_worker_source(WorkerSource::Spawn(ctx.worker.clone())),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for run in &runs {
        wait_event(run, "memory: the held agent() call", is_agent_start).await?;
    }
    // The same settling pause the peer takes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let host1 = host_kib()?;
    let workers = runs
        .iter()
        .map(|r| proc_memory(r.worker_pid()))
        .collect::<Result<Vec<_>>>()?;
    for run in &runs {
        run.cancel("benchmark");
    }
    for run in &runs {
        run.dispose().await;
    }
    Ok(MemorySample {
        workers,
        host_kib_per_run: (host1 - host0) / IDLE_WORKERS as f64,
    })
}

/// A run whose child never answers: cancel → result.
pub async fn cancel_hang(ctx: &Ctx) -> Result<Duration> {
    let run = start(ctx.request(HOLD))?;
    wait_event(&run, "cancel_hang: the held call", is_agent_start).await?;
    let t = Instant::now();
    run.cancel("benchmark");
    let r = bounded_result(&run, "cancel_hang").await?;
    let elapsed = t.elapsed();
    run.dispose().await;
    if r.stop_reason != StopReason::Cancelled {
        bail!("cancel_hang: expected cancelled, got {}", r.to_json());
    }
    Ok(elapsed)
}

/// A script spinning in `while (true) {}` after an await: cancel → result,
/// with the default limits. `killed` is true when the run was not settled
/// by the worker's interrupt before the grace expired (the kill path).
pub struct SpinSample {
    pub elapsed: Duration,
    pub killed: bool,
}

pub async fn cancel_spin(ctx: &Ctx) -> Result<SpinSample> {
    let req = ctx.request(SPIN);
    let grace = req.limits.dispose_grace;
    let run = start(req)?;
    wait_event(&run, "cancel_spin: the answered call", is_first_agent_end).await?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let t = Instant::now();
    run.cancel("benchmark");
    let r = bounded_result(&run, "cancel_spin").await?;
    let elapsed = t.elapsed();
    run.dispose().await;
    if r.stop_reason != StopReason::Cancelled {
        bail!("cancel_spin: expected cancelled, got {}", r.to_json());
    }
    Ok(SpinSample {
        elapsed,
        killed: elapsed >= grace,
    })
}

/// A script whose worker is SIGSTOPped (nothing in it can run the
/// interrupt), then cancelled: `(cancel → result, cancel → reaped)`, with a
/// grace of [`STOPPED_GRACE`].
pub async fn cancel_stopped(ctx: &Ctx) -> Result<(Duration, Duration)> {
    let req = ctx.request(SPIN).with_limits(Limits {
        dispose_grace: STOPPED_GRACE,
        ..Limits::default()
    });
    let run = start(req)?;
    wait_event(
        &run,
        "cancel_stopped: the answered call",
        is_first_agent_end,
    )
    .await?;
    let pid = libc::pid_t::try_from(run.worker_pid()).context("worker pid")?;
    // SAFETY: kill has no memory-safety preconditions; the pid is the live,
    // unreaped worker of this run (it cannot settle before we cancel it).
    if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
        bail!(
            "cancel_stopped: SIGSTOP: {}",
            std::io::Error::last_os_error()
        );
    }
    let t = Instant::now();
    run.cancel("benchmark");
    let r = bounded_result(&run, "cancel_stopped").await?;
    let to_result = t.elapsed();
    run.dispose().await;
    let to_reaped = t.elapsed();
    if r.stop_reason != StopReason::Cancelled {
        bail!("cancel_stopped: expected cancelled, got {}", r.to_json());
    }
    if !run.is_quiescent() {
        bail!("cancel_stopped: the run was not quiescent after dispose()");
    }
    Ok((to_result, to_reaped))
}

/// Wall time of a whole `dsh workflow run trivial.ts` process (stdout and
/// stderr piped and checked); `journal: false` adds `--no-journal`.
pub fn cli(ctx: &Ctx, journal: bool) -> Result<Duration> {
    let mut cmd = Command::new(&ctx.dsh);
    cmd.args(["workflow", "run", "trivial.ts"])
        .current_dir(&ctx.cli_dir)
        .env_remove("DSH_WORKER")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    if !journal {
        cmd.arg("--no-journal");
    }
    let t = Instant::now();
    let out = tokio::task::block_in_place(|| cmd.output()).context("running dsh")?;
    let elapsed = t.elapsed();
    if !out.status.success() || out.stdout != b"1\n" {
        bail!(
            "dsh workflow run trivial.ts: {} stdout {:?} stderr {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(elapsed)
}
