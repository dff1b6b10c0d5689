//! End-to-end tests of the `dsh workflow` command line (contract §1–§9,
//! §11, §12), run through the real `dsh` binary with the `scripted` fixture
//! provider. Every run's events are checked against the §8 guarantees.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    Output, Workspace, assert_event_guarantees, assert_mentions, assert_process_gone, children_of,
    dsh_in, events_of, fixture, outcomes, run_plain, run_ts,
};
use rstest::rstest;
use serde_json::{Value, json};

/// The fixture most tests use: one entry per outcome, matched by label, and
/// no catch-all (so "no match" can be tested).
fn std_fixture() -> Value {
    fixture(json!([
        { "match": { "label": "fail" }, "fail": "model refused" },
        { "match": { "label": "start-error" }, "startError": "quota exceeded" },
        { "match": { "label": "result-error" }, "resultError": "connection reset" },
        { "match": { "label": "hang" }, "hang": true },
        { "match": { "label": "structured" }, "structured": { "ok": true, "n": 3 } },
        { "match": { "label": "json-text" }, "text": "{\"ok\": false, \"n\": 1}" },
        { "match": { "label": "not-json" }, "text": "this is not JSON" },
        { "match": { "label": "wrong-shape" }, "structured": { "ok": "yes" } },
        { "match": { "label": "spend" }, "text": "spent", "usage": { "input": 5, "output": 10 } },
        { "match": { "promptContains": "echo" }, "text": "echoed" }
    ]))
}

/// The `workflow/end` event.
fn end_event(out: &Output) -> &Value {
    out.events.last().expect("events")
}

/// Asserts a run settled `error` with `code`: exit 1, `null` on stdout,
/// `error[CODE]:` on stderr, the end event and result agree. Returns the
/// error message.
#[track_caller]
fn assert_error_run(out: &Output, code: &str) -> String {
    out.assert_code(1);
    out.assert_error_line(code);
    assert_event_guarantees(&out.events);
    let end = end_event(out);
    assert_eq!(end["stopReason"], "error", "end: {end}");
    assert_eq!(end["error"]["code"], code, "end: {end}");
    end["error"]["message"]
        .as_str()
        .expect("message")
        .to_string()
}

// ------------------------------------------------------------------ results

#[test]
fn text_and_structured_results() {
    let script = r#"
const text = await agent("please echo this");
const schema = {
  type: "object",
  properties: { ok: { type: "boolean" }, n: { type: "integer" } },
  required: ["ok"],
};
const structured = await agent("give me data", { label: "structured", schema });
const fromText = await agent("json as text", { label: "json-text", schema });
const asText = await agent("structured without schema", { label: "structured" });
return { text, structured, fromText, asText, kinds: [typeof text, typeof structured] };
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = out.json();
    assert_eq!(v["text"], "echoed");
    assert_eq!(v["structured"], json!({ "ok": true, "n": 3 }));
    assert_eq!(v["fromText"], json!({ "ok": false, "n": 1 }));
    // A structured answer to a call without a schema is its JSON text.
    let as_text: Value =
        serde_json::from_str(v["asText"].as_str().expect("asText is a string")).expect("JSON");
    assert_eq!(as_text, json!({ "ok": true, "n": 3 }));
    assert_eq!(v["kinds"], json!(["string", "object"]));
    assert!(out.stderr.is_empty() || !out.stderr.contains("error["));
    let outs = outcomes(&out.events);
    assert_eq!(outs.len(), 4);
    assert!(outs.values().all(|o| o == "completed"), "{outs:?}");
    assert_eq!(end_event(&out)["agentsStarted"], 4);
    assert_eq!(end_event(&out)["error"], Value::Null);
}

#[test]
fn output_result_prints_the_whole_result() {
    let out = run_ts(
        r#"const a = await agent("echo me"); return { a };"#,
        &std_fixture(),
        &["--output", "result"],
    );
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let mut result = out.json();
    // The sandbox object depends on the kernel (tests/sandbox.rs checks it).
    let sandbox = result
        .as_object_mut()
        .and_then(|m| m.remove("sandbox"))
        .expect("--output result carries the sandbox object");
    assert!(sandbox["level"].is_string(), "{sandbox}");
    assert_eq!(
        result,
        json!({ "value": { "a": "echoed" }, "stopReason": "completed", "agentsStarted": 1 })
    );
}

#[rstest]
#[case::fail("fail", "failed")]
#[case::unparsable_text_for_schema("not-json", "failed")]
#[case::answer_violating_schema("wrong-shape", "failed")]
fn a_child_that_ends_for_its_own_reasons_is_null(#[case] label: &str, #[case] outcome: &str) {
    let script = format!(
        r#"
const schema = {{ type: "object", properties: {{ ok: {{ type: "boolean" }} }}, required: ["ok"] }};
const r = await agent("try it", {{ label: "{label}", schema }});
const plain = await agent("echo afterwards");
return {{ r, plain, isNull: r === null }};
"#
    );
    let out = run_ts(&script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({ "r": null, "plain": "echoed", "isNull": true })
    );
    assert_eq!(
        outcomes(&out.events).get(&1).map(String::as_str),
        Some(outcome)
    );
    assert_eq!(
        outcomes(&out.events).get(&2).map(String::as_str),
        Some("completed")
    );
}

#[test]
fn filter_boolean_drops_failed_children() {
    let script = r#"
const rs = await parallel([
  () => agent("echo 1"),
  () => agent("x", { label: "fail" }),
  () => agent("echo 2"),
]);
return rs.filter(Boolean);
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), json!(["echoed", "echoed"]));
}

#[test]
fn start_error_is_agent_start_and_emits_no_agent_events() {
    let out = run_ts(
        r#"await agent("refuse me", { label: "start-error" }); return 1;"#,
        &std_fixture(),
        &[],
    );
    let msg = assert_error_run(&out, "AGENT_START");
    assert_eq!(out.stdout.trim(), "null");
    assert!(msg.contains("quota exceeded"), "{msg}");
    // The provider never started a child: neither agent-start nor agent-end.
    assert!(out.events_of("workflow/agent-start").is_empty());
    assert!(out.events_of("workflow/agent-end").is_empty());
    // A call the provider then refused still counts as started.
    assert_eq!(end_event(&out)["agentsStarted"], 1);
}

#[test]
fn start_error_can_be_caught_by_the_script() {
    let script = r#"
try {
  await agent("refuse me", { label: "start-error" });
  return "not reached";
} catch (e: any) {
  return { name: e.name, code: e.code, fatal: e.fatal, message: e.message };
}
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = out.json();
    assert_eq!(v["name"], "WorkflowError");
    assert_eq!(v["code"], "AGENT_START");
    // Contract §6 (revision 2): only run-level stops are fatal.
    assert_eq!(v["fatal"], false);
    assert!(v["message"].as_str().unwrap().contains("quota exceeded"));
}

#[test]
fn no_fixture_match_is_agent_start_naming_seq_label_and_prompt() {
    let script = r#"
await agent("echo first");
await agent("Nothing matches this unusual prompt text", { label: "unmatched-label" });
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    let msg = assert_error_run(&out, "AGENT_START");
    assert!(msg.contains("#2"), "names the seq: {msg}");
    assert!(msg.contains("unmatched-label"), "names the label: {msg}");
    assert!(
        msg.contains("Nothing matches"),
        "names the prompt start: {msg}"
    );
    assert_eq!(end_event(&out)["agentsStarted"], 2);
    assert_eq!(out.events_of("workflow/agent-start").len(), 1);
}

#[test]
fn result_error_is_agent_result() {
    let out = run_ts(
        r#"await agent("deliver", { label: "result-error" }); return 1;"#,
        &std_fixture(),
        &[],
    );
    let msg = assert_error_run(&out, "AGENT_RESULT");
    assert!(msg.contains("connection reset"), "{msg}");
    // The child did start: its start and end are both reported.
    assert_eq!(out.events_of("workflow/agent-start").len(), 1);
    assert_eq!(out.events_of("workflow/agent-end").len(), 1);
}

#[test]
fn fixture_times_falls_through_to_later_entries() {
    let fx = fixture(json!([
        { "match": { "label": "flaky" }, "text": "first", "times": 1 },
        { "match": { "label": "flaky" }, "text": "later" }
    ]));
    let out = run_ts(
        r#"return [await agent("a", { label: "flaky" }), await agent("b", { label: "flaky" }), await agent("c", { label: "flaky" })];"#,
        &fx,
        &[],
    );
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), json!(["first", "later", "later"]));
}

#[test]
fn fixture_match_fields() {
    let schema = json!({ "type": "object", "properties": { "k": { "type": "string" } } });
    let fx = fixture(json!([
        { "match": { "model": "m1", "effort": "high" }, "text": "model+effort" },
        { "match": { "agentType": "Explore" }, "text": "agentType" },
        { "match": { "provider": "alt" }, "text": "provider" },
        { "match": { "schema": schema }, "structured": { "k": "by schema" } },
        { "match": { "promptMatches": "^Summarize\\b" }, "text": "regex" },
        { "match": { "prompt": "exact prompt" }, "text": "exact" },
        { "match": { "phase": "P", "promptContains": "in phase" }, "text": "phase+contains" },
        { "match": {}, "text": "default" }
    ]));
    let script = r#"
const schema = { type: "object", properties: { k: { type: "string" } } };
const r = [
  await agent("anything", { model: "m1", effort: "high" }),
  await agent("anything", { model: "m1" }),
  await agent("anything", { agentType: "Explore" }),
  await agent("anything", { provider: "alt" }),
  await agent("anything", { schema }),
  await agent("Summarize it"),
  await agent("exact prompt"),
  await agent("exact prompt plus"),
];
phase("P");
r.push(await agent("work in phase"));
return r;
"#;
    let out = run_ts(script, &fx, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!([
            "model+effort",
            "default",
            "agentType",
            "provider",
            { "k": "by schema" },
            "regex",
            "exact",
            "default",
            "phase+contains"
        ])
    );
}

// ------------------------------------------------------------------ fatal hook errors

