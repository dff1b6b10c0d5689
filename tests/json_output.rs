//! `--json` on the commands that list or show: `runs`, `show` (with the
//! result), `list`, `agents` and `providers` print one JSON document a
//! program can read, with the same facts as their text.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::dsh_in;
use serde_json::{Value, json};

fn json_of(dir: &Path, args: &[&str]) -> Value {
    let (stdout, stderr, code) = dsh_in(dir, args);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stdout}"))
}

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

#[test]
fn runs_and_show_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    write(
        d,
        "wf.ts",
        r#"export const meta = { name: "j", description: "json" };
return [await agent("a", { label: "a" })];"#,
    );
    write(
        d,
        "f.json",
        r#"{"version": 1, "answers": [{"match": {}, "text": "A", "usage": {"input": 4, "output": 2}}]}"#,
    );
    let empty = json_of(d, &["workflow", "runs", "--json"]);
    assert_eq!(empty, json!([]));
    let (_, stderr, code) = dsh_in(
        d,
        &[
            "workflow",
            "run",
            "wf.ts",
            "--fixture",
            "f.json",
            "--events",
            "none",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let runs = json_of(d, &["workflow", "runs", "--json"]);
    let run = &runs[0];
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    assert_eq!(run["name"], "j");
    assert_eq!(run["status"], "completed");
    assert_eq!(
        (run["done"].clone(), run["failed"].clone()),
        (json!(1), json!(0))
    );
    assert!(
        run["runId"]
            .as_str()
            .is_some_and(|id| id.starts_with("run-")),
        "{run}"
    );
    let shown = json_of(d, &["workflow", "show", "latest", "--json"]);
    assert_eq!(shown["runId"], run["runId"]);
    assert_eq!(shown["result"]["value"], json!(["A"]), "{shown}");
    assert_eq!(shown["result"]["stopReason"], "completed");
    assert_eq!(
        shown["agents"][0]["usage"],
        json!({"input": 4, "output": 2})
    );
}

#[test]
fn list_agents_and_providers_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    write(
        d,
        ".claude/workflows/review.ts",
        r#"export const meta = { name: "review", description: "review one file", whenToUse: "for one file" };
return 1;"#,
    );
    write(d, ".claude/workflows/broken.ts", "return (;");
    write(
        d,
        ".claude/agents/bad.md",
        "---\nname: bad\ndescription: [unclosed\n---\nbody\n",
    );
    write(
        d,
        "dsh.toml",
        "[workflow]\nprovider = \"p\"\n\n[providers.p]\nkind = \"command\"\ncommand = [\"/bin/cat\"]\nprompt = \"stdin\"\nstall = \"90s\"\n\n[agent_types.Plan]\nprovider = \"p\"\nmodel = \"m1\"\n",
    );
    let list = json_of(d, &["workflow", "list", "--json"]);
    let review = list
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "review"))
        .expect("review");
    assert_eq!(review["origin"], "project");
    assert_eq!(review["description"], "review one file");
    assert_eq!(review["whenToUse"], "for one file");
    assert_eq!(review["problem"], Value::Null);
    let broken = list
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|e| e["path"].as_str().is_some_and(|p| p.ends_with("broken.ts")))
        })
        .expect("broken");
    assert!(
        broken["problem"].as_str().is_some_and(|p| !p.is_empty()),
        "{broken}"
    );

    let agents = json_of(d, &["workflow", "agents", "--json"]);
    let types = agents["types"].as_array().expect("types");
    let explore = types
        .iter()
        .find(|t| t["name"] == "Explore")
        .expect("Explore");
    assert_eq!(explore["source"], "built-in");
    assert_eq!(explore["tools"], json!(["Read", "Grep", "Glob"]));
    let plan = types.iter().find(|t| t["name"] == "Plan").expect("Plan");
    assert_eq!(
        (plan["provider"].clone(), plan["model"].clone()),
        (json!("p"), json!("m1"))
    );
    let bad = types.iter().find(|t| t["name"] == "bad").expect("bad");
    assert!(bad["error"].as_str().is_some(), "{bad}");

    let providers = json_of(d, &["workflow", "providers", "--json"]);
    assert!(
        providers["configuration"]
            .as_str()
            .is_some_and(|c| c.ends_with("dsh.toml")),
        "{providers}"
    );
    let p = providers["providers"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "p"))
        .expect("p");
    assert_eq!(p["kind"], "command");
    assert_eq!(p["default"], true);
    assert_eq!(p["usable"], true, "{p}");
    assert_eq!(p["stallMs"], 90_000);
    let clis: Vec<&str> = providers["agentClis"]
        .as_array()
        .expect("agentClis")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    for kind in ["claude-code", "codex", "qwen"] {
        assert!(clis.contains(&kind), "{clis:?}");
    }
    assert_eq!(providers["agentTypes"][0]["name"], "Plan");
}
