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

mod sample;
mod scalars;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use dsh_seam::answered::AnsweredChild;
use dsh_seam::{
    AgentRequest, ChildOrigin, ChildOutcome, ChildResult, StartRefused, Subagent, SubagentProvider,
};

pub use sample::{minimal_value, sample_value};

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

#[cfg(test)]
mod tests {
    use super::sample::{MAX_VALUE_NODES, value_nodes};
    use super::*;
    use dsh_protocol::schema;
    use rstest::rstest;
    use serde_json::Value;
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
