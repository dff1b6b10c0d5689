//! One truth about each call (issue 33): for every way an `agent()` call
//! can end, the run is made through the real `dsh` binary and every view
//! of the call is read back — the live line (`--events lines`), the
//! `agent-end` event (`--events-file`), the journal's `settled` line,
//! `show` (text and `--json`), `runs`, `report`, and the value the script
//! got — and they must all say the same outcome and reason.
//!
//! Each case synchronizes on the run's end (the process exits); the time
//! bounds in fixtures are far longer than the bounds under test, so only
//! the bound under test can end the call in time.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod http_server;

use std::path::Path;

use common::{Output, Workspace, dsh_in, events_of, fixture, only_run_id};
use rstest::rstest;
use serde_json::{Value, json};

/// What every view must say about the run's one call.
#[derive(Debug, Clone, Copy)]
struct Expect {
    /// The word every view prints (`show`'s table says `replayed` for a
    /// replayed call, and the word leads its reason).
    word: &'static str,
    /// The journal's `verdict.kind`.
    kind: &'static str,
    /// The start of the reason; `None` when there is none.
    reason: Option<&'static str>,
    /// `runs`' DONE/FAIL/REP.
    counts: &'static str,
    /// The report's bar class.
    class: &'static str,
}

const SCHEMA: &str =
    "{ type: \"object\", properties: { ok: { type: \"boolean\" } }, required: [\"ok\"] }";

/// A run of `script` with `answers` as its fixture (or, with `toml`, a
/// `dsh.toml` whose provider `fx` answers from them), `--events lines`
/// on stderr and `extra` flags.
fn run(script: &str, answers: Value, toml: Option<&str>, extra: &[&str]) -> Output {
    let fx = fixture(answers);
    let ws = match toml {
        None => Workspace::new("wf.ts", script, Some(&fx)),
        Some(rest) => {
            let ws = Workspace::new("wf.ts", script, None);
            ws.file("fx.json", &fx.to_string());
            ws.file(
                "dsh.toml",
                &format!(
                    "[workflow]\nprovider = \"fx\"\n\n[providers.fx]\nkind = \"fixture\"\npath = \"fx.json\"\n\n{rest}"
                ),
            );
            ws
        }
    };
    let mut args = vec!["--events", "lines"];
    args.extend_from_slice(extra);
    ws.run(&args)
}

fn call(options: &str) -> String {
    format!("return await agent(\"Do it\", {{ label: \"the call\"{options} }});")
}

/// The journal's lines, parsed.
fn journal(dir: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join(".dsh/runs").join(id).join("journal.jsonl"))
        .expect("the journal");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a journal line"))
        .collect()
}

/// A reason as the one-line views show it: whitespace runs (a provider's
/// reason may have line breaks) as single spaces.
fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[track_caller]
fn assert_reason(view: &str, got: Option<&str>, want: Option<&str>) {
    match want {
        None => assert!(got.is_none(), "{view}: no reason expected, got {got:?}"),
        Some(w) => {
            let got = got.unwrap_or_else(|| panic!("{view}: no reason, expected {w:?}"));
            assert!(
                got.starts_with(w),
                "{view}: reason {got:?}, expected {w:?}…"
            );
        }
    }
}

