//! A workflow script is model-written code: before it calls a hook it may
//! tamper with any JavaScript built-in. The hooks must behave exactly as
//! without the tampering (docs/scripts.md, "Tampering with built-ins").
//!
//! Each case below runs the same body behind one tampering prefix and must
//! produce the same value, agent events and narration as an untampered
//! control run. What capturing cannot defend is locked (`then`/`toJSON` on
//! `Object.prototype` and `Array.prototype`, `constructor` on
//! `Promise.prototype`): assigning those ends the run as a clean
//! `SCRIPT_ERROR` that names the lock.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::{Output, assert_event_guarantees, events_of, fixture, run_ts};
use rstest::rstest;
use serde_json::{Value, json};

/// Every hook, each once: agent() with text and structured answers,
/// parallel(), pipeline(), phase(), log(), console.log().
const BODY: &str = r#"
const a = await agent("x");
const b = await parallel([() => agent("y"), () => agent("z")]);
const p = await pipeline([1, 2], (x: number) => agent("p" + x), (r: any) => r + "!");
const c = await agent("q", { label: "s", schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] } });
phase("ph");
log("still fine");
console.log("c", { x: 1 }, [1n, new Error("e")]);
return { a, b, p, c };
"#;

fn tamper_fixture() -> Value {
    fixture(json!([
        { "match": { "label": "s" }, "structured": { "ok": true }, "times": 100 },
        { "match": { "label": "t" }, "structured": { "then": "t", "toJSON": "j" }, "times": 100 },
        { "match": { "label": "hang" }, "hang": true, "times": 100 },
        { "match": {}, "text": "echoed", "times": 100 }
    ]))
}

fn run(script: &str) -> Output {
    run_ts(script, &tamper_fixture(), &[])
}

/// Most of the tamperings below at once (not the locked properties). It
/// saves `Promise` and `Error` as `P` and `E` for the script's own use.
const KITCHEN_SINK: &str = r#"
const P = Promise, E = Error, arrayIteratorProto = Object.getPrototypeOf([][Symbol.iterator]());
for (const m of ["push", "pop", "shift", "slice", "splice", "join", "indexOf", "map", "filter", "forEach", "fill", "concat"]) {
  (Array.prototype as any)[m] = () => { throw new E("Array.prototype." + m); };
}
for (const m of ["indexOf", "slice", "split", "replace", "charCodeAt", "endsWith"]) {
  (String.prototype as any)[m] = () => { throw new E("String.prototype." + m); };
}
for (const k of ["0", "1", "2"]) {
  Object.defineProperty(Array.prototype, k, { __proto__: null, get() { return "forged"; }, set(v: any) {}, configurable: true } as any);
}
for (const k of ["code", "message", "resolve", "reject", "started", "id", "fn", "rest", "value", "get", "set", "length"]) {
  Object.defineProperty(Object.prototype, k, { __proto__: null, get() { throw new E("get " + k); }, set(v: any) { throw new E("set " + k); }, configurable: true } as any);
}
Map.prototype.set = Map.prototype.get = Map.prototype.delete = Set.prototype.add = Set.prototype.has = () => { throw new E("collection"); };
WeakSet.prototype.add = WeakSet.prototype.has = WeakMap.prototype.set = WeakMap.prototype.get = () => { throw new E("weak"); };
Promise.prototype.then = function () { throw new E("then"); } as any;
Object.defineProperty(Promise, Symbol.species, { __proto__: null, get() { throw new E("species"); } } as any);
for (const k of ["Object", "Array", "JSON", "Reflect", "Math", "String", "Error", "Symbol", "Map", "Set", "WeakMap", "WeakSet", "Promise"]) {
  (globalThis as any)[k] = null;
}
Function.prototype.call = Function.prototype.apply = Function.prototype.bind = function () { throw new E("call"); } as any;
arrayIteratorProto.next = () => ({ done: true, value: undefined });
"#;