#[rstest]
#[case::parallel_non_array(r#"await parallel("x" as any);"#, &[], "INVALID_ARGUMENT", &["parallel()"])]
#[case::parallel_bad_item(r#"await parallel([() => 1, 7 as any]);"#, &[], "INVALID_ARGUMENT", &["item 1"])]
#[case::pipeline_bad_stage(r#"await pipeline([1], (x: any) => x, "s" as any);"#, &[], "INVALID_ARGUMENT", &["stage 2"])]
#[case::unsupported_schema(
    r#"await agent("x", { schema: { type: "object", properties: { a: { type: "strng" }, b: { type: "string", minLength: 2, priority: 1 } } } as any });"#,
    &[],
    "UNSUPPORTED_SCHEMA",
    &["options.schema.properties.b.priority", "unknown keyword \"priority\""]
)]
#[case::schema_not_object_root(r#"await agent("x", { schema: { type: "array", items: {} } as any });"#, &[], "UNSUPPORTED_SCHEMA", &["options.schema"])]
#[case::agent_cap(
    r#"for (let i = 0; i < 3; i++) await agent("echo " + i);"#,
    &["--max-agents", "2"],
    "AGENT_CAP",
    &["2"]
)]
#[case::item_cap_parallel(r#"await parallel(new Array(4097).fill(() => 1));"#, &[], "ITEM_CAP", &["4097", "4096"])]
#[case::item_cap_pipeline(r#"await pipeline(new Array(4097).fill(1), (x: any) => x);"#, &[], "ITEM_CAP", &["4097"])]
#[case::budget(
    r#"await agent("pay", { label: "spend" }); await agent("echo more");"#,
    &["--budget", "10"],
    "BUDGET",
    &["10"]
)]
#[case::result_unserializable(r#"return { when: 10n };"#, &[], "RESULT_UNSERIALIZABLE", &["value.when"])]
#[case::script_error(r#"throw new Error("kaput");"#, &[], "SCRIPT_ERROR", &["kaput"])]
#[case::script_error_non_error(r#"throw "just a string";"#, &[], "SCRIPT_ERROR", &["just a string"])]
#[case::script_rejection(r#"await Promise.reject(new RangeError("nope"));"#, &[], "SCRIPT_ERROR", &["RangeError", "nope"])]
#[case::throw_null_is_a_script_error(r#"throw null;"#, &[], "SCRIPT_ERROR", &["null"])]
#[case::memory_limit(
    r#"const a: string[] = []; let i = 0; while (true) a.push("x".repeat(1000) + i++);"#,
    &["--memory", "16MiB"],
    "MEMORY",
    &["16777216"]
)]
#[case::return_value_over_the_frame_limit(r#"return "x".repeat(17 * 1024 * 1024);"#, &[], "RESULT_UNSERIALIZABLE", &["frame limit"])]
#[case::prompt_over_the_frame_limit(r#"await agent("y".repeat(17 * 1024 * 1024));"#, &[], "INVALID_ARGUMENT", &["bytes"])]
#[case::label_over_the_frame_limit(r#"await agent("small", { label: "l".repeat(17 * 1024 * 1024) });"#, &[], "INVALID_ARGUMENT", &["bytes"])]
fn fatal_hook_errors_settle_error_with_exit_1(
    #[case] script: &str,
    #[case] extra: &[&str],
    #[case] code: &str,
    #[case] mentions: &[&str],
) {
    let mut flags = vec!["--output", "result"];
    flags.extend_from_slice(extra);
    let out = run_ts(script, &std_fixture(), &flags);
    let msg = assert_error_run(&out, code);
    let result = out.json();
    assert_eq!(result["stopReason"], "error");
    assert_eq!(result["value"], Value::Null);
    assert_eq!(result["error"]["code"], code);
    assert_eq!(result["error"]["message"], msg.as_str());
    for m in mentions {
        assert!(
            msg.contains(m),
            "{code} message should mention {m:?}: {msg}"
        );
    }
}

/// An unsupported schema ends the run naming the call — its position in
/// the original file, past the stripped type lines — and the schema path of
/// the keyword at fault (a compile-time problem such as an unknown format
/// was reported at the schema's root).
#[test]
fn unsupported_schema_names_the_call_site_and_the_keyword() {
    let script = "type Row = { n: number };\ninterface Gone { x: string }\n\nconst v = await agent(\"x\", { schema: { type: \"object\", properties: { when: { type: \"string\", pattern: \"(unclosed\" } } } });\nreturn v;\n";
    let out = run_ts(script, &std_fixture(), &["--output", "result"]);
    let msg = assert_error_run(&out, "UNSUPPORTED_SCHEMA");
    let col: u32 = msg
        .strip_prefix("wf.ts:4:")
        .unwrap_or_else(|| panic!("should start with the call's wf.ts:4:<col>: {msg}"))
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("a column after wf.ts:4: in {msg}"));
    // `await` starts at column 11, the call's `(` is at column 22.
    assert!(
        (11..=22).contains(&col),
        "column {col} is on the call: {msg}"
    );
    assert_mentions(&msg, &["options.schema.properties.when.pattern"]);
}

/// An exhausted heap is `MEMORY` wherever the allocation that failed
/// falls, including when QuickJS cannot even allocate its out-of-memory
/// error and throws a bare `null` (which one happens depends on sizes and
/// layout, so the table varies both); a script's own `throw null` after
/// using a little memory stays a script error.
#[rstest]
#[case::bytes_1_of_8(1, "8MiB", "MEMORY")]
#[case::bytes_10_of_8(10, "8MiB", "MEMORY")]
#[case::bytes_100_of_16(100, "16MiB", "MEMORY")]
#[case::bytes_1000_of_16(1000, "16MiB", "MEMORY")]
#[case::bytes_1003_of_16(1003, "16MiB", "MEMORY")]
#[case::bytes_4000_of_32(4000, "32MiB", "MEMORY")]
#[case::throw_null_after_a_little(0, "16MiB", "SCRIPT_ERROR")]
fn an_exhausted_heap_is_memory_however_it_fails(
    #[case] bytes: usize,
    #[case] limit: &str,
    #[case] code: &str,
) {
    let script = if bytes == 0 {
        "const a: string[] = []; for (let i = 0; i < 1000; i++) a.push(\"x\".repeat(1000) + i); throw null;".to_string()
    } else {
        format!(
            "const a: string[] = []; let i = 0; while (true) a.push(\"x\".repeat({bytes}) + i++);"
        )
    };
    let ws = Workspace::new("wf.ts", &script, None);
    let out = ws.run(&["--memory", limit]);
    assert_error_run(&out, code);
}

#[test]
fn uncaught_fatal_error_prints_null_on_stdout() {
    let out = run_ts(
        r#"await agent("x", { model: 5 } as any);"#,
        &std_fixture(),
        &[],
    );
    assert_error_run(&out, "INVALID_ARGUMENT");
    assert_eq!(out.stdout.trim(), "null");
}

#[test]
fn hook_misuse_rejects_and_narration_throws_synchronously() {
    let script = r#"
const seen: Record<string, string> = {};
for (const [name, f] of [
  ["agent", () => agent("x", { model: 5 } as any)],
  ["parallel", () => parallel("x" as any)],
  ["pipeline", () => pipeline("x" as any, (x: any) => x)],
] as const) {
  try {
    const p = (f as any)();
    seen[name] = "returned " + (p instanceof Promise ? "a promise" : typeof p);
    await p.catch((e: any) => { seen[name] += " rejected " + e.code; });
  } catch (e: any) {
    seen[name] = "threw " + e.code;
  }
}
for (const [name, f] of [["phase", () => phase(1 as any)], ["log", () => log({} as any)]] as const) {
  try { (f as any)(); seen[name] = "no throw"; } catch (e: any) { seen[name] = "threw " + e.code; }
}
return seen;
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({
            "agent": "returned a promise rejected INVALID_ARGUMENT",
            "parallel": "returned a promise rejected INVALID_ARGUMENT",
            "pipeline": "returned a promise rejected INVALID_ARGUMENT",
            // Revision 2: a non-string title or message is accepted, as
            // Claude Code accepts it, with a warning.
            "phase": "no throw",
            "log": "no throw"
        })
    );
}

#[test]
fn script_error_names_the_original_ts_position() {
    // Lines 1-5 are types only: stripping them shifts every later line.
    let script = r#"interface Finding {
  file: string;
  line: number;
}
type Maybe<T> = T | null;
const f: Maybe<Finding> = null;
function describe(x: Finding): string {
  return `${x.file}:${x.line}`;
}
const n = 1 as number;
    throw new Error("bad thing happened");
"#;
    let out = run_ts(script, &std_fixture(), &["--output", "result"]);
    let msg = assert_error_run(&out, "SCRIPT_ERROR");
    assert!(msg.contains("bad thing happened"), "{msg}");
    let at = msg
        .find("wf.ts:11:")
        .unwrap_or_else(|| panic!("message should name wf.ts:11:<col> (the original line): {msg}"));
    let col: u32 = msg[at + "wf.ts:11:".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("a column after wf.ts:11: in {msg}"));
    // `throw` starts at column 5 and `Error` at column 15 of the original line.
    assert!(
        (5..=15).contains(&col),
        "column {col} is on the throw: {msg}"
    );
}

#[test]
fn script_error_position_after_await_and_in_a_nested_function() {
    let script = r#"type T = { a: number };
await agent("echo first");
function g(x: T): number {
  const y: number = x.a;
  throw new TypeError("deep " + y);
}
const o = { a: 1 } as T;
g(o);
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    let msg = assert_error_run(&out, "SCRIPT_ERROR");
    assert!(msg.contains("wf.ts:5:"), "names original line 5: {msg}");
    assert!(msg.contains("TypeError: deep 1"), "{msg}");
}

// ------------------------------------------------------------------ value boundary (§5)

/// Contract §5 (revision 2): values leave the script the way Claude Code
/// converts them — lossy conversions are accepted, each with a warning
/// naming its path; a cycle or a bigint still fail.
#[rstest]
#[case::function(
    "({ a: { b: [1, () => 1] } })",
    Ok(r#"{"a":{"b":[1,null]}}"#),
    Some("value.a.b[1]")
)]
#[case::symbol(r#"({ a: Symbol("s"), k: 1 })"#, Ok(r#"{"k":1}"#), Some("value.a"))]
#[case::bigint("({ big: 10n })", Err("value.big"), None)]
#[case::nested_undefined_in_object(
    "({ a: { b: undefined, c: 2 } })",
    Ok(r#"{"a":{"c":2}}"#),
    Some("value.a.b")
)]
#[case::nested_undefined_in_array(
    "({ a: [1, undefined] })",
    Ok(r#"{"a":[1,null]}"#),
    Some("value.a[1]")
)]
#[case::nan("({ n: NaN })", Ok(r#"{"n":null}"#), Some("value.n"))]
#[case::infinity(
    "({ list: [1, -Infinity] })",
    Ok(r#"{"list":[1,null]}"#),
    Some("value.list[1]")
)]
#[case::cycle(
    "(() => { const o: any = { x: {} }; o.x.back = o; return o; })()",
    Err("value.x.back"),
    None
)]
#[case::sparse_array("({ s: [1, , 3] })", Ok(r#"{"s":[1,null,3]}"#), Some("value.s[1]"))]
#[case::array_extra_property(
    "(() => { const a: any = [1, 2]; a.extra = true; return { a }; })()",
    Ok(r#"{"a":[1,2]}"#),
    Some("value.a")
)]
#[case::date(
    "({ items: [{ when: new Date(0) }] })",
    Ok(r#"{"items":[{"when":{}}]}"#),
    Some("value.items[0].when")
)]
#[case::map("({ m: new Map([[1, 2]]) })", Ok(r#"{"m":{}}"#), Some("value.m"))]
#[case::class_instance(
    "(() => { class Point { x = 1; y = 2 } return { p: new Point() }; })()",
    Ok(r#"{"p":{"x":1,"y":2}}"#),
    Some("value.p")
)]
#[case::symbol_key(
    r#"({ inner: { [Symbol("k")]: 1, j: 2 } })"#,
    Ok(r#"{"inner":{"j":2}}"#),
    Some("value.inner")
)]
// Issue 33 §3: a getter that throws and a "__proto__" key are left out,
// as Claude Code leaves them out.
#[case::throwing_getter(
    r#"({ get g(): number { throw new Error("getter boom"); }, k: 1 })"#,
    Ok(r#"{"k":1}"#),
    Some("value.g")
)]
#[case::throwing_getter_in_an_array(
    r#"(() => { const a: any[] = [1, 2]; Object.defineProperty(a, 1, { get() { throw new Error("boom"); }, enumerable: true }); return { a }; })()"#,
    Ok(r#"{"a":[1,null]}"#),
    Some("value.a[1]")
)]
#[case::proto_key_is_left_out(
    r#"JSON.parse('{"__proto__": 1, "a": 2}')"#,
    Ok(r#"{"a": 2}"#),
    Some("value.__proto__")
)]
#[case::root_undefined("undefined", Ok("null"), None)]
#[case::dag_is_fine(
    "(() => { const o = { x: 1 }; return { a: o, b: o, c: [o, o] }; })()",
    Ok(r#"{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":1}]}"#),
    None
)]
#[case::null_prototype_object(
    "Object.assign(Object.create(null), { k: 1 })",
    Ok(r#"{"k":1}"#),
    None
)]
#[case::plain_values(
    r#"({ s: "é\u0000", n: -0.5, t: true, z: null, arr: [[]], o: {} })"#,
    Ok(r#"{"s":"é\u0000","n":-0.5,"t":true,"z":null,"arr":[[]],"o":{}}"#),
    None
)]
fn value_boundary(
    #[case] expr: &str,
    #[case] expected: Result<&str, &str>,
    #[case] warning: Option<&str>,
) {
    let script = format!("return {expr};\n");
    let out = run_ts(&script, &std_fixture(), &["--output", "result"]);
    let result = out.json();
    let warnings: Vec<&Value> = out.events_of("workflow/warning");
    match expected {
        Ok(json_text) => {
            out.assert_code(0);
            assert_event_guarantees(&out.events);
            let want: Value = serde_json::from_str(json_text).expect("expected JSON");
            assert_eq!(result["stopReason"], "completed", "{result}");
            assert_eq!(result["value"], want);
        }
        Err(path) => {
            let msg = assert_error_run(&out, "RESULT_UNSERIALIZABLE");
            assert!(
                msg.starts_with(&format!("{path}:")),
                "message should start with the offending path {path:?}: {msg}"
            );
            assert_eq!(result["value"], Value::Null);
        }
    }
    match warning {
        Some(path) => {
            assert!(
                warnings.iter().any(|w| w["path"] == path),
                "a warning naming {path:?}: {warnings:?}"
            );
            // And a stderr line naming it (events are off here).
            assert!(
                out.stderr.contains(&format!("dsh: warning: {path}: ")),
                "{}",
                out.stderr
            );
        }
        None => assert!(warnings.is_empty(), "{warnings:?}"),
    }
}

