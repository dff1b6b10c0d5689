//! Running one tool call: a short-lived `dsh-worker tool` process per
//! call, confined by the worker's sandbox (Landlock, seccomp, rlimits, no
//! capabilities — docs/sandbox.md, "Tool calls"), in its own process
//! group, killed with its group on cancel or when it overruns.
//!
//! The request goes in on stdin as one JSON object, the answer comes back
//! on stdout as one JSON object (`status`, `output`, `sandbox`). The tool
//! host checks paths itself (a clear `denied` for the model) and the kernel
//! backs it up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::command::process::{self, Ending, ProcLimits, ProcSpec};
use crate::command::worktree::GitDirs;
use dsh_exec::WorkerCommand;
use dsh_seam::Progress;

/// How much of a tool's output the model sees.
pub const MAX_TOOL_OUTPUT: usize = 30_000;
/// The tool host's own output cap (the answer object around the output).
const HOST_OUTPUT_LIMIT: u64 = 1 << 20;
/// Added to a Bash timeout before the host kills the tool process itself
/// (the tool host stops Bash at the timeout; this is the backstop).
const HOST_MARGIN: Duration = Duration::from_secs(10);
/// How often a running tool counts as progress for the stall timer.
const TOOL_ALIVE_EVERY: Duration = Duration::from_secs(1);
/// Bound of a non-Bash tool call.
const FILE_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// Where tools run and how they are confined (defined with the provider
/// registry: the same program is the reaper of the kinds without `http`).
pub use crate::registry::ToolHost;

/// How one call's tools run.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The tool host program and its sandbox policy.
    pub host: ToolHost,
    /// The workspace: the provider's (or the run's) working directory, or
    /// the call's worktree.
    pub workspace: PathBuf,
    /// Bash may open network connections.
    pub network: bool,
    /// Longest a Bash command may run.
    pub bash_timeout: Duration,
    /// Bash may also read beneath these (the repository's git directory
    /// when it is outside the workspace; see [`git_grants`]).
    pub shell_read: Vec<PathBuf>,
    /// Bash may also change beneath these (a worktree's own git directory
    /// and the object store, so `git commit` works in a worktree).
    pub shell_write: Vec<PathBuf>,
}

/// What Bash may reach of git outside its workspace: in a worktree, the
/// repository's git directory to read (so `git status`, `git diff` and
/// `git log` work), from the directories recorded when the worktree was
/// made — never from the workspace's `.git` file, which an earlier tool
/// call may have rewritten. Nothing to change: a worktree's index, HEAD,
/// config and the shared object store stay the host's (so `git commit`
/// does not work inside a worktree; the host keeps its changes on a
/// branch). Outside a worktree: nothing beyond the workspace.
pub fn git_grants(worktree: Option<&GitDirs>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    match worktree {
        Some(d) => (vec![d.common.clone()], Vec::new()),
        None => (Vec::new(), Vec::new()),
    }
}

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// `ok`, `error`, `denied`, `timeout`, `sandbox-unavailable`.
    pub status: String,
    /// What the model reads.
    pub output: String,
}

impl ToolOutcome {
    fn error(output: impl Into<String>) -> ToolOutcome {
        ToolOutcome {
            status: "error".into(),
            output: output.into(),
        }
    }

    /// Whether the model should read `output` as a failure.
    pub fn is_error(&self) -> bool {
        self.status != "ok"
    }
}

/// Runs `tool` with `input` in `ctx`; `cancel` stops it (and its group).
pub async fn run_tool(
    ctx: &ToolContext,
    tool: &str,
    input: &Value,
    cancel: &CancellationToken,
    progress: &Progress,
) -> ToolOutcome {
    let command = match &ctx.host.command {
        Some(c) => c.clone(),
        None => match WorkerCommand::resolve() {
            Ok(c) => c,
            Err(e) => {
                return ToolOutcome::error(format!("{tool}: the tool host cannot start: {e}"));
            }
        },
    };
    let request = json!({
        "workspace": ctx.workspace.to_string_lossy(),
        "tool": tool,
        "input": input,
        "network": ctx.network,
        "bashTimeoutMs": u64::try_from(ctx.bash_timeout.as_millis()).unwrap_or(u64::MAX),
        "maxOutputBytes": MAX_TOOL_OUTPUT,
        "sandbox": ctx.host.sandbox.as_str(),
        "shellRead": ctx.shell_read,
        "shellWrite": ctx.shell_write,
    });
    let timeout = if tool == "Bash" {
        ctx.bash_timeout.saturating_add(HOST_MARGIN)
    } else {
        FILE_TOOL_TIMEOUT
    };
    // Bash in a plain workspace (no worktree: no git grants) can change
    // what the user's next dsh run or git command uses; Landlock cannot
    // carve those paths out of the workspace, so the change is reported.
    let watched = (tool == "Bash" && ctx.shell_read.is_empty())
        .then(|| (config_state(&ctx.workspace), ChangeWarning(&ctx.workspace)));
    let outcome = run_host(ctx, tool, &command, request, timeout, cancel, progress).await;
    if let Some((before, warn)) = watched {
        warn.compare(&before, &config_state(&ctx.workspace));
    }
    outcome
}

