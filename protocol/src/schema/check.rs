//! Schema checking: the root rule, the strict-mode walk (unknown keywords,
//! `$schema`, remote references) and the meta-schema, every violation at
//! its path. Also the compilation options [`validate`](super::validate)
//! shares, so both sides agree on what a schema means. The crate's errors
//! become messages in [`message`](super::message), which both sides use.

use jsonschema::{Draft, ValidationOptions, Validator};
use serde_json::{Map, Value};

use super::message::{message, pointer_path};
use super::*;

/// Keywords whose value is one subschema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];

/// Keywords whose value is an array of subschemas.
const SCHEMA_ARRAY_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// Keywords whose value maps names to subschemas.
const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keywords whose value is data, not a schema: assertions of the
/// validation vocabulary, annotations and core keywords.
const VALUE_KEYWORDS: &[&str] = &[
    // validation
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "format",
    "contentEncoding",
    "contentMediaType",
    // annotations
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    // core
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$comment",
    "$vocabulary",
];

/// The `$schema` values accepted: draft-07 and draft 2020-12, as Ajv spells
/// them (with or without the empty fragment).
const DRAFT_07: &[&str] = &[
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
];
const DRAFT_2020_12: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
];

/// The draft a schema is read as: what its `$schema` says, else draft-07
/// when it uses a spelling only draft-07 has (`items` as an array,
/// `additionalItems`, `dependencies`), else 2020-12.
pub(super) fn draft_of(schema: &Value) -> Draft {
    if let Some(uri) = schema.get("$schema").and_then(Value::as_str) {
        if DRAFT_07.contains(&uri) {
            return Draft::Draft7;
        }
        if DRAFT_2020_12.contains(&uri) {
            return Draft::Draft202012;
        }
    }
    if uses_draft7_spelling(schema, 0) {
        Draft::Draft7
    } else {
        Draft::Draft202012
    }
}

fn uses_draft7_spelling(node: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let Value::Object(obj) = node else {
        return false;
    };
    if obj.get("items").is_some_and(Value::is_array)
        || obj.contains_key("additionalItems")
        || obj.contains_key("dependencies")
    {
        return true;
    }
    subschemas(obj).any(|(_, sub)| uses_draft7_spelling(sub, depth + 1))
}

/// Every keyword the walk accepts, for [`super::keywords`]; `walk` takes
/// the same lists, so the two cannot drift apart.
pub(super) const KEYWORDS: &[&str] = &{
    const SPECIAL: [&str; 5] = ["$schema", "$ref", "$dynamicRef", "dependencies", "items"];
    const N: usize = SPECIAL.len()
        + SCHEMA_KEYWORDS.len()
        + SCHEMA_ARRAY_KEYWORDS.len()
        + SCHEMA_MAP_KEYWORDS.len()
        + VALUE_KEYWORDS.len();
    let mut out = [""; N];
    let mut n = 0;
    let lists: [&[&str]; 5] = [
        &SPECIAL,
        SCHEMA_KEYWORDS,
        SCHEMA_ARRAY_KEYWORDS,
        SCHEMA_MAP_KEYWORDS,
        VALUE_KEYWORDS,
    ];
    let mut l = 0;
    while l < lists.len() {
        let mut i = 0;
        while i < lists[l].len() {
            out[n] = lists[l][i];
            n += 1;
            i += 1;
        }
        l += 1;
    }
    out
};