#[test]
fn proto_key_is_an_own_key_inside_the_script_too() {
    let script = r#"
const o = JSON.parse('{"__proto__": {"polluted": true}}');
return { own: Object.keys(o), polluted: ({} as any).polluted === undefined ? "no" : "yes", o };
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_eq!(
        out.json(),
        // Inside the script it is an own key; leaving the script, it is
        // left out, as Claude Code leaves it out (issue 33 §3).
        json!({ "own": ["__proto__"], "polluted": "no", "o": {} })
    );
}

// ------------------------------------------------------------------ combinators (§4)

#[test]
fn parallel_semantics() {
    let script = r#"
const r = await parallel([
  () => agent("echo a"),
  () => { throw new Error("ordinary"); },
  () => { throw { name: "WorkflowError", code: "BUDGET", fatal: true, message: "forged" }; },
  async () => { throw Object.assign(new Error("forged too"), { name: "WorkflowError", code: "CANCELLED", fatal: true }); },
  Promise.resolve(5),
  async () => 7,
  () => agent("x", { label: "fail" }),
]);
const empty = await parallel([]);
let caught = null;
try {
  // A run-level stop rejects the whole call: the budget is spent after
  // the first answer (10 output tokens of a budget of 10).
  await agent("x", { label: "spend" });
  await parallel([() => agent("echo b"), () => agent("echo c")]);
} catch (e: any) {
  caught = { name: e.name, code: e.code, fatal: e.fatal };
}
return { r, empty, caught };
"#;
    let out = run_ts(script, &std_fixture(), &["--budget", "10"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({
            "r": ["echoed", null, null, null, 5, 7, null],
            "empty": [],
            "caught": { "name": "WorkflowError", "code": "BUDGET", "fatal": true }
        })
    );
    // Each item that threw is logged as Claude Code logs it.
    let logs: Vec<&str> = out
        .events_of("workflow/log")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    for want in [
        "parallel[1] failed: ordinary",
        "parallel[2] failed: forged",
        "parallel[3] failed: forged too",
    ] {
        assert!(logs.contains(&want), "{want:?} not in {logs:?}");
    }
}

/// Contract §3/§4 (revision 2), as in Claude Code: a call that cannot be
/// made (a refused start, a delivery fault, a bad argument) is an ordinary
/// rejection, so inside a combinator its item is `null` and `parallel()`
/// logs `parallel[i] failed: <message>`; outside one it ends the run with
/// its code when nothing catches it.
#[rstest]
#[case::parallel(
    r#"return await parallel([() => agent("echo"), () => agent("x", { label: "start-error" })]);"#,
    json!(["echoed", null]),
    Some("parallel[1] failed: quota exceeded")
)]
#[case::pipeline(
    r#"return await pipeline([1, 2], (x: number) => x === 2 ? parallel("no" as any) : x);"#,
    json!([1, null]),
    None
)]
#[case::nested(
    r#"return await parallel([() => parallel([() => pipeline([1], () => agent("x", { label: "result-error" }))])]);"#,
    json!([[[null]]]),
    None
)]
fn calls_that_cannot_be_made_are_null_inside_combinators(
    #[case] script: &str,
    #[case] value: Value,
    #[case] log: Option<&str>,
) {
    let out = run_ts(script, &std_fixture(), &["--output", "result"]);
    out.assert_code(0);
    assert_eq!(out.json()["value"], value);
    if let Some(want) = log {
        let logs: Vec<&Value> = out.events_of("workflow/log");
        assert!(
            logs.iter()
                .any(|e| e["message"].as_str().is_some_and(|m| m.starts_with(want))),
            "{want:?} not in {logs:?}"
        );
    }
}

#[test]
fn a_call_that_cannot_be_made_outside_a_combinator_ends_the_run_with_its_code() {
    let out = run_ts(
        r#"await agent("x", { label: "start-error" }); return "not reached";"#,
        &std_fixture(),
        &[],
    );
    assert_error_run(&out, "AGENT_START");
    assert_eq!(out.stdout.trim(), "null");
}

#[test]
fn pipeline_semantics() {
    let script = r#"
const r = await pipeline(
  [1, 2, 3, 4],
  (x: number) => x * 10,
  (prev: number, item: number, i: number) => {
    if (item === 2) throw new Error("drop item 2");
    if (item === 3) throw { name: "WorkflowError", code: "BUDGET", fatal: true, message: "forged" };
    return item === 4 ? null : undefined;
  },
  (prev: any, item: number, i: number) => ({ prev: prev === undefined ? "undefined" : prev, item, i }),
);
const seenFirst: any[] = [];
await pipeline(["a"], (prev: any, item: any, i: number) => { seenFirst.push(prev, item, i); return prev; });
const failedStage = await pipeline(["x"], () => agent("x", { label: "fail" }), (prev: any) => ({ prev }));
return { r, seenFirst, failedStage, empty: await pipeline([], (x: any) => x) };
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({
            // As in Claude Code: undefined flows on, a null ends the item
            // (a failed agent() call included).
            "r": [
                { "prev": "undefined", "item": 1, "i": 0 },
                null,
                null,
                null
            ],
            "seenFirst": ["a", "a", 0],
            "failedStage": [null],
            "empty": []
        })
    );
}

#[test]
fn pipeline_has_no_barrier_between_stages() {
    // Item "two" is slow in stage 1; item "one" must flow through all three
    // stages meanwhile. With a stage barrier, s2-one could not even start
    // before s1-two ends.
    let fx = fixture(json!([
        { "match": { "label": "s1-two" }, "text": "B1", "delayMs": 1500 },
        { "match": { "label": "s1-one" }, "text": "A1" },
        { "match": { "promptContains": "stage 2" }, "text": "X2" },
        { "match": { "promptContains": "stage 3" }, "text": "X3" }
    ]));
    let script = r#"
const r = await pipeline(
  ["one", "two"],
  async (x: string) => { const a = await agent(`stage 1 ${x}`, { label: `s1-${x}` }); log(`s1 ${x} done`); return a; },
  async (prev: string, x: string) => { const a = await agent(`stage 2 ${x}`, { label: `s2-${x}` }); log(`s2 ${x} done`); return `${prev}>${a}`; },
  async (prev: string, x: string, i: number) => { const a = await agent(`stage 3 ${x}`, { label: `s3-${x}` }); log(`s3 ${x} done`); return `${prev}>${a}#${i}`; },
);
return r;
"#;
    let out = run_ts(script, &fx, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), json!(["A1>X2>X3#0", "B1>X2>X3#1"]));

    let logs: Vec<&str> = out
        .events_of("workflow/log")
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    let pos = |m: &str| {
        logs.iter()
            .position(|l| *l == m)
            .unwrap_or_else(|| panic!("log {m:?} in {logs:?}"))
    };
    assert!(
        pos("s3 one done") < pos("s1 two done"),
        "item one finished every stage before item two finished stage 1: {logs:?}"
    );
    let ends: Vec<&str> = out
        .events_of("workflow/agent-end")
        .iter()
        .map(|e| e["label"].as_str().unwrap())
        .collect();
    let end_pos = |l: &str| ends.iter().position(|x| *x == l).expect("label");
    assert!(end_pos("s3-one") < end_pos("s1-two"), "{ends:?}");
}

#[test]
fn agent_starts_when_called_not_when_awaited() {
    // The call before parallel() is awaited only after it; an un-awaited
    // call still runs.
    let fx = fixture(json!([
        { "match": { "label": "early" }, "text": "early answer", "delayMs": 200 },
        { "match": {}, "text": "other" }
    ]));
    let script = r#"
const early = agent("started before parallel", { label: "early" });
const rest = await parallel([() => agent("p1"), () => agent("p2")]);
const chained = await agent("chained").then((t) => t + "!");
return { rest, chained, early: await early };
"#;
    let out = run_ts(script, &fx, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({ "rest": ["other", "other"], "chained": "other!", "early": "early answer" })
    );
    let starts = out.events_of("workflow/agent-start");
    assert_eq!(starts[0]["label"], "early", "seq 1 is the first call");
    assert_eq!(starts[0]["seq"], 1);
}

