//! Reading a fixture file: strict JSON (a key given twice is an error),
//! each entry of `answers` checked, every problem named with where it is
//! and the spelling that works.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use regex::Regex;
use serde_json::{Map, Value};

use super::{Answer, Matcher, Outcome};
use dsh_seam::Usage;

const MATCH_KEYS: [&str; 10] = [
    "prompt",
    "promptContains",
    "promptMatches",
    "label",
    "phase",
    "model",
    "effort",
    "agentType",
    "provider",
    "schema",
];
const OUTCOME_KEYS: [&str; 6] = [
    "text",
    "structured",
    "fail",
    "startError",
    "resultError",
    "hang",
];
const OTHER_KEYS: [&str; 4] = ["match", "delayMs", "times", "usage"];

/// The longest `delayMs` a fixture may ask for: one day.
pub const MAX_DELAY_MS: u64 = 24 * 60 * 60 * 1000;

/// JSON read like `serde_json::Value`, except that an object with a key
/// given twice is an error (at the position of the second).
pub(super) struct Strict(pub(super) Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut v = Vec::new();
        while let Some(Strict(x)) = seq.next_element()? {
            v.push(x);
        }
        Ok(Value::Array(v))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut m = serde_json::Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if m.contains_key(&k) {
                return Err(serde::de::Error::custom(format!(
                    "the key {k:?} is given twice in one object; keep one"
                )));
            }
            let Strict(v) = map.next_value()?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

/// The answers of a fixture (`{"version": 1, "answers": [...]}`), each
/// checked.
pub(super) fn answers(root: &Value) -> Result<Vec<Answer>, FixtureProblem> {
    let obj = root
        .as_object()
        .ok_or("the fixture must be a JSON object {\"version\": 1, \"answers\": [...]}")?;
    for k in obj.keys() {
        if k != "version" && k != "answers" {
            return Err(format!(
                "unknown key {k:?} at the top level (expected \"version\" and \"answers\")"
            )
            .into());
        }
    }
    match obj.get("version") {
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return Err(format!("version: must be 1, got {v}").into()),
        None => return Err("version: missing; add \"version\": 1".into()),
    }
    let answers = obj
        .get("answers")
        .and_then(Value::as_array)
        .ok_or("answers: missing or not an array")?;
    let answers = answers
        .iter()
        .enumerate()
        .map(|(i, a)| parse_answer(a).map_err(|m| format!("answers[{i}]: {m}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(answers)
}

/// One thing wrong with a fixture: where (`answers[2]: usage.input`), what,
/// and the spelling that works; [`FixtureError`] adds the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct FixtureProblem(pub(super) String);

impl From<String> for FixtureProblem {
    fn from(s: String) -> Self {
        FixtureProblem(s)
    }
}

impl From<&str> for FixtureProblem {
    fn from(s: &str) -> Self {
        FixtureProblem(s.to_string())
    }
}

fn string_field(
    obj: &Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<Option<String>, FixtureProblem> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(format!("{at}{key}: must be a string, got {v}").into()),
    }
}

/// One entry of `answers`: its keys known, its matcher, its one outcome,
/// then `delayMs`, `times` and `usage`.
fn parse_answer(v: &Value) -> Result<Answer, FixtureProblem> {
    let obj = v
        .as_object()
        .ok_or("must be an object with \"match\" and one outcome")?;
    for k in obj.keys() {
        if !OUTCOME_KEYS.contains(&k.as_str()) && !OTHER_KEYS.contains(&k.as_str()) {
            return Err(format!(
                "unknown key {k:?}; an entry has \"match\", one of {}, and optionally \"delayMs\", \"times\", \"usage\"",
                OUTCOME_KEYS.join(", ")
            ).into());
        }
    }
    let matcher = parse_matcher(obj)?;
    let outcome = parse_outcome(obj)?;
    let delay = match obj.get("delayMs") {
        None => Duration::ZERO,
        Some(v) => {
            Duration::from_millis(v.as_u64().filter(|ms| *ms <= MAX_DELAY_MS).ok_or(format!(
                "delayMs: must be a whole number of milliseconds from 0 to {MAX_DELAY_MS} (a day), \
                     got {v}; for an answer that never comes, use \"hang\": true"
            ))?)
        }
    };
    let times = match obj.get("times") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n >= 1)
                .ok_or(format!("times: must be a whole number ≥ 1, got {v}"))?,
        ),
    };
    let usage = obj.get("usage").map(parse_usage).transpose()?;
    Ok(Answer {
        matcher,
        outcome,
        delay,
        times,
        used: AtomicU32::new(0),
        usage,
    })
}

