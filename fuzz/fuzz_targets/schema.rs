//! The JSON Schema of `agent()` calls (`dsh_protocol::schema`, the
//! `jsonschema` crate behind it): `check_schema` on an arbitrary JSON
//! value, then `validate` of an arbitrary value against it, and the
//! dry-run provider's `minimal_value` of an accepted schema.
//!
//! The input is a stream of JSON texts: the first is the schema, the second
//! the value (`null` when missing).
//!
//! Invariants checked:
//! - neither function panics (both bound the nesting they walk);
//! - every violation's path starts with the prefix given;
//! - `validate` is a function of its inputs: the same value validates the
//!   same way twice (the same violations for an accepted schema, the same
//!   verdict for a refused one), and so does the value printed and parsed
//!   back (what the host does when it forwards a structured answer);
//! - a schema `check_schema` accepts compiles: `validate` never answers
//!   "the schema cannot be used" for it (the check and the `jsonschema`
//!   compiler agree);
//! - `minimal_value` (the `--dry-run` answer) terminates in time for any
//!   accepted schema (`-timeout` catches a blow-up), and its value, when
//!   there is one, validates against the schema printed and parsed back
//!   too.
#![no_main]

use dsh_orchestrator::providers::dry_run::minimal_value;
use dsh_protocol::schema::{check_schema, validate};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut stream = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(schema)) = stream.next() else {
        return;
    };
    let value = match stream.next() {
        Some(Ok(v)) => v,
        _ => Value::Null,
    };

    let problems = check_schema(&schema, "options.schema");
    for p in &problems {
        assert!(p.path.starts_with("options.schema"), "{p:?}");
        assert!(!p.message.is_empty());
    }

    // validate tolerates unchecked schemas too.
    let first = validate(&schema, &value, "value");
    for p in &first {
        assert!(p.path.starts_with("value"), "{p:?}");
    }
    // Exactly the same violations for an accepted schema; for a refused
    // one only the verdict (with two dangling `$ref`s, which of them the
    // jsonschema compiler names varies from call to call).
    let second = validate(&schema, &value, "value");
    if problems.is_empty() {
        assert_eq!(first, second, "validate is not deterministic");
    } else {
        assert_eq!(
            first.is_empty(),
            second.is_empty(),
            "validate's verdict is not deterministic"
        );
    }
    let reparsed: Value = serde_json::from_str(&value.to_string()).expect("printed JSON parses");
    assert_eq!(
        first.is_empty(),
        validate(&schema, &reparsed, "value").is_empty(),
        "printing and parsing the value changed its verdict: {value} vs {reparsed}"
    );

    if problems.is_empty() {
        for p in &first {
            assert!(
                !p.message.starts_with("the schema cannot be used"),
                "check_schema accepted {schema}, which does not compile: {p}"
            );
        }
        if let Some(v) = minimal_value(&schema) {
            let printed: Value =
                serde_json::from_str(&schema.to_string()).expect("printed JSON parses");
            assert!(
                validate(&printed, &v, "value").is_empty(),
                "the dry-run value {v} fails the schema printed and read back: {printed}"
            );
        }
    }
});
