//! The shape of `dsh.toml` and its checks.
//!
//! ```toml
//! [workflow]
//! provider = "deepseek"            # default provider
//! max_concurrent_agents = 16
//! timeout = "30m"
//!
//! [providers.deepseek]
//! kind = "openai"                  # or "command", "fixture"
//! model = "deepseek-chat"
//!
//! [providers.claude]
//! kind = "command"
//! command = ["claude", "-p"]
//! prompt = "stdin"
//!
//! [agent_types.reviewer]
//! provider = "deepseek"
//! model = "deepseek-reasoner"
//! system_prompt = "You review code carefully."
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{Config, ConfigError, ProviderEntry, WorkflowDefaults};
use crate::providers::registry::{Registry, fix_hint};

/// What an agent type means: where calls with `agentType: NAME` go and
/// what they get. `[agent_types.NAME]` in dsh.toml is one; a
/// `.claude/agents/*.md` file and the built-ins give the same shape (see
/// [`crate::agent_types`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTypeRoute {
    /// The provider (default: the run's default provider).
    pub provider: Option<String>,
    /// The model, unless the call names one.
    pub model: Option<String>,
    /// The effort, unless the call gives one.
    pub effort: Option<String>,
    /// A system prompt for these calls.
    pub system_prompt: Option<String>,
    /// What the type is for (shown by `dsh workflow agents`).
    pub description: Option<String>,
    /// The tools these calls may use, for providers that have tools;
    /// `None` is all of them.
    pub tools: Option<Vec<String>>,
    /// Tools these calls may not use (`disallowed_tools` in dsh.toml).
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// Where it is defined: `dsh.toml:12`, a file's path, `built-in`
    /// (set by the loader, never read from the file).
    #[serde(skip)]
    pub defined_at: Option<String>,
    /// `stall`: the calls fail (`stalled: …`) when their provider reports
    /// no progress for this long, unless a call gives its own `stallMs`.
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    pub stall: Option<Duration>,
    /// `timeout`: the calls fail (`timed out after …`) when they have not
    /// answered this long after they started.
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    pub timeout: Option<Duration>,
    /// `max_turns`: the agent loop's turn limit for these calls (providers
    /// of the loop: `openai`, `anthropic`).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// `network`: whether these calls' `Bash` may use the network.
    #[serde(default)]
    pub network: Option<bool>,
    /// `bash_timeout`: longest a `Bash` command of these calls runs.
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    pub bash_timeout: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    workflow: RawWorkflow,
    #[serde(default)]
    providers: BTreeMap<String, toml::Table>,
    #[serde(default)]
    agent_types: BTreeMap<String, AgentTypeRoute>,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    telemetry: super::Telemetry,
}

