//! The subset, keyword by keyword: what the check accepts and refuses, and
//! what validation reports.

use super::*;
use rstest::rstest;
use serde_json::Map;
use serde_json::json;

const P: &str = "options.schema";

/// Asserts the exact list of violation paths, and that each message
/// contains the paired fragment.
fn assert_violations(got: &[Violation], expected: &[(&str, &str)]) {
    let got_pairs: Vec<(&str, &str)> = got
        .iter()
        .map(|v| (v.path.as_str(), v.message.as_str()))
        .collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "wrong number of violations: {got_pairs:#?}"
    );
    for (v, (path, fragment)) in got.iter().zip(expected) {
        assert_eq!(v.path, *path, "in {got_pairs:#?}");
        assert!(
            v.message.contains(fragment),
            "message {:?} lacks {fragment:?}",
            v.message
        );
    }
}

// --- check_schema: accepted ------------------------------------------

#[rstest]
#[case::minimal(json!({"type": "object"}))]
#[case::all_scalar_types(json!({"type": "object", "properties": {
    "s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
    "b": {"type": "boolean"}, "z": {"type": "null"}}}))]
#[case::required_and_closed(json!({"type": "object",
    "properties": {"a": {"type": "string"}, "b": {}},
    "required": ["a", "b"], "additionalProperties": false}))]
#[case::additional_true(json!({"type": "object", "additionalProperties": true}))]
#[case::array_items(json!({"type": "object", "properties": {
    "xs": {"type": "array", "items": {"type": "object",
        "properties": {"name": {"type": "string"}}, "required": ["name"]}}}}))]
#[case::array_without_items(json!({"type": "object", "properties": {"xs": {"type": "array"}}}))]
#[case::enum_strings(json!({"type": "object", "properties": {
    "level": {"type": "string", "enum": ["low", "high"]}}}))]
#[case::enum_integers_incl_float_form(json!({"type": "object", "properties": {
    "n": {"type": "integer", "enum": [1, 2.0, -3]}}}))]
#[case::enum_number_accepts_integers(json!({"type": "object", "properties": {
    "n": {"type": "number", "enum": [1, 2.5]}}}))]
#[case::enum_untyped_mixed(json!({"type": "object", "properties": {
    "x": {"enum": [1, "a", null, true]}}}))]
#[case::const_typed(json!({"type": "object", "properties": {
    "kind": {"type": "string", "const": "issue"}}}))]
#[case::const_in_enum(json!({"type": "object", "properties": {
    "k": {"type": "string", "enum": ["a", "b"], "const": "a"}}}))]
#[case::const_null_untyped(json!({"type": "object", "properties": {"k": {"const": null}}}))]
#[case::one_of_scalars(json!({"type": "object", "properties": {
    "v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}))]
#[case::one_of_branches_inherit_object(json!({"type": "object", "oneOf": [
    {"properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}))]
#[case::one_of_integer_under_number(json!({"type": "object", "properties": {
    "v": {"type": "number", "oneOf": [{"type": "integer", "enum": [1]}, {"const": 2.5}]}}}))]
#[case::annotations_everywhere(json!({"type": "object", "title": "T", "description": "d",
    "default": {}, "examples": [{}], "properties": {"a": {"type": "string",
    "description": 5, "title": ["free-form"], "default": 1, "examples": "x"}}}))]
#[case::empty_nested_accepts_anything(json!({"type": "object", "properties": {"any": {}}}))]
#[case::annotation_only_nested(json!({"type": "object", "properties": {
    "any": {"description": "whatever"}}}))]
#[case::weird_property_names(json!({"type": "object",
    "properties": {"a b": {}, "": {}, "é": {}, "type": {"type": "string"}},
    "required": ["a b", "", "é", "type"]}))]
#[case::deep_but_allowed(nested_schema(MAX_DEPTH))]
fn accepts(#[case] schema: Value) {
    assert_eq!(check_schema(&schema, P), vec![]);
}

// --- check_schema: rejected ------------------------------------------