/// A call behind a full concurrency limit is announced while it waits
/// (`workflow/agent-queued`, `waiting: true`) and leaves the queue
/// (`waiting: false`) before its `agent-start`; a run cancelled while calls
/// wait pairs them before `workflow/end`. Before, the host heard of a call
/// only when it started.
#[test]
fn calls_waiting_for_a_slot_are_announced_until_they_start() {
    let fx = fixture(json!([
        { "match": { "label": "hang" }, "hang": true },
        { "match": {}, "text": "done", "delayMs": 50 }
    ]));
    let script = r#"
phase("Fan");
const r = await parallel([1, 2, 3].map((i) => () => agent(`job ${i}`, { label: `job-${i}` })));
return r.length;
"#;
    let out = run_ts(script, &fx, &["--max-concurrent", "1"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let queued = out.events_of("workflow/agent-queued");
    let pairs: Vec<(u64, bool)> = queued
        .iter()
        .map(|e| (e["seq"].as_u64().expect("seq"), e["waiting"] == true))
        .collect();
    assert_eq!(
        pairs,
        [(2, true), (3, true), (2, false), (3, false)],
        "{queued:#?}"
    );
    assert_eq!(queued[0]["label"], "job-2");
    assert_eq!(queued[0]["phase"], "Fan");

    // Cancelled (the timeout) while two calls wait: they stop waiting
    // before the end, and never start.
    let script = r#"
await parallel([() => agent("x", { label: "hang" }), () => agent("y"), () => agent("z")]);
"#;
    let out = run_ts(script, &fx, &["--max-concurrent", "1", "--timeout", "1s"]);
    out.assert_code(124);
    assert_event_guarantees(&out.events);
    let queued: Vec<(u64, bool)> = out
        .events_of("workflow/agent-queued")
        .iter()
        .map(|e| (e["seq"].as_u64().expect("seq"), e["waiting"] == true))
        .collect();
    assert_eq!(queued, [(2, true), (3, true), (2, false), (3, false)]);
    assert_eq!(out.events_of("workflow/agent-start").len(), 1);
    assert_eq!(end_event(&out)["agentsStarted"], 3);
}

#[test]
fn concurrency_never_exceeds_max_concurrent() {
    let fx = fixture(json!([
        { "match": { "promptContains": "job" }, "text": "done", "delayMs": 400 }
    ]));
    let script = r#"
const r = await parallel(Array.from({ length: 8 }, (_, i) => () => agent(`job ${i}`, { label: `job-${i}` })));
return r.filter(Boolean).length;
"#;
    let out = run_ts(script, &fx, &["--max-concurrent", "3"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), json!(8));
    let mut running = 0i32;
    let mut peak = 0i32;
    for e in &out.events {
        match e["type"].as_str() {
            Some("workflow/agent-start") => {
                running += 1;
                peak = peak.max(running);
                assert!(
                    running <= 3,
                    "more than 3 children at once: {:#?}",
                    out.events
                );
            }
            Some("workflow/agent-end") => running -= 1,
            _ => {}
        }
    }
    assert_eq!(out.events_of("workflow/agent-start").len(), 8);
    assert_eq!(peak, 3, "the slots were actually used in parallel");
}

// ------------------------------------------------------------------ args, labels, phases, narration

#[rstest]
#[case::json_object(&["--args", r#"{"files":["a.rs","b.rs"],"n":2}"#], None, json!({ "type": "object", "args": { "files": ["a.rs", "b.rs"], "n": 2 } }))]
#[case::json_number(&["--args", "42"], None, json!({ "type": "number", "args": 42 }))]
#[case::json_string(&["--args", r#""quoted""#], None, json!({ "type": "string", "args": "quoted" }))]
#[case::json_null(&["--args", "null"], None, json!({ "type": "object", "args": null }))]
#[case::text(&["--args-text", "{not json} just text"], None, json!({ "type": "string", "args": "{not json} just text" }))]
#[case::file(&["--args-file", "args.json"], Some(r#"{"from": "file", "list": [1, 2]}"#), json!({ "type": "object", "args": { "from": "file", "list": [1, 2] } }))]
#[case::none(&[], None, json!({ "type": "undefined", "args": null }))]
fn args_shapes(#[case] flags: &[&str], #[case] file: Option<&str>, #[case] expected: Value) {
    let ws = Workspace::new(
        "wf.ts",
        "return { type: typeof args, args: args === undefined ? null : args };\n",
        None,
    );
    if let Some(contents) = file {
        ws.file("args.json", contents);
    }
    let out = ws.run(flags);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), expected);
}

#[test]
fn args_is_a_fresh_copy_the_script_may_mutate() {
    let out = run_plain(
        "args.list.push(3); args.added = true; return args;\n",
        &["--args", r#"{"list":[1,2]}"#],
    );
    out.assert_code(0);
    assert_eq!(out.json(), json!({ "list": [1, 2, 3], "added": true }));
}

#[rstest]
#[case::short("Review a.rs", "Review a.rs")]
#[case::first_line_only("Plan the change\nthen do more\nand more", "Plan the change")]
#[case::crlf("Windows line\r\nnext", "Windows line")]
#[case::exactly_48(
    "123456789012345678901234567890123456789012345678",
    "123456789012345678901234567890123456789012345678"
)]
#[case::long_49(
    "1234567890123456789012345678901234567890123456789",
    "12345678901234567890123456789012345678901234567…"
)]
#[case::long_first_line(
    "Summarize every finding of the review in one paragraph please\nmore",
    "Summarize every finding of the review in one pa…"
)]
#[case::characters_not_bytes(
    "ééééééééééééééééééééééééééééééééééééééééééééééééééé",
    "ééééééééééééééééééééééééééééééééééééééééééééééé…"
)]
fn default_label(#[case] prompt: &str, #[case] label: &str) {
    let fx = fixture(json!([{ "match": { "label": label }, "text": "matched by label" }]));
    let ws = Workspace::new("wf.ts", r#"return await agent(args.prompt);"#, Some(&fx));
    let args = json!({ "prompt": prompt }).to_string();
    let out = ws.run(&["--args", &args]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    // The fixture matched the default label, and events carry it.
    assert_eq!(out.json(), json!("matched by label"));
    let starts = out.events_of("workflow/agent-start");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["label"], label);
    assert_eq!(out.events_of("workflow/agent-end")[0]["label"], label);
}

/// Issue 33 §3: the options as Claude Code's copy of them reads them.
/// What that copy loses (options that are not an object, a key whose
/// getter throws, keys that cannot be listed, a `__proto__` key, a null
/// or falsy value, an `effort` that is not a string) is lost here too and
/// the call runs, with a warning at `path`; what makes Claude Code's call
/// fail still rejects.
#[rstest]
#[case::a_number("5", Ok(("echo q", None)), Some("options"))]
#[case::a_string(r#""label""#, Ok(("echo q", None)), Some("options"))]
#[case::a_function("() => 1", Ok(("echo q", None)), Some("options"))]
#[case::a_class_instance(
    "new (class O { label = \"L\" })()",
    Ok(("L", None)),
    Some("options")
)]
#[case::a_map("new Map([[\"label\", \"M\"]])", Ok(("echo q", None)), Some("options"))]
#[case::a_getter_that_throws(
    r#"{ get label(): string { throw new Error("boom"); }, phase: "P" }"#,
    Ok(("echo q", Some("P"))),
    Some("options.label")
)]
#[case::keys_that_cannot_be_listed(
    r#"new Proxy({ label: "s" }, { ownKeys() { throw new Error("keys"); } })"#,
    Ok(("echo q", None)),
    Some("options")
)]
#[case::a_prototype_that_cannot_be_read(
    r#"new Proxy({ label: "s" }, { getPrototypeOf() { throw new Error("proto"); } })"#,
    Ok(("s", None)),
    Some("options")
)]
#[case::a_proto_key(
    r#"JSON.parse('{"__proto__": {"label": "pl"}, "label": "own"}')"#,
    Ok(("own", None)),
    Some("options.__proto__")
)]
#[case::null_values(
    "{ label: null, phase: null, model: null, effort: null, agentType: null, schema: null }",
    Ok(("echo q", None)),
    None
)]
#[case::a_function_label("{ label: () => 1 }", Ok(("echo q", None)), Some("options.label"))]
#[case::an_array_phase("{ phase: [1, 2] }", Ok(("echo q", Some("1,2"))), Some("options.phase"))]
#[case::a_falsy_model("{ model: 0 }", Ok(("echo q", None)), Some("options.model"))]
#[case::an_effort_not_a_string("{ effort: 3 }", Ok(("echo q", None)), Some("options.effort"))]
#[case::a_truthy_model_not_a_string("{ model: true }", Err("options.model"), None)]
#[case::an_agent_type_not_a_string("{ agentType: 3 }", Err("options.agentType"), None)]
#[case::null_disallowed_tools("{ disallowedTools: null }", Err("options.disallowedTools"), None)]
fn agent_options_are_read_as_claude_code_copies_them(
    #[case] options: &str,
    #[case] expected: Result<(&str, Option<&str>), &str>,
    #[case] warning: Option<&str>,
) {
    let script = format!(
        "try {{ return await agent(\"echo q\", ({options}) as any); }} catch (e: any) {{ return {{ code: e.code, message: e.message }}; }}\n"
    );
    let out = run_ts(&script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let starts = out.events_of("workflow/agent-start");
    match expected {
        Ok((label, phase)) => {
            assert_eq!(out.json(), json!("echoed"));
            assert_eq!(starts.len(), 1);
            assert_eq!(starts[0]["label"], label, "{}", starts[0]);
            assert_eq!(starts[0]["phase"], json!(phase), "{}", starts[0]);
        }
        Err(path) => {
            let v = out.json();
            assert_eq!(v["code"], "INVALID_ARGUMENT", "{v}");
            assert!(v["message"].as_str().unwrap_or("").starts_with(path), "{v}");
            assert!(starts.is_empty());
        }
    }
    let warnings = out.events_of("workflow/warning");
    match warning {
        Some(path) => assert!(
            warnings.iter().any(|w| w["path"] == path),
            "a warning at {path:?}: {warnings:?}"
        ),
        None => assert!(warnings.is_empty(), "{warnings:?}"),
    }
}

/// Issue 33 §3: what Claude Code refuses before launch for its resume —
/// `Math.random()`, `Date.now()`, an argument-less `new Date()` or
/// `Date()` — and the promise items of `parallel()` it refuses, dsh
/// accepts (contract §0), each with one warning per run; `Date` stays
/// `Date` otherwise.
#[test]
fn nondeterministic_calls_and_promise_items_run_with_a_warning() {
    let script = r#"
const kinds = [typeof Math.random(), typeof Math.random(), typeof Date.now(), typeof new Date(), typeof Date()];
class D extends Date {}
const dates = {
  epoch: new Date(0).toISOString(),
  subclass: new D(0) instanceof Date,
  constructor: new Date(0).constructor === Date,
  utc: Date.UTC(2020, 0, 1),
};
const r = await parallel([agent("echo a"), () => agent("echo b"), agent("echo c")]);
return { kinds, dates, r };
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({
            "kinds": ["number", "number", "number", "object", "string"],
            "dates": { "epoch": "1970-01-01T00:00:00.000Z", "subclass": true, "constructor": true, "utc": 1577836800000u64 },
            "r": ["echoed", "echoed", "echoed"]
        })
    );
    let mut paths: Vec<&str> = out
        .events_of("workflow/warning")
        .iter()
        .map(|w| w["path"].as_str().unwrap_or(""))
        .collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "Date()",
            "Date.now()",
            "Math.random()",
            "new Date()",
            "parallel"
        ]
    );
}

#[test]
fn explicit_label_wins() {
    let fx = fixture(json!([{ "match": { "label": "mine" }, "text": "ok" }]));
    let out = run_ts(
        r#"return await agent("a prompt that would default differently", { label: "mine" });"#,
        &fx,
        &[],
    );
    out.assert_code(0);
    assert_eq!(out.events_of("workflow/agent-start")[0]["label"], "mine");
}

