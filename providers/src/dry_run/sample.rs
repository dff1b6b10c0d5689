//! The value a dry run answers for a schema: candidates for each node
//! (objects and arrays here; strings and numbers in `scalars`), the first the
//! project's validator accepts, within the bounds the parent module's doc
//! lists.

use dsh_protocol::schema;
use serde_json::{Map, Value};

use super::MAX_ITEMS;
use super::scalars::{number_candidates, number_value, string_candidates};

/// Deepest schema nesting the generator walks; the same bound as the
/// validator's, so a schema the validator accepts is never cut short here.
const MAX_DEPTH: usize = 64;

/// The smallest value that satisfies `schema`, or `None` when none of the
/// candidates tried does (a schema no value satisfies, such as a `oneOf`
/// whose branches always match together).
///
/// Local `$ref`s are resolved against `schema` itself; nothing outside it
/// is read.
///
/// The search is bounded by `MAX_NODES` nodes in all: a schema whose
/// optional properties refer back to it (`{"properties": {"a": {"$ref":
/// "#"}, "b": {"$ref": "#"}}}`) would otherwise be expanded two ways at
/// every one of `MAX_DEPTH` levels, 2^64 nodes, each compiling a
/// validator, and the dry-run answer (polled inline by the supervisor)
/// never came. Past the bound optional parts are left out, so such a
/// schema still gets its smallest value.
pub fn minimal_value(schema: &Value) -> Option<Value> {
    sample_value(schema, 0)
}

/// [`minimal_value`] with arrays of `items` elements (at most
/// [`MAX_ITEMS`]) where the schema allows: `items` clamped into
/// `minItems`/`maxItems`, distinct elements under `uniqueItems`; an array
/// that cannot have that many gets `minItems`. The `--dry-run` answer.
pub fn sample_value(schema: &Value, items: u32) -> Option<Value> {
    NODES_LEFT.with(|n| n.set(MAX_NODES));
    ITEMS.with(|n| n.set(items.min(MAX_ITEMS)));
    let v = generate(schema, schema, 0)?;
    // The whole answer, against the whole schema: what the host checks.
    schema::validate(schema, &v, "").is_empty().then_some(v)
}

/// Schema nodes one [`minimal_value`] may generate values for.
const MAX_NODES: usize = 2_000;
/// JSON nodes an array of an answer may hold beyond its `minItems`: an
/// array of arrays of N elements each is N² nodes, and N levels deep
/// N^depth.
pub(super) const MAX_VALUE_NODES: usize = 100_000;
thread_local! {
    /// What is left of the current [`minimal_value`]'s [`MAX_NODES`].
    static NODES_LEFT: std::cell::Cell<usize> = const { std::cell::Cell::new(MAX_NODES) };
    /// The array length the current [`sample_value`] asks for.
    static ITEMS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The first candidate for `node` that the validator accepts.
fn generate(node: &Value, root: &Value, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let exhausted = NODES_LEFT.with(|n| {
        let left = n.get();
        n.set(left.saturating_sub(1));
        left == 0
    });
    if exhausted {
        return None;
    }
    let scoped = with_root_defs(node, root);
    let usable = schema::validate(&scoped, &Value::Null, "")
        .first()
        .is_none_or(|v| !v.message.starts_with("the schema cannot be used"));
    let mut tries = candidates(node, root, depth);
    tries.extend(fallbacks(node));
    if !usable {
        // A reference the node cannot resolve on its own (`"#"`, a
        // pointer into `properties`): the caller's check of the whole
        // schema decides.
        return tries.into_iter().next();
    }
    tries
        .into_iter()
        .find(|c| schema::validate(&scoped, c, "").is_empty())
}

/// Up to `k` distinct values `node` accepts (fewer when the generator finds
/// fewer): its candidates, then variants of the first (a suffix on a
/// string, a step on a number). For `uniqueItems`.
fn distinct_values(node: &Value, root: &Value, depth: usize, k: usize) -> Vec<Value> {
    let Some(first) = generate(node, root, depth) else {
        return Vec::new();
    };
    let scoped = with_root_defs(node, root);
    let valid = |c: &Value| schema::validate(&scoped, c, "").is_empty();
    let mut out = vec![first.clone()];
    let mut tries = candidates(node, root, depth);
    tries.extend(fallbacks(node));
    for c in tries {
        if out.len() >= k {
            return out;
        }
        if !out.contains(&c) && valid(&c) {
            out.push(c);
        }
    }
    // Variants: at most two tries per missing value.
    let mut i: u64 = 1;
    while out.len() < k && i <= 2 * k as u64 + 2 {
        let v = match &first {
            Value::String(s) => Value::String(format!("{s}{i}")),
            Value::Number(n) => match n.as_i64() {
                Some(x) => Value::from(x.saturating_add(i as i64)),
                None => number_value(n.as_f64().unwrap_or(0.0) + i as f64),
            },
            _ => break,
        };
        if !out.contains(&v) && valid(&v) {
            out.push(v);
        }
        i += 1;
    }
    out
}

/// JSON nodes in `v`.
pub(super) fn value_nodes(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(value_nodes).sum::<usize>(),
        Value::Object(o) => 1 + o.values().map(value_nodes).sum::<usize>(),
        _ => 1,
    }
}