/// Reads every view of the run's one call and checks it says `want`.
/// `replayed`: the call was answered from the journal in this attempt.
#[track_caller]
fn assert_views_agree(out: &Output, want: Expect, replayed: bool) {
    let dir = out.dir.path();
    let id = only_run_id(dir);

    // The event, and the live line made from it. A refused call has no
    // child, so neither (contract §8).
    let ends = events_of(&out.events, "workflow/agent-end");
    if want.word == "refused" {
        assert!(ends.is_empty(), "{ends:#?}");
        assert!(!out.stderr.contains("agent #1"), "{}", out.stderr);
    } else {
        assert_eq!(ends.len(), 1, "{:#?}", out.events);
        let end = ends[0];
        assert_eq!(end["outcome"], want.word, "agent-end: {end}");
        assert_eq!(
            end["replayed"].as_bool().unwrap_or(false),
            replayed,
            "{end}"
        );
        assert_reason("agent-end", end["reason"].as_str(), want.reason);
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains(&format!("agent #1 {}", want.word)))
            .unwrap_or_else(|| panic!("no live line for the call:\n{}", out.stderr));
        assert!(line.contains("the call"), "{line}");
        match want.reason {
            Some(r) => assert!(line.contains(&format!("the call — {}", flat(r))), "{line}"),
            None => assert!(!line.contains(" — "), "{line}"),
        }
    }

    // The journal: the last settled line of the call (a replayed call's
    // is the one of the attempt that answered it).
    let lines = journal(dir, &id);
    let settled = lines
        .iter()
        .rev()
        .find(|l| l["type"] == "settled" && l["seq"] == 1);
    match settled {
        Some(s) => {
            assert_eq!(s["verdict"]["kind"], want.kind, "journal: {s}");
            assert_reason("journal", s["verdict"]["reason"].as_str(), want.reason);
        }
        // A run stopped around a call may settle before the call's own
        // end is journaled: then `show` reads the attempt's result.
        None => assert_eq!(want.word, "cancelled", "no settled line: {lines:#?}"),
    }

    // show --json.
    let (text, err, code) = dsh_in(dir, &["workflow", "show", &id, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&text).expect("show --json");
    let a = &v["agents"][0];
    assert_eq!(a["outcome"], want.word, "show --json: {a}");
    assert_eq!(a["replayed"], replayed, "{a}");
    assert_reason("show --json", a["reason"].as_str(), want.reason);
    // A duration, not a blank, for every call that ran and settled (a
    // refused call never ran).
    if want.word != "refused" && settled.is_some() {
        assert!(a["durationMs"].is_u64(), "a duration, not a blank: {a}");
    }

    // show.
    let (text, err, code) = dsh_in(dir, &["workflow", "show", &id]);
    assert_eq!(code, Some(0), "{err}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("#1 "))
        .unwrap_or_else(|| panic!("no row for the call:\n{text}"));
    let column = if replayed { "replayed" } else { want.word };
    assert_eq!(
        row.split_whitespace().nth(1),
        Some(column.split(' ').next().unwrap_or_default()),
        "{row}"
    );
    if let Some(r) = want.reason {
        let r = if replayed {
            format!("{}: {}", want.word, flat(r))
        } else {
            flat(r)
        };
        assert!(row.contains(&r), "show: {row}");
    }

    // runs.
    let (text, err, code) = dsh_in(dir, &["workflow", "runs"]);
    assert_eq!(code, Some(0), "{err}");
    let row = text.lines().find(|l| l.contains(&id)).expect("the run");
    assert!(
        row.split_whitespace().any(|w| w == want.counts),
        "runs: {row}"
    );

    // report.
    let (path, err, code) = dsh_in(dir, &["workflow", "report", &id]);
    assert_eq!(code, Some(0), "{err}");
    let html = std::fs::read_to_string(dir.join(path.trim())).expect("the report");
    assert!(
        html.contains(&format!("class=\"bar o-{}\" data-seq=\"1\"", want.class)),
        "report bar for {}",
        want.class
    );
    assert!(
        html.contains(&format!("\"outcome\":\"{}\"", want.word)),
        "report details"
    );
}

#[rstest]
#[case::completed(
    call(""),
    json!([{ "match": {}, "text": "A", "usage": { "input": 3, "output": 4 } }]),
    None, &[], 0, json!("A"),
    Expect { word: "completed", kind: "completed", reason: None, counts: "1/0/0", class: "completed" },
)]
#[case::failed_by_the_provider(
    call(""),
    json!([{ "match": {}, "fail": "model refused" }]),
    None, &[], 0, Value::Null,
    Expect { word: "failed", kind: "failed", reason: Some("model refused"), counts: "0/1/0", class: "failed" },
)]
#[case::failed_by_the_schema(
    call(&format!(", schema: {SCHEMA}")),
    json!([{ "match": {}, "text": "{\"ok\":\"yes\"}" }]),
    None, &[], 0, Value::Null,
    Expect {
        word: "failed", kind: "invalid",
        reason: Some("the structured answer does not match the schema"),
        counts: "0/1/0", class: "failed",
    },
)]
#[case::stalled(
    call(", stallMs: 300"),
    json!([{ "match": {}, "text": "too late", "delayMs": 60000 }]),
    None, &[], 0, Value::Null,
    Expect {
        word: "failed", kind: "stalled",
        reason: Some("stalled: no progress from the provider for 300 ms (stallMs)"),
        counts: "0/1/0", class: "failed",
    },
)]
#[case::timed_out(
    call(", agentType: \"quick\""),
    json!([{ "match": {}, "text": "too late", "delayMs": 60000 }]),
    Some("[agent_types.quick]\ntimeout = \"300ms\"\n"), &[], 0, Value::Null,
    Expect {
        word: "failed", kind: "timed-out",
        reason: Some("timed out after 300 ms (timeout of [agent_types.quick])"),
        counts: "0/1/0", class: "failed",
    },
)]
#[case::cancelled(
    call(""),
    json!([{ "match": {}, "text": "too late", "delayMs": 60000 }]),
    None, &["--timeout", "1s"], 124, Value::Null,
    Expect { word: "cancelled", kind: "cancelled", reason: None, counts: "0/0/0", class: "cancelled" },
)]
#[case::refused(
    "try { return await agent(\"Do it\", { label: \"the call\" }); } catch (e) { return e.code; }".to_string(),
    json!([{ "match": {}, "startError": "quota exhausted" }]),
    None, &[], 0, json!("AGENT_START"),
    Expect { word: "refused", kind: "refused", reason: Some("quota exhausted"), counts: "0/1/0", class: "failed" },
)]
fn every_view_says_the_same_outcome(
    #[case] script: String,
    #[case] answers: Value,
    #[case] toml: Option<&str>,
    #[case] extra: &[&str],
    #[case] code: i32,
    #[case] value: Value,
    #[case] want: Expect,
) {
    let out = run(&script, answers, toml, extra);
    out.assert_code(code);
    // The result: what the script got.
    assert_eq!(out.json(), value, "{}", out.stderr);
    assert_views_agree(&out, want, false);
}

