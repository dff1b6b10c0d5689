//! `dsh-bench`: the benchmark suite of dsh workflow.
//!
//! Measures dsh through its public library API (`start` → `WorkflowRun`)
//! and its CLI, and — when `node` is on the PATH — the Node peer in
//! `bench/peers/node-worker/` (the per-run mechanics of the engine dsh
//! replaced) in the same invocation, interleaved sample by sample
//! (dsh, node, dsh, node …) so machine noise hits both alike. Prints, per
//! figure, median, p10, p90 and n for both, the ratio, and the targets of
//! the performance issue with met / not met.
//!
//! Run it with `bench/run` (builds the release `dsh` and this bench first);
//! see docs/performance.md.
//!
//! Over 500 lines because it holds one short function per figure group, beside the `GROUPS` table that orders them.

mod ccpeer;
mod cheap;
mod figures;
mod machine;
mod model_server;
mod peer;
mod provider;
mod report;
mod stats;
mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use dsh_orchestrator::SandboxPolicy;

use figures::{Ctx, Workers};
use machine::{Baseline, Machine};
use peer::NodePeer;
use report::{Figure, Kind, Report, Target, num};
use stats::Stats;

/// The figure groups, in the order they run.
const GROUPS: &[(&str, &str)] = &[
    (
        "trivial",
        "trivial run start → result, sequential (+ the static-binary baseline)",
    ),
    (
        "breakdown",
        "where a trivial run's time goes: sandbox off, host-side prepare, exec of dsh",
    ),
    ("burst100", "100 runs started at once → all results"),
    ("fanout200", "a 200-agent parallel() fan-out"),
    ("agent_seq", "sequential agent() round trip"),
    ("agent16", "agent() with 16 outstanding (calls/s)"),
    ("memory", "memory per live idle worker"),
    ("cancel_hang", "cancel → settled, the child hangs"),
    (
        "cancel_spin",
        "cancel → settled, the script spins after an await",
    ),
    (
        "cancel_stopped",
        "cancel → settled, the worker is SIGSTOPped (grace kill)",
    ),
    ("cli", "whole-process `dsh workflow run trivial.ts`"),
    (
        "cc_fanout50",
        "a 50-agent fan-out beside Claude Code's own Workflow runtime (offline)",
    ),
    (
        "cache16",
        "16 calls sharing a 20 KB preamble: cached input tokens, prefix holds on vs off",
    ),
    (
        "ratelimit200",
        "200 calls under a rate limit: adaptive vs fixed concurrency",
    ),
    (
        "store_hosts",
        "calls/s through the PostgreSQL store with 1, 2 and 4 hosts (needs --store)",
    ),
    (
        "store_call",
        "what the store adds to each agent call over the file journal (needs --store)",
    ),
    (
        "store_failover",
        "a host's kill -9 → its runs making progress on another host (needs --store)",
    ),
    (
        "store_pool",
        "agent calls answered by agent hosts: calls/s with 1, 2 and 4, and the cost per call (needs --store)",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Markdown,
    Json,
}

/// The dsh workflow benchmark (see docs/performance.md).
#[derive(Debug, Parser)]
#[command(name = "dsh-bench")]
struct Args {
    /// Few iterations per figure: a quick look, not figures to quote.
    #[arg(long)]
    quick: bool,
    /// Iterations for every figure (overrides the per-figure defaults).
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,
    /// Only these figure groups (comma-separated; see --list).
    #[arg(long, value_name = "GROUP,...", value_delimiter = ',')]
    only: Vec<String>,
    /// List the figure groups and exit.
    #[arg(long)]
    list: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Shorthand for --format json.
    #[arg(long)]
    json: bool,
    /// Do not run the Node peer even when `node` is on the PATH.
    #[arg(long)]
    no_peer: bool,
    /// The `dsh` binary used as the worker and for the CLI figure
    /// (default: `dsh` next to this executable).
    #[arg(long, value_name = "PATH")]
    dsh: Option<PathBuf>,
    /// The Node peer's directory (default: bench/peers/node-worker).
    #[arg(long, value_name = "DIR")]
    peer_dir: Option<PathBuf>,
    /// A PostgreSQL URL whose role may create databases, for the store's
    /// figures (or DSH_BENCH_STORE); without it they are not measured.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
}

/// Default iterations (full, quick) and warm-up samples per group.
fn counts(group: &str) -> (usize, usize, usize) {
    match group {
        "trivial" | "breakdown" => (100, 5, 3),
        "burst100" => (10, 2, 1),
        "fanout200" => (30, 3, 2),
        "agent_seq" | "agent16" => (20, 3, 2),
        "memory" => (5, 1, 1),
        "cancel_hang" => (30, 3, 2),
        "cancel_spin" => (20, 3, 1),
        "cancel_stopped" => (10, 2, 1),
        "cli" => (50, 5, 3),
        "cache16" => (5, 1, 1),
        "cc_fanout50" => (5, 1, 1),
        "ratelimit200" => (3, 1, 0),
        "store_hosts" | "store_failover" | "store_pool" => (3, 1, 0),
        "store_call" => (5, 1, 1),
        _ => (10, 2, 1),
    }
}

/// The store's scaling target: `hosts` of `what` give at least 0.8 ×
/// `hosts` × one's calls/s (`one`, the one-host median).
fn scales(f: &Figure, one: Option<f64>, hosts: usize, what: &str) -> Target {
    let want = one.map(|o| o * 0.8 * hosts as f64);
    Target {
        text: format!("≥ 0.8 × {hosts} × one {what}'s calls/s"),
        met: f.dsh.as_ref().zip(want).map(|(s, w)| s.median >= w),
        detail: match (&f.dsh, want) {
            (Some(s), Some(w)) => format!("{} calls/s, the target {}", num(s.median), num(w)),
            _ => "not measured".into(),
        },
    }
}

/// The `q` quantile of `v` (sorted here), nearest rank.
fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.list {
        for (id, what) in GROUPS {
            println!("{id:<15} {what}");
        }
        return Ok(());
    }
    for g in &args.only {
        if !GROUPS.iter().any(|(id, _)| id == g) {
            bail!("unknown figure group {g:?}; known: {}", group_ids());
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let format = if args.json { Format::Json } else { args.format };
    let report = runtime.block_on(run(&args))?;
    match format {
        Format::Text => print!("{}", report.text()),
        Format::Markdown => print!("{}", report.markdown()),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report.json())?),
    }
    Ok(())
}