/// What a run shows from outside: its value, every agent call (seq, label,
/// phase, outcome), the narration in order and the agent count.
fn observed(out: &Output) -> Value {
    let mut agents: Vec<Value> = events_of(&out.events, "workflow/agent-end")
        .into_iter()
        .map(|e| json!([e["seq"], e["label"], e["phase"], e["outcome"]]))
        .collect();
    agents.sort_by_key(|a| a[0].as_u64());
    let narration: Vec<Value> = out
        .events
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("workflow/phase") => Some(json!(["phase", e["title"]])),
            Some("workflow/log") => Some(json!(["log", e["message"]])),
            _ => None,
        })
        .collect();
    let end = out.events.last().expect("events");
    json!({
        "value": out.json(),
        "agents": agents,
        "narration": narration,
        "agentsStarted": end["agentsStarted"],
    })
}

/// The untampered run, once per test binary.
fn control() -> &'static Value {
    static CONTROL: OnceLock<Value> = OnceLock::new();
    CONTROL.get_or_init(|| {
        let out = run(BODY);
        out.assert_code(0);
        assert_event_guarantees(&out.events);
        let seen = observed(&out);
        // Sanity: the control itself is what the body promises.
        assert_eq!(
            seen["value"],
            json!({ "a": "echoed", "b": ["echoed", "echoed"], "p": ["echoed!", "echoed!"], "c": { "ok": true } })
        );
        assert_eq!(seen["agentsStarted"], 6);
        assert_eq!(
            seen["narration"],
            json!([["phase", "ph"], ["log", "still fine"], ["log", "c {\"x\":1} [1,\"Error: e\"]"]])
        );
        seen
    })
}

/// Asserts a run ended `error` with `code` (exit 1, the §8 guarantees);
/// returns the message.
#[track_caller]
fn assert_error(out: &Output, code: &str) -> String {
    out.assert_code(1);
    out.assert_error_line(code);
    assert_event_guarantees(&out.events);
    let end = out.events.last().expect("events");
    assert_eq!(end["stopReason"], "error", "end: {end}");
    assert_eq!(end["error"]["code"], code, "end: {end}");
    end["error"]["message"]
        .as_str()
        .expect("message")
        .to_string()
}

// ------------------------------------------------------------------ same as untampered

#[rstest]
#[case::function_prototype_call(
    r#"Function.prototype.call = function () { throw new Error("call"); };"#
)]
#[case::function_prototype_apply_bind(
    r#"Function.prototype.apply = function () { throw new Error("apply"); };
Function.prototype.bind = function () { throw new Error("bind"); };"#
)]
#[case::array_push(r#"Array.prototype.push = function () { throw new Error("push"); };"#)]
#[case::array_iterator(
    r#"(Array.prototype as any)[Symbol.iterator] = function* () { yield "hacked"; };"#
)]
#[case::array_iterator_next(
    r#"Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({ done: true, value: undefined });"#
)]
#[case::array_methods(
    r#"for (const m of ["forEach", "filter", "slice", "join", "indexOf", "map", "fill", "shift", "splice", "concat", "includes", "pop", "reduce", "some", "every", "find"]) {
  (Array.prototype as any)[m] = () => { throw new Error("Array.prototype." + m); };
}"#
)]
#[case::array_index_accessors(
    r#"for (const k of ["0", "1", "2", "3"]) {
  Object.defineProperty(Array.prototype, k, { __proto__: null, get() { return "forged" + k; }, set(v: any) {}, configurable: true } as any);
}"#
)]
#[case::object_index_accessors(
    r#"Object.defineProperty(Object.prototype, "0", { __proto__: null, get() { throw new Error("get 0"); }, set(v: any) { throw new Error("set 0"); }, configurable: true } as any);"#
)]
#[case::object_prototype_accessors(
    r#"const names = ["code", "fatal", "name", "message", "stack", "label", "phase", "prompt", "schema", "model", "resolve", "reject",
  "started", "childStarted", "id", "plain", "schemaJson", "requestJson", "value", "writable", "get", "set", "enumerable",
  "configurable", "length", "fn", "rest", "__proto__", "constructor", "x", "ok", "add", "has", "delete"];
