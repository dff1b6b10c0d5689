//! The `scripted` provider: answers `agent()` calls from a fixture file
//! (contract §11). Deterministic, keyless; for tests, demos and CI.
//!
//! A fixture is validated completely when it is loaded, so a typo fails
//! before the run starts (`FIXTURE_INVALID`, naming `answers[N]`), never in
//! the middle of one.

mod fixture;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use dsh_seam::answered::AnsweredChild;
use dsh_seam::{
    AgentRequest, ChildOrigin, ChildOutcome, ChildResult, ResultFault, StartRefused, Subagent,
    SubagentProvider, Usage,
};

pub use fixture::MAX_DELAY_MS;
use fixture::{FixtureProblem, Strict};

/// A fixture that cannot be used; the message names the entry and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct FixtureError {
    /// The fixture file as displayed (`fixture` for one given as a JSON
    /// value).
    pub file: String,
    /// The entry, the problem and the fix.
    pub message: String,
}

#[derive(Debug, Default)]
struct Matcher {
    prompt: Option<String>,
    prompt_contains: Option<String>,
    prompt_matches: Option<Regex>,
    label: Option<String>,
    phase: Option<String>,
    model: Option<String>,
    effort: Option<String>,
    agent_type: Option<String>,
    provider: Option<String>,
    schema: Option<Value>,
}

impl Matcher {
    fn matches(&self, r: &AgentRequest) -> bool {
        fn eq(want: &Option<String>, got: &Option<String>) -> bool {
            want.as_ref()
                .is_none_or(|w| got.as_deref() == Some(w.as_str()))
        }
        self.prompt.as_ref().is_none_or(|p| *p == r.prompt)
            && self
                .prompt_contains
                .as_ref()
                .is_none_or(|p| r.prompt.contains(p.as_str()))
            && self
                .prompt_matches
                .as_ref()
                .is_none_or(|re| re.is_match(&r.prompt))
            && self.label.as_ref().is_none_or(|l| *l == r.label)
            && eq(&self.phase, &r.phase)
            && eq(&self.model, &r.options.model)
            && eq(&self.effort, &r.options.effort)
            && eq(&self.agent_type, &r.options.agent_type)
            && eq(&self.provider, &r.options.provider)
            && self
                .schema
                .as_ref()
                .is_none_or(|s| r.schema.as_ref() == Some(s))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Text(String),
    Structured(Value),
    Fail(String),
    StartError(String),
    ResultError(String),
    Hang,
}

#[derive(Debug)]
struct Answer {
    matcher: Matcher,
    outcome: Outcome,
    delay: Duration,
    times: Option<u32>,
    used: AtomicU32,
    usage: Option<Usage>,
}

impl Answer {
    /// Claims one use; false when `times` is used up.
    fn claim(&self) -> bool {
        match self.times {
            None => true,
            Some(max) => self
                .used
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                    (u < max).then_some(u + 1)
                })
                .is_ok(),
        }
    }
}

/// A loaded, validated fixture acting as a provider.
#[derive(Debug)]
pub struct ScriptedProvider {
    answers: Vec<Answer>,
    next_child: AtomicU64,
}

impl ScriptedProvider {
    /// Loads and validates a fixture file.
    pub fn from_file(path: &Path) -> Result<Self, FixtureError> {
        let file = path.display().to_string();
        let text =
            dsh_exec::files::read_text(path, dsh_exec::files::FIXTURE_LIMIT).map_err(|e| {
                FixtureError {
                    file: file.clone(),
                    message: format!("cannot read the fixture: {e}"),
                }
            })?;
        Self::from_json_text(&file, &text)
    }

    /// Parses and validates fixture JSON; `file` names it in errors.
    pub fn from_json_text(file: &str, text: &str) -> Result<Self, FixtureError> {
        let err = |message: String| FixtureError {
            file: file.to_string(),
            message,
        };
        // A key given twice is refused rather than the last one winning
        // silently (an entry's second "match" would otherwise drop its first).
        let root: Value = serde_json::from_str::<Strict>(text)
            .map(|s| s.0)
            .map_err(|e| err(format!("{}:{}: not valid JSON: {e}", e.line(), e.column())))?;
        Self::parse(&root).map_err(|p| err(p.0))
    }

    /// Validates a fixture given as JSON (errors name it `fixture`).
    pub fn from_value(root: &Value) -> Result<Self, FixtureError> {
        Self::parse(root).map_err(|p| FixtureError {
            file: "fixture".into(),
            message: p.0,
        })
    }

