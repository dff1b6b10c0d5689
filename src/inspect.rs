//! The commands that show what dsh would use, without running anything:
//! `dsh workflow list` (saved workflows), `providers` (each provider and
//! whether it can be used, the agent CLIs found), `agents` (the agent
//! types and where each is defined).

use std::io::Write;
use std::path::{Path, PathBuf};

use dsh_orchestrator::agent_types::AgentTypeDef;
use dsh_orchestrator::config::Config;
use dsh_orchestrator::providers::router;

use serde_json::{Value, json};

use crate::error::{CliError, exit};
use crate::request::{agent_types, catalog_for, load_config};

/// `dsh workflow list`: every saved workflow, where it came from, and its
/// meta's description and whenToUse.
pub fn list(config: Option<&Path>, json: bool) -> Result<i32, CliError> {
    if json {
        println!("{}", list_json(config)?);
        return Ok(exit::COMPLETED);
    }
    let catalog = catalog_for(config)?;
    let entries = catalog.list();
    if entries.is_empty() {
        println!("no saved workflows (looked in {})", catalog.dirs_shown());
        return Ok(exit::COMPLETED);
    }
    for e in &entries {
        let mut line = format!("{}  ({}: {})", e.name, e.origin.as_str(), e.path.display());
        if let Some(by) = &e.shadowed_by {
            line.push_str(&format!("  shadowed by {}", by.display()));
        }
        println!("{line}");
        if let Some(m) = &e.meta {
            println!("    {}", m.description);
            if let Some(w) = m.when_to_use.as_deref().filter(|w| !w.is_empty()) {
                println!("    when to use: {w}");
            }
        }
        if let Some(p) = &e.problem {
            let first = p.lines().next().unwrap_or_default();
            println!("    cannot run: {first}");
        }
    }
    Ok(exit::COMPLETED)
}

/// `list --json` (and the MCP server's `workflow_list`): every saved
/// workflow as a JSON object, in the order `list` shows them.
pub(crate) fn list_json(config: Option<&Path>) -> Result<Value, CliError> {
    let catalog = catalog_for(config)?;
    let all = catalog
        .list()
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "origin": e.origin.as_str(),
                "path": e.path.display().to_string(),
                "shadowedBy": e.shadowed_by.as_ref().map(|p| p.display().to_string()),
                "description": e.meta.as_ref().map(|m| &m.description),
                "whenToUse": e.meta.as_ref().and_then(|m| m.when_to_use.as_ref()),
                "problem": e.problem,
            })
        })
        .collect();
    Ok(Value::Array(all))
}

