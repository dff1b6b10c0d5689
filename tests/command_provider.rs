//! End-to-end tests of the `command` provider: real programs (small shell
//! scripts written into a temporary directory) answering `agent()` calls of
//! real runs through the library, with the `dsh` binary as the worker.
//!
//! Every wait is bounded and synchronizes on something observable (a marker
//! file a fake agent writes, an event, a process leaving /proc); time
//! bounds are generous upper limits only.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::lib::{finish, request};
use common::{POLL, WAIT_BOUND, agent_end, events_of, process_alive};
use dsh_orchestrator::providers::SetupError;
use dsh_orchestrator::providers::command::{CommandConfig, CommandProvider};
use dsh_orchestrator::{AgentRequest, ErrorCode, RunResult, StopReason, SubagentProvider, start};
use rstest::rstest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

// ------------------------------------------------------------------ helpers

/// A scratch directory for scripts, markers and repositories.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A path inside the scratch directory.
    fn at(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes an executable `#!/bin/sh` script; `@DIR@` in `body` becomes
    /// the scratch directory.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.at(name);
        let body = body.replace("@DIR@", &self.path().display().to_string());
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// A command provider named `fake` configured by `cfg` (the keys of a
    /// `[providers.fake]` table), relative paths relative to the scratch dir.
    fn provider(&self, cfg: Value) -> Arc<CommandProvider> {
        let cfg: CommandConfig = serde_json::from_value(cfg).expect("config deserializes");
        Arc::new(CommandProvider::new("fake", &cfg, self.path()).expect("provider usable"))
    }
}

/// Runs `script` with `provider`; checks the §8 event guarantees and
/// disposes the run. Returns the result and the events.
async fn run_with(script: &str, provider: Arc<CommandProvider>) -> (RunResult, Vec<Value>) {
    let run = start(request(script).with_provider(provider)).expect("start");
    finish(run).await
}

#[track_caller]
fn assert_completed(r: &RunResult) {
    assert!(r.is_completed(), "{r:?}");
}

/// Waits (bounded) until `path` holds a complete line; returns it trimmed.
async fn wait_marker(path: &Path) -> String {
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no marker {} within {WAIT_BOUND:?}",
            path.display()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Live (non-zombie) members of process group `pgid`, from /proc.
fn group_members(pgid: u32) -> Vec<u32> {
    common::all_pids()
        .into_iter()
        .filter(|pid| {
            common::proc_stat(*pid)
                .is_some_and(|(state, _, pgrp)| pgrp == pgid && !matches!(state, 'Z' | 'X'))
        })
        .collect()
}

/// Waits (bounded) until the group has no live member; returns how long.
async fn wait_group_gone(pgid: u32) -> Duration {
    let t0 = Instant::now();
    let bound = Duration::from_secs(15);
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < bound,
            "process group {pgid} still has {left:?} after {bound:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits (bounded) until `pid` has left /proc (or is a zombie).
async fn wait_gone(pid: u32) {
    let t0 = Instant::now();
    while process_alive(pid) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "process {pid} is still alive"
        );
        tokio::time::sleep(POLL).await;
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=dsh test",
            "-c",
            "user.email=test@dsh.invalid",
        ])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit (README, sub/file).
fn git_repo(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README"), "hello\n").expect("write");
    std::fs::write(dir.join("sub/file"), "in sub\n").expect("write");
    git(dir, &["add", "README", "sub/file"]);
    git(dir, &["commit", "-q", "-m", "init"]);
}

const ONE_CALL: &str = "return await agent(\"the prompt\");";

// ------------------------------------------------------------------ prompts and placeholders

#[rstest]
#[case::stdin(json!({ "argv": ["cat"] }))]
#[case::stdin_explicit(json!({ "argv": ["sh", "-c", "cat"], "prompt": "stdin" }))]
#[case::argv(json!({ "argv": ["printf", "%s", "{prompt}"] }))]
#[case::argv_explicit(json!({ "argv": ["printf", "%s", "{prompt}"], "prompt": "argv" }))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_reaches_the_program(#[case] cfg: Value) {
    let s = Scratch::new();
    let script = "const [a, b] = await Promise.all([agent(\"first\\nline two\"), agent(\"second ✓\")]);\nreturn { a, b };";
    let (r, events) = run_with(script, s.provider(cfg)).await;
    assert_completed(&r);
    assert_eq!(r.value, json!({ "a": "first\nline two", "b": "second ✓" }));
    let ids: Vec<&str> = events_of(&events, "workflow/agent-start")
        .iter()
        .map(|e| e["childId"].as_str().expect("childId"))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["fake-1", "fake-2"]);
}