/// The subschemas directly under a schema object, each with its path
/// segments relative to the object (`["properties", "x"]`).
fn subschemas(obj: &Map<String, Value>) -> impl Iterator<Item = (Vec<Seg<'_>>, &Value)> {
    obj.iter().flat_map(|(key, val)| {
        let k = key.as_str();
        let mut out: Vec<(Vec<Seg<'_>>, &Value)> = Vec::new();
        if SCHEMA_KEYWORDS.contains(&k) || (k == "items" && !val.is_array()) {
            out.push((vec![Seg::Key(k)], val));
        } else if SCHEMA_ARRAY_KEYWORDS.contains(&k) || k == "items" {
            if let Value::Array(items) = val {
                for (i, sub) in items.iter().enumerate() {
                    out.push((vec![Seg::Key(k), Seg::Index(i)], sub));
                }
            }
        } else if SCHEMA_MAP_KEYWORDS.contains(&k) {
            if let Value::Object(map) = val {
                for (name, sub) in map {
                    out.push((vec![Seg::Key(k), Seg::Key(name)], sub));
                }
            }
        } else if k == "dependencies"
            && let Value::Object(map) = val
        {
            // draft-07: a schema or an array of property names per key.
            for (name, sub) in map {
                if !sub.is_array() {
                    out.push((vec![Seg::Key(k), Seg::Key(name)], sub));
                }
            }
        }
        out
    })
}

/// One step of a path: a member or an array index.
#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn join(path: &str, segs: &[Seg<'_>]) -> String {
    let mut at = path.to_owned();
    for seg in segs {
        at = match seg {
            Seg::Key(k) => member(&at, k),
            Seg::Index(i) => index(&at, *i),
        };
    }
    at
}

/// The options both the check and the validation compile with: the
/// schema's draft, known formats asserted (an unknown one is an
/// annotation, as in Claude Code), and no retrieval of anything outside
/// the schema.
pub(super) fn options(schema: &Value) -> ValidationOptions<'static> {
    jsonschema::options()
        .with_draft(draft_of(schema))
        .should_validate_formats(true)
        // Claude Code accepts a format it does not know, as an annotation.
        .should_ignore_unknown_formats(true)
        .offline()
}

/// Compiles a schema for validation. The error is the crate's own: its
/// text names the keyword that cannot be compiled.
pub(super) fn compile(schema: &Value) -> Result<Validator, jsonschema::ValidationError<'static>> {
    options(schema).build(schema)
}

pub(super) fn check_schema(schema: &Value, path: &str) -> Vec<Violation> {
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
    // answers in an object).
    match root.get("type") {
        None => push(
            &mut out,
            path,
            "the top-level schema needs \"type\": \"object\"",
        ),
        Some(Value::String(name)) if name == "object" => {}
        Some(other) => push(
            &mut out,
            member(path, "type"),
            format!(
                "the top-level schema must have \"type\": \"object\", not {}",
                snippet(other)
            ),
        ),
    }
    walk(schema, path, 1, &mut out);
    if !out.is_empty() {
        // The meta-schema and the compiler would repeat what the walk
        // found in their own words; one account per problem is enough.
        return out;
    }
    let meta = match draft_of(schema) {
        Draft::Draft7 => jsonschema::draft7::meta::validator(),
        _ => jsonschema::draft202012::meta::validator(),
    };
    for error in meta.iter_errors(schema) {
        let at = pointer_path(path, error.instance_path());
        let message = message(&error, path);
        push(&mut out, at, message);
    }
    if !out.is_empty() {
        return out;
    }
    // Valid, but can any answer satisfy it? Claude Code refuses a schema
    // no answer can satisfy before it starts the subagent.
    super::unusable::check(schema, path, 1, &mut out);
    if out.is_empty()
        && let Err(e) = options(schema).build(schema)
    {
        // What the meta-schema cannot see: a pattern that is not a regular
        // expression, an unknown format, a local $ref to nowhere. The
        // compiler's schema path names the keyword (`…properties.v.format`),
        // not the root: the author of a deep schema is told where to look.
        let at = match e.kind() {
            // A reference to nowhere is found while resolving, with no
            // schema path: name the `$ref` that points there.
            jsonschema::error::ValidationErrorKind::Referencing(_) => {
                dangling_ref(schema, path, 1).unwrap_or_else(|| path.to_owned())
            }
            _ => pointer_path(path, e.schema_path()),
        };
        push(&mut out, at, e.to_string());
    }
    out
}

/// The path of the first local `$ref`/`$dynamicRef` under `node` that
/// points nowhere in `root` (a JSON pointer that does not resolve, an
/// anchor no `$anchor`/`$dynamicAnchor` declares).
fn dangling_ref(root: &Value, path: &str, depth: usize) -> Option<String> {
    dangling_ref_in(root, root, path, depth)
}

