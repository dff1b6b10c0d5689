//! Schema checking: is a schema inside the subset? Every violation is
//! listed, at its path.

use serde_json::Value;

use super::*;

/// Checks one schema node. `inherited` is the type a value reaching this node
/// is already known to have: set for `oneOf` branches (they may leave `type`
/// to the enclosing node, the usual way to write alternatives of one object
/// shape) and for a root whose missing `type` was already reported.
pub(super) fn check_node(
    node: &Value,
    path: &str,
    depth: usize,
    inherited: Option<Ty>,
    out: &mut Vec<Violation>,
) {
    if depth > MAX_DEPTH {
        push(
            out,
            path,
            format!("schema nesting exceeds {MAX_DEPTH} levels; flatten the schema"),
        );
        return;
    }
    let obj = match node {
        Value::Object(obj) => obj,
        Value::Bool(_) => {
            push(
                out,
                path,
                "boolean schemas are not supported; use {} to accept any value",
            );
            return;
        }
        other => {
            push(
                out,
                path,
                format!(
                    "a schema must be a JSON object, got {}",
                    kind_with_article(other)
                ),
            );
            return;
        }
    };

    let node_type = match obj.get("type") {
        None => inherited.map_or(NodeType::Absent, NodeType::Known),
        Some(Value::String(name)) => match (Ty::parse(name), inherited) {
            (Some(own), Some(outer)) if own.compatible(outer) => {
                NodeType::Known(own.narrower(outer))
            }
            (Some(own), _) => NodeType::Known(own),
            (None, _) => NodeType::Invalid,
        },
        Some(_) => NodeType::Invalid,
    };

    // Walk the keys in document order (serde_json preserve_order) so the
    // violations come out in the order the author reads the schema.
    for (key, val) in obj {
        let at = member(path, key);
        match key.as_str() {
            "type" => check_type(val, &at, inherited, out),
            "properties" => {
                require_type(node_type, Ty::Object, key, &at, out);
                check_properties(val, &at, depth, out);
            }
            "required" => {
                require_type(node_type, Ty::Object, key, &at, out);
                check_required(val, obj.get("properties"), &at, out);
            }
            "additionalProperties" => {
                require_type(node_type, Ty::Object, key, &at, out);
                if !val.is_boolean() {
                    push(
                        out,
                        at,
                        "\"additionalProperties\" must be true or false; schemas are not supported",
                    );
                }
            }
            "items" => {
                require_type(node_type, Ty::Array, key, &at, out);
                if val.is_array() {
                    push(
                        out,
                        at,
                        "\"items\" must be a single schema; the tuple form (an array of schemas) is not supported",
                    );
                } else {
                    check_node(val, &at, depth + 1, None, out);
                }
            }
            "enum" => check_enum(val, node_type, &at, out),
            "const" => check_const(val, node_type, obj.get("enum"), &at, out),
            "oneOf" => check_one_of(val, node_type, &at, depth, out),
            // Annotations carry no constraint; their contents are free-form.
            "description" | "title" | "default" | "examples" => {}
            _ => push(
                out,
                at,
                format!(
                    "unsupported keyword {}; supported: {SUPPORTED_KEYWORDS}",
                    quote(key)
                ),
            ),
        }
    }
}

fn check_type(val: &Value, at: &str, inherited: Option<Ty>, out: &mut Vec<Violation>) {
    match val {
        Value::String(name) => match Ty::parse(name) {
            None => push(
                out,
                at,
                format!("unknown type {}; use one of {TYPE_NAMES}", quote(name)),
            ),
            Some(own) => {
                // Only oneOf branches inherit a type from a node that
                // declared one (the root's inherited type stands in for a
                // missing one), so a clash here is a branch that can never
                // match anything.
                if let Some(outer) = inherited.filter(|outer| !own.compatible(*outer)) {
                    push(
                        out,
                        at,
                        format!(
                            "type \"{}\" conflicts with \"type\": \"{}\" of the enclosing schema, so this branch can never match",
                            own.name(),
                            outer.name()
                        ),
                    );
                }
            }
        },
        Value::Array(_) => push(
            out,
            at,
            "\"type\" must be a single string; for alternatives use oneOf",
        ),
        other => push(
            out,
            at,
            format!(
                "\"type\" must be a string (one of {TYPE_NAMES}), got {}",
                kind_with_article(other)
            ),
        ),
    }
}

/// Object and array keywords on a node that cannot hold objects/arrays are
/// almost always a misplaced or forgotten `type`; we insist on an explicit
/// one (on the node, or for a oneOf branch on the enclosing node) so that
/// providers translating the schema see the intent.
fn require_type(node_type: NodeType, needed: Ty, key: &str, at: &str, out: &mut Vec<Violation>) {
    let plural = if needed == Ty::Object {
        "objects"
    } else {
        "arrays"
    };
    match node_type {
        NodeType::Invalid => {}
        NodeType::Known(ty) if ty == needed => {}
        NodeType::Absent => push(
            out,
            at,
            format!(
                "{} applies only to {plural}; add \"type\": \"{}\"",
                quote(key),
                needed.name()
            ),
        ),
        NodeType::Known(ty) => push(
            out,
            at,
            format!(
                "{} applies only to {plural}, but \"type\" is \"{}\"",
                quote(key),
                ty.name()
            ),
        ),
    }
}

