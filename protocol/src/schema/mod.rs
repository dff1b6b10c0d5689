//! The JSON Schema subset accepted by `agent(prompt, { schema })` (contract §3).
//!
//! Scripts hand us arbitrary JSON and call it a schema. Providers differ in
//! what they understand, and a keyword we silently ignored would turn into a
//! constraint the script author believes in but nobody enforces. So this
//! module accepts a deliberately small subset, rejects everything else by
//! name, and is the single place where both sides (the call-time check and
//! the host's validation of a child's structured answer) agree on meaning.
//!
//! Two entry points:
//! - [`check_schema`] decides whether a schema is inside the subset. It lists
//!   *every* problem at once, because a script author fixing one violation per
//!   run would be miserable; the result becomes an `UNSUPPORTED_SCHEMA` error.
//! - [`validate`] checks a value against a schema that already passed
//!   [`check_schema`]. It still never panics on an unchecked schema (it then
//!   just ignores what it does not understand), because a panic in the host
//!   would take the whole run down.
//!
//! Both walk recursively and stop at 64 levels (`MAX_DEPTH`): serde_json's
//! parser limits depth, but a `Value` built in code does not, and a stack
//! overflow is an abort, not an error we could report.
//!
//! The keyword rules are in `check.rs` (is a schema inside the subset?) and
//! `validate.rs` (does a value match it?); this file holds what both share.

use std::fmt;

use serde_json::{Number, Value};

mod check;
#[cfg(test)]
mod tests;
mod validate;

use check::check_node;
use validate::validate_node;

/// Deepest schema nesting either function walks before reporting instead of
/// recursing. Real structured-output schemas are a handful of levels deep;
/// 64 leaves ample room while keeping the stack use trivially bounded.
const MAX_DEPTH: usize = 64;

/// Listed verbatim in the "unsupported keyword" message so the author sees
/// the whole vocabulary without opening the docs.
const SUPPORTED_KEYWORDS: &str = "type, properties, required, additionalProperties, items, enum, \
     const, oneOf (annotations: description, title, default, examples)";

/// The values `type` may take, for messages.
const TYPE_NAMES: &str = "object, array, string, number, integer, boolean, null";

/// How many enum members / allowed keys a validation message lists before
/// eliding: messages go back to a model or a human and must stay short.
const LIST_LIMIT: usize = 10;

/// Longest JSON rendering of a value embedded in a message.
const SNIPPET_LIMIT: usize = 60;

/// One problem in a schema or in a value checked against a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where the problem is, e.g. `options.schema.properties.x.type`.
    pub path: String,
    /// What is wrong, short and lower-case, with a fix when one is obvious.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An empty prefix would otherwise render as ": message".
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Checks that `schema` is inside the supported subset. `path` is the prefix for locations,
/// e.g. "options.schema" gives "options.schema.properties.x.type". Returns every violation (empty = ok).
pub fn check_schema(schema: &Value, path: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(root) = schema.as_object() else {
        push(
            &mut out,
            path,
            format!(
                "the schema must be a JSON object with \"type\": \"object\", got {}",
                kind_with_article(schema)
            ),
        );
        return out;
    };
    // The top level must describe an object (providers wrap structured
    // answers in an object). When `type` is simply missing we say so once and
    // then check the rest as if it were present, so `properties` and friends
    // do not each add a second complaint about the same omission.
    let inherited = match root.get("type") {
        None => {
            push(
                &mut out,
                path,
                "the top-level schema needs \"type\": \"object\"",
            );
            Some(Ty::Object)
        }
        Some(Value::String(name)) => match Ty::parse(name) {
            Some(ty) if ty != Ty::Object => {
                push(
                    &mut out,
                    member(path, "type"),
                    format!(
                        "the top-level schema must have \"type\": \"object\", not \"{}\"",
                        ty.name()
                    ),
                );
                None
            }
            // "object" is fine; an unknown name is reported by check_node.
            _ => None,
        },
        // A malformed `type` is reported by check_node.
        Some(_) => None,
    };
    check_node(schema, path, 1, inherited, &mut out);
    out
}

/// Validates `value` against a schema that passed check_schema. `path` is the prefix, e.g. "value"
/// gives `value.items[3].name`. Returns every violation (empty = valid).
pub fn validate(schema: &Value, value: &Value, path: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    validate_node(schema, value, path, 1, &mut out);
    out
}

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// A value of the `type` keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Object,
    Array,
    String,
    Number,
    Integer,
    Boolean,
    Null,
}