/// `[store]`: where runs are kept when not in run directories
/// (docs/scale.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    /// `postgres://…`; checked when a command connects, where the error
    /// can say more than a parse.
    url: Option<String>,
    /// The lease of a run `dsh workflow run` keeps in the store.
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    lease: Option<Duration>,
    /// Providers whose calls agent hosts answer through the store
    /// (`dsh workflow host --agents POOL=N`), not the process running the
    /// run.
    #[serde(default)]
    pools: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkflow {
    provider: Option<String>,
    sandbox: Option<String>,
    max_concurrent_agents: Option<u32>,
    max_total_agents: Option<u32>,
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    grace: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    sync_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::de::opt_duration")]
    compute_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::de::opt_size")]
    memory: Option<u64>,
    #[serde(default, deserialize_with = "crate::units::de::opt_size")]
    log_limit: Option<u64>,
    budget: Option<u64>,
    #[serde(default)]
    budget_usd: Option<f64>,
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The `key` of a `key = value` line, if the line is one.
fn line_key(line: &str) -> Option<&str> {
    let (k, _) = line.split_once('=')?;
    let k = k.trim().trim_matches('"');
    (!k.is_empty() && !k.starts_with('[') && !k.starts_with('#')).then_some(k)
}

/// The `[section]` a 1-based line is in (`""` before any header).
fn section_of(text: &str, line: usize) -> String {
    text.lines()
        .take(line)
        .filter_map(|l| {
            let t = l.trim();
            (t.starts_with('[') && t.ends_with(']')).then(|| {
                t.trim_matches(|c| c == '[' || c == ']')
                    .replace(char::is_whitespace, "")
            })
        })
        .last()
        .unwrap_or_default()
}

/// The keys of the table `section` (`workflow`, `providers.NAME`,
/// `agent_types.NAME`) in document order: each key, the 1-based line of
/// the key, and the source text of its value. From the parser's spans, not
/// from the lines' look: a header with a comment (`[providers.x] # mine`),
/// a quoted name (`[providers."x"]`), a quoted key or an inline table
/// cannot hide a key's line (a `concurrency = 0` under a quoted header was
/// reported at the header).
fn table_keys(text: &str, section: &str) -> Option<Vec<(String, usize, String)>> {
    let root = toml::de::DeTable::parse(text).ok()?;
    let mut table = root.get_ref();
    for part in section.splitn(2, '.') {
        let (_, v) = table.iter().find(|(k, _)| k.get_ref().as_ref() == part)?;
        match v.get_ref() {
            toml::de::DeValue::Table(t) => table = t,
            _ => return None,
        }
    }
    let mut keys: Vec<(usize, String, usize, String)> = table
        .iter()
        .map(|(k, v)| {
            let value = text.get(v.span()).unwrap_or_default().to_string();
            (
                k.span().start,
                k.get_ref().to_string(),
                line_of(text, k.span().start),
                value,
            )
        })
        .collect();
    keys.sort_by_key(|(at, ..)| *at);
    Some(
        keys.into_iter()
            .map(|(_, k, line, v)| (k, line, v))
            .collect(),
    )
}

/// The line of the `[providers.NAME]` (or `[agent_types.NAME]`) header
/// (or of `NAME = { … }`, an inline table).
fn header_line(text: &str, table: &str, name: &str) -> Option<usize> {
    table_keys(text, table)?
        .into_iter()
        .find(|(k, ..)| k == name)
        .map(|(_, line, _)| line)
}

/// The line of `key = …` inside `[section]`, where the file has one.
fn key_line_in(text: &str, section: &str, key: &str) -> Option<usize> {
    table_keys(text, section)?
        .into_iter()
        .find(|(k, ..)| k == key)
        .map(|(_, line, _)| line)
}

/// For an error inside `[section]` that names no key: the key whose value
/// the message quotes (`invalid type: string "lots", expected u32`).
fn key_of_quoted_value(text: &str, section: &str, message: &str) -> Option<(usize, String)> {
    let quoted = format!("\"{}\"", message.split('"').nth(1)?);
    table_keys(text, section)?
        .into_iter()
        .find(|(_, _, v)| v.contains(&quoted))
        .map(|(k, line, _)| (line, k))
}

/// For an error inside `[section]` whose message names a key without
/// quoting its value (`concurrency 0 is out of range`): the first key of
/// the section that the message names as a word.
fn key_named_in(text: &str, section: &str, message: &str) -> Option<(usize, String)> {
    let is_word = |k: &str| {
        message.match_indices(k).any(|(i, _)| {
            let before = message[..i].chars().next_back();
            let after = message[i + k.len()..].chars().next();
            let outside = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            outside(before) && outside(after)
        })
    };
    table_keys(text, section)?
        .into_iter()
        .find(|(k, ..)| !k.is_empty() && is_word(k))
        .map(|(k, line, _)| (line, k))
}

/// Parses and checks `text`, the file at `path`; `registry` reads the
/// `[providers.NAME]` tables.
pub(super) fn parse(path: &Path, text: &str, registry: &Registry) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let raw = read_raw(&file, text)?;
    let base_dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut config = Config::builtin_with(registry);
    config.path = Some(path.to_path_buf());
    for (name, table) in raw.providers {
        let entry = read_provider(&file, text, registry, &base_dir, name, table)?;
        config.providers.insert(entry.name.clone(), entry);
    }
    let known = config.provider_names().join(", ");
    check_agent_types(&file, text, &config, &known, &raw.agent_types)?;
    config.agent_types = raw.agent_types;
    config.store_url = raw.store.url;
    if let Some(lease) = raw.store.lease
        && lease < Duration::from_secs(1)
    {
        let at = key_line_in(text, "store", "lease")
            .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"));
        return Err(ConfigError::at(
            at,
            "store.lease: must be at least 1 s (a heartbeat renews it every third); e.g. lease = \"30s\"",
        ));
    }
    config.store_lease = raw.store.lease;
    for pool in &raw.store.pools {
        if !config.providers.contains_key(pool) {
            let at = key_line_in(text, "store", "pools")
                .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"));
            return Err(ConfigError::at(
                at,
                format!(
                    "store.pools: {pool:?} is not a provider (a pool is the provider its agent \
                     hosts answer with); known providers: {known}"
                ),
            ));
        }
    }
    config.store_pools = raw.store.pools;
    check_telemetry(&file, text, &raw.telemetry)?;
    config.telemetry = raw.telemetry;
    for (name, route) in config.agent_types.iter_mut() {
        route.defined_at = Some(
            header_line(text, "agent_types", name)
                .map_or_else(|| file.clone(), |n| format!("{file}:{n}")),
        );
    }
    config.workflow = read_workflow(&file, text, &config, &known, raw.workflow)?;
    Ok(config)
}

