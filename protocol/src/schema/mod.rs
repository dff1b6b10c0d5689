//! The JSON Schema accepted by `agent(prompt, { schema })` (contract §3).
//!
//! The vocabulary is the whole validation vocabulary of JSON Schema draft
//! 2020-12 plus the draft-07 spellings, validated by the `jsonschema`
//! crate. What dsh adds around it is what Claude Code's own validator (Ajv in
//! strict mode) adds: a keyword nobody knows (`x-priority`), a `$schema`
//! other than draft-07 or 2020-12, or a reference outside the schema is a
//! refusal naming its path, not a constraint silently ignored. The root must
//! be an object schema (providers wrap structured answers in an object).
//!
//! Two entry points:
//! - [`check_schema`] decides whether a schema is accepted. It lists *every*
//!   problem it can at once (unknown keywords, remote references and
//!   meta-schema violations all together), because a script author fixing
//!   one violation per run would be miserable; the result becomes an
//!   `UNSUPPORTED_SCHEMA` error.
//! - [`validate`] checks a value against a schema that passed
//!   [`check_schema`], listing every violation at its path
//!   (`value.items[2].name`). It never panics on an unchecked schema: one
//!   that cannot be compiled is reported as a single violation.
//!
//! The check walks the schema recursively and stops at 64 levels
//! (`MAX_DEPTH`): serde_json's parser limits depth, but a `Value` built in
//! code does not, and a stack overflow is an abort, not an error we could
//! report.
//!
//! `check.rs` holds the strict-mode walk and the compilation options both
//! sides share; `validate.rs` turns the crate's errors into dsh's
//! violations; this file holds the path and message helpers.

use std::fmt;

use serde_json::Value;

mod check;
mod message;
#[cfg(test)]
mod tests;
mod unusable;
mod validate;

/// Deepest schema nesting either function walks before reporting instead of
/// recursing. Real structured-output schemas are a handful of levels deep;
/// 64 leaves ample room while keeping the stack use trivially bounded.
const MAX_DEPTH: usize = 64;

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

/// Every keyword a schema may use: what the strict-mode walk accepts.
/// `dsh workflow types` declares each one (`src/types.d.ts`), and a test
/// holds the two together.
pub fn keywords() -> impl Iterator<Item = &'static str> {
    check::KEYWORDS.iter().copied()
}

/// Checks that `schema` is one dsh (and Claude Code's strict validator)
/// accepts. `path` is the prefix for locations, e.g. "options.schema" gives
/// "options.schema.properties.x.x-priority". Returns every violation (empty = ok).
pub fn check_schema(schema: &Value, path: &str) -> Vec<Violation> {
    check::check_schema(schema, path)
}

/// Validates `value` against a schema that passed check_schema. `path` is the prefix, e.g. "value"
/// gives `value.items[3].name`. Returns every violation (empty = valid).
pub fn validate(schema: &Value, value: &Value, path: &str) -> Vec<Violation> {
    validate::validate(schema, value, path)
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
