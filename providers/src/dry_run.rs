//! The `--dry-run` provider: answers every `agent()` call at once, without
//! any model, so a workflow's control flow can be exercised before a
//! fixture exists.
//!
//! - A call **without** `schema` gets a short placeholder text naming the
//!   call's label: `[dry run] answer for "review parser.rs"`.
//! - A call **with** `schema` gets a small value that satisfies it
//!   ([`sample_value`]): required properties filled (optional ones left
//!   out), the first `enum`/`const` value, arrays of N elements
//!   (`--dry-run-items N`, default [`DEFAULT_ITEMS`]; clamped into
//!   `minItems`/`maxItems`, distinct elements under `uniqueItems` where the
//!   generator finds enough), `""` padded to `minLength` (within
//!   `maxLength`), a string built from the `pattern` regex (its shortest
//!   match, lengthened to `minLength` when needed), `0` moved into
//!   `minimum`/`maximum`, `false`, `null`, a sample of a known `format`,
//!   the first usable type of a type array, for `oneOf`/`anyOf` the first
//!   branch that validates, `allOf` branches merged, local `$ref`s
//!   resolved, and as a last resort the schema's own `default`/`examples`.
//!   [`minimal_value`] is the same with empty arrays (N = 0): the smallest
//!   value.
//!   Every candidate is checked with the project's own validator
//!   ([`dsh_protocol::schema::validate`]) before it is used, so the host
//!   never rejects a dry-run answer; a schema the generator cannot satisfy
//!   (a `pattern` with look-arounds it cannot build, an `if`/`then` it
//!   cannot meet) fails the call with a message saying so. An array that
//!   cannot have N elements (items that never validate, too few distinct
//!   ones) falls back to `minItems` elements.
//! - The work is bounded: at most 2,000 schema nodes per answer, arrays of
//!   at most [`MAX_ITEMS`] requested elements, and an answer of at most
//!   100,000 JSON nodes (N is lowered, never below `minItems`, for arrays
//!   nested in arrays); a string built from a pattern is at most 10,000
//!   characters.
//!
//! Children answer immediately, report no token usage, get the ids
//! `dry-run-1`, `dry-run-2`, … and mark their events `"dryRun": true`
//! ([`ChildOrigin::DryRun`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dsh_protocol::schema;
use serde_json::{Map, Number, Value};
use tokio_util::sync::CancellationToken;

use dsh_seam::answered::AnsweredChild;
use dsh_seam::{
    AgentRequest, ChildOrigin, ChildOutcome, ChildResult, StartRefused, Subagent, SubagentProvider,
};

/// Deepest schema nesting the generator walks; the same bound as the
/// validator's, so a schema the validator accepts is never cut short here.
const MAX_DEPTH: usize = 64;

/// Elements of an array in a dry-run answer unless `--dry-run-items` says.
pub const DEFAULT_ITEMS: u32 = 1;
/// The most elements `--dry-run-items` may ask for.
pub const MAX_ITEMS: u32 = 1000;

/// Answers every `agent()` call without a model (`dsh workflow run --dry-run`).
#[derive(Debug)]
pub struct DryRunProvider {
    next_child: AtomicU64,
    items: u32,
}

impl DryRunProvider {
    /// A dry-run provider; its children are `dry-run-1`, `dry-run-2` …;
    /// arrays get [`DEFAULT_ITEMS`] elements.
    pub fn new() -> Self {
        DryRunProvider {
            next_child: AtomicU64::new(1),
            items: DEFAULT_ITEMS,
        }
    }

    /// The same with arrays of `items` elements (at most [`MAX_ITEMS`];
    /// more is lowered to it), clamped into each array's
    /// `minItems`/`maxItems`.
    pub fn with_items(mut self, items: u32) -> Self {
        self.items = items.min(MAX_ITEMS);
        self
    }

    /// The elements each array gets.
    pub fn items(&self) -> u32 {
        self.items
    }
}

impl Default for DryRunProvider {
    fn default() -> Self {
        Self::new()
    }
}

/// The placeholder text of a call without a schema.
pub fn placeholder_text(label: &str) -> String {
    format!("[dry run] answer for \"{label}\"")
}

