//! The schema vocabulary keyword family by keyword family: what the check
//! accepts and refuses (strict mode, remote references, the root rule), and
//! what validation reports, at which path.

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

/// An object schema with one property `v` of the given schema.
fn prop(sub: Value) -> Value {
    json!({"type": "object", "properties": {"v": sub}})
}

// --- check_schema: accepted ------------------------------------------

#[rstest]
#[case::minimal(json!({"type": "object"}))]
#[case::all_scalar_types(json!({"type": "object", "properties": {
    "s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
    "b": {"type": "boolean"}, "z": {"type": "null"}, "o": {"type": "object"}, "a": {"type": "array"}}}))]
#[case::required_and_closed(json!({"type": "object",
    "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false}))]
#[case::required_undeclared(json!({"type": "object", "required": ["x"]}))]
#[case::type_array(prop(json!({"type": ["number", "null"]})))]
#[case::enum_of_any_type(prop(json!({"enum": ["a", 1, null, [1], {"k": true}]})))]
#[case::const_object(prop(json!({"const": {"a": [1, 2]}})))]
#[case::string_constraints(prop(json!({"type": "string", "minLength": 1, "maxLength": 80,
    "pattern": "^[a-z]+$", "format": "email"})))]
#[case::number_constraints(prop(json!({"type": "number", "minimum": 0, "maximum": 1,
    "exclusiveMinimum": -1, "exclusiveMaximum": 2, "multipleOf": 0.5})))]
#[case::array_constraints(prop(json!({"type": "array", "items": {"type": "string"},
    "minItems": 1, "maxItems": 5, "uniqueItems": true, "contains": {"const": "x"},
    "minContains": 1, "maxContains": 2, "prefixItems": [{"type": "string"}]})))]
#[case::object_constraints(prop(json!({"type": "object", "minProperties": 1, "maxProperties": 3,
    "patternProperties": {"^x-": {"type": "string"}}, "propertyNames": {"maxLength": 8},
    "additionalProperties": {"type": "integer"}, "dependentRequired": {"a": ["b"]},
    "dependentSchemas": {"a": {"required": ["c"]}}, "unevaluatedProperties": false})))]
#[case::combinators(prop(json!({"anyOf": [{"type": "string"}, {"type": "number"}],
    "allOf": [{}], "oneOf": [{"type": "string"}, {"type": "number"}], "not": {"const": ""}})))]
#[case::conditional(prop(json!({"type": "object", "if": {"properties": {"k": {"const": "a"}}},
    "then": {"required": ["a"]}, "else": {"required": ["b"]}})))]
#[case::defs_and_ref(json!({"type": "object", "$defs": {"n": {"type": "integer", "minimum": 0}},
    "properties": {"v": {"$ref": "#/$defs/n"}}}))]
#[case::definitions_draft07(json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    "definitions": {"n": {"type": "integer"}}, "properties": {"v": {"$ref": "#/definitions/n"}}}))]
#[case::definitions_without_dollar_schema(json!({"type": "object",
    "definitions": {"n": {"type": "integer"}}, "properties": {"v": {"$ref": "#/definitions/n"}}}))]
#[case::draft07_tuple_items(prop(json!({"type": "array", "items": [{"type": "string"}],
    "additionalItems": false})))]
#[case::draft2020_dollar_schema(json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}))]
#[case::recursive_ref(json!({"type": "object", "$defs": {"node": {"type": "object",
    "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "properties": {"root": {"$ref": "#/$defs/node"}}}))]
#[case::ref_to_root(json!({"type": "object", "properties": {"next": {"$ref": "#"}}}))]
#[case::boolean_subschemas(json!({"type": "object", "properties": {"a": true, "b": false}}))]
#[case::annotations_everywhere(json!({"type": "object", "title": "T", "description": "d",
    "$comment": "c", "$id": "https://example.com/s", "examples": [{}],
    "properties": {"a": {"type": "integer", "default": 7, "deprecated": true,
                         "readOnly": true, "writeOnly": false, "examples": [1]}}}))]