/// `node` as a schema of its own: the root's `$defs`/`definitions` copied
/// in, so its `#/$defs/...` references still resolve.
fn with_root_defs(node: &Value, root: &Value) -> Value {
    let (Value::Object(obj), Value::Object(root_obj)) = (node, root) else {
        return node.clone();
    };
    let mut scoped = obj.clone();
    for key in ["$defs", "definitions"] {
        if let Some(defs) = root_obj.get(key)
            && !scoped.contains_key(key)
        {
            scoped.insert(key.to_owned(), defs.clone());
        }
    }
    Value::Object(scoped)
}

/// The schema's own sample values, tried after everything built.
fn fallbacks(node: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(d) = node.get("default") {
        out.push(d.clone());
    }
    if let Some(Value::Array(examples)) = node.get("examples") {
        out.extend(examples.iter().cloned());
    }
    out
}

/// The target of a local `$ref` (`#`, `#/$defs/name`, `#/definitions/x`).
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    let decoded = percent_decode(pointer);
    root.pointer(&decoded)
}

/// `%XX` escapes in a URI fragment, as JSON pointers in `$ref` may carry.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Values to try for `node`, smallest first. Each is built from valid
/// values of the node's parts; the caller checks the node as a whole (which
/// is where `enum`, `const` and `oneOf` on the same node come in).
fn candidates(node: &Value, root: &Value, depth: usize) -> Vec<Value> {
    if depth > MAX_DEPTH {
        return Vec::new();
    }
    let obj = match node {
        Value::Object(obj) => obj,
        // `true` (or anything unexpected) accepts anything; `false` nothing,
        // which the validator then reports.
        _ => return vec![Value::Null],
    };
    // A local reference: the target's keywords with this node's on top.
    if let Some(Value::String(reference)) = obj.get("$ref") {
        let Some(Value::Object(target)) = resolve(root, reference) else {
            return match resolve(root, reference) {
                Some(Value::Bool(true)) => vec![Value::Null],
                _ => Vec::new(),
            };
        };
        let mut merged = obj.clone();
        merged.remove("$ref");
        let merged = merge_branch(target, "$ref", &merged);
        return candidates(&Value::Object(merged), root, depth + 1);
    }
    // allOf: every branch's keywords on one node.
    if let Some(Value::Array(branches)) = obj.get("allOf") {
        let mut merged = obj.clone();
        merged.remove("allOf");
        for branch in branches {
            if let Value::Object(b) = branch {
                let b = match b
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| resolve(root, r))
                {
                    Some(Value::Object(target)) => target,
                    _ => b,
                };
                merged = merge_branch(&merged, "allOf", b);
            }
        }
        return candidates(&Value::Object(merged), root, depth + 1);
    }
    // A type array: each type in turn, the first usable one first.
    if let Some(Value::Array(types)) = obj.get("type") {
        let mut out = Vec::new();
        for ty in types {
            let mut one = obj.clone();
            one.insert("type".to_owned(), ty.clone());
            for c in candidates(&Value::Object(one), root, depth + 1) {
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        return out;
    }
    if let Some(c) = obj.get("const") {
        return vec![c.clone()];
    }
    if let Some(Value::Array(members)) = obj.get("enum")
        && !members.is_empty()
    {
        return members.clone();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            let mut out = Vec::new();
            for branch in branches {
                if let Value::Object(b) = branch {
                    let merged = merge_branch(obj, key, b);
                    out.extend(candidates(&Value::Object(merged), root, depth + 1));
                }
            }
            return out;
        }
    }
    match node_type(obj) {
        Some("object") => object_candidates(obj, root, depth),
        Some("array") => array_candidates(obj, root, depth),
        Some("string") => string_candidates(obj),
        Some("integer") => number_candidates(obj, true),
        Some("number") => number_candidates(obj, false),
        Some("boolean") => vec![Value::Bool(false), Value::Bool(true)],
        // `null`, and a node without constraints (which accepts anything).
        _ => vec![Value::Null],
    }
}