/// What a dry run answers for `request`.
fn answer(request: &AgentRequest, items: u32) -> ChildResult {
    match &request.schema {
        None => ChildResult::Text(placeholder_text(&request.label)),
        Some(schema) => match sample_value(schema, items) {
            Some(v) => ChildResult::Structured(v),
            // A schema no value satisfies (two identical oneOf branches), or
            // one the generator cannot satisfy (a `pattern` its samples
            // miss); the child fails like a model that could not comply.
            None => ChildResult::Failed(format!(
                "[dry run] no value satisfies the schema of call #{} ({:?}) that the dry run \
                 could build (it builds strings for a \"pattern\" without look-arounds, and \
                 does not solve \"if\"/\"then\"; give the schema a \"default\" or \
                 \"examples\" value, or answer this call with a fixture)",
                request.seq, request.label
            )),
        },
    }
}

#[async_trait]
impl SubagentProvider for DryRunProvider {
    async fn start(
        &self,
        request: AgentRequest,
        _cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let n = self.next_child.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(AnsweredChild::new(
            format!("dry-run-{n}"),
            ChildOrigin::DryRun,
            Ok(ChildOutcome {
                result: answer(&request, self.items),
                usage: None,
            }),
        )))
    }
}

// ---------------------------------------------------------------------------
// The minimal value of a schema
// ---------------------------------------------------------------------------

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
const MAX_VALUE_NODES: usize = 100_000;
/// The longest string built from a `pattern`.
const MAX_PATTERN_CHARS: usize = 10_000;

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
fn value_nodes(v: &Value) -> usize {
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

/// `""`, or `minLength` characters; then a non-empty string, which a
/// `oneOf` of strings may need to tell its branches apart; then strings
/// built from `pattern`.
fn string_candidates(obj: &Map<String, Value>) -> Vec<Value> {
    if let Some(sample) = obj
        .get("format")
        .and_then(Value::as_str)
        .and_then(format_sample)
    {
        return vec![Value::String(sample.to_owned())];
    }
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let min = usize::try_from(min.min(4096)).unwrap_or(4096);
    let first = "x".repeat(min);
    let second = "x".repeat(min.max(1));
    let mut out = vec![Value::String(first.clone())];
    if second != first {
        out.push(Value::String(second));
    }
    if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
        for s in pattern_samples(p, min) {
            let v = Value::String(s);
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// Strings that match the regex `pattern`: its shortest match, then (for
/// a `minLength` of `min_len` characters) that match with one repetition
/// repeated more, or padded with `x` before or after it. Empty when the
/// pattern does not parse here (the validator's dialect decides what is
/// valid; every candidate is checked anyway).
fn pattern_samples(pattern: &str, min_len: usize) -> Vec<String> {
    let Ok(hir) = regex_syntax::ParserBuilder::new().build().parse(pattern) else {
        return Vec::new();
    };
    let build = |grow: Option<(usize, usize)>| {
        let mut g = PatternGen {
            grow,
            seen: 0,
            out: String::new(),
        };
        g.emit(&hir).map(|()| (g.out, g.seen))
    };
    let Some((shortest, repeats)) = build(None) else {
        return Vec::new();
    };
    let mut out = vec![shortest.clone()];
    let have = shortest.chars().count();
    if have < min_len {
        let need = min_len - have;
        for i in 0..repeats.min(64) {
            if let Some((s, _)) = build(Some((i, need))) {
                out.push(s);
            }
        }
        out.push(format!("{}{shortest}", "x".repeat(need)));
        out.push(format!("{shortest}{}", "x".repeat(need)));
    }
    out.dedup();
    out
}

/// Builds one match of a regex's syntax tree.
struct PatternGen {
    /// `(i, chars)`: repeat the i-th repetition (in tree order) enough
    /// more times to add about `chars` characters.
    grow: Option<(usize, usize)>,
    /// Repetitions met so far.
    seen: usize,
    out: String,
}

impl PatternGen {
    fn emit(&mut self, hir: &regex_syntax::hir::Hir) -> Option<()> {
        use regex_syntax::hir::{Class, HirKind};
        if self.out.len() > MAX_PATTERN_CHARS {
            return None;
        }
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(l) => self.out.push_str(std::str::from_utf8(&l.0).ok()?),
            HirKind::Class(Class::Unicode(c)) => {
                let ranges = c.ranges();
                let has = |ch: char| ranges.iter().any(|r| r.start() <= ch && ch <= r.end());
                let ch = ['x', 'a', '0', 'A', '-', '_']
                    .into_iter()
                    .find(|&ch| has(ch))
                    .or_else(|| {
                        ranges
                            .iter()
                            .find(|r| r.end() >= '!')
                            .map(|r| r.start().max('!'))
                    })?;
                self.out.push(ch);
            }
            HirKind::Class(Class::Bytes(c)) => {
                let r = c.ranges().iter().find(|r| r.start() < 0x80)?;
                let b = if r.start() <= b'x' && b'x' <= r.end() {
                    b'x'
                } else {
                    r.start().max(b'!').min(r.end())
                };
                self.out.push(char::from(b));
            }
            HirKind::Repetition(r) => {
                let index = self.seen;
                self.seen += 1;
                let mut times = r.min as usize;
                if let Some((i, chars)) = self.grow
                    && i == index
                {
                    let per = r.sub.properties().minimum_len().unwrap_or(0);
                    if per > 0 {
                        times += chars.div_ceil(per);
                    }
                    if let Some(max) = r.max {
                        times = times.min(max as usize);
                    }
                }
                for _ in 0..times {
                    self.emit(&r.sub)?;
                    if self.out.len() > MAX_PATTERN_CHARS {
                        return None;
                    }
                }
            }
            HirKind::Capture(c) => self.emit(&c.sub)?,
            HirKind::Concat(parts) => {
                for p in parts {
                    self.emit(p)?;
                }
            }
            HirKind::Alternation(alts) => {
                let shortest = alts
                    .iter()
                    .min_by_key(|a| a.properties().minimum_len().unwrap_or(usize::MAX))?;
                self.emit(shortest)?;
            }
        }
        Some(())
    }
}

/// A short valid string of a `format` the validator checks.
fn format_sample(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "1970-01-01T00:00:00Z",
        "date" => "1970-01-01",
        "time" => "00:00:00Z",
        "duration" => "P0D",
        "email" | "idn-email" => "user@example.com",
        "hostname" | "idn-hostname" => "example.com",
        "ipv4" => "127.0.0.1",
        "ipv6" => "::1",
        "uri" | "iri" | "uri-reference" | "iri-reference" => "https://example.com/",
        "uri-template" => "https://example.com/{id}",
        "uuid" => "00000000-0000-0000-0000-000000000000",
        "json-pointer" | "regex" => "",
        "relative-json-pointer" => "0",
        _ => return None,
    })
}