#[case::empty_nested_accepts_anything(prop(json!({})))]
#[case::weird_property_names(json!({"type": "object",
    "properties": {"a b": {}, "x-priority": {}, "$ref": {"type": "string"}, "": {}}}))]
#[case::deep_but_allowed(nested_schema(MAX_DEPTH))]
// Claude Code accepts a format it does not know (an annotation), and these:
#[case::unknown_format(prop(json!({"type": "string", "format": "telephone"})))]
#[case::required_by_a_pattern(json!({"type": "object", "patternProperties": {"^b": {"type": "string"}},
    "required": ["b1"], "additionalProperties": false}))]
#[case::equal_bounds(prop(json!({"type": "number", "minimum": 1, "maximum": 1})))]
#[case::integer_enum(prop(json!({"type": "integer", "enum": [1.0, 2]})))]
fn accepts(#[case] schema: Value) {
    assert_eq!(check_schema(&schema, P), vec![]);
}

// --- check_schema: refused -------------------------------------------

#[rstest]
#[case::root_array(json!([]), &[(P, "must be a JSON object with \"type\": \"object\", got an array")])]
#[case::root_string(json!("x"), &[(P, "got a string")])]
#[case::root_true(json!(true), &[(P, "got a boolean")])]
#[case::root_missing_type(json!({"properties": {"a": {}}}), &[(P, "top-level schema needs \"type\": \"object\"")])]
#[case::root_wrong_type(json!({"type": "array", "items": {}}),
    &[("options.schema.type", "must have \"type\": \"object\", not \"array\"")])]
#[case::root_type_list(json!({"type": ["object", "null"]}),
    &[("options.schema.type", "must have \"type\": \"object\", not [\"object\",\"null\"]")])]
#[case::unknown_keyword_nested(json!({"type": "object", "properties": {"x": {"type": "string", "x-priority": 1}}}),
    &[("options.schema.properties.x[\"x-priority\"]", "unknown keyword \"x-priority\"; Claude Code validates schemas in strict mode")])]
#[case::unknown_keyword_root(json!({"type": "object", "strict": true}),
    &[("options.schema.strict", "unknown keyword \"strict\"")])]
#[case::unknown_keyword_in_defs(json!({"type": "object", "$defs": {"a": {"minLenght": 3}}}),
    &[("options.schema.$defs.a.minLenght", "unknown keyword \"minLenght\"")])]
#[case::unknown_keyword_in_any_of(json!({"type": "object", "anyOf": [{}, {"nullable": true}]}),
    &[("options.schema.anyOf[1].nullable", "unknown keyword \"nullable\"")])]
#[case::unknown_keyword_in_items(prop(json!({"type": "array", "items": {"optional": true}})),
    &[("options.schema.properties.v.items.optional", "unknown keyword \"optional\"")])]
#[case::remote_ref(prop(json!({"$ref": "https://example.com/schema.json"})),
    &[("options.schema.properties.v.$ref", "remote or file reference \"https://example.com/schema.json\" is not supported")])]
#[case::file_ref(prop(json!({"$ref": "other.json#/x"})),
    &[("options.schema.properties.v.$ref", "remote or file reference \"other.json#/x\"")])]
#[case::ref_not_string(prop(json!({"$ref": 1})),
    &[("options.schema.properties.v.$ref", "\"$ref\" must be a string, got a number")])]
#[case::unsupported_dollar_schema(json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}),
    &[("options.schema.$schema", "unsupported $schema \"http://json-schema.org/draft-04/schema#\"")])]
#[case::meta_schema_min_length(prop(json!({"type": "string", "minLength": "3"})),
    &[("options.schema.properties.v.minLength", "expected integer, got string")])]
#[case::meta_schema_unknown_type(prop(json!({"type": "strng"})),
    &[("options.schema.properties.v.type", "")])]
#[case::meta_schema_every_problem(json!({"type": "object", "properties": {
        "a": {"type": "string", "maxLength": -1},
        "b": {"type": "array", "minItems": 1.5}}, "required": "a"}),
    &[("options.schema.properties.a.maxLength", ""),
      ("options.schema.properties.b.minItems", ""),
      ("options.schema.required", "expected array, got string")])]