for (const k of names) {
  Object.defineProperty(Object.prototype, k, { __proto__: null, get() { throw new Error("get " + k); }, set(v: any) { throw new Error("set " + k); }, configurable: true } as any);
}"#
)]
#[case::map_set_weak_collections(
    r#"Map.prototype.set = () => { throw new Error("set"); };
Map.prototype.get = () => undefined;
Map.prototype.delete = () => { throw new Error("delete"); };
Set.prototype.add = () => { throw new Error("add"); };
Set.prototype.has = () => true;
Set.prototype.delete = () => { throw new Error("delete"); };
WeakSet.prototype.add = () => { throw new Error("add"); };
WeakSet.prototype.has = () => true;
WeakMap.prototype.get = () => undefined;
WeakMap.prototype.set = () => { throw new Error("set"); };
WeakMap.prototype.has = () => false;"#
)]
#[case::string_methods(
    r#"for (const m of ["indexOf", "slice", "endsWith", "startsWith", "split", "replace", "replaceAll", "charCodeAt", "codePointAt", "substring", "trim", "concat", "includes"]) {
  (String.prototype as any)[m] = () => { throw new Error("String.prototype." + m); };
}
(String.prototype as any)[Symbol.iterator] = function* () { yield "h"; };
Object.getPrototypeOf(""[Symbol.iterator]()).next = () => ({ done: true, value: undefined });
(String.prototype as any)[Symbol.split] = () => { throw new Error("split"); };"#
)]
#[case::regexp(
    r#"RegExp.prototype.exec = () => null;
RegExp.prototype.test = () => false;
(RegExp.prototype as any)[Symbol.replace] = () => { throw new Error("replace"); };
(RegExp.prototype as any)[Symbol.match] = () => null;"#
)]
#[case::object_statics(
    r#"for (const m of ["keys", "entries", "values", "assign", "create", "defineProperty", "getPrototypeOf", "setPrototypeOf", "freeze",
  "getOwnPropertyNames", "getOwnPropertySymbols", "getOwnPropertyDescriptor", "fromEntries"]) {
  (Object as any)[m] = () => { throw new Error("Object." + m); };
}"#
)]
#[case::reflect(
    r#"for (const m of ["apply", "construct", "defineProperty", "ownKeys", "get", "set", "has", "getPrototypeOf"]) {
  (Reflect as any)[m] = () => { throw new Error("Reflect." + m); };
}"#
)]
#[case::number_and_array_statics(
    r#"Number.isInteger = () => false;
Number.isFinite = () => false;
Array.isArray = (() => false) as any;
Array.from = (() => []) as any;
Math.max = () => -1;"#
)]
#[case::promise_prototype_then(
    r#"Promise.prototype.then = function () { throw new Error("then"); } as any;"#
)]
#[case::promise_prototype_then_not_callable(r#"(Promise.prototype as any).then = 5;"#)]
#[case::promise_statics(
    r#"for (const m of ["resolve", "reject", "all", "allSettled", "race", "any", "withResolvers"]) {
  (Promise as any)[m] = () => { throw new Error("Promise." + m); };
}"#
)]
#[case::promise_species(
    r#"Object.defineProperty(Promise, Symbol.species, { get() { throw new Error("species"); } });"#
)]
#[case::promise_global_null(r#"(globalThis as any).Promise = null;"#)]
#[case::json(
    r#"JSON.stringify = () => "{}";
JSON.parse = () => ({});"#
)]
#[case::error_machinery(
    r#"Error.prototype.toString = () => { throw new Error("toString"); };
(Error as any).stackTraceLimit = { valueOf() { throw new Error("stackTraceLimit"); } };
Object.defineProperty(Error, Symbol.hasInstance, { value: () => true });
(Error as any).captureStackTrace = () => { throw new Error("captureStackTrace"); };"#
)]
#[case::globals_nulled(
    r#"const Error = globalThis.Error; // the body's own `new Error`
