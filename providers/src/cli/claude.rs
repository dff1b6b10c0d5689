//! Claude Code (`claude -p`): its command line, and its `stream-json`
//! output — which Qwen Code writes too (its `structured_result`, `error`
//! and `system`/`retry` are read here as well).
//!
//! ```text
//! {"type":"system","subtype":"init","session_id":"…","model":"…","tools":[…]}
//! {"type":"stream_event","event":{"type":"content_block_delta",…}}      (--include-partial-messages)
//! {"type":"assistant","message":{"id":"msg_…","content":[{"type":"tool_use","name":"Read","input":{…}}],"usage":{…}}}
//! {"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"…","is_error":false,"content":"…"}]}}
//! {"type":"result","subtype":"success","is_error":false,"result":"…","structured_output":{…},
//!  "usage":{…},"total_cost_usd":0.01,"model_usage_since_last_result":{"<model>":{"costUSD":…}},"num_turns":4,"session_id":"…"}
//! ```

use std::collections::HashMap;

use serde_json::{Value, json};

use super::stream::{Dialect, Observed, content_text, cut, detail_of};
use super::{Invocation, SessionUse};
use dsh_seam::{Activity, AgentTypeOrigin, Progress, Usage};

/// The arguments after the program.
pub(super) fn args(inv: &Invocation<'_>) -> Vec<String> {
    let req = inv.request;
    let mut a: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        // Token deltas as they stream: what `stallMs` watches during a
        // long answer, and tokens so far.
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
        a.extend(["--model".into(), m.to_string()]);
    }
    if let Some(e) = &req.options.effort {
        a.extend(["--effort".into(), e.clone()]);
    }
    if let Some(p) = &inv.cfg.permission_mode {
        a.extend(["--permission-mode".into(), p.clone()]);
    }
    // Variadic options: each value its own argument (a rule such as
    // `Bash(git *)` has a space in it); the next option ends the list.
    if !inv.cfg.allowed_tools.is_empty() {
        a.push("--allowedTools".into());
        a.extend(inv.cfg.allowed_tools.iter().cloned());
    }
    if !req.disallowed_tools.is_empty() {
        a.push("--disallowedTools".into());
        a.extend(req.disallowed_tools.iter().cloned());
    }
    if let (Some(name), Some(origin)) = (&req.options.agent_type, req.agent_type_origin) {
        match origin {
            // Claude Code's own definition of its built-in type.
            AgentTypeOrigin::BuiltIn => a.extend(["--agent".into(), name.clone()]),
            AgentTypeOrigin::Defined => {
                if let Some(prompt) = req
                    .system_prompt
                    .as_deref()
                    .filter(|p| !p.trim().is_empty())
                {
                    let mut def = json!({
                        "description": format!("agent type {name} (dsh)"),
                        "prompt": prompt,
                    });
                    if let Some(tools) = &req.tools {
                        def["tools"] = json!(tools);
                    }
                    a.extend([
                        "--agents".into(),
                        json!({ name: def }).to_string(),
                        "--agent".into(),
                        name.clone(),
                    ]);
                }
            }
        }
    } else if let Some(sp) = req
        .system_prompt
        .as_deref()
        .filter(|p| !p.trim().is_empty())
    {
        a.extend(["--append-system-prompt".into(), sp.to_string()]);
    }
    if let Some(schema) = &req.schema {
        a.extend(["--json-schema".into(), schema.to_string()]);
    }
    if let Some(cap) = inv.cost_cap() {
        a.extend(["--max-budget-usd".into(), format!("{cap:.6}")]);
    }
    a
}

/// Claude Code's `stream-json` lines.
#[derive(Default)]
pub(super) struct Lines {
    /// The assistant message being streamed, and its usage so far.
    current: Option<(String, Usage)>,
    /// The usage of the earlier messages.
    done: Usage,
    /// Tool calls waiting for their result: id → (name, when).
    pending: HashMap<String, (String, std::time::Instant)>,
}

/// Most tool calls remembered while waiting for their results.
const MAX_PENDING: usize = 1024;