/// The node's type: `type` (the first one, were it a list), else what its
/// keywords imply.
fn node_type(obj: &Map<String, Value>) -> Option<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) => ts.first().and_then(Value::as_str),
        _ if obj.contains_key("properties") || obj.contains_key("required") => Some("object"),
        _ if obj.contains_key("items") => Some("array"),
        _ => None,
    }
}

/// A `oneOf`/`anyOf` branch as a schema of its own: the enclosing node
/// without the alternatives, with the branch's keywords on top (a branch
/// usually leaves `type` to the enclosing node; `properties` and `required`
/// add up).
fn merge_branch(
    node: &Map<String, Value>,
    alternatives: &str,
    branch: &Map<String, Value>,
) -> Map<String, Value> {
    let mut merged = node.clone();
    merged.remove(alternatives);
    for (key, val) in branch {
        match (key.as_str(), merged.get_mut(key), val) {
            ("properties", Some(Value::Object(outer)), Value::Object(inner)) => {
                for (name, sub) in inner {
                    outer.insert(name.clone(), sub.clone());
                }
            }
            ("required", Some(Value::Array(outer)), Value::Array(inner)) => {
                for name in inner {
                    if !outer.contains(name) {
                        outer.push(name.clone());
                    }
                }
            }
            // integer is the narrower of integer and number; any other pair
            // of types either agrees or can never match anyway.
            ("type", Some(Value::String(outer)), Value::String(inner))
                if inner == "number" && outer == "integer" => {}
            _ => {
                merged.insert(key.clone(), val.clone());
            }
        }
    }
    merged
}

/// Required properties only (in `properties` order, then any required name
/// `properties` does not declare), then every declared property.
fn object_candidates(obj: &Map<String, Value>, root: &Value, depth: usize) -> Vec<Value> {
    let empty = Map::new();
    let props = obj
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let any = Value::Object(Map::new());
    // A required name `properties` does not declare gets what
    // `additionalProperties` (when a schema) asks for.
    let extra = match obj.get("additionalProperties") {
        Some(s @ Value::Object(_)) => s,
        _ => &any,
    };
    let sub = |name: &str| generate(props.get(name).unwrap_or(extra), root, depth + 1);

    let mut minimal = Map::new();
    for name in props.keys().filter(|k| required.contains(&k.as_str())) {
        match sub(name) {
            Some(v) => minimal.insert(name.clone(), v),
            None => return Vec::new(),
        };
    }
    for name in required.iter().filter(|n| !props.contains_key(**n)) {
        match sub(name) {
            Some(v) => minimal.insert((*name).to_string(), v),
            None => return Vec::new(),
        };
    }
    let mut full = minimal.clone();
    for name in props.keys() {
        if !full.contains_key(name)
            && let Some(v) = sub(name)
        {
            full.insert(name.clone(), v);
        }
    }
    let mut out = vec![Value::Object(minimal.clone())];
    if full != minimal {
        out.push(Value::Object(full));
    }
    out
}