/// A replayed call is the call its answering attempt made: its outcome,
/// reason, duration and tokens, marked replayed.
#[rstest]
#[case::completed(
    json!([{ "match": {}, "text": "A", "delayMs": 50, "usage": { "input": 3, "output": 4 } }]),
    json!("A"),
    Expect { word: "completed", kind: "completed", reason: None, counts: "0/0/1", class: "replayed" },
)]
#[case::failed(
    json!([{ "match": {}, "fail": "model refused", "delayMs": 50, "usage": { "input": 3, "output": 4 } }]),
    Value::Null,
    Expect { word: "failed", kind: "failed", reason: Some("model refused"), counts: "0/0/1", class: "replayed" },
)]
fn a_replayed_call_says_what_its_answering_attempt_said(
    #[case] answers: Value,
    #[case] value: Value,
    #[case] want: Expect,
) {
    let first = run(&call(""), answers, None, &[]);
    first.assert_code(0);
    let dir = first.dir.path();
    let id = only_run_id(dir);
    let events = dir.join("resumed.jsonl");
    let events_arg = events.display().to_string();
    let (stdout, stderr, code) = dsh_in(
        dir,
        &[
            "workflow",
            "resume",
            &id,
            "--events",
            "lines",
            "--events-file",
            &events_arg,
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).expect("json"), value);
    let resumed = Output {
        stdout,
        stderr,
        code,
        events: common::read_events(&events, true),
        dir: first.dir,
    };
    assert_views_agree(&resumed, want, true);
    // The answering attempt's duration and tokens, not blanks.
    let (text, _, _) = dsh_in(resumed.dir.path(), &["workflow", "show", &id, "--json"]);
    let v: Value = serde_json::from_str(&text).expect("show --json");
    let a = &v["agents"][0];
    assert!(a["durationMs"].as_u64().unwrap() >= 50, "{a}");
    assert_eq!(a["usage"], json!({ "input": 3, "output": 4 }), "{a}");
    let (text, _, _) = dsh_in(resumed.dir.path(), &["workflow", "show", &id]);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("#1 "))
        .expect("the row");
    assert!(row.contains("3/4"), "{row}");
}

/// A replayed call whose answering attempt the journal no longer has (a
/// trimmed journal) was still answered: `show --json` says `completed`
/// with `replayed: true`, never `running` (an attempt that did not settle)
/// nor `cancelled` (one that did), and the table says `replayed`.
#[rstest]
#[case::settled(true)]
#[case::interrupted(false)]
fn a_replayed_call_without_its_answering_attempt_reads_completed(#[case] settled: bool) {
    let first = run(&call(""), json!([{ "match": {}, "text": "A" }]), None, &[]);
    first.assert_code(0);
    let dir = first.dir.path();
    let id = only_run_id(dir);
    let (_, stderr, code) = dsh_in(dir, &["workflow", "resume", &id]);
    assert_eq!(code, Some(0), "{stderr}");
    // Drop the first attempt's answer: only the replay is left.
    let path = dir.join(".dsh/runs").join(&id).join("journal.jsonl");
    let kept: String = journal(dir, &id)
        .into_iter()
        .filter(|l| l["type"] != "settled")
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept).expect("trim the journal");
    if !settled {
        std::fs::remove_file(dir.join(".dsh/runs").join(&id).join("result.json"))
            .expect("remove the result");
    }

    let (text, stderr, _) = dsh_in(dir, &["workflow", "show", &id, "--json"]);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}{stderr}"));
    let a = &v["agents"][0];
    assert_eq!(a["outcome"], "completed", "{a}");
    assert_eq!(a["replayed"], true, "{a}");
    let (text, _, _) = dsh_in(dir, &["workflow", "show", &id]);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("#1 "))
        .expect("the row");
    assert!(row.contains("replayed"), "{row}");
    assert!(!row.contains("running"), "{row}");
}