/// Runs the tool host for one call and reads its answer.
async fn run_host(
    ctx: &ToolContext,
    tool: &str,
    command: &WorkerCommand,
    request: Value,
    timeout: Duration,
    cancel: &CancellationToken,
    progress: &Progress,
) -> ToolOutcome {
    let mut args = command.args.clone();
    args.push("tool".into());
    let spec = ProcSpec {
        program: command.program.clone(),
        args,
        // The tool host builds Bash's environment itself; nothing of the
        // host's (keys included) reaches it.
        env: Vec::new(),
        cwd: existing_dir(&ctx.workspace),
        stdin: Some(request.to_string().into_bytes()),
    };
    let running = match process::spawn(&spec).await {
        Ok(r) => r,
        Err(e) => {
            return ToolOutcome::error(format!(
                "{tool}: cannot start the tool host {}: {e}",
                command.program.display()
            ));
        }
    };
    let finish = running.finish(
        ProcLimits {
            timeout: Some(timeout),
            output_limit: HOST_OUTPUT_LIMIT,
            grace: Duration::from_millis(500),
        },
        cancel,
        progress.clone(),
        None,
    );
    tokio::pin!(finish);
    // A running tool is progress (it is bounded by its own timeout): a
    // long `cargo test` is not a stalled call. The tool host answers only
    // at the end, so the host says so itself while it waits.
    let mut alive = tokio::time::interval(TOOL_ALIVE_EVERY);
    let done = loop {
        tokio::select! {
            done = &mut finish => break done,
            _ = alive.tick() => progress.report(),
        }
    };
    match done.ending {
        Ending::Cancelled => return ToolOutcome::error(format!("{tool}: cancelled")),
        Ending::TimedOut => {
            return ToolOutcome {
                status: "timeout".into(),
                output: format!(
                    "{tool}: no answer within {} s; the tool process was killed",
                    timeout.as_secs()
                ),
            };
        }
        Ending::Overflow => {
            return ToolOutcome::error(format!("{tool}: the tool host's answer was too large"));
        }
        Ending::Exited => {}
    }
    parse_answer(tool, &done.stdout, &done.stderr_tail)
}

/// Paths beneath a workspace that take effect outside a call: dsh's
/// configuration, Claude Code's and dsh's `.claude/` (agent types, saved
/// workflows), git's config and hooks.
const WATCHED: [&str; 4] = ["dsh.toml", ".claude", ".git/config", ".git/hooks"];
/// Most entries [`config_state`] records (a huge `.claude/` is not walked
/// whole on every Bash call).
const WATCHED_ENTRIES: usize = 2000;

/// The state of the [`WATCHED`] paths of `workspace`: each entry (links
/// not followed) with its kind, size and modification time.
fn config_state(workspace: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = WATCHED.iter().map(|w| workspace.join(w)).collect();
    while let Some(p) = stack.pop() {
        if out.len() >= WATCHED_ENTRIES {
            break;
        }
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let modified = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let kind = m.file_type();
        out.insert(
            p.clone(),
            format!(
                "{kind:?} {} {modified}",
                if kind.is_dir() { 0 } else { m.len() }
            ),
        );
        if kind.is_dir()
            && let Ok(entries) = std::fs::read_dir(&p)
        {
            stack.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        }
    }
    out
}

/// Says (tracing, warn) which watched paths of a workspace a Bash call
/// changed.
struct ChangeWarning<'a>(&'a Path);

impl ChangeWarning<'_> {
    fn compare(&self, before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
        let changed: Vec<String> = before
            .keys()
            .chain(after.keys().filter(|k| !before.contains_key(*k)))
            .filter(|k| before.get(*k) != after.get(*k))
            .map(|k| k.strip_prefix(self.0).unwrap_or(k).display().to_string())
            .collect();
        if changed.is_empty() {
            return;
        }
        let shown: Vec<&str> = changed.iter().take(5).map(String::as_str).collect();
        tracing::warn!(
            "a Bash tool call changed {}{} in the workspace {}: these take effect at your next \
             dsh run or git command there (dsh.toml, .claude/, .git/config, .git/hooks/); \
             review them before you run either (docs/sandbox.md, \"Tool calls\")",
            shown.join(", "),
            if changed.len() > shown.len() {
                format!(" and {} more", changed.len() - shown.len())
            } else {
                String::new()
            },
            self.0.display()
        );
    }
}

/// The tool host's answer object, or an error saying what came instead.
fn parse_answer(tool: &str, stdout: &[u8], stderr: &[u8]) -> ToolOutcome {
    let v: Value = match serde_json::from_slice(stdout) {
        Ok(v) => v,
        Err(_) => {
            let err = String::from_utf8_lossy(stderr);
            return ToolOutcome::error(format!(
                "{tool}: the tool host gave no answer{}",
                if err.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", err.trim())
                }
            ));
        }
    };
    let status = v
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("error")
        .to_string();
    let output = v
        .get("output")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    ToolOutcome { status, output }
}

/// The directory the tool process starts in: the workspace when it
/// exists (the tool host reports a missing one itself), else `/`.
fn existing_dir(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.to_path_buf()
    } else {
        PathBuf::from("/")
    }
}

/// Milliseconds since `t`.
pub fn ms_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}