/// The file as TOML of dsh.toml's shape; an error names `file:line` and,
/// when the line is one, the key as `section.key`.
fn read_raw(file: &str, text: &str) -> Result<RawFile, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let message = fix_hint(e.message().trim());
        match e.span() {
            Some(span) => {
                let line = line_of(text, span.start);
                // Name the key as `section.key` when the line is one.
                let key = text.lines().nth(line - 1).and_then(line_key).map(|k| {
                    match section_of(text, line) {
                        s if s.is_empty() => k.to_string(),
                        s => format!("{s}.{k}"),
                    }
                });
                let message = match key {
                    Some(k)
                        if !message
                            .contains(&format!("`{}`", k.rsplit('.').next().unwrap_or(&k))) =>
                    {
                        format!("{k}: {message}")
                    }
                    _ => message,
                };
                ConfigError::at(format!("{file}:{line}"), message)
            }
            None => ConfigError::at(file, message),
        }
    })
}

/// `[telemetry]`, checked: an endpoint dsh can export to, a protocol it
/// speaks.
fn check_telemetry(file: &str, text: &str, t: &super::Telemetry) -> Result<(), ConfigError> {
    let at = |key: &str| {
        key_line_in(text, "telemetry", key)
            .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"))
    };
    if let Some(e) = &t.endpoint
        && !(e.starts_with("http://") || e.starts_with("https://"))
    {
        return Err(ConfigError::at(
            at("endpoint"),
            format!(
                "telemetry.endpoint: {e:?} is not an http:// or https:// URL; e.g. endpoint = \"http://127.0.0.1:4318\""
            ),
        ));
    }
    if let Some(p) = &t.protocol
        && p != "http/protobuf"
        && p != "http/json"
    {
        return Err(ConfigError::at(
            at("protocol"),
            format!("telemetry.protocol: {p:?}: dsh exports \"http/protobuf\" or \"http/json\""),
        ));
    }
    Ok(())
}

/// `[providers.NAME]`: the host's `stall`, then the rest read by the
/// provider kind's own reader (`registry`), its error pointed at the key
/// it names where that can be found.
fn read_provider(
    file: &str,
    text: &str,
    registry: &Registry,
    base_dir: &Path,
    name: String,
    mut table: toml::Table,
) -> Result<ProviderEntry, ConfigError> {
    let at = header_line(text, "providers", &name)
        .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"));
    // `stall` is the host's, for every kind of provider.
    let section = format!("providers.{name}");
    let stall = match table.remove("stall") {
        None => None,
        Some(v) => {
            let key_at = key_line_in(text, &section, "stall")
                .map_or_else(|| at.clone(), |n| format!("{file}:{n}"));
            let d = v
                .try_into::<crate::units::Seconds>()
                .map_err(|e| {
                    ConfigError::at(
                        &key_at,
                        format!(
                            "providers.{name}.stall: {}; e.g. stall = \"5m\"",
                            e.message().trim()
                        ),
                    )
                })?
                .0;
            if d.is_zero() {
                return Err(ConfigError::at(
                    key_at,
                    format!(
                        "providers.{name}.stall: must be more than 0; leave it out for no stall timeout"
                    ),
                ));
            }
            Some(d)
        }
    };
    let kind = registry.read(&name, table, base_dir).map_err(|e| {
        let m = e.to_string();
        // Point at the key itself where the message lets us find it.
        let unknown = m
            .split('`')
            .nth(1)
            .filter(|_| m.contains("unknown field"))
            .and_then(|k| key_line_in(text, &section, k));
        match unknown {
            Some(line) => ConfigError::at(format!("{file}:{line}"), m),
            None => match key_of_quoted_value(text, &section, &m)
                .or_else(|| key_named_in(text, &section, &m))
            {
                Some((line, key)) => ConfigError::at(
                    format!("{file}:{line}"),
                    m.replacen(
                        &format!("providers.{name} ("),
                        &format!("providers.{name}.{key} ("),
                        1,
                    ),
                ),
                None => ConfigError::at(&at, m),
            },
        }
    })?;
    Ok(ProviderEntry {
        name,
        kind,
        defined_at: at,
        base_dir: base_dir.to_path_buf(),
        stall,
    })
}