#[rstest]
// top level
#[case::root_array(json!([]), &[(P, "must be a JSON object with \"type\": \"object\", got an array")])]
#[case::root_string(json!("x"), &[(P, "got a string")])]
#[case::root_true(json!(true), &[(P, "got a boolean")])]
#[case::root_missing_type(json!({"properties": {"a": {}}}), &[(P, "top-level schema needs \"type\": \"object\"")])]
#[case::root_wrong_type(json!({"type": "array", "items": {}}),
    &[("options.schema.type", "must have \"type\": \"object\", not \"array\"")])]
#[case::root_type_list(json!({"type": ["object", "null"]}),
    &[("options.schema.type", "must be a single string; for alternatives use oneOf")])]
// unsupported keywords
#[case::min_length(json!({"type": "object", "properties": {"s": {"type": "string", "minLength": 1}}}),
    &[("options.schema.properties.s.minLength", "unsupported keyword \"minLength\"; supported: type, properties")])]
#[case::pattern(json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "x"}}}),
    &[("options.schema.properties.s.pattern", "unsupported keyword \"pattern\"")])]
#[case::format(json!({"type": "object", "properties": {"s": {"type": "string", "format": "uri"}}}),
    &[("options.schema.properties.s.format", "unsupported keyword \"format\"")])]
#[case::any_of(json!({"type": "object", "anyOf": [{}, {}]}),
    &[("options.schema.anyOf", "unsupported keyword \"anyOf\"")])]
#[case::dollar_schema_and_ref(json!({"$schema": "x", "type": "object", "properties": {"a": {"$ref": "#/x"}}}),
    &[("options.schema.$schema", "unsupported keyword \"$schema\""),
      ("options.schema.properties.a.$ref", "unsupported keyword \"$ref\"")])]
#[case::weird_keyword_name(json!({"type": "object", "x-y": 1}),
    &[("options.schema[\"x-y\"]", "unsupported keyword \"x-y\"")])]
#[case::min_items_on_array(json!({"type": "object", "properties": {"xs": {"type": "array", "minItems": 1}}}),
    &[("options.schema.properties.xs.minItems", "unsupported keyword")])]
// type
#[case::type_list(json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}),
    &[("options.schema.properties.a.type", "\"type\" must be a single string; for alternatives use oneOf")])]
#[case::unknown_type(json!({"type": "object", "properties": {"a": {"type": "strng"}}}),
    &[("options.schema.properties.a.type", "unknown type \"strng\"; use one of object, array")])]
#[case::numeric_type(json!({"type": "object", "properties": {"a": {"type": 5}}}),
    &[("options.schema.properties.a.type", "must be a string (one of object")])]
// object keywords
#[case::properties_not_object(json!({"type": "object", "properties": []}),
    &[("options.schema.properties", "\"properties\" must be an object")])]
#[case::properties_on_string(json!({"type": "object", "properties": {"a": {"type": "string", "properties": {}}}}),
    &[("options.schema.properties.a.properties", "\"properties\" applies only to objects, but \"type\" is \"string\"")])]
#[case::properties_untyped(json!({"type": "object", "properties": {"a": {"properties": {"b": {}}}}}),
    &[("options.schema.properties.a.properties", "applies only to objects; add \"type\": \"object\"")])]
#[case::required_not_declared(json!({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]}),
    &[("options.schema.required[1]", "required property \"b\" is not in \"properties\"")])]
#[case::required_closed_object(json!({"type": "object", "additionalProperties": false, "required": ["x"]}),
    &[("options.schema.required[0]", "required property \"x\" is not in \"properties\"")])]
#[case::required_duplicate(json!({"type": "object", "properties": {"a": {}}, "required": ["a", "a"]}),
    &[("options.schema.required[1]", "\"a\" is listed twice")])]
#[case::required_non_string(json!({"type": "object", "properties": {"a": {}}, "required": [1]}),
    &[("options.schema.required[0]", "must be property names (strings), got a number")])]