#[rstest]
#[case::all_given(
    "{ model: \"m1\", effort: \"high\", agentType: \"reviewer\" }",
    "[--model=m1]\n[high]\n[--agent=reviewer]\n[P]\n[{prompt}]\n[${HOME}]\n[{\"a\":{\"b\":1}}]"
)]
#[case::none_given("{}", "[P]\n[{prompt}]\n[${HOME}]\n[{\"a\":{\"b\":1}}]")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_are_substituted_and_absent_ones_drop_their_argument(
    #[case] options: &str,
    #[case] want: &str,
) {
    let s = Scratch::new();
    let args = s.script(
        "args.sh",
        "for a in \"$@\"; do printf '[%s]\\n' \"$a\"; done",
    );
    let p = s.provider(json!({ "argv": [
        args, "--model={model}", "{effort}", "--agent={agentType}", "--sys={systemPrompt}",
        "{prompt}", "{{prompt}}", "${HOME}", "{\"a\":{\"b\":1}}"
    ] }));
    let (r, _) = run_with(&format!("return await agent(\"P\", {options});"), p).await;
    assert_completed(&r);
    assert_eq!(r.value, json!(want));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_file_placeholder_holds_the_schema_and_is_removed() {
    let s = Scratch::new();
    let prog = s.script(
        "schema.sh",
        "printf '%s\\n' \"$1\" > @DIR@/schema-path\ncat \"$1\"",
    );
    let p = s.provider(json!({ "argv": [prog, "{schemaFile}", "{prompt}"] }));
    let script = "return await agent(\"x\", { schema: { type: \"object\", properties: { type: { type: \"string\" } } } });";
    let (r, _) = run_with(script, p).await;
    assert_completed(&r);
    assert_eq!(
        r.value,
        json!({ "type": "object", "properties": { "type": { "type": "string" } } })
    );
    let path = std::fs::read_to_string(s.at("schema-path")).expect("path recorded");
    assert!(
        !Path::new(path.trim()).exists(),
        "{path} is removed after the call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_listed_variables_reach_the_program() {
    // Cargo sets both for the tests; only one is passed through.
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let s = Scratch::new();
    let p = s.provider(json!({
        "argv": ["env"], "env": ["CARGO_PKG_NAME", "DSH_TEST_SURELY_UNSET"]
    }));
    let (r, _) = run_with(ONE_CALL, p).await;
    assert_completed(&r);
    let text = r.value.as_str().expect("text").to_string();
    let names: Vec<&str> = text
        .lines()
        .map(|l| l.split('=').next().unwrap_or(""))
        .collect();
    assert!(
        text.lines().any(|l| l == "CARGO_PKG_NAME=dsh"),
        "the passed variable arrives: {text}"
    );
    assert!(names.contains(&"PATH"), "{text}");
    for n in &names {
        assert!(
            ["PATH", "HOME", "CARGO_PKG_NAME"].contains(n),
            "{n} leaked into the program's environment: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwd_is_relative_to_the_config_directory() {
    let s = Scratch::new();
    std::fs::create_dir(s.at("work")).expect("mkdir");
    let p = s.provider(json!({ "argv": ["pwd"], "cwd": "work" }));
    let (r, _) = run_with(ONE_CALL, p).await;
    assert_completed(&r);
    let got = PathBuf::from(r.value.as_str().expect("text"));
    assert_eq!(
        got.canonicalize().expect("exists"),
        s.at("work").canonicalize().expect("exists")
    );
}

// ------------------------------------------------------------------ failures

#[rstest]
#[case::exit_status(
    json!({}),
    "echo partial answer\necho 'boom: the model refused' >&2\nexit 3",
    &["exited with status 3", "boom: the model refused"]
)]
#[case::killed_by_signal(json!({}), "echo dying >&2\nkill -KILL $$", &["was killed by SIGKILL", "dying"])]
#[case::stderr_tail(
    json!({}),
    "i=0\nwhile [ $i -lt 3000 ]; do echo \"noise line $i\" >&2; i=$((i+1)); done\necho 'the real cause' >&2\nexit 1",
    &["exited with status 1", "the real cause"]
)]
#[case::timeout(
    json!({ "timeout": "300ms", "grace": "200ms" }),
    "echo started >&2\nsleep 30",
    &["did not finish within the timeout of 300ms", "started"]
)]
#[case::no_json_for_a_schema(json!({ "schema": true }), "echo 'I would rather not.'", &["printed no JSON value", "I would rather not."])]
#[case::empty_for_a_schema(json!({ "schema": true }), "true", &["printed nothing"])]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_program_resolves_null_with_a_reason(
    #[case] extra: Value,
    #[case] body: &str,
    #[case] mentions: &[&str],
) {
    let s = Scratch::new();
    let prog = s.script("fail.sh", body);
    let mut cfg = json!({ "argv": [prog] });
    let with_schema = extra.get("schema").is_some();
    for (k, v) in extra.as_object().expect("object") {
        if k != "schema" {
            cfg[k] = v.clone();
        }
    }
    let script = if with_schema {
        "const v = await agent(\"x\", { schema: { type: \"object\" } });\nreturn { v, after: \"the run went on\" };"
    } else {
        "const v = await agent(\"x\");\nreturn { v, after: \"the run went on\" };"
    };
    let (r, events) = run_with(script, s.provider(cfg)).await;
    assert_completed(&r);
    assert_eq!(r.value, json!({ "v": null, "after": "the run went on" }));
    let end = agent_end(&events);
    assert_eq!(end["outcome"], "failed", "{end}");
    let reason = end["reason"].as_str().expect("a reason");
    for m in mentions {
        assert!(reason.contains(m), "reason should mention {m:?}: {reason}");
    }
    assert!(
        reason.len() < 4096 + 512,
        "the reason is bounded: {}",
        reason.len()
    );
    assert!(
        !reason.contains("noise line 0\n"),
        "only the tail of stderr: {reason}"
    );
}