/// Issue 33 §3: an empty phase is no phase, as Claude Code attributes it:
/// `phase("")` announces nothing and the calls after it have no phase; a
/// call's `phase: ""` has no phase either, whatever the current one is.
/// Each says so in a warning.
#[test]
fn an_empty_phase_is_no_phase() {
    let script = r#"
phase("Cur");
await agent("echo a", { phase: "" });
await agent("echo b");
phase("");
await agent("echo c");
return "ok";
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let phases: Vec<Value> = out
        .events_of("workflow/agent-start")
        .iter()
        .map(|e| e["phase"].clone())
        .collect();
    assert_eq!(phases, vec![Value::Null, json!("Cur"), Value::Null]);
    let titles: Vec<&Value> = out
        .events_of("workflow/phase")
        .iter()
        .map(|e| &e["title"])
        .collect();
    assert_eq!(titles, vec![&json!("Cur")]);
    let paths: Vec<&Value> = out
        .events_of("workflow/warning")
        .iter()
        .map(|e| &e["path"])
        .collect();
    assert!(paths.contains(&&json!("options.phase")), "{paths:?}");
    assert!(paths.contains(&&json!("phase")), "{paths:?}");
}

#[test]
fn phase_attribution() {
    let fx = fixture(json!([
        { "match": { "phase": "Review" }, "text": "in review" },
        { "match": {}, "text": "elsewhere" }
    ]));
    let script = r#"
export const meta = {
  name: "phased",
  description: "phase attribution",
  phases: [{ title: "Review" }, { title: "Summarize", detail: "wrap up" }],
};
const a0 = await agent("before any phase");
phase("Review");
const a1 = await agent("in the review phase");
const a2 = await agent("explicit phase", { phase: "Other" });
phase("Summarize");
const a3 = await agent("summarizing");
phase("Unlisted");
const a4 = await agent("in an unlisted phase");
return [a0, a1, a2, a3, a4];
"#;
    let out = run_ts(script, &fx, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!([
            "elsewhere",
            "in review",
            "elsewhere",
            "elsewhere",
            "elsewhere"
        ])
    );
    let titles: Vec<&Value> = out
        .events_of("workflow/phase")
        .iter()
        .map(|e| &e["title"])
        .collect();
    assert_eq!(titles, vec!["Review", "Summarize", "Unlisted"]);
    let phases: Vec<&Value> = out
        .events_of("workflow/agent-start")
        .iter()
        .map(|e| &e["phase"])
        .collect();
    assert_eq!(
        phases,
        vec![
            &Value::Null,
            &json!("Review"),
            &json!("Other"),
            &json!("Summarize"),
            &json!("Unlisted")
        ]
    );
    let end_phases: Vec<&Value> = out
        .events_of("workflow/agent-end")
        .iter()
        .map(|e| &e["phase"])
        .collect();
    assert_eq!(phases, end_phases);
    // workflow/start carries the meta as written.
    assert_eq!(
        out.events[0]["meta"],
        json!({
            "name": "phased",
            "description": "phase attribution",
            "phases": [{ "title": "Review" }, { "title": "Summarize", "detail": "wrap up" }]
        })
    );
    // The phase event precedes the agent calls it attributes.
    let types: Vec<&str> = out
        .events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    let first_phase = types.iter().position(|t| *t == "workflow/phase").unwrap();
    let second_start = types
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == "workflow/agent-start")
        .nth(1)
        .unwrap()
        .0;
    assert!(first_phase < second_start);
}

#[test]
fn default_meta_is_the_file_stem() {
    let out = common::run_named("review-files.ts", "return 1;\n", None, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.events[0]["meta"],
        json!({ "name": "review-files", "description": "workflow review-files.ts" })
    );
}

#[test]
fn log_and_console_narration() {
    let script = r#"
log("plain line");
const cyc: any = { a: 1 }; cyc.self = cyc;
console.log("text", 1, { x: [1, "y"] }, new TypeError("bad"), 12n, null, undefined, true);
console.warn(cyc);
console.error("err"); console.info("info"); console.debug("dbg");
return "ok";
"#;
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let logs: Vec<&str> = out
        .events_of("workflow/log")
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(logs[0], "plain line");
    assert_eq!(
        logs[1],
        r#"text 1 {"x":[1,"y"]} TypeError: bad 12 null undefined true"#
    );
    assert!(logs[2].contains("[Circular]"), "{}", logs[2]);
    assert!(!logs[2].contains("[object Object]"), "{}", logs[2]);
    assert_eq!(&logs[3..], &["err", "info", "dbg"]);
}

#[test]
fn globals_timers_and_budget() {
    let script = r#"
const order: string[] = [];
setTimeout(() => order.push("t20"), 20);
setTimeout((a: string, b: string) => order.push(a + b), 0, "t", "0");
const cleared = setTimeout(() => order.push("never"), 5);
clearTimeout(cleared);
await new Promise((r) => setTimeout(r, 40));
const before = { total: budget.total, spent: budget.spent(), remaining: budget.remaining() };
await agent("pay", { label: "spend" });
const after = { spent: budget.spent(), remaining: budget.remaining() };
return {
  order, before, after,
  missing: [typeof process, typeof require, typeof fetch, typeof globalThis.process],
};
"#;
    let out = run_ts(script, &std_fixture(), &["--budget", "25"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({
            "order": ["t0", "t20"],
            "before": { "total": 25, "spent": 0, "remaining": 25 },
            "after": { "spent": 10, "remaining": 15 },
            "missing": ["undefined", "undefined", "undefined", "undefined"]
        })
    );
}

#[test]
fn budget_without_a_limit_is_unbounded() {
    let out = run_ts(
        r#"await agent("pay", { label: "spend" }); return { total: budget.total, spent: budget.spent(), inf: budget.remaining() === Infinity };"#,
        &std_fixture(),
        &[],
    );
    out.assert_code(0);
    assert_eq!(
        out.json(),
        json!({ "total": null, "spent": 10, "inf": true })
    );
}

// ------------------------------------------------------------------ parse, meta, TypeScript

/// Asserts a run that could not start: exit 2, empty stdout, `error[CODE]:`.
#[track_caller]
fn assert_not_started(out: &Output, code: &str) {
    out.assert_code(2);
    assert!(
        out.stdout.is_empty(),
        "stdout must be empty: {:?}",
        out.stdout
    );
    assert!(
        out.stderr.starts_with(&format!("error[{code}]: ")),
        "stderr should start with error[{code}]: {}",
        out.stderr
    );
    assert!(
        out.events.is_empty(),
        "no run, no events: {:#?}",
        out.events
    );
}

#[rstest]
#[case::syntax(
    "wf.ts",
    "const a = 1;\n  let b = ;\n",
    "wf.ts:2:11:",
    "  let b = ;",
    11
)]
#[case::character_columns(
    "wf.ts",
    "const s = \"éé\"; let b = ;\n",
    "wf.ts:1:25:",
    "const s = \"éé\"; let b = ;",
    25
)]
#[case::static_import(
    "wf.ts",
    "// header\nimport fs from \"fs\";\nlog(\"x\");\n",
    "wf.ts:2:1:",
    "import fs from \"fs\";",
    1
)]
#[case::dynamic_import(
    "wf.ts",
    "const m = await import(\"fs\");\n",
    "wf.ts:1:17:",
    "const m = await import(\"fs\");",
    17
)]
#[case::export_other_than_meta(
    "wf.ts",
    "export const x = 1;\n",
    "wf.ts:1:1:",
    "export const x = 1;",
    1
)]
#[case::typescript_in_js(
    "wf.js",
    "const x: number = 1;\n",
    "wf.js:1:",
    "const x: number = 1;",
    0
)]
#[case::unterminated("wf.ts", "log(\"a\");\nconst o = {\n", "wf.ts:", "", 0)]
fn parse_errors_name_the_position_with_a_caret(
    #[case] name: &str,
    #[case] source: &str,
    #[case] position: &str,
    #[case] line: &str,
    #[case] caret_col: usize,
) {
    let out = common::run_named(name, source, None, &[]);
    assert_not_started(&out, "SCRIPT_PARSE");
    let first = out.stderr.lines().next().unwrap_or("");
    assert!(
        first.starts_with(&format!("error[SCRIPT_PARSE]: {position}")),
        "first line should name {position}: {}",
        out.stderr
    );
    if caret_col > 0 {
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(
            lines.get(1).copied(),
            Some(line),
            "the source line, untrimmed: {}",
            out.stderr
        );
        let caret = format!("{}^", " ".repeat(caret_col - 1));
        assert_eq!(
            lines.get(2).copied(),
            Some(caret.as_str()),
            "caret line: {}",
            out.stderr
        );
    }
}

#[test]
fn import_type_is_erased() {
    let script = "import type { Thing } from \"./thing\";\nexport type { Thing };\nconst t: Thing | null = null;\nreturn t;\n";
    let out = run_plain(script, &[]);
    out.assert_code(0);
    assert_eq!(out.json(), Value::Null);
}

#[rstest]
#[case::call(
    "export const meta = {\n  name: \"x\",\n  description: foo(),\n  bogus: 1,\n};\n",
    // `bogus` is a warning of a run that starts (issue 33 §3): not here.
    &["wf.ts:3:16:", "meta.description"]
)]
#[case::identifier("const d = \"x\";\nexport const meta = { name: \"n\", description: d };\n", &["wf.ts:2:", "meta.description"])]
#[case::spread("const base = {};\nexport const meta = { ...base, name: \"n\", description: \"d\" };\n", &["wf.ts:2:"])]
#[case::getter("export const meta = { name: \"n\", get description() { return \"d\"; } };\n", &["wf.ts:1:"])]
#[case::template_substitution("const v = 1;\nexport const meta = { name: `n${v}`, description: \"d\" };\n", &["wf.ts:2:", "meta.name"])]
#[case::schema_violations(
    "export const meta = { name: \"\", description: \"d\", phases: [{ title: \"a\", x: 1 }], whenToUse: 3 };\n",
    // The phase's `x` and `whenToUse: 3` are warnings (issue 33 §3).
    &["meta.name"]
)]
#[case::missing_description("export const meta = { name: \"n\" };\n", &["description"])]
fn meta_errors_list_every_violation(#[case] source: &str, #[case] mentions: &[&str]) {
    let out = common::run_named("wf.ts", source, None, &[]);
    assert_not_started(&out, "META_INVALID");
    assert_mentions(&out.stderr, mentions);
}