/// `[agent_types.NAME]`: bounds more than 0, a provider that exists
/// (`known` lists them for the message).
fn check_agent_types(
    file: &str,
    text: &str,
    config: &Config,
    known: &str,
    agent_types: &BTreeMap<String, AgentTypeRoute>,
) -> Result<(), ConfigError> {
    for (name, route) in agent_types {
        for (key, d) in [
            ("stall", route.stall),
            ("timeout", route.timeout),
            ("bash_timeout", route.bash_timeout),
        ] {
            if d.is_some_and(|d| d.is_zero()) {
                let section = format!("agent_types.{name}");
                let at = key_line_in(text, &section, key)
                    .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"));
                return Err(ConfigError::at(
                    at,
                    format!(
                        "agent_types.{name}.{key}: must be more than 0; leave it out for no \
                         per-call {key}"
                    ),
                ));
            }
        }
        if route.max_turns == Some(0) {
            let section = format!("agent_types.{name}");
            let at = key_line_in(text, &section, "max_turns")
                .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"));
            return Err(ConfigError::at(
                at,
                format!("agent_types.{name}.max_turns: must be at least 1"),
            ));
        }
        if let Some(p) = &route.provider
            && !config.providers.contains_key(p)
        {
            let at = header_line(text, "agent_types", name)
                .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"));
            return Err(ConfigError::at(
                at,
                format!(
                    "agent_types.{name}.provider: unknown provider {p:?}; known providers: {known} \
                     (define it as [providers.{p}])"
                ),
            ));
        }
    }
    Ok(())
}

/// `[workflow]`, checked: a provider that exists, a sandbox policy, limits
/// that validate.
fn read_workflow(
    file: &str,
    text: &str,
    config: &Config,
    known: &str,
    w: RawWorkflow,
) -> Result<WorkflowDefaults, ConfigError> {
    let key_line = |key: &str| {
        key_line_in(text, "workflow", key)
            .map_or_else(|| file.to_string(), |n| format!("{file}:{n}"))
    };
    if let Some(p) = &w.provider
        && !config.providers.contains_key(p)
    {
        return Err(ConfigError::at(
            key_line("provider"),
            format!(
                "workflow.provider: unknown provider {p:?}; known providers: {known} \
                 (define it as [providers.{p}], or pick one of these)"
            ),
        ));
    }
    let sandbox = match w
        .sandbox
        .as_deref()
        .map(str::parse::<dsh_protocol::SandboxPolicy>)
    {
        None => None,
        Some(Ok(policy)) => Some(policy),
        Some(Err(e)) => {
            return Err(ConfigError::at(
                key_line("sandbox"),
                format!("workflow.sandbox: {e}"),
            ));
        }
    };
    let workflow = WorkflowDefaults {
        provider: w.provider,
        sandbox,
        max_concurrent_agents: w.max_concurrent_agents,
        max_total_agents: w.max_total_agents,
        timeout: w.timeout,
        grace: w.grace,
        sync_timeout: w.sync_timeout,
        compute_timeout: w.compute_timeout,
        memory: w.memory,
        log_limit: w.log_limit,
        budget: w.budget,
        budget_usd: w.budget_usd,
    };
    workflow.limits().validate().map_err(|e| {
        let key = snake(e.knob);
        ConfigError::at(key_line(&key), format!("workflow.{key}: {}", e.message))
    })?;
    Ok(workflow)
}

