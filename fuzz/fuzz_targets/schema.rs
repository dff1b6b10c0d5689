//! The JSON Schema subset (`dsh_protocol::schema`): `check_schema` on an
//! arbitrary JSON value, then `validate` of an arbitrary value against it,
//! and the dry-run provider's `minimal_value` of a checked schema.
//!
//! The input is a stream of JSON texts: the first is the schema, the second
//! the value (`null` when missing).
//!
//! Invariants checked:
//! - neither function panics (they bound their recursion at 64 levels);
//! - every violation's path starts with the prefix given;
//! - `validate` is a function of its inputs: the same value validates the
//!   same way twice, and so does the value printed and parsed back (what
//!   the host does when it forwards a structured answer);
//! - a schema inside the subset without `oneOf` (the only keyword of the
//!   subset that can make a schema unsatisfiable) always has a
//!   `minimal_value`: `--dry-run` answers every call the worker admits;
//!   and finding it terminates in time for any schema inside the subset.
#![no_main]

use dsh_orchestrator::providers::dry_run::minimal_value;
use dsh_protocol::schema::{check_schema, validate};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn mentions_one_of(v: &Value) -> bool {
    // Iterative: the value may be deep.
    let mut todo = vec![v];
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(m) => {
                if m.contains_key("oneOf") {
                    return true;
                }
                todo.extend(m.values());
            }
            Value::Array(a) => todo.extend(a.iter()),
            _ => {}
        }
    }
    false
}

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
    assert_eq!(
        first,
        validate(&schema, &value, "value"),
        "validate is not deterministic"
    );
    let reparsed: Value = serde_json::from_str(&value.to_string()).expect("printed JSON parses");
    assert_eq!(
        first.is_empty(),
        validate(&schema, &reparsed, "value").is_empty(),
        "printing and parsing the value changed its verdict: {value} vs {reparsed}"
    );

    if problems.is_empty() {
        // (A value it returns passed `validate` inside `minimal_value`
        // already; what can fail is finding none.)
        if minimal_value(&schema).is_none() {
            assert!(
                mentions_one_of(&schema),
                "a schema inside the subset without oneOf has no minimal value: {schema}"
            );
        }
    }
});