/// Issue 33 §3: a meta Claude Code accepts runs — unknown fields such as
/// `examples`, a field given twice, a `whenToUse` or phase of another
/// shape — each a `workflow/warning` at its place in the file (and a
/// stderr line with events off), left out of the run's meta.
#[test]
fn meta_fields_claude_code_accepts_run_with_warnings() {
    let script = "export const meta = {\n  name: \"first\",\n  description: \"d\",\n  examples: [\"run it\"],\n  whenToUse: 3,\n  phases: [\"Review\", { title: \"Sum\", x: 1 }],\n  name: \"n\",\n};\nreturn 1;\n";
    let out = common::run_named("wf.ts", script, None, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let start = &out.events_of("workflow/start")[0];
    assert_eq!(
        start["meta"],
        json!({ "name": "n", "description": "d", "phases": [{ "title": "Sum" }] })
    );
    let warnings: Vec<(String, String)> = out
        .events_of("workflow/warning")
        .iter()
        .map(|w| {
            let message = w["message"].as_str().unwrap_or("");
            (
                w["path"].as_str().unwrap_or("").to_string(),
                message.split(':').next().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want = [
        ("wf.ts:2:3", "meta.name"),
        ("wf.ts:4:3", "meta.examples"),
        ("wf.ts:5:3", "meta.whenToUse"),
        ("wf.ts:6:12", "meta.phases[0]"),
        ("wf.ts:6:38", "meta.phases[1].x"),
    ];
    assert_eq!(
        warnings,
        want.iter()
            .map(|(p, m)| (p.to_string(), m.to_string()))
            .collect::<Vec<_>>()
    );
    // With events off, each is a stderr line.
    let quiet = common::run_named("wf.ts", script, None, &["--events", "none"]);
    quiet.assert_code(0);
    assert!(
        quiet
            .stderr
            .contains("dsh: warning: wf.ts:4:3: meta.examples: unknown field"),
        "{}",
        quiet.stderr
    );
}

#[test]
fn meta_is_data_in_ordinary_object_literal_syntax() {
    let script = "// leading comment\n/* block */\nexport const meta = {\n  name: 'single-quoted', // trailing\n  description: `template without substitutions`,\n  whenToUse: \"when testing\",\n  phases: [{ title: \"A\", detail: 'd', model: \"m\", provider: \"p\" }, ],\n};\nreturn typeof meta;\n";
    let out = run_plain(script, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    // meta is blanked out of the body before execution.
    assert_eq!(out.json(), json!("undefined"));
    assert_eq!(
        out.events[0]["meta"],
        json!({
            "name": "single-quoted",
            "description": "template without substitutions",
            "whenToUse": "when testing",
            "phases": [{ "title": "A", "detail": "d", "model": "m", "provider": "p" }]
        })
    );
}

#[test]
fn typescript_syntax_runs() {
    let script = r#"
import type { Unused } from "./nowhere";
export type Pair<T> = [T, T];
interface Shape { kind: string; size?: number }
enum Color { Red, Green = 5, Blue }
const enum Dir { Up = "UP" }
function first<T>(xs: T[]): T | undefined { return xs[0]; }
const shape = { kind: "sq", size: 2 } satisfies Shape;
const maybe: string | null = "hi" as string | null;
const len = maybe!.length;
abstract class Base { abstract get(): number }
class Impl extends Base {
  constructor(private readonly v: number) { super(); }
  get(): number { return this.v; }
}
declare const nothing: unknown;
namespace NS { export const inner = 4; }
const tuple: Pair<number> = [1, 2];
const fn = <T,>(x: T): T => x;
let definite!: number;
definite = 9;
return {
  red: Color.Red, blue: Color.Blue, reverse: Color[5], dir: Dir.Up,
  first: first<number>([7, 8]), kind: shape.kind, len, impl: new Impl(3).get(),
  ns: NS.inner, tuple, id: fn<string>("x"), definite,
};
"#;
    let out = run_plain(script, &[]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({
            "red": 0, "blue": 6, "reverse": "Green", "dir": "UP",
            "first": 7, "kind": "sq", "len": 2, "impl": 3,
            "ns": 4, "tuple": [1, 2], "id": "x", "definite": 9
        })
    );
}

#[rstest]
#[case::js("wf.js")]
#[case::mjs("wf.mjs")]
#[case::mts("wf.mts")]
fn every_script_extension_runs(#[case] name: &str) {
    let out = common::run_named(
        name,
        "const x = [1, 2].map((n) => n * 2);\nreturn x;\n",
        None,
        &[],
    );
    out.assert_code(0);
    assert_eq!(out.json(), json!([2, 4]));
}

// ------------------------------------------------------------------ check, types

#[test]
fn check_prints_name_and_description_without_running() {
    // The body would spin forever if it ran.
    let ws = Workspace::new(
        "wf.ts",
        "export const meta = { name: \"checked\", description: \"a checked workflow\" };\nwhile (true) {}\n",
        None,
    );
    let (stdout, stderr, code) = dsh_in(ws.dir.path(), &["workflow", "check", "wf.ts"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "checked\na checked workflow\n");
    let ws = Workspace::new("plain-name.ts", "return 1;\n", None);
    let (stdout, _, code) = dsh_in(ws.dir.path(), &["workflow", "check", "plain-name.ts"]);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "plain-name\nworkflow plain-name.ts\n");
}

/// Issue 33 §3: a meta field Claude Code accepts and dsh does not use is
/// no error for `check` either; it says so on stderr, as a run would.
#[test]
fn check_says_what_the_meta_carries_in_warnings() {
    let ws = Workspace::new(
        "wf.ts",
        "export const meta = { name: \"n\", description: \"d\", examples: [\"x\"] };\nreturn 1;\n",
        None,
    );
    let (stdout, stderr, code) = dsh_in(ws.dir.path(), &["workflow", "check", "wf.ts"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "n\nd\n");
    assert!(
        stderr.contains("dsh: warning: wf.ts:1:52: meta.examples: unknown field"),
        "{stderr}"
    );
}

#[rstest]
#[case::parse("let = ;\n", "SCRIPT_PARSE")]
#[case::meta(
    "export const meta = { name: 1, description: \"d\" };\n",
    "META_INVALID"
)]
#[case::import("import x from \"y\";\n", "SCRIPT_PARSE")]
fn check_errors_exit_2(#[case] source: &str, #[case] code: &str) {
    let ws = Workspace::new("wf.ts", source, None);
    let (stdout, stderr, status) = dsh_in(ws.dir.path(), &["workflow", "check", "wf.ts"]);
    assert_eq!(status, Some(2));
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with(&format!("error[{code}]: wf.ts:")),
        "{stderr}"
    );
}

#[test]
fn check_of_a_missing_file_is_usage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, stderr, status) = dsh_in(dir.path(), &["workflow", "check", "missing.ts"]);
    assert_eq!(status, Some(2));
    assert!(stdout.is_empty());
    assert!(stderr.starts_with("error[USAGE]: "), "{stderr}");
}

#[test]
fn types_prints_the_declarations_of_the_globals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, stderr, status) = dsh_in(dir.path(), &["workflow", "types"]);
    assert_eq!(status, Some(0), "{stderr}");
    for decl in [
        "declare function agent",
        "declare function parallel",
        "declare function pipeline",
        "declare function phase",
        "declare function log",
        "declare const args",
        "declare const budget",
        "declare function setTimeout",
        "declare function clearTimeout",
        "WorkflowError",
        "console",
    ] {
        assert!(stdout.contains(decl), "missing {decl:?} in:\n{stdout}");
    }
}

/// `dsh workflow types` declares every keyword the schema check accepts
/// (it once knew 13 of them, so an editor flagged `minItems` in a schema
/// dsh runs), and types `fatal` by `code`.
#[test]
fn types_declare_the_whole_schema_vocabulary_and_fatal_by_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, stderr, status) = dsh_in(dir.path(), &["workflow", "types"]);
    assert_eq!(status, Some(0), "{stderr}");
    let start = stdout
        .find("type WorkflowSchema = {")
        .expect("WorkflowSchema");
    let body = &stdout[start..];
    let body = &body[..body.find("\n};").expect("end of WorkflowSchema")];
    for keyword in dsh_protocol::schema::keywords() {
        assert!(
            body.contains(&format!("\n  {keyword}?: ")),
            "WorkflowSchema lacks {keyword:?}:\n{body}"
        );
    }
    for decl in [
        "WorkflowErrorOf<RunLevelCode, true>",
        "WorkflowErrorOf<OrdinaryCode, false>",
        "type RunLevelCode = \"BUDGET\" | \"CANCELLED\" | \"TIMEOUT\" | \"MEMORY\" | \"WORKER_EXITED\" | \"SANDBOX_UNAVAILABLE\";",
    ] {
        assert!(stdout.contains(decl), "missing {decl:?} in:\n{stdout}");
    }
}

// ------------------------------------------------------------------ usage and fixtures

#[rstest]
#[case::unknown_flag(&["--bogus"], "--bogus")]
#[case::zero_concurrency(&["--max-concurrent", "0"], "--max-concurrent")]
#[case::agents_above_ceiling(&["--max-agents", "1001"], "--max-agents")]
#[case::bad_duration(&["--timeout", "5x"], "5x")]
#[case::bad_grace(&["--grace", "soon"], "soon")]
#[case::negative_number(&["--max-concurrent", "-1"], "-1")]
#[case::bad_args_json(&["--args", "{bad"], "--args")]
#[case::args_text_given_as_json(&["--args", "fix the bug"], "use --args-text instead")]
#[case::two_args_sources(&["--args", "1", "--args-text", "x"], "--args")]
#[case::missing_args_file(&["--args-file", "nope.json"], "nope.json")]
#[case::bad_events_mode(&["--events", "xml"], "xml")]
#[case::bad_output_mode(&["--output", "everything"], "everything")]
#[case::bad_sandbox(&["--sandbox", "maximal"], "maximal")]
fn usage_errors_exit_2(#[case] flags: &[&str], #[case] mentions: &str) {
    let out = Workspace::new("wf.ts", "return 1;\n", None).run(flags);
    assert_not_started(&out, "USAGE");
    assert!(
        out.stderr.contains(mentions),
        "should mention {mentions:?}: {}",
        out.stderr
    );
}

#[rstest]
#[case::missing_script(&["workflow", "run", "missing.ts"])]
#[case::wrong_extension(&["workflow", "run", "notes.txt"])]
#[case::no_script(&["workflow", "run"])]
#[case::unknown_subcommand(&["workflow", "launch", "wf.ts"])]
fn usage_errors_without_a_runnable_script(#[case] args: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), "return 1;").expect("write");
    let (stdout, stderr, status) = dsh_in(dir.path(), args);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.starts_with("error[USAGE]: "), "{stderr}");
}

#[test]
fn a_script_over_one_mib_is_script_too_large() {
    let mut script = String::from("return 1;\n");
    script.push_str(&"// padding padding padding padding padding padding\n".repeat(21_000));
    assert!(script.len() > 1024 * 1024);
    let out = run_plain(&script, &[]);
    assert_not_started(&out, "SCRIPT_TOO_LARGE");
    assert!(out.stderr.contains("wf.ts"), "{}", out.stderr);
}

#[rstest]
#[case::plain_seconds(&["--timeout", "30"])]
#[case::compound(&["--timeout", "1h30m", "--grace", "2s"])]
#[case::millis(&["--timeout", "20s", "--grace", "500ms"])]
fn durations_are_accepted(#[case] flags: &[&str]) {
    let out = Workspace::new("wf.ts", "return 1;\n", None).run(flags);
    out.assert_code(0);
    assert_eq!(out.json(), json!(1));
}

