//! Validation: does a value match a schema that passed the check?

use serde_json::{Map, Value};

use super::*;

/// Validates `value` against one schema node. Keywords are read defensively
/// (`as_*`/pattern matches, never indexing or unwrap): the schema is meant
/// to have passed check_schema, but a malformed one must degrade to "less
/// checking", not to a panic in the host.
pub(super) fn validate_node(
    schema: &Value,
    value: &Value,
    path: &str,
    depth: usize,
    out: &mut Vec<Violation>,
) {
    if depth > MAX_DEPTH {
        push(
            out,
            path,
            format!("schema nesting exceeds {MAX_DEPTH} levels; not validated further"),
        );
        return;
    }
    let obj = match schema {
        Value::Object(obj) => obj,
        // Boolean schemas are outside the subset but have an obvious meaning.
        Value::Bool(true) => return,
        Value::Bool(false) => {
            push(out, path, "no value is allowed here");
            return;
        }
        _ => {
            push(
                out,
                path,
                "the schema here is not a JSON object; run check_schema on it first",
            );
            return;
        }
    };

    if let Some(ty) = obj.get("type").and_then(Value::as_str).and_then(Ty::parse)
        && !ty.matches(value)
    {
        // Everything else on this node presumes the right type; one clear
        // message beats a pile of follow-on complaints.
        push(out, path, type_mismatch(ty, value));
        return;
    }

    match value {
        Value::Object(members) => validate_object(obj, members, path, depth, out),
        Value::Array(elements) => {
            if let Some(items) = obj.get("items") {
                for (i, element) in elements.iter().enumerate() {
                    validate_node(items, element, &index(path, i), depth + 1, out);
                }
            }
        }
        _ => {}
    }

    if let Some(Value::Array(allowed)) = obj.get("enum")
        && !allowed.iter().any(|a| json_eq(a, value))
    {
        push(
            out,
            path,
            format!(
                "must be one of {}",
                elided_list(allowed.iter().map(snippet))
            ),
        );
    }
    if let Some(expected) = obj.get("const")
        && !json_eq(expected, value)
    {
        push(out, path, format!("must equal {}", snippet(expected)));
    }
    if let Some(Value::Array(branches)) = obj.get("oneOf") {
        validate_one_of(branches, value, path, depth, out);
    }
}

fn validate_object(
    schema: &Map<String, Value>,
    members: &Map<String, Value>,
    path: &str,
    depth: usize,
    out: &mut Vec<Violation>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !members.contains_key(name) {
                push(
                    out,
                    path,
                    format!("missing required property {}", quote(name)),
                );
            }
        }
    }
    if let Some(props) = props {
        for (name, sub) in props {
            if let Some(member_value) = members.get(name) {
                validate_node(sub, member_value, &member(path, name), depth + 1, out);
            }
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        let allowed = match props {
            Some(props) if !props.is_empty() => elided_list(props.keys().map(|k| quote(k))),
            _ => "none".to_owned(),
        };
        for name in members.keys() {
            if !props.is_some_and(|props| props.contains_key(name)) {
                push(
                    out,
                    member(path, name),
                    format!("unexpected property; allowed: {allowed}"),
                );
            }
        }
    }
}

/// Exactly one branch must match. Zero matches is reported with each
/// branch's first complaint, since "matches none" alone gives a model (or a
/// human) nothing to correct.
fn validate_one_of(
    branches: &[Value],
    value: &Value,
    path: &str,
    depth: usize,
    out: &mut Vec<Violation>,
) {
    let mut matched = Vec::new();
    let mut reasons = Vec::new();
    for (i, branch) in branches.iter().enumerate() {
        let mut sub = Vec::new();
        validate_node(branch, value, path, depth + 1, &mut sub);
        match sub.into_iter().next() {
            None => matched.push(i),
            Some(first) if first.path == path => {
                reasons.push(format!("branch {i}: {}", first.message));
            }
            Some(first) => reasons.push(format!("branch {i} at {first}")),
        }
    }
    match matched.len() {
        1 => {}
        0 => push(
            out,
            path,
            format!(
                "matches none of the {} oneOf branches ({})",
                branches.len(),
                reasons.join("; ")
            ),
        ),
        n => push(
            out,
            path,
            format!(
                "matches {n} oneOf branches ({}); exactly one must match",
                matched
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

fn type_mismatch(expected: Ty, value: &Value) -> String {
    match value {
        // "expected integer, got number" would read as nonsense for 1.5.
        Value::Number(_) if expected == Ty::Integer => {
            format!("expected integer, got {}", snippet(value))
        }
        _ => format!("expected {}, got {}", expected.name(), kind(value)),
    }
}
