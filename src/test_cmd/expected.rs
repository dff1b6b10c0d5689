//! The expected file `X.expected.json` of `dsh workflow test`, what a run
//! actually produced, and how the two are compared.
//!
//! ```json
//! {
//!   "result": { "value": …, "stopReason": "completed", "agentsStarted": 4 },
//!   "events": {
//!     "agents": [{ "label": "a.rs", "outcome": "completed" }],
//!     "logs": ["2 of 3 files reviewed"],
//!     "phases": ["Review", "Summarize"]
//!   }
//! }
//! ```
//!
//! `result` is the result object of contract §7 without the
//! machine-dependent `sandbox`; `events` and each of its parts are optional,
//! and only the parts present are compared.

use serde_json::{Map, Value, json};

use dsh_orchestrator::RunResult;
use dsh_orchestrator::events::{Event, EventKind};

/// The parts of `events` an expected file may hold, in the order written.
const EVENT_PARTS: [&str; 3] = ["agents", "logs", "phases"];

/// What is wrong with an expected file (without its name: the caller
/// prefixes it).
#[derive(Debug, thiserror::Error)]
pub enum ExpectedError {
    #[error("{line}:{column}: not valid JSON: {0}", line = .0.line(), column = .0.column())]
    NotJson(serde_json::Error),
    #[error("an expected file must be a JSON object {{\"result\": {{…}}, \"events\": {{…}}}}")]
    NotAnObject,
    #[error("unknown key {0:?} at the top level (expected \"result\" and optionally \"events\")")]
    UnknownKey(String),
    #[error("result: must be the result object {{\"value\": …, \"stopReason\": …, …}}, got {0}")]
    ResultNotAnObject(Value),
    #[error("missing \"result\"")]
    MissingResult,
    #[error("events: unknown key {0:?}; supported: {parts}", parts = EVENT_PARTS.join(", "))]
    UnknownPart(String),
    #[error("events.{part}: must be an array, got {got}")]
    PartNotAnArray { part: &'static str, got: Value },
    #[error("events: must be an object, got {0}")]
    EventsNotAnObject(Value),
}

/// A parsed expected file: the `result`, and the event parts it lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub result: Value,
    /// `(part, value)` for each part of `events` present, in [`EVENT_PARTS`] order.
    pub events: Vec<(&'static str, Value)>,
}

impl Expected {
    /// Parses the text of an expected file; the error says what is wrong
    /// (the caller prefixes the file name).
    pub fn parse(text: &str) -> Result<Expected, ExpectedError> {
        let root: Value = serde_json::from_str(text).map_err(ExpectedError::NotJson)?;
        let obj = root.as_object().ok_or(ExpectedError::NotAnObject)?;
        if let Some(k) = obj.keys().find(|k| *k != "result" && *k != "events") {
            return Err(ExpectedError::UnknownKey(k.clone()));
        }
        let result = match obj.get("result") {
            Some(r @ Value::Object(_)) => r.clone(),
            Some(other) => return Err(ExpectedError::ResultNotAnObject(other.clone())),
            None => return Err(ExpectedError::MissingResult),
        };
        let mut events = Vec::new();
        match obj.get("events") {
            None => {}
            Some(Value::Object(parts)) => {
                if let Some(k) = parts.keys().find(|k| !EVENT_PARTS.contains(&k.as_str())) {
                    return Err(ExpectedError::UnknownPart(k.clone()));
                }
                for part in EVENT_PARTS {
                    match parts.get(part) {
                        None => {}
                        Some(v @ Value::Array(_)) => events.push((part, v.clone())),
                        Some(other) => {
                            return Err(ExpectedError::PartNotAnArray {
                                part,
                                got: other.clone(),
                            });
                        }
                    }
                }
            }
            Some(other) => return Err(ExpectedError::EventsNotAnObject(other.clone())),
        }
        Ok(Expected { result, events })
    }

    /// The document compared (and shown in a diff): `result`, plus
    /// `events` with the parts present.
    pub fn document(&self) -> Value {
        let mut m = Map::new();
        m.insert("result".into(), self.result.clone());
        if !self.events.is_empty() {
            let parts: Map<String, Value> = self
                .events
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect();
            m.insert("events".into(), Value::Object(parts));
        }
        Value::Object(m)
    }
}

/// What a run produced, in the terms of an expected file.
#[derive(Debug, Clone, PartialEq)]
pub struct Actual {
    /// The result object without `sandbox`.
    pub result: Value,
    /// `{label, outcome}` of each child, by `seq`.
    pub agents: Vec<Value>,
    pub logs: Vec<Value>,
    pub phases: Vec<Value>,
}

impl Actual {
    pub fn new(result: &RunResult, events: &[Event]) -> Actual {
        let mut result = result.to_json();
        if let Some(m) = result.as_object_mut() {
            m.remove("sandbox");
        }
        let mut agents: Vec<(u64, Value)> = Vec::new();
        let mut logs = Vec::new();
        let mut phases = Vec::new();
        for e in events {
            match &e.kind {
                EventKind::AgentEnd {
                    seq,
                    label,
                    outcome,
                    ..
                } => agents.push((*seq, json!({ "label": label, "outcome": outcome.as_str() }))),
                EventKind::Log { message, .. } => logs.push(Value::from(message.as_str())),
                EventKind::Phase { title, .. } => phases.push(Value::from(title.as_str())),
                _ => {}
            }
        }
        agents.sort_by_key(|(seq, _)| *seq);
        Actual {
            result,
            agents: agents.into_iter().map(|(_, v)| v).collect(),
            logs,
            phases,
        }
    }

