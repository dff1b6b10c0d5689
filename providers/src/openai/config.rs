//! `[providers.NAME]` with `type = "openai"`: the configuration keys, their
//! defaults (DeepSeek's API) and their checks.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::SetupError;

/// How a call with a `schema` asks the API for JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// `response_format: {"type": "json_schema", "json_schema": {…}}`
    /// (OpenAI, vLLM, llama.cpp and others).
    JsonSchema,
    /// `response_format: {"type": "json_object"}`: the schema travels in
    /// the system message only (DeepSeek).
    JsonObject,
    /// No `response_format` at all: the schema travels in the system
    /// message only (servers that reject the field).
    None,
}

impl StructuredOutput {
    /// The value as `dsh.toml` spells it: `json_schema`, `json_object` or
    /// `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredOutput::JsonSchema => "json_schema",
            StructuredOutput::JsonObject => "json_object",
            StructuredOutput::None => "none",
        }
    }
}

/// `[providers.NAME]` with `type = "openai"`. Every key is optional; the
/// defaults are DeepSeek's API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// The API's base URL; requests go to `{base_url}/chat/completions`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The model when the call gives no `model` option.
    #[serde(default = "default_model")]
    pub model: String,
    /// The environment variable holding the API key, read when the provider
    /// is built. An empty name means the endpoint takes no key (no
    /// `Authorization` header is sent).
    #[serde(default = "default_key_env")]
    pub api_key_env: String,
    /// How calls with a `schema` ask for JSON.
    #[serde(default = "default_structured_output")]
    pub structured_output: StructuredOutput,
    /// With `structured_output = "json_schema"`: ask for strict mode when
    /// the schema allows it (every object closed and every property
    /// required, only plain keywords: no `oneOf`, `anyOf`, `$ref`, string or
    /// number constraints); other schemas are sent non-strict.
    #[serde(default)]
    pub strict: bool,
    /// Whether the endpoint takes `reasoning_effort`; when false a call's
    /// `effort` option is not sent.
    #[serde(default)]
    pub reasoning_effort: bool,
    /// Sent as `temperature` when set.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Sent as `max_tokens` when set.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Extra HTTP headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Bound on one HTTP request (connect, send, the whole response).
    #[serde(
        default = "default_timeout",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub timeout: Duration,
    /// Attempts in all for one request (the first one included) on 429,
    /// 5xx, timeouts and connection errors.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The delay before the second attempt; it doubles for each further
    /// one (with jitter, at most [`MAX_DELAY`]).
    #[serde(
        default = "default_backoff",
        deserialize_with = "dsh_seam::units::de::duration"
    )]
    pub backoff: Duration,
    /// Ask for the answer as server-sent events (`stream: true`, with
    /// `stream_options.include_usage`); `false` for servers that refuse it.
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
    /// The agent loop's keys (`tools`, `max_turns`, `max_tool_calls`,
    /// `network`, `bash_timeout`, `system_prompt`, `workspace`,
    /// `worktree_dir`): read from the same table by the configuration
    /// loader, which takes them out before the rest is read here.
    #[serde(skip)]
    pub agent: crate::agent::LoopSettings,
}

fn default_prefix_hold() -> Duration {
    crate::dispatch::DEFAULT_PREFIX_HOLD
}
fn default_true() -> bool {
    true
}
/// Longest wait between two attempts (the HTTP part's retry policy).
pub use crate::http::MAX_DELAY;

/// Most attempts `max_attempts` may ask for.
const MAX_ATTEMPTS: u32 = 20;

fn default_base_url() -> String {
    "https://api.deepseek.com".into()
}
fn default_model() -> String {
    "deepseek-chat".into()
}
fn default_key_env() -> String {
    "DEEPSEEK_API_KEY".into()
}
fn default_structured_output() -> StructuredOutput {
    StructuredOutput::JsonObject
}
fn default_timeout() -> Duration {
    Duration::from_secs(120)
}
fn default_max_attempts() -> u32 {
    4
}
fn default_backoff() -> Duration {
    Duration::from_millis(500)
}

impl Default for OpenAiConfig {
    /// DeepSeek: `https://api.deepseek.com`, `deepseek-chat`, the key from
    /// `DEEPSEEK_API_KEY`, schemas as `json_object`.
    fn default() -> Self {
        OpenAiConfig {
            base_url: default_base_url(),
            model: default_model(),
            api_key_env: default_key_env(),
            structured_output: default_structured_output(),
            strict: false,
            reasoning_effort: false,
            temperature: None,
            max_tokens: None,
            headers: BTreeMap::new(),
            timeout: default_timeout(),
            max_attempts: default_max_attempts(),
            backoff: default_backoff(),
            stream: true,
            concurrency: crate::dispatch::Concurrency::Adaptive,
            prefix_hold: default_prefix_hold(),
            agent: crate::agent::LoopSettings::default(),
        }
    }
}