for (const k of ["Object", "Array", "JSON", "Reflect", "Math", "String", "Number", "Boolean", "BigInt", "Error", "TypeError",
  "InternalError", "Symbol", "Set", "Map", "WeakMap", "WeakSet", "Function", "Promise", "RegExp"]) {
  (globalThis as any)[k] = null;
}"#
)]
#[case::symbols(
    r#"Object.defineProperty(Object, Symbol.hasInstance, { value: () => true });
(Object.prototype as any)[Symbol.toPrimitive] = () => { throw new Error("toPrimitive"); };
(Object.prototype as any)[Symbol.toStringTag] = "Forged";
(Symbol.prototype as any).toString = () => { throw new Error("Symbol.prototype.toString"); };
(Symbol as any).for = () => { throw new Error("Symbol.for"); };"#
)]
#[case::to_primitive(
    r#"Object.prototype.toString = () => { throw new Error("toString"); };
Object.prototype.valueOf = () => { throw new Error("valueOf"); };
Number.prototype.toString = () => "forged";"#
)]
#[case::frozen_prototypes(
    r#"for (const p of [Object.prototype, Array.prototype, Promise.prototype, Function.prototype, Error.prototype, String.prototype]) {
  Object.freeze(p);
}"#
)]
#[case::reparented_prototypes(
    r#"Object.setPrototypeOf(Array.prototype, { then(r: any) { r(42); }, toJSON() { return "forged"; } });
Object.setPrototypeOf(Promise.prototype, { then(r: any) { r(42); } });"#
)]
#[case::dunder_proto_removed(r#"delete (Object.prototype as any).__proto__;"#)]
#[case::lock_bypass_with_reflect_define(
    r#"Reflect.defineProperty(Object.prototype, "then", { value: (r: any) => r(42) });
Reflect.defineProperty(Array.prototype, "toJSON", { value: () => "forged" });"#
)]
#[case::hooks_overwritten_after_saving_them(
    r#"const agent = globalThis.agent, parallel = globalThis.parallel, pipeline = globalThis.pipeline;
const phase = globalThis.phase, log = globalThis.log, console = globalThis.console;
for (const k of ["agent", "parallel", "pipeline", "phase", "log", "console", "WorkflowError", "budget", "setTimeout"]) {
  (globalThis as any)[k] = () => { throw new Error("overwritten " + k); };
}"#
)]
#[case::hooks_mutated(
    r#"Object.setPrototypeOf(agent, null);
Object.setPrototypeOf(parallel, null);
(agent as any).call = null;
Object.setPrototypeOf(WorkflowError, function () { throw new Error("WorkflowError's parent"); });
(WorkflowError as any).prototype.constructor = null;"#
)]
fn tampering_does_not_change_the_hooks(#[case] tampering: &str) {
    let out = run(&format!("{tampering}\n{BODY}"));
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(&observed(&out), control(), "stderr: {}", out.stderr);
}

// ------------------------------------------------------------------ the locks