#[case::bad_pattern_at_its_keyword(prop(json!({"type": "string", "pattern": "(unclosed"})),
    &[("options.schema.properties.v.pattern", "")])]
#[case::dangling_local_ref_at_its_keyword(prop(json!({"$ref": "#/$defs/missing"})),
    &[("options.schema.properties.v.$ref", "missing")])]
#[case::dangling_anchor_at_its_keyword(json!({"type": "object", "$defs": {"a": {"$anchor": "here"}},
        "properties": {"ok": {"$ref": "#here"}, "bad": {"items": {"$ref": "#nowhere"}}}}),
    &[("options.schema.properties.bad.items.$ref", "nowhere")])]
// Issue 33 §3: schemas Claude Code refuses because no answer can satisfy them.
#[case::required_excluded(json!({"type": "object", "properties": {"a": {"type": "string"}},
    "required": ["a", "b"], "additionalProperties": false}),
    &[("options.schema.required", "lists \"b\" but \"properties\" does not declare it and \"additionalProperties\" is false")])]
#[case::required_excluded_in_a_property(prop(json!({"type": "object", "properties": {},
    "required": ["x"], "additionalProperties": false})),
    &[("options.schema.properties.v.required", "lists \"x\"")])]
#[case::required_excluded_in_items(prop(json!({"type": "array", "items": {"type": "object",
    "required": ["q"], "additionalProperties": false}})),
    &[("options.schema.properties.v.items.required", "lists \"q\"")])]
#[case::minimum_above_maximum(prop(json!({"type": "number", "minimum": 5, "maximum": 1})),
    &[("options.schema.properties.v", "\"minimum\" 5 and \"maximum\" 1 admit no value")])]
#[case::exclusive_bounds_equal(prop(json!({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1})),
    &[("options.schema.properties.v", "\"exclusiveMinimum\" 1 and \"exclusiveMaximum\" 1")])]
#[case::min_length_above_max_length(prop(json!({"type": "string", "minLength": 5, "maxLength": 2})),
    &[("options.schema.properties.v", "\"minLength\" 5")])]
#[case::min_items_above_max_items(prop(json!({"type": "array", "minItems": 3, "maxItems": 1})),
    &[("options.schema.properties.v", "\"minItems\" 3")])]
#[case::root_min_properties_above_max(json!({"type": "object", "minProperties": 2, "maxProperties": 1}),
    &[("options.schema", "\"minProperties\" 2")])]
#[case::enum_without_the_type(prop(json!({"type": "number", "enum": ["a"]})),
    &[("options.schema.properties.v.enum", "none of the values has the schema's type \"number\"")])]
#[case::const_without_the_type(prop(json!({"type": "number", "const": "a"})),
    &[("options.schema.properties.v.const", "\"a\" does not have the schema's type \"number\"")])]
#[case::empty_enum(prop(json!({"type": "string", "enum": []})),
    &[("options.schema.properties.v.enum", "an empty \"enum\" admits no value")])]
#[case::number_subschema(json!({"type": "object", "properties": {"a": 5}}),
    &[("options.schema.properties.a", "a schema must be a JSON object or a boolean, got a number")])]
#[case::quoted_key_path(json!({"type": "object", "properties": {"a b": {"typ": "string"}}}),
    &[("options.schema.properties[\"a b\"].typ", "unknown keyword \"typ\"")])]
#[case::every_unknown_keyword_at_once(json!({"type": "object", "x-a": 1,
        "properties": {"p": {"x-b": 2, "items": {"x-c": 3}}}}),
    &[("options.schema[\"x-a\"]", "\"x-a\""),
      ("options.schema.properties.p[\"x-b\"]", "\"x-b\""),
      ("options.schema.properties.p.items[\"x-c\"]", "\"x-c\"")])]
fn rejects(#[case] schema: Value, #[case] expected: &[(&str, &str)]) {
    let got = check_schema(&schema, P);
    if expected.first().is_some_and(|(p, _)| p.is_empty()) {
        // Only the message matters (the path is deep).
        assert_eq!(got.len(), 1, "{got:#?}");
        assert!(got[0].message.contains(expected[0].1), "{got:#?}");
        return;
    }
    assert_violations(&got, expected);
}

