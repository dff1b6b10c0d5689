//! Codex (`codex exec --json`): its command line and its JSON lines.
//!
//! ```text
//! {"type":"thread.started","thread_id":"01a2…"}
//! {"type":"turn.started"}
//! {"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'cat a'","status":"in_progress"}}
//! {"type":"item.completed","item":{"id":"item_1","type":"command_execution","aggregated_output":"…","exit_code":0,"status":"completed"}}
//! {"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/…/out.txt","kind":"add"}],"status":"completed"}}
//! {"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"…"}}
//! {"type":"turn.completed","usage":{"input_tokens":1534,"cached_input_tokens":1030,"output_tokens":116}}
//! {"type":"turn.failed","error":{"message":"…"}}          {"type":"error","message":"Reconnecting… 1/5"}
//! ```
//!
//! Its usage is the thread's total, across resumes (see
//! [`Observed::usage_is_session_total`]); it reports no cost. Its schema
//! (`--output-schema`) goes to the model in OpenAI's strict mode, which
//! takes only schemas whose objects close their properties
//! (`additionalProperties: false`) and require all of them: any other
//! schema goes in the prompt instead ([`strict_ready`]).

use std::collections::HashMap;

use serde_json::Value;

use super::stream::{Dialect, Observed, cut, detail_of};
use super::{Invocation, SessionUse};
use dsh_seam::{Activity, Progress, Usage};

/// Tools that change files or run commands; an agent type whose tools
/// include none of them runs in Codex's read-only sandbox.
const WRITING_TOOLS: [&str; 4] = ["Edit", "Write", "Bash", "NotebookEdit"];

/// The arguments after the program.
pub(super) fn args(inv: &Invocation<'_>) -> Vec<String> {
    let req = inv.request;
    let mut a: Vec<String> = vec!["exec".into()];
    if let SessionUse::Resume { .. } = inv.session {
        a.push("resume".into());
    }
    a.extend(
        [
            "--json",
            // dsh runs it where the caller says, repository or not.
            "--skip-git-repo-check",
            // A refused connection is retried forever otherwise, printing
            // retry notices that would keep `stallMs` from ever firing.
            "--disable",
            "unbounded_connection_retries",
        ]
        .map(String::from),
    );
    a.extend(inv.cfg.extra_args.iter().cloned());
    if let Some(m) = inv.model() {
        a.extend(["-m".into(), m.to_string()]);
    }
    if let Some(e) = &req.options.effort {
        // Codex's highest is `xhigh`.
        let e = if e == "max" { "xhigh" } else { e.as_str() };
        a.extend(["-c".into(), format!("model_reasoning_effort=\"{e}\"")]);
    }
    if let Some(mode) = sandbox(inv) {
        // `exec resume` has no `-s`: the same setting as a config value.
        a.extend(["-c".into(), format!("sandbox_mode=\"{mode}\"")]);
    }
    if let Some(f) = inv.schema_file {
        a.extend(["--output-schema".into(), f.to_string_lossy().into_owned()]);
    }
    if let SessionUse::Resume { id } = &inv.session {
        a.push(id.clone());
    }
    // The prompt on stdin.
    a.push("-".into());
    a
}

/// The sandbox mode: read-only for an agent type that may not write,
/// else the table's `permission_mode`.
fn sandbox<'a>(inv: &'a Invocation<'_>) -> Option<&'a str> {
    let read_only = inv
        .request
        .tools
        .as_ref()
        .is_some_and(|t| !t.iter().any(|t| WRITING_TOOLS.contains(&t.as_str())));
    if read_only {
        Some("read-only")
    } else {
        inv.cfg.permission_mode.as_deref()
    }
}

/// Whether OpenAI's strict structured output takes `schema` as it is:
/// every object schema lists its properties, requires all of them and
/// allows no others.
pub(super) fn strict_ready(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            let is_object = m.get("type").and_then(Value::as_str) == Some("object")
                || m.contains_key("properties");
            if is_object {
                if m.get("additionalProperties") != Some(&Value::Bool(false)) {
                    return false;
                }
                let props: Vec<&String> = m
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().collect())
                    .unwrap_or_default();
                let required: Vec<&str> = m
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if props.iter().any(|p| !required.contains(&p.as_str())) {
                    return false;
                }
            }
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "enum" | "const" | "default" | "examples"))
                .all(|(_, v)| strict_ready(v))
        }
        Value::Array(items) => items.iter().all(strict_ready),
        _ => true,
    }
}

/// Codex's `--json` lines.
#[derive(Default)]
pub(super) struct Lines {
    /// Items started and not yet completed: id → (tool, when).
    running: HashMap<String, (String, std::time::Instant)>,
}

/// Most items remembered while running.
const MAX_RUNNING: usize = 1024;