#[rstest]
#[case::several_outcomes(r#"{"version":1,"answers":[{"match":{},"text":"a"},{"match":{},"text":"a","fail":"b"}]}"#, &["answers[1]", "several outcomes"])]
#[case::no_outcome(r#"{"version":1,"answers":[{"match":{}}]}"#, &["answers[0]", "outcome"])]
#[case::unknown_key(r#"{"version":1,"answers":[{"match":{},"txt":"a"}]}"#, &["answers[0]", "txt"])]
#[case::unknown_match_key(r#"{"version":1,"answers":[{"match":{},"text":"a"},{"match":{},"text":"b"},{"match":{"title":"t"},"text":"c"}]}"#, &["answers[2]", "title"])]
#[case::bad_regex(r#"{"version":1,"answers":[{"match":{"promptMatches":"("},"text":"a"}]}"#, &["answers[0]", "promptMatches"])]
#[case::bad_version(r#"{"version":2,"answers":[]}"#, &["version"])]
#[case::not_json(r#"{"version":1,"answers":["#, &["fixture.json"])]
fn invalid_fixture_exits_2_naming_the_entry(#[case] text: &str, #[case] mentions: &[&str]) {
    let ws = Workspace::new("wf.ts", "log(\"must not run\");\nreturn 1;\n", None);
    ws.file("fixture.json", text);
    let out = ws.run(&["--fixture", "fixture.json"]);
    assert_not_started(&out, "FIXTURE_INVALID");
    assert_mentions(&out.stderr, mentions);
}

// ------------------------------------------------------------------ timeouts

#[test]
fn timeout_with_a_hung_child_exits_124_with_paired_ends() {
    let out = run_ts(
        "log(\"waiting\");\nconst r = await agent(\"stuck\", { label: \"hang\" });\nreturn r;\n",
        &std_fixture(),
        &["--timeout", "1s", "--output", "result"],
    );
    out.assert_code(124);
    out.assert_error_line("TIMEOUT");
    let result = out.json();
    assert_eq!(result["stopReason"], "cancelled");
    assert_eq!(result["error"]["code"], "TIMEOUT");
    assert_eq!(result["value"], Value::Null);
    assert_event_guarantees(&out.events);
    assert_eq!(out.events_of("workflow/agent-start").len(), 1);
    assert_eq!(
        outcomes(&out.events).get(&1).map(String::as_str),
        Some("cancelled")
    );
    let end = out.events.last().unwrap();
    assert_eq!(end["stopReason"], "cancelled");
    assert_eq!(end["error"]["code"], "TIMEOUT");
}

#[test]
fn timeout_with_a_child_behind_a_wedged_script_exits_124_with_paired_ends() {
    // The script spins after the call started: the host cancels the child
    // itself, and the in-worker interrupt stops the script.
    let out = run_ts(
        WEDGED_AFTER_CALL,
        &std_fixture(),
        &["--timeout", "2s", "--output", "result"],
    );
    out.assert_code(124);
    out.assert_error_line("TIMEOUT");
    let result = out.json();
    assert_eq!(result["stopReason"], "cancelled");
    assert_eq!(result["error"]["code"], "TIMEOUT");
    assert_eq!(result["agentsStarted"], 2);
    assert_event_guarantees(&out.events);
    assert_eq!(
        outcomes(&out.events).get(&1).map(String::as_str),
        Some("cancelled")
    );
}

#[rstest]
#[case::pending_promise("log(\"parked\");\nawait new Promise(() => {});\n")]
#[case::spinning_after_await("await null;\nwhile (true) {}\n")]
#[case::spinning_in_a_timer("await new Promise((r) => setTimeout(r, 10));\nfor (;;) {}\n")]
fn timeout_stops_scripts_that_never_settle(#[case] script: &str) {
    let out = run_plain(script, &["--timeout", "500ms", "--output", "result"]);
    out.assert_code(124);
    out.assert_error_line("TIMEOUT");
    assert_event_guarantees(&out.events);
    let result = out.json();
    assert_eq!(result["stopReason"], "cancelled");
    assert_eq!(result["error"]["code"], "TIMEOUT");
    assert_eq!(result["value"], Value::Null);
    assert_eq!(out.events.last().unwrap()["error"]["code"], "TIMEOUT");
}

#[rstest]
#[case::top_level("while (true) {}\n")]
#[case::in_a_timer("setTimeout(() => { for (;;) {} }, 0);\nawait new Promise(() => {});\n")]
fn sync_timeout_is_an_error_with_exit_1(#[case] script: &str) {
    let out = run_plain(script, &["--sync-timeout", "300ms", "--output", "result"]);
    let msg = assert_error_run(&out, "TIMEOUT");
    assert!(msg.contains("300"), "{msg}");
    let result = out.json();
    assert_eq!(result["stopReason"], "error");
    assert_eq!(result["error"]["code"], "TIMEOUT");
}

// ------------------------------------------------------------------ signals

/// The worker: the one live child process of the dsh process.
#[track_caller]
fn worker_of(dsh_pid: u32) -> u32 {
    let kids = children_of(dsh_pid);
    assert_eq!(
        kids.len(),
        1,
        "dsh {dsh_pid} should have exactly one child (the worker): {kids:?}"
    );
    kids[0]
}

/// Starts a call that hangs (seq 1), then spins in the very slice that
/// delivers the answer of seq 2. The host sends that answer before any later
/// Cancel on the same ordered socket, so once seq 2's agent-end is in the
/// events file, a signal is guaranteed to find the script wedged.
const WEDGED_AFTER_CALL: &str = "const p = agent(\"stuck\", { label: \"hang\" });\np.catch(() => {});\nawait agent(\"echo quick\");\nwhile (true) {}\n";

/// Waits until the [`WEDGED_AFTER_CALL`] script is spinning.
fn wait_until_wedged(running: &mut common::Running) {
    running.wait_for_event("the hanging agent-start", |e| {
        e["type"] == "workflow/agent-start" && e["label"] == "hang"
    });
    running.wait_for_event("the quick agent-end", |e| {
        e["type"] == "workflow/agent-end" && e["label"] == "echo quick"
    });
}

#[test]
fn sigint_while_a_child_hangs_cancels_with_exit_130() {
    let mut running = Workspace::new(
        "wf.ts",
        "log(\"waiting\");\nconst r = await agent(\"stuck\", { label: \"hang\" });\nreturn r;\n",
        Some(&std_fixture()),
    )
    .spawn(&["--output", "result", "--grace", "10s"]);
    running.wait_for_event("agent-start", |e| e["type"] == "workflow/agent-start");
    let worker = worker_of(running.pid());
    running.signal(libc::SIGINT);
    let out = running.finish();
    out.assert_code(130);
    out.assert_error_line("CANCELLED");
    assert_cancelled_with_child_1_cancelled(&out);
    assert_process_gone(worker);
}

#[rstest]
#[case::sigint(libc::SIGINT)]
#[case::sigterm(libc::SIGTERM)]
fn a_signal_cancels_a_wedged_run_with_exit_130(#[case] sig: libc::c_int) {
    let mut running = Workspace::new("wf.ts", WEDGED_AFTER_CALL, Some(&std_fixture()))
        .spawn(&["--output", "result", "--grace", "10s"]);
    wait_until_wedged(&mut running);
    let worker = worker_of(running.pid());
    running.signal(sig);
    let out = running.finish();
    out.assert_code(130);
    out.assert_error_line("CANCELLED");
    let result = out.json();
    assert_eq!(result["stopReason"], "cancelled");
    assert_eq!(result["error"]["code"], "CANCELLED");
    assert_eq!(result["value"], Value::Null);
    assert_eq!(result["agentsStarted"], 2);
    assert_event_guarantees(&out.events);
    assert_eq!(
        outcomes(&out.events).get(&1).map(String::as_str),
        Some("cancelled")
    );
    assert_process_gone(worker);
}

#[test]
fn sigint_on_a_parked_script_exits_130() {
    let mut running = Workspace::new(
        "wf.ts",
        "log(\"parked\");\nawait new Promise(() => {});\n",
        None,
    )
    .spawn(&["--output", "result"]);
    running.wait_for_event("the parked log", |e| e["message"] == "parked");
    let worker = worker_of(running.pid());
    running.signal(libc::SIGINT);
    let out = running.finish();
    out.assert_code(130);
    let result = out.json();
    assert_eq!(result["stopReason"], "cancelled");
    assert_eq!(result["error"]["code"], "CANCELLED");
    assert_event_guarantees(&out.events);
    assert_process_gone(worker);
}

/// The worker `dsh workflow run` forks for itself before its runtime
/// starts (no second exec of `dsh`) is the process a spawned one would
/// be: a process group of its own, in `/`, none of the command line's
/// environment (not even as zeroed names in `/proc/PID/environ`), none of
/// the descriptors `dsh` inherited, `no_new_privs` set by its sandbox.
#[test]
fn the_forked_worker_keeps_nothing_of_the_command_line() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let ws = Workspace::new(
        "wf.ts",
        "log(\"parked\");\nawait new Promise(() => {});\n",
        None,
    )
    .with_env("DSH_TEST_SECRET", "hunter2-in-the-environment");
    let inherited = tempfile::tempfile().expect("temp file");
    let fd = inherited.as_raw_fd();
    let inherited_target =
        std::fs::read_link(format!("/proc/self/fd/{fd}")).expect("the temp file's link");
    let mut cmd = ws.command(&["--output", "result"]);
    // SAFETY: fcntl only, async-signal-safe, in the child before exec:
    // `dsh` inherits the descriptor as a badly behaved parent would leave it.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    let mut running = common::Running::adopt(cmd.spawn().expect("spawn dsh"), ws);
    running.wait_for_event("the parked log", |e| e["message"] == "parked");
    let dsh = running.pid();
    let worker = worker_of(dsh);
    let dsh_fds: Vec<_> = std::fs::read_dir(format!("/proc/{dsh}/fd"))
        .expect("dsh's descriptors")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .collect();
    assert!(
        dsh_fds.contains(&inherited_target),
        "the test's own premise: dsh inherited {inherited_target:?}: {dsh_fds:?}"
    );

    let environ = std::fs::read(format!("/proc/{worker}/environ")).expect("environ");
    let text = String::from_utf8_lossy(&environ);
    assert!(
        !text.contains("DSH_TEST_SECRET") && !text.contains("hunter2") && !text.contains("PATH="),
        "the worker's environment: {text:?}"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{worker}/cwd")).expect("cwd"),
        std::path::PathBuf::from("/")
    );
    let (_, ppid, pgrp) = common::proc_stat(worker).expect("the worker's stat");
    assert_eq!(ppid, dsh, "dsh's child");
    assert_eq!(pgrp, worker, "a process group of its own");
    let fds: Vec<_> = std::fs::read_dir(format!("/proc/{worker}/fd"))
        .expect("the worker's descriptors")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .collect();
    assert!(
        !fds.contains(&inherited_target),
        "the worker kept dsh's inherited descriptor: {fds:?}"
    );
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).expect("status");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");

    running.signal(libc::SIGINT);
    let out = running.finish();
    out.assert_code(130);
    assert_process_gone(worker);
    drop(inherited);
}

