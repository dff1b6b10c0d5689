//! `--record FILE`: the calls of one attempt as a fixture (contract §11),
//! one exact-match entry per call in call order with `times: 1`, written
//! atomically so a crash leaves the old file or a valid new one.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::JournalError;
use super::line::Outcome;
use super::rundir::write_atomic;
use crate::provider::Usage;

/// One call as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The call's `seq` in the attempt.
    pub seq: u64,
    /// The call's prompt (matched exactly by the fixture entry).
    pub prompt: String,
    /// The call's schema, matched too; `None` for a text call.
    pub schema: Option<Value>,
    /// The `model` option, matched too; `None` when not given.
    pub model: Option<String>,
    /// How the call ended ([`Outcome::Cancelled`] while it is open; it is
    /// recorded as `hang`).
    pub outcome: Outcome,
    /// The tokens the child reported; `None` when it reported none.
    pub usage: Option<Usage>,
}

/// The fixture document for `calls` (already in call order).
pub fn fixture(calls: &[Recorded]) -> Value {
    let answers: Vec<Value> = calls.iter().map(entry).collect();
    json!({ "version": 1, "answers": answers })
}

fn entry(c: &Recorded) -> Value {
    let mut m = Map::new();
    let mut matcher = Map::new();
    matcher.insert("prompt".into(), c.prompt.clone().into());
    if let Some(s) = &c.schema {
        matcher.insert("schema".into(), s.clone());
    }
    if let Some(model) = &c.model {
        matcher.insert("model".into(), model.clone().into());
    }
    m.insert("match".into(), Value::Object(matcher));
    let (k, v) = match &c.outcome {
        Outcome::Text(t) => ("text", Value::from(t.clone())),
        Outcome::Structured(v) => ("structured", v.clone()),
        Outcome::Fail(r) => ("fail", Value::from(r.clone())),
        Outcome::StartError(r) => ("startError", Value::from(r.clone())),
        Outcome::ResultError(r) => ("resultError", Value::from(r.clone())),
        // It never answered: replaying it waits the same way.
        Outcome::Cancelled => ("hang", Value::Bool(true)),
    };
    m.insert(k.into(), v);
    if let Some(u) = c.usage {
        m.insert(
            "usage".into(),
            json!({ "input": u.input, "output": u.output }),
        );
    }
    m.insert("times".into(), 1.into());
    Value::Object(m)
}

/// Writes the fixture for `calls` to `path` atomically.
pub fn write(path: &Path, calls: &[Recorded]) -> Result<(), JournalError> {
    let mut text = serde_json::to_string_pretty(&fixture(calls)).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::scripted::ScriptedProvider;

    #[test]
    fn a_recording_is_a_valid_fixture_with_exact_matches_in_call_order() {
        let calls = vec![
            Recorded {
                seq: 1,
                prompt: "plan".into(),
                schema: None,
                model: Some("m1".into()),
                outcome: Outcome::Text("1. parse".into()),
                usage: Some(Usage {
                    input: 3,
                    output: 4,
                }),
            },
            Recorded {
                seq: 2,
                prompt: "check".into(),
                schema: Some(json!({"type": "object"})),
                model: None,
                outcome: Outcome::Structured(json!({"ok": true})),
                usage: None,
            },
            Recorded {
                seq: 3,
                prompt: "refuse".into(),
                schema: None,
                model: None,
                outcome: Outcome::Fail("no".into()),
                usage: None,
            },
            Recorded {
                seq: 4,
                prompt: "stuck".into(),
                schema: None,
                model: None,
                outcome: Outcome::Cancelled,
                usage: None,
            },
        ];
        let doc = fixture(&calls);
        assert_eq!(
            doc["answers"][0]["match"],
            json!({"prompt": "plan", "model": "m1"})
        );
        assert_eq!(doc["answers"][0]["usage"], json!({"input": 3, "output": 4}));
        assert_eq!(doc["answers"][1]["structured"], json!({"ok": true}));
        assert_eq!(doc["answers"][3]["hang"], json!(true));
        assert!(
            doc["answers"]
                .as_array()
                .expect("answers")
                .iter()
                .all(|a| a["times"] == 1)
        );
        ScriptedProvider::from_json_text("rec.json", &doc.to_string()).expect("a valid fixture");
    }

    /// A recording replays whatever numbers its calls' schemas hold. With
    /// serde_json's default float parser, which may be one unit in the
    /// last place off, `1.1970897358768741e-304` written by `--record` read
    /// back as another number: the recorded call no longer matched its own
    /// entry and took the next one. Found by the `fixture` fuzz target
    /// (fuzz/corpus/fixture/regress-float-schema); fixed by serde_json's
    /// `float_roundtrip` feature.
    #[tokio::test]
    async fn a_recorded_schema_with_any_float_matches_its_call_on_replay() {
        use crate::provider::{AgentRequest, ChildResult, SubagentProvider};
        let schema =
            json!({"type": "object", "properties": {"n": {"const": 1.1970897358768741e-304}}});
        let calls = vec![
            Recorded {
                seq: 1,
                prompt: "p".into(),
                schema: Some(schema.clone()),
                model: None,
                outcome: Outcome::Text("first".into()),
                usage: None,
            },
            Recorded {
                seq: 2,
                prompt: "p".into(),
                schema: None,
                model: None,
                outcome: Outcome::Text("second".into()),
                usage: None,
            },
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        write(&path, &calls).expect("write");
        let provider = ScriptedProvider::from_file(&path).expect("a valid fixture");
        let request = AgentRequest {
            schema: Some(schema),
            ..AgentRequest::new(1, "p", "p")
        };
        let child = provider
            .start(request, tokio_util::sync::CancellationToken::new())
            .await
            .expect("the recorded answer");
        let outcome = child.result().await.expect("an answer");
        assert!(
            matches!(&outcome.result, ChildResult::Text(t) if t == "first"),
            "{:?}",
            outcome.result
        );
    }
}
