//! The registration seam between `dsh.toml` and the providers: each kind
//! of provider ([`ProviderKind`]) names its `kind`, reads its own
//! `[providers.NAME]` table into its settings ([`ProviderConfig`]), and
//! from those builds its provider and says whether it is usable. The
//! configuration code holds a [`Registry`] and the opaque settings, and
//! names no provider type: adding a provider adds a kind here, not a case
//! to the config and the router.
//!
//! It lives in `dsh-providers`, not in `dsh-seam`: reading `dsh.toml` is
//! the configuration's business, and the seam stays what an embedder
//! implements to answer calls (no `toml`, no `dsh-exec`). An embedder that
//! wants its own `kind` in `dsh.toml` depends on this crate without its
//! `http` feature (no reqwest) and registers it with [`Registry::with`].

use std::any::Any;
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use dsh_exec::WorkerCommand;
use dsh_protocol::SandboxPolicy;
use dsh_seam::SubagentProvider;

use crate::SetupError;
use crate::cli::config::{CliConfig, CliKind};

/// Where tools run and how they are confined: the program (a
/// `dsh-worker`, or `dsh __worker`) and the sandbox policy (`--sandbox`).
/// The same program is the reaper of agent CLIs and `command` programs,
/// so every kind may take it ([`ProviderConfig::set_tool_host`]), with or
/// without the agent loop (`http`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolHost {
    /// The worker program; `None` finds it like a run's worker
    /// ([`WorkerCommand::resolve`]) at the first tool call.
    pub command: Option<WorkerCommand>,
    /// `strict` refuses a tool call that cannot be fully confined.
    pub sandbox: SandboxPolicy,
}

impl Default for ToolHost {
    fn default() -> Self {
        ToolHost {
            command: None,
            sandbox: SandboxPolicy::BestEffort,
        }
    }
}

/// One `kind` a `[providers.NAME]` table may name: it reads the table.
pub trait ProviderKind: Send + Sync {
    /// The `kind` as `dsh.toml` spells it (`openai`, `claude-code`, …), as
    /// the messages list it.
    fn name(&self) -> &'static str;

    /// Other spellings it answers to, never listed (`scripted` for
    /// `fixture`).
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// Reads the table of the provider `provider` (its `kind` and the
    /// host's `stall` already taken out); relative paths are relative to
    /// `base_dir`, the directory of `dsh.toml`.
    fn read(
        &self,
        provider: &str,
        table: toml::Table,
        base_dir: &Path,
    ) -> Result<Box<dyn ProviderConfig>, TableError>;

    /// The providers of this kind that exist without a file, by name
    /// (`deepseek` and `openai` for `openai`).
    fn builtins(&self) -> Vec<(&'static str, Box<dyn ProviderConfig>)> {
        Vec::new()
    }
}

/// A provider's checked settings, as its kind read them: opaque to the
/// configuration, which asks it only what every kind can answer.
pub trait ProviderConfig: Debug + Send + Sync + DynConfig {
    /// The `kind` it was read as (`openai`, `command`, `claude-code`, …).
    fn kind_name(&self) -> &'static str;

    /// Builds the provider `name`; relative paths against `base_dir`.
    /// Reads its API key or finds its program, so it runs when the run
    /// first needs it.
    fn build(&self, name: &str, base_dir: &Path) -> Result<Arc<dyn SubagentProvider>, SetupError>;

    /// Whether it can be used, without calling it: `Ok(detail)` or why not
    /// (`dsh workflow providers`).
    fn usable(&self, base_dir: &Path) -> Result<String, SetupError>;

    /// Where the agent loop's tools run, and dsh's reaper for the programs
    /// a provider starts; kinds that use neither ignore it.
    fn set_tool_host(&mut self, _host: &ToolHost) {}

    /// The environment variable of its API key, for kinds that have one
    /// (what a run without a default provider goes by).
    fn api_key_env(&self) -> Option<&str> {
        None
    }

    /// Which agent CLI it drives and with what table, for the agent CLI
    /// kinds (`dsh workflow providers` probes their programs).
    fn agent_cli(&self) -> Option<(CliKind, &CliConfig)> {
        None
    }
}

/// Clone and equality of the boxed settings (so a configuration can be
/// cloned and compared); implemented for every `ProviderConfig` that is
/// `Clone + PartialEq`.
pub trait DynConfig {
    /// A boxed copy.
    fn clone_box(&self) -> Box<dyn ProviderConfig>;
    /// Whether `other` is the same type with the same settings.
    fn same_as(&self, other: &dyn Any) -> bool;
    /// Itself, for [`DynConfig::same_as`] only.
    fn as_any(&self) -> &dyn Any;
}