impl Lines {
    fn assistant(&mut self, v: &Value, seen: &mut Observed, progress: &Progress) {
        let msg = &v["message"];
        let id = msg["id"].as_str().unwrap_or_default();
        let top = v.get("parent_tool_use_id").is_none_or(Value::is_null);
        let new = self.current.as_ref().is_none_or(|(c, _)| c != id);
        if new {
            if let Some((_, u)) = self.current.take() {
                self.done = self.done.plus(u);
            }
            self.current = Some((id.to_string(), Usage::new(0, 0)));
            if top {
                seen.turns += 1;
                progress.activity(Activity::Turn { turn: seen.turns });
            }
        }
        if let Some(u) = usage_of(&msg["usage"])
            && let Some((_, cur)) = self.current.as_mut()
            && *cur != u
        {
            *cur = u;
            progress.activity(Activity::Tokens {
                usage: self.done.plus(u),
            });
        }
        for block in msg["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_use" {
                let name = block["name"].as_str().unwrap_or("?").to_string();
                if self.pending.len() < MAX_PENDING
                    && let Some(tid) = block["id"].as_str()
                {
                    self.pending
                        .insert(tid.to_string(), (name.clone(), std::time::Instant::now()));
                }
                progress.activity(Activity::ToolCall {
                    detail: detail_of(&block["input"]),
                    tool: name,
                });
            }
        }
    }

    fn user(&mut self, v: &Value, progress: &Progress) {
        for block in v["message"]["content"].as_array().into_iter().flatten() {
            if block["type"] != "tool_result" {
                continue;
            }
            let Some((tool, at)) = block["tool_use_id"]
                .as_str()
                .and_then(|id| self.pending.remove(id))
            else {
                continue;
            };
            let failed = block["is_error"].as_bool().unwrap_or(false);
            progress.activity(Activity::ToolEnd {
                tool,
                status: if failed { "error" } else { "ok" }.into(),
                ms: u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX),
                message: failed.then(|| cut(&content_text(&block["content"]), 200)),
            });
        }
    }

    fn result(&mut self, v: &Value, seen: &mut Observed) {
        seen.finished = true;
        if let Some(s) = v["session_id"].as_str() {
            seen.session = Some(s.to_string());
        }
        seen.usage = result_usage(v).or(seen.usage);
        let failed = v["is_error"].as_bool().unwrap_or(false)
            || v["subtype"].as_str().is_some_and(|s| s != "success");
        if failed {
            let mut errors: Vec<&str> = v["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            errors.extend(v["error"]["message"].as_str());
            let why = if !errors.is_empty() {
                errors.join("; ")
            } else if let Some(r) = v["result"].as_str().filter(|r| !r.is_empty()) {
                r.to_string()
            } else {
                "no reason given".to_string()
            };
            let subtype = v["subtype"].as_str().unwrap_or("error");
            seen.error = Some(format!("{subtype}: {}", cut(&why, 2000)));
            return;
        }
        seen.text = v["result"].as_str().map(str::to_string);
        seen.structured = v
            .get("structured_output")
            .or_else(|| v.get("structured_result"))
            .filter(|s| !s.is_null())
            .cloned();
    }
}

impl Dialect for Lines {
    fn line(&mut self, v: &Value, seen: &mut Observed, progress: &Progress) {
        match v["type"].as_str() {
            Some("system") => {
                if v["subtype"] == "init"
                    && let Some(s) = v["session_id"].as_str()
                {
                    seen.session = Some(s.to_string());
                }
                if v["subtype"] == "api_retry" || v["subtype"] == "retry" {
                    progress.activity(Activity::Retry {
                        attempt: v["attempt"]
                            .as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .unwrap_or(0)
                            .saturating_add(1),
                        reason: cut(
                            v["error"]
                                .as_str()
                                .or(v["error_status"].as_str())
                                .or(v["data"]["reason"].as_str())
                                .unwrap_or("the API failed"),
                            200,
                        ),
                        partial: false,
                    });
                }
            }
            Some("assistant") => self.assistant(v, seen, progress),
            Some("user") => self.user(v, progress),
            Some("result") => self.result(v, seen),
            _ => {}
        }
    }
}

/// A message's `usage`: input counts the cache's reads and writes.
fn usage_of(u: &Value) -> Option<Usage> {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    if !u.is_object() {
        return None;
    }
    let (read, write) = (
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    );
    Some(Usage {
        input: n("input_tokens").saturating_add(read).saturating_add(write),
        output: n("output_tokens"),
        cache_read: read,
        cache_write: write,
        cost_usd: None,
    })
}

