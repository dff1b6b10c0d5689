//! The cheaper-runs figures: what the `openai` provider's dispatch saves
//! against the loopback [`ModelServer`](crate::model_server), each beside
//! the same run without it (the baseline column).
//!
//! - `cache16`: sixteen calls at once sharing a 20 KB preamble. The share
//!   of the shareable input tokens (all but the first call's preamble)
//!   served from cache, with prefix holds and without (`prefix_hold =
//!   0`), and the wall time the holds add, against the server's latency
//!   (one first token).
//! - `ratelimit200`: 200 calls against a server that accepts
//!   [`RATE_N`] requests per [`RATE_WINDOW`]; the run's time over the
//!   time the limit allows, and failed calls, adaptive concurrency against
//!   a fixed concurrency of 16 with the default four attempts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use dsh_orchestrator::providers::dispatch::Concurrency;
use dsh_orchestrator::providers::openai::{OpenAiConfig, OpenAiProvider};
use dsh_orchestrator::{EventKind, Limits, StartRequest, WorkerCommand, start};

use crate::model_server::{ModelServer, Options, tokens};

/// The server's latency: one first token.
pub const CACHE_LATENCY: Duration = Duration::from_millis(200);
/// The rate limit: requests per window.
pub const RATE_N: u32 = 40;
pub const RATE_WINDOW: Duration = Duration::from_secs(1);
/// Calls of the rate-limit figure.
pub const RATE_CALLS: u32 = 200;
const RATE_LATENCY: Duration = Duration::from_millis(20);

/// The `openai` provider pointed at `server`, one completion per call.
pub fn provider(
    server: &ModelServer,
    tweak: impl FnOnce(&mut OpenAiConfig),
) -> Result<Arc<OpenAiProvider>> {
    let mut cfg = OpenAiConfig {
        base_url: server.base_url(),
        api_key_env: String::new(),
        agent: dsh_orchestrator::providers::agent::LoopSettings {
            tools: Some(Vec::new()),
            ..Default::default()
        },
        ..OpenAiConfig::default()
    };
    tweak(&mut cfg);
    Ok(Arc::new(
        OpenAiProvider::with_key("bench", &cfg, "").context("the openai provider")?,
    ))
}

fn fan_out(n: u32, preamble: bool) -> String {
    let head = if preamble {
        "\"You review one file of a large codebase; the conventions follow.\\n\" + \
         \"Every public item is documented; errors are typed; no unwrap on input.\\n\".repeat(280) + "
    } else {
        ""
    };
    format!(
        "export const meta = {{ name: \"bench\", description: \"benchmark workflow\" }};\n\
         const out = await parallel(Array.from({{ length: {n} }}, (_, i) => () => \
         agent({head}`task ${{i}}`)));\n\
         return out.filter((x) => x !== null).length;"
    )
}

/// One run of `source`: its wall time, its value and the concurrency
/// activities it emitted.
async fn timed(
    dsh: &WorkerCommand,
    source: &str,
    p: Arc<OpenAiProvider>,
) -> Result<(Duration, serde_json::Value, u32)> {
    let req = StartRequest::new("bench.ts", source)
        .with_provider(p)
        .with_worker(dsh.clone())
        .with_limits(Limits {
            max_total_agents: 10_000,
            max_total_agents_ceiling: 10_000,
            ..Limits::default()
        });
    let t = Instant::now();
    let run = start(req)?;
    let mut events = run.subscribe();
    let mut cuts = 0;
    let r = tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(e) = events.next().await {
            if let EventKind::AgentActivity {
                activity: dsh_orchestrator::Activity::Concurrency { .. },
                ..
            } = e.kind
            {
                cuts += 1;
            }
        }
        run.result().await
    })
    .await
    .context("the run did not settle within 300 s")?;
    let elapsed = t.elapsed();
    run.dispose().await;
    if !r.is_completed() {
        bail!("the run did not complete: {}", r.to_json());
    }
    Ok((elapsed, r.value, cuts))
}

/// One `cache16` sample: `(cached share %, wall ms)`.
pub async fn cache16(dsh: &WorkerCommand, holds: bool) -> Result<(f64, f64)> {
    let server = ModelServer::start(Options {
        latency: CACHE_LATENCY,
        ..Options::default()
    })
    .await?;
    let p = provider(&server, |c| {
        if !holds {
            c.prefix_hold = Duration::ZERO;
        }
    })?;
    let (wall, value, _) = timed(dsh, &fan_out(16, true), p).await?;
    if value != 16 {
        bail!("cache16: {value} of 16 calls answered");
    }
    let seen = server.seen();
    let preamble = seen
        .first()
        .and_then(|s| s.prompt.find("task "))
        .context("no request")?;
    let shareable = 15 * tokens(preamble);
    let cached: u64 = seen.iter().map(|s| s.cached).sum();
    Ok((
        100.0 * cached as f64 / shareable.max(1) as f64,
        wall.as_secs_f64() * 1000.0,
    ))
}

/// One `ratelimit200` sample.
pub struct RateSample {
    /// The run's time ÷ the time the limit allows.
    pub ratio: f64,
    pub wall_ms: f64,
    pub failed: u64,
    pub refused: u64,
    pub changes: u32,
}

pub async fn ratelimit(dsh: &WorkerCommand, concurrency: Concurrency) -> Result<RateSample> {
    let server = ModelServer::start(Options {
        latency: RATE_LATENCY,
        rate: Some((RATE_N, RATE_WINDOW)),
        ..Options::default()
    })
    .await?;
    let p = provider(&server, |c| c.concurrency = concurrency)?;
    let offset = server.elapsed();
    let (wall, value, changes) = timed(dsh, &fan_out(RATE_CALLS, false), p).await?;
    let ok = value.as_u64().context("a count")?;
    // The last window the limit needs starts at (windows − 1) · window
    // from the server's start; the run started `offset` after it.
    let windows = RATE_CALLS.div_ceil(RATE_N);
    let allowed = (RATE_WINDOW * (windows - 1)).saturating_sub(offset) + RATE_LATENCY;
    let refused = server.seen().iter().filter(|s| s.status == 429).count() as u64;
    Ok(RateSample {
        ratio: wall.as_secs_f64() / allowed.as_secs_f64(),
        wall_ms: wall.as_secs_f64() * 1000.0,
        failed: u64::from(RATE_CALLS) - ok,
        refused,
        changes,
    })
}