#[rstest]
#[case::object_then(
    r#"(Object.prototype as any).then = function (r: any) { r(42); };"#,
    "dsh: Object.prototype.then is locked: an inherited then would hijack every await in the hooks"
)]
#[case::array_then(
    r#"(Array.prototype as any).then = function (r: any) { r(42); };"#,
    "dsh: Array.prototype.then is locked"
)]
#[case::object_to_json(
    r#"(Object.prototype as any).toJSON = function () { return "forged"; };"#,
    "dsh: Object.prototype.toJSON is locked: an inherited toJSON would forge every value the hooks serialize"
)]
#[case::array_to_json(
    r#"(Array.prototype as any).toJSON = function () { return "forged"; };"#,
    "dsh: Array.prototype.toJSON is locked"
)]
#[case::promise_constructor(
    r#"(Promise.prototype as any).constructor = Object;"#,
    "dsh: Promise.prototype.constructor is locked"
)]
#[case::error_prepare_stack_trace(
    r#"(Error as any).prepareStackTrace = (e: any, sites: any[]) => sites;"#,
    "dsh: Error.prepareStackTrace is locked: its call sites would hand the script the hooks' own functions"
)]
#[case::reflect_set(
    r#"Reflect.set(Object.prototype, "toJSON", () => "forged");"#,
    "dsh: Object.prototype.toJSON is locked"
)]
#[case::object_assign(
    r#"Object.assign(Array.prototype, { then: (r: any) => r(42) });"#,
    "dsh: Array.prototype.then is locked"
)]
// Redefining a non-configurable property: the engine's own TypeError.
#[case::define_property(
    r#"Object.defineProperty(Object.prototype, "then", { value: (r: any) => r(42) });"#,
    "TypeError: property is not configurable"
)]
fn assigning_a_locked_property_is_a_script_error(#[case] tampering: &str, #[case] message: &str) {
    let out = run(&format!("{tampering}\n{BODY}"));
    let got = assert_error(&out, "SCRIPT_ERROR");
    assert!(
        got.starts_with("wf.ts:1:"),
        "the position is the assignment: {got}"
    );
    assert!(got.contains(message), "{got:?} should contain {message:?}");
    assert_eq!(out.stdout.trim(), "null");
    assert!(events_of(&out.events, "workflow/agent-start").is_empty());
}

/// Call sites never reach the script: with `Error.prepareStackTrace`
/// locked, a stack taken inside a hook's callback (a parallel thunk, a
/// pipeline stage, a timer) is the engine's string, and none of the hooks'
/// functions (`run`, `gather`, `fireTimer`) can be got hold of to end the
/// run with a forged value.
#[test]
fn the_hooks_own_functions_are_unreachable_through_stack_traces() {
    let script = r#"
const seen: string[] = [];
try {
  Object.defineProperty(Error, "prepareStackTrace", { value: (e: any, s: any[]) => { seen.push("sites"); return s; } });
} catch (e: any) { seen.push("define: " + e.name); }
try { (Error as any).prepareStackTrace = () => { seen.push("sites"); }; } catch (e: any) { seen.push("assign: " + e.name); }
const stacks: string[] = [];
await parallel([() => { stacks.push(typeof new Error("t").stack); return agent("a"); }]);
await pipeline([1], (x: any) => { stacks.push(typeof new Error("t").stack); return x; });
await new Promise<void>((r) => setTimeout(() => { stacks.push(typeof new Error("t").stack); r(); }, 1));
return { seen, stacks, prepare: typeof (Error as any).prepareStackTrace };
"#;
    let out = run(script);
    out.assert_code(0);
    assert_eq!(
        out.json(),
        json!({
            "seen": ["define: TypeError", "assign: TypeError"],
            "stacks": ["string", "string", "string"],
            "prepare": "undefined",
        })
    );
}

