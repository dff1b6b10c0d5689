//! The store's figures (docs/scale.md): calls per second through the store
//! with 1, 2 and 4 `dsh workflow host` processes; what the store adds to
//! each agent call over the file journal; how long a dead host's runs wait
//! before they move on elsewhere.
//!
//! Every figure runs real processes against a real PostgreSQL (the
//! `--store` URL: a role that may create databases; each sample gets a
//! fresh database) and answers every call from the loopback model server
//! through a configured `openai` provider, so a call is an HTTP request, a
//! journal insert and a worker round trip, as in production.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use tokio_postgres::{Client, NoTls};

use crate::model_server::{ModelServer, Options};

/// Upper bound for any wait that is not the thing measured.
const BOUND: Duration = Duration::from_secs(120);

/// The model's answer time in the throughput and failover figures.
pub const LATENCY: Duration = Duration::from_millis(50);
/// Runs per throughput sample, calls per run, runs at once per host.
pub const RUNS: usize = 24;
pub const CALLS: usize = 10;
pub const SLOTS: u32 = 2;
/// Calls per run in the overhead figure (sequential, model answers at once).
pub const SEQ: usize = 100;
/// The lease of the failover figure's hosts.
pub const LEASE: Duration = Duration::from_secs(2);

fn script(calls: usize) -> String {
    format!(
        "export const meta = {{ name: \"bench\", description: \"store benchmark\" }};\n\
         for (let i = 0; i < {calls}; i++) await agent(`q ${{args.n}} ${{i}}`);\n\
         return {calls};\n"
    )
}

/// A scratch directory with a script and a `dsh.toml` whose default
/// provider is the model server, and a fresh database.
pub struct Scene {
    dir: tempfile::TempDir,
    dsh: PathBuf,
    pub url: String,
    db: Client,
    pub server: ModelServer,
    hosts: Vec<Child>,
}

static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// Whether the model's calls go to agent hosts (`[store] pools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooled {
    No,
    Yes,
}

impl Scene {
    pub async fn new(dsh: &Path, admin: &str, calls: usize, latency: Duration) -> Result<Scene> {
        Scene::with(dsh, admin, calls, latency, Pooled::No).await
    }

