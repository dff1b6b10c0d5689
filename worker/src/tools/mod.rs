//! The tool host: `dsh-worker tool` runs exactly one tool call of the agent
//! loop (Read, Glob, Grep, LS, Edit, Write, Bash) in its own short-lived,
//! sandboxed process, and exits.
//!
//! The host writes one JSON request on stdin and reads one JSON response
//! on stdout (the wire format is in docs/sandbox.md, "Tool calls"):
//!
//! ```json
//! {"workspace": "/abs/dir", "tool": "Read", "input": {"file_path": "src/a.rs"},
//!  "network": false, "bashTimeoutMs": 120000, "maxOutputBytes": 30000,
//!  "sandbox": "best-effort"}
//! ```
//! → `{"status": "ok" | "error" | "denied" | "sandbox-unavailable" | "timeout",
//!    "output": "...", "sandbox": {SandboxReport}}`
//!
//! Order of work: parse the request, canonicalize the workspace, apply the
//! tool's sandbox profile ([`crate::sandbox::tools`]), then run the tool,
//! whose every path goes through `paths::resolve` (the first layer:
//! nothing outside the canonical workspace is touched, with a clear
//! `denied`; Landlock is the second). Every outcome, a bad request
//! included, is a response with exit status 0: the process exits non-zero
//! only when stdout cannot be written.
//!
//! The allocator's exit-on-failure is deliberately not armed here: tool
//! mode sets no data rlimit, so a failed allocation is a real out-of-memory
//! and Rust's abort (the host sees a signal, not a response) is accurate.

mod bash;
mod files;
pub(crate) mod paths;
mod search;

use std::io::{Read, Write};
use std::path::PathBuf;

use dsh_protocol::{SandboxLevel, SandboxPolicy, SandboxReport};
use serde::{Deserialize, Serialize};

/// The largest request read from stdin.
pub const MAX_REQUEST_BYTES: u64 = 16 * 1024 * 1024;

/// Defaults of the request's optional fields.
pub const DEFAULT_BASH_TIMEOUT_MS: u64 = 120_000;
/// dsh's configuration file's name (the orchestrator's `config::FILE_NAME`;
/// the worker does not depend on the orchestrator): Edit and Write never
/// change one.
pub const CONFIG_FILE_NAME: &str = "dsh.toml";
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 30_000;

/// The tool request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    workspace: PathBuf,
    tool: String,
    #[serde(default)]
    input: serde_json::Value,
    #[serde(default)]
    network: bool,
    #[serde(default = "default_bash_timeout")]
    bash_timeout_ms: u64,
    #[serde(default = "default_max_output")]
    max_output_bytes: usize,
    #[serde(default = "default_policy", deserialize_with = "policy")]
    sandbox: SandboxPolicy,
    /// Bash only: directories it may read beneath besides the workspace
    /// (a worktree's repository: its git directory).
    #[serde(default)]
    shell_read: Vec<PathBuf>,
    /// Bash only: directories it may change beneath besides the workspace
    /// (a worktree's own git directory and the object store).
    #[serde(default)]
    shell_write: Vec<PathBuf>,
}

fn default_bash_timeout() -> u64 {
    DEFAULT_BASH_TIMEOUT_MS
}

fn default_max_output() -> usize {
    DEFAULT_MAX_OUTPUT_BYTES
}

fn default_policy() -> SandboxPolicy {
    SandboxPolicy::BestEffort
}

/// Accepts both spellings of a policy: the users' (`strict`,
/// `best-effort`, `off`, as `--sandbox` and docs write it) and
/// dsh_protocol's serde names (`Strict`, `BestEffort`, `Off`, as a host
/// serializing a `SandboxPolicy` writes it).
fn policy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SandboxPolicy, D::Error> {
    let s = String::deserialize(d)?;
    if let Ok(p) = s.parse::<SandboxPolicy>() {
        return Ok(p);
    }
    serde_json::from_value(serde_json::Value::String(s)).map_err(serde::de::Error::custom)
}