/// The lock's visible consequences, and that ordinary objects keep their
/// own `then`/`toJSON` exactly as in plain JavaScript.
#[test]
fn own_then_and_to_json_behave_as_in_plain_javascript() {
    let script = r#"
const checks: any = {};
checks.thenInEmpty = "then" in {};
checks.inheritedThen = ({} as any).then === undefined && ([] as any).toJSON === undefined;
checks.notEnumerable = Object.keys(Object.prototype).length === 0 && JSON.stringify({}) === "{}";
checks.promiseConstructor = Promise.prototype.constructor === Promise && (async () => 1)().constructor === Promise;
class Sub extends Promise<any> {}
checks.subclassConstructor = new Sub(() => {}).constructor === Sub;

const o: any = {};
o.then = 1;
o.toJSON = 2;
checks.ownAssigned = JSON.stringify(Object.getOwnPropertyDescriptor(o, "then")) ===
  '{"value":1,"writable":true,"enumerable":true,"configurable":true}' && o.toJSON === 2;
const frozen: any = Object.freeze({});
frozen.then = 1; // sloppy mode: silently ignored, as without the lock
checks.frozenIgnored = frozen.then === undefined && !Object.prototype.hasOwnProperty.call(frozen, "then");
checks.assign = Object.assign({}, { then: 3 }).then === 3;
checks.literalThenable = await { then(r: any) { r("literal"); } };
class Thenable { then(r: any) { r("class"); } }
checks.classThenable = await new Thenable();
const assigned: any = {};
assigned.then = (r: any) => r("assigned");
checks.assignedThenable = await assigned;
checks.adopted = await (async () => ({ then(r: any) { r("adopted"); } }))();
checks.literalToJSON = JSON.stringify({ toJSON() { return "L"; } });
const arr: any = [1];
arr.toJSON = () => "A";
checks.arrayToJSON = JSON.stringify(arr);
checks.date = JSON.stringify({ d: new Date(0) });
const p: any = Promise.resolve(5);
p.constructor = Object; // an own constructor on one promise: that promise is followed through its then
checks.ownPromiseConstructor = (await p) === 5;

// The value boundary treats own then/toJSON as before: data is data, a
// function is not JSON.
const structured = await agent("t", { label: "t", schema: { type: "object",
  properties: { then: { type: "string" }, toJSON: { type: "string" } }, required: ["then", "toJSON"] } });
checks.structured = structured;
try {
  await agent("q", { label: "s", schema: { type: "object", properties: {}, toJSON() { return {}; } } as any });
  checks.optionToJSON = "accepted";
} catch (e: any) {
  checks.optionToJSON = e.code + ": " + e.message;
}
try {
  await agent("q", { then: 1 } as any);
  checks.optionThen = "accepted";
} catch (e: any) {
  checks.optionThen = e.code;
}
return { checks, data: { then: "x", toJSON: "y" } };
"#;
    let out = run(script);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = out.json();
    assert_eq!(
        v["checks"],
        json!({
            "thenInEmpty": true,
            "inheritedThen": true,
            "notEnumerable": true,
            "promiseConstructor": true,
            "subclassConstructor": true,
            "ownAssigned": true,
            "frozenIgnored": true,
            "assign": true,
            "literalThenable": "literal",
            "classThenable": "class",
            "assignedThenable": "assigned",
            "adopted": "adopted",
            "literalToJSON": "\"L\"",
            "arrayToJSON": "\"A\"",
            "date": "{\"d\":\"1970-01-01T00:00:00.000Z\"}",
            "ownPromiseConstructor": true,
            "structured": { "then": "t", "toJSON": "j" },
            // Lenient as in Claude Code (contract §5, revision 2): the
            // function is left out and the unknown option ignored, each
            // with a warning; data stays data either way.
            "optionToJSON": "accepted",
            "optionThen": "accepted",
        })
    );
    assert_eq!(v["data"], json!({ "then": "x", "toJSON": "y" }));
    let warned: Vec<&Value> = events_of(&out.events, "workflow/warning");
    for path in ["options.schema.toJSON", "options.then"] {
        assert!(
            warned.iter().any(|w| w["path"] == path),
            "{path}: {warned:?}"
        );
    }

    // A returned object with its own callable then is adopted, as any async
    // function's result is.
    let out = run(r#"return { then(r: any) { r({ adopted: true }); } };"#);
    out.assert_code(0);
    assert_eq!(out.json(), json!({ "adopted": true }));
    // A returned object's own toJSON is a function member like any other:
    // left out with a warning (Claude Code's conversion does not call it —
    // a Date becomes {} there too).
    let out = run(r#"return { toJSON() { return 1; }, k: 2 };"#);
    out.assert_code(0);
    assert_eq!(out.json(), json!({ "k": 2 }));
    assert!(
        out.stderr
            .contains("dsh: warning: value.toJSON: a function is not JSON"),
        "{}",
        out.stderr
    );
}

// ------------------------------------------------------------------ hostile arguments

/// Options are read once: the prototype, then each own enumerable key in
/// `Object.keys` order, each getter once; the copy is what is checked and
/// sent. A getter or Proxy trap that throws rejects the call with
/// `INVALID_ARGUMENT` naming where.
#[test]
fn options_full_of_getters_are_read_once() {
    let script = r#"
const reads: any = { label: 0, schema: 0, type: 0, model: 0 };
const options = {
  get label() { reads.label++; return reads.label === 1 ? "s" : "other"; },
  get model() { reads.model++; return undefined; },
  get schema() {
    reads.schema++;
    return {
      get type() { reads.type++; return reads.type === 1 ? "object" : "array"; },
      properties: { ok: { type: "boolean" } },
      required: ["ok"],
    };
  },
};
const c = await agent("q", options);
return { c, reads };
"#;
    let out = run(script);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(
        out.json(),
        json!({ "c": { "ok": true }, "reads": { "label": 1, "schema": 1, "type": 1, "model": 1 } })
    );
    let starts = events_of(&out.events, "workflow/agent-start");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["label"], "s");
}

#[test]
fn options_proxy_that_lies_is_read_once() {
    let script = r#"
const log: string[] = [];
const target = { label: "ignored" };
const lying = new Proxy(target, {
  getPrototypeOf() { log.push("getPrototypeOf"); return Object.prototype; },
  ownKeys() { log.push("ownKeys"); return ["label", "schema"]; },
  getOwnPropertyDescriptor(_t, k) {
    log.push("gopd " + String(k));
    return { value: "unused", writable: true, enumerable: true, configurable: true };
  },
  get(_t, k) {
    log.push("get " + String(k));
    if (k === "label") return log.filter((l) => l === "get label").length === 1 ? "s" : "other";
    if (k === "schema") return { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] };
    return undefined;
  },
});
const c = await agent("q", lying as any);
return { c, log };
"#;
    let out = run(script);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = out.json();
    assert_eq!(v["c"], json!({ "ok": true }));
    assert_eq!(
        v["log"],
        json!([
            "getPrototypeOf",
            "ownKeys",
            "gopd label",
            "gopd schema",
            "get label",
            "get schema"
        ])
    );
    assert_eq!(
        events_of(&out.events, "workflow/agent-start")[0]["label"],
        "s"
    );
}