/// The tool an item stands for, and what it was called on; `None` for
/// items that are not tool calls.
fn tool_of(item: &Value) -> Option<(String, String)> {
    match item["type"].as_str()? {
        "command_execution" => Some(("shell".into(), command_detail(&item["command"]))),
        "file_change" => Some((
            "apply_patch".into(),
            cut(
                &item["changes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["path"].as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                120,
            ),
        )),
        "mcp_tool_call" => Some((
            format!(
                "{}/{}",
                item["server"].as_str().unwrap_or("mcp"),
                item["tool"].as_str().unwrap_or("?")
            ),
            detail_of(&item["arguments"]),
        )),
        "web_search" => Some((
            "web_search".into(),
            cut(item["query"].as_str().unwrap_or_default(), 120),
        )),
        _ => None,
    }
}

/// A command as Codex shows it (`/bin/bash -lc 'cmd'`), without the shell
/// around it.
fn command_detail(c: &Value) -> String {
    let s = match c {
        Value::String(s) => s.clone(),
        other => detail_of(&serde_json::json!({ "command": other })),
    };
    let inner = s
        .strip_prefix("/bin/bash -lc ")
        .or_else(|| s.strip_prefix("bash -lc "))
        .map(|r| r.trim_matches('\''))
        .unwrap_or(&s);
    cut(inner, 120)
}

impl Lines {
    fn item(&mut self, v: &Value, started: bool, seen: &mut Observed, progress: &Progress) {
        let item = &v["item"];
        let id = item["id"].as_str().unwrap_or_default().to_string();
        if item["type"] == "agent_message" {
            if !started && let Some(t) = item["text"].as_str() {
                seen.text = Some(t.to_string());
            }
            return;
        }
        let Some((tool, detail)) = tool_of(item) else {
            return;
        };
        // A call shows once, when it starts (items that only complete —
        // a file change can — start and end at once).
        let at = match self.running.remove(&id) {
            Some((_, at)) => at,
            None => {
                progress.activity(Activity::ToolCall {
                    tool: tool.clone(),
                    detail,
                });
                std::time::Instant::now()
            }
        };
        if started {
            if self.running.len() < MAX_RUNNING {
                self.running.insert(id, (tool, at));
            }
            return;
        }
        let status = item["status"].as_str().unwrap_or("completed");
        let failed = matches!(status, "failed" | "declined")
            || item["exit_code"].as_i64().is_some_and(|c| c != 0);
        progress.activity(Activity::ToolEnd {
            tool,
            status: if status == "declined" {
                "denied"
            } else if failed {
                "error"
            } else {
                "ok"
            }
            .into(),
            ms: u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX),
            message: failed.then(|| {
                let out = item["aggregated_output"].as_str().unwrap_or_default();
                let tail: String = {
                    let chars: Vec<char> = out.chars().collect();
                    chars[chars.len().saturating_sub(200)..].iter().collect()
                };
                match item["exit_code"].as_i64() {
                    Some(c) => cut(&format!("exit code {c}: {tail}"), 200),
                    None => cut(&tail, 200),
                }
            }),
        });
    }
}

impl Dialect for Lines {
    fn line(&mut self, v: &Value, seen: &mut Observed, progress: &Progress) {
        match v["type"].as_str() {
            Some("thread.started") => {
                if let Some(id) = v["thread_id"].as_str() {
                    seen.session = Some(id.to_string());
                }
            }
            Some("turn.started") => {
                seen.turns += 1;
                progress.activity(Activity::Turn { turn: seen.turns });
            }
            Some("item.started") => self.item(v, true, seen, progress),
            Some("item.completed") => self.item(v, false, seen, progress),
            Some("turn.completed") => {
                seen.finished = true;
                seen.usage_is_session_total = true;
                if let Some(u) = usage_of(&v["usage"]) {
                    seen.usage = Some(u);
                    progress.activity(Activity::Tokens { usage: u });
                }
            }
            Some("turn.failed") => {
                seen.finished = true;
                seen.error = Some(cut(
                    v["error"]["message"].as_str().unwrap_or("the turn failed"),
                    2000,
                ));
            }
            // Not fatal by itself: Codex reports its retries this way.
            Some("error") => progress.activity(Activity::Retry {
                attempt: 0,
                reason: cut(v["message"].as_str().unwrap_or("an error"), 200),
                partial: false,
            }),
            _ => {}
        }
    }
}

