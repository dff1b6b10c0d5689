//! `dsh.toml`: the configuration file — `[workflow]` defaults (provider,
//! limits, sandbox), `[providers.NAME]` tables and `[agent_types.NAME]`
//! routes. Found from the working directory upward, or named with
//! `--config PATH`.
//!
//! Everything is checked when the file is loaded, before any run: unknown
//! keys, wrong types, unknown provider names and bad values are
//! [`ConfigError`]s naming the file, the key (with its line where the
//! parser offers one) and the fix. Building a provider (which reads its API
//! key, finds its program) happens when the run needs it; see
//! [`crate::router`].

mod file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_protocol::SandboxPolicy;

/// How a `[providers.NAME]` table becomes a provider: each kind reads its
/// own table (`dsh-providers`' registry); this module names none of them.
pub use crate::providers::registry::{ProviderConfig, ProviderKind, Registry, TableError};
pub use file::AgentTypeRoute;

use crate::Limits;
use crate::providers::registry::ToolHost;

/// The file name looked for.
pub const FILE_NAME: &str = "dsh.toml";

/// A configuration problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--config PATH` names no file (a usage error, not a bad file).
    #[error(
        "--config: {}: no such file; check the path, or drop --config to use {FILE_NAME} from the working directory upward",
        path.display()
    )]
    MissingFile {
        /// The path given to `--config`.
        path: PathBuf,
    },
    /// The file is there but wrong: `file:line: key: problem; fix`.
    #[error("{location}: {message}")]
    Invalid {
        /// `dsh.toml`, `dsh.toml:12`.
        location: String,
        /// The key, the problem and the fix.
        message: String,
    },
}

impl ConfigError {
    fn at(location: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            location: location.into(),
            message: message.into(),
        }
    }

    /// Where the problem is: `--config`, `dsh.toml` or `dsh.toml:12`.
    pub fn location(&self) -> String {
        match self {
            ConfigError::MissingFile { .. } => "--config".into(),
            ConfigError::Invalid { location, .. } => location.clone(),
        }
    }
}

/// A provider the configuration knows, built-in or from the file.
#[derive(Debug, Clone)]
pub struct ProviderEntry {
    /// The provider's name, as in `[providers.NAME]` (or a built-in's:
    /// `deepseek`, `openai`).
    pub name: String,
    /// Which kind of provider it is and its checked settings, as its kind
    /// read them ([`ProviderConfig::kind_name`] says which).
    pub kind: Box<dyn ProviderConfig>,
    /// Where it was defined (`dsh.toml:12`, or `built-in`).
    pub defined_at: String,
    /// Relative paths in the entry are relative to this directory.
    pub base_dir: PathBuf,
    /// `stall`: the default stall timeout of its calls (a call's `stallMs`
    /// and its agent type's `stall` win); `None` for none.
    pub stall: Option<std::time::Duration>,
}

// By hand: a derived `PartialEq` cannot compare the boxed settings
// (rust-lang/rust#31740).
impl PartialEq for ProviderEntry {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && *self.kind == *other.kind
            && self.defined_at == other.defined_at
            && self.base_dir == other.base_dir
            && self.stall == other.stall
    }
}

/// `[workflow]` defaults, already checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowDefaults {
    /// `provider`: the name of the default provider (a key of
    /// [`Config::providers`]); `None` when the file names none.
    pub provider: Option<String>,
    /// `sandbox`: the sandbox policy; `None` when not set.
    pub sandbox: Option<SandboxPolicy>,
    /// `max_concurrent_agents`: `agent()` calls running at once; `None`
    /// keeps the default.
    pub max_concurrent_agents: Option<u32>,
    /// `max_total_agents`: `agent()` calls per run, also the ceiling a run
    /// may not raise; `None` keeps the default.
    pub max_total_agents: Option<u32>,
    /// `timeout`: the wall-clock budget of the whole run; `None` is no limit.
    pub timeout: Option<Duration>,
    /// `grace`: time from a cancel to the forced settle and kill of the
    /// worker; `None` keeps the default.
    pub grace: Option<Duration>,
    /// `sync_timeout`: the longest synchronous slice of script code; `None`
    /// keeps the default.
    pub sync_timeout: Option<Duration>,
    /// `compute_timeout`: the CPU time the script may use; `None` is no
    /// limit.
    pub compute_timeout: Option<Duration>,
    /// `memory`: the script's heap limit, in bytes; `None` keeps the default.
    pub memory: Option<u64>,
    /// `log_limit`: log text per run, in bytes; `None` keeps the default.
    pub log_limit: Option<u64>,
    /// `budget`: the output-token budget (`budget.total`); `None` is
    /// unlimited.
    pub budget: Option<u64>,
    /// `budget_usd`: the cost budget in US dollars; `None` is unlimited.
    pub budget_usd: Option<f64>,
}