/// Traps that throw lose what Claude Code's copy of the options loses
/// (issue 33 §3): a prototype that cannot be read leaves the own fields,
/// keys that cannot be listed leave no options, a `get` that throws
/// leaves that option out. The call runs, with a warning at `path`.
#[rstest]
#[case::get_prototype_of_throws(
    "getPrototypeOf() { throw new Error('no proto'); }",
    "p",
    "options",
    "cannot read the options' prototype (Error: no proto)"
)]
#[case::own_keys_throws(
    "ownKeys() { throw new Error('no keys'); }",
    "q",
    "options",
    "cannot list the options (Error: no keys)"
)]
#[case::own_keys_breaks_an_invariant(
    "ownKeys() { return ['label', 'label']; }",
    "q",
    "options",
    "cannot list the options (TypeError"
)]
#[case::get_throws(
    "get(_t: any, k: any) { throw new Error('no ' + String(k)); }",
    "q",
    "options.label",
    "the getter threw (Error: no label)"
)]
fn options_proxy_whose_traps_throw_loses_what_they_guard(
    #[case] trap: &str,
    #[case] label: &str,
    #[case] path: &str,
    #[case] message: &str,
) {
    let script = format!(
        r#"
const options = new Proxy({{ label: "p" }}, {{ {trap} }});
return await agent("q", options as any);
"#
    );
    let out = run(&script);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), json!("echoed"));
    assert_eq!(
        events_of(&out.events, "workflow/agent-start")[0]["label"],
        label
    );
    let warnings = events_of(&out.events, "workflow/warning");
    assert!(
        warnings
            .iter()
            .any(|w| w["path"] == path && w["message"].as_str().unwrap_or("").contains(message)),
        "a warning at {path:?} saying {message:?}: {warnings:?}"
    );
}