#[case::required_not_array(json!({"type": "object", "required": "a"}),
    &[("options.schema.required", "must be an array of property names")])]
#[case::required_on_array(json!({"type": "object", "properties": {"xs": {"type": "array", "required": []}}}),
    &[("options.schema.properties.xs.required", "applies only to objects, but \"type\" is \"array\"")])]
#[case::additional_schema(json!({"type": "object", "additionalProperties": {"type": "string"}}),
    &[("options.schema.additionalProperties", "must be true or false; schemas are not supported")])]
#[case::additional_on_number(json!({"type": "object", "properties": {"n": {"type": "number", "additionalProperties": false}}}),
    &[("options.schema.properties.n.additionalProperties", "applies only to objects")])]
// items
#[case::items_untyped(json!({"type": "object", "properties": {"xs": {"items": {}}}}),
    &[("options.schema.properties.xs.items", "\"items\" applies only to arrays; add \"type\": \"array\"")])]
#[case::items_on_object(json!({"type": "object", "items": {}}),
    &[("options.schema.items", "applies only to arrays, but \"type\" is \"object\"")])]
#[case::items_tuple(json!({"type": "object", "properties": {"xs": {"type": "array", "items": [{}, {}]}}}),
    &[("options.schema.properties.xs.items", "tuple form")])]
#[case::items_invalid_inner(json!({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string", "maxLength": 3}}}}),
    &[("options.schema.properties.xs.items.maxLength", "unsupported keyword")])]
// enum
#[case::enum_empty(json!({"type": "object", "properties": {"e": {"enum": []}}}),
    &[("options.schema.properties.e.enum", "\"enum\" is empty, so no value can match")])]
#[case::enum_not_array(json!({"type": "object", "properties": {"e": {"enum": "a"}}}),
    &[("options.schema.properties.e.enum", "must be a non-empty array of scalars")])]
#[case::enum_non_scalar(json!({"type": "object", "properties": {"e": {"enum": ["a", ["b"], {"c": 1}]}}}),
    &[("options.schema.properties.e.enum[1]", "enum value must be a scalar (string, number, boolean or null), got an array"),
      ("options.schema.properties.e.enum[2]", "got an object")])]
#[case::enum_wrong_type(json!({"type": "object", "properties": {"e": {"type": "string", "enum": ["a", 1, null]}}}),
    &[("options.schema.properties.e.enum[1]", "enum value 1 does not match \"type\": \"string\""),
      ("options.schema.properties.e.enum[2]", "enum value null does not match")])]
#[case::enum_fraction_for_integer(json!({"type": "object", "properties": {"e": {"type": "integer", "enum": [1, 1.5]}}}),
    &[("options.schema.properties.e.enum[1]", "1.5 does not match \"type\": \"integer\"")])]
#[case::enum_on_object(json!({"type": "object", "enum": ["a"]}),
    &[("options.schema.enum", "\"enum\" needs a scalar type (string, number, integer, boolean or null), but \"type\" is \"object\"")])]
// const
#[case::const_wrong_type(json!({"type": "object", "properties": {"c": {"type": "boolean", "const": "true"}}}),
    &[("options.schema.properties.c.const", "const value \"true\" does not match \"type\": \"boolean\"")])]
#[case::const_non_scalar(json!({"type": "object", "properties": {"c": {"const": [1]}}}),
    &[("options.schema.properties.c.const", "const value must be a scalar")])]
#[case::const_on_array(json!({"type": "object", "properties": {"c": {"type": "array", "const": 1}}}),
    &[("options.schema.properties.c.const", "\"const\" needs a scalar type")])]
#[case::const_not_in_enum(json!({"type": "object", "properties": {"c": {"enum": ["a", "b"], "const": "z"}}}),
    &[("options.schema.properties.c.const", "not among the \"enum\" values")])]
// oneOf
#[case::one_of_single(json!({"type": "object", "properties": {"v": {"oneOf": [{}]}}}),
    &[("options.schema.properties.v.oneOf", "needs two or more branches, got 1")])]