impl<T: ProviderConfig + Clone + PartialEq + 'static> DynConfig for T {
    fn clone_box(&self) -> Box<dyn ProviderConfig> {
        Box::new(self.clone())
    }

    fn same_as(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<T>().is_some_and(|o| o == self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Clone for Box<dyn ProviderConfig> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

// Compare `*a == *b`: `==` on the boxes themselves moves the right-hand
// one (rust-lang/rust#31740), as does a derived `PartialEq` holding one.
impl PartialEq for dyn ProviderConfig {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other.as_any())
    }
}

/// What is wrong with a `[providers.NAME]` table. The message names the
/// key, the problem and the fix; the caller adds the file and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The table has no `kind`.
    #[error("providers.{provider}: missing kind; add kind = {known}")]
    MissingKind {
        /// The provider's name.
        provider: String,
        /// The kinds this build knows, as [`Registry::kind_list`] gives them.
        known: String,
    },
    /// `kind` is not a string.
    #[error("providers.{provider}.kind: expected a string, found {found}; use kind = {known}")]
    KindNotString {
        /// The provider's name.
        provider: String,
        /// The TOML type found (`integer`, `table`, …).
        found: &'static str,
        /// The kinds this build knows.
        known: String,
    },
    /// No kind of that name.
    #[error("providers.{provider}.kind: unknown kind {kind:?}; use {known}")]
    UnknownKind {
        /// The provider's name.
        provider: String,
        /// The `kind` given.
        kind: String,
        /// The kinds this build knows.
        known: String,
    },
    /// An API model's kind in a build without the `http` feature.
    #[error(
        "providers.{provider}.kind: {kind:?} is an API model over HTTP, and this build has no HTTP providers (dsh-orchestrator was built without its `http` feature); enable the `http` feature of dsh-orchestrator (on by default) to use it, or use {known}"
    )]
    NeedsHttp {
        /// The provider's name.
        provider: String,
        /// The `kind` given (`openai`, `anthropic`).
        kind: String,
        /// The kinds this build knows.
        known: String,
    },
    /// The keys do not fit the kind (unknown key, wrong type): the
    /// parser's message, with the fix.
    #[error("providers.{provider} ({kind}): {message}")]
    Keys {
        /// The provider's name.
        provider: String,
        /// The kind whose keys these are.
        kind: &'static str,
        /// The parser's message and the fix ([`fix_hint`]).
        message: String,
    },
    /// One key's value, checked beyond its type.
    #[error("providers.{provider}.{key}: {problem}")]
    Value {
        /// The provider's name.
        provider: String,
        /// The key, as written in `dsh.toml`.
        key: String,
        /// What is wrong, and the fix.
        problem: String,
    },
}

impl TableError {
    /// The parser's error `e` reading the table of `provider` as `kind`.
    pub fn keys(provider: &str, kind: &'static str, e: &toml::de::Error) -> TableError {
        TableError::Keys {
            provider: provider.to_string(),
            kind,
            message: fix_hint(e.message().trim()),
        }
    }
}

/// The table read as `T`, a kind's keys; their error names `kind`.
pub fn read_keys<T: serde::de::DeserializeOwned>(
    provider: &str,
    kind: &'static str,
    table: toml::Table,
) -> Result<T, TableError> {
    toml::Value::Table(table)
        .try_into::<T>()
        .map_err(|e| TableError::keys(provider, kind, &e))
}

/// The parser's messages, with the fix spelled out where they lack it.
pub fn fix_hint(message: &str) -> String {
    if message.starts_with("unknown field") {
        format!(
            "{message}; remove the key or correct its spelling (docs/providers.md lists every key)"
        )
    } else if message.starts_with("invalid type") {
        format!("{message}; give a value of that type (docs/providers.md lists every key)")
    } else {
        message.to_string()
    }
}

/// The kinds of API models, which need the `http` feature: named in the
/// error of a build without it rather than called unknown.
#[cfg(not(feature = "http"))]
const HTTP_KINDS: [&str; 2] = ["openai", "anthropic"];

/// The kinds a configuration can read, in the order the messages list them.
#[derive(Clone)]
pub struct Registry {
    pub(crate) kinds: Vec<Arc<dyn ProviderKind>>,
}

impl Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.kinds.iter().map(|k| k.name()))
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin()
    }
}

impl Registry {
    /// This registry and `kind`: listed last, or in the place of the kind
    /// of the same name, which it replaces.
    pub fn with(mut self, kind: impl ProviderKind + 'static) -> Registry {
        let kind: Arc<dyn ProviderKind> = Arc::new(kind);
        match self.kinds.iter_mut().find(|k| k.name() == kind.name()) {
            Some(slot) => *slot = kind,
            None => self.kinds.push(kind),
        }
        self
    }