#[test]
fn two_sigints_still_print_the_result_and_leave_no_worker() {
    // A long grace: only the second signal can make this quick.
    let mut running = Workspace::new("wf.ts", WEDGED_AFTER_CALL, Some(&std_fixture()))
        .spawn(&["--output", "result", "--grace", "30s"]);
    wait_until_wedged(&mut running);
    let worker = worker_of(running.pid());
    running.signal(libc::SIGINT);
    // The first signal was handled once the host cancelled the child.
    running.wait_for_event("the cancelled agent-end", |e| {
        (e["type"] == "workflow/agent-end" && e["seq"] == 1) || e["type"] == "workflow/end"
    });
    if !running.exited() {
        running.signal(libc::SIGINT);
    }
    let out = running.finish();
    out.assert_code(130);
    assert_cancelled_with_child_1_cancelled(&out);
    assert_process_gone(worker);
}

/// A cancelled run (`CANCELLED`) whose call #1 ended `cancelled`, with every
/// event guarantee intact.
#[track_caller]
fn assert_cancelled_with_child_1_cancelled(out: &Output) {
    let result = out.json();
    assert_eq!(result["stopReason"], "cancelled");
    assert_eq!(result["error"]["code"], "CANCELLED");
    assert_event_guarantees(&out.events);
    assert_eq!(
        outcomes(&out.events).get(&1).map(String::as_str),
        Some("cancelled")
    );
}

// ------------------------------------------------------------------ children never awaited

#[test]
fn a_child_never_awaited_is_disposed_with_a_paired_agent_end() {
    let script = "agent(\"never awaited\", { label: \"hang\" }).catch(() => {});\nconst other = await agent(\"echo meanwhile\");\nawait new Promise((r) => setTimeout(r, 50));\nreturn other;\n";
    let out = run_ts(script, &std_fixture(), &[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!("echoed"));
    let starts = out.events_of("workflow/agent-start");
    assert!(
        starts.iter().any(|e| e["label"] == "hang"),
        "the never-awaited child started: {:#?}",
        out.events
    );
    assert_event_guarantees(&out.events);
    let end = out.events.last().unwrap();
    assert_eq!(end["stopReason"], "completed");
}

#[test]
fn events_jsonl_on_stderr_matches_the_events_file() {
    let out = run_ts(
        "phase(\"P\");\nlog(\"hello\");\nreturn await agent(\"echo\");\n",
        &std_fixture(),
        &["--events", "jsonl"],
    );
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let from_stderr: Vec<Value> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("jsonl line"))
        .collect();
    assert_eq!(from_stderr, out.events);
    let types: Vec<&str> = out
        .events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec![
            "workflow/start",
            "workflow/phase",
            "workflow/log",
            "workflow/agent-start",
            "workflow/agent-end",
            "workflow/end"
        ]
    );
    // Field names of §8.
    let start = &out.events[3];
    for k in ["runId", "seq", "label", "phase", "childId", "t"] {
        assert!(start.get(k).is_some(), "agent-start has {k}: {start}");
    }
    assert_eq!(start["phase"], "P");
    let _ = events_of(&out.events, "workflow/end");
}

#[test]
fn console_formats_nested_bigints_as_digits_and_errors_by_name() {
    let out = run_plain(
        r#"console.log({ x: [1, 2n], e: new TypeError("bad") }, 7n, new Error("top")); return 1;"#,
        &[],
    );
    out.assert_code(0);
    let logs: Vec<String> = out
        .events_of("workflow/log")
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        logs,
        vec![r#"{"x":[1,2],"e":"TypeError: bad"} 7 Error: top"#.to_string()]
    );
}

#[test]
fn narration_before_a_wedged_loop_is_delivered_before_the_timeout() {
    let out = run_plain(
        r#"log("before the loop"); while (true) {}"#,
        &["--timeout", "500ms"],
    );
    out.assert_code(124);
    let logs = out.events_of("workflow/log");
    assert_eq!(
        logs.len(),
        1,
        "the line logged before the cancel arrives: {:?}",
        out.events
    );
    assert_eq!(logs[0]["message"], "before the loop");
    assert_event_guarantees(&out.events);
}

#[test]
fn log_limit_replaces_the_crossing_line_with_one_marker() {
    let out = run_plain(
        r#"for (let i = 0; i < 6; i++) log("line number " + i); return 1;"#,
        &["--log-limit", "30", "--output", "result"],
    );
    out.assert_code(0);
    let logs: Vec<&str> = out
        .events_of("workflow/log")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert_eq!(
        logs,
        vec![
            "line number 0",
            "line number 1",
            "[log truncated: limit of 30 bytes reached]"
        ]
    );
    assert_eq!(out.json()["logBytesDropped"], 52);
    let end = out.events_of("workflow/end");
    assert_eq!(end[0]["logBytesDropped"], 52);
}

#[test]
fn a_missing_fixture_file_is_a_usage_error() {
    let out = run_plain("return 1;", &["--fixture", "does-not-exist.json"]);
    out.assert_code(2);
    assert!(out.stdout.is_empty(), "stdout stays empty: {}", out.stdout);
    assert!(
        out.stderr
            .contains("error[USAGE]: --fixture does-not-exist.json: cannot read"),
        "{}",
        out.stderr
    );
}

#[test]
fn dropped_rejections_never_crash_the_run() {
    // Rejected promises nobody handles — a plain one, a failed agent call
    // never awaited, a fatal one from a misused hook — are not crashes.
    let out = run_ts(
        r#"
        Promise.reject(new Error("nobody listens"));
        agent("x", { model: 5 } as any);
        parallel("not an array" as any);
        const never = agent("echo dropped");
        return "still fine";
        "#,
        &std_fixture(),
        &["--output", "result"],
    );
    out.assert_code(0);
    assert_eq!(out.json()["value"], "still fine");
    assert_event_guarantees(&out.events);
}

#[test]
fn phase_events_are_capped_per_run() {
    let out = run_plain(
        r#"for (let i = 0; i < 10050; i++) phase("p" + i); return 1;"#,
        &["--events", "none"],
    );
    out.assert_code(0);
    assert_eq!(out.events_of("workflow/phase").len(), 10_000);
    assert_event_guarantees(&out.events);
}

/// A value nested deeper than a run directory can read back used to
/// complete and then show as `interrupted` (126–127 levels) — now the
/// limit is one: 125 levels in, 125 levels out, and every run it accepts
/// `runs`, `show` and `resume` can read.
#[rstest::rstest]
#[case::fits(125, 0, "completed")]
#[case::too_deep(126, 1, "error")]
#[case::far_too_deep(400, 1, "error")]
fn return_values_are_kept_only_as_deep_as_they_can_be_read_back(
    #[case] depth: usize,
    #[case] code: i32,
    #[case] status: &str,
) {
    let script = format!("let v = 1; for (let i = 0; i < {depth}; i++) v = [v]; return v;");
    let ws = Workspace::new("wf.ts", &script, None);
    let out = ws.run(&["--output", "result"]);
    out.assert_code(code);
    if code != 0 {
        out.assert_error_line("RESULT_UNSERIALIZABLE");
        let msg = out.json()["error"]["message"].to_string();
        assert!(msg.contains("levels deep; dsh keeps at most 125"), "{msg}");
    }
    let (list, _, rc) = dsh_in(out.dir.path(), &["workflow", "runs"]);
    assert_eq!(rc, Some(0));
    let row = list.lines().nth(1).unwrap_or_default();
    assert!(row.contains(status), "runs says: {list}");
    let run = common::only_run_id(out.dir.path());
    let (shown, err, rc) = dsh_in(out.dir.path(), &["workflow", "show", &run]);
    assert_eq!(rc, Some(0), "{err}");
    assert!(shown.contains(status), "{shown}");
}

#[test]
fn args_nested_deeper_than_a_run_directory_keeps_are_a_usage_error() {
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let script = "return Array.isArray(args);";
    let ok = Workspace::new("wf.ts", script, None);
    let args = nested(125);
    let out = ok.run(&["--args", &args, "--output", "result"]);
    out.assert_code(0);
    let run = common::only_run_id(out.dir.path());
    let (shown, err, rc) = dsh_in(out.dir.path(), &["workflow", "show", &run]);
    assert_eq!(
        rc,
        Some(0),
        "a run with 125-deep args must read back: {err}"
    );
    assert!(shown.contains("completed"), "{shown}");

    let ws = Workspace::new("wf.ts", script, None);
    let path = ws.file("args.json", &nested(126));
    let out = ws.run(&["--args-file", path.to_str().expect("utf-8 path")]);
    out.assert_code(2);
    out.assert_error_line("USAGE");
    assert!(
        out.stderr.contains(
            "--args-file: the JSON nests arrays and objects 126 levels deep; at most 125"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn a_return_value_of_exactly_the_frame_limit_says_what_is_over_it() {
    // The JSON text of the string is 16 MiB exactly; the frame around it
    // is a little more.
    let out = run_plain(
        r#"return "x".repeat(16 * 1024 * 1024 - 2);"#,
        &["--output", "result", "--no-journal"],
    );
    out.assert_code(1);
    out.assert_error_line("RESULT_UNSERIALIZABLE");
    let msg = out.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("is 16777216 bytes of JSON; with the message around it that is 1677"),
        "{msg}"
    );
    assert!(
        msg.contains("over the protocol's frame limit of 16777216 bytes"),
        "{msg}"
    );
}

/// Contract §0/§3 (revision 2): what Claude Code accepts, dsh accepts and
/// says so — one `workflow/warning` (and stderr line) per distinct cause,
/// naming the path.
#[test]
fn dubious_calls_claude_code_accepts_run_with_a_warning_each() {
    let script = r#"
const a = await agent("", { label: "empty" });
const b = await agent(42 as any, { label: "number" });
const c = await agent("echo c", { temperature: 0.2, tools: [] } as any);
const d = await agent("echo d", { isolation: "vm" } as any);
const e = await agent("echo e", { stallMs: 500, disallowedTools: ["Write"], bashCommandClamp: ["Bash(ls)"], sharedHeadLength: 100 } as any);
const f = await agent("x", { label: "structured", schema: { type: "object", default: NaN } as any });
const again = await agent("echo again", { temperature: 1 } as any);
return [a, b, c, d, e, f, again];
"#;
    let fx = fixture(json!([
        { "match": { "label": "empty" }, "text": "got empty" },
        { "match": { "prompt": "42" }, "text": "got 42" },
        { "match": { "label": "structured" }, "structured": { "ok": true } },
        { "match": { "promptContains": "echo" }, "text": "echoed" }
    ]));
    let out = run_ts(script, &fx, &["--output", "result"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json()["value"],
        json!(["got empty", "got 42", "echoed", "echoed", "echoed", { "ok": true }, "echoed"])
    );
    let warnings: Vec<(String, String)> = out
        .events_of("workflow/warning")
        .iter()
        .map(|w| {
            (
                w["path"].as_str().unwrap_or_default().to_string(),
                w["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let paths: Vec<&str> = warnings.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "prompt",
            "prompt",
            "options.temperature",
            "options.tools",
            "options.isolation",
            "options.schema.default"
        ],
        "one warning per distinct cause, the repeated temperature once: {warnings:#?}"
    );
    assert!(warnings[0].1.contains("empty"), "{warnings:?}");
    assert!(warnings[1].1.contains("a number"), "{warnings:?}");
    assert!(
        warnings[2].1.contains("unknown agent() option, ignored"),
        "{warnings:?}"
    );
    for (path, _) in &warnings {
        assert!(
            out.stderr.contains(&format!("dsh: warning: {path}: ")),
            "{}",
            out.stderr
        );
    }
}