/// How a call ended, as the response's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Ok,
    Error,
    Denied,
    SandboxUnavailable,
    Timeout,
}

/// The one response object.
#[derive(Debug, Serialize)]
struct Response {
    status: Status,
    output: String,
    sandbox: SandboxReport,
}

/// A tool call that did not do its job, with the text the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// A tool-level error (bad input, file not found, not unique, …).
    #[error("{0}")]
    Error(String),
    /// The call tried to reach outside the workspace.
    #[error("{0}")]
    Denied(String),
}

impl ToolError {
    pub(crate) fn error(msg: impl Into<String>) -> Self {
        ToolError::Error(msg.into())
    }

    fn status(&self) -> Status {
        match self {
            ToolError::Error(_) => Status::Error,
            ToolError::Denied(_) => Status::Denied,
        }
    }
}

/// What a tool returns when it ran: a status (`ok`, or `timeout` for Bash)
/// and the output.
pub(crate) struct Done {
    pub status: Status,
    pub output: String,
}

impl Done {
    pub(crate) fn ok(output: impl Into<String>) -> Self {
        Done {
            status: Status::Ok,
            output: output.into(),
        }
    }
}

/// Everything a tool needs besides its input.
pub(crate) struct Ctx {
    /// The canonical workspace.
    pub workspace: PathBuf,
    pub network: bool,
    pub bash_timeout_ms: u64,
    pub max_output_bytes: usize,
    pub sandboxed: bool,
    /// Bash's private temporary directory, when it got one.
    pub tmp_dir: Option<PathBuf>,
    /// Bash only: extra directories to read beneath (see the request).
    pub shell_read: Vec<PathBuf>,
    /// Bash only: extra directories to change beneath.
    pub shell_write: Vec<PathBuf>,
}

/// The absolute directories of `paths` that exist (a missing one is left
/// out: Landlock cannot grant it).
fn existing_dirs(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| p.is_absolute() && p.is_dir())
        .cloned()
        .collect()
}

/// The tools, by the names the model calls them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Read,
    Glob,
    Grep,
    Ls,
    Edit,
    Write,
    Bash,
}

impl Tool {
    const ALL: [(&'static str, Tool); 7] = [
        ("Read", Tool::Read),
        ("Glob", Tool::Glob),
        ("Grep", Tool::Grep),
        ("LS", Tool::Ls),
        ("Edit", Tool::Edit),
        ("Write", Tool::Write),
        ("Bash", Tool::Bash),
    ];

    fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    #[cfg(target_os = "linux")]
    fn grants(self) -> crate::sandbox::tools::Grants {
        use crate::sandbox::tools::Grants;
        match self {
            Tool::Read | Tool::Glob | Tool::Grep | Tool::Ls => Grants::ReadWorkspace,
            Tool::Edit | Tool::Write => Grants::WriteWorkspace,
            Tool::Bash => Grants::Shell,
        }
    }
}

/// Parses a tool's input into its typed form; a bad field is an `error`
/// naming it and the expected shape.
pub(crate) fn input<T: serde::de::DeserializeOwned>(
    tool: &str,
    input: &serde_json::Value,
    expected: &str,
) -> Result<T, ToolError> {
    serde_json::from_value(input.clone()).map_err(|e| {
        ToolError::error(format!(
            "{tool}: invalid input: {e}; expected {{{expected}}}"
        ))
    })
}

/// Entry point of `dsh-worker tool` (no arguments); returns the exit
/// status. `landlock_abi_override` is the testing switch
/// `DSH_WORKER_TESTING=landlock-abi=N` (read by the caller).
pub fn main(args: &[String], landlock_abi_override: Option<u32>) -> i32 {
    let usage = args
        .first()
        .map(|other| format!("unknown argument {other:?} to `dsh-worker tool`"));
    let response = match usage {
        Some(msg) => refusal(Status::Error, msg),
        None => run(landlock_abi_override),
    };
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut out, &response)
        .map_err(std::io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dsh-worker tool: cannot write the response: {e}");
            1
        }
    }
}

