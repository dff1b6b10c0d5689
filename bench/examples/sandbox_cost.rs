//! Where the sandbox's per-run cost goes: trivial runs through the library
//! with the sandbox off, on, and on without Landlock (the worker's testing
//! switch), interleaved. `cargo run --release -p dsh-bench --example sandbox_cost`.

use std::time::Instant;

use dsh_orchestrator::{SandboxPolicy, StartRequest, WorkerCommand, start};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let dsh = std::env::current_exe()?
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("dsh"))
        .ok_or_else(|| anyhow::anyhow!("no dsh next to the example"))?;
    let variants: Vec<(&str, WorkerCommand, SandboxPolicy)> = vec![
        ("off", WorkerCommand::dsh(&dsh), SandboxPolicy::Off),
        (
            "best-effort",
            WorkerCommand::dsh(&dsh),
            SandboxPolicy::BestEffort,
        ),
        (
            "best-effort, no Landlock",
            // The worker's testing switch (an environment variable, not
            // an argument), set by a shell the host execs.
            WorkerCommand {
                program: "/bin/sh".into(),
                args: vec![
                    "-c".into(),
                    "DSH_WORKER_TESTING=landlock-abi=0 exec \"$0\" __worker \"$@\"".into(),
                    dsh.display().to_string(),
                ],
            },
            SandboxPolicy::BestEffort,
        ),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for _ in 0..100 {
        for (i, (_, w, p)) in variants.iter().enumerate() {
            let req = StartRequest::new("t.ts", "return 1;")
                .with_meta(dsh_orchestrator::Meta {
                    name: "t".into(),
                    description: "t".into(),
                    when_to_use: None,
                    phases: None,
                })
                .with_worker(w.clone())
                .with_sandbox(*p);
            let t = Instant::now();
            let run = start(req)?;
            let _ = run.result().await;
            times[i].push(t.elapsed().as_secs_f64() * 1e3);
            run.dispose().await;
        }
    }
    for (i, (name, _, _)) in variants.iter().enumerate() {
        println!("{name:28} median {:.3} ms", median(times[i].clone()));
    }
    Ok(())
}
