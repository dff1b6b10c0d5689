//! Validation: does a value match a schema? The `jsonschema` crate decides;
//! this file turns its errors into dsh's violations (a dsh path, a short
//! message a model or a human can act on).

use jsonschema::ValidationError;
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use super::check::compile;
use super::message::{message, parent, pointer_path};
use super::*;

/// Deepest JSON nesting of a schema `validate` compiles. The check bounds
/// schemas at 64 schema levels (about twice as many JSON levels); an
/// unchecked schema deeper than this is refused rather than risking the
/// stack in the compiler.
const MAX_JSON_DEPTH: usize = 2 * MAX_DEPTH + 4;

pub(super) fn validate(schema: &Value, value: &Value, path: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    if json_depth(schema) > MAX_JSON_DEPTH {
        push(
            &mut out,
            path,
            format!("schema nesting exceeds {MAX_DEPTH} levels; not validated"),
        );
        return out;
    }
    let validator = match compile(schema) {
        Ok(v) => v,
        Err(message) => {
            push(
                &mut out,
                path,
                format!("the schema cannot be used ({message}); run check_schema on it first"),
            );
            return out;
        }
    };
    for error in validator.iter_errors(value) {
        report(schema, value, &error, path, &mut out);
    }
    out
}

/// One crate error as one or more violations: an unexpected property is
/// reported at the property itself, once per property.
fn report(
    schema: &Value,
    value: &Value,
    error: &ValidationError<'_>,
    prefix: &str,
    out: &mut Vec<Violation>,
) {
    let at = pointer_path(prefix, error.instance_path());
    match error.kind() {
        // The crate reports `"additionalProperties": false` on an object
        // without `properties` as a false schema per member, at the
        // object's path; name the members, as for the general case.
        ValidationErrorKind::FalseSchema
            if error
                .schema_path()
                .as_str()
                .ends_with("/additionalProperties")
                && schema
                    .pointer(parent(error.schema_path().as_str()))
                    .is_some_and(|node| {
                        !node.as_object().is_some_and(|o| {
                            o.contains_key("properties") || o.contains_key("patternProperties")
                        })
                    }) =>
        {
            let members = value
                .pointer(error.instance_path().as_str())
                .and_then(Value::as_object);
            for name in members.into_iter().flat_map(|m| m.keys()) {
                let violation = Violation {
                    path: member(&at, name),
                    message: "unexpected property; allowed: none".to_owned(),
                };
                if !out.contains(&violation) {
                    out.push(violation);
                }
            }
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let allowed = allowed_properties(schema, error);
            for name in unexpected {
                push(
                    out,
                    member(&at, name),
                    format!("unexpected property; allowed: {allowed}"),
                );
            }
        }
        ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            for name in unexpected {
                push(
                    out,
                    member(&at, name),
                    "unexpected property (\"unevaluatedProperties\")",
                );
            }
        }
        _ => {
            let message = message(error, prefix);
            push(out, at, message);
        }
    }
}

/// The properties the schema object holding a failed
/// `"additionalProperties": false` declares, for the message: a model told
/// what is allowed can correct itself.
fn allowed_properties(schema: &Value, error: &ValidationError<'_>) -> String {
    let props = schema
        .pointer(parent(error.schema_path().as_str()))
        .and_then(|node| node.get("properties"))
        .and_then(Value::as_object);
    match props {
        Some(props) if !props.is_empty() => elided_list(props.keys().map(|k| quote(k))),
        _ => "none".to_owned(),
    }
}

/// JSON nesting depth, iteratively (a deep value must not overflow the
/// stack while we measure it).
fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1usize)];
    while let Some((v, d)) = pending.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => pending.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => pending.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}