/// A response from before any sandbox layer was tried.
fn refusal(status: Status, output: String) -> Response {
    Response {
        status,
        output,
        sandbox: unsandboxed(),
    }
}

fn unsandboxed() -> SandboxReport {
    SandboxReport {
        level: SandboxLevel::None,
        landlock_abi: None,
        enforced: Vec::new(),
        missing: Vec::new(),
    }
}

fn run(landlock_abi_override: Option<u32>) -> Response {
    let (req, tool, workspace) = match read_request() {
        Ok(checked) => checked,
        Err(Refused(message)) => return refusal(Status::Error, message),
    };
    // Held (with its lock) until the call is over.
    let tmp = if tool == Tool::Bash {
        bash::make_tmp_dir()
    } else {
        None
    };
    let ctx = Ctx {
        workspace,
        network: req.network,
        bash_timeout_ms: req.bash_timeout_ms,
        max_output_bytes: req.max_output_bytes.max(1),
        sandboxed: req.sandbox != SandboxPolicy::Off,
        tmp_dir: tmp.as_ref().map(|t| t.path.clone()),
        shell_read: existing_dirs(&req.shell_read),
        shell_write: existing_dirs(&req.shell_write),
    };
    let sandbox = match apply_sandbox(req.sandbox, tool, &ctx, landlock_abi_override) {
        Ok(r) => r,
        Err(reached) => {
            let output = format!(
                "{} refused: sandbox policy \"strict\" requires the full tool sandbox, and this kernel/platform does not enforce: {}. The tool did not run (see docs/sandbox.md, \"Tool calls\")",
                req.tool,
                reached.missing.join("; ")
            );
            bash::remove_tmp_dir(tmp);
            return Response {
                status: Status::SandboxUnavailable,
                output,
                sandbox: reached,
            };
        }
    };
    let result = match tool {
        Tool::Read => files::read(&ctx, &req.input),
        Tool::Ls => files::ls(&ctx, &req.input),
        Tool::Edit => files::edit(&ctx, &req.input),
        Tool::Write => files::write(&ctx, &req.input),
        Tool::Glob => search::glob(&ctx, &req.input),
        Tool::Grep => search::grep(&ctx, &req.input),
        Tool::Bash => bash::run(&ctx, &req.input),
    };
    bash::remove_tmp_dir(tmp);
    match result {
        Ok(done) => Response {
            status: done.status,
            output: done.output,
            sandbox,
        },
        Err(e) => Response {
            status: e.status(),
            output: e.to_string(),
            sandbox,
        },
    }
}

/// Why a request was refused before anything ran (`Status::Error`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

/// The request on stdin, read (bounded), parsed and checked: its tool, and
/// its workspace made canonical.
fn read_request() -> Result<(Request, Tool, PathBuf), Refused> {
    let mut raw = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut raw)
    {
        return Err(Refused(format!("cannot read the request: {e}")));
    }
    if raw.len() as u64 > MAX_REQUEST_BYTES {
        return Err(Refused(format!(
            "the request is larger than {MAX_REQUEST_BYTES} bytes"
        )));
    }
    let req: Request = match serde_json::from_slice(&raw) {
        Ok(r) => r,
        Err(e) => return Err(Refused(format!("invalid tool request: {e}"))),
    };
    drop(raw);
    let Some(tool) = Tool::parse(&req.tool) else {
        let known: Vec<&str> = Tool::ALL.iter().map(|(n, _)| *n).collect();
        return Err(Refused(format!(
            "unknown tool {:?}: expected one of {}",
            req.tool,
            known.join(", ")
        )));
    };
    if !req.workspace.is_absolute() {
        return Err(Refused(format!(
            "invalid tool request: workspace {} is not an absolute path",
            req.workspace.display()
        )));
    }
    // Canonical once, here: every path check compares canonical paths
    // against it (`paths::resolve`, `paths::writable`).
    let workspace = match std::fs::canonicalize(&req.workspace) {
        Ok(w) if w.is_dir() => w,
        Ok(_) => {
            return Err(Refused(format!(
                "workspace {} is not a directory",
                req.workspace.display()
            )));
        }
        Err(e) => {
            return Err(Refused(format!(
                "workspace {}: {e}",
                req.workspace.display()
            )));
        }
    };
    Ok((req, tool, workspace))
}