#[rstest]
#[case::too_long_for_an_argument("\"x\".repeat(300000)", "E2BIG")]
#[case::nul_byte("\"a\\u0000b\"", "NUL byte")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_cannot_be_an_argument_fails_the_call(
    #[case] prompt: &str,
    #[case] mention: &str,
) {
    let s = Scratch::new();
    let p = s.provider(json!({ "argv": ["printf", "%s", "{prompt}"] }));
    let script = format!("const v = await agent({prompt});\nreturn {{ v, after: 1 }};");
    let (r, events) = run_with(&script, p).await;
    assert_completed(&r);
    assert_eq!(r.value, json!({ "v": null, "after": 1 }));
    let end = agent_end(&events);
    assert_eq!(end["outcome"], "failed");
    let reason = end["reason"].as_str().expect("reason");
    assert!(
        reason.contains(mention) && reason.contains("prompt = \"stdin\""),
        "{reason}"
    );
}

// ------------------------------------------------------------------ stopping programs

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_ignoring_sigterm_is_killed_after_the_grace() {
    let s = Scratch::new();
    let prog = s.script(
        "stubborn.sh",
        "trap '' TERM\necho $$ > @DIR@/pid.tmp && mv @DIR@/pid.tmp @DIR@/pid\nwhile :; do sleep 0.05; done",
    );
    let grace = Duration::from_millis(600);
    let p = s.provider(json!({ "argv": [prog], "grace": "600ms" }));
    let run = start(request(ONE_CALL).with_provider(p)).expect("start");
    let pgid: u32 = wait_marker(&s.at("pid")).await.parse().expect("pid");
    assert!(!group_members(pgid).is_empty(), "the program runs");
    let t0 = Instant::now();
    run.cancel("stop it");
    let (r, events) = finish(run).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled, "{r:?}");
    assert_eq!(agent_end(&events)["outcome"], "cancelled");
    wait_group_gone(pgid).await;
    let took = t0.elapsed();
    assert!(
        took >= grace,
        "SIGTERM was ignored, so only SIGKILL after the grace ended it (took {took:?})"
    );
    // Well before the provider's last-resort wait after SIGKILL (5 s): the
    // SIGKILL came at the end of the grace.
    assert!(took < grace + Duration::from_secs(4), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_never_awaited_is_stopped_when_the_run_ends() {
    let s = Scratch::new();
    // "hang" runs until stopped; "wait" returns once "hang" is running.
    let prog = s.script(
        "two.sh",
        "case \"$(cat)\" in\n\
         hang) echo $$ > @DIR@/pid.tmp && mv @DIR@/pid.tmp @DIR@/pid; while :; do sleep 0.05; done;;\n\
         wait) while [ ! -f @DIR@/pid ]; do sleep 0.01; done; echo ok;;\n\
         esac",
    );
    let p = s.provider(json!({ "argv": [prog], "grace": "500ms" }));
    let (r, events) = run_with("agent(\"hang\");\nreturn await agent(\"wait\");", p).await;
    assert_completed(&r);
    assert_eq!(r.value, json!("ok"));
    let outcomes = common::outcomes(&events);
    assert_eq!(outcomes.get(&1).map(String::as_str), Some("cancelled"));
    let pgid: u32 = wait_marker(&s.at("pid")).await.parse().expect("pid");
    wait_group_gone(pgid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_program_and_its_grandchildren() {
    let s = Scratch::new();
    // The grandchild ignores SIGTERM; the leader does not.
    let prog = s.script(
        "forks.sh",
        "sh -c 'trap \"\" TERM; echo $$ > @DIR@/gc.tmp && mv @DIR@/gc.tmp @DIR@/gc; while :; do sleep 0.05; done' &\necho $$ > @DIR@/pid.tmp && mv @DIR@/pid.tmp @DIR@/pid\nwait",
    );
    let p = s.provider(json!({ "argv": [prog], "grace": "10s" }));
    let run = start(request(ONE_CALL).with_provider(p)).expect("start");
    let leader: u32 = wait_marker(&s.at("pid")).await.parse().expect("pid");
    let grandchild: u32 = wait_marker(&s.at("gc")).await.parse().expect("pid");
    assert!(process_alive(leader) && process_alive(grandchild));
    let t0 = Instant::now();
    run.cancel("stop");
    let (r, events) = finish(run).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled, "{r:?}");
    assert_eq!(agent_end(&events)["outcome"], "cancelled");
    wait_gone(leader).await;
    wait_gone(grandchild).await;
    wait_group_gone(leader).await;
    // The leader died of SIGTERM at once; the grandchild did not wait for
    // the 10 s grace: the group is killed as soon as its leader is gone.
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_grandchild_does_not_outlive_a_finished_program() {
    let s = Scratch::new();
    let prog = s.script("bg.sh", "sleep 1000 &\necho $! > @DIR@/gc\necho done");
    let p = s.provider(json!({ "argv": [prog] }));
    let t0 = Instant::now();
    let (r, _) = run_with(ONE_CALL, p).await;
    assert_completed(&r);
    assert_eq!(r.value, json!("done"));
    let gc: u32 = wait_marker(&s.at("gc")).await.parse().expect("pid");
    wait_gone(gc).await;
    // No waiting for the pipe the sleeper held open.
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

#[rstest]
#[case::at_the_cap(65536, true)]
#[case::one_byte_over(65537, false)]
#[case::flood(0, false)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_is_capped(#[case] bytes: u64, #[case] fits: bool) {
    let s = Scratch::new();
    let body = if bytes == 0 {
        // Writes forever.
        "exec yes".to_string()
    } else {
        format!("head -c {bytes} /dev/zero | tr '\\0' a")
    };
    let prog = s.script("out.sh", &body);
    let p = s.provider(json!({ "argv": [prog], "output_limit": "64KiB", "grace": "1s" }));
    let (r, events) = run_with(ONE_CALL, p).await;
    assert_completed(&r);
    let end = agent_end(&events);
    if fits {
        assert_eq!(r.value.as_str().map(str::len), Some(65536));
        assert_eq!(end["outcome"], "completed");
    } else {
        assert_eq!(r.value, Value::Null);
        assert_eq!(end["outcome"], "failed");
        let reason = end["reason"].as_str().expect("reason");
        assert!(reason.contains("output_limit = 65536 bytes"), "{reason}");
    }
}

// ------------------------------------------------------------------ structured answers

const SCHEMA_CALL: &str = "return await agent(\"judge\", { schema: { type: \"object\", properties: { ok: { type: \"boolean\" }, n: { type: \"integer\" } }, required: [\"ok\", \"n\"] } });";

#[rstest]
#[case::whole_stdout("echo '{\"ok\": true, \"n\": 1}'", json!({ "ok": true, "n": 1 }))]
#[case::pretty_printed("printf '{\\n  \"ok\": true,\\n  \"n\": 2\\n}\\n'", json!({ "ok": true, "n": 2 }))]
#[case::last_after_chatter(
    "echo 'Let me think {step by step}...'\necho 'Draft: {\"ok\": false, \"n\": 0}'\necho 'Final answer: {\"ok\": true, \"n\": 3}'\necho 'Done.'",
    json!({ "ok": true, "n": 3 })
)]
#[case::fenced("printf 'Sure.\\n```json\\n{\"ok\": true, \"n\": 4}\\n```\\n'", json!({ "ok": true, "n": 4 }))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_answers_come_from_stdout(#[case] body: &str, #[case] want: Value) {
    let s = Scratch::new();
    // Reads its prompt first: the schema instruction is in it.
    let prog = s.script("json.sh", &format!("cat > @DIR@/prompt\n{body}"));
    let (r, events) = run_with(SCHEMA_CALL, s.provider(json!({ "argv": [prog] }))).await;
    assert_completed(&r);
    assert_eq!(r.value, want);
    assert_eq!(agent_end(&events)["outcome"], "completed");
    let prompt = std::fs::read_to_string(s.at("prompt")).expect("prompt");
    assert!(prompt.starts_with("judge\n\n"), "{prompt}");
    assert!(prompt.contains("\"required\":[\"ok\",\"n\"]"), "{prompt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_answer_is_validated_by_the_host() {
    let s = Scratch::new();
    let prog = s.script("json.sh", "echo '{\"ok\": \"yes\", \"n\": 1}'");
    let (r, events) = run_with(SCHEMA_CALL, s.provider(json!({ "argv": [prog] }))).await;
    assert_completed(&r);
    assert_eq!(r.value, Value::Null);
    let end = agent_end(&events);
    assert_eq!(end["outcome"], "failed");
    assert!(
        end["reason"]
            .as_str()
            .is_some_and(|m| m.contains("does not match the schema")),
        "{end}"
    );
}

// ------------------------------------------------------------------ isolation: worktree

#[rstest]
#[case::unchanged("pwd", false)]
#[case::untracked_file("echo new > new.txt\npwd", true)]
#[case::modified_file("echo more >> README\npwd", true)]
#[case::committed(
    "git -c user.name=a -c user.email=a@b.invalid commit -q --allow-empty -m agent\npwd",
    true
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktree_isolation(#[case] body: &str, #[case] kept: bool) {
    let s = Scratch::new();
    let repo = s.at("repo");
    git_repo(&repo);
    let prog = s.script("agent.sh", body);
    let p = s.provider(json!({ "argv": [prog], "cwd": "repo", "worktree_dir": "wts" }));
    let (r, events) = run_with(
        "return await agent(\"work\", { isolation: \"worktree\" });",
        p,
    )
    .await;
    assert_completed(&r);
    let ran_in = PathBuf::from(r.value.as_str().expect("pwd"));
    assert!(
        ran_in.starts_with(s.at("wts")),
        "{} is a worktree under worktree_dir",
        ran_in.display()
    );
    let end = agent_end(&events);
    assert_eq!(end["outcome"], "completed");
    // The user's checkout is untouched either way.
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(!repo.join("new.txt").exists());
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    if kept {
        let wt = &end["worktree"];
        assert_eq!(wt["path"], ran_in.display().to_string(), "{end}");
        assert_eq!(wt["branch"], "dsh/fake-1", "{end}");
        assert!(ran_in.join("README").exists());
        assert!(
            worktrees.contains(&ran_in.display().to_string()),
            "{worktrees}"
        );
        // The branch exists in the repository, at the worktree's HEAD.
        assert_eq!(
            git(&repo, &["rev-parse", "dsh/fake-1"]),
            git(&ran_in, &["rev-parse", "HEAD"])
        );
        assert_eq!(
            git(&ran_in, &["branch", "--show-current"]).trim(),
            "dsh/fake-1"
        );
    } else {
        assert!(end.get("worktree").is_none(), "{end}");
        assert!(!ran_in.exists(), "the unchanged worktree is removed");
        assert_eq!(
            worktrees.matches("worktree ").count(),
            1,
            "only the main checkout is left: {worktrees}"
        );
        assert!(git(&repo, &["branch", "--list", "dsh/*"]).is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktree_isolation_keeps_the_subdirectory_and_numbers_branches() {
    let s = Scratch::new();
    let repo = s.at("repo");
    git_repo(&repo);
    let prog = s.script("agent.sh", "echo x > made-here\npwd");
    let p = s.provider(json!({ "argv": [prog], "cwd": "repo/sub", "worktree_dir": "wts" }));
    let script = "const a = await agent(\"one\", { isolation: \"worktree\" });\nconst b = await agent(\"two\", { isolation: \"worktree\" });\nreturn [a, b];";
    let (r, events) = run_with(script, p).await;
    assert_completed(&r);
    let dirs: Vec<PathBuf> = r
        .value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| PathBuf::from(v.as_str().expect("pwd")))
        .collect();
    assert_ne!(dirs[0], dirs[1], "one worktree per call");
    for d in &dirs {
        assert!(d.ends_with("sub"), "{}", d.display());
        assert!(d.join("file").exists(), "the checkout's sub/ is there");
        assert!(d.join("made-here").exists());
    }
    let branches: Vec<&str> = events_of(&events, "workflow/agent-end")
        .iter()
        .map(|e| e["worktree"]["branch"].as_str().expect("branch"))
        .collect();
    assert_eq!(branches, ["dsh/fake-1", "dsh/fake-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktree_isolation_outside_a_repository_refuses_to_start() {
    let s = Scratch::new();
    std::fs::create_dir(s.at("plain")).expect("mkdir");
    let p = s.provider(json!({ "argv": ["pwd"], "cwd": "plain" }));
    let (r, events) = run_with(
        "return await agent(\"work\", { isolation: \"worktree\" });",
        p,
    )
    .await;
    assert_eq!(r.stop_reason, StopReason::Error, "{r:?}");
    let err = r.error.as_ref().expect("error");
    assert_eq!(err.code, ErrorCode::AgentStart, "{r:?}");
    assert!(err.message.contains("not inside a git repository"), "{r:?}");
    assert!(events_of(&events, "workflow/agent-start").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_isolation_values_are_unsupported() {
    let s = Scratch::new();
    let p = s.provider(json!({ "argv": ["cat"] }));
    let mut req = AgentRequest::new(1, "x", "x");
    req.options.isolation = Some("container".into());
    let Err(refused) = p.start(req, CancellationToken::new()).await else {
        panic!("isolation \"container\" must be refused");
    };
    assert_eq!(refused.code, ErrorCode::UnsupportedOption);
    assert!(refused.message.contains("\"container\""), "{refused}");
}

// ------------------------------------------------------------------ missing programs

#[test]
fn a_program_not_on_path_is_reported_before_any_run() {
    let s = Scratch::new();
    let cfg = CommandConfig::new(["dsh-test-no-such-agent", "-p"]);
    let err = cfg.usable(s.path()).expect_err("not usable");
    // Typed: the key it is about, and a problem that names the fix.
    let SetupError::Invalid { key, problem } = &err else {
        panic!("not a value problem: {err:?}");
    };
    assert_eq!(key, "argv[0]");
    assert!(
        problem.contains("dsh-test-no-such-agent") && problem.contains("not on PATH"),
        "{err}"
    );
    let err = CommandProvider::new("fake", &cfg, s.path()).expect_err("not buildable");
    assert!(err.to_string().contains("install it"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_gone_at_call_time_refuses_to_start() {
    let s = Scratch::new();
    let prog = s.script("vanishing.sh", "echo hi");
    let p = s.provider(json!({ "argv": ["./vanishing.sh"] }));
    std::fs::remove_file(&prog).expect("rm");
    let (r, events) = run_with(ONE_CALL, p).await;
    assert_eq!(r.stop_reason, StopReason::Error, "{r:?}");
    let err = r.error.as_ref().expect("error");
    assert_eq!(err.code, ErrorCode::AgentStart, "{r:?}");
    assert!(
        err.message.contains("vanishing.sh") && err.message.contains("fix argv[0]"),
        "{r:?}"
    );
    assert!(events_of(&events, "workflow/agent-start").is_empty());
}

/// A program run with the user's rights can reach its worktree's own git
/// directory too: it points `commondir` at a copy of the repository whose
/// config sets `core.fsmonitor` to a command, writes a `config.worktree`
/// and replaces `.git` with a symlink. The host puts all three back before
/// it keeps the worktree, so the user's `git -C <kept> status` runs none of
/// it and `git worktree remove` works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_worktrees_git_files_are_put_back() {
    let s = Scratch::new();
    let repo = s.at("repo");
    git_repo(&repo);
    let prog = s.script(
        "agent.sh",
        "admin=$(sed 's/^gitdir: //' .git)\n\
         cp -r \"$admin/$(cat \"$admin/commondir\")\" @DIR@/fake && rm -rf @DIR@/fake/worktrees\n\
         printf '[core]\\n\\tfsmonitor = \"touch @DIR@/ran\"\\n' >> @DIR@/fake/config\n\
         printf '%s\\n' @DIR@/fake > \"$admin/commondir\"\n\
         printf '[core]\\n\\tfsmonitor = \"touch @DIR@/ran\"\\n' > \"$admin/config.worktree\"\n\
         cp .git @DIR@/dotgit && rm .git && ln -s @DIR@/dotgit .git\n\
         echo more >> README\npwd",
    );
    let p = s.provider(json!({ "argv": [prog], "cwd": "repo", "worktree_dir": "wts" }));
    let (r, events) = run_with(
        "return await agent(\"work\", { isolation: \"worktree\" });",
        p,
    )
    .await;
    assert_completed(&r);
    assert!(s.at("fake/config").exists(), "the program ran");
    let end = agent_end(&events);
    let kept = PathBuf::from(end["worktree"]["path"].as_str().expect("kept"));
    assert!(
        std::fs::symlink_metadata(kept.join(".git"))
            .expect(".git")
            .is_file()
    );
    let status = git(&kept, &["status", "--porcelain"]);
    assert!(status.contains("README"), "{status}");
    assert!(
        !s.at("ran").exists(),
        "the user's git ran the program's fsmonitor"
    );
    git(
        &repo,
        &[
            "worktree",
            "remove",
            "--force",
            kept.to_str().expect("utf-8"),
        ],
    );
    assert!(!kept.exists());
}

/// A submodule the call populates with a git directory of its own (its
/// config sets `core.fsmonitor` to a command): the user's `git status` in
/// the kept worktree would run `git status` inside it, so the host removes
/// that `.git` before it keeps the worktree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submodule_populated_by_the_call_loses_its_git_link() {
    let s = Scratch::new();
    let lib = s.at("lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    git(&lib, &["init", "-q", "-b", "main"]);
    std::fs::write(lib.join("l"), "lib\n").expect("write");
    git(&lib, &["add", "l"]);
    git(&lib, &["commit", "-q", "-m", "lib"]);
    let repo = s.at("repo");
    git_repo(&repo);
    let lib_url = lib.display().to_string();
    git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &lib_url,
            "lib",
        ],
    );
    git(&repo, &["commit", "-q", "-m", "submodule"]);
    let prog = s.script(
        "agent.sh",
        "mkdir -p @DIR@/fakesub && cp -r @DIR@/lib/.git/. @DIR@/fakesub/\n\
         printf 'gitdir: @DIR@/fakesub\\n' > lib/.git\n\
         (cd lib && git checkout -q -f HEAD)\n\
         printf '[core]\\n\\tfsmonitor = \"touch @DIR@/ran\"\\n' >> @DIR@/fakesub/config\n\
         echo more >> README\npwd",
    );
    let p = s.provider(json!({ "argv": [prog], "cwd": "repo", "worktree_dir": "wts" }));
    let (r, events) = run_with(
        "return await agent(\"work\", { isolation: \"worktree\" });",
        p,
    )
    .await;
    assert_completed(&r);
    assert!(s.at("fakesub/config").exists(), "the program ran");
    let end = agent_end(&events);
    let kept = PathBuf::from(end["worktree"]["path"].as_str().expect("kept"));
    assert!(kept.join("lib/l").exists(), "the submodule's files stay");
    assert!(!kept.join("lib/.git").exists());
    let status = git(&kept, &["status", "--porcelain"]);
    assert!(status.contains("README"), "{status}");
    assert!(
        !s.at("ran").exists(),
        "the user's git ran the call's fsmonitor"
    );
}

// ------------------------------------------------------------------ signals

/// Regression (issue 33): a signal mask and ignored signals survive fork
/// and exec, and std no longer resets the mask; a `dsh` started with
/// SIGTERM blocked and SIGHUP ignored (a supervisor, `nohup`) handed both
/// to every program it started, whose stop logic then did nothing.
#[test]
fn programs_start_with_default_signals_whatever_dsh_inherited() {
    use std::os::unix::process::CommandExt as _;
    let ws = common::Workspace::new("wf.ts", "return await agent(\"x\");", None);
    ws.file(
        "dsh.toml",
        "[workflow]\nprovider = \"p\"\n\n[providers.p]\nkind = \"command\"\n\
         command = [\"/bin/sh\", \"-c\", \"grep -E '^Sig(Blk|Ign)' /proc/self/status\"]\n\
         prompt = \"stdin\"\n",
    );
    let mut cmd = ws.command(&["--output", "result"]);
    // SAFETY: between fork and exec of the test's own child: sigprocmask
    // and signal only (async-signal-safe), no allocation.
    unsafe {
        cmd.pre_exec(|| {
            let mut term: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut term);
            libc::sigaddset(&mut term, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &term, std::ptr::null_mut());
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = common::Running::adopt(cmd.spawn().expect("spawn dsh"), ws).finish();
    out.assert_code(0);
    let text = out.json()["value"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        text.lines().map(str::trim).collect::<Vec<_>>(),
        ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"],
        "{text:?}"
    );
}

/// Regression (issue 33): a `dsh` killed outright (SIGKILL) while a
/// program runs. The program died by its parent-death signal, but what it
/// started in the background lived on; programs now run under dsh's
/// reaper, whose parent-death signal makes it stop the whole subtree.
#[rstest]
#[case::background("sleep 300 & echo $! > bg.pid; wait")]
#[case::own_session("setsid sleep 300 & echo $! > bg.pid; wait")]
fn a_killed_dsh_leaves_no_background_job_of_a_program(#[case] body: &str) {
    let ws = common::Workspace::new("wf.ts", "return await agent(\"x\");", None);
    let script = ws.file(
        "prog.sh",
        &format!("#!/bin/sh\ncd \"$(dirname \"$0\")\"\n{body}\n"),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    ws.file(
        "dsh.toml",
        &format!(
            "[workflow]\nprovider = \"p\"\n\n[providers.p]\nkind = \"command\"\n\
             command = [\"{}\"]\nprompt = \"stdin\"\n",
            script.display()
        ),
    );
    let pid_file = ws.dir.path().join("bg.pid");
    let mut running = ws.spawn(&[]);
    let deadline = Instant::now() + WAIT_BOUND;
    let pid = loop {
        if let Ok(t) = std::fs::read_to_string(&pid_file)
            && t.ends_with('\n')
            && let Ok(pid) = t.trim().parse::<u32>()
        {
            break pid;
        }
        assert!(!running.exited(), "dsh ended before the program started");
        assert!(Instant::now() < deadline, "the program did not start");
        std::thread::sleep(POLL);
    };
    running.signal(libc::SIGKILL);
    let _ = running.child.wait();
    common::assert_process_gone(pid);
}

/// Regression (issue 33): a descriptor `dsh` inherited open (a CI
/// runner's pipe, a socket) was handed on to every program it started.
#[test]
fn programs_get_no_descriptor_dsh_inherited() {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::CommandExt as _;
    let ws = common::Workspace::new("wf.ts", "return await agent(\"x\");", None);
    let secret = ws.file("secret.txt", "secret\n");
    ws.file(
        "dsh.toml",
        "[workflow]\nprovider = \"p\"\n\n[providers.p]\nkind = \"command\"\n\
         command = [\"/bin/sh\", \"-c\", \"cat <&5; echo rc=$?\"]\nprompt = \"stdin\"\n",
    );
    let file = std::fs::File::open(&secret).expect("open");
    let fd = file.as_raw_fd();
    let mut cmd = ws.command(&["--output", "result"]);
    // SAFETY: dup2 only (async-signal-safe), in the test's own child: fd 5
    // open without close-on-exec, as an inherited descriptor is.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 5) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = common::Running::adopt(cmd.spawn().expect("spawn dsh"), ws).finish();
    out.assert_code(0);
    let text = out.json()["value"].as_str().unwrap_or_default().to_string();
    assert!(!text.contains("secret"), "{text:?}");
    assert!(text.contains("rc=") && !text.contains("rc=0"), "{text:?}");
}