/// `resume --retry-failed`: the completed answer replays; the calls that
/// failed (by the provider, by the schema, by a stall) are made again by
/// the provider as it is configured now.
#[test]
fn retry_failed_replays_completed_answers_and_asks_the_failed_calls_again() {
    let script = format!(
        "const schema = {SCHEMA};\n\
         return [\n\
           await agent(\"a\", {{ label: \"a\" }}),\n\
           await agent(\"b\", {{ label: \"b\" }}),\n\
           await agent(\"c\", {{ label: \"c\", schema }}),\n\
           await agent(\"d\", {{ label: \"d\", stallMs: 300 }}),\n\
         ];"
    );
    let first = run(
        &script,
        json!([
            { "match": { "prompt": "a" }, "text": "A" },
            { "match": { "prompt": "b" }, "fail": "model refused" },
            { "match": { "prompt": "c" }, "text": "{\"ok\":\"yes\"}" },
            { "match": { "prompt": "d" }, "text": "too late", "delayMs": 60000 },
        ]),
        Some(""),
        &[],
    );
    first.assert_code(0);
    assert_eq!(first.json(), json!(["A", null, null, null]));
    let dir = first.dir.path();
    let id = only_run_id(dir);
    // The provider as configured now: its fixture answers every call.
    std::fs::write(
        dir.join("fx.json"),
        fixture(json!([
            { "match": { "prompt": "a" }, "text": "A again (must not be asked)" },
            { "match": { "prompt": "b" }, "text": "B" },
            { "match": { "prompt": "c" }, "text": "{\"ok\":true}" },
            { "match": { "prompt": "d" }, "text": "D" },
        ]))
        .to_string(),
    )
    .expect("fixture");
    let (stdout, stderr, code) = dsh_in(
        dir,
        &[
            "workflow",
            "resume",
            &id,
            "--retry-failed",
            "--events",
            "none",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["A", "B", { "ok": true }, "D"])
    );
    assert!(
        stderr.contains("1 call(s) replayed from the journal, 3 ran live"),
        "{stderr}"
    );
    let (text, _, _) = dsh_in(dir, &["workflow", "show", &id, "--json"]);
    let v: Value = serde_json::from_str(&text).expect("show --json");
    let outcomes: Vec<(&str, bool)> = v["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| {
            (
                a["outcome"].as_str().unwrap_or_default(),
                a["replayed"] == true,
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("completed", true),
            ("completed", false),
            ("completed", false),
            ("completed", false)
        ]
    );

    // Without the flag the failures replay as they were.
    let (stdout, stderr, code) = dsh_in(dir, &["workflow", "resume", &id, "--events", "none"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["A", "B", { "ok": true }, "D"]),
        "the retried answers are the journal's now"
    );
}

/// An agent provider checks a schema call's answer itself and gives a
/// wrong one one corrective turn; still wrong after it, the call failed —
/// and every view says so (before, only the live line did when the host's
/// check was the one that failed it). The model is a scripted HTTP server
/// on 127.0.0.1 behind an `openai` provider in `dsh.toml`.
#[test]
fn failed_by_the_schema_after_the_corrective_turn() {
    use http_server::{Reply, TestServer};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = rt.block_on(TestServer::start(vec![
        Reply::chat(r#"{"ok":"yes"}"#),
        Reply::chat(r#"{"ok":"still no"}"#),
    ]));
    let ws = Workspace::new("wf.ts", &call(&format!(", schema: {SCHEMA}")), None);
    ws.file(
        "dsh.toml",
        &format!(
            "[workflow]\nprovider = \"api\"\n\n[providers.api]\nkind = \"openai\"\n\
             base_url = \"{}\"\napi_key_env = \"\"\ntools = []\nstream = false\n",
            server.base_url()
        ),
    );
    let out = ws.run(&["--events", "lines"]);
    out.assert_code(0);
    assert_eq!(out.json(), Value::Null, "{}", out.stderr);
    assert_eq!(
        server.requests().len(),
        2,
        "the call and its corrective turn"
    );
    let reason = events_of(&out.events, "workflow/agent-end")[0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("(after one corrective turn)"), "{reason}");
    assert_views_agree(
        &out,
        Expect {
            word: "failed",
            kind: "failed",
            reason: Some("the answer does not match the schema:"),
            counts: "0/1/0",
            class: "failed",
        },
        false,
    );
}
