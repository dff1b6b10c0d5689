//! The second peer: Claude Code's own Workflow runtime, run offline by
//! `../shared/ccref/run_cc_workflow.py` (its fake Anthropic server on
//! 127.0.0.1 answers every subagent). The figure is a 50-agent
//! `parallel()` fan-out, concurrency 16 on both sides: Claude Code's
//! `durationMs` (its own run clock) against dsh's start → result with the
//! `openai` provider and the loopback [`ModelServer`] answering at once,
//! so neither model server is what is measured.
//!
//! Skipped, with the reason, when the script or the `claude` binary is
//! not here (`CCREF_CLAUDE`, or the pinned CLI the tests install).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use dsh_orchestrator::{StartRequest, WorkerCommand, start};

use crate::model_server::{ModelServer, Options};

/// Agents of the fan-out.
pub const AGENTS: u32 = 50;

/// The script, as both runtimes take it.
pub fn script() -> String {
    format!(
        "export const meta = {{ name: \"fanout50\", description: \"{AGENTS} agents at once\" }};\n\
         const out = await parallel(Array.from({{ length: {AGENTS} }}, (_, i) => () => agent(`task ${{i}}`)));\n\
         return out.filter((x) => x !== null).length;\n"
    )
}

/// Why the Claude Code side is not run (the figure's peer note).
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    #[error("not run: {} is missing (set DSH_CCREF to the ccref folder)", .0.display())]
    NoRunner(PathBuf),
    #[error(
        "not run: Claude Code is not installed (npm install --prefix \
                        ~/.cache/ccref @anthropic-ai/claude-code@2.1.332, or set CCREF_CLAUDE)"
    )]
    NoClaude,
    #[error("not run: {0}")]
    Script(std::io::Error),
}

/// Where Claude Code and the ccref runner are, or why they are not.
pub struct CcPeer {
    runner: PathBuf,
    claude: PathBuf,
    script: PathBuf,
}

impl CcPeer {
    /// Looks for the runner beside the repository (`../shared/ccref`) and
    /// for `claude`; `Err` says what is missing.
    pub fn find(repo: &Path, scratch: &Path) -> Result<CcPeer, NotRun> {
        let runner = std::env::var_os("DSH_CCREF")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("../shared/ccref"))
            .join("run_cc_workflow.py");
        if !runner.is_file() {
            return Err(NotRun::NoRunner(runner));
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let candidates = [
            std::env::var_os("CCREF_CLAUDE").map(PathBuf::from),
            Some(home.join(".cache/ccref/node_modules/.bin/claude")),
            Some(home.join(
                ".cache/dsh-clis/@anthropic-ai_claude-code@2.1.332/node_modules/.bin/claude",
            )),
        ];
        let Some(claude) = candidates.into_iter().flatten().find(|p| p.is_file()) else {
            return Err(NotRun::NoClaude);
        };
        let script = scratch.join("fanout50.js");
        std::fs::write(&script, self::script()).map_err(NotRun::Script)?;
        Ok(CcPeer {
            runner,
            claude,
            script,
        })
    }

    /// One Claude Code run: its `durationMs`.
    pub async fn sample(&self) -> Result<f64> {
        let out = tokio::process::Command::new("python3")
            .arg(&self.runner)
            .arg(&self.script)
            .args(["--concurrency", "16", "--timeout", "240", "--claude"])
            .arg(&self.claude)
            .kill_on_drop(true)
            .output()
            .await
            .context("running run_cc_workflow.py")?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "run_cc_workflow.py printed no JSON; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
                    .chars()
                    .take(500)
                    .collect::<String>()
            )
        })?;
        if v["status"] != "completed" || v["result"] != AGENTS {
            bail!(
                "Claude Code's run did not complete with {AGENTS}: status {}, result {}, error {}",
                v["status"],
                v["result"],
                v["error"]
            );
        }
        v["durationMs"]
            .as_f64()
            .context("Claude Code's record has no durationMs")
    }
}

/// One dsh run of the same script: start → result, in ms.
pub async fn dsh_sample(worker: &WorkerCommand) -> Result<f64> {
    let server = ModelServer::start(Options {
        latency: Duration::ZERO,
        ..Options::default()
    })
    .await?;
    let provider = crate::cheap::provider(&server, |_| {})?;
    let req = StartRequest::new("fanout50.js", script())
        .with_provider(provider)
        .with_worker(worker.clone());
    let t = Instant::now();
    let run = start(req)?;
    let r = tokio::time::timeout(Duration::from_secs(60), run.result())
        .await
        .context("the dsh run did not settle within 60 s")?;
    let elapsed = t.elapsed();
    run.dispose().await;
    if !r.is_completed() || r.value != AGENTS {
        bail!(
            "the dsh run did not complete with {AGENTS}: {}",
            r.to_json()
        );
    }
    Ok(elapsed.as_secs_f64() * 1000.0)
}