#[case::one_of_empty(json!({"type": "object", "properties": {"v": {"oneOf": []}}}),
    &[("options.schema.properties.v.oneOf", "got 0")])]
#[case::one_of_not_array(json!({"type": "object", "properties": {"v": {"oneOf": {}}}}),
    &[("options.schema.properties.v.oneOf", "must be an array of two or more schemas")])]
#[case::one_of_bad_branch(json!({"type": "object", "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "number", "minimum": 0}]}}}),
    &[("options.schema.properties.v.oneOf[1].minimum", "unsupported keyword \"minimum\"")])]
#[case::one_of_branch_conflict(json!({"type": "object", "oneOf": [{"type": "string"}, {"properties": {}}]}),
    &[("options.schema.oneOf[0].type", "type \"string\" conflicts with \"type\": \"object\" of the enclosing schema")])]
#[case::one_of_branch_enum_inherits_type(json!({"type": "object", "properties": {"v": {"type": "string", "oneOf": [{"enum": ["a"]}, {"enum": [1]}]}}}),
    &[("options.schema.properties.v.oneOf[1].enum[0]", "enum value 1 does not match \"type\": \"string\"")])]
// node shape
#[case::boolean_subschema(json!({"type": "object", "properties": {"a": true}}),
    &[("options.schema.properties.a", "boolean schemas are not supported; use {} to accept any value")])]
#[case::number_subschema(json!({"type": "object", "properties": {"a": 5}}),
    &[("options.schema.properties.a", "a schema must be a JSON object, got a number")])]
// paths
#[case::quoted_key_path(json!({"type": "object", "properties": {"a b": {"type": "strin"}}}),
    &[("options.schema.properties[\"a b\"].type", "unknown type")])]
#[case::quoted_unicode_and_quote(json!({"type": "object", "properties": {"é\"": {"type": 1}, "1st": {"type": 1}}}),
    &[("options.schema.properties[\"é\\\"\"].type", "must be a string"),
      ("options.schema.properties[\"1st\"].type", "must be a string")])]
#[case::dollar_and_underscore_plain(json!({"type": "object", "properties": {"$_a1": {"type": 1}}}),
    &[("options.schema.properties.$_a1.type", "must be a string")])]
// every violation at once, in document order
#[case::many(json!({"type": "object", "title": "t", "properties": {
        "a": {"type": "string", "minLength": 2, "enum": [1]},
        "b": {"type": ["x"], "items": {}},
        "c": {"type": "array", "items": {"type": "object", "required": ["z"]}}},
    "required": ["a", "q"], "additionalProperties": {}, "not": {}}),
    &[("options.schema.properties.a.minLength", "unsupported keyword"),
      ("options.schema.properties.a.enum[0]", "does not match"),
      ("options.schema.properties.b.type", "single string"),
      ("options.schema.properties.c.items.required[0]", "\"z\" is not in \"properties\""),
      ("options.schema.required[1]", "\"q\""),
      ("options.schema.additionalProperties", "true or false"),
      ("options.schema.not", "unsupported keyword \"not\"")])]
fn rejects(#[case] schema: Value, #[case] expected: &[(&str, &str)]) {
    assert_violations(&check_schema(&schema, P), expected);
}

#[test]
fn unsupported_keyword_message_is_exact() {
    let got = check_schema(
        &json!({"type": "object", "properties": {"x": {"type": "string", "minLength": 1}}}),
        P,
    );
    assert_eq!(
        got,
        vec![Violation {
            path: "options.schema.properties.x.minLength".into(),
            message: "unsupported keyword \"minLength\"; supported: type, properties, required, \
                      additionalProperties, items, enum, const, oneOf (annotations: description, \
                      title, default, examples)"
                .into(),
        }]
    );
}

// --- paths and display ------------------------------------------------