    /// The kind `name` (or one of its aliases) names.
    pub fn find(&self, name: &str) -> Option<&dyn ProviderKind> {
        self.kinds
            .iter()
            .find(|k| k.name() == name || k.aliases().contains(&name))
            .map(|k| k.as_ref())
    }

    /// Every kind, as the messages list them:
    /// `"openai", "anthropic", … or "fixture"`.
    pub fn kind_list(&self) -> String {
        let names: Vec<String> = self
            .kinds
            .iter()
            .map(|k| format!("{:?}", k.name()))
            .collect();
        match names.split_last() {
            None => String::new(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }

    /// The providers that exist without a file, from every kind.
    pub fn builtins(&self) -> Vec<(&'static str, Box<dyn ProviderConfig>)> {
        self.kinds.iter().flat_map(|k| k.builtins()).collect()
    }

    /// One `[providers.NAME]` table (the host's `stall` already taken
    /// out): its `kind` (or `type`) picks the kind that reads the rest.
    pub fn read(
        &self,
        provider: &str,
        mut table: toml::Table,
        base_dir: &Path,
    ) -> Result<Box<dyn ProviderConfig>, TableError> {
        let kind = match table.remove("kind").or_else(|| table.remove("type")) {
            Some(toml::Value::String(k)) => k,
            Some(other) => {
                return Err(TableError::KindNotString {
                    provider: provider.to_string(),
                    found: other.type_str(),
                    known: self.kind_list(),
                });
            }
            None => {
                return Err(TableError::MissingKind {
                    provider: provider.to_string(),
                    known: self.kind_list(),
                });
            }
        };
        match self.find(&kind) {
            Some(k) => k.read(provider, table, base_dir),
            None => Err(self.unknown(provider, kind)),
        }
    }

    fn unknown(&self, provider: &str, kind: String) -> TableError {
        #[cfg(not(feature = "http"))]
        if HTTP_KINDS.contains(&kind.as_str()) {
            return TableError::NeedsHttp {
                provider: provider.to_string(),
                kind,
                known: self.kind_list(),
            };
        }
        TableError::UnknownKind {
            provider: provider.to_string(),
            kind,
            known: self.kind_list(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).expect("toml")
    }

    #[test]
    fn the_kinds_are_listed_in_one_order() {
        let want = if cfg!(feature = "http") {
            "\"openai\", \"anthropic\", \"claude-code\", \"codex\", \"qwen\", \"command\" or \"fixture\""
        } else {
            "\"claude-code\", \"codex\", \"qwen\", \"command\" or \"fixture\""
        };
        assert_eq!(Registry::builtin().kind_list(), want);
    }

    #[test]
    fn an_alias_finds_its_kind_and_is_not_listed() {
        let r = Registry::builtin();
        assert_eq!(r.find("scripted").map(|k| k.name()), Some("fixture"));
        assert!(!r.kind_list().contains("scripted"));
    }

    #[test]
    fn each_kind_reads_its_own_table() {
        let r = Registry::builtin();
        let base = Path::new("/p");
        let c = r
            .read(
                "x",
                table("kind = \"codex\"\nprogram = \"my-codex\"\n"),
                base,
            )
            .expect("valid");
        assert_eq!(c.kind_name(), "codex");
        let (kind, cfg) = c.agent_cli().expect("an agent CLI");
        assert_eq!((kind, cfg.program_name(kind)), (CliKind::Codex, "my-codex"));
        let f = r
            .read("f", table("type = \"scripted\"\npath = \"f.json\"\n"), base)
            .expect("valid");
        assert_eq!(f.kind_name(), "fixture");
        assert!(f.agent_cli().is_none() && f.api_key_env().is_none());
        // Copies compare equal, other settings do not.
        assert!(*f.clone() == *f);
        assert!(*c != *f);
    }

    #[test]
    fn a_table_without_a_string_kind_says_which_kinds_there_are() {
        let r = Registry::builtin();
        let e = r
            .read("x", table("kind = 3\n"), Path::new("/p"))
            .expect_err("no kind");
        assert_eq!(
            e.to_string(),
            format!(
                "providers.x.kind: expected a string, found integer; use kind = {}",
                r.kind_list()
            )
        );
    }

    /// Without `http`, an API model's kind says what this build lacks and
    /// how to get it, instead of calling the kind unknown.
    #[cfg(not(feature = "http"))]
    #[test]
    fn an_api_kind_without_http_says_how_to_get_it() {
        let e = Registry::builtin()
            .read("x", table("kind = \"openai\"\n"), Path::new("/p"))
            .expect_err("no http");
        assert!(matches!(e, TableError::NeedsHttp { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.starts_with("providers.x.kind: \"openai\""), "{m}");
        assert!(m.contains("`http` feature of dsh-orchestrator"), "{m}");
    }
}
