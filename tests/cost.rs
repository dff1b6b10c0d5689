//! Usage and cost through a whole run: what children report (here a
//! fixture's `usage`, as an agent CLI reports it) is in their `agent-end`
//! events and totalled in the result, and `--budget-usd` stops the run
//! once the reported cost reaches it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fixture, run_ts};
use serde_json::json;

fn costly() -> serde_json::Value {
    fixture(json!([
        { "match": {}, "text": "ok",
          "usage": { "input": 100, "output": 10, "cacheRead": 60, "costUsd": 0.4 } }
    ]))
}

#[test]
fn costs_are_reported_per_call_and_totalled_in_the_result() {
    let out = run_ts(
        r#"const a = await agent("one"); const b = await agent("two"); return [a, b];"#,
        &costly(),
        &["--output", "result"],
    );
    out.assert_code(0);
    let r = out.json();
    assert_eq!(r["value"], json!(["ok", "ok"]));
    assert_eq!(
        r["usage"],
        json!({ "input": 200, "output": 20, "cacheRead": 120 })
    );
    assert!(
        (r["cost"].as_f64().expect("a cost") - 0.8).abs() < 1e-9,
        "{r}"
    );
    let ends = out.events_of("workflow/agent-end");
    assert_eq!(ends.len(), 2);
    for e in ends {
        assert_eq!(
            e["usage"],
            json!({ "input": 100, "output": 10, "cacheRead": 60 }),
            "{e}"
        );
        assert_eq!(e["cost"], json!(0.4), "{e}");
    }
}

#[test]
fn the_cost_budget_stops_the_run_once_spent() {
    let out = run_ts(
        r#"const got = [];
for (let i = 0; i < 5; i++) got.push(await agent(`call ${i}`));
return got;"#,
        &costly(),
        &["--output", "result", "--budget-usd", "1"],
    );
    // 0.4 + 0.4 + 0.4: the third call started with 0.2 left; the fourth
    // finds the budget spent.
    out.assert_code(1);
    let r = out.json();
    assert_eq!(r["error"]["code"], "BUDGET", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cost budget of $1.0000")),
        "{r}"
    );
    assert_eq!(out.events_of("workflow/agent-end").len(), 3);
    assert!(
        (r["cost"].as_f64().expect("a cost") - 1.2).abs() < 1e-9,
        "{r}"
    );
}

#[test]
fn a_bad_cost_budget_is_a_usage_error() {
    for bad in ["--budget-usd=0", "--budget-usd=lots", "--budget-usd=-3"] {
        let out = run_ts("return 1;", &costly(), &[bad]);
        out.assert_code(2);
        out.assert_error_line("USAGE");
        assert!(
            out.stderr.contains("positive amount of US dollars"),
            "{}",
            out.stderr
        );
    }
}

/// Regression (issue 34): the cost budget's wrapper did not hand the
/// host's verdict on to the journal behind it, so a run with
/// `--budget-usd` journaled no `settled` line and a resume replayed
/// nothing. Every call of such a run is journaled as settled.
#[test]
fn a_run_with_a_cost_budget_journals_every_settled_call() {
    let out = common::Workspace::new(
        "wf.ts",
        r#"const a = await agent("one"); const b = await agent("two"); return [a, b];"#,
        Some(&costly()),
    )
    .run(&["--output", "result", "--budget-usd", "5"]);
    out.assert_code(0);
    let dir = out.dir.path();
    let run = dir.join(".dsh/runs").join(common::only_run_id(dir));
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).expect("journal");
    let settled = journal
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("line"))
        .filter(|l| l["type"] == "settled")
        .count();
    assert_eq!(settled, 2, "{journal}");
}