#[rstest]
#[case::plain("v", "name", "v.name")]
#[case::empty_prefix("", "name", "name")]
#[case::space("v", "a b", "v[\"a b\"]")]
#[case::empty_key("v", "", "v[\"\"]")]
#[case::dot("v", "a.b", "v[\"a.b\"]")]
#[case::leading_digit("v", "1a", "v[\"1a\"]")]
#[case::non_ascii("v", "ключ", "v[\"ключ\"]")]
#[case::control("v", "a\nb", "v[\"a\\nb\"]")]
#[case::dollar("v", "$x", "v.$x")]
#[case::empty_prefix_quoted("", "a-b", "[\"a-b\"]")]
fn member_paths(#[case] prefix: &str, #[case] key: &str, #[case] expected: &str) {
    assert_eq!(member(prefix, key), expected);
}

#[rstest]
#[case::with_path(
    "value.items[3]",
    "expected string, got number",
    "value.items[3]: expected string, got number"
)]
#[case::empty_path("", "no value is allowed here", "no value is allowed here")]
fn display(#[case] path: &str, #[case] message: &str, #[case] expected: &str) {
    let v = Violation {
        path: path.into(),
        message: message.into(),
    };
    assert_eq!(v.to_string(), expected);
}

#[test]
fn index_paths() {
    assert_eq!(index("value", 3), "value[3]");
    assert_eq!(index("", 0), "[0]");
}

// --- validate -----------------------------------------------------------

fn person() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "items": {"type": "array", "items": {"type": "object",
            "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
        "required": ["name", "age"], "additionalProperties": false})
}

#[rstest]
#[case::full(person(), json!({"name": "a", "age": 3, "tags": ["x"], "items": [{"name": "n"}]}))]
#[case::integer_as_float(person(), json!({"name": "a", "age": 3.0}))]
#[case::negative_integer(json!({"type": "integer"}), json!(-5))]
#[case::u64_max(json!({"type": "integer"}), json!(u64::MAX))]
#[case::number_fraction(json!({"type": "number"}), json!(1.5))]
#[case::number_integer(json!({"type": "number"}), json!(7))]
#[case::null(json!({"type": "null"}), json!(null))]
#[case::boolean(json!({"type": "boolean"}), json!(false))]
#[case::open_object_extra_keys(json!({"type": "object", "properties": {"a": {}}}), json!({"a": 1, "b": 2}))]
#[case::empty_schema_anything(json!({"type": "object", "properties": {"x": {}}}), json!({"x": [{"deep": [null]}]}))]
#[case::annotation_only_anything(json!({"description": "d"}), json!(3))]
#[case::enum_int_float_equal(json!({"enum": [1, "a"]}), json!(1.0))]
#[case::enum_float_int_equal(json!({"type": "number", "enum": [2.0]}), json!(2))]
#[case::const_match(json!({"const": "x"}), json!("x"))]
#[case::const_null(json!({"const": null}), json!(null))]
#[case::one_of_exactly_one(json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}), json!(3))]
#[case::one_of_objects(json!({"type": "object", "oneOf": [
        {"properties": {"a": {}}, "required": ["a"]},
        {"properties": {"b": {}}, "required": ["b"]}]}), json!({"b": 1}))]
#[case::optional_missing(person(), json!({"name": "a", "age": 1}))]
#[case::items_empty_array(json!({"type": "array", "items": {"type": "string"}}), json!([]))]
fn valid(#[case] schema: Value, #[case] value: Value) {
    assert_eq!(validate(&schema, &value, "value"), vec![]);
}

#[rstest]
#[case::not_object(person(), json!([]), &[("value", "expected object, got array")])]
#[case::string_for_integer(person(), json!({"name": "a", "age": "3"}), &[("value.age", "expected integer, got string")])]
#[case::fraction_for_integer(person(), json!({"name": "a", "age": 1.5}), &[("value.age", "expected integer, got 1.5")])]
#[case::string_for_number(json!({"type": "number"}), json!("1"), &[("value", "expected number, got string")])]
#[case::null_for_string(json!({"type": "string"}), json!(null), &[("value", "expected string, got null")])]
#[case::number_for_boolean(json!({"type": "boolean"}), json!(0), &[("value", "expected boolean, got number")])]
#[case::bool_for_null(json!({"type": "null"}), json!(true), &[("value", "expected null, got boolean")])]
#[case::object_for_array(json!({"type": "array"}), json!({}), &[("value", "expected array, got object")])]
#[case::missing_each_required(person(), json!({}),
    &[("value", "missing required property \"name\""), ("value", "missing required property \"age\"")])]
