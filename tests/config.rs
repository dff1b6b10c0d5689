//! `dsh.toml` through the real `dsh`: discovery, defaults, routing by the
//! `provider` option and `agentType`, `--provider`, `--config`, `dsh
//! workflow providers`, and errors that name file, line, key and fix.
//! Providers here are `kind = "fixture"` so everything runs offline; the
//! `openai` and `command` providers have their own tests.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Workspace, assert_event_guarantees, assert_mentions, dsh_in, events_of, fixture};
use rstest::rstest;
use serde_json::{Value, json};

fn write(ws: &Workspace, name: &str, value: &Value) {
    ws.file(name, &value.to_string());
}

/// Two fixture providers, `alpha` (default) and `beta`, each answering
/// with its own name; an agent type routed to beta.
fn routed_workspace(script: &str) -> Workspace {
    let ws = Workspace::new("wf.ts", script, None);
    write(
        &ws,
        "alpha.json",
        &fixture(
            json!([{ "match": {}, "text": "from alpha", "times": 100, "usage": { "input": 1, "output": 2 } }]),
        ),
    );
    write(
        &ws,
        "beta.json",
        &fixture(json!([
            { "match": { "model": "beta-large" }, "text": "from beta, large model", "times": 100 },
            { "match": {}, "text": "from beta", "times": 100 },
        ])),
    );
    ws.file(
        "dsh.toml",
        r#"
[workflow]
provider = "alpha"

[providers.alpha]
kind = "fixture"
path = "alpha.json"

[providers.beta]
kind = "fixture"
path = "beta.json"

[agent_types.reviewer]
provider = "beta"
model = "beta-large"
"#,
    );
    ws
}