fn check_properties(val: &Value, at: &str, depth: usize, out: &mut Vec<Violation>) {
    let Some(props) = val.as_object() else {
        push(
            out,
            at,
            "\"properties\" must be an object mapping property names to schemas",
        );
        return;
    };
    for (name, sub) in props {
        check_node(sub, &member(at, name), depth + 1, None, out);
    }
}

/// `required` must name declared properties: a required key outside
/// `properties` is either a typo or (with `additionalProperties: false`) a
/// schema no value can satisfy, and the contract asks us to reject both.
fn check_required(val: &Value, properties: Option<&Value>, at: &str, out: &mut Vec<Violation>) {
    let Some(names) = val.as_array() else {
        push(out, at, "\"required\" must be an array of property names");
        return;
    };
    let declared = match properties {
        None => Some(None),
        Some(Value::Object(props)) => Some(Some(props)),
        // A malformed `properties` is reported on its own; checking names
        // against it would only add noise.
        Some(_) => None,
    };
    for (i, entry) in names.iter().enumerate() {
        let entry_at = index(at, i);
        let Some(name) = entry.as_str() else {
            push(
                out,
                entry_at,
                format!(
                    "\"required\" entries must be property names (strings), got {}",
                    kind_with_article(entry)
                ),
            );
            continue;
        };
        if names[..i]
            .iter()
            .any(|earlier| earlier.as_str() == Some(name))
        {
            push(
                out,
                entry_at,
                format!("{} is listed twice in \"required\"", quote(name)),
            );
            continue;
        }
        if let Some(props) = declared
            && !props.is_some_and(|props| props.contains_key(name))
        {
            push(
                out,
                entry_at,
                format!(
                    "required property {} is not in \"properties\"; declare it there or drop it from \"required\"",
                    quote(name)
                ),
            );
        }
    }
}

fn check_enum(val: &Value, node_type: NodeType, at: &str, out: &mut Vec<Violation>) {
    let Some(members) = val.as_array() else {
        push(out, at, "\"enum\" must be a non-empty array of scalars");
        return;
    };
    if members.is_empty() {
        push(
            out,
            at,
            "\"enum\" is empty, so no value can match; list at least one value",
        );
        return;
    }
    let node_type = scalar_only(node_type, "enum", at, out);
    for (i, m) in members.iter().enumerate() {
        check_scalar(m, node_type, "enum value", &index(at, i), out);
    }
}

fn check_const(
    val: &Value,
    node_type: NodeType,
    enum_members: Option<&Value>,
    at: &str,
    out: &mut Vec<Violation>,
) {
    let node_type = scalar_only(node_type, "const", at, out);
    if !check_scalar(val, node_type, "const value", at, out) {
        return;
    }
    // const and enum together are legal but must overlap, otherwise nothing
    // can ever match. A malformed or empty enum is reported by check_enum.
    if let Some(Value::Array(members)) = enum_members
        && !members.is_empty()
        && !members.iter().any(|m| json_eq(m, val))
    {
        push(
            out,
            at,
            "\"const\" value is not among the \"enum\" values, so no value can match",
        );
    }
}

/// enum/const are limited to scalars, so they cannot sit on an object or
/// array node. Reports that once and returns the type to check members
/// against (none, after such a report, to avoid one message per member).
fn scalar_only(node_type: NodeType, key: &str, at: &str, out: &mut Vec<Violation>) -> NodeType {
    match node_type {
        NodeType::Known(ty) if !ty.is_scalar() => {
            push(
                out,
                at,
                format!(
                    "\"{key}\" needs a scalar type ({}), but \"type\" is \"{}\"",
                    "string, number, integer, boolean or null",
                    ty.name()
                ),
            );
            NodeType::Invalid
        }
        other => other,
    }
}

/// Checks one enum/const value; returns whether it was acceptable.
fn check_scalar(
    value: &Value,
    node_type: NodeType,
    what: &str,
    at: &str,
    out: &mut Vec<Violation>,
) -> bool {
    if matches!(value, Value::Array(_) | Value::Object(_)) {
        push(
            out,
            at,
            format!(
                "{what} must be a scalar (string, number, boolean or null), got {}",
                kind_with_article(value)
            ),
        );
        return false;
    }
    if let NodeType::Known(ty) = node_type
        && !ty.matches(value)
    {
        push(
            out,
            at,
            format!(
                "{what} {} does not match \"type\": \"{}\"",
                snippet(value),
                ty.name()
            ),
        );
        return false;
    }
    true
}

fn check_one_of(
    val: &Value,
    node_type: NodeType,
    at: &str,
    depth: usize,
    out: &mut Vec<Violation>,
) {
    let Some(branches) = val.as_array() else {
        push(out, at, "\"oneOf\" must be an array of two or more schemas");
        return;
    };
    if branches.len() < 2 {
        push(
            out,
            at,
            format!(
                "\"oneOf\" needs two or more branches, got {}; use the schema directly instead",
                branches.len()
            ),
        );
    }
    let inherited = match node_type {
        NodeType::Known(ty) => Some(ty),
        NodeType::Absent | NodeType::Invalid => None,
    };
    for (i, branch) in branches.iter().enumerate() {
        check_node(branch, &index(at, i), depth + 1, inherited, out);
    }
}
