//! `dsh-providers`: the built-in providers of dsh workflow, and
//! [`SetupError`] (why one cannot be built).
//!
//! - [`cli`]: agent CLIs (Claude Code, Codex, Qwen Code) driven as child
//!   processes; [`command`]: any program that answers a prompt, with its
//!   process discipline and git worktrees;
//! - [`scripted`]: fixtures (answers written down, for tests without keys);
//!   [`dry_run`]: placeholder answers that fit the call's schema;
//! - with the `http` feature: [`openai`] and [`anthropic`] API models over
//!   a vendor-free HTTP part (`http`: transport and retries, [`sse`] and
//!   [`streamed`] bodies, [`dispatch`] of concurrent calls, the shared
//!   model-call memory [`budget`]), and [`agent`], the agent loop that gives
//!   an API model sandboxed tools through the tool host.
//!
//! Every provider implements `dsh_seam::SubagentProvider`; none knows the
//! engine that calls it. Each kind registers itself in [`registry`]: it
//! names its `kind`, reads its own `dsh.toml` table and builds its
//! provider, so the configuration names no provider type. Which provider answers which call is the router's
//! business (`dsh-orchestrator`), not theirs.

#[cfg(feature = "http")]
pub mod agent;
#[cfg(feature = "http")]
pub mod anthropic;
#[cfg(feature = "http")]
pub mod budget;
mod builtin;
pub mod cli;
pub mod command;
#[cfg(feature = "http")]
pub mod dispatch;
pub mod dry_run;
#[cfg(feature = "http")]
pub mod excerpt;
#[cfg(feature = "http")]
pub(crate) mod http;
#[cfg(feature = "http")]
pub mod openai;
mod problems;
pub mod registry;
pub mod scripted;
#[cfg(feature = "http")]
pub mod sse;
#[cfg(feature = "http")]
pub mod streamed;

/// Why a provider cannot be built or used: a value of its table, its API
/// key, its fixture, or (for the router) which provider. The message names
/// the key, the problem and the fix; the caller adds where the table is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// A value of the provider's table: `key: problem and fix`.
    #[error("{key}: {problem}")]
    Invalid {
        /// The key, as written in `dsh.toml` (`base_url`, `argv[0]`, `env[2]`).
        key: String,
        /// What is wrong with the value, and the fix.
        problem: String,
    },
    /// The variable that should hold the API key is not set (or empty).
    #[error(
        "{env} is not set; export it, or set api_key_env to the variable that holds the key (api_key_env = \"\" for an endpoint that takes none)"
    )]
    MissingKey {
        /// The environment variable's name (`api_key_env`).
        env: String,
    },
    /// The API key cannot be sent.
    #[error("the key in {env} cannot be used: {problem}")]
    BadKey {
        /// The environment variable's name (`api_key_env`).
        env: String,
        /// Why the key cannot be sent (not UTF-8, not a valid header value).
        problem: String,
    },
    /// A fixture provider's file.
    #[error(transparent)]
    Fixture(#[from] scripted::FixtureError),
    /// No provider of that name.
    #[error("unknown provider {name:?}; known providers: {}", known.join(", "))]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The names the configuration knows, sorted.
        known: Vec<String>,
    },
    /// The provider exists but cannot be built.
    #[error("provider {name:?} (defined at {defined_at}) cannot be used: {source}")]
    Unusable {
        /// The provider's name, as in `[providers.NAME]`.
        name: String,
        /// Where it was defined (`dsh.toml:12`, or `built-in`).
        defined_at: String,
        /// Why it cannot be built.
        source: Box<SetupError>,
    },
}

impl SetupError {
    /// A value of the provider's table.
    pub fn invalid(key: impl Into<String>, problem: impl Into<String>) -> SetupError {
        SetupError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}