/// `0` moved into `minimum`/`maximum` (exclusive bounds respected), then
/// the value one above it.
fn number_candidates(obj: &Map<String, Value>, integer: bool) -> Vec<Value> {
    let bound = |k: &str| obj.get(k).and_then(Value::as_f64);
    let (lo, lo_excl) = match (bound("minimum"), bound("exclusiveMinimum")) {
        (Some(a), Some(b)) if b >= a => (Some(b), true),
        (Some(a), _) => (Some(a), false),
        (None, Some(b)) => (Some(b), true),
        (None, None) => (None, false),
    };
    let (hi, hi_excl) = match (bound("maximum"), bound("exclusiveMaximum")) {
        (Some(a), Some(b)) if b <= a => (Some(b), true),
        (Some(a), _) => (Some(a), false),
        (None, Some(b)) => (Some(b), true),
        (None, None) => (None, false),
    };
    let fits = |x: f64| {
        lo.is_none_or(|lo| if lo_excl { x > lo } else { x >= lo })
            && hi.is_none_or(|hi| if hi_excl { x < hi } else { x <= hi })
    };
    let mut tries: Vec<f64> = vec![0.0, 1.0];
    if let Some(lo) = lo {
        let start = if integer { lo.floor() } else { lo };
        tries.extend([start, start + 1.0]);
        if !integer && let Some(hi) = hi {
            tries.push((lo + hi) / 2.0);
        }
    }
    if let Some(hi) = hi {
        let start = if integer { hi.ceil() } else { hi };
        tries.extend([start, start - 1.0]);
    }
    let mut out: Vec<Value> = Vec::new();
    for x in tries {
        if !x.is_finite() || !fits(x) || (integer && x.fract() != 0.0) {
            continue;
        }
        let v = number_value(x);
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out.sort_by(|a, b| {
        let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
        a.abs().total_cmp(&b.abs()).then(a.total_cmp(&b))
    });
    out
}

/// A JSON number, written as an integer when it is one.
fn number_value(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        // Exact: |x| < 2^53.
        Value::from(x as i64)
    } else {
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    /// Every case is inside the subset and gets exactly this value, which
    /// the project's validator accepts.
    #[rstest]
    #[case::empty_object(json!({"type": "object"}), json!({}))]
    #[case::optional_left_out(
        json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        json!({})
    )]
    #[case::required_scalars(
        json!({"type": "object",
               "properties": {"s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
                              "b": {"type": "boolean"}, "z": {"type": "null"}, "any": {}},
               "required": ["s", "n", "i", "b", "z", "any"]}),
        json!({"s": "", "n": 0, "i": 0, "b": false, "z": null, "any": null})
    )]
    #[case::required_in_properties_order(
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
               "required": ["b", "a"]}),
        json!({"a": 0, "b": ""})
    )]
    #[case::first_enum(
        json!({"type": "object", "properties": {"sev": {"type": "string", "enum": ["low", "high"]}},
               "required": ["sev"]}),
        json!({"sev": "low"})
    )]
    #[case::numeric_enum(
        json!({"type": "object", "properties": {"n": {"type": "integer", "enum": [3, 5]}}, "required": ["n"]}),
        json!({"n": 3})
    )]
    #[case::const_value(
        json!({"type": "object", "properties": {"kind": {"type": "string", "const": "bug"}}, "required": ["kind"]}),
        json!({"kind": "bug"})
    )]
    #[case::const_and_enum(
        json!({"type": "object", "properties": {"k": {"enum": ["a", "b"], "const": "b"}}, "required": ["k"]}),
        json!({"k": "b"})
    )]
    #[case::array_is_empty(
        json!({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}}},
               "required": ["xs"]}),
        json!({"xs": []})
    )]
    #[case::nested_objects(
        json!({"type": "object",
               "properties": {"outer": {"type": "object",
                                        "properties": {"inner": {"type": "object",
                                                                 "properties": {"v": {"type": "boolean"}},
                                                                 "required": ["v"]},
                                                       "skip": {"type": "string"}},
                                        "required": ["inner"],
                                        "additionalProperties": false}},
               "required": ["outer"]}),
        json!({"outer": {"inner": {"v": false}}})
    )]
    #[case::review_findings(
        json!({"type": "object",
               "properties": {"file": {"type": "string"},
                              "findings": {"type": "array", "items": {"type": "object",
                                  "properties": {"line": {"type": "integer"},
                                                 "severity": {"type": "string", "enum": ["low", "medium", "high"]},
                                                 "message": {"type": "string"}},
                                  "required": ["line", "severity", "message"],
                                  "additionalProperties": false}}},
               "required": ["file", "findings"]}),
        json!({"file": "", "findings": []})
    )]
    #[case::one_of_first_branch(
        json!({"type": "object",
               "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
               "required": ["v"]}),
        json!({"v": ""})
    )]
    #[case::one_of_inherits_type(
        json!({"type": "object",
               "oneOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                         {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}),
        json!({"a": ""})
    )]
    #[case::one_of_overlapping_branches_picks_a_distinct_value(
        json!({"type": "object",
               "properties": {"v": {"type": "string", "oneOf": [{"enum": ["", "a"]}, {"type": "string"}]}},
               "required": ["v"]}),
        json!({"v": "x"})
    )]
    #[case::one_of_needs_the_optional_property(
        json!({"type": "object",
               "oneOf": [{"properties": {"a": {"type": "string"}}},
                         {"properties": {"a": {"type": "integer"}}}]}),
        json!({"a": ""})
    )]
    #[case::one_of_of_consts(
        json!({"type": "object",
               "properties": {"k": {"oneOf": [{"const": "x"}, {"const": "y"}]}},
               "required": ["k"]}),
        json!({"k": "x"})
    )]
    #[case::null_or_object(
        json!({"type": "object",
               "properties": {"p": {"oneOf": [{"type": "null"},
                                              {"type": "object", "properties": {"x": {"type": "number"}},
                                               "required": ["x"]}]}},
               "required": ["p"]}),
        json!({"p": null})
    )]
    #[case::annotations_ignored(
        json!({"type": "object", "title": "T", "description": "d",
               "properties": {"a": {"type": "integer", "default": 7, "examples": [1]}}, "required": ["a"]}),
        json!({"a": 0})
    )]
    fn minimal_values_of_the_subset(#[case] schema: Value, #[case] expected: Value) {
        assert_eq!(
            schema::check_schema(&schema, "schema"),
            vec![],
            "the case must be inside the subset"
        );
        let v = minimal_value(&schema).expect("a value");
        assert_eq!(v, expected);
        assert_eq!(schema::validate(&schema, &v, "value"), vec![]);
    }

    /// The constraint keywords, references and combinators the generator
    /// builds values for.
    #[rstest]
    #[case::min_items(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 2}),
        json!([0, 0])
    )]
    #[case::min_items_one_object(
        json!({"type": "array", "minItems": 1,
               "items": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}}),
        json!([{"a": false}])
    )]
    #[case::min_length(json!({"type": "string", "minLength": 3}), json!("xxx"))]
    #[case::minimum(json!({"type": "integer", "minimum": 5}), json!(5))]
    #[case::fractional_minimum_integer(json!({"type": "integer", "minimum": 2.5}), json!(3))]
    #[case::maximum_negative(json!({"type": "integer", "maximum": -4}), json!(-4))]
    #[case::exclusive_minimum(json!({"type": "integer", "exclusiveMinimum": 0}), json!(1))]
    #[case::number_range(json!({"type": "number", "minimum": 0.5, "maximum": 0.75}), json!(0.5))]
    #[case::number_exclusive_range(
        json!({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 2}),
        json!(1.5)
    )]
    #[case::zero_in_range(json!({"type": "number", "minimum": -3, "maximum": 3}), json!(0))]
    #[case::any_of(json!({"anyOf": [{"type": "boolean"}, {"type": "string"}]}), json!(false))]
    #[case::type_array_first_type(json!({"type": ["null", "string"]}), json!(null))]
    #[case::type_array_first_usable(
        json!({"type": ["integer", "string"], "minimum": 3, "maximum": 1, "minLength": 2}),
        json!("xx")
    )]
    #[case::max_length(json!({"type": "string", "minLength": 2, "maxLength": 2}), json!("xx"))]
    #[case::ref_to_defs(
        json!({"type": "object", "$defs": {"sev": {"enum": ["low", "high"]}},
               "properties": {"s": {"$ref": "#/$defs/sev"}}, "required": ["s"]}),
        json!({"s": "low"})
    )]
    #[case::ref_to_definitions_nested(
        json!({"type": "object", "definitions": {"item": {"type": "object",
                   "properties": {"n": {"type": "integer", "minimum": 2}}, "required": ["n"]}},
               "properties": {"xs": {"type": "array", "minItems": 1, "items": {"$ref": "#/definitions/item"}}},
               "required": ["xs"]}),
        json!({"xs": [{"n": 2}]})
    )]
    #[case::recursive_ref(
        json!({"type": "object", "$defs": {"node": {"type": "object",
                   "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["kids"]}},
               "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"]}),
        json!({"root": {"kids": []}})
    )]
    #[case::all_of_merged(
        json!({"type": "object", "allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                                           {"properties": {"b": {"type": "integer", "minimum": 1}}, "required": ["b"]}]}),
        json!({"a": "", "b": 1})
    )]
    #[case::prefix_items(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "minItems": 2}),
        json!(["", false])
    )]
    #[case::format_date_time(json!({"type": "string", "format": "date-time"}), json!("1970-01-01T00:00:00Z"))]
    #[case::format_email(json!({"type": "string", "format": "email"}), json!("user@example.com"))]
    #[case::pattern_built_before_examples(
        json!({"type": "string", "pattern": "^[A-Z]{3}-\\d+$", "examples": ["ABC-1"]}),
        json!("AAA-0")
    )]
    #[case::examples_when_the_pattern_cannot_be_built(
        json!({"type": "string", "pattern": "^(?=A)[A-Z]{3}$", "examples": ["ABC"]}),
        json!("ABC")
    )]
    #[case::enum_of_objects(json!({"enum": [{"k": 1}, [2]]}), json!({"k": 1}))]
    #[case::undeclared_required_uses_additional_properties(
        json!({"type": "object", "required": ["x"], "additionalProperties": {"type": "integer", "minimum": 4}}),
        json!({"x": 4})
    )]
    #[case::multiple_of(json!({"type": "number", "minimum": 1, "multipleOf": 0.5}), json!(1))]
    fn keywords_beyond_the_subset(#[case] schema: Value, #[case] expected: Value) {
        assert_eq!(minimal_value(&schema), Some(expected.clone()));
        assert_eq!(schema::validate(&schema, &expected, "value"), vec![]);
    }

    /// `--dry-run-items N`: arrays of N elements within minItems/maxItems,
    /// distinct under uniqueItems; strings built for `pattern`.
    #[rstest]
    #[case::default_one(json!({"type": "array", "items": {"type": "integer"}}), 1, json!([0]))]
    #[case::zero_is_empty(json!({"type": "array", "items": {"type": "integer"}}), 0, json!([]))]
    #[case::three(json!({"type": "array", "items": {"type": "string"}}), 3, json!(["", "", ""]))]
    #[case::raised_to_min_items(json!({"type": "array", "minItems": 2}), 1, json!([null, null]))]
    #[case::lowered_to_max_items(json!({"type": "array", "maxItems": 2, "items": {"type": "boolean"}}), 5, json!([false, false]))]
    #[case::max_items_zero(json!({"type": "array", "maxItems": 0}), 3, json!([]))]
    #[case::unique_booleans(json!({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}}), 2, json!([false, true]))]
    #[case::unique_strings(json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}), 3, json!(["", "x", "1"]))]
    #[case::unique_integers_in_range(json!({"type": "array", "uniqueItems": true, "items": {"type": "integer", "minimum": 5}}), 3, json!([5, 6, 7]))]
    #[case::unique_too_few_falls_back(json!({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}}), 3, json!([]))]
    #[case::unique_enum(json!({"type": "array", "uniqueItems": true, "items": {"enum": ["a", "b"]}}), 2, json!(["a", "b"]))]
    #[case::prefix_then_rest(json!({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}}), 3, json!(["", 0, 0]))]
    #[case::closed_tuple(json!({"type": "array", "prefixItems": [{"type": "string"}], "items": false}), 3, json!([""]))]
    #[case::nested_in_object(
        json!({"type": "object", "properties": {"findings": {"type": "array", "items": {"type": "object",
               "properties": {"line": {"type": "integer"}}, "required": ["line"]}}}, "required": ["findings"]}),
        2,
        json!({"findings": [{"line": 0}, {"line": 0}]})
    )]
    #[case::pattern_literal(json!({"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}), 1, json!("AAA-0"))]
    #[case::pattern_unanchored(json!({"type": "string", "pattern": "bug"}), 1, json!("bug"))]
    #[case::pattern_alternation(json!({"type": "string", "pattern": "^(high|low)$"}), 1, json!("low"))]
    #[case::pattern_min_length(json!({"type": "string", "pattern": "^a+$", "minLength": 4}), 1, json!("aaaa"))]
    #[case::pattern_min_length_padded(json!({"type": "string", "pattern": "^v\\d$", "minLength": 2, "maxLength": 2}), 1, json!("v0"))]
    #[case::pattern_class_without_x(json!({"type": "string", "pattern": "^[b-d]{2}$"}), 1, json!("bb"))]
    #[case::pattern_in_array(json!({"type": "array", "items": {"type": "string", "pattern": "^id-[0-9]+$"}}), 2, json!(["id-0", "id-0"]))]
    fn items_and_patterns(#[case] schema: Value, #[case] items: u32, #[case] expected: Value) {
        assert_eq!(sample_value(&schema, items), Some(expected.clone()));
        assert_eq!(schema::validate(&schema, &expected, "value"), vec![]);
    }

    #[test]
    fn nested_arrays_stay_bounded() {
        // 1000 × 1000 × 1000 elements would be a billion; the answer is
        // lowered to about MAX_VALUE_NODES, and comes in time.
        let schema = json!({"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}});
        let started = std::time::Instant::now();
        let v = sample_value(&schema, MAX_ITEMS).expect("a value");
        assert!(
            value_nodes(&v) <= 3 * MAX_VALUE_NODES,
            "{}",
            value_nodes(&v)
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // minItems is never lowered.
        let min =
            json!({"type": "array", "minItems": 3, "items": {"type": "array", "minItems": 2}});
        assert_eq!(
            sample_value(&min, 1),
            Some(json!([[null, null], [null, null], [null, null]]))
        );
    }

    #[test]
    fn a_hostile_pattern_is_bounded() {
        let schema = json!({"type": "string", "pattern": "^(a{1000}){1000}$"});
        assert_eq!(sample_value(&schema, 1), None);
    }

    #[test]
    fn the_provider_uses_its_item_count() {
        assert_eq!(DryRunProvider::new().items(), DEFAULT_ITEMS);
        assert_eq!(DryRunProvider::new().with_items(5000).items(), MAX_ITEMS);
    }

    #[rstest]
    #[case::identical_one_of_branches(json!({"type": "object",
        "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "string"}]}}, "required": ["v"]}))]
    #[case::empty_range(json!({"type": "integer", "minimum": 3, "maximum": 2}))]
    #[case::pattern_with_lookahead(json!({"type": "string", "pattern": "^(?=.*\\d)[a-z]+$"}))]
    #[case::dangling_ref(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}, "required": ["a"]}))]
    fn unsatisfiable_schemas_have_no_value(#[case] schema: Value) {
        assert_eq!(minimal_value(&schema), None);
    }

    /// Optional properties referring back to the root were expanded both
    /// ways at every level: 2^64 nodes, each compiling a validator, and
    /// `--dry-run` never answered. Found by the `schema` fuzz target
    /// (a seed of the new vocabulary; fuzz/corpus/schema/regress-recursive-ref).
    #[test]
    fn optional_self_references_are_bounded() {
        let schema =
            json!({"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}}});
        let started = std::time::Instant::now();
        let v = minimal_value(&schema).expect("a value");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(schema::validate(&schema, &v, "value"), vec![]);
        // A required self-reference has no finite value, and says so in time.
        let required =
            json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]});
        assert_eq!(minimal_value(&required), None);
        // The bound is per call: the next schema gets all of it.
        assert_eq!(minimal_value(&json!({"type": "object"})), Some(json!({})));
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let mut s = json!({"type": "object"});
        for _ in 0..200 {
            s = json!({"type": "object", "properties": {"a": s}, "required": ["a"]});
        }
        // No stack overflow; too deep for a value.
        assert_eq!(minimal_value(&s), None);
    }

    fn request(schema: Option<Value>) -> AgentRequest {
        AgentRequest {
            schema,
            ..AgentRequest::new(4, "Review parser.rs", "review parser.rs")
        }
    }

    #[tokio::test]
    async fn children_answer_at_once_and_are_marked_dry_run() {
        let p = DryRunProvider::new();
        let text = p
            .start(request(None), CancellationToken::new())
            .await
            .expect("started");
        assert_eq!(text.id(), "dry-run-1");
        assert_eq!(text.origin(), ChildOrigin::DryRun);
        let out = text.result().await.expect("result");
        assert_eq!(
            out.result,
            ChildResult::Text("[dry run] answer for \"review parser.rs\"".into())
        );
        assert_eq!(out.usage, None);

        let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
        let structured = p
            .start(request(Some(schema)), CancellationToken::new())
            .await
            .expect("started");
        assert_eq!(structured.id(), "dry-run-2");
        let out = structured.result().await.expect("result");
        assert_eq!(out.result, ChildResult::Structured(json!({"ok": false})));

        let cancelled = p
            .start(request(None), CancellationToken::new())
            .await
            .expect("started");
        cancelled.cancel();
        let out = cancelled.result().await.expect("result");
        assert_eq!(out.result, ChildResult::Cancelled);
    }

    #[tokio::test]
    async fn an_unsatisfiable_schema_fails_the_child() {
        let schema = json!({"type": "object",
            "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "string"}]}}, "required": ["v"]});
        let child = DryRunProvider::new()
            .start(request(Some(schema)), CancellationToken::new())
            .await
            .expect("started");
        let out = child.result().await.expect("result");
        assert!(
            matches!(&out.result, ChildResult::Failed(m) if m.contains("no value satisfies")),
            "{:?}",
            out.result
        );
    }
}
