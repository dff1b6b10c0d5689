//! A quick measurement of the core paths through the public library API.
//! Not the benchmark suite (that is a later piece of work); it prints
//! medians and spread so the figures in docs can be reproduced:
//!
//! ```sh
//! cargo build --release --workspace
//! cargo run --release -p dsh-orchestrator --example quick_bench
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dsh_orchestrator::{
    AgentRequest, ChildOutcome, ChildResult, Limits, ResultFault, StartRefused, StartRequest,
    Subagent, SubagentProvider, start,
};
use tokio_util::sync::CancellationToken;

/// Answers every call at once, except prompts starting with "hold", which
/// wait until cancelled (so a worker can be inspected while alive).
struct Instant0;

#[async_trait]
impl SubagentProvider for Instant0 {
    async fn start(
        &self,
        r: AgentRequest,
        _c: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        Ok(Arc::new(Child {
            id: format!("c{}", r.seq),
            hold: r.prompt.starts_with("hold"),
            cancel: CancellationToken::new(),
        }))
    }
}

struct Child {
    id: String,
    hold: bool,
    cancel: CancellationToken,
}

#[async_trait]
impl Subagent for Child {
    fn id(&self) -> &str {
        &self.id
    }
    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        if self.hold {
            self.cancel.cancelled().await;
            return Ok(ChildOutcome {
                result: ChildResult::Cancelled,
                usage: None,
            });
        }
        Ok(ChildOutcome {
            result: ChildResult::Text("ok".into()),
            usage: None,
        })
    }
    fn cancel(&self) {
        self.cancel.cancel();
    }
    async fn dispose(&self) {
        self.cancel.cancel();
    }
}

const META: &str = "export const meta = { name: \"bench\", description: \"bench\" };\n";

fn stats(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let n = xs.len();
    println!(
        "{name:<44} median {:>8.3} ms   p10 {:>8.3}   p90 {:>8.3}   (n={n})",
        ms(xs[n / 2]),
        ms(xs[n / 10]),
        ms(xs[n * 9 / 10])
    );
}

fn vm(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider: Arc<dyn SubagentProvider> = Arc::new(Instant0);
    let req = |body: &str| {
        StartRequest::new("bench.ts", format!("{META}{body}"))
            .with_provider(provider.clone())
            .with_limits(Limits::default())
    };

    let mut prep = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        dsh_orchestrator::prepare(&req("return 1"))?;
        prep.push(t.elapsed());
    }
    stats("host-side prepare (parse, strip, meta)", prep);

    let mut trivial = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let run = start(req("return 1"))?;
        let r = run.result().await;
        trivial.push(t.elapsed());
        assert!(r.is_completed());
        run.dispose().await;
    }
    stats("trivial run, start -> result", trivial);

    let mut fan = Vec::new();
    let body = "const r = await parallel(Array.from({length: 200}, (_, i) => () => agent(`item ${i}`)));\nreturn r.filter(Boolean).length";
    for _ in 0..20 {
        let t = Instant::now();
        let run = start(req(body))?;
        let r = run.result().await;
        fan.push(t.elapsed());
        assert_eq!(r.value, serde_json::json!(200));
        run.dispose().await;
    }
    stats("200-agent parallel() fan-out, start -> result", fan);

    let mut seq = Vec::new();
    for _ in 0..10 {
        let run = start(req(
            "const t0 = Date.now(); for (let i = 0; i < 1000; i++) await agent(`q ${i}`); return Date.now() - t0",
        ))?;
        let t = Instant::now();
        let r = run.result().await;
        seq.push(t.elapsed() / 1000);
        assert!(r.is_completed());
        run.dispose().await;
    }
    stats("sequential agent() round trip (per call)", seq);

    // Memory of a live worker that ran the 200-agent fan-out and now waits.
    let run = start(req(&format!(
        "{}\nawait agent('hold'); return 0",
        body.replace("return r.filter(Boolean).length", "")
    )))?;
    let mut events = run.subscribe();
    while let Some(e) = events.next().await {
        if let dsh_orchestrator::EventKind::AgentStart { seq: 201, .. } = e.kind {
            break;
        }
    }
    let pid = run.worker_pid();
    let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .map(|l| l.to_string())
        });
    println!(
        "live worker after a 200-agent fan-out: VmHWM {} KiB, VmRSS {} KiB, {}",
        vm(pid, "VmHWM:").unwrap_or(0),
        vm(pid, "VmRSS:").unwrap_or(0),
        pss.unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    run.dispose().await;
    Ok(())
}