#[case::each_unexpected(person(), json!({"name": "a", "age": 1, "x": 1, "a b": 2}),
    &[("value.x", "unexpected property; allowed: \"name\", \"age\", \"tags\", \"items\""),
      ("value[\"a b\"]", "unexpected property")])]
#[case::closed_without_properties(json!({"type": "object", "additionalProperties": false}), json!({"k": 1}),
    &[("value.k", "unexpected property; allowed: none")])]
#[case::nested_item_path(person(), json!({"name": "a", "age": 1,
        "items": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": 4}]}),
    &[("value.items[3].name", "expected string, got number")])]
#[case::nested_missing(person(), json!({"name": "a", "age": 1, "items": [{}]}),
    &[("value.items[0]", "missing required property \"name\"")])]
#[case::array_items(person(), json!({"name": "a", "age": 1, "tags": ["x", 1, "y", null]}),
    &[("value.tags[1]", "expected string"), ("value.tags[3]", "expected string, got null")])]
#[case::enum_miss(json!({"type": "string", "enum": ["low", "high"]}), json!("mid"),
    &[("value", "must be one of \"low\", \"high\"")])]
#[case::enum_type_strict(json!({"enum": [1]}), json!("1"), &[("value", "must be one of 1")])]
#[case::enum_long_list_elided(json!({"enum": [0,1,2,3,4,5,6,7,8,9,10,11]}), json!(12),
    &[("value", "must be one of 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, …")])]
#[case::const_miss(json!({"const": "issue"}), json!("pr"), &[("value", "must equal \"issue\"")])]
#[case::const_true_not_one(json!({"const": true}), json!(1), &[("value", "must equal true")])]
#[case::one_of_none(json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}), json!(1.5),
    &[("value", "matches none of the 2 oneOf branches (branch 0: expected string, got number; branch 1: expected integer, got 1.5)")])]
#[case::one_of_two(json!({"oneOf": [{"type": "number"}, {"type": "integer"}]}), json!(2),
    &[("value", "matches 2 oneOf branches (0, 1); exactly one must match")])]
#[case::one_of_nested_reason(json!({"type": "object", "oneOf": [
        {"properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"properties": {"b": {}}, "required": ["b"]}]}), json!({"a": 1}),
    &[("value", "branch 0 at value.a: expected string, got number; branch 1: missing required property \"b\"")])]
#[case::one_of_all_three(json!({"oneOf": [{}, {}, {"description": "x"}]}), json!(null),
    &[("value", "matches 3 oneOf branches (0, 1, 2)")])]
#[case::type_mismatch_stops_node(json!({"type": "string", "enum": ["a"]}), json!(1),
    &[("value", "expected string, got number")])]
fn invalid(#[case] schema: Value, #[case] value: Value, #[case] expected: &[(&str, &str)]) {
    assert_violations(&validate(&schema, &value, "value"), expected);
}

#[test]
fn validate_empty_prefix() {
    let got = validate(&person(), &json!({"name": 1, "age": 1}), "");
    assert_violations(&got, &[("name", "expected string")]);
}