/// An entry's `match`: the keys it knows, each a string (`promptMatches`
/// a regular expression; `schema` any JSON).
fn parse_matcher(obj: &Map<String, Value>) -> Result<Matcher, FixtureProblem> {
    let m = obj
        .get("match")
        .ok_or("missing \"match\" (use {} to match every call)")?
        .as_object()
        .ok_or("match: must be an object")?;
    for k in m.keys() {
        if !MATCH_KEYS.contains(&k.as_str()) {
            return Err(format!(
                "match: unknown key {k:?}; supported: {}",
                MATCH_KEYS.join(", ")
            )
            .into());
        }
    }
    let prompt_matches = match string_field(m, "promptMatches", "match.")? {
        None => None,
        Some(re) => {
            Some(Regex::new(&re).map_err(|e| format!("match.promptMatches: invalid regex: {e}"))?)
        }
    };
    Ok(Matcher {
        prompt: string_field(m, "prompt", "match.")?,
        prompt_contains: string_field(m, "promptContains", "match.")?,
        prompt_matches,
        label: string_field(m, "label", "match.")?,
        phase: string_field(m, "phase", "match.")?,
        model: string_field(m, "model", "match.")?,
        effort: string_field(m, "effort", "match.")?,
        agent_type: string_field(m, "agentType", "match.")?,
        provider: string_field(m, "provider", "match.")?,
        schema: m.get("schema").cloned(),
    })
}

/// An entry's one outcome (`text`, `structured`, `fail`, `startError`,
/// `resultError` or `hang`).
fn parse_outcome(obj: &Map<String, Value>) -> Result<Outcome, FixtureProblem> {
    let present: Vec<&str> = OUTCOME_KEYS
        .iter()
        .copied()
        .filter(|k| obj.contains_key(*k))
        .collect();
    if present.len() != 1 {
        return Err(if present.is_empty() {
            format!(
                "no outcome; give exactly one of {}",
                OUTCOME_KEYS.join(", ")
            )
        } else {
            format!(
                "several outcomes ({}); give exactly one",
                present.join(", ")
            )
        }
        .into());
    }
    Ok(match present[0] {
        "text" => Outcome::Text(string_field(obj, "text", "")?.unwrap_or_default()),
        "structured" => Outcome::Structured(obj.get("structured").cloned().unwrap_or(Value::Null)),
        "fail" => Outcome::Fail(string_field(obj, "fail", "")?.unwrap_or_default()),
        "startError" => {
            Outcome::StartError(string_field(obj, "startError", "")?.unwrap_or_default())
        }
        "resultError" => {
            Outcome::ResultError(string_field(obj, "resultError", "")?.unwrap_or_default())
        }
        _ => match obj.get("hang") {
            Some(Value::Bool(true)) => Outcome::Hang,
            Some(v) => return Err(format!("hang: must be true, got {v}").into()),
            None => Outcome::Hang,
        },
    })
}

/// An entry's `usage`: `{"input": N, "output": N}` and optionally
/// `cacheRead`, `cacheWrite`, `costUsd`.
fn parse_usage(u: &Value) -> Result<Usage, FixtureProblem> {
    let o = u.as_object().ok_or(
        "usage: must be an object {\"input\": N, \"output\": N} (and optionally \
         cacheRead, cacheWrite, costUsd)",
    )?;
    for k in o.keys() {
        if !["input", "output", "cacheRead", "cacheWrite", "costUsd"].contains(&k.as_str()) {
            return Err(format!(
                "usage: unknown key {k:?} (expected input, output, cacheRead, cacheWrite, \
                 costUsd)"
            )
            .into());
        }
    }
    let num = |k: &str| -> Result<u64, FixtureProblem> {
        match o.get(k) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| {
                format!("usage.{k}: must be a whole number of tokens, got {v}").into()
            }),
        }
    };
    let cost_usd = match o.get("costUsd") {
        None => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|c| c.is_finite() && *c >= 0.0)
                .ok_or(format!(
                    "usage.costUsd: must be a number of US dollars ≥ 0, got {v}"
                ))?,
        ),
    };
    Ok(Usage {
        input: num("input")?,
        output: num("output")?,
        cache_read: num("cacheRead")?,
        cache_write: num("cacheWrite")?,
        cost_usd,
    })
}