/// `maxConcurrentAgents` → `max_concurrent_agents`; the limits' knob names
/// as the file spells them.
fn snake(knob: &str) -> String {
    match knob {
        "wallTimeoutMs" => "timeout".into(),
        "syncTimeoutMs" => "sync_timeout".into(),
        "computeMs" => "compute_timeout".into(),
        "memoryBytes" => "memory".into(),
        "disposeGraceMs" => "grace".into(),
        other => {
            let mut s = String::new();
            for c in other.chars() {
                if c.is_ascii_uppercase() {
                    s.push('_');
                    s.push(c.to_ascii_lowercase());
                } else {
                    s.push(c);
                }
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn parse_text(text: &str) -> Result<Config, ConfigError> {
        parse(Path::new("/p/dsh.toml"), text, &Registry::builtin())
    }

    #[test]
    fn the_contract_example_loads() {
        let c = parse_text(
            r#"
[workflow]
provider = "deepseek"          # default provider
max_concurrent_agents = 16

[providers.deepseek]
kind = "openai"
base_url = "https://api.deepseek.com"
model = "deepseek-chat"
api_key_env = "DEEPSEEK_API_KEY"

[providers.claude]
kind = "command"
command = ["claude", "-p"]
prompt = "stdin"               # or "arg"

[agent_types.reviewer]
provider = "claude"
system_prompt = "Review carefully."
"#,
        )
        .expect("valid");
        assert_eq!(c.workflow.provider.as_deref(), Some("deepseek"));
        assert_eq!(c.workflow.limits().max_concurrent_agents, 16);
        assert_eq!(c.providers["claude"].kind.kind_name(), "command");
        assert_eq!(c.providers["claude"].defined_at, "/p/dsh.toml:12");
        assert!(c.providers.contains_key("openai"), "built-ins stay");
        assert_eq!(
            c.agent_types["reviewer"].provider.as_deref(),
            Some("claude")
        );
    }

    #[rstest]
    #[case::unknown_top_level("[workfow]\nprovider = \"x\"\n", "/p/dsh.toml:1", &["workfow"])]
    #[case::unknown_workflow_key("[workflow]\nmax_agents = 3\n", "/p/dsh.toml:2", &["max_agents", "remove the key"])]
    #[case::wrong_type("[workflow]\nmax_concurrent_agents = \"many\"\n", "/p/dsh.toml:2", &["workflow.max_concurrent_agents", "many"])]
    #[case::bad_duration("[workflow]\ntimeout = \"soon\"\n", "/p/dsh.toml:2", &["soon"])]
    #[case::unknown_default_provider("[workflow]\nprovider = \"nope\"\n", "/p/dsh.toml:2", &["workflow.provider", "nope", "deepseek", "[providers.nope]"])]
    #[case::missing_kind("[providers.x]\nmodel = \"m\"\n", "/p/dsh.toml:1", &["providers.x", "missing kind", "kind = \"openai\""])]
    #[case::unknown_kind("[providers.x]\nkind = \"carrier-pigeon\"\n", "/p/dsh.toml:2", &["carrier-pigeon", "openai"])]
    #[case::unknown_kind_lists_the_cli_kinds("[providers.x]\nkind = \"claude\"\n", "/p/dsh.toml:2", &["\"claude-code\"", "\"codex\"", "\"qwen\"", "\"anthropic\""])]
    #[case::unknown_provider_key("\n[providers.x]\nkind = \"openai\"\nmodle = \"m\"\n", "/p/dsh.toml:4", &["providers.x", "modle"])]
    #[case::wrong_type_in_a_provider("[providers.x]\nkind = \"openai\"\n\nmax_attempts = \"many\"\n", "/p/dsh.toml:4", &["providers.x.max_attempts", "many"])]
    #[case::workflow_key_after_another_section("[agent_types.r]\nprovider = \"deepseek\"\n\n[workflow]\nprovider = \"ghost\"\n", "/p/dsh.toml:5", &["workflow.provider", "ghost"])]
    #[case::unknown_agent_type_provider("[agent_types.r]\nprovider = \"ghost\"\n", "/p/dsh.toml:1", &["agent_types.r.provider", "ghost"])]
    #[case::bad_sandbox("[workflow]\nsandbox = \"lenient\"\n", "/p/dsh.toml:2", &["workflow.sandbox", "best-effort"])]
    #[case::zero_concurrency("[workflow]\nmax_concurrent_agents = 0\n", "/p/dsh.toml:2", &["workflow.max_concurrent_agents", "at least 1"])]
    #[case::zero_provider_concurrency("[providers.x]\nkind = \"openai\"\nmodel = \"m\"\nconcurrency = 0\n", "/p/dsh.toml:4", &["providers.x.concurrency", "1 to 1024"])]
    #[case::concurrency_under_a_quoted_header("[providers.\"x\"]\nkind = \"openai\"\nmodel = \"m\"\nconcurrency = 0\n", "/p/dsh.toml:4", &["providers.x.concurrency", "1 to 1024"])]
    #[case::concurrency_under_a_header_with_a_comment("[providers.x] # mine\nkind = \"openai\"\n\nconcurrency = 0\n", "/p/dsh.toml:4", &["providers.x.concurrency", "1 to 1024"])]
    #[case::concurrency_in_an_inline_table("[providers]\nx = { kind = \"openai\", concurrency = 0 }\n", "/p/dsh.toml:2", &["providers.x.concurrency", "1 to 1024"])]
    #[case::zero_concurrency_under_a_header_with_a_comment("[workflow] # defaults\nmax_concurrent_agents = 0\n", "/p/dsh.toml:2", &["workflow.max_concurrent_agents", "at least 1"])]
    #[case::provider_concurrency_too_high("[providers.x]\nkind = \"openai\"\n\n# fixed\nconcurrency = 5000\n", "/p/dsh.toml:5", &["providers.x.concurrency", "5000"])]
    #[case::missing_workspace("[providers.x]\nkind = \"openai\"\nworkspace = \"/nonexistent\"\n", "/p/dsh.toml:3", &["providers.x.workspace", "/nonexistent", "no such directory"])]
    #[case::missing_relative_workspace("[providers.x]\nkind = \"anthropic\"\n\nworkspace = \"gone\"\n", "/p/dsh.toml:4", &["providers.x.workspace", "/p/gone", "no such directory"])]
    #[case::store_pool_unknown("[store]\nurl = \"postgres://h/d\"\npools = [\"nope\"]\n", "/p/dsh.toml:3", &["store.pools", "\"nope\" is not a provider", "known providers"])]
    #[case::telemetry_endpoint("[telemetry]\nendpoint = \"ftp://x\"\n", "/p/dsh.toml:2", &["telemetry.endpoint", "http:// or https://"])]
    #[case::telemetry_protocol("[telemetry]\nendpoint = \"http://x\"\nprotocol = \"grpc\"\n", "/p/dsh.toml:3", &["telemetry.protocol", "http/json"])]
    #[case::store_lease_too_short("[store]\nurl = \"postgres://h/d\"\nlease = \"500ms\"\n", "/p/dsh.toml:3", &["store.lease", "at least 1 s"])]
    fn errors_name_file_line_key_and_fix(
        #[case] text: &str,
        #[case] location: &str,
        #[case] mentions: &[&str],
    ) {
        let err = parse_text(text).expect_err("invalid");
        assert_eq!(err.location(), location, "{err}");
        for m in mentions {
            assert!(err.to_string().contains(m), "{m:?} missing from: {err}");
        }
    }

    #[test]
    fn durations_and_sizes_take_text_or_numbers() {
        let c = parse_text(
            "[workflow]\ntimeout = \"1h30m\"\ngrace = 2\nmemory = \"64MiB\"\nlog_limit = 4096\nmax_total_agents = 50\n",
        )
        .expect("valid");
        let l = c.workflow.limits();
        assert_eq!(l.wall_timeout, Some(Duration::from_secs(5400)));
        assert_eq!(l.dispose_grace, Duration::from_secs(2));
        assert_eq!(l.memory_bytes, 64 << 20);
        assert_eq!(l.log_bytes, 4096);
        assert_eq!(l.max_total_agents_ceiling, 50);
    }
}