impl Ty {
    fn parse(name: &str) -> Option<Ty> {
        Some(match name {
            "object" => Ty::Object,
            "array" => Ty::Array,
            "string" => Ty::String,
            "number" => Ty::Number,
            "integer" => Ty::Integer,
            "boolean" => Ty::Boolean,
            "null" => Ty::Null,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::Array => "array",
            Ty::String => "string",
            Ty::Number => "number",
            Ty::Integer => "integer",
            Ty::Boolean => "boolean",
            Ty::Null => "null",
        }
    }

    fn is_scalar(self) -> bool {
        !matches!(self, Ty::Object | Ty::Array)
    }

    fn matches(self, value: &Value) -> bool {
        match self {
            Ty::Object => value.is_object(),
            Ty::Array => value.is_array(),
            Ty::String => value.is_string(),
            Ty::Number => value.is_number(),
            Ty::Integer => match value {
                Value::Number(n) => is_integral(n),
                _ => false,
            },
            Ty::Boolean => value.is_boolean(),
            Ty::Null => value.is_null(),
        }
    }

    /// Whether some value could satisfy both types; integer is a subset of
    /// number, every other pair is disjoint.
    fn compatible(self, other: Ty) -> bool {
        self == other
            || matches!(
                (self, other),
                (Ty::Integer, Ty::Number) | (Ty::Number, Ty::Integer)
            )
    }

    /// The tighter of two compatible types.
    fn narrower(self, other: Ty) -> Ty {
        if self == Ty::Number { other } else { self }
    }
}

/// "Has no fractional part", whatever representation serde_json chose:
/// `1.0` arrives as an f64 but a model writing it meant an integer.
fn is_integral(n: &Number) -> bool {
    if n.is_i64() || n.is_u64() {
        return true;
    }
    n.as_f64()
        .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// What the check of one node knows about the type its values must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeType {
    /// No `type` here or above: keywords needing a type are violations.
    Absent,
    /// `type` is malformed and already reported; type-dependent checks are
    /// skipped so one mistake does not cascade into several messages.
    Invalid,
    Known(Ty),
}

// ---------------------------------------------------------------------------
// Paths and message helpers
// ---------------------------------------------------------------------------

fn push(out: &mut Vec<Violation>, path: impl Into<String>, message: impl Into<String>) {
    out.push(Violation {
        path: path.into(),
        message: message.into(),
    });
}

/// `path.key` for identifier-like keys, `path["weird key"]` otherwise, so a
/// path can be read back unambiguously (a key may contain dots).
fn member(path: &str, key: &str) -> String {
    if is_identifier(key) {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    } else {
        format!("{path}[{}]", quote(key))
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// ASCII JavaScript-style identifier: the paths mirror how a script author
/// would reach the spot (`options.schema.properties.x`).
fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// JSON string literal for `s` (escapes quotes, control characters).
fn quote(s: &str) -> String {
    // Serializing a str cannot fail; the fallback only avoids an unwrap.
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// Compact JSON for a value, cut short so an enormous value (from an
/// unchecked schema or a runaway answer) cannot bloat a message.
fn snippet(value: &Value) -> String {
    let mut text = value.to_string();
    if text.chars().count() > SNIPPET_LIMIT {
        text = text.chars().take(SNIPPET_LIMIT - 1).collect();
        text.push('…');
    }
    text
}

fn elided_list(items: impl Iterator<Item = String>) -> String {
    let mut shown: Vec<String> = Vec::new();
    let mut more = false;
    for item in items {
        if shown.len() == LIST_LIMIT {
            more = true;
            break;
        }
        shown.push(item);
    }
    let mut list = shown.join(", ");
    if more {
        list.push_str(", …");
    }
    list
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn kind_with_article(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// JSON equality as a reader understands it: `1` equals `1.0`, object key
/// order does not matter. Iterative, so an adversarially deep value cannot
/// overflow the stack.
fn json_eq(a: &Value, b: &Value) -> bool {
    let mut pending = vec![(a, b)];
    while let Some(pair) = pending.pop() {
        match pair {
            (Value::Number(x), Value::Number(y)) => {
                if !number_eq(x, y) {
                    return false;
                }
            }
            (Value::Array(xs), Value::Array(ys)) => {
                if xs.len() != ys.len() {
                    return false;
                }
                pending.extend(xs.iter().zip(ys));
            }
            (Value::Object(xs), Value::Object(ys)) => {
                if xs.len() != ys.len() {
                    return false;
                }
                for (key, x) in xs {
                    match ys.get(key) {
                        Some(y) => pending.push((x, y)),
                        None => return false,
                    }
                }
            }
            // Null, booleans, strings, and any mix of kinds.
            (x, y) => {
                if x != y {
                    return false;
                }
            }
        }
    }
    true
}

/// Compares integers exactly (an f64 round trip would make 2^53 + 1 equal
/// 2^53) and falls back to f64 only when one side is fractional/huge.
fn number_eq(x: &Number, y: &Number) -> bool {
    fn exact(n: &Number) -> Option<i128> {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    }
    match (exact(x), exact(y)) {
        (Some(a), Some(b)) => a == b,
        (Some(int), None) | (None, Some(int)) => {
            let float = if exact(x).is_some() { y } else { x };
            float.as_f64().is_some_and(|f| {
                // `as` saturates, so bound first; every i64/u64 is far
                // inside ±2^127 and any integral f64 there converts exactly.
                f.fract() == 0.0 && f.abs() < 1.0e38 && f as i128 == int
            })
        }
        (None, None) => match (x.as_f64(), y.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        },
    }
}