    fn parse(root: &Value) -> Result<Self, FixtureProblem> {
        Ok(ScriptedProvider {
            answers: fixture::answers(root)?,
            next_child: AtomicU64::new(1),
        })
    }

    fn find(&self, r: &AgentRequest) -> Option<&Answer> {
        self.answers
            .iter()
            .find(|a| a.matcher.matches(r) && a.claim())
    }
}

fn prompt_start(prompt: &str) -> String {
    let chars: Vec<char> = prompt.chars().collect();
    if chars.len() > 60 {
        format!("{}…", chars[..60].iter().collect::<String>())
    } else {
        prompt.to_string()
    }
}

#[async_trait]
impl SubagentProvider for ScriptedProvider {
    async fn start(
        &self,
        request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let Some(answer) = self.find(&request) else {
            return Err(StartRefused::agent_start(format!(
                "no fixture answer matches call #{} (label {:?}, prompt {:?}); add an entry whose \"match\" fits, or a catch-all {{\"match\": {{}}, ...}}",
                request.seq,
                request.label,
                prompt_start(&request.prompt)
            )));
        };
        if let Outcome::StartError(msg) = &answer.outcome {
            if !answer.delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(answer.delay) => {}
                    _ = cancel.cancelled() => {}
                }
            }
            return Err(StartRefused::agent_start(msg.clone()));
        }
        let n = self.next_child.fetch_add(1, Ordering::Relaxed);
        let id = format!("scripted-{n}");
        let given = |result| {
            Ok(ChildOutcome {
                result,
                usage: answer.usage,
            })
        };
        let child = match &answer.outcome {
            Outcome::Text(t) => {
                AnsweredChild::new(id, ChildOrigin::Live, given(ChildResult::Text(t.clone())))
            }
            Outcome::Structured(v) => AnsweredChild::new(
                id,
                ChildOrigin::Live,
                given(ChildResult::Structured(v.clone())),
            ),
            Outcome::Fail(r) => {
                AnsweredChild::new(id, ChildOrigin::Live, given(ChildResult::Failed(r.clone())))
            }
            Outcome::ResultError(m) => {
                AnsweredChild::new(id, ChildOrigin::Live, Err(ResultFault(m.clone())))
            }
            Outcome::Hang => AnsweredChild::hanging(id, ChildOrigin::Live),
            // Refused above; never a child.
            Outcome::StartError(m) => {
                AnsweredChild::new(id, ChildOrigin::Live, given(ChildResult::Failed(m.clone())))
            }
        };
        Ok(Arc::new(child.after(answer.delay)))
    }
}

/// `kind = "fixture"` (or `"scripted"`): a fixture file answers.
pub(crate) struct FixtureKind;

impl crate::registry::ProviderKind for FixtureKind {
    fn name(&self) -> &'static str {
        "fixture"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["scripted"]
    }

    fn read(
        &self,
        provider: &str,
        table: toml::Table,
        base_dir: &Path,
    ) -> Result<Box<dyn crate::registry::ProviderConfig>, crate::registry::TableError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: std::path::PathBuf,
        }
        let t: Table = crate::registry::read_keys(provider, self.name(), table)?;
        let path = if t.path.is_relative() {
            base_dir.join(t.path)
        } else {
            t.path
        };
        Ok(Box::new(FixtureSettings { path }))
    }
}

/// A fixture provider's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FixtureSettings {
    /// The fixture file; a relative `path` in `dsh.toml` is resolved
    /// against its directory.
    pub path: std::path::PathBuf,
}

