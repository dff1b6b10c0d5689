//! `[providers.NAME]` with `kind = "anthropic"`: the keys, their defaults
//! (Anthropic's API) and their checks. The agent loop's keys (`tools`,
//! `max_turns`, …) are shared with `openai` ([`LoopSettings`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::SetupError;
use crate::agent::LoopSettings;

/// Most attempts `max_attempts` may ask for.
const MAX_ATTEMPTS: u32 = 20;

/// `[providers.NAME]` with `kind = "anthropic"`. Every key is optional.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnthropicConfig {
    /// The API's base URL; requests go to `{base_url}/v1/messages`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The model when the call gives no `model` option.
    #[serde(default = "default_model")]
    pub model: String,
    /// The environment variable holding the API key (sent as `x-api-key`);
    /// empty: no key is sent.
    #[serde(default = "default_key_env")]
    pub api_key_env: String,
    /// `anthropic-version`, sent with every request.
    #[serde(default = "default_version")]
    pub anthropic_version: String,
    /// `max_tokens` of each turn (the API requires one).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
    /// Sent as `temperature` when set.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Extra HTTP headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Bound on one HTTP request (connect, send, the whole response).
    #[serde(
        default = "default_timeout",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub timeout: Duration,
    /// Attempts in all for one request on 429, 5xx (529 included) and
    /// connection errors.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The delay before the second attempt; it doubles for each further one.
    #[serde(
        default = "default_backoff",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub backoff: Duration,
    /// Stream the answer as server-sent events.
    #[serde(default = "default_true")]
    pub stream: bool,
    /// Requests in flight at once: `"adaptive"` (halved on 429/529,
    /// raised again by answers) or a fixed number.
    #[serde(default)]
    pub concurrency: crate::dispatch::Concurrency,
    /// Longest a request waits for another's answer to start, so that
    /// their shared prompt prefix is served from the provider's cache;
    /// `0` never waits.
    #[serde(
        default = "default_prefix_hold",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub prefix_hold: Duration,
    /// The agent loop's keys, set by the configuration loader.
    #[serde(skip)]
    pub agent: LoopSettings,
}

fn default_base_url() -> String {
    "https://api.anthropic.com".into()
}
fn default_model() -> String {
    "claude-sonnet-4-5".into()
}
fn default_key_env() -> String {
    "ANTHROPIC_API_KEY".into()
}
fn default_version() -> String {
    "2023-06-01".into()
}
fn default_max_tokens() -> u64 {
    8192
}
fn default_timeout() -> Duration {
    Duration::from_secs(300)
}
fn default_max_attempts() -> u32 {
    4
}
fn default_backoff() -> Duration {
    Duration::from_millis(500)
}
fn default_prefix_hold() -> Duration {
    crate::dispatch::DEFAULT_PREFIX_HOLD
}
fn default_true() -> bool {
    true
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        AnthropicConfig {
            base_url: default_base_url(),
            model: default_model(),
            api_key_env: default_key_env(),
            anthropic_version: default_version(),
            max_tokens: default_max_tokens(),
            temperature: None,
            headers: BTreeMap::new(),
            timeout: default_timeout(),
            max_attempts: default_max_attempts(),
            backoff: default_backoff(),
            stream: true,
            concurrency: crate::dispatch::Concurrency::Adaptive,
            prefix_hold: default_prefix_hold(),
            agent: LoopSettings::default(),
        }
    }
}

impl AnthropicConfig {
    /// How the provider's requests are dispatched.
    pub fn dispatch(&self) -> crate::dispatch::DispatchConfig {
        crate::dispatch::DispatchConfig {
            concurrency: self.concurrency,
            prefix_hold: self.prefix_hold,
        }
    }

    /// Checks the values (not the key).
    pub fn check(&self) -> Result<(), SetupError> {
        match reqwest::Url::parse(&self.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {}
            Ok(_) => {
                return Err(SetupError::invalid(
                    format!("base_url {:?}", self.base_url),
                    "must be an http:// or https:// URL",
                ));
            }
            Err(e) => {
                return Err(SetupError::invalid(
                    format!("base_url {:?}", self.base_url),
                    e.to_string(),
                ));
            }
        }
        if self.model.trim().is_empty() {
            return Err(SetupError::invalid("model", "must not be empty"));
        }
        if self.max_tokens == 0 {
            return Err(SetupError::invalid("max_tokens", "must be at least 1"));
        }
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS {
            return Err(SetupError::invalid(
                "max_attempts",
                format!(
                    "must be between 1 and {MAX_ATTEMPTS}, got {}",
                    self.max_attempts
                ),
            ));
        }
        if self.timeout.is_zero() {
            return Err(SetupError::invalid(
                "timeout",
                "must be longer than zero, e.g. \"300s\"",
            ));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(SetupError::invalid(
                "temperature",
                format!("must be a number ≥ 0, got {t}"),
            ));
        }
        if self
            .headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("x-api-key"))
            && !self.api_key_env.is_empty()
        {
            return Err(SetupError::invalid(
                "headers",
                "x-api-key is set from api_key_env; set api_key_env = \"\" to send your own",
            ));
        }
        self.agent.check()
    }

    /// Whether the provider can be used, without calling it.
    pub fn usable(&self) -> Result<String, SetupError> {
        self.check()?;
        if self.api_key_env.is_empty() {
            return Ok(format!("{} ({}), no key", self.base_url, self.model));
        }
        match std::env::var_os(&self.api_key_env) {
            Some(v) if !v.is_empty() => Ok(format!(
                "{} ({}), key from {}",
                self.base_url, self.model, self.api_key_env
            )),
            _ => Err(SetupError::MissingKey {
                env: self.api_key_env.clone(),
            }),
        }
    }
}