impl OpenAiConfig {
    /// How the provider's requests are dispatched.
    pub fn dispatch(&self) -> crate::dispatch::DispatchConfig {
        crate::dispatch::DispatchConfig {
            concurrency: self.concurrency,
            prefix_hold: self.prefix_hold,
        }
    }

    /// The built-in `openai` entry: api.openai.com, `OPENAI_API_KEY`,
    /// schemas as `json_schema`, `reasoning_effort` sent.
    pub fn openai() -> Self {
        OpenAiConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            structured_output: StructuredOutput::JsonSchema,
            reasoning_effort: true,
            ..OpenAiConfig::default()
        }
    }

    /// Whether the provider can be used, without calling it: `Ok(detail)`
    /// or why not.
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
            _ => Err(self.missing_key()),
        }
    }

    pub(crate) fn missing_key(&self) -> SetupError {
        SetupError::MissingKey {
            env: self.api_key_env.clone(),
        }
    }

    /// Checks the values (not the key): the base URL, the numbers, the
    /// headers.
    pub fn check(&self) -> Result<(), SetupError> {
        let base_url = || format!("base_url {:?}", self.base_url);
        match reqwest::Url::parse(&self.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {}
            Ok(_) => {
                return Err(SetupError::invalid(
                    base_url(),
                    "must be an http:// or https:// URL",
                ));
            }
            Err(e) => return Err(SetupError::invalid(base_url(), e.to_string())),
        }
        if self.model.trim().is_empty() {
            return Err(SetupError::invalid("model", "must not be empty"));
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
                "must be longer than zero, e.g. \"120s\"",
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
        if self.max_tokens == Some(0) {
            return Err(SetupError::invalid("max_tokens", "must be at least 1"));
        }
        self.agent.check()?;
        for (name, value) in &self.headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(SetupError::invalid(
                    "headers",
                    format!("{name:?} is not a valid HTTP header name"),
                ));
            }
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(SetupError::invalid(
                    format!("headers.{name}"),
                    "the value is not a valid HTTP header value",
                ));
            }
            if name.eq_ignore_ascii_case("authorization") && !self.api_key_env.is_empty() {
                return Err(SetupError::invalid(
                    "headers",
                    "Authorization is set from api_key_env; set api_key_env = \"\" to send your own",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<OpenAiConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_table_is_deepseek() {
        let c = parse(json!({})).expect("valid");
        assert_eq!(c, OpenAiConfig::default());
        assert_eq!(c.base_url, "https://api.deepseek.com");
        assert_eq!(c.model, "deepseek-chat");
        assert_eq!(c.api_key_env, "DEEPSEEK_API_KEY");
        assert_eq!(c.structured_output, StructuredOutput::JsonObject);
        assert_eq!(c.timeout, Duration::from_secs(120));
        assert_eq!(c.max_attempts, 4);
        assert_eq!(c.backoff, Duration::from_millis(500));
        assert!(!c.reasoning_effort && !c.strict);
        c.check().expect("the defaults are valid");
        OpenAiConfig::openai()
            .check()
            .expect("the openai entry is valid");
    }

    #[test]
    fn every_key() {
        let c = parse(json!({
            "base_url": "http://127.0.0.1:8080/v1",
            "model": "local",
            "api_key_env": "",
            "structured_output": "json_schema",
            "strict": true,
            "reasoning_effort": true,
            "temperature": 0.2,
            "max_tokens": 1000,
            "headers": { "X-Team": "core" },
            "timeout": "1m",
            "max_attempts": 2,
            "backoff": "250ms",
        }))
        .expect("valid");
        assert_eq!(c.structured_output, StructuredOutput::JsonSchema);
        assert_eq!(c.timeout, Duration::from_secs(60));
        assert_eq!(c.backoff, Duration::from_millis(250));
        assert_eq!(c.headers["X-Team"], "core");
        assert_eq!(
            c.usable(),
            Ok("http://127.0.0.1:8080/v1 (local), no key".into())
        );
    }

    /// The same spellings as every other duration (dsh_seam::units): a bare
    /// number is seconds, fractions too.
    #[rstest]
    #[case::integer(json!({ "timeout": 5 }), 5000)]
    #[case::fraction(json!({ "timeout": 1.5 }), 1500)]
    #[case::text(json!({ "timeout": "1h30m" }), 5_400_000)]
    fn durations_follow_the_one_rule(#[case] v: serde_json::Value, #[case] ms: u128) {
        assert_eq!(parse(v).expect("valid").timeout.as_millis(), ms);
    }

    #[rstest]
    #[case::unknown_key(json!({ "kind": "openai" }), "unknown field `kind`")]
    #[case::bad_duration(json!({ "timeout": "soon" }), "invalid duration \"soon\"")]
    #[case::negative_duration(json!({ "backoff": -5 }), "must not be negative")]
    #[case::bool_duration(json!({ "backoff": true }), "a duration such as")]
    #[case::bad_mode(json!({ "structured_output": "xml" }), "json_schema")]
    fn malformed_tables_are_refused(#[case] v: serde_json::Value, #[case] want: &str) {
        let err = parse(v).expect_err("invalid");
        assert!(
            err.to_string().contains(want),
            "{err} should contain {want}"
        );
    }

    #[rstest]
    #[case::url(json!({ "base_url": "api.deepseek.com" }), "base_url")]
    #[case::scheme(json!({ "base_url": "ftp://x/" }), "http:// or https://")]
    #[case::attempts(json!({ "max_attempts": 0 }), "max_attempts")]
    #[case::timeout(json!({ "timeout": "0s" }), "timeout")]
    #[case::temperature(json!({ "temperature": -1.0 }), "temperature")]
    #[case::header_name(json!({ "headers": { "bad name": "x" } }), "header name")]
    #[case::header_value(json!({ "headers": { "X": "a\nb" } }), "header value")]
    #[case::auth_header(json!({ "headers": { "authorization": "x" } }), "api_key_env")]
    fn bad_values_are_named(#[case] v: serde_json::Value, #[case] want: &str) {
        let c = parse(v).expect("parses");
        let err = c.check().expect_err("invalid");
        assert!(
            err.to_string().contains(want),
            "{err} should contain {want}"
        );
        assert_eq!(c.usable().expect_err("unusable"), err);
    }

    #[test]
    fn usable_names_the_variable_without_calling_anything() {
        let c = OpenAiConfig {
            api_key_env: "DSH_TEST_SURELY_UNSET_OPENAI_KEY".into(),
            ..OpenAiConfig::default()
        };
        let err = c.usable().expect_err("unset");
        assert!(
            err.to_string()
                .starts_with("DSH_TEST_SURELY_UNSET_OPENAI_KEY is not set; export it"),
            "{err}"
        );
        // PATH is always set: it stands in for a key here.
        let c = OpenAiConfig {
            api_key_env: "PATH".into(),
            ..OpenAiConfig::default()
        };
        assert_eq!(
            c.usable(),
            Ok("https://api.deepseek.com (deepseek-chat), key from PATH".into())
        );
    }

    /// The `dsh.toml` examples of docs/providers.md's openai section parse
    /// (as the loader does: the table without `kind`) and pass the checks.
    #[test]
    fn the_documented_examples_are_valid() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/providers.md");
        let doc = std::fs::read_to_string(path).expect("docs/providers.md");
        let start = doc.find("## The openai provider").expect("the section");
        let section = &doc[start..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
        let mut found = Vec::new();
        for block in section.split("```toml\n").skip(1) {
            let text = &block[..block.find("```").expect("closed block")];
            let file: toml::Table = toml::from_str(text).expect("valid TOML");
            let providers = file["providers"].as_table().expect("[providers]");
            for (name, table) in providers {
                let mut table = table.as_table().expect("a table").clone();
                assert_eq!(
                    table
                        .remove("kind")
                        .and_then(|k| k.as_str().map(str::to_string))
                        .as_deref(),
                    Some("openai")
                );
                let cfg: OpenAiConfig = toml::Value::Table(table)
                    .try_into()
                    .unwrap_or_else(|e| panic!("providers.{name}: {e}"));
                cfg.check()
                    .unwrap_or_else(|e| panic!("providers.{name}: {e}"));
                found.push((name.clone(), cfg));
            }
        }
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["deepseek", "gpt", "local"]);
        assert_eq!(
            found[0].1,
            OpenAiConfig::default(),
            "the DeepSeek example spells out the defaults"
        );
        assert_eq!(found[1].1.timeout, Duration::from_secs(180));
        assert_eq!(found[2].1.api_key_env, "");
    }
}