fn group_ids() -> String {
    GROUPS
        .iter()
        .map(|(id, _)| *id)
        .collect::<Vec<_>>()
        .join(", ")
}

struct Bench<'a> {
    args: &'a Args,
    ctx: Arc<Ctx>,
    peer: Option<NodePeer>,
    baseline: Baseline,
    sandbox: Option<String>,
    figures: Vec<Figure>,
}

impl Bench<'_> {
    fn selected(&self, group: &str) -> bool {
        self.args.only.is_empty() || self.args.only.iter().any(|g| g == group)
    }

    /// `(iterations, warm-up)` for a group.
    fn n(&self, group: &str) -> (usize, usize) {
        let (full, quick, warm) = counts(group);
        let n = self
            .args
            .iterations
            .unwrap_or(if self.args.quick { quick } else { full });
        (n.max(1), if self.args.quick { 1 } else { warm })
    }

    fn peer_on(&self) -> bool {
        self.peer.is_some()
    }

    fn push(&mut self, f: Figure) {
        self.figures.push(f);
    }
}

async fn run(args: &Args) -> Result<Report> {
    let dsh = match &args.dsh {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the bench executable has no directory")?
            .join("dsh"),
    };
    if !dsh.is_file() {
        bail!(
            "the dsh binary is missing at {}; build it with `cargo build --release -p dsh` \
             (bench/run does), or pass --dsh PATH",
            dsh.display()
        );
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let repo = manifest.parent().unwrap_or(&manifest).to_path_buf();
    let peer_dir = args
        .peer_dir
        .clone()
        .unwrap_or_else(|| manifest.join("peers").join("node-worker"));

    let machine = Machine::read(&repo);
    let tmp = tempfile::Builder::new().prefix("dsh-bench-").tempdir()?;
    let baseline = Baseline::prepare(tmp.path())?;
    let ctx = Arc::new(Ctx::new(&dsh, tmp.path())?);
    let peer = if args.no_peer {
        None
    } else {
        NodePeer::start(&peer_dir).await?
    };
    let peer_version = peer.as_ref().map(|p| p.version.clone());
    let mut bench = Bench {
        args,
        ctx,
        peer,
        baseline,
        sandbox: None,
        figures: Vec::new(),
    };

    let total = run_groups(&mut bench, &repo, tmp.path()).await?;
    if let Some(p) = bench.peer.take() {
        p.close().await;
    }
    evaluate_targets(&mut bench.figures);

    Ok(report(
        args,
        &machine,
        &dsh,
        &peer_dir,
        peer_version,
        bench,
        total,
    ))
}

/// Runs the selected groups in order, saying on stderr what each is and
/// how long it took; the time they took together.
async fn run_groups(
    bench: &mut Bench<'_>,
    repo: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<Duration> {
    let started = Instant::now();
    for (group, what) in GROUPS {
        if !bench.selected(group) {
            continue;
        }
        let (n, warm) = bench.n(group);
        eprintln!(
            "dsh-bench: {group} — {what}: {n} iterations{}",
            if bench.peer_on()
                && !matches!(*group, "cancel_stopped" | "breakdown")
                && !group.starts_with("store")
            {
                ", interleaved with node"
            } else {
                ""
            }
        );
        let t = Instant::now();
        match *group {
            "trivial" => trivial(bench, n, warm).await?,
            "breakdown" => breakdown(bench, n, warm).await?,
            "burst100" => burst(bench, n, warm).await?,
            "fanout200" => fanout(bench, n, warm).await?,
            "agent_seq" => agent_seq(bench, n, warm).await?,
            "agent16" => agent16(bench, n, warm).await?,
            "memory" => memory(bench, n, warm).await?,
            "cancel_hang" => cancel_hang(bench, n, warm).await?,
            "cancel_spin" => cancel_spin(bench, n, warm).await?,
            "cancel_stopped" => cancel_stopped(bench, n, warm).await?,
            "cli" => cli(bench, n, warm).await?,
            "cache16" => cache16(bench, n, warm).await?,
            "cc_fanout50" => cc_fanout50(bench, n, warm, repo, scratch).await?,
            "ratelimit200" => ratelimit200(bench, n, warm).await?,
            "store_hosts" | "store_call" | "store_failover" | "store_pool" => {
                store_figures(bench, group, n, warm).await?;
            }
            _ => {}
        }
        eprintln!(
            "dsh-bench: {group} done in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(started.elapsed())
}

/// The report: the machine, the versions and the run's settings, as lines
/// and as JSON, and the figures.
fn report(
    args: &Args,
    machine: &Machine,
    dsh: &std::path::Path,
    peer_dir: &std::path::Path,
    peer_version: Option<String>,
    bench: Bench<'_>,
    total: Duration,
) -> Report {
    let load_after = machine::load_average();
    let mut header = vec![
        (
            "machine".to_string(),
            format!(
                "{}, {} cores, {}, {} RAM",
                machine.cpu, machine.cores, machine.kernel, machine.mem_total
            ),
        ),
        (
            "load average (1/5/15 min)".into(),
            format!("{} before, {load_after} after", machine.load_before),
        ),
        (
            "dsh".into(),
            format!(
                "{} (commit {}){}",
                dsh.display(),
                machine.dsh_commit.as_deref().unwrap_or("unknown"),
                if cfg!(debug_assertions) {
                    " — WARNING: dsh-bench is a debug build; use bench/run"
                } else {
                    ""
                }
            ),
        ),
        (
            "worker sandbox".into(),
            bench
                .sandbox
                .clone()
                .unwrap_or_else(|| "not observed (no trivial run in this invocation)".into()),
        ),
        (
            "node peer".into(),
            match (&peer_version, args.no_peer) {
                (Some(v), _) => format!("node {v}, {}", peer_dir.display()),
                (None, true) => "not run (--no-peer)".into(),
                (None, false) => "not run: `node` is not on the PATH".into(),
            },
        ),
        ("baseline".into(), bench.baseline.description.clone()),
        (
            "run".into(),
            format!(
                "{}{}; {:.0} s",
                if args.quick { "--quick" } else { "full" },
                args.iterations
                    .map(|n| format!(", --iterations {n}"))
                    .unwrap_or_default(),
                total.as_secs_f64()
            ),
        ),
    ];
    if !args.only.is_empty() {
        header.push(("only".into(), args.only.join(", ")));
    }
    let mut header_json = machine.to_json();
    if let Some(obj) = header_json.as_object_mut() {
        obj.insert("loadAfter".into(), load_after.into());
        obj.insert("node".into(), peer_version.into());
        obj.insert("sandbox".into(), bench.sandbox.clone().into());
        obj.insert("baseline".into(), bench.baseline.description.clone().into());
        obj.insert("quick".into(), args.quick.into());
        obj.insert("seconds".into(), total.as_secs_f64().into());
    }
    Report {
        header,
        figures: bench.figures,
        header_json,
    }
}

/// Collects one side's samples, skipping the warm-up ones.
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn add(&mut self, i: usize, warm: usize, x: f64) {
        if i >= warm {
            self.0.push(x);
        }
    }
    fn stats(&self) -> Option<Stats> {
        Stats::of(&self.0)
    }
}

async fn trivial(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let mut res = Samples::default();
    let mut reap = Samples::default();
    let mut base = Samples::default();
    let mut p_res = Samples::default();
    let mut p_reap = Samples::default();
    for i in 0..warm + n {
        let (to_result, to_reaped, sandbox) = figures::trivial(&b.ctx).await?;
        res.add(i, warm, ms(to_result));
        reap.add(i, warm, ms(to_reaped));
        if b.sandbox.is_none() {
            b.sandbox = sandbox.map(|s| {
                format!(
                    "{:?}{}",
                    s.level,
                    s.landlock_abi
                        .map(|a| format!(" (Landlock ABI {a})"))
                        .unwrap_or_default()
                )
                .to_lowercase()
            });
        }
        base.add(i, warm, ms(b.baseline.sample()?));
        if let Some(p) = b.peer.as_mut() {
            let s = p.sample("trivial").await?;
            let get = |k: &str| s[k].as_f64().context("node trivial sample");
            p_res.add(i, warm, get("ms")?);
            p_reap.add(i, warm, get("reaped_ms")?);
        }
    }
    let mut f = Figure::new(
        "baseline",
        "spawn + wait of a small static binary (measured in the same run)",
        "ms",
        Kind::Time,
    );
    f.side = "baseline";
    f.dsh = base.stats();
    f.notes.push(b.baseline.description.clone());
    b.push(f);

    let mut f = Figure::new(
        "trivial",
        "trivial run (`return 1`) start → result, sequential, library API",
        "ms",
        Kind::Time,
    );
    f.dsh = res.stats();
    f.peer = p_res.stats();
    f.peer_note = Some("new Worker → result".into());
    b.push(f);

    let mut f = Figure::new(
        "trivial_reaped",
        "trivial run start → disposed (worker exited and reaped)",
        "ms",
        Kind::Time,
    );
    f.dsh = reap.stats();
    f.peer = p_reap.stats();
    f.peer_note = Some("new Worker → worker.terminate() resolved".into());
    b.push(f);
    Ok(())
}

async fn breakdown(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (mut off, mut prep, mut exec) =
        (Samples::default(), Samples::default(), Samples::default());
    for i in 0..warm + n {
        let (to_result, _, _) = figures::trivial_with(&b.ctx, SandboxPolicy::Off).await?;
        off.add(i, warm, ms(to_result));
        prep.add(i, warm, ms(figures::prepare(&b.ctx)?));
        exec.add(i, warm, ms(figures::exec_dsh(&b.ctx)?));
    }
    let mut f = Figure::new(
        "trivial_sandbox_off",
        "trivial run start → result with `--sandbox off` (breakdown, not a target)",
        "ms",
        Kind::Time,
    );
    f.dsh = off.stats();
    f.notes.push(
        "the difference from `trivial` is what applying the sandbox (rlimits, Landlock, \
         seccomp, capabilities) costs per run"
            .into(),
    );
    b.push(f);
    let mut f = Figure::new(
        "prepare",
        "host-side prepare of the trivial script: parse, strip types, meta (breakdown)",
        "ms",
        Kind::Time,
    );
    f.dsh = prep.stats();
    b.push(f);
    let mut f = Figure::new(
        "exec_dsh",
        "spawn + wait of `dsh --version` (breakdown: exec of the dsh binary)",
        "ms",
        Kind::Time,
    );
    f.dsh = exec.stats();
    f.notes.push(
        "compare with `baseline`: the extra is the dynamic linking and start-up of the dsh \
         binary"
            .into(),
    );
    b.push(f);
    Ok(())
}

/// The common shape: one dsh sample, then one node sample of `peer_fig`.
async fn simple<F>(
    b: &mut Bench<'_>,
    n: usize,
    warm: usize,
    mut dsh: impl FnMut(Arc<Ctx>) -> F,
    peer_fig: &str,
    peer_field: &str,
) -> Result<(Option<Stats>, Option<Stats>)>
where
    F: std::future::Future<Output = Result<f64>>,
{
    let (mut d, mut p) = (Samples::default(), Samples::default());
    for i in 0..warm + n {
        d.add(i, warm, dsh(b.ctx.clone()).await?);
        if let Some(peer) = b.peer.as_mut() {
            p.add(i, warm, peer.number(peer_fig, peer_field).await?);
        }
    }
    Ok((d.stats(), p.stats()))
}

async fn burst(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    // Interleaved: the default, spawned workers, the peer.
    let (mut d, mut ds, mut p) = (Samples::default(), Samples::default(), Samples::default());
    for i in 0..warm + n {
        d.add(i, warm, ms(figures::burst(&b.ctx, Workers::Default).await?));
        ds.add(i, warm, ms(figures::burst(&b.ctx, Workers::Spawned).await?));
        if let Some(peer) = b.peer.as_mut() {
            p.add(i, warm, peer.number("burst100", "ms").await?);
        }
    }
    for (id, how, dsh) in [
        (
            "burst100",
            "the default: workers forked from the server overlapping runs share",
            d,
        ),
        (
            "burst100_spawn",
            "every worker spawned, WorkerSource::Spawn",
            ds,
        ),
    ] {
        let mut f = Figure::new(
            id,
            format!(
                "{} runs started at once → all results ({how})",
                figures::BURST
            ),
            "ms",
            Kind::Time,
        );
        f.dsh = dsh.stats();
        f.peer = p.stats();
        f.peer_note = Some("100 × new Worker at once → all results".into());
        b.push(f);
    }
    Ok(())
}

async fn fanout(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (d, p) = simple(
        b,
        n,
        warm,
        |ctx| async move { Ok(ms(figures::fanout(&ctx).await?)) },
        "fanout200",
        "ms",
    )
    .await?;
    let mut f = Figure::new(
        "fanout200",
        "200-agent parallel() fan-out, instant provider, start → result",
        "ms",
        Kind::Time,
    );
    f.dsh = d;
    f.peer = p;
    f.notes
        .push("at most 16 calls outstanding (maxConcurrentAgents), in both".into());
    b.push(f);
    Ok(())
}

async fn agent_seq(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (d, p) = simple(
        b,
        n,
        warm,
        |ctx| async move { figures::agent_seq(&ctx).await },
        "agent_seq",
        "us",
    )
    .await?;
    let mut f = Figure::new(
        "agent_seq",
        "agent() round trip, sequential (per call)",
        "µs",
        Kind::Time,
    );
    f.dsh = d;
    f.peer = p;
    f.notes.push(format!(
        "one sample = one run of {} sequential calls: (last call's arrival − first's) ÷ (calls − 1), \
         timed at the provider",
        figures::SEQ_CALLS
    ));
    b.push(f);
    Ok(())
}

async fn agent16(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (d, p) = simple(
        b,
        n,
        warm,
        |ctx| async move { figures::agent16(&ctx).await },
        "agent16",
        "per_s",
    )
    .await?;
    let mut f = Figure::new(
        "agent16",
        "agent() throughput with 16 outstanding",
        "calls/s",
        Kind::Rate,
    );
    f.dsh = d;
    f.peer = p;
    f.notes.push(format!(
        "one sample = one run of {} lanes × {} sequential calls; (calls − 1) ÷ (last arrival − first)",
        figures::LANES,
        figures::PER_LANE
    ));
    b.push(f);
    Ok(())
}

// Long because: one sampling loop feeds seven figures, each a flat definition.
async fn memory(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let mut pss = Samples::default();
    let mut rss = Samples::default();
    let mut private = Samples::default();
    let mut host = Samples::default();
    let mut total = Samples::default();
    let mut p_rss = Samples::default();
    for i in 0..warm + n {
        let s = figures::memory(&b.ctx).await?;
        for w in &s.workers {
            pss.add(i, warm, w.pss_kib);
            rss.add(i, warm, w.rss_kib);
            private.add(i, warm, w.private_kib);
        }
        host.add(i, warm, s.host_kib_per_run);
        let batch_pss = Stats::of(&s.workers.iter().map(|w| w.pss_kib).collect::<Vec<_>>())
            .map(|s| s.median)
            .unwrap_or(0.0);
        total.add(i, warm, batch_pss + s.host_kib_per_run);
        if let Some(peer) = b.peer.as_mut() {
            p_rss.add(i, warm, peer.number("memory", "rss_kib").await?);
        }
    }
    let live = figures::IDLE_WORKERS;
    let mut f = Figure::new(
        "memory_pss",
        format!("PSS per live idle worker ({live} alive, each waiting in agent())"),
        "KiB",
        Kind::Memory,
    );
    f.dsh = pss.stats();
    f.peer_note =
        Some("no per-worker PSS (its workers are threads of one process); see memory_rss".into());
    f.notes.push(
        "PSS from /proc/<pid>/smaps_rollup: shared pages (the dsh binary, libc) are split among \
         the processes mapping them"
            .into(),
    );
    b.push(f);

    let mut f = Figure::new(
        "memory_rss",
        format!("RSS per live idle worker ({live} alive)"),
        "KiB",
        Kind::Memory,
    );
    f.dsh = rss.stats();
    f.peer = p_rss.stats();
    f.peer_note = Some(format!(
        "process RSS growth ÷ {live} with {live} idle Workers"
    ));
    f.notes.push(
        "dsh RSS counts every resident page of the worker, shared ones included; the peer's \
         figure is only the growth (the stricter measure is dsh's)"
            .into(),
    );
    b.push(f);

    let mut f = Figure::new(
        "memory_private",
        "private memory (USS) per live idle worker",
        "KiB",
        Kind::Memory,
    );
    f.dsh = private.stats();
    b.push(f);

    let mut f = Figure::new(
        "memory_host",
        "host-side heap growth per live run (this process)",
        "KiB",
        Kind::Memory,
    );
    f.dsh = host.stats();
    f.notes.push(
        "the supervisor, event history and buffers of a run: glibc mallinfo2 heap in use before \
         and after starting the 20 runs, ÷ 20"
            .into(),
    );
    b.push(f);

    let mut f = Figure::new(
        "memory_total",
        "memory one more live run costs: worker PSS + host growth",
        "KiB",
        Kind::Memory,
    );
    f.dsh = total.stats();
    f.peer = p_rss.stats();
    f.peer_note = Some("process RSS growth per idle Worker".into());
    b.push(f);
    Ok(())
}

async fn cancel_hang(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (d, p) = simple(
        b,
        n,
        warm,
        |ctx| async move { Ok(ms(figures::cancel_hang(&ctx).await?)) },
        "cancel_hang",
        "ms",
    )
    .await?;
    let mut f = Figure::new(
        "cancel_hang",
        "cancel → settled, the script waits on a child that never answers",
        "ms",
        Kind::Time,
    );
    f.dsh = d;
    f.peer = p;
    f.peer_note = Some("cancel message on the port → agent() rejects → result".into());
    b.push(f);
    Ok(())
}

async fn cancel_spin(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (mut d, mut p) = (Samples::default(), Samples::default());
    let mut killed = 0;
    for i in 0..warm + n {
        let s = figures::cancel_spin(&b.ctx).await?;
        d.add(i, warm, ms(s.elapsed));
        if i >= warm && s.killed {
            killed += 1;
        }
        if let Some(peer) = b.peer.as_mut() {
            p.add(i, warm, peer.number("cancel_spin", "ms").await?);
        }
    }
    let defaults = dsh_orchestrator::Limits::default();
    let mut f = Figure::new(
        "cancel_spin",
        "cancel → settled, `while (true) {}` after an await (default limits)",
        "ms",
        Kind::Time,
    );
    f.dsh = d.stats();
    f.peer = p.stats();
    f.peer_note = Some("worker.terminate() → resolved".into());
    f.notes.push(format!(
        "{killed} of {n} dsh samples reached the grace kill ({} ms); the rest were stopped by \
         the worker's interrupt, which fires {} ms after the cancel with the default grace",
        defaults.dispose_grace.as_millis(),
        defaults.cancel_interrupt().as_millis()
    ));
    f.targets.push(Target {
        text: "cancel of a spinning script → settled ≤ the Node peer's, no kill".into(),
        met: match (&f.dsh, &f.peer) {
            (Some(d), Some(p)) => Some(d.median <= p.median && killed == 0),
            _ => None,
        },
        detail: match (&f.dsh, &f.peer) {
            (Some(d), Some(p)) => format!(
                "dsh {} ms ÷ node {} ms = {}, {killed} of {n} killed",
                num(d.median),
                num(p.median),
                num(d.median / p.median)
            ),
            (Some(d), None) => format!(
                "median {} ms, {killed} of {n} killed; no node figure",
                num(d.median)
            ),
            _ => "not measured".into(),
        },
    });
    b.push(f);
    Ok(())
}

async fn cancel_stopped(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (mut res, mut reap) = (Samples::default(), Samples::default());
    for i in 0..warm + n {
        let (to_result, to_reaped) = figures::cancel_stopped(&b.ctx).await?;
        res.add(i, warm, ms(to_result));
        reap.add(i, warm, ms(to_reaped));
    }
    let grace = figures::STOPPED_GRACE.as_millis();
    let no_peer = "no equivalent: a Worker thread cannot be stopped on its own".to_string();
    let mut f = Figure::new(
        "cancel_stopped",
        format!("cancel → settled, worker SIGSTOPped (grace {grace} ms, then the kill)"),
        "ms",
        Kind::Time,
    );
    f.dsh = res.stats();
    f.peer_note = Some(no_peer.clone());
    f.notes.push(format!(
        "the result is published when the grace expires; expect ≈ {grace} ms"
    ));
    b.push(f);
    let mut f = Figure::new(
        "cancel_stopped_reaped",
        "cancel → disposed, worker SIGSTOPped (SIGTERM, 200 ms, SIGKILL, reap)",
        "ms",
        Kind::Time,
    );
    f.dsh = reap.stats();
    f.peer_note = Some(no_peer);
    b.push(f);
    Ok(())
}

async fn cli(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (mut d, mut d_nj, mut p) = (Samples::default(), Samples::default(), Samples::default());
    for i in 0..warm + n {
        d.add(i, warm, ms(figures::cli(&b.ctx, true)?));
        d_nj.add(i, warm, ms(figures::cli(&b.ctx, false)?));
        if let Some(peer) = b.peer.as_ref() {
            p.add(i, warm, ms(peer.cli_once()?));
        }
    }
    let mut f = Figure::new(
        "cli_trivial",
        "whole process `dsh workflow run trivial.ts` (journal on, the default)",
        "ms",
        Kind::Time,
    );
    f.dsh = d.stats();
    f.peer = p.stats();
    f.peer_note = Some("whole process `node harness.js cli` (one Worker run)".into());
    b.push(f);
    let mut f = Figure::new(
        "cli_trivial_no_journal",
        "whole process `dsh workflow run trivial.ts --no-journal`",
        "ms",
        Kind::Time,
    );
    f.dsh = d_nj.stats();
    b.push(f);
    Ok(())
}

fn median_of(figs: &[Figure], id: &str, peer: bool) -> Option<f64> {
    let f = figs.iter().find(|f| f.id == id)?;
    let s = if peer { &f.peer } else { &f.dsh };
    s.as_ref().map(|s| s.median)
}

/// The targets, attached to their figures.
async fn cc_fanout50(
    b: &mut Bench<'_>,
    n: usize,
    warm: usize,
    repo: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<()> {
    let mut f = Figure::new(
        "cc_fanout50",
        format!(
            "{}-agent parallel() fan-out, concurrency 16, each agent one HTTP call to a loopback model",
            ccpeer::AGENTS
        ),
        "ms",
        Kind::Time,
    );
    f.peer_side = "claude";
    let peer = ccpeer::CcPeer::find(repo, scratch);
    let (mut d, mut p) = (Samples::default(), Samples::default());
    for i in 0..warm + n {
        d.add(i, warm, ccpeer::dsh_sample(&b.ctx.worker).await?);
        if let Ok(peer) = &peer {
            p.add(i, warm, peer.sample().await?);
        }
    }
    f.dsh = d.stats();
    f.peer = p.stats();
    f.notes.push(
        "dsh: start → result with the openai provider; Claude Code: its own durationMs \
         (../shared/ccref/run_cc_workflow.py, its fake Anthropic server)"
            .into(),
    );
    match &peer {
        Ok(_) => f.peer_note = Some("Claude Code 2.1.332's Workflow runtime, offline".into()),
        Err(why) => f.peer_note = Some(why.to_string()),
    }
    let ratio = f.ratio();
    f.targets.push(Target {
        text: "50-agent fan-out ≤ 1/20 of Claude Code's".into(),
        met: ratio.map(|r| r <= 0.05),
        detail: match (&f.dsh, &f.peer) {
            (Some(d), Some(c)) => format!(
                "dsh {} ms ÷ Claude Code {} ms = {}",
                num(d.median),
                num(c.median),
                num(d.median / c.median)
            ),
            _ => "Claude Code not run".into(),
        },
    });
    b.push(f);
    Ok(())
}

async fn cache16(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    let (mut share, mut share_off, mut added) =
        (Samples::default(), Samples::default(), Samples::default());
    for i in 0..warm + n {
        let (on, wall_on) = cheap::cache16(&b.ctx.worker, true).await?;
        let (off, wall_off) = cheap::cache16(&b.ctx.worker, false).await?;
        share.add(i, warm, on);
        share_off.add(i, warm, off);
        added.add(i, warm, wall_on - wall_off);
    }
    let latency = ms(cheap::CACHE_LATENCY);
    let mut f = Figure::new(
        "cache16",
        "16 calls at once sharing a 20 KB preamble: shareable input tokens served from cache",
        "%",
        Kind::Rate,
    );
    f.dsh = share.stats();
    f.peer = share_off.stats();
    f.peer_side = "baseline";
    f.peer_note = Some("the same run with prefix_hold = 0 (no holds)".into());
    f.targets.push(Target {
        text: "≥ 90% of the shareable tokens cached".into(),
        met: f.dsh.as_ref().map(|s| s.median >= 90.0),
        detail: f
            .dsh
            .as_ref()
            .map(|s| format!("{}%", num(s.median)))
            .unwrap_or_else(|| "not measured".into()),
    });
    b.push(f);
    let mut f = Figure::new(
        "cache16_added",
        "wall time the holds add to that run (holds on − off)",
        "ms",
        Kind::Time,
    );
    f.dsh = added.stats();
    f.notes.push(format!(
        "the server answers each request {latency} ms after it arrives (one first token)"
    ));
    f.targets.push(Target {
        text: "≤ 1 first-token latency added".into(),
        met: f.dsh.as_ref().map(|s| s.median <= latency * 1.1),
        detail: f
            .dsh
            .as_ref()
            .map(|s| {
                format!(
                    "{} ms added, the latency {} ms",
                    num(s.median),
                    num(latency)
                )
            })
            .unwrap_or_else(|| "not measured".into()),
    });
    b.push(f);
    Ok(())
}

async fn ratelimit200(b: &mut Bench<'_>, n: usize, warm: usize) -> Result<()> {
    use dsh_orchestrator::providers::dispatch::Concurrency;
    let (mut ratio, mut ratio_fixed) = (Samples::default(), Samples::default());
    let (mut wall, mut wall_fixed) = (Samples::default(), Samples::default());
    let (mut failed, mut failed_fixed, mut refused, mut refused_fixed, mut changes) =
        (0, 0, 0, 0, 0);
    for i in 0..warm + n {
        let a = cheap::ratelimit(&b.ctx.worker, Concurrency::Adaptive).await?;
        let f = cheap::ratelimit(&b.ctx.worker, Concurrency::Fixed(16)).await?;
        ratio.add(i, warm, a.ratio);
        ratio_fixed.add(i, warm, f.ratio);
        wall.add(i, warm, a.wall_ms);
        wall_fixed.add(i, warm, f.wall_ms);
        if i >= warm {
            failed += a.failed;
            failed_fixed += f.failed;
            refused += a.refused;
            refused_fixed += f.refused;
            changes += a.changes;
        }
    }
    let mut f = Figure::new(
        "ratelimit200",
        format!(
            "{} calls, {} requests accepted per {} s: run time ÷ the time the limit allows",
            cheap::RATE_CALLS,
            cheap::RATE_N,
            cheap::RATE_WINDOW.as_secs()
        ),
        "×",
        Kind::Time,
    );
    f.dsh = ratio.stats();
    f.peer = ratio_fixed.stats();
    f.peer_side = "baseline";
    f.peer_note =
        Some("the same run at a fixed concurrency of 16 (concurrency = 16), 4 attempts".into());
    f.notes.push(format!(
        "over {n} runs: adaptive {failed} failed calls, {refused} requests refused (429), \
         {changes} concurrency changes, median {} ms; fixed {failed_fixed} failed calls, \
         {refused_fixed} refused, median {} ms",
        wall.stats().map_or("—".into(), |s| num(s.median)),
        wall_fixed.stats().map_or("—".into(), |s| num(s.median)),
    ));
    f.targets.push(Target {
        text: "zero failed calls".into(),
        met: Some(failed == 0),
        detail: format!("{failed} failed in {n} runs"),
    });
    f.targets.push(Target {
        text: "within 110% of the time the limit allows".into(),
        met: f.dsh.as_ref().map(|s| s.median <= 1.10),
        detail: f
            .dsh
            .as_ref()
            .map(|s| format!("{}×", num(s.median)))
            .unwrap_or_else(|| "not measured".into()),
    });
    b.push(f);
    Ok(())
}

// Long because: a flat table, one entry per target of the performance issue.
/// The performance issue's targets, met or not, on the figures they judge.
fn evaluate_targets(figs: &mut [Figure]) {
    let trivial = median_of(figs, "trivial", false);
    let trivial_peer = median_of(figs, "trivial", true);
    let baseline = median_of(figs, "baseline", false);
    let mut out: Vec<(&'static str, Target)> = Vec::new();
    let mut set = |id: &'static str, t: Target| out.push((id, t));
    let ratio_target =
        |text: &str, d: Option<f64>, p: Option<f64>, unit: &str, ok: &dyn Fn(f64) -> bool| {
            let (met, detail) = match (d, p) {
                (Some(d), Some(p)) if p > 0.0 => (
                    Some(ok(d / p)),
                    format!(
                        "dsh {} {unit} ÷ node {} {unit} = {}",
                        num(d),
                        num(p),
                        num(d / p)
                    ),
                ),
                (Some(_), _) => (None, "no node figure".into()),
                _ => (None, "not measured".into()),
            };
            Target {
                text: text.into(),
                met,
                detail,
            }
        };
    set(
        "trivial",
        ratio_target(
            "trivial run cold ≤ 1/10 of the Node peer",
            trivial,
            trivial_peer,
            "ms",
            &|r| r <= 0.1,
        ),
    );
    set(
        "trivial",
        match (trivial, baseline) {
            (Some(t), Some(b)) if b > 0.0 => Target {
                text: "trivial run cold ≤ 2× spawn-and-wait of a static binary".into(),
                met: Some(t <= 2.0 * b),
                detail: format!(
                    "dsh {} ms = {}× the baseline {} ms",
                    num(t),
                    num(t / b),
                    num(b)
                ),
            },
            _ => Target {
                text: "trivial run cold ≤ 2× spawn-and-wait of a static binary".into(),
                met: None,
                detail: "not measured".into(),
            },
        },
    );
    for (id, text) in [
        (
            "burst100",
            "100 runs at once ≤ 1/15 of the Node peer (the default: a shared fork server)",
        ),
        (
            "burst100_spawn",
            "100 runs at once ≤ 1/15 of the Node peer (every worker spawned)",
        ),
    ] {
        set(
            id,
            ratio_target(
                text,
                median_of(figs, id, false),
                median_of(figs, "burst100", true),
                "ms",
                &|r| r <= 1.0 / 15.0,
            ),
        );
    }
    {
        let (id, rss_id, which) = ("memory_pss", "memory_rss", "a run's worker idle in agent()");
        let pss = median_of(figs, id, false);
        set(
            id,
            Target {
                text: format!("memory per idle live worker ≤ 1 MiB PSS ({which})"),
                met: pss.map(|p| p <= 1024.0),
                detail: pss
                    .map(|p| format!("PSS {} KiB", num(p)))
                    .unwrap_or_else(|| "not measured".into()),
            },
        );
        set(
            rss_id,
            ratio_target(
                &format!(
                    "memory per idle live worker ≤ 1/4 of the peer's RSS per worker ({which})"
                ),
                median_of(figs, rss_id, false),
                median_of(figs, rss_id, true),
                "KiB",
                &|r| r <= 0.25,
            ),
        );
    }
    set(
        "memory_total",
        ratio_target(
            "memory per live run (worker PSS + host) ≤ 0.15 of the peer's",
            median_of(figs, "memory_total", false),
            median_of(figs, "memory_total", true),
            "KiB",
            &|r| r <= 0.15,
        ),
    );
    set(
        "agent16",
        ratio_target(
            "agent() with 16 outstanding ≥ 2× the peer's calls/s",
            median_of(figs, "agent16", false),
            median_of(figs, "agent16", true),
            "calls/s",
            &|r| r >= 2.0,
        ),
    );
    set(
        "agent_seq",
        ratio_target(
            "agent() sequential round trip ≤ 0.5× the peer's",
            median_of(figs, "agent_seq", false),
            median_of(figs, "agent_seq", true),
            "µs",
            &|r| r <= 0.5,
        ),
    );
    let cli = median_of(figs, "cli_trivial", false);
    set(
        "cli_trivial",
        Target {
            text: "`dsh workflow run trivial.ts` whole process ≤ 5 ms".into(),
            met: cli.map(|c| c <= 5.0),
            detail: cli
                .map(|c| format!("median {} ms", num(c)))
                .unwrap_or_else(|| "not measured".into()),
        },
    );
    for (id, t) in out {
        if let Some(f) = figs.iter_mut().find(|f| f.id == id) {
            f.targets.push(t);
        }
    }
}

/// The store's figures (`store.rs`), or why they were not measured.
async fn store_figures(b: &mut Bench<'_>, group: &str, n: usize, warm: usize) -> Result<()> {
    let url = b.args.store.clone().or_else(|| {
        std::env::var("DSH_BENCH_STORE")
            .ok()
            .filter(|u| !u.is_empty())
    });
    let Some(url) = url else {
        let mut f = Figure::new("store", "the store's figures", "", Kind::Time);
        f.unavailable = Some(
            "no PostgreSQL: pass --store URL (a role that may create databases) or set \
             DSH_BENCH_STORE"
                .into(),
        );
        if !b.figures.iter().any(|f| f.id == "store") {
            b.push(f);
        }
        return Ok(());
    };
    let dsh = b.ctx.dsh.clone();
    match group {
        "store_hosts" => {
            let mut by_hosts = [
                (1usize, "store_hosts1", Samples::default()),
                (2, "store_hosts2", Samples::default()),
                (4, "store_hosts4", Samples::default()),
            ];
            for i in 0..warm + n {
                for (hosts, _, samples) in &mut by_hosts {
                    samples.add(i, warm, store::throughput(&dsh, &url, *hosts).await?);
                }
            }
            let one = by_hosts[0].2.stats().map(|s| s.median);
            for (hosts, id, samples) in by_hosts {
                let mut f = Figure::new(
                    id,
                    format!(
                        "{} runs × {} sequential calls (model: {} ms) through the store, {hosts} \
                         host(s) of {} runs each",
                        store::RUNS,
                        store::CALLS,
                        ms(store::LATENCY),
                        store::SLOTS
                    ),
                    "calls/s",
                    Kind::Rate,
                );
                f.dsh = samples.stats();
                f.notes.push(
                    "from the hosts' start to the last result; the runs were submitted before"
                        .into(),
                );
                if hosts > 1 {
                    f.targets.push(scales(&f, one, hosts, "host"));
                }
                b.push(f);
            }
        }
        "store_pool" => {
            let mut by_hosts = [
                (1usize, "store_pool1", Samples::default()),
                (2, "store_pool2", Samples::default()),
                (4, "store_pool4", Samples::default()),
            ];
            let (mut local, mut pooled) = (Vec::new(), Vec::new());
            let mut busy: [Vec<f64>; 3] = Default::default();
            for i in 0..warm + n {
                for (k, (hosts, _, samples)) in by_hosts.iter_mut().enumerate() {
                    let (rate, cpu) = store::pool_throughput(&dsh, &url, *hosts).await?;
                    samples.add(i, warm, rate);
                    if i >= warm {
                        busy[k].extend(cpu);
                    }
                }
                let l = store::call_gaps(&dsh, &url, true).await?;
                let p = store::pooled_call_gaps(&dsh, &url).await?;
                if i >= warm {
                    local.extend(l);
                    pooled.extend(p);
                }
            }
            let one = by_hosts[0].2.stats().map(|s| s.median);
            for ((hosts, id, samples), mut cpu) in by_hosts.into_iter().zip(busy) {
                let mut f = Figure::new(
                    id,
                    format!(
                        "{} runs × {} sequential calls (model: {} ms) on one run host of {} runs, the calls answered by {hosts} agent host(s) of {} slots each",
                        store::RUNS,
                        store::CALLS,
                        ms(store::LATENCY),
                        store::POOL_RUNS,
                        store::POOL_SLOTS
                    ),
                    "calls/s",
                    Kind::Rate,
                );
                f.dsh = samples.stats();
                f.notes.push(format!(
                    "the slots' ceiling is {} calls/s; from the first call asked to the last answered (the database's clock); the machine's CPUs {}% busy meanwhile (median)",
                    num(hosts as f64 * f64::from(store::POOL_SLOTS) * 1000.0 / ms(store::LATENCY)),
                    num(percentile(&mut cpu, 0.5) * 100.0)
                ));
                if hosts > 1 {
                    f.targets.push(scales(&f, one, hosts, "agent host"));
                }
                b.push(f);
            }
            let (l50, l99) = (percentile(&mut local, 0.5), percentile(&mut local, 0.99));
            let (p50, p99) = (percentile(&mut pooled, 0.5), percentile(&mut pooled, 0.99));
            let mut f = Figure::new(
                "store_pool_call",
                format!(
                    "one agent call, request to the next request ({} sequential calls, the model answers at once): answered by an agent host",
                    store::SEQ
                ),
                "ms",
                Kind::Time,
            );
            f.dsh = Stats::of(&pooled);
            f.peer = Stats::of(&local);
            f.peer_side = "baseline";
            f.peer_note = Some("the same run in the store, answered by its own process".into());
            f.notes.push(format!(
                "the pool adds {} ms at p50 ({} → {}) and {} ms at p99 ({} → {})",
                num(p50 - l50),
                num(l50),
                num(p50),
                num(p99 - l99),
                num(l99),
                num(p99)
            ));
            b.push(f);
        }
        "store_call" => {
            let (mut file, mut pg) = (Vec::new(), Vec::new());
            for i in 0..warm + n {
                let f = store::call_gaps(&dsh, &url, false).await?;
                let p = store::call_gaps(&dsh, &url, true).await?;
                if i >= warm {
                    file.extend(f);
                    pg.extend(p);
                }
            }
            let (f50, f99) = (percentile(&mut file, 0.5), percentile(&mut file, 0.99));
            let (p50, p99) = (percentile(&mut pg, 0.5), percentile(&mut pg, 0.99));
            let mut f = Figure::new(
                "store_call",
                format!(
                    "one agent call, request to the next request ({} sequential calls, the \
                     model answers at once): in the store",
                    store::SEQ
                ),
                "ms",
                Kind::Time,
            );
            f.dsh = Stats::of(&pg);
            f.peer = Stats::of(&file);
            f.peer_side = "baseline";
            f.peer_note = Some("the same run with the file journal".into());
            f.notes.push(format!(
                "the store adds {} ms at p50 ({} → {}) and {} ms at p99 ({} → {})",
                num(p50 - f50),
                num(f50),
                num(p50),
                num(p99 - f99),
                num(f99),
                num(p99)
            ));
            b.push(f);
        }
        _ => {
            let mut s = Samples::default();
            for i in 0..warm + n {
                s.add(i, warm, store::failover(&dsh, &url).await?);
            }
            let bound = ms(store::LEASE) + 1000.0;
            let mut f = Figure::new(
                "store_failover",
                format!(
                    "a host's kill -9 → each of its 2 runs with a call answered on another host \
                     (lease {} s)",
                    store::LEASE.as_secs()
                ),
                "ms",
                Kind::Time,
            );
            f.dsh = s.stats();
            f.targets.push(Target {
                text: "≤ the lease + 1 s".into(),
                met: f.dsh.as_ref().map(|s| s.max <= bound),
                detail: f
                    .dsh
                    .as_ref()
                    .map(|s| format!("worst {} ms, the bound {} ms", num(s.max), num(bound)))
                    .unwrap_or_else(|| "not measured".into()),
            });
            b.push(f);
        }
    }
    Ok(())
}