    fn part(&self, name: &str) -> Value {
        Value::Array(match name {
            "agents" => self.agents.clone(),
            "logs" => self.logs.clone(),
            _ => self.phases.clone(),
        })
    }

    /// The expected file `--update` writes: the result and every event part.
    pub fn full(&self) -> Expected {
        Expected {
            result: self.result.clone(),
            events: EVENT_PARTS.iter().map(|p| (*p, self.part(p))).collect(),
        }
    }

    /// This run in the shape of `expected`: the same event parts, and
    /// object keys in the order `expected` has them (so that a diff shows
    /// changed values, not reordered keys).
    pub fn shaped_like(&self, expected: &Expected) -> Expected {
        Expected {
            result: align(&self.result, &expected.result),
            events: expected
                .events
                .iter()
                .map(|(p, want)| (*p, align(&self.part(p), want)))
                .collect(),
        }
    }
}

/// `value` with the keys of its objects ordered as in `like` (keys `like`
/// lacks come last, in their own order), recursively.
fn align(value: &Value, like: &Value) -> Value {
    match (value, like) {
        (Value::Object(v), Value::Object(l)) => {
            let mut out = Map::new();
            for (k, lv) in l {
                if let Some(vv) = v.get(k) {
                    out.insert(k.clone(), align(vv, lv));
                }
            }
            for (k, vv) in v {
                if !out.contains_key(k) {
                    out.insert(k.clone(), vv.clone());
                }
            }
            Value::Object(out)
        }
        (Value::Array(v), Value::Array(l)) => Value::Array(
            v.iter()
                .enumerate()
                .map(|(i, vv)| l.get(i).map_or_else(|| vv.clone(), |lv| align(vv, lv)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// JSON equality as a reader means it: `1` equals `1.0`, key order does not
/// matter.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, xv)| y.get(k).is_some_and(|yv| json_eq(xv, yv)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::not_json("{", "not valid JSON")]
    #[case::not_object("[]", "must be a JSON object")]
    #[case::no_result(r#"{"events":{}}"#, "missing \"result\"")]
    #[case::result_not_object(r#"{"result":1}"#, "result: must be the result object")]
    #[case::unknown_top(r#"{"result":{},"value":1}"#, "unknown key \"value\"")]
    #[case::unknown_part(
        r#"{"result":{},"events":{"ends":[]}}"#,
        "events: unknown key \"ends\""
    )]
    #[case::part_not_array(
        r#"{"result":{},"events":{"logs":"x"}}"#,
        "events.logs: must be an array"
    )]
    fn invalid_expected_files(#[case] text: &str, #[case] message: &str) {
        let err = Expected::parse(text).expect_err("invalid").to_string();
        assert!(err.contains(message), "{err} should contain {message}");
    }

    #[test]
    fn only_present_parts_are_kept_in_order() {
        let e = Expected::parse(r#"{"result":{"value":1},"events":{"phases":["A"],"agents":[]}}"#)
            .expect("valid");
        assert_eq!(
            e.document(),
            json!({"result": {"value": 1}, "events": {"agents": [], "phases": ["A"]}})
        );
    }

    #[rstest]
    #[case::int_and_float(json!(1), json!(1.0), true)]
    #[case::key_order(json!({"a": 1, "b": 2}), json!({"b": 2, "a": 1}), true)]
    #[case::different(json!({"a": [1, 2]}), json!({"a": [1, 3]}), false)]
    #[case::extra_key(json!({"a": 1}), json!({"a": 1, "b": null}), false)]
    fn equality(#[case] a: Value, #[case] b: Value, #[case] eq: bool) {
        assert_eq!(json_eq(&a, &b), eq);
    }

    #[test]
    fn align_follows_the_expected_key_order() {
        let v = json!({"value": {"x": 1, "y": 2}, "stopReason": "completed", "agentsStarted": 0});
        let like = json!({"agentsStarted": 0, "value": {"y": 0, "x": 0}});
        let aligned = align(&v, &like);
        assert_eq!(
            serde_json::to_string(&aligned).expect("json"),
            r#"{"agentsStarted":0,"value":{"y":2,"x":1},"stopReason":"completed"}"#
        );
    }
}