impl WorkflowDefaults {
    /// The limits these defaults give, before any flag. `max_total_agents`
    /// sets the ceiling a run may lower but never raise.
    pub fn limits(&self) -> Limits {
        let mut l = Limits::default();
        if let Some(n) = self.max_concurrent_agents {
            l.max_concurrent_agents = n;
        }
        if let Some(n) = self.max_total_agents {
            l.max_total_agents = n;
            l.max_total_agents_ceiling = n;
        }
        l.wall_timeout = self.timeout;
        if let Some(g) = self.grace {
            l.dispose_grace = g;
        }
        if let Some(s) = self.sync_timeout {
            l.sync_timeout = s;
        }
        l.compute = self.compute_timeout;
        if let Some(m) = self.memory {
            l.memory_bytes = m;
        }
        if let Some(b) = self.log_limit {
            l.log_bytes = b;
        }
        l.budget_tokens = self.budget;
        l.budget_usd = self.budget_usd;
        l
    }
}

/// A loaded configuration: the file's (if any) plus the built-in providers.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from; `None` when there is none.
    pub path: Option<PathBuf>,
    /// The `[workflow]` table (all `None` when there is no file or table).
    pub workflow: WorkflowDefaults,
    /// By name, built-in ones included (a file entry of the same name
    /// replaces a built-in one).
    pub providers: BTreeMap<String, ProviderEntry>,
    /// The `[agent_types.NAME]` routes, by `NAME`.
    pub agent_types: BTreeMap<String, AgentTypeRoute>,
    /// `[store] url`: the PostgreSQL store runs are kept in instead of run
    /// directories (docs/scale.md); `--store` and `DSH_STORE` come first.
    pub store_url: Option<String>,
    /// `[store] lease`: how long a run `dsh workflow run --store` keeps
    /// stays this process's without a heartbeat (default 30 s).
    pub store_lease: Option<std::time::Duration>,
    /// `[store] pools`: the providers whose calls are answered by agent
    /// hosts through the store (`dsh workflow host --agents POOL=N`)
    /// instead of by the process running the run (docs/scale.md).
    pub store_pools: Vec<String>,
    /// `[telemetry]`: where and how runs are traced (OpenTelemetry); the
    /// standard `OTEL_*` variables come first.
    pub telemetry: Telemetry,
}