/// The run's usage from its result line. `model_usage_since_last_result`
/// is this process's own (its `usage` is empty when a limit stopped it,
/// and `total_cost_usd` counts a resumed session's earlier runs too);
/// older versions have only `usage` and `total_cost_usd`.
fn result_usage(v: &Value) -> Option<Usage> {
    if let Some(models) = v["model_usage_since_last_result"]
        .as_object()
        .filter(|m| !m.is_empty())
    {
        let mut total = Usage::new(0, 0);
        let mut cost = 0.0;
        for m in models.values() {
            let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
            let (read, write) = (n("cacheReadInputTokens"), n("cacheCreationInputTokens"));
            total = total.plus(Usage {
                input: n("inputTokens").saturating_add(read).saturating_add(write),
                output: n("outputTokens"),
                cache_read: read,
                cache_write: write,
                cost_usd: None,
            });
            cost += m
                .get("costUSD")
                .and_then(Value::as_f64)
                .and_then(Usage::dollars)
                .unwrap_or(0.0);
        }
        total.cost_usd = Usage::dollars(cost);
        return Some(total);
    }
    let mut u = usage_of(&v["usage"])?;
    u.cost_usd = v["total_cost_usd"].as_f64().and_then(Usage::dollars);
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::CliConfig;
    use dsh_seam::AgentRequest;

    fn argv(req: &AgentRequest, cfg: &CliConfig, session: SessionUse) -> Vec<String> {
        args(&Invocation {
            request: req,
            cfg,
            session,
            schema_file: None,
        })
    }

    /// The value after `flag` (and the ones after it up to the next flag).
    fn after(a: &[String], flag: &str) -> Vec<String> {
        a.iter()
            .skip_while(|x| *x != flag)
            .skip(1)
            .take_while(|x| !x.starts_with("--"))
            .cloned()
            .collect()
    }

    #[test]
    fn a_calls_options_become_claude_codes_flags() {
        let mut req = AgentRequest::new(1, "p", "l");
        req.options.model = Some("opus".into());
        req.options.effort = Some("high".into());
        req.disallowed_tools = vec!["WebFetch".into(), "Bash(rm *)".into()];
        req.schema = Some(json!({ "type": "object" }));
        req.cost_cap_usd = Some(0.25);
        let cfg = CliConfig {
            permission_mode: Some("acceptEdits".into()),
            allowed_tools: vec!["Bash(git *)".into(), "Edit".into()],
            extra_args: vec!["--add-dir".into(), "../lib".into()],
            max_budget_usd: Some(1.0),
            ..CliConfig::default()
        };
        let a = argv(
            &req,
            &cfg,
            SessionUse::Fresh {
                id: Some("u-1".into()),
            },
        );
        assert_eq!(
            &a[..5],
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages"
            ]
        );
        assert_eq!(after(&a, "--add-dir"), ["../lib"]);
        assert_eq!(after(&a, "--session-id"), ["u-1"]);
        assert_eq!(after(&a, "--model"), ["opus"]);
        assert_eq!(after(&a, "--effort"), ["high"]);
        assert_eq!(after(&a, "--permission-mode"), ["acceptEdits"]);
        assert_eq!(after(&a, "--allowedTools"), ["Bash(git *)", "Edit"]);
        assert_eq!(after(&a, "--disallowedTools"), ["WebFetch", "Bash(rm *)"]);
        assert_eq!(after(&a, "--json-schema"), ["{\"type\":\"object\"}"]);
        assert_eq!(
            after(&a, "--max-budget-usd"),
            ["0.250000"],
            "the smaller cap"
        );
        assert!(!a.contains(&"--agent".to_string()));
        let a = argv(&req, &cfg, SessionUse::Resume { id: "s-9".into() });
        assert_eq!(after(&a, "--resume"), ["s-9"]);
        assert!(!a.contains(&"--session-id".to_string()));
    }

    #[test]
    fn agent_types_are_claude_codes_own_or_defined_for_the_call() {
        let cfg = CliConfig::default();
        let mut req = AgentRequest::new(1, "p", "l");
        req.options.agent_type = Some("Explore".into());
        req.agent_type_origin = Some(AgentTypeOrigin::BuiltIn);
        req.system_prompt = Some("dsh's words for Explore".into());
        let a = argv(&req, &cfg, SessionUse::Fresh { id: None });
        assert_eq!(after(&a, "--agent"), ["Explore"]);
        assert!(
            !a.contains(&"--agents".to_string()),
            "Claude Code's own Explore"
        );
        req.options.agent_type = Some("reviewer".into());
        req.agent_type_origin = Some(AgentTypeOrigin::Defined);
        req.system_prompt = Some("You review.".into());
        req.tools = Some(vec!["Read".into(), "Grep".into()]);
        let a = argv(&req, &cfg, SessionUse::Fresh { id: None });
        let def: Value = serde_json::from_str(&after(&a, "--agents")[0]).expect("json");
        assert_eq!(def["reviewer"]["prompt"], "You review.");
        assert_eq!(def["reviewer"]["tools"], json!(["Read", "Grep"]));
        assert_eq!(after(&a, "--agent"), ["reviewer"]);
        // No agent type: a system prompt is appended.
        req.options.agent_type = None;
        req.agent_type_origin = None;
        let a = argv(&req, &cfg, SessionUse::Fresh { id: None });
        assert_eq!(after(&a, "--append-system-prompt"), ["You review."]);
    }

    fn feed(lines: &[Value]) -> (Observed, Vec<Activity>) {
        let progress = Progress::new();
        let mut d = Lines::default();
        let mut seen = Observed::default();
        for l in lines {
            d.line(l, &mut seen, &progress);
        }
        (seen, progress.take_activities())
    }

    #[test]
    fn a_session_with_a_tool_call_and_a_structured_answer() {
        let (seen, acts) = feed(&[
            json!({"type":"system","subtype":"init","session_id":"s-1"}),
            json!({"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"src/a.rs"}}],"usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":90}},"parent_tool_use_id":null}),
            json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"1\tfn a","is_error":false}]}}),
            json!({"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"done"}],"usage":{"input_tokens":20,"output_tokens":5}},"parent_tool_use_id":null}),
            json!({"type":"result","subtype":"success","is_error":false,"result":"{\"ok\":true}","structured_output":{"ok":true},"session_id":"s-1",
                   "usage":{"input_tokens":30,"output_tokens":8,"cache_read_input_tokens":90},"total_cost_usd":0.5,
                   "model_usage_since_last_result":{"m":{"inputTokens":30,"outputTokens":8,"cacheReadInputTokens":90,"cacheCreationInputTokens":0,"costUSD":0.25}}}),
        ]);
        assert_eq!(seen.session.as_deref(), Some("s-1"));
        assert!(seen.finished);
        assert_eq!(seen.turns, 2);
        assert_eq!(seen.structured, Some(json!({"ok": true})));
        let u = seen.usage.expect("usage");
        assert_eq!(
            (u.input, u.output, u.cache_read, u.cost_usd),
            (120, 8, 90, Some(0.25))
        );
        let kinds: Vec<String> = acts
            .iter()
            .map(|a| match a {
                Activity::Turn { turn } => format!("turn {turn}"),
                Activity::Tokens { usage } => format!("tokens {}/{}", usage.input, usage.output),
                Activity::ToolCall { tool, detail } => format!("call {tool} {detail}"),
                Activity::ToolEnd { tool, status, .. } => format!("end {tool} {status}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "turn 1",
                "tokens 100/3",
                "call Read src/a.rs",
                "end Read ok",
                "turn 2",
                "tokens 120/8"
            ]
        );
    }

    #[test]
    fn an_error_result_says_why() {
        let (seen, _) = feed(&[
            json!({"type":"result","subtype":"error_max_budget_usd","is_error":true,
            "errors":["Reached maximum budget ($0.01)"],"usage":{"input_tokens":0,"output_tokens":0},"total_cost_usd":0.02}),
        ]);
        assert_eq!(
            seen.error.as_deref(),
            Some("error_max_budget_usd: Reached maximum budget ($0.01)")
        );
        assert_eq!(seen.usage.map(|u| u.cost_usd), Some(Some(0.02)));
    }

    #[test]
    fn a_failed_tool_result_is_an_error_activity() {
        let (_, acts) = feed(&[
            json!({"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"false"}}]}}),
            json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"Exit code 1"}]}]}}),
        ]);
        assert!(acts.iter().any(|a| matches!(a,
            Activity::ToolEnd { tool, status, message: Some(m), .. } if tool == "Bash" && status == "error" && m == "Exit code 1")));
    }
}
