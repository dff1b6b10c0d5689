//! End-to-end tests of `dsh workflow run --dry-run`: every `agent()` call
//! is answered at once without any provider — placeholder text for text
//! calls, the smallest valid value for schema calls — and the children's
//! events carry `"dryRun": true`.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_event_guarantees, dsh_in, events_of, fixture, run_plain, run_ts};
use dsh_protocol::schema;
use rstest::rstest;
use serde_json::{Value, json};

#[test]
fn a_dry_run_answers_text_and_schema_calls_and_marks_the_events() {
    let script = r#"
const FINDINGS = {
  type: "object",
  properties: {
    file: { type: "string" },
    findings: {
      type: "array",
      items: {
        type: "object",
        properties: {
          line: { type: "integer" },
          severity: { type: "string", enum: ["low", "medium", "high"] },
        },
        required: ["line", "severity"],
        additionalProperties: false,
      },
    },
    verdict: { oneOf: [{ type: "string", const: "approve" }, { type: "null" }] },
  },
  required: ["file", "findings", "verdict"],
};
phase("Review");
const text = await agent("Review parser.rs closely", { label: "review parser.rs" });
const defaultLabel = await agent("Summarize everything");
const [a, b] = await parallel([
  () => agent("structured a", { label: "a", schema: FINDINGS }),
  () => agent("structured b", { label: "b", schema: FINDINGS, model: "big" }),
]);
log("done");
return { text, defaultLabel, a, b, schema: FINDINGS, tokens: budget.spent() };
"#;
    let out = run_plain(script, &["--dry-run"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = out.json();
    assert_eq!(v["text"], "[dry run] answer for \"review parser.rs\"");
    assert_eq!(
        v["defaultLabel"],
        "[dry run] answer for \"Summarize everything\""
    );
    for key in ["a", "b"] {
        assert_eq!(
            schema::validate(&v["schema"], &v[key], "value"),
            vec![],
            "{key}: {}",
            v[key]
        );
        // Arrays get one element by default (--dry-run-items).
        assert_eq!(
            v[key],
            json!({ "file": "", "findings": [{ "line": 0, "severity": "low" }], "verdict": "approve" })
        );
    }
    // Dry-run children report no usage.
    assert_eq!(v["tokens"], 0);

    let starts = out.events_of("workflow/agent-start");
    let ends = out.events_of("workflow/agent-end");
    assert_eq!(starts.len(), 4);
    assert_eq!(ends.len(), 4);
    for e in starts.iter().chain(ends.iter()) {
        assert_eq!(e["dryRun"], true, "{e}");
        let id = e["childId"].as_str().expect("childId");
        assert!(id.starts_with("dry-run-"), "{e}");
    }
    for e in &ends {
        assert_eq!(e["outcome"], "completed", "{e}");
    }
    // Narration and the run's own events are unchanged.
    for e in out.events.iter().filter(|e| {
        !e["type"]
            .as_str()
            .unwrap_or("")
            .starts_with("workflow/agent")
    }) {
        assert!(e.get("dryRun").is_none(), "{e}");
    }
    assert_eq!(out.events_of("workflow/log")[0]["message"], "done");
}

/// Each schema goes through a real run; the value the script gets is the
/// expected minimal one, and the project's validator accepts it.
#[rstest]
#[case::empty_object(json!({"type": "object"}), json!({}))]
#[case::optional_left_out(
    json!({"type": "object", "properties": {"note": {"type": "string"}}}),
    json!({})
)]
#[case::scalars(
    json!({"type": "object",
           "properties": {"s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
                          "b": {"type": "boolean"}, "z": {"type": "null"}},
           "required": ["s", "n", "i", "b", "z"]}),
    json!({"s": "", "n": 0, "i": 0, "b": false, "z": null})
)]
#[case::first_enum(
    json!({"type": "object", "properties": {"sev": {"type": "string", "enum": ["medium", "low"]}},
           "required": ["sev"]}),
    json!({"sev": "medium"})
)]
#[case::const_value(
    json!({"type": "object", "properties": {"kind": {"type": "string", "const": "bug"}}, "required": ["kind"]}),
    json!({"kind": "bug"})
)]
#[case::nested(
    json!({"type": "object",
           "properties": {"o": {"type": "object",
                                "properties": {"xs": {"type": "array", "items": {"type": "integer"}}},
                                "required": ["xs"], "additionalProperties": false}},
           "required": ["o"]}),
    json!({"o": {"xs": [0]}})
)]
#[case::one_of_branches_of_an_object(
    json!({"type": "object",
           "oneOf": [{"properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
                     {"properties": {"error": {"type": "string"}}, "required": ["error"]}]}),
    json!({"ok": false})
)]
#[case::one_of_overlapping(
    json!({"type": "object",
           "properties": {"v": {"type": "string", "oneOf": [{"enum": ["", "a"]}, {"type": "string"}]}},
           "required": ["v"]}),
    json!({"v": "x"})
)]
fn schema_calls_get_the_smallest_valid_value(#[case] schema_value: Value, #[case] want: Value) {
    let script = format!(
        "return await agent(\"give me data\", {{ label: \"data\", schema: {schema_value} }});"
    );
    let out = run_plain(&script, &["--dry-run"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let got = out.json();
    assert_eq!(schema::validate(&schema_value, &got, "value"), vec![]);
    assert_eq!(got, want);
    let ends = out.events_of("workflow/agent-end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["outcome"], "completed");
    assert_eq!(ends[0]["dryRun"], true);
}

#[test]
fn dry_run_and_fixture_exclude_each_other() {
    let fx = fixture(json!([{ "match": {}, "text": "x" }]));
    let out = run_ts(r#"return await agent("hi");"#, &fx, &["--dry-run"]);
    out.assert_code(2);
    out.assert_error_line("USAGE");
    assert!(
        out.stderr.contains("--dry-run") && out.stderr.contains("--fixture"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("exclude each other"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        events_of(&out.events, "workflow/start").is_empty(),
        "{:?}",
        out.events
    );
}

#[test]
fn the_help_describes_dry_run_as_available() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, _, code) = dsh_in(dir.path(), &["workflow", "run", "--help"]);
    assert_eq!(code, Some(0));
    let line = stdout
        .lines()
        .skip_while(|l| !l.contains("--dry-run"))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(line.contains("without any provider"), "{line}");
    assert!(!line.contains("not available"), "{line}");
}

/// `--dry-run-items N`: arrays get N elements, within minItems/maxItems, so
/// a script's later stages see a list to work on.
#[rstest]
#[case::zero("0", json!({"xs": [], "few": [null], "capped": []}))]
#[case::three("3", json!({"xs": [0, 0, 0], "few": [null, null, null], "capped": [false, false]}))]
fn dry_run_items_sets_the_array_length(#[case] n: &str, #[case] want: Value) {
    let schema = json!({"type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "integer"}},
                       "few": {"type": "array", "minItems": 1},
                       "capped": {"type": "array", "maxItems": 2, "items": {"type": "boolean"}}},
        "required": ["xs", "few", "capped"]});
    let script = format!("const v = await agent(\"list\", {{ schema: {schema} }}); return v;");
    let out = run_plain(&script, &["--dry-run", "--dry-run-items", n]);
    out.assert_code(0);
    assert_eq!(out.json(), want);
}

#[rstest]
#[case::too_many(&["--dry-run", "--dry-run-items", "1001"], &["--dry-run-items", "1001", "from 0 to 1000"])]
#[case::not_a_number(&["--dry-run", "--dry-run-items", "many"], &["--dry-run-items", "many", "from 0 to 1000"])]
#[case::negative(&["--dry-run", "--dry-run-items=-1"], &["--dry-run-items", "from 0 to 1000"])]
#[case::without_dry_run(&["--dry-run-items", "2"], &["--dry-run"])]
fn dry_run_items_is_checked(#[case] args: &[&str], #[case] mentions: &[&str]) {
    let out = run_plain("return 1;", args);
    out.assert_code(2);
    out.assert_error_line("USAGE");
    for m in mentions {
        assert!(out.stderr.contains(m), "{m:?} missing from: {}", out.stderr);
    }
}