#[test]
fn validate_tolerates_unchecked_schemas() {
    // None of these passed check_schema; validate must degrade, not panic.
    let cases = [
        (json!(true), json!(1), 0),
        (json!(false), json!(1), 1),
        (json!(5), json!(1), 1),
        (json!({"type": ["string"]}), json!(1), 0),
        (json!({"type": "bogus", "minLength": 3}), json!("a"), 0),
        (
            json!({"type": "array", "items": [{}, {"type": "string"}]}),
            json!([1]),
            1,
        ),
        (
            json!({"properties": 3, "required": [1, "a"], "additionalProperties": false}),
            json!({"b": 1}),
            2,
        ),
        (json!({"oneOf": []}), json!(1), 1),
        (
            json!({"oneOf": "x", "enum": "y", "const": {"a": [1]}}),
            json!({"a": [1.0]}),
            0,
        ),
    ];
    for (schema, value, count) in cases {
        assert_eq!(
            validate(&schema, &value, "v").len(),
            count,
            "{schema} / {value}"
        );
    }
}

// --- equality -------------------------------------------------------

#[rstest]
#[case::int_float(json!(1), json!(1.0), true)]
#[case::neg_int_float(json!(-3), json!(-3.0), true)]
#[case::u64_i64(json!(5u64), json!(5i64), true)]
#[case::u64_max_exact(json!(u64::MAX), json!(u64::MAX - 1), false)]
#[case::beyond_f64_precision(json!(9_007_199_254_740_993u64), json!(9_007_199_254_740_992.0), false)]
#[case::fraction(json!(1), json!(1.5), false)]
#[case::floats(json!(0.5), json!(0.5), true)]
#[case::huge_float_vs_int(json!(1e300), json!(i64::MAX), false)]
#[case::kinds_differ(json!(0), json!(false), false)]
#[case::string_number(json!("1"), json!(1), false)]
#[case::arrays(json!([1, [2.0]]), json!([1.0, [2]]), true)]
#[case::array_len(json!([1]), json!([1, 1]), false)]
#[case::objects_order_free(json!({"a": 1, "b": 2}), json!({"b": 2.0, "a": 1}), true)]
#[case::objects_missing_key(json!({"a": 1}), json!({"b": 1}), false)]
#[case::object_vs_array(json!({}), json!([]), false)]
fn equality(#[case] a: Value, #[case] b: Value, #[case] equal: bool) {
    assert_eq!(json_eq(&a, &b), equal);
    assert_eq!(json_eq(&b, &a), equal);
}

// --- deep nesting -----------------------------------------------------

