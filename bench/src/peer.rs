//! The Node peer (`bench/peers/node-worker/`): a long-lived `node
//! harness.js serve` process that takes one sample per request, so the
//! bench can interleave dsh and node samples (A B A B …).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Upper bound for one peer sample (never what is measured).
const SAMPLE_BOUND: Duration = Duration::from_secs(120);

pub struct NodePeer {
    node: PathBuf,
    dir: PathBuf,
    pub version: String,
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl NodePeer {
    /// Starts the harness, or `Ok(None)` when `node` is not on the PATH.
    pub async fn start(dir: &Path) -> Result<Option<NodePeer>> {
        let Some(node) = find_on_path("node") else {
            return Ok(None);
        };
        let harness = dir.join("harness.js");
        if !harness.is_file() {
            bail!("the Node peer is missing: {}", harness.display());
        }
        let version = std::process::Command::new(&node)
            .arg("--version")
            .output()
            .with_context(|| format!("running {} --version", node.display()))?;
        let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
        let mut child = Command::new(&node)
            // gc() before the memory figure's baseline reading.
            .arg("--expose-gc")
            .arg(&harness)
            .arg("serve")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {}", node.display(), harness.display()))?;
        let stdin = child.stdin.take().context("node stdin")?;
        let stdout = child.stdout.take().context("node stdout")?;
        Ok(Some(NodePeer {
            node,
            dir: dir.to_path_buf(),
            version,
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        }))
    }

    /// One sample of `fig` (the harness's JSON object for it).
    pub async fn sample(&mut self, fig: &str) -> Result<Value> {
        let mut line = json!({ "fig": fig }).to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let reply = tokio::time::timeout(SAMPLE_BOUND, self.stdout.next_line())
            .await
            .map_err(|_| anyhow!("the node peer gave no {fig} sample within {SAMPLE_BOUND:?}"))??
            .ok_or_else(|| anyhow!("the node peer exited during {fig}"))?;
        let reply: Value = serde_json::from_str(&reply)
            .with_context(|| format!("the node peer's reply is not JSON: {reply}"))?;
        if reply["ok"] != true {
            bail!("node peer, {fig}: {}", reply["error"]);
        }
        Ok(reply["sample"].clone())
    }

    /// One field of one sample, as a number.
    pub async fn number(&mut self, fig: &str, field: &str) -> Result<f64> {
        let s = self.sample(fig).await?;
        s[field]
            .as_f64()
            .ok_or_else(|| anyhow!("node peer, {fig}: no number {field} in {s}"))
    }

    /// Wall time of a whole `node harness.js cli` process (one trivial run).
    pub fn cli_once(&self) -> Result<Duration> {
        let mut cmd = std::process::Command::new(&self.node);
        cmd.arg(self.dir.join("harness.js"))
            .arg("cli")
            .current_dir(&self.dir)
            .stdin(Stdio::null());
        let t = Instant::now();
        let out = tokio::task::block_in_place(|| cmd.output())?;
        let elapsed = t.elapsed();
        if !out.status.success() || out.stdout != b"1\n" {
            bail!(
                "node harness.js cli: {} stdout {:?} stderr {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(elapsed)
    }

    pub async fn close(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