/// `turn.completed`'s usage: input counts the cached tokens.
fn usage_of(u: &Value) -> Option<Usage> {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    u.is_object().then(|| Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_read: n("cached_input_tokens"),
        cache_write: n("cache_write_input_tokens"),
        cost_usd: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[test]
    fn a_turn_with_a_command_a_patch_and_an_answer() {
        let progress = Progress::new();
        let mut d = Lines::default();
        let mut seen = Observed::default();
        for l in [
            json!({"type":"thread.started","thread_id":"t-1"}),
            json!({"type":"turn.started"}),
            json!({"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'cat hello.txt'","status":"in_progress"}}),
            json!({"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'cat hello.txt'","aggregated_output":"hi\n","exit_code":0,"status":"completed"}}),
            json!({"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/w/out.txt","kind":"add"}],"status":"completed"}}),
            json!({"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"/bin/bash -lc 'false'","status":"in_progress"}}),
            json!({"type":"item.completed","item":{"id":"item_3","type":"command_execution","command":"/bin/bash -lc 'false'","aggregated_output":"","exit_code":1,"status":"failed"}}),
            json!({"type":"error","message":"Reconnecting... 1/5"}),
            json!({"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"{\"ok\":true}"}}),
            json!({"type":"turn.completed","usage":{"input_tokens":1534,"cached_input_tokens":1030,"output_tokens":116}}),
        ] {
            d.line(&l, &mut seen, &progress);
        }
        assert_eq!(seen.session.as_deref(), Some("t-1"));
        assert!(seen.finished && seen.usage_is_session_total);
        assert_eq!(seen.text.as_deref(), Some("{\"ok\":true}"));
        let u = seen.usage.expect("usage");
        assert_eq!((u.input, u.output, u.cache_read), (1534, 116, 1030));
        let acts: Vec<String> = progress
            .take_activities()
            .into_iter()
            .map(|a| match a {
                Activity::Turn { turn } => format!("turn {turn}"),
                Activity::ToolCall { tool, detail } => format!("call {tool} {detail}"),
                Activity::ToolEnd { tool, status, .. } => format!("end {tool} {status}"),
                Activity::Retry { reason, .. } => format!("retry {reason}"),
                Activity::Tokens { usage } => format!("tokens {}", usage.output),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            acts,
            [
                "turn 1",
                "call shell cat hello.txt",
                "end shell ok",
                "call apply_patch /w/out.txt",
                "end apply_patch ok",
                "call shell false",
                "end shell error",
                "retry Reconnecting... 1/5",
                "tokens 116"
            ]
        );
    }

    #[test]
    fn a_calls_options_become_codexs_flags_fresh_and_resumed() {
        use crate::cli::CliConfig;
        use dsh_seam::AgentRequest;
        let mut req = AgentRequest::new(1, "p", "l");
        req.options.model = Some("gpt-5.5".into());
        req.options.effort = Some("max".into());
        let cfg = CliConfig {
            permission_mode: Some("workspace-write".into()),
            extra_args: vec!["--disable".into(), "plugins".into()],
            ..CliConfig::default()
        };
        let schema = std::path::Path::new("/tmp/s.json");
        let fresh = args(&Invocation {
            request: &req,
            cfg: &cfg,
            session: SessionUse::Fresh { id: None },
            schema_file: Some(schema),
        })
        .join(" ");
        assert_eq!(
            fresh,
            "exec --json --skip-git-repo-check --disable unbounded_connection_retries --disable \
             plugins -m gpt-5.5 -c model_reasoning_effort=\"xhigh\" -c \
             sandbox_mode=\"workspace-write\" --output-schema /tmp/s.json -"
        );
        let resumed = args(&Invocation {
            request: &req,
            cfg: &cfg,
            session: SessionUse::Resume { id: "t-1".into() },
            schema_file: None,
        })
        .join(" ");
        assert!(resumed.starts_with("exec resume --json"), "{resumed}");
        assert!(resumed.ends_with("t-1 -"), "{resumed}");
        // A read-only agent type runs in the read-only sandbox.
        req.tools = Some(vec!["Read".into(), "Grep".into()]);
        let ro = args(&Invocation {
            request: &req,
            cfg: &cfg,
            session: SessionUse::Fresh { id: None },
            schema_file: None,
        })
        .join(" ");
        assert!(ro.contains("sandbox_mode=\"read-only\""), "{ro}");
    }

    #[test]
    fn a_failed_turn_says_why() {
        let mut seen = Observed::default();
        Lines::default().line(
            &json!({"type":"turn.failed","error":{"message":"unexpected status 401"}}),
            &mut seen,
            &Progress::new(),
        );
        assert_eq!(seen.error.as_deref(), Some("unexpected status 401"));
    }

    #[rstest]
    #[case::closed(json!({"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}), true)]
    #[case::open(json!({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}), false)]
    #[case::optional(json!({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}), false)]
    #[case::nested_open(json!({"type":"object","properties":{"xs":{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}},"required":["xs"],"additionalProperties":false}), false)]
    #[case::nested_closed(json!({"type":"object","properties":{"xs":{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}}},"required":["xs"],"additionalProperties":false}), true)]
    #[case::enum_values_are_data(json!({"type":"object","properties":{"k":{"enum":[{"properties":1}]}},"required":["k"],"additionalProperties":false}), true)]
    fn strictness(#[case] schema: Value, #[case] ready: bool) {
        assert_eq!(strict_ready(&schema), ready);
    }
}