    /// As [`Scene::new`], the model's provider `m` pooled or not
    /// (`[store] pools = ["m"]`: its calls are answered by agent hosts).
    pub async fn with(
        dsh: &Path,
        admin: &str,
        calls: usize,
        latency: Duration,
        pooled: Pooled,
    ) -> Result<Scene> {
        let server = ModelServer::start(Options {
            latency,
            ..Options::default()
        })
        .await?;
        let dir = tempfile::Builder::new()
            .prefix("dsh-bench-store-")
            .tempdir()?;
        std::fs::write(dir.path().join("wf.ts"), script(calls))?;
        std::fs::write(
            dir.path().join("dsh.toml"),
            format!(
                "[workflow]\nprovider = \"m\"\n\n[providers.m]\nkind = \"openai\"\n\
                 base_url = \"{}\"\nmodel = \"m\"\napi_key_env = \"DSH_BENCH_KEY\"\n{}",
                server.base_url(),
                match pooled {
                    Pooled::No => "",
                    Pooled::Yes => "\n[store]\npools = [\"m\"]\n",
                }
            ),
        )?;
        let name = format!(
            "dsh_bench_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let admin_db = connect(admin).await?;
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
        ] {
            admin_db
                .batch_execute(&sql)
                .await
                .context("creating the bench's database (the --store role must be allowed to)")?;
        }
        let (base, _) = admin
            .rsplit_once('/')
            .context("--store: a postgres:// URL with a database")?;
        let url = format!("{base}/{name}");
        // The schema, as a host would make it, before anything is timed.
        let out = Command::new(dsh)
            .current_dir(dir.path())
            .args(["workflow", "runs", "--store", &url])
            .output()?;
        if !out.status.success() {
            bail!(
                "dsh workflow runs --store: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let db = connect(&url).await?;
        Ok(Scene {
            dir,
            dsh: dsh.to_path_buf(),
            url,
            db,
            server,
            hosts: Vec::new(),
        })
    }

    fn dsh(&self) -> Command {
        let mut c = Command::new(&self.dsh);
        c.current_dir(self.dir.path())
            .env("DSH_BENCH_KEY", "bench")
            .stdin(Stdio::null());
        c
    }

    /// Submits `runs` runs of the scene's script (`args.n` = 0…).
    pub fn submit(&self, runs: usize) -> Result<()> {
        for n in 0..runs {
            let out = self
                .dsh()
                .args(["workflow", "submit", "wf.ts", "--store", &self.url])
                .args(["--args", &json!({ "n": n }).to_string()])
                .output()?;
            if !out.status.success() {
                bail!(
                    "dsh workflow submit: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        Ok(())
    }

    /// Starts a host (its own process group); its index.
    pub fn host(&mut self, slots: u32, lease: Duration) -> Result<usize> {
        self.host_with(&[
            "--runs",
            &slots.to_string(),
            "--lease",
            &lease.as_secs().max(1).to_string(),
        ])
    }

    /// Starts an agent host of pool `m` with `slots` calls at once.
    pub fn agent_host(&mut self, slots: u32) -> Result<usize> {
        self.host_with(&["--agents", &format!("m={slots}")])
    }

    fn host_with(&mut self, args: &[&str]) -> Result<usize> {
        let child = self
            .dsh()
            .args(["workflow", "host", "--store", &self.url])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting dsh workflow host")?;
        self.hosts.push(child);
        Ok(self.hosts.len() - 1)
    }

    /// Kills host `i` (`kill -9` of its group) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(h) = self.hosts.get_mut(i) {
            // SAFETY: our own child's process group, not yet reaped.
            unsafe { libc::kill(-(h.id() as libc::pid_t), libc::SIGKILL) };
            let _ = h.wait();
        }
    }

    async fn count(&self, sql: &str) -> Result<i64> {
        Ok(self.db.query_one(sql, &[]).await?.get(0))
    }

    /// Waits until every one of `runs` runs is settled; fails unless each
    /// completed with the script's value.
    pub async fn all_settled(&self, runs: usize, calls: usize) -> Result<()> {
        let deadline = Instant::now() + BOUND;
        while self
            .count("SELECT count(*) FROM dsh_runs WHERE result IS NOT NULL")
            .await?
            < runs as i64
        {
            if Instant::now() > deadline {
                bail!("the runs did not settle within {BOUND:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let good = self
            .count(&format!(
                "SELECT count(*) FROM dsh_runs WHERE result->'result'->>'stopReason' = 'completed'
                 AND result->'result'->'value' = '{calls}'::jsonb"
            ))
            .await?;
        if good != runs as i64 {
            let bad = self
                .db
                .query_one(
                    "SELECT result::text FROM dsh_runs
                     WHERE result->'result'->>'stopReason' <> 'completed' LIMIT 1",
                    &[],
                )
                .await
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_default();
            bail!(
                "{} of {runs} runs did not complete: {bad}",
                runs as i64 - good
            );
        }
        Ok(())
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for i in 0..self.hosts.len() {
            self.kill(i);
        }
    }
}

async fn connect(url: &str) -> Result<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(conn);
    Ok(client)
}

/// Calls per second: `RUNS` runs of `CALLS` sequential calls (the model
/// answers in [`LATENCY`]), submitted first, then `hosts` hosts of
/// [`SLOTS`] runs each started; from their start to the last result.
pub async fn throughput(dsh: &Path, admin: &str, hosts: usize) -> Result<f64> {
    let mut scene = Scene::new(dsh, admin, CALLS, LATENCY).await?;
    scene.submit(RUNS)?;
    let t = Instant::now();
    for _ in 0..hosts {
        scene.host(SLOTS, Duration::from_secs(10))?;
    }
    scene.all_settled(RUNS, CALLS).await?;
    let secs = t.elapsed().as_secs_f64();
    Ok((RUNS * CALLS) as f64 / secs)
}

/// Calls answered by agent hosts in the pools figure: runs at once on
/// the one run host, and slots per agent host.
pub const POOL_RUNS: u32 = 24;
pub const POOL_SLOTS: u32 = 4;

/// Calls per second through agent pools: `RUNS` runs of `CALLS`
/// sequential calls (the model answers in [`LATENCY`]) on one run host
/// that runs them all at once, their calls answered by `agent_hosts`
/// agent hosts of [`POOL_SLOTS`] calls each; from the first call asked to
/// the last answered, by the database's clock (with four agent hosts the
/// whole sample is about a second, and the hosts' own start would weigh
/// more than the pool).
/// Also returns how busy the machine's CPUs were meanwhile (0–1, from
/// `/proc/stat`): on a small machine the pool's ceiling is the CPU.
pub async fn pool_throughput(
    dsh: &Path,
    admin: &str,
    agent_hosts: usize,
) -> Result<(f64, Option<f64>)> {
    let mut scene = Scene::with(dsh, admin, CALLS, LATENCY, Pooled::Yes).await?;
    scene.submit(RUNS)?;
    for _ in 0..agent_hosts {
        scene.agent_host(POOL_SLOTS)?;
    }
    let before = cpu_times();
    scene.host_with(&["--runs", &POOL_RUNS.to_string()])?;
    scene.all_settled(RUNS, CALLS).await?;
    let busy = before
        .zip(cpu_times())
        .and_then(|((b0, t0), (b1, t1))| (t1 > t0).then(|| (b1 - b0) as f64 / (t1 - t0) as f64));
    let row = scene
        .db
        .query_one(
            "SELECT count(*), extract(epoch FROM max(settled_at) - min(created_at))::float8
             FROM dsh_calls WHERE state = 'settled'",
            &[],
        )
        .await?;
    let (calls, secs): (i64, f64) = (row.get(0), row.get(1));
    if calls != (RUNS * CALLS) as i64 {
        bail!(
            "{calls} calls were answered by the pool, not {}",
            RUNS * CALLS
        );
    }
    Ok((calls as f64 / secs, busy))
}

/// The machine's CPU time so far, in clock ticks: (busy, total), from
/// the first line of `/proc/stat` (idle and iowait are not busy).
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// The time between one call's request and the next's at the model server
/// (which answers at once), in ms, for one run of [`SEQ`] sequential calls:
/// with the file journal (`store` `None`) or in the store.
pub async fn call_gaps(dsh: &Path, admin: &str, store: bool) -> Result<Vec<f64>> {
    let scene = Scene::new(dsh, admin, SEQ, Duration::ZERO).await?;
    gaps(&scene, store)
}

/// As [`call_gaps`] in the store, each call answered by an agent host
/// (`[store] pools`, one agent host of one slot).
pub async fn pooled_call_gaps(dsh: &Path, admin: &str) -> Result<Vec<f64>> {
    let mut scene = Scene::with(dsh, admin, SEQ, Duration::ZERO, Pooled::Yes).await?;
    scene.agent_host(1)?;
    gaps(&scene, true)
}

fn gaps(scene: &Scene, store: bool) -> Result<Vec<f64>> {
    let mut cmd = scene.dsh();
    cmd.args(["workflow", "run", "wf.ts", "--args", "{\"n\":0}"]);
    if store {
        cmd.args(["--store", &scene.url]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("dsh workflow run: {}", String::from_utf8_lossy(&out.stderr));
    }
    let seen = scene.server.seen();
    if seen.len() != SEQ {
        bail!("the model saw {} requests, not {SEQ}", seen.len());
    }
    Ok(seen
        .windows(2)
        .map(|w| (w[1].arrived - w[0].arrived).as_secs_f64() * 1000.0)
        .collect())
}

/// From a host's `kill -9` to each of its runs making progress on another
/// host (a call answered under the new claim), in ms; the hosts have a
/// [`LEASE`] lease.
pub async fn failover(dsh: &Path, admin: &str) -> Result<f64> {
    let mut scene = Scene::new(dsh, admin, 60, LATENCY).await?;
    let doomed = scene.host(SLOTS, LEASE)?;
    scene.submit(SLOTS as usize)?;
    let deadline = Instant::now() + BOUND;
    // Both runs under way on the doomed host: a call of each answered.
    while scene
        .count(
            "SELECT count(DISTINCT run_id) FROM dsh_journal WHERE line LIKE '%\"type\":\"settled\"%'",
        )
        .await?
        < i64::from(SLOTS)
    {
        if Instant::now() > deadline {
            bail!("the first host never ran the runs");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    scene.host(SLOTS, LEASE)?;
    let t = Instant::now();
    scene.kill(doomed);
    // Progress elsewhere: each run has a call settled after its second
    // attempt began.
    let progressed = "SELECT count(*) FROM dsh_runs r WHERE r.claims = 2 AND EXISTS (
        SELECT 1 FROM dsh_journal j WHERE j.run_id = r.id AND j.line LIKE '%\"type\":\"settled\"%'
          AND j.seq > (SELECT max(seq) FROM dsh_journal a
                       WHERE a.run_id = r.id AND a.line LIKE '%\"type\":\"attempt\"%'))";
    while scene.count(progressed).await? < i64::from(SLOTS) {
        if Instant::now() > deadline {
            bail!("the runs never moved to the other host");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    scene.all_settled(SLOTS as usize, 60).await?;
    Ok(ms)
}