impl crate::registry::ProviderConfig for FixtureSettings {
    fn kind_name(&self) -> &'static str {
        "fixture"
    }

    fn build(
        &self,
        _name: &str,
        _base_dir: &Path,
    ) -> Result<Arc<dyn SubagentProvider>, crate::SetupError> {
        ScriptedProvider::from_file(&self.path)
            .map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
            .map_err(crate::SetupError::from)
    }

    fn usable(&self, _base_dir: &Path) -> Result<String, crate::SetupError> {
        ScriptedProvider::from_file(&self.path)
            .map(|_| format!("fixture {}", self.path.display()))
            .map_err(crate::SetupError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn req(prompt: &str, label: &str) -> AgentRequest {
        AgentRequest {
            phase: Some("Review".into()),
            options: dsh_seam::AgentOptions {
                model: Some("m1".into()),
                ..dsh_seam::AgentOptions::default()
            },
            ..AgentRequest::new(1, prompt, label)
        }
    }

    #[rstest]
    #[case::not_object("[]", "must be a JSON object")]
    #[case::bad_version(r#"{"version":2,"answers":[]}"#, "version: must be 1")]
    #[case::no_version(r#"{"answers":[]}"#, "version: missing")]
    #[case::unknown_top(r#"{"version":1,"answers":[],"x":1}"#, "unknown key \"x\"")]
    #[case::unknown_entry_key(
        r#"{"version":1,"answers":[{"match":{},"text":"a","bogus":1}]}"#,
        "answers[0]: unknown key \"bogus\""
    )]
    #[case::no_outcome(
        r#"{"version":1,"answers":[{"match":{}},{"match":{}}]}"#,
        "answers[0]: no outcome"
    )]
    #[case::two_outcomes(
        r#"{"version":1,"answers":[{"match":{},"text":"a"},{"match":{},"text":"a","fail":"b"}]}"#,
        "answers[1]: several outcomes (text, fail)"
    )]
    #[case::bad_regex(
        r#"{"version":1,"answers":[{"match":{"promptMatches":"("},"text":"a"}]}"#,
        "answers[0]: match.promptMatches: invalid regex"
    )]
    #[case::unknown_match(
        r#"{"version":1,"answers":[{"match":{"title":"x"},"text":"a"}]}"#,
        "answers[0]: match: unknown key \"title\""
    )]
    #[case::zero_times(
        r#"{"version":1,"answers":[{"match":{},"text":"a","times":0}]}"#,
        "answers[0]: times"
    )]
    #[case::bad_usage(
        r#"{"version":1,"answers":[{"match":{},"text":"a","usage":{"output":-1}}]}"#,
        "answers[0]: usage.output"
    )]
    #[case::not_json("{", "not valid JSON")]
    #[case::duplicate_top_key(
        "{\"version\":1,\"answers\":[],\n\"answers\":[]}",
        "2:9: not valid JSON: the key \"answers\" is given twice in one object"
    )]
    #[case::duplicate_match(
        r#"{"version":1,"answers":[{"match":{"label":"a"},"text":"x","match":{}}]}"#,
        "the key \"match\" is given twice"
    )]
    #[case::duplicate_nested(
        r#"{"version":1,"answers":[{"match":{"label":"a","label":"b"},"text":"x"}]}"#,
        "the key \"label\" is given twice"
    )]
    #[case::endless_delay(
        r#"{"version":1,"answers":[{"match":{},"text":"x","delayMs":18446744073709551615}]}"#,
        "delayMs: must be a whole number of milliseconds from 0 to 86400000"
    )]
    fn invalid_fixtures_name_the_entry(#[case] text: &str, #[case] expected: &str) {
        let err = ScriptedProvider::from_json_text("f.json", text).expect_err("invalid");
        assert!(
            err.to_string().contains(expected),
            "{err} should contain {expected}"
        );
    }

    #[rstest]
    #[case::exact(r#"{"prompt":"Review a.rs"}"#, true)]
    #[case::exact_miss(r#"{"prompt":"Review"}"#, false)]
    #[case::contains(r#"{"promptContains":"a.rs"}"#, true)]
    #[case::regex(r#"{"promptMatches":"^Rev"}"#, true)]
    #[case::regex_miss(r#"{"promptMatches":"^a"}"#, false)]
    #[case::label(r#"{"label":"a"}"#, true)]
    #[case::phase(r#"{"phase":"Review"}"#, true)]
    #[case::model(r#"{"model":"m1"}"#, true)]
    #[case::model_miss(r#"{"model":"m2"}"#, false)]
    #[case::effort_absent(r#"{"effort":"low"}"#, false)]
    #[case::all(r#"{"label":"a","promptContains":"Review","model":"m1"}"#, true)]
    #[case::empty("{}", true)]
    fn matching(#[case] m: &str, #[case] hit: bool) {
        let text = format!(r#"{{"version":1,"answers":[{{"match":{m},"text":"x"}}]}}"#);
        let p = ScriptedProvider::from_json_text("f.json", &text).expect("valid");
        assert_eq!(p.find(&req("Review a.rs", "a")).is_some(), hit);
    }

    #[test]
    fn times_falls_through_to_later_entries() {
        let p = ScriptedProvider::from_json_text(
            "f.json",
            r#"{"version":1,"answers":[{"match":{},"text":"first","times":2},{"match":{},"text":"rest"}]}"#,
        )
        .expect("valid");
        let got: Vec<_> = (0..4)
            .map(|_| p.find(&req("p", "l")).map(|a| a.outcome.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                Some(Outcome::Text("first".into())),
                Some(Outcome::Text("first".into())),
                Some(Outcome::Text("rest".into())),
                Some(Outcome::Text("rest".into())),
            ]
        );
    }
}
