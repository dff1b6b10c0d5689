//! The `--dry-run` provider: answers every `agent()` call at once, without
//! any model, so a workflow's control flow can be exercised before a
//! fixture exists.
//!
//! - A call **without** `schema` gets a short placeholder text naming the
//!   call's label: `[dry run] answer for "review parser.rs"`.
//! - A call **with** `schema` gets the smallest value that satisfies it
//!   ([`minimal_value`]): required properties filled (optional ones left
//!   out), the first `enum`/`const` value, empty arrays, `""`, `0`,
//!   `false`, `null`, and for `oneOf` the first branch whose value matches
//!   exactly one branch. Every candidate is checked with the project's own
//!   validator ([`dsh_protocol::schema::validate`]) before it is used, so
//!   the host never rejects a dry-run answer.
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

use crate::provider::{
    AgentRequest, ChildOrigin, ChildOutcome, ChildResult, StartRefused, Subagent, SubagentProvider,
};
use crate::providers::answered::AnsweredChild;

/// Deepest schema nesting the generator walks; the same bound as the
/// validator's, so a schema the validator accepts is never cut short here.
const MAX_DEPTH: usize = 64;

/// Answers every `agent()` call without a model (`dsh workflow run --dry-run`).
#[derive(Debug)]
pub struct DryRunProvider {
    next_child: AtomicU64,
}

impl DryRunProvider {
    /// A dry-run provider; its children are `dry-run-1`, `dry-run-2` …
    pub fn new() -> Self {
        DryRunProvider {
            next_child: AtomicU64::new(1),
        }
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
fn answer(request: &AgentRequest) -> ChildResult {
    match &request.schema {
        None => ChildResult::Text(placeholder_text(&request.label)),
        Some(schema) => match minimal_value(schema) {
            Some(v) => ChildResult::Structured(v),
            // Only a schema no value satisfies gets here (e.g. two
            // identical oneOf branches); the child fails like a model that
            // could not comply.
            None => ChildResult::Failed(format!(
                "[dry run] no value satisfies the schema of call #{} ({:?})",
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
                result: answer(&request),
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
/// Besides the subset of [`dsh_protocol::schema`] it honours `minItems`,
/// `minLength`, `minimum`/`maximum` (and their exclusive forms) and
/// `anyOf`, which the subset rejects at call time today; they cost little
/// and keep dry runs right if the subset grows.
pub fn minimal_value(schema: &Value) -> Option<Value> {
    generate(schema, 0)
}

/// The first candidate for `node` that the validator accepts.
fn generate(node: &Value, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    candidates(node, depth)
        .into_iter()
        .find(|c| schema::validate(node, c, "").is_empty())
}

/// Values to try for `node`, smallest first. Each is built from valid
/// values of the node's parts; the caller checks the node as a whole (which
/// is where `enum`, `const` and `oneOf` on the same node come in).
fn candidates(node: &Value, depth: usize) -> Vec<Value> {
    let obj = match node {
        Value::Object(obj) => obj,
        // `true` (or anything unexpected) accepts anything; `false` nothing,
        // which the validator then reports.
        _ => return vec![Value::Null],
    };
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
                    out.extend(candidates(&Value::Object(merged), depth + 1));
                }
            }
            return out;
        }
    }
    match node_type(obj) {
        Some("object") => object_candidates(obj, depth),
        Some("array") => array_candidates(obj, depth),
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
fn object_candidates(obj: &Map<String, Value>, depth: usize) -> Vec<Value> {
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
    let sub = |name: &str| generate(props.get(name).unwrap_or(&any), depth + 1);

    let mut minimal = Map::new();
    for name in props.keys().filter(|k| required.contains(&k.as_str())) {
        match sub(name) {
            Some(v) => minimal.insert(name.clone(), v),
            None => return Vec::new(),
        };
    }
    for name in required.iter().filter(|n| !props.contains_key(**n)) {
        minimal.insert((*name).to_string(), Value::Null);
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

/// `[]`, then one item; exactly `minItems` items when that is asked for.
fn array_candidates(obj: &Map<String, Value>, depth: usize) -> Vec<Value> {
    let min_items = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
    let items = obj
        .get("items")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let item = generate(&items, depth + 1);
    // A generous cap: a schema asking for millions of items is not worth
    // allocating for a dry run.
    let n = usize::try_from(min_items.min(4096)).unwrap_or(4096);
    match (n, item) {
        (0, Some(item)) => vec![Value::Array(Vec::new()), Value::Array(vec![item])],
        (0, None) => vec![Value::Array(Vec::new())],
        (n, Some(item)) => vec![Value::Array(vec![item; n])],
        (_, None) => Vec::new(),
    }
}

/// `""`, or `minLength` characters; then a non-empty string, which a
/// `oneOf` of strings may need to tell its branches apart.
fn string_candidates(obj: &Map<String, Value>) -> Vec<Value> {
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let min = usize::try_from(min.min(4096)).unwrap_or(4096);
    let first = "x".repeat(min);
    let second = "x".repeat(min.max(1));
    let mut out = vec![Value::String(first.clone())];
    if second != first {
        out.push(Value::String(second));
    }
    out
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

    /// Keywords outside today's subset that the generator still honours.
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
    fn keywords_beyond_the_subset(#[case] schema: Value, #[case] expected: Value) {
        assert_eq!(minimal_value(&schema), Some(expected));
    }

    #[rstest]
    #[case::identical_one_of_branches(json!({"type": "object",
        "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "string"}]}}, "required": ["v"]}))]
    #[case::empty_range(json!({"type": "integer", "minimum": 3, "maximum": 2}))]
    fn unsatisfiable_schemas_have_no_value(#[case] schema: Value) {
        assert_eq!(minimal_value(&schema), None);
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