#[test]
fn unknown_keyword_message_is_exact() {
    let got = check_schema(&prop(json!({"type": "string", "x-priority": "high"})), P);
    assert_eq!(
        got,
        vec![Violation {
            path: "options.schema.properties.v[\"x-priority\"]".into(),
            message: "unknown keyword \"x-priority\"; Claude Code validates schemas in strict \
                      mode, which refuses keywords outside JSON Schema (draft 2020-12 and \
                      draft-07); remove it or move it into \"description\""
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
#[case::closed_without_properties_each(json!({"type": "object", "additionalProperties": false}),
    json!({"k": {"a": 1}, "j": 2}),
    &[("value.k", "unexpected property; allowed: none"), ("value.j", "unexpected property; allowed: none")])]
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
    &[("value", "matches more than one oneOf branch; exactly one must match")])]
#[case::one_of_nested_reason(json!({"type": "object", "oneOf": [
        {"properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"properties": {"b": {}}, "required": ["b"]}]}), json!({"a": 1}),
    &[("value", "branch 0 at value.a: expected string, got number; branch 1: missing required property \"b\"")])]
#[case::one_of_all_three(json!({"oneOf": [{}, {}, {"description": "x"}]}), json!(null),
    &[("value", "matches more than one oneOf branch")])]
#[case::type_and_enum_both_reported(json!({"type": "string", "enum": ["a"]}), json!(1),
    &[("value", "expected string, got number"), ("value", "must be one of \"a\"")])]
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
    // None of these passed check_schema; validate must degrade, not panic:
    // a schema the validator cannot compile is one violation at the prefix.
    let cases = [
        (json!(true), json!(1), 0),
        (json!(false), json!(1), 1),
        (json!(5), json!(1), 1),
        (json!({"type": "bogus", "minLength": 3}), json!("a"), 1),
        (
            json!({"properties": 3, "required": [1, "a"]}),
            json!({"b": 1}),
            1,
        ),
        (json!({"pattern": "(unclosed"}), json!("a"), 1),
        (json!({"$ref": "https://example.com/s.json"}), json!(1), 1),
        (json!({"$ref": "#/nowhere"}), json!(1), 1),
    ];
    for (schema, value, count) in cases {
        let got = validate(&schema, &value, "v");
        assert_eq!(got.len(), count, "{schema} / {value}: {got:?}");
        assert!(got.iter().all(|v| v.path == "v"), "{got:?}");
    }
}

// --- the vocabulary, family by family -----------------------------------
//
// Each case: a schema the check accepts, a value it accepts, a value it
// refuses and the violations (path, message fragment) the refusal lists.

#[rstest]
#[case::type_array(prop(json!({"type": ["number", "null"]})),
    json!({"v": null}), json!({"v": "3"}),
    &[("value.v", "expected null or number, got string")])]
#[case::enum_of_objects(prop(json!({"enum": [{"k": 1}, [1, 2], null]})),
    json!({"v": {"k": 1.0}}), json!({"v": {"k": 2}}),
    &[("value.v", "must be one of {\"k\":1}, [1,2], null")])]
#[case::const_array(prop(json!({"const": [1, "a"]})),
    json!({"v": [1, "a"]}), json!({"v": [1]}),
    &[("value.v", "must equal [1,\"a\"]")])]
#[case::min_length(prop(json!({"type": "string", "minLength": 3})),
    json!({"v": "abc"}), json!({"v": "ab"}),
    &[("value.v", "must be at least 3 characters long, got 2")])]
#[case::max_length_counts_characters(prop(json!({"type": "string", "maxLength": 2})),
    json!({"v": "éé"}), json!({"v": "abc"}),
    &[("value.v", "must be at most 2 characters long, got 3")])]
#[case::pattern(prop(json!({"type": "string", "pattern": "^[a-z]+-\\d+$"})),
    json!({"v": "bug-12"}), json!({"v": "Bug 12"}),
    &[("value.v", "must match the pattern \"^[a-z]+-\\\\d+$\"")])]