/// N items (`--dry-run-items`) clamped into `minItems`/`maxItems`; then
/// `minItems` items and one more, as [`minimal_value`] builds them, for
/// when N items do not validate.
fn array_candidates(obj: &Map<String, Value>, root: &Value, depth: usize) -> Vec<Value> {
    // A generous cap: a schema asking for millions of items is not worth
    // allocating for a dry run.
    let cap = |x: u64| usize::try_from(x.min(4096)).unwrap_or(4096);
    let min = cap(obj.get("minItems").and_then(Value::as_u64).unwrap_or(0));
    let max = obj.get("maxItems").and_then(Value::as_u64).map(cap);
    let unique = obj.get("uniqueItems") == Some(&Value::Bool(true));
    let wanted = ITEMS.with(std::cell::Cell::get) as usize;
    let mut n = wanted.max(min);
    if let Some(max) = max {
        n = n.min(max).max(min.min(max));
    }
    // Positional schemas first: 2020-12 `prefixItems`, draft-07 `items` as
    // an array; then the schema of every further item.
    let (prefix, rest) = match (obj.get("prefixItems"), obj.get("items")) {
        (Some(Value::Array(p)), rest) => (p.as_slice(), rest),
        (None, Some(Value::Array(p))) => (p.as_slice(), obj.get("additionalItems")),
        (None, rest) => (&[][..], rest),
        (Some(_), rest) => (&[][..], rest),
    };
    let any = Value::Object(Map::new());
    let rest = rest.unwrap_or(&any);
    let longest = n.max(min + 1);
    let mut built = Vec::new();
    for sub in prefix.iter().take(longest) {
        match generate(sub, root, depth + 1) {
            Some(v) => built.push(v),
            None => break,
        }
    }
    if built.len() < prefix.len().min(min) {
        return Vec::new();
    }
    // The further items: one value repeated, or distinct ones.
    let further = longest.saturating_sub(built.len());
    let pool: Vec<Value> = if further == 0 {
        Vec::new()
    } else if unique {
        distinct_values(rest, root, depth + 1, further)
    } else {
        generate(rest, root, depth + 1).into_iter().collect()
    };
    let take = |len: usize| -> Option<Value> {
        let mut items: Vec<Value> = built.iter().take(len).cloned().collect();
        let more = len.saturating_sub(items.len());
        if more > 0 {
            if pool.is_empty() || (unique && pool.len() < more) {
                return None;
            }
            items.extend((0..more).map(|i| pool[i % pool.len()].clone()));
        }
        (items.len() == len).then_some(Value::Array(items))
    };
    // N items, lowered (never below minItems) so the answer stays small.
    let per = built
        .iter()
        .chain(pool.iter())
        .map(value_nodes)
        .max()
        .unwrap_or(1);
    let long = n.min((MAX_VALUE_NODES / per.max(1)).max(min));
    // A closed tuple (`items: false`) has at most its prefix.
    let tuple = built.len().clamp(min, long.max(min));
    let mut out = Vec::new();
    for len in [long, tuple, min, min + 1] {
        if max.is_some_and(|m| len > m) {
            continue;
        }
        if let Some(v) = take(len)
            && !out.contains(&v)
        {
            out.push(v);
        }
    }
    out
}