/// A per-call bound as `providers` shows it: `300s`, or `1500ms`.
fn secs(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `dsh workflow providers`: one line per provider — name, kind, where it
/// is defined, and whether it is usable (key present, program found) —
/// without calling any. The default provider is marked `*`.
pub fn providers(config: Option<&Path>, json: bool) -> Result<i32, CliError> {
    let config = load_config(config)?;
    if json {
        println!("{}", providers_json(&config));
        return Ok(exit::COMPLETED);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "configuration: {}", config.location());
    let _ = writeln!(
        out,
        "  {:<14} {:<11} {:<24} STATUS",
        "NAME", "KIND", "DEFINED AT"
    );
    for (name, entry) in &config.providers {
        let mark = if config.workflow.provider.as_deref() == Some(name) {
            "*"
        } else {
            " "
        };
        let status = match router::usable(entry) {
            Ok(detail) => format!("usable: {detail}"),
            Err(problem) => format!("not usable: {problem}"),
        };
        let stall = entry
            .stall
            .map(|d| format!(" (stall {})", secs(d)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{mark} {name:<14} {:<11} {:<24} {status}{stall}",
            entry.kind.kind_name(),
            entry.defined_at
        );
    }
    agent_clis(&config, &mut out);
    for (name, route) in &config.agent_types {
        let _ = writeln!(
            out,
            "  agent type {name} → {}{}{}{}",
            route
                .provider
                .as_deref()
                .unwrap_or("(the default provider)"),
            route
                .model
                .as_deref()
                .map(|m| format!(", model {m}"))
                .unwrap_or_default(),
            route
                .stall
                .map(|d| format!(", stall {}", secs(d)))
                .unwrap_or_default(),
            route
                .timeout
                .map(|d| format!(", timeout {}", secs(d)))
                .unwrap_or_default()
        );
    }
    Ok(exit::COMPLETED)
}

/// `providers --json`: the configuration, its providers (usable or why
/// not), the agent CLIs found and the agent types' routes.
fn providers_json(config: &Config) -> Value {
    use dsh_orchestrator::providers::cli::probe::{Login, Tested};
    let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis() as u64);
    let providers: Vec<Value> = config
        .providers
        .iter()
        .map(|(name, entry)| {
            let (usable, detail) = match router::usable(entry) {
                Ok(detail) => (true, detail),
                Err(problem) => (false, problem.to_string()),
            };
            json!({
                "name": name,
                "kind": entry.kind.kind_name(),
                "definedAt": entry.defined_at,
                "default": config.workflow.provider.as_deref() == Some(name.as_str()),
                "usable": usable,
                "detail": detail,
                "stallMs": ms(entry.stall),
            })
        })
        .collect();
    let clis: Vec<Value> = probe_clis(config)
        .into_iter()
        .map(|st| {
            let (tested, tested_with) = match &st.tested {
                Tested::Yes => ("tested", Vec::new()),
                Tested::No(v) => ("untested", v.clone()),
                Tested::Unknown => ("unknown", Vec::new()),
            };
            let (login, login_detail) = match &st.login {
                Login::Yes(how) => ("yes", how.clone()),
                Login::No(fix) => ("no", fix.clone()),
                Login::Unknown(why) => ("unknown", why.clone()),
            };
            json!({
                "kind": st.kind.kind_name(),
                "program": st.program.as_ref().ok().map(|p| p.display().to_string()),
                "notInstalled": st.program.as_ref().err().map(ToString::to_string),
                "version": st.version.as_ref().ok(),
                "versionUnknown": st.version.as_ref().err().map(ToString::to_string),
                "tested": tested,
                "testedWith": tested_with,
                "login": login,
                "loginDetail": login_detail,
            })
        })
        .collect();
    let types: Vec<Value> = config
        .agent_types
        .iter()
        .map(|(name, route)| {
            json!({
                "name": name,
                "provider": route.provider,
                "model": route.model,
                "stallMs": ms(route.stall),
                "timeoutMs": ms(route.timeout),
            })
        })
        .collect();
    json!({
        "configuration": config.location(),
        "providers": providers,
        "agentClis": clis,
        "agentTypes": types,
    })
}

/// The agent CLIs on this machine, each kind once per program the
/// configuration names for it (else its default program): installed,
/// version, tested by dsh, logged in. Probed in parallel, each bounded.
fn agent_clis(config: &Config, out: &mut impl Write) {
    use dsh_orchestrator::providers::cli::probe::{Login, Tested};
    let found = probe_clis(config);
    let _ = writeln!(out, "agent CLIs:");
    for st in found {
        let program = match &st.program {
            Ok(p) => p.display().to_string(),
            Err(e) => {
                let _ = writeln!(out, "  {:<12} not installed: {e}", st.kind.kind_name());
                continue;
            }
        };
        let version = match &st.version {
            Ok(v) => v.clone(),
            Err(e) => format!("unknown ({e})"),
        };
        let tested = match &st.tested {
            Tested::Yes => "tested".to_string(),
            Tested::No(v) => format!("untested (dsh was tested with {})", v.join(", ")),
            Tested::Unknown => "untested".to_string(),
        };
        let login = match &st.login {
            Login::Yes(how) => format!("logged in: {how}"),
            Login::No(fix) => format!("not logged in: {fix}"),
            Login::Unknown(why) => format!("login unknown: {why}"),
        };
        let _ = writeln!(
            out,
            "  {:<12} {program} {version}, {tested}; {login}",
            st.kind.kind_name()
        );
    }
}

/// The agent CLIs on this machine, each kind once per program the
/// configuration names for it (else its default program), probed in
/// parallel, each bounded.
fn probe_clis(config: &Config) -> Vec<dsh_orchestrator::providers::cli::probe::CliStatus> {
    use dsh_orchestrator::providers::cli::probe::probe;
    use dsh_orchestrator::providers::cli::{CliConfig, CliKind};
    let mut wanted: Vec<(CliKind, String, PathBuf, Vec<String>)> = Vec::new();
    for kind in CliKind::ALL {
        let mut mine: Vec<(CliKind, String, PathBuf, Vec<String>)> = config
            .providers
            .values()
            .filter_map(|e| match e.kind.agent_cli() {
                Some((k, cfg)) if k == kind => Some((
                    kind,
                    cfg.program_name(kind).to_string(),
                    e.base_dir.clone(),
                    cfg.env.clone(),
                )),
                _ => None,
            })
            .collect();
        mine.dedup_by(|a, b| a.1 == b.1 && a.2 == b.2);
        if mine.is_empty() {
            mine.push((
                kind,
                CliConfig::default().program_name(kind).to_string(),
                PathBuf::from("."),
                Vec::new(),
            ));
        }
        wanted.extend(mine);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = wanted
            .iter()
            .map(|(kind, program, base, env)| s.spawn(move || probe(*kind, program, base, env)))
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    })
}

