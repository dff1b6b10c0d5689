//! Qwen Code (`qwen`, headless): its command line. Its `stream-json` is
//! Claude Code's format (see [`super::claude::Lines`], which reads both):
//! `system`/`init` with the session id, `assistant` messages with
//! `tool_use` blocks and usage, `user` messages with `tool_result`s, and
//! a `result` line with `usage`, the final text and, under
//! `--json-schema`, `structured_result`. It reports no cost.
//!
//! Tool names differ from Claude Code's; the call's `disallowedTools` and
//! an agent type's `tools` are written in Claude Code's names (scripts
//! are), so they are translated ([`qwen_tool`]).

use super::{Invocation, SessionUse};

/// The arguments after the program.
pub(super) fn args(inv: &Invocation<'_>) -> Vec<String> {
    let req = inv.request;
    let mut a: Vec<String> = [
        "--output-format",
        "stream-json",
        // Token deltas as they stream: progress for `stallMs`.
        "--include-partial-messages",
    ]
    .map(String::from)
    .to_vec();
    a.extend(inv.cfg.extra_args.iter().cloned());
    match &inv.session {
        SessionUse::Fresh { id: Some(id) } => a.extend(["--session-id".into(), id.clone()]),
        SessionUse::Fresh { id: None } => {}
        SessionUse::Resume { id } => a.extend(["--resume".into(), id.clone()]),
    }
    if let Some(m) = inv.model() {
        a.extend(["-m".into(), m.to_string()]);
    }
    if let Some(p) = &inv.cfg.permission_mode {
        a.extend(["--approval-mode".into(), p.clone()]);
    }
    if !inv.cfg.allowed_tools.is_empty() {
        a.push(format!(
            "--allowed-tools={}",
            inv.cfg.allowed_tools.join(",")
        ));
    }
    if !req.disallowed_tools.is_empty() {
        let t: Vec<&str> = req.disallowed_tools.iter().map(|t| qwen_tool(t)).collect();
        a.push(format!("--exclude-tools={}", t.join(",")));
    }
    if let Some(tools) = req.tools.as_ref().filter(|t| !t.is_empty()) {
        let t: Vec<&str> = tools.iter().map(|t| qwen_tool(t)).collect();
        a.push(format!("--core-tools={}", t.join(",")));
    }
    if let Some(sp) = req
        .system_prompt
        .as_deref()
        .filter(|p| !p.trim().is_empty())
    {
        a.extend(["--append-system-prompt".into(), sp.to_string()]);
    }
    if let Some(schema) = &req.schema {
        a.extend(["--json-schema".into(), schema.to_string()]);
    }
    a
}

/// Qwen Code's name of a tool Claude Code calls `name`; other names pass
/// as they are (a Qwen Code name already, or an MCP tool's).
pub(super) fn qwen_tool(name: &str) -> &str {
    match name {
        "Bash" => "run_shell_command",
        "Read" => "read_file",
        "Write" => "write_file",
        "Edit" | "MultiEdit" => "edit",
        "Glob" => "glob",
        "Grep" => "grep_search",
        "LS" => "list_directory",
        "WebFetch" => "web_fetch",
        "WebSearch" => "web_search",
        "NotebookEdit" => "notebook_edit",
        "Task" | "Agent" => "agent",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::CliConfig;
    use dsh_seam::AgentRequest;

    #[test]
    fn claude_codes_tool_names_are_translated() {
        let mut req = AgentRequest::new(1, "p", "l");
        req.disallowed_tools = vec!["Bash".into(), "mcp__x__y".into()];
        req.tools = Some(vec!["Read".into(), "Grep".into(), "Glob".into()]);
        req.system_prompt = Some("Read only.".into());
        let cfg = CliConfig {
            permission_mode: Some("yolo".into()),
            ..CliConfig::default()
        };
        let a = args(&Invocation {
            request: &req,
            cfg: &cfg,
            session: SessionUse::Resume { id: "s".into() },
            schema_file: None,
        });
        let joined = a.join(" ");
        assert!(
            joined.contains("--exclude-tools=run_shell_command,mcp__x__y"),
            "{joined}"
        );
        assert!(
            joined.contains("--core-tools=read_file,grep_search,glob"),
            "{joined}"
        );
        assert!(joined.contains("--approval-mode yolo"), "{joined}");
        assert!(joined.contains("--resume s"), "{joined}");
        assert!(
            joined.contains("--append-system-prompt Read only."),
            "{joined}"
        );
    }
}