#[case::format_email(prop(json!({"type": "string", "format": "email"})),
    json!({"v": "a@example.com"}), json!({"v": "not an email"}),
    &[("value.v", "must be a valid \"email\" (format)")])]
#[case::format_date_time(prop(json!({"type": "string", "format": "date-time"})),
    json!({"v": "2026-12-01T12:00:00Z"}), json!({"v": "yesterday"}),
    &[("value.v", "\"date-time\"")])]
#[case::minimum_maximum(prop(json!({"type": "integer", "minimum": 1, "maximum": 5})),
    json!({"v": 5}), json!({"v": 0}),
    &[("value.v", "must be >= 1, got 0")])]
#[case::maximum(prop(json!({"type": "number", "maximum": 1})),
    json!({"v": 1.0}), json!({"v": 1.5}),
    &[("value.v", "must be <= 1, got 1.5")])]
#[case::exclusive_bounds(prop(json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})),
    json!({"v": 0.5}), json!({"v": 1}),
    &[("value.v", "must be < 1, got 1")])]
#[case::multiple_of(prop(json!({"type": "number", "multipleOf": 0.5})),
    json!({"v": 2.5}), json!({"v": 0.3}),
    &[("value.v", "must be a multiple of 0.5")])]
#[case::min_max_items(prop(json!({"type": "array", "minItems": 1, "maxItems": 2})),
    json!({"v": [1]}), json!({"v": []}),
    &[("value.v", "must have at least 1 items, got 0")])]
#[case::max_items(prop(json!({"type": "array", "maxItems": 2})),
    json!({"v": [1, 2]}), json!({"v": [1, 2, 3]}),
    &[("value.v", "must have at most 2 items, got 3")])]
#[case::unique_items(prop(json!({"type": "array", "uniqueItems": true})),
    json!({"v": [1, 2]}), json!({"v": [1, 1]}),
    &[("value.v", "items must be unique")])]
#[case::contains(prop(json!({"type": "array", "contains": {"const": "x"}})),
    json!({"v": ["a", "x"]}), json!({"v": ["a"]}),
    &[("value.v", "must contain an item matching")])]
#[case::prefix_items(prop(json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})),
    json!({"v": ["a", 1, null]}), json!({"v": ["a", "b"]}),
    &[("value.v[1]", "expected integer, got string")])]
#[case::draft07_tuple_items(prop(json!({"type": "array", "items": [{"type": "string"}], "additionalItems": false})),
    json!({"v": ["a"]}), json!({"v": ["a", 1]}),
    &[("value.v", "\"additionalItems\": false")])]
#[case::items_every_violation(prop(json!({"type": "array", "items": {"type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}}, "required": ["name"]}})),
    json!({"v": [{"name": "a"}]}), json!({"v": [{"name": "a"}, {}, {"name": ""}]}),
    &[("value.v[1]", "missing required property \"name\""),
      ("value.v[2].name", "must be at least 1 characters long")])]
#[case::min_max_properties(prop(json!({"type": "object", "minProperties": 1, "maxProperties": 1})),
    json!({"v": {"a": 1}}), json!({"v": {}}),
    &[("value.v", "must have at least 1 properties, got 0")])]
#[case::additional_properties_schema(prop(json!({"type": "object", "properties": {"a": {}},
        "additionalProperties": {"type": "integer"}})),
    json!({"v": {"a": "x", "b": 1}}), json!({"v": {"a": "x", "b": "y"}}),
    &[("value.v.b", "expected integer, got string")])]
#[case::pattern_properties(prop(json!({"type": "object", "patternProperties": {"^n_": {"type": "number"}}})),
    json!({"v": {"n_a": 1, "s": "x"}}), json!({"v": {"n_a": "1"}}),
    &[("value.v.n_a", "expected number, got string")])]
#[case::property_names(prop(json!({"type": "object", "propertyNames": {"maxLength": 3}})),
    json!({"v": {"abc": 1}}), json!({"v": {"abcd": 1}}),
    &[("value.v", "property name \"abcd\"")])]