fn dangling_ref_in(root: &Value, node: &Value, path: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return None;
    }
    let obj = node.as_object()?;
    for k in ["$ref", "$dynamicRef"] {
        if let Some(Value::String(target)) = obj.get(k)
            && let Some(fragment) = target.strip_prefix('#')
            && !resolves(root, fragment)
        {
            return Some(member(path, k));
        }
    }
    subschemas(obj)
        .find_map(|(segs, sub)| dangling_ref_in(root, sub, &join(path, &segs), depth + 1))
}

/// Whether `#fragment` names something in `root`: a JSON pointer that
/// resolves, or an anchor declared somewhere.
fn resolves(root: &Value, fragment: &str) -> bool {
    if fragment.is_empty() || fragment.starts_with('/') {
        return root.pointer(fragment).is_some();
    }
    fn declares(node: &Value, anchor: &str, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        match node {
            Value::Object(obj) => {
                ["$anchor", "$dynamicAnchor"]
                    .iter()
                    .any(|k| obj.get(*k).and_then(Value::as_str) == Some(anchor))
                    || obj.values().any(|v| declares(v, anchor, depth + 1))
            }
            Value::Array(items) => items.iter().any(|v| declares(v, anchor, depth + 1)),
            _ => false,
        }
    }
    declares(root, fragment, 0)
}

/// The strict-mode walk over one schema node.
fn walk(node: &Value, path: &str, depth: usize, out: &mut Vec<Violation>) {
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
        // `true` accepts anything, `false` nothing.
        Value::Bool(_) => return,
        other => {
            push(
                out,
                path,
                format!(
                    "a schema must be a JSON object or a boolean, got {}",
                    kind_with_article(other)
                ),
            );
            return;
        }
    };
    // Document order (serde_json preserve_order), so the violations come
    // out in the order the author reads the schema.
    for (key, val) in obj {
        let k = key.as_str();
        let at = member(path, k);
        if k == "enum" && val.as_array().is_some_and(Vec::is_empty) {
            // Draft 2020-12's meta-schema allows it; Claude Code's
            // (draft-07, as Ajv has it) refuses it, and it admits nothing.
            push(
                out,
                at.clone(),
                "an empty \"enum\" admits no value; list at least one value or remove it",
            );
        }
        match k {
            "$schema" => check_dollar_schema(val, &at, out),
            "$ref" | "$dynamicRef" => check_ref(k, val, &at, out),
            "dependencies" => {}
            _ if VALUE_KEYWORDS.contains(&k)
                || SCHEMA_KEYWORDS.contains(&k)
                || SCHEMA_ARRAY_KEYWORDS.contains(&k)
                || SCHEMA_MAP_KEYWORDS.contains(&k)
                || k == "items" => {}
            _ => push(
                out,
                at,
                format!(
                    "unknown keyword {}; Claude Code validates schemas in strict mode, which refuses \
                     keywords outside JSON Schema (draft 2020-12 and draft-07); remove it or move it \
                     into \"description\"",
                    quote(k)
                ),
            ),
        }
    }
    for (segs, sub) in subschemas(obj) {
        walk(sub, &join(path, &segs), depth + 1, out);
    }
}

fn check_dollar_schema(val: &Value, at: &str, out: &mut Vec<Violation>) {
    let supported = val
        .as_str()
        .is_some_and(|uri| DRAFT_07.contains(&uri) || DRAFT_2020_12.contains(&uri));
    if !supported {
        push(
            out,
            at,
            format!(
                "unsupported $schema {}; use \"{}\" or \"{}\" (or leave it out)",
                snippet(val),
                DRAFT_2020_12[0],
                DRAFT_07[0]
            ),
        );
    }
}

fn check_ref(keyword: &str, val: &Value, at: &str, out: &mut Vec<Violation>) {
    match val {
        Value::String(target) if target.starts_with('#') => {}
        Value::String(target) => push(
            out,
            at,
            format!(
                "remote or file reference {} is not supported; only references inside the schema \
                 (\"#/$defs/name\") are resolved",
                quote(target)
            ),
        ),
        other => push(
            out,
            at,
            format!(
                "\"{keyword}\" must be a string, got {}",
                kind_with_article(other)
            ),
        ),
    }
}