/// `dsh workflow agents`: one line per agent type — name, where it is
/// defined, then its model, tools and description (or why it cannot be
/// used) — then the definitions hidden by a higher one, and problems that
/// belong to no type. Reads no provider.
pub fn agents(config: Option<&Path>, json: bool) -> Result<i32, CliError> {
    let config = load_config(config)?;
    let types = agent_types(&config);
    if json {
        let shadowed: Vec<Value> = types
            .shadowed
            .iter()
            .map(|(def, by)| {
                json!({ "name": def.name, "source": def.source.to_string(), "shadowedBy": by.to_string() })
            })
            .collect();
        let doc = json!({
            "configuration": config.location(),
            "types": types.types.values().map(type_json).collect::<Vec<_>>(),
            "shadowed": shadowed,
            "problems": types.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        });
        println!("{doc}");
        return Ok(exit::COMPLETED);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "agent types (precedence: dsh.toml > .claude/agents > ~/.claude/agents > built-in; \
         configuration: {}):",
        config.location()
    );
    let width = types
        .types
        .keys()
        .chain(types.shadowed.iter().map(|(d, _)| &d.name))
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    for def in types.types.values() {
        let _ = writeln!(out, "  {:<width$}  {}", def.name, describe(def));
    }
    if !types.shadowed.is_empty() {
        let _ = writeln!(out, "shadowed:");
        for (def, by) in &types.shadowed {
            let _ = writeln!(
                out,
                "  {:<width$}  {}  shadowed by {by}",
                def.name, def.source
            );
        }
    }
    for p in &types.problems {
        let _ = writeln!(out, "problem: {p}");
    }
    Ok(exit::COMPLETED)
}

/// One agent type of `agents --json`: where it is defined, and what it
/// routes to, or why it cannot be used (`error`).
fn type_json(def: &AgentTypeDef) -> Value {
    let mut v = json!({ "name": def.name, "source": def.source.to_string(), "notes": def.notes });
    match &def.route {
        Err(problem) => v["error"] = problem.to_string().into(),
        Ok(r) => {
            v["model"] = json!(r.model);
            // `null`: the provider's own tools (see `describe`).
            v["tools"] = json!(r.tools);
            v["disallowedTools"] = json!(r.disallowed_tools);
            v["provider"] = json!(r.provider);
            v["description"] = json!(r.description);
        }
    }
    v
}

/// `SOURCE  model M  tools T  — DESCRIPTION`, or `SOURCE  error: …`.
fn describe(def: &AgentTypeDef) -> String {
    match &def.route {
        Err(problem) => format!("{}  error: {problem}", def.source),
        Ok(r) => {
            let mut s = format!(
                "{}  model: {}",
                def.source,
                r.model.as_deref().unwrap_or("-")
            );
            // A type that names no tools gets the provider's, never "all":
            // the agent loop's default set is read-only, a CLI uses its
            // own, a command provider's `{tools}` is empty.
            s.push_str(&format!(
                "  tools: {}",
                r.tools.as_ref().map_or_else(
                    || "the provider's".to_string(),
                    |t| if t.is_empty() {
                        "none".to_string()
                    } else {
                        t.join(", ")
                    }
                )
            ));
            if !r.disallowed_tools.is_empty() {
                s.push_str(&format!("  disallowed: {}", r.disallowed_tools.join(", ")));
            }
            if let Some(p) = &r.provider {
                s.push_str(&format!("  provider: {p}"));
            }
            if let Some(d) = &r.description {
                s.push_str(&format!("  — {}", d.lines().next().unwrap_or_default()));
            }
            for n in &def.notes {
                s.push_str(&format!(" [{n}]"));
            }
            s
        }
    }
}