#[case::dependent_required(prop(json!({"type": "object", "dependentRequired": {"a": ["b"]}})),
    json!({"v": {"a": 1, "b": 2}}), json!({"v": {"a": 1}}),
    &[("value.v", "missing required property \"b\"")])]
#[case::unevaluated_properties(prop(json!({"type": "object", "allOf": [{"properties": {"a": {}}}],
        "unevaluatedProperties": false})),
    json!({"v": {"a": 1}}), json!({"v": {"a": 1, "z": 2}}),
    &[("value.v.z", "unexpected property")])]
#[case::any_of(prop(json!({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]})),
    json!({"v": 3}), json!({"v": "abc"}),
    &[("value.v", "matches none of the 2 anyOf branches (branch 0: must be at most 2 characters long, got 3; branch 1: expected integer, got string)")])]
#[case::all_of(prop(json!({"allOf": [{"type": "string"}, {"minLength": 2}]})),
    json!({"v": "ab"}), json!({"v": "a"}),
    &[("value.v", "must be at least 2 characters long")])]
#[case::one_of(prop(json!({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 10}]})),
    json!({"v": 10.5}), json!({"v": 11}),
    &[("value.v", "matches more than one oneOf branch")])]
#[case::not(prop(json!({"not": {"type": "null"}})),
    json!({"v": 0}), json!({"v": null}),
    &[("value.v", "must not match the \"not\" schema {\"type\":\"null\"}")])]
#[case::if_then_else(json!({"type": "object",
        "properties": {"kind": {"enum": ["bug", "idea"]}},
        "if": {"properties": {"kind": {"const": "bug"}}},
        "then": {"required": ["line"]}, "else": {"required": ["why"]}}),
    json!({"kind": "bug", "line": 3}), json!({"kind": "idea"}),
    &[("value", "missing required property \"why\"")])]
#[case::ref_defs(json!({"type": "object", "$defs": {"sev": {"enum": ["low", "high"]}},
        "properties": {"items": {"type": "array", "items": {"type": "object",
            "properties": {"severity": {"$ref": "#/$defs/sev"}}}}}}),
    json!({"items": [{"severity": "low"}]}), json!({"items": [{}, {}, {"severity": "mid"}]}),
    &[("value.items[2].severity", "must be one of \"low\", \"high\"")])]
#[case::ref_definitions(json!({"type": "object", "definitions": {"n": {"type": "integer"}},
        "properties": {"v": {"$ref": "#/definitions/n"}}}),
    json!({"v": 1}), json!({"v": 1.5}),
    &[("value.v", "expected integer, got 1.5")])]
#[case::recursive_ref(json!({"type": "object", "$defs": {"node": {"type": "object",
        "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "properties": {"root": {"$ref": "#/$defs/node"}}}),
    json!({"root": {"name": "a", "kids": [{"name": "b", "kids": []}]}}),
    json!({"root": {"kids": [{"kids": [{"name": 1}]}]}}),
    &[("value.root.kids[0].kids[0].name", "expected string, got number")])]
#[case::closed_object_through_ref(json!({"type": "object", "$defs": {"p": {"type": "object",
        "properties": {"a": {}}, "additionalProperties": false}},
        "properties": {"v": {"$ref": "#/$defs/p"}}}),
    json!({"v": {"a": 1}}), json!({"v": {"b": 1}}),
    &[("value.v.b", "unexpected property; allowed: \"a\"")])]
#[case::false_subschema(json!({"type": "object", "properties": {"never": false}}),
    json!({}), json!({"never": 1}),
    &[("value.never", "no value is allowed here")])]
fn keyword_families(
    #[case] schema: Value,
    #[case] good: Value,
    #[case] bad: Value,
    #[case] expected: &[(&str, &str)],
) {
    assert_eq!(
        check_schema(&schema, P),
        vec![],
        "the schema must be accepted"
    );
    assert_eq!(validate(&schema, &good, "value"), vec![], "for {good}");
    assert_violations(&validate(&schema, &bad, "value"), expected);
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
    assert_violations(&got, &[("value", "nesting exceeds 64 levels")]);
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
            "anyOf",
            "$ref",
            "pattern",
            "minItems",
            "not",
            "x-priority",
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
