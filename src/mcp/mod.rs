//! `dsh workflow mcp`: workflows as MCP tools, for any agent that speaks
//! the Model Context Protocol (Claude Code, Codex, Qwen Code, …), over
//! stdio or, with `--http ADDR`, streamable HTTP. Built on `rmcp`, the
//! official Rust SDK.
//!
//! What it is: a front end to the commands a user runs by hand. A start
//! is `run --detach` (the run in a process of its own session, journaled
//! in a run directory, so it outlives the MCP connection and the server);
//! status, result, cancel and resume read and act on that run directory
//! as `attach`, `wait`, `cancel` and `resume` do (`detach.rs`).
//!
//! What it is not: a place where limits are negotiated. The server's
//! ceilings (`--max-runs`, `--max-agents`, `--max-timeout`) bound every
//! run a model asks for; a model may ask for less, never for more. The
//! sandbox policy is the server's (`dsh.toml`), never the caller's.
//!
//! - [`tools`]: the tools, their parameters and their answers;
//! - [`follow`]: what `workflow_status` knows of a run, read from its
//!   events as they are written;
//! - [`serve`] (this file): the flags turned into [`Options`], and the
//!   transports.

mod follow;
mod http;
mod tools;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{CliError, exit};
use crate::flags::McpArgs;

/// What the server needs from its flags, checked.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Where the runs it starts are kept.
    pub runs_root: PathBuf,
    /// The directories a `scriptPath` must be inside, canonical.
    pub allowed: Vec<PathBuf>,
    /// `--config`, passed on to every run.
    pub config: Option<PathBuf>,
    /// `--fixture`, passed on to every run.
    pub fixture: Option<PathBuf>,
    /// `--provider`, passed on to every run.
    pub provider: Option<String>,
    /// Runs this server started that may run at once.
    pub max_runs: usize,
    /// The most agent calls a run may make.
    pub max_agents: u32,
    /// The longest a run may take.
    pub max_timeout: Duration,
}

impl Options {
    fn from_args(a: &McpArgs) -> Result<Options, CliError> {
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::usage(format!("cannot read the working directory: {e}")))?;
        let dirs = if a.allow_dir.is_empty() {
            vec![cwd.clone()]
        } else {
            a.allow_dir.clone()
        };
        let allowed = dirs
            .iter()
            .map(|d| {
                std::fs::canonicalize(d)
                    .map_err(|e| CliError::usage(format!("--allow-dir {}: {e}", d.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let absolute = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                cwd.join(p)
            }
        };
        Ok(Options {
            runs_root: absolute(&crate::request::runs_root(a.runs_dir.as_deref())),
            allowed,
            config: a.config.as_deref().map(absolute),
            fixture: a.fixture.as_deref().map(absolute),
            provider: a.provider.clone(),
            max_runs: a.max_runs as usize,
            max_agents: a.max_agents,
            max_timeout: a.max_timeout,
        })
    }
}

/// `dsh workflow mcp`: serves until the client goes (stdio) or SIGTERM /
/// SIGINT (HTTP).
pub async fn serve(a: McpArgs) -> Result<i32, CliError> {
    let options = Options::from_args(&a)?;
    let server = tools::Server::new(options);
    match &a.http {
        None => {
            use rmcp::ServiceExt as _;
            let running = server
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| CliError::usage(format!("mcp: the client's handshake failed: {e}")))?;
            // The client closing stdin ends the session; runs go on.
            let _ = running.waiting().await;
            Ok(exit::COMPLETED)
        }
        Some(addr) => http::serve(server, addr, a.token_env.as_deref()).await,
    }
}
