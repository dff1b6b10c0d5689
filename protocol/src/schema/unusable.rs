//! Schemas that are valid JSON Schema but that no answer can satisfy.
//!
//! Claude Code refuses such a schema before it starts the subagent, since
//! every structured answer would fail validation (issue 33 §3, observed
//! with `../shared/ccref`). dsh refuses the same ones, in its own words,
//! each at its path: the root and every sub-schema reached through
//! `properties` and `items` (an answer fills in every property it is
//! asked for, so one impossible property sinks it). Sub-schemas behind
//! `$ref`, `anyOf` and the like are not followed, as Claude Code does not
//! follow them: a branch that admits nothing may be one of several.

use serde_json::{Map, Value};

use super::*;

pub(super) fn check(node: &Value, path: &str, depth: usize, out: &mut Vec<Violation>) {
    // The strict walk already reported nesting past MAX_DEPTH.
    if depth > MAX_DEPTH {
        return;
    }
    let Some(obj) = node.as_object() else {
        return;
    };
    required_but_excluded(obj, path, out);
    empty_range(obj, path, out);
    type_excludes_values(obj, path, out);
    if let Some(Value::Object(props)) = obj.get("properties") {
        let at = member(path, "properties");
        for (name, sub) in props {
            check(sub, &member(&at, name), depth + 1, out);
        }
    }
    if let Some(items @ Value::Object(_)) = obj.get("items") {
        check(items, &member(path, "items"), depth + 1, out);
    }
}

/// `required` names a property that `additionalProperties: false` forbids:
/// not in `properties`, and no `patternProperties`.
fn required_but_excluded(obj: &Map<String, Value>, path: &str, out: &mut Vec<Violation>) {
    if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
        return;
    }
    let Some(Value::Array(required)) = obj.get("required") else {
        return;
    };
    // A pattern may admit the name (ECMA regular expressions are not
    // matched here): only a schema without patterns is judged.
    if obj
        .get("patternProperties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
    {
        return;
    }
    let declared = |name: &str| {
        obj.get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.contains_key(name))
    };
    for name in required.iter().filter_map(Value::as_str) {
        if declared(name) {
            continue;
        }
        push(
            out,
            member(path, "required"),
            format!(
                "lists {} but \"properties\" does not declare it and \"additionalProperties\" is \
                 false, so no answer can satisfy the schema; declare {} in \"properties\" or drop \
                 it from \"required\"",
                quote(name),
                quote(name)
            ),
        );
    }
}

/// A lower bound above its upper bound: `minimum`/`maximum`,
/// `exclusiveMinimum`/`exclusiveMaximum` (equal ones admit nothing
/// either), `minLength`/`maxLength`, `minItems`/`maxItems`,
/// `minProperties`/`maxProperties`.
fn empty_range(obj: &Map<String, Value>, path: &str, out: &mut Vec<Violation>) {
    let num = |k: &str| obj.get(k).and_then(Value::as_f64);
    let pairs: [(&str, &str, bool); 5] = [
        ("minimum", "maximum", false),
        ("exclusiveMinimum", "exclusiveMaximum", true),
        ("minLength", "maxLength", false),
        ("minItems", "maxItems", false),
        ("minProperties", "maxProperties", false),
    ];
    for (lo_key, hi_key, exclusive) in pairs {
        let (Some(lo), Some(hi)) = (num(lo_key), num(hi_key)) else {
            continue;
        };
        if lo > hi || (exclusive && lo == hi) {
            push(
                out,
                path.to_string(),
                format!(
                    "{} {} and {} {} admit no value, so no answer can satisfy the schema; fix \
                     the bounds",
                    quote(lo_key),
                    snippet(&obj[lo_key]),
                    quote(hi_key),
                    snippet(&obj[hi_key])
                ),
            );
        }
    }
}

/// A single `type` that none of the `enum` values, or not the `const`
/// value, has.
fn type_excludes_values(obj: &Map<String, Value>, path: &str, out: &mut Vec<Violation>) {
    let Some(Value::String(ty)) = obj.get("type") else {
        return;
    };
    if let Some(Value::Array(values)) = obj.get("enum")
        && !values.is_empty()
        && !values.iter().any(|v| has_type(v, ty))
    {
        push(
            out,
            member(path, "enum"),
            format!(
                "none of the values has the schema's type {}, so no answer can satisfy the \
                 schema; change \"type\" or the values",
                quote(ty)
            ),
        );
    }
    if let Some(value) = obj.get("const")
        && !has_type(value, ty)
    {
        push(
            out,
            member(path, "const"),
            format!(
                "{} does not have the schema's type {}, so no answer can satisfy the schema; \
                 change \"type\" or the value",
                snippet(value),
                quote(ty)
            ),
        );
    }
}

/// Whether `v` is an instance of the JSON Schema type `ty` (an unknown
/// name counts as a match: the meta-schema reports it).
fn has_type(v: &Value, ty: &str) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|n| n.fract() == 0.0),
        _ => true,
    }
}