/// Applies the tool profile under `policy`: `Err` carries the report of
/// what was reached when `strict` finds it short of full.
#[cfg(target_os = "linux")]
fn apply_sandbox(
    policy: SandboxPolicy,
    tool: Tool,
    ctx: &Ctx,
    landlock_abi_override: Option<u32>,
) -> Result<SandboxReport, SandboxReport> {
    use crate::sandbox::{Tally, tools};
    if policy == SandboxPolicy::Off {
        return Ok(Tally::default().into_report());
    }
    let profile = tools::Profile {
        grants: tool.grants(),
        workspace: ctx.workspace.clone(),
        tmp_dir: ctx.tmp_dir.clone(),
        shell_read: ctx.shell_read.clone(),
        shell_write: ctx.shell_write.clone(),
        network: ctx.network,
        cpu_secs: (tool == Tool::Bash).then(|| {
            ctx.bash_timeout_ms
                .div_ceil(1000)
                .saturating_add(tools::CPU_MARGIN_SECS)
        }),
        landlock_abi_override,
    };
    let mut t = Tally::default();
    tools::apply(&profile, &mut t);
    let report = t.into_report();
    if policy == SandboxPolicy::Strict && report.level != SandboxLevel::Full {
        return Err(report);
    }
    Ok(report)
}

#[cfg(not(target_os = "linux"))]
fn apply_sandbox(
    policy: SandboxPolicy,
    _tool: Tool,
    _ctx: &Ctx,
    _landlock_abi_override: Option<u32>,
) -> Result<SandboxReport, SandboxReport> {
    let mut report = unsandboxed();
    if policy == SandboxPolicy::Off {
        return Ok(report);
    }
    report
        .missing
        .push("all layers (the tool sandbox is implemented for Linux only)".into());
    if policy == SandboxPolicy::Strict {
        return Err(report);
    }
    Ok(report)
}

/// Cuts `text` to at most `max` bytes (on a character boundary), appending
/// `note` when it was cut. Returns whether it was.
pub(crate) fn cap_output(text: &mut String, max: usize, note: impl FnOnce() -> String) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&note());
    true
}

/// Cuts one line at `max` characters (minified files, long data lines).
pub(crate) fn cut_line(line: &str, max: usize) -> &str {
    match line.char_indices().nth(max) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_of_a_policy_are_accepted() {
        for (s, p) in [
            ("strict", SandboxPolicy::Strict),
            ("best-effort", SandboxPolicy::BestEffort),
            ("off", SandboxPolicy::Off),
            ("Strict", SandboxPolicy::Strict),
            ("BestEffort", SandboxPolicy::BestEffort),
        ] {
            let r: Request = serde_json::from_value(serde_json::json!({
                "workspace": "/w", "tool": "Read", "sandbox": s
            }))
            .unwrap();
            assert_eq!(r.sandbox, p);
        }
        let r: Request =
            serde_json::from_value(serde_json::json!({"workspace": "/w", "tool": "Read"})).unwrap();
        assert_eq!(r.sandbox, SandboxPolicy::BestEffort);
        assert_eq!(r.bash_timeout_ms, DEFAULT_BASH_TIMEOUT_MS);
        assert_eq!(r.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
    }

    #[test]
    fn capping_respects_char_boundaries() {
        let mut s = "ééé".to_string();
        assert!(cap_output(&mut s, 3, || "[cut]".into()));
        assert_eq!(s, "é\n[cut]");
        assert_eq!(cut_line("abcdef", 3), "abc");
        assert_eq!(cut_line("ab", 3), "ab");
    }
}