#[test]
fn calls_are_routed_by_option_agent_type_and_default() {
    let ws = routed_workspace(
        r#"
const a = await agent("one");
const b = await agent("two", { provider: "beta" });
const c = await agent("three", { agentType: "reviewer" });
let d = "none";
try { await agent("four", { provider: "gamma" }); } catch (e: any) { d = e.code + ": " + e.message; }
return { a, b, c, d, spent: budget.spent() };
"#,
    );
    let out = ws.run(&["--output", "result"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    let v = &out.json()["value"];
    assert_eq!(v["a"], "from alpha");
    assert_eq!(v["b"], "from beta");
    assert_eq!(v["c"], "from beta, large model");
    assert_eq!(v["spent"], 2);
    let d = v["d"].as_str().unwrap_or_default();
    assert_mentions(
        d,
        &[
            "AGENT_START",
            "gamma",
            "alpha, anthropic, beta, claude-code, codex, deepseek, openai",
        ],
    );
    // The agent-end event carries the usage the child reported.
    let ends = events_of(&out.events, "workflow/agent-end");
    assert_eq!(ends[0]["usage"], json!({ "input": 1, "output": 2 }));
}

#[test]
fn the_provider_flag_picks_the_default() {
    let ws = routed_workspace("return await agent(\"one\");");
    let out = ws.run(&["--provider", "beta"]);
    out.assert_code(0);
    assert_eq!(out.json(), json!("from beta"));
}

#[test]
fn the_file_is_found_from_a_parent_directory() {
    let ws = routed_workspace("return await agent(\"one\");");
    let sub = ws.dir.path().join("nested/deeper");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::copy(&ws.script, sub.join("wf.ts")).expect("copy");
    let (stdout, stderr, code) = dsh_in(&sub, &["workflow", "run", "wf.ts", "--events", "none"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!("from alpha")
    );
}

#[test]
fn an_explicit_config_is_used_and_a_missing_one_is_a_usage_error() {
    let ws = routed_workspace("return await agent(\"one\");");
    let cfg = ws.dir.path().join("dsh.toml");
    let moved = ws.dir.path().join("other.toml");
    std::fs::rename(&cfg, &moved).expect("rename");
    let arg = moved.display().to_string();
    let out = ws.run(&["--config", &arg]);
    out.assert_code(0);
    assert_eq!(out.json(), json!("from alpha"));

    let ws = Workspace::new("wf.ts", "return 1;", None);
    let out = ws.run(&["--config", "nope.toml"]);
    out.assert_code(2);
    assert!(
        out.stderr.starts_with("error[USAGE]: --config: nope.toml"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_failed_child_has_its_reason_in_the_agent_end_event() {
    let ws = Workspace::new(
        "wf.ts",
        "return await agent(\"x\", { label: \"refuse\" });",
        Some(&fixture(json!([{ "match": {}, "fail": "model refused" }]))),
    );
    let out = ws.run(&[]);
    out.assert_code(0);
    let ends = events_of(&out.events, "workflow/agent-end");
    assert_eq!(ends[0]["outcome"], "failed");
    assert_eq!(ends[0]["reason"], "model refused");
    assert!(ends[0].get("usage").is_none(), "{}", ends[0]);
}

#[test]
fn workflow_defaults_set_limits_and_the_agent_ceiling() {
    let ws = Workspace::new(
        "wf.ts",
        "for (let i = 0; i < 3; i++) await agent(\"x\" + i);\nreturn 1;",
        Some(&fixture(
            json!([{ "match": {}, "text": "ok", "times": 10 }]),
        )),
    );
    ws.file(
        "dsh.toml",
        "[workflow]\nmax_total_agents = 2\nsandbox = \"off\"\n",
    );
    let out = ws.run(&["--output", "result"]);
    out.assert_code(1);
    out.assert_error_line("AGENT_CAP");
    assert_eq!(out.json()["sandbox"]["level"], "none");

    let ws = Workspace::new("wf.ts", "return 1;", None);
    ws.file("dsh.toml", "[workflow]\nmax_total_agents = 2\n");
    let out = ws.run(&["--max-agents", "5"]);
    out.assert_code(2);
    assert_mentions(
        &out.stderr,
        &["error[USAGE]", "--max-agents", "ceiling of 2"],
    );
}

#[rstest]
#[case::unknown_key("[workflow]\nmax_agents = 3\n", "dsh.toml:2", &["max_agents", "remove the key"])]
#[case::wrong_type("[workflow]\nmax_concurrent_agents = \"lots\"\n", "dsh.toml:2", &["lots"])]
#[case::unknown_default_provider("[workflow]\nprovider = \"ghost\"\n", "dsh.toml:2", &["workflow.provider", "ghost", "known providers"])]
#[case::missing_kind("[providers.p]\npath = \"x.json\"\n", "dsh.toml:1", &["providers.p", "missing kind"])]
#[case::unknown_provider_key("[providers.p]\nkind = \"openai\"\nmodle = \"x\"\n", "dsh.toml:3", &["providers.p", "modle"])]
#[case::missing_key_variable(
    "[workflow]\nprovider = \"p\"\n[providers.p]\nkind = \"openai\"\napi_key_env = \"DSH_TEST_SURELY_UNSET_KEY\"\n",
    "dsh.toml",
    &["workflow.provider", "DSH_TEST_SURELY_UNSET_KEY", "export it"]
)]
fn config_errors_stop_the_run_naming_file_key_and_fix(
    #[case] text: &str,
    #[case] location: &str,
    #[case] mentions: &[&str],
) {
    let ws = Workspace::new("wf.ts", "log(\"must not run\");\nreturn 1;", None);
    ws.file("dsh.toml", text);
    let out = ws.run(&[]);
    out.assert_code(2);
    assert!(out.stdout.is_empty());
    let first = out.stderr.lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with("error[CONFIG_INVALID]: "),
        "{}",
        out.stderr
    );
    assert!(first.contains(location), "{location} missing: {first}");
    assert_mentions(&first, mentions);
    assert!(out.events.is_empty(), "the run must not start");
}

#[test]
fn provider_flag_errors_name_the_flag() {
    let ws = Workspace::new("wf.ts", "return 1;", None);
    let out = ws.run(&["--provider", "ghost"]);
    out.assert_code(2);
    assert_mentions(
        &out.stderr,
        &[
            "error[USAGE]: --provider",
            "ghost",
            "anthropic, claude-code, codex, deepseek, openai",
        ],
    );
    let ws = Workspace::new("wf.ts", "return 1;", Some(&fixture(json!([]))));
    let out = ws.run(&["--provider", "deepseek"]);
    out.assert_code(2);
    assert_mentions(
        &out.stderr,
        &[
            "error[USAGE]",
            "--provider and --fixture exclude each other",
        ],
    );
}

#[test]
fn providers_lists_each_with_whether_it_is_usable() {
    let ws = routed_workspace("return 1;");
    ws.file(
        "dsh.toml",
        r#"
[workflow]
provider = "alpha"

[providers.alpha]
kind = "fixture"
path = "alpha.json"

[providers.broken]
kind = "fixture"
path = "missing.json"

[providers.cli]
kind = "command"
command = ["/surely/not/a/program", "-p"]
"#,
    );
    let (stdout, stderr, code) = dsh_in(ws.dir.path(), &["workflow", "providers"]);
    assert_eq!(code, Some(0), "{stderr}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == name))
            .unwrap_or_else(|| panic!("no line for {name}: {stdout}"))
            .to_string()
    };
    assert!(line("alpha").starts_with('*'), "{stdout}");
    assert_mentions(&line("alpha"), &["fixture", "usable"]);
    assert_mentions(&line("broken"), &["not usable", "missing.json"]);
    assert_mentions(
        &line("cli"),
        &["command", "not usable", "/surely/not/a/program"],
    );
    assert_mentions(&line("deepseek"), &["built-in", "DEEPSEEK_API_KEY"]);
}

#[test]
fn resume_rebuilds_the_configured_providers() {
    let ws = routed_workspace(
        "const a = await agent(\"one\");\nconst b = await agent(\"two\", { provider: \"beta\" });\nreturn [a, b];",
    );
    let dir = ws.dir.path().to_path_buf();
    let out = ws.run(&[]);
    out.assert_code(0);
    let id = common::only_run_id(&dir);
    // Forget the answers: a resume must replay both without the providers.
    std::fs::write(dir.join("alpha.json"), fixture(json!([])).to_string()).expect("write");
    std::fs::write(dir.join("beta.json"), fixture(json!([])).to_string()).expect("write");
    let (stdout, stderr, code) = dsh_in(&dir, &["workflow", "resume", &id, "--events", "none"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!(["from alpha", "from beta"])
    );
    assert_mentions(&stderr, &["2 call(s) replayed"]);
}

#[test]
fn a_command_provider_in_the_contracts_spelling_answers() {
    let ws = Workspace::new(
        "wf.ts",
        "const a = await agent(\"shout this\");\nconst b = await agent(\"echo this\", { provider: \"echo\" });\nreturn [a, b];",
        None,
    );
    ws.file(
        "dsh.toml",
        r#"
[workflow]
provider = "upper"

[providers.upper]
kind = "command"
command = ["/bin/sh", "-c", "tr a-z A-Z"]
prompt = "stdin"

[providers.echo]
kind = "command"
command = ["/bin/echo", "got:"]
prompt = "arg"
"#,
    );
    let out = ws.run(&["--output", "result"]);
    out.assert_code(0);
    assert_event_guarantees(&out.events);
    assert_eq!(out.json()["value"], json!(["SHOUT THIS", "got: echo this"]));
}

#[test]
fn an_unknown_agent_type_is_agent_start_listing_the_known_ones() {
    let ws = routed_workspace(
        "try { await agent(\"x\", { agentType: \"reviewr\" }); return \"ran\"; } catch (e: any) { return e.code + \": \" + e.message; }",
    );
    let out = ws.run(&[]);
    out.assert_code(0);
    let msg = out.json().as_str().unwrap_or_default().to_string();
    assert_mentions(
        &msg,
        &[
            "AGENT_START",
            "reviewr",
            "known agent types: Explore, Plan, claude, general-purpose, reviewer, statusline-setup",
            "[agent_types.reviewr]",
        ],
    );
}

/// Claude Code's built-in agent types run without any configuration: they
/// go to the default provider with a system prompt of their own (the
/// corpus's scripts name `general-purpose` and `Explore` without defining
/// them).
#[test]
fn claude_code_built_in_agent_types_route_to_the_default_provider() {
    let ws = routed_workspace(
        r#"return await parallel(["general-purpose", "Explore", "Plan", "claude"].map((t) => () => agent("x", { agentType: t })));"#,
    );
    let out = ws.run(&["--output", "result"]);
    out.assert_code(0);
    assert_eq!(
        out.json()["value"],
        json!(["from alpha", "from alpha", "from alpha", "from alpha"])
    );
    assert!(
        out.events_of("workflow/log").is_empty(),
        "no item failed: {:?}",
        out.events
    );
}

#[test]
fn a_changed_agent_type_system_prompt_is_asked_again_on_resume() {
    let ws = Workspace::new(
        "wf.ts",
        "return await agent(\"what do you say?\", { agentType: \"speaker\" });",
        None,
    );
    let dir = ws.dir.path().to_path_buf();
    let config = |system: &str| {
        format!(
            "[workflow]\nprovider = \"echo\"\n\n[providers.echo]\nkind = \"command\"\ncommand = [\"/bin/echo\", \"sys={{systemPrompt}}\"]\n\n[agent_types.speaker]\nsystem_prompt = \"{system}\"\n"
        )
    };
    ws.file("dsh.toml", &config("ALPHA"));
    let out = ws.run(&[]);
    out.assert_code(0);
    assert_eq!(out.json(), json!("sys=ALPHA"));
    let id = common::only_run_id(&dir);
    std::fs::write(dir.join("dsh.toml"), config("BETA")).expect("write");
    let (stdout, stderr, code) = dsh_in(&dir, &["workflow", "resume", &id, "--events", "none"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("json"),
        json!("sys=BETA")
    );
    assert_mentions(&stderr, &["0 call(s) replayed", "1 ran live"]);
}

/// A project with `.claude/agents/*.md` files and a user directory (HOME
/// is a temporary directory, so the real `~/.claude` is never read). The
/// default provider echoes what it was given: system prompt, tools,
/// disallowed tools and model.
fn agents_workspace(script: &str) -> (Workspace, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("home");
    let ws =
        Workspace::new("wf.ts", script, None).with_env("HOME", &home.path().display().to_string());
    let project = ws.dir.path().join(".claude/agents");
    std::fs::create_dir_all(&project).expect("mkdir");
    let user = home.path().join(".claude/agents");
    std::fs::create_dir_all(&user).expect("mkdir");
    std::fs::write(
        project.join("reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews a change for bugs\ntools: Read, Grep\nmodel: review-model\ncolor: red\n---\nYou are the project reviewer.\n",
    )
    .expect("write");
    std::fs::write(
        user.join("reviewer.md"),
        "---\nname: reviewer\ndescription: the user's reviewer\n---\nYou are the user reviewer.\n",
    )
    .expect("write");
    std::fs::write(
        user.join("tester.md"),
        "---\nname: tester\ndescription: Writes tests\ndisallowedTools: [Bash]\nmodel: sonnet\n---\nYou write tests.\n",
    )
    .expect("write");
    std::fs::write(
        project.join("broken.md"),
        "---\nname: broken\ndescription: [unclosed\n---\nnever used\n",
    )
    .expect("write");
    ws.file(
        "dsh.toml",
        "[workflow]\nprovider = \"echo\"\n\n[providers.echo]\nkind = \"command\"\ncommand = [\"/bin/echo\", \"sys={systemPrompt}\", \"tools={tools}\", \"no={disallowedTools}\", \"model={model}\"]\n",
    );
    (ws, home)
}

#[test]
fn agent_files_give_the_call_its_system_prompt_tools_and_model() {
    let (ws, _home) = agents_workspace(
        r#"
const r = await agent("review", { agentType: "reviewer" });
const t = await agent("test", { agentType: "tester" });
const e = await agent("look", { agentType: "Explore" });
let b = "ran";
try { await agent("x", { agentType: "broken" }); } catch (err: any) { b = err.code + ": " + err.message; }
let u = "ran";
try { await agent("x", { agentType: "nobody" }); } catch (err: any) { u = err.code + ": " + err.message; }
return { r, t, e, b, u };
"#,
    );
    let out = ws.run(&[]);
    out.assert_code(0);
    let v = out.json();
    assert_eq!(
        v["r"],
        "sys=You are the project reviewer. tools=Read,Grep model=review-model"
    );
    // `sonnet` is Claude Code's alias: ignored, so no model argument.
    assert_eq!(v["t"], "sys=You write tests. no=Bash");
    assert!(
        v["e"]
            .as_str()
            .is_some_and(|s| s.contains("tools=Read,Grep,Glob")),
        "{v}"
    );
    assert_mentions(
        v["b"].as_str().unwrap_or_default(),
        &[
            "AGENT_START",
            "\"broken\"",
            "cannot be used",
            ".claude/agents/broken.md:4:",
            "not valid YAML",
        ],
    );
    assert_mentions(
        v["u"].as_str().unwrap_or_default(),
        &[
            "AGENT_START",
            "known agent types: Explore, Plan, broken, claude, general-purpose, reviewer, statusline-setup, tester",
            ".claude/agents/nobody.md",
        ],
    );
}

#[test]
fn agents_lists_each_type_with_its_source_and_what_it_hides() {
    let (ws, home) = agents_workspace("return 1;");
    ws.file(
        "dsh.toml",
        "[agent_types.Plan]\nsystem_prompt = \"plan my way\"\nmodel = \"planner\"\n",
    );
    let out = std::process::Command::new(common::DSH)
        .current_dir(ws.dir.path())
        .env("HOME", home.path())
        .args(["workflow", "agents"])
        .output()
        .expect("run dsh");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}"))
            .to_string()
    };
    let project = ws.dir.path().join(".claude/agents");
    let user = home.path().join(".claude/agents");
    assert_mentions(
        &line("reviewer"),
        &[
            &project.join("reviewer.md").display().to_string(),
            "model: review-model",
            "tools: Read, Grep",
            "Reviews a change for bugs",
            "ignored fields: color",
        ],
    );
    assert_mentions(
        &line("tester"),
        &[
            "disallowed: Bash",
            "model: -",
            "\"sonnet\" names a Claude Code model",
        ],
    );
    assert_mentions(&line("Explore"), &["built-in", "tools: Read, Grep, Glob"]);
    // A type without a tool list gets the provider's tools (read-only by
    // default in the agent loop), never "all".
    assert_mentions(
        &line("general-purpose"),
        &["built-in", "tools: the provider's"],
    );
    assert!(!stdout.contains("tools: all"), "{stdout}");
    assert_mentions(&line("Plan"), &["dsh.toml:1", "model: planner"]);
    assert_mentions(
        &line("broken"),
        &["broken.md:4:", "error:", "not valid YAML"],
    );
    let shadowed = stdout
        .split("shadowed:")
        .nth(1)
        .expect("a shadowed section");
    assert_mentions(
        shadowed,
        &[
            &format!(
                "{}  shadowed by {}",
                user.join("reviewer.md").display(),
                project.join("reviewer.md").display()
            ),
            "built-in  shadowed by ",
        ],
    );
}

/// The same project with a fixture provider: the agent file's model
/// reaches the fixture's matching (and a call's own model wins).
#[test]
fn agent_file_models_reach_a_configured_fixture_provider() {
    let (ws, _home) = agents_workspace(
        r#"return [await agent("a", { agentType: "reviewer" }), await agent("b", { agentType: "reviewer", model: "mine" })];"#,
    );
    write(
        &ws,
        "fx.json",
        &fixture(json!([
            { "match": { "model": "review-model", "agentType": "reviewer" }, "text": "routed by the file" },
            { "match": { "model": "mine" }, "text": "the call's model" },
        ])),
    );
    ws.file(
        "dsh.toml",
        "[workflow]\nprovider = \"fx\"\n\n[providers.fx]\nkind = \"fixture\"\npath = \"fx.json\"\n",
    );
    let out = ws.run(&[]);
    out.assert_code(0);
    assert_eq!(
        out.json(),
        json!(["routed by the file", "the call's model"])
    );
}

/// With a fixture (or the dry run) the agent types still apply: an unknown
/// `agentType` rejects with `AGENT_START` naming the known types — as Claude
/// Code throws for it — and a `.claude/agents/` type is known.
#[rstest]
#[case::fixture(&[][..])]
#[case::dry_run(&["--dry-run"][..])]
fn agent_types_apply_to_fixture_and_dry_runs(#[case] flags: &[&str]) {
    let script = r#"export const meta = { name: "t", description: "d" };
const unknown = await agent("x", { agentType: "nope" }).catch((e) => e.code + " " + e.message);
const known = await agent("y", { agentType: "local-type" });
return { unknown, known: typeof known };
"#;
    let answers = fixture(json!([{ "match": {}, "text": "ok" }]));
    let ws = Workspace::new("wf.ts", script, flags.is_empty().then_some(&answers));
    let agents = ws.dir.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).expect("mkdir");
    std::fs::write(
        agents.join("local-type.md"),
        "---\nname: local-type\ndescription: a local type\n---\nYou help.\n",
    )
    .expect("agent file");
    let home = ws.dir.path().join("home").display().to_string();
    let out = ws.with_env("HOME", &home).run(flags);
    out.assert_code(0);
    let v = out.json();
    let unknown = v["unknown"].as_str().unwrap_or_default();
    assert!(unknown.starts_with("AGENT_START "), "{v:#}");
    assert_mentions(
        unknown,
        &["unknown agentType \"nope\"", "local-type", "Explore"],
    );
    assert_eq!(v["known"], "string");
}