/// `[telemetry]` in `dsh.toml` (docs/observability.md): each key is the
/// fallback of a standard OpenTelemetry variable.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: where; tracing is off without one.
    pub endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` or `http/json`.
    pub protocol: Option<String>,
    /// `OTEL_EXPORTER_OTLP_HEADERS`: headers for the collector.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: export
    /// prompts and answers.
    pub capture_content: Option<bool>,
}

impl Config {
    /// No file: the built-in providers only.
    pub fn builtin() -> Config {
        Config::builtin_with(&Registry::builtin())
    }

    /// No file: the built-in providers of `registry`'s kinds.
    pub fn builtin_with(registry: &Registry) -> Config {
        let providers = registry
            .builtins()
            .into_iter()
            .map(|(name, kind)| {
                (
                    name.to_string(),
                    ProviderEntry {
                        name: name.to_string(),
                        kind,
                        defined_at: "built-in".into(),
                        base_dir: PathBuf::from("."),
                        stall: None,
                    },
                )
            })
            .collect();
        Config {
            path: None,
            workflow: WorkflowDefaults::default(),
            providers,
            agent_types: BTreeMap::new(),
            store_url: None,
            store_lease: None,
            store_pools: Vec::new(),
            telemetry: Telemetry::default(),
        }
    }

    /// Sets where the agent loop's tools run and under which sandbox
    /// policy, for every provider of the loop (`openai`, `anthropic`); the
    /// same program is the reaper of agent CLIs and `command` programs.
    pub fn set_tool_host(&mut self, host: &ToolHost) {
        for entry in self.providers.values_mut() {
            entry.kind.set_tool_host(host);
        }
    }

    /// `--config PATH` when given (a missing file is an error), else the
    /// first `dsh.toml` from `start` upward, else the built-ins only.
    pub fn load(explicit: Option<&Path>, start: &Path) -> Result<Config, ConfigError> {
        let path = match explicit {
            Some(p) => {
                if !p.is_file() {
                    return Err(ConfigError::MissingFile {
                        path: p.to_path_buf(),
                    });
                }
                Some(p.to_path_buf())
            }
            None => discover(start),
        };
        match path {
            None => Ok(Config::builtin()),
            Some(p) => {
                let text =
                    crate::files::read_text(&p, crate::files::CONFIG_LIMIT).map_err(|e| {
                        ConfigError::at(p.display().to_string(), format!("cannot read: {e}"))
                    })?;
                Config::parse(&p, &text)
            }
        }
    }

    /// Parses and checks the text of a configuration file.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        file::parse(path, text, &Registry::builtin())
    }

    /// [`Config::parse`] with the kinds of `registry` (an embedder's own
    /// kinds beside or instead of the built-in ones).
    pub fn parse_with(path: &Path, text: &str, registry: &Registry) -> Result<Config, ConfigError> {
        file::parse(path, text, registry)
    }

    /// The provider names, sorted.
    pub fn provider_names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    /// The API providers (`openai`, `anthropic` kinds) whose key is in
    /// the environment (`env` looks a variable up; the process's own with
    /// [`std::env::var_os`]), as `(provider, key variable)`, by name. What
    /// a run without a default provider goes by: with exactly one, that
    /// provider answers (`export DEEPSEEK_API_KEY=…` is all it takes); with
    /// several, the caller must choose.
    pub fn providers_with_keys(
        &self,
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Vec<(String, String)> {
        self.providers
            .iter()
            .filter_map(|(name, entry)| {
                let var = entry.kind.api_key_env()?;
                (!var.is_empty() && env(var).is_some_and(|v| !v.is_empty()))
                    .then(|| (name.clone(), var.to_string()))
            })
            .collect()
    }

    /// Where something in this configuration is: the file, or `what`.
    pub fn location(&self) -> String {
        self.path.as_ref().map_or_else(
            || "built-in configuration".into(),
            |p| p.display().to_string(),
        )
    }
}

/// The first `dsh.toml` in `start` or a directory above it.
pub fn discover(start: &Path) -> Option<PathBuf> {
    let start = if start.is_absolute() {
        start.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(start)
    };
    start
        .ancestors()
        .map(|d| d.join(FILE_NAME))
        .find(|p| p.is_file())
}

// The built-in API providers need `http`.
#[cfg(all(test, feature = "http"))]
mod tests {
    use std::ffi::OsString;

    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_api_providers_whose_key_is_set() {
        let c = Config::builtin();
        assert_eq!(
            c.providers_with_keys(env_of(&[("DEEPSEEK_API_KEY", "sk-1")])),
            [("deepseek".to_string(), "DEEPSEEK_API_KEY".to_string())]
        );
        // An empty variable is no key; the CLIs' keys are not dsh's.
        assert!(
            c.providers_with_keys(env_of(&[("DEEPSEEK_API_KEY", ""), ("PATH", "/bin")]))
                .is_empty()
        );
        let names: Vec<String> = c
            .providers_with_keys(env_of(&[
                ("OPENAI_API_KEY", "a"),
                ("ANTHROPIC_API_KEY", "b"),
                ("DEEPSEEK_API_KEY", "c"),
            ]))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["anthropic", "deepseek", "openai"]);
    }
}