/// An object built by moving values in: `json!` would serialize an
/// interpolated `Value` recursively and overflow on deep inputs.
fn obj<const N: usize>(members: [(&str, Value); N]) -> Value {
    Value::Object(
        members
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// `levels` schema nodes, each the single property `a` of the previous.
fn nested_schema(levels: usize) -> Value {
    let mut node = json!({"type": "object"});
    for _ in 1..levels {
        node = obj([
            ("type", json!("object")),
            ("properties", obj([("a", node)])),
        ]);
    }
    node
}

fn nested_value(levels: usize) -> Value {
    let mut v = json!({});
    for _ in 1..levels {
        v = obj([("a", v)]);
    }
    v
}

/// serde_json's `Drop` is recursive; deep test inputs are leaked rather
/// than dropped, since that recursion is not what these tests exercise.
fn forget_deep(v: Value) {
    std::mem::forget(v);
}

fn deep_path(prefix: &str, step: &str, steps: usize) -> String {
    format!("{prefix}{}", step.repeat(steps))
}

#[rstest]
#[case::one_over(MAX_DEPTH + 1)]
#[case::far_over(1_000)]
fn check_schema_stops_at_depth(#[case] levels: usize) {
    let schema = nested_schema(levels);
    let got = check_schema(&schema, P);
    forget_deep(schema);
    let path = deep_path(P, ".properties.a", MAX_DEPTH);
    assert_violations(&got, &[(&path, "schema nesting exceeds 64 levels")]);
}

#[test]
fn check_schema_depth_counts_items_and_one_of() {
    let mut node = json!({});
    for i in 0..1_000 {
        node = if i % 2 == 0 {
            obj([("type", json!("array")), ("items", node)])
        } else {
            obj([("oneOf", Value::Array(vec![node, json!({"type": "null"})]))])
        };
    }
    let root = obj([
        ("type", json!("object")),
        ("properties", obj([("x", node)])),
    ]);
    let got = check_schema(&root, P);
    forget_deep(root);
    // Both branches of the oneOf that sits at level 64 are one too deep.
    assert_eq!(got.len(), 2, "{got:?}");
    for (v, last) in got.iter().zip(["oneOf[0]", "oneOf[1]"]) {
        assert!(v.message.contains("nesting exceeds"), "{v}");
        assert!(v.path.ends_with(last), "{v}");
    }
}

#[test]
fn validate_deep_value_against_checked_schema() {
    let schema = json!({"type": "object", "properties": {"a": {}}});
    let deep = nested_value(1_000);
    assert_eq!(validate(&schema, &deep, "value"), vec![]);
    forget_deep(deep);
    let within = nested_schema(MAX_DEPTH);
    assert_eq!(validate(&within, &nested_value(MAX_DEPTH), "value"), vec![]);
}

#[test]
fn validate_stops_at_depth_on_unchecked_schema() {
    let (schema, value) = (nested_schema(1_000), nested_value(1_000));
    let got = validate(&schema, &value, "value");
    forget_deep(schema);
    forget_deep(value);
    let path = deep_path("value", ".a", MAX_DEPTH);
    assert_violations(&got, &[(&path, "nesting exceeds 64 levels")]);
}

#[test]
fn validate_deep_one_of_terminates() {
    let mut node = json!({"type": "string"});
    for _ in 0..1_000 {
        node = obj([("oneOf", Value::Array(vec![node, json!({"type": "null"})]))]);
    }
    let got = validate(&node, &json!(1), "value");
    forget_deep(node);
    assert_eq!(got.len(), 1);
    assert!(got[0].message.contains("nesting exceeds"), "{}", got[0]);
}

#[test]
fn deep_const_equality_is_iterative() {
    let a = nested_value(5_000);
    let b = nested_value(5_000);
    assert!(json_eq(&a, &b));
    forget_deep(a);
    forget_deep(b);
}

// --- robustness: arbitrary inputs never panic --------------------------

/// Small deterministic generator biased toward schema-like shapes.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }

    fn value(&mut self, depth: usize) -> Value {
        const KEYS: &[&str] = &[
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "enum",
            "const",
            "oneOf",
            "description",
            "a",
            "b",
            "minLength",
            "a b",
        ];
        const TYPES: &[&str] = &[
            "object", "array", "string", "number", "integer", "boolean", "null", "x",
        ];
        let choice = if depth == 0 {
            self.next() % 6
        } else {
            self.next() % 9
        };
        match choice {
            0 => Value::Null,
            1 => Value::Bool(self.next().is_multiple_of(2)),
            2 => json!((self.next() % 7) as i64 - 3),
            3 => json!((self.next() % 9) as f64 / 2.0),
            4 => json!(self.pick(TYPES)),
            5 => json!(self.pick(KEYS)),
            6 => Value::Array(
                (0..self.next() % 4)
                    .map(|_| self.value(depth - 1))
                    .collect(),
            ),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.next() % 5 {
                    let key = self.pick(KEYS).to_owned();
                    let v = if key == "type" {
                        json!(self.pick(TYPES))
                    } else {
                        self.value(depth - 1)
                    };
                    m.insert(key, v);
                }
                Value::Object(m)
            }
        }
    }
}

#[test]
fn arbitrary_inputs_never_panic() {
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let values: Vec<Value> = (0..300).map(|_| g.value(5)).collect();
    let mut accepted = 0;
    for schema in &values {
        let problems = check_schema(schema, P);
        if problems.is_empty() {
            accepted += 1;
        }
        for v in &problems {
            assert!(!v.message.is_empty());
            assert!(v.path.starts_with(P));
        }
        for value in values.iter().take(60) {
            let _ = validate(schema, value, "value");
        }
    }
    // Sanity: the generator exercises both outcomes.
    assert!(accepted < values.len());
}