/// Already-started promises are accepted by parallel() by brand, whatever
/// Promise.prototype.then has become.
#[rstest]
#[case::then_deleted("delete (Promise.prototype as any).then;")]
#[case::then_not_callable("(Promise.prototype as any).then = 5;")]
#[case::then_throws("Promise.prototype.then = function () { throw new Error('then'); } as any;")]
fn parallel_takes_started_promises_whatever_then_is(#[case] tampering: &str) {
    let script = format!(
        r#"{tampering}
const started = [agent("y"), agent("z"), (async () => "own")()];
return await parallel(started);
"#
    );
    let out = run(&script);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json(), json!(["echoed", "echoed", "own"]));
}

/// A schema the host would refuse is still refused when Array.prototype
/// has index setters that swallow what is assigned to them.
#[test]
fn schema_violations_survive_array_index_setters() {
    let script = r#"
for (const k of ["0", "1", "2"]) {
  Object.defineProperty(Array.prototype, k, { __proto__: null, get() { return undefined; }, set(v: any) {}, configurable: true } as any);
}
await agent("q", { label: "s", schema: { type: "object", properties: { ok: { type: "boolean", bogusKeyword: 1 } } } as any });
"#;
    let out = run(script);
    let msg = assert_error(&out, "UNSUPPORTED_SCHEMA");
    assert!(
        msg.contains("options.schema.properties.ok.bogusKeyword"),
        "{msg}"
    );
    assert!(events_of(&out.events, "workflow/agent-start").is_empty());
}

// ------------------------------------------------------------------ everything at once

/// The FIFO queue (one slot for three calls), timers and budget under the
/// kitchen sink give what they give untampered.
#[test]
fn queue_and_timers_under_the_kitchen_sink() {
    let body = r#"
const r = await parallel([() => agent("a1"), () => agent("a2"), () => agent("a3")]);
const t = await new P((res: any) => setTimeout(res, 5, "timer", "ignored"));
const cleared = setTimeout(() => { throw new E("cleared timer ran"); }, 1);
clearTimeout(cleared);
return { r, t, remaining: budget.remaining(), spent: budget.spent() };
"#;
    let flags = ["--max-concurrent", "1", "--budget", "1000"];
    let control = run_ts(
        &format!("const P = Promise, E = Error;\n{body}"),
        &tamper_fixture(),
        &flags,
    );
    control.assert_code(0);
    assert_event_guarantees(&control.events);
    assert_eq!(
        control.json(),
        json!({ "r": ["echoed", "echoed", "echoed"], "t": "timer", "remaining": 1000, "spent": 0 })
    );
    let out = run_ts(
        &format!("{KITCHEN_SINK}\n{body}"),
        &tamper_fixture(),
        &flags,
    );
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(observed(&out), observed(&control), "stderr: {}", out.stderr);
}

/// A wall-clock timeout with a call running and two queued ends the run
/// as it does untampered: TIMEOUT, the running call cancelled, the queued
/// ones never started.
#[test]
fn timeout_under_the_kitchen_sink() {
    let body = r#"
try {
  await parallel([() => agent("h", { label: "hang" }), () => agent("a2"), () => agent("a3")]);
} catch (e: any) {
  log("caught " + e.code); // after the cancel: dropped by the host
}
"#;
    let flags = ["--max-concurrent", "1", "--timeout", "500ms"];
    let runs = [
        run_ts(
            &format!("const P = Promise, E = Error;\n{body}"),
            &tamper_fixture(),
            &flags,
        ),
        run_ts(
            &format!("{KITCHEN_SINK}\n{body}"),
            &tamper_fixture(),
            &flags,
        ),
    ];
    for out in &runs {
        out.assert_code(124);
        out.assert_error_line("TIMEOUT");
        assert_event_guarantees(&out.events);
        let end = out.events.last().expect("events");
        assert_eq!(end["stopReason"], "cancelled");
        assert_eq!(end["error"]["code"], "TIMEOUT");
    }
    assert_eq!(
        observed(&runs[1]),
        json!({
            "value": null,
            "agents": [[1, "hang", null, "cancelled"]],
            "narration": [],
            "agentsStarted": 3,
        })
    );
    assert_eq!(observed(&runs[1]), observed(&runs[0]));
}
