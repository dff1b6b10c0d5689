//! A run directory is data, not instructions: `resume` never follows a
//! symlink planted in it (the lock, the journal, `run.json`), and never
//! runs a configuration that `run.json` names unless the user names it
//! too (`--config`, or the `dsh.toml` found from the working directory).

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{dsh_in, only_run_id};

const SCRIPT: &str =
    "export const meta = { name: \"t\", description: \"d\" };\nreturn await agent(\"x\");\n";
const FIXTURE: &str = r#"{"version": 1, "answers": [{"match": {}, "text": "hi", "times": 5}]}"#;

/// A run made with `dsh.toml` (a fixture provider), settled; its directory.
fn settled_run(d: &Path) -> PathBuf {
    std::fs::write(d.join("wf.ts"), SCRIPT).expect("script");
    std::fs::write(d.join("fx.json"), FIXTURE).expect("fixture");
    std::fs::write(
        d.join("dsh.toml"),
        "[workflow]\nprovider = \"fx\"\n\n[providers.fx]\nkind = \"fixture\"\npath = \"fx.json\"\n",
    )
    .expect("config");
    let (_, stderr, code) = dsh_in(d, &["workflow", "run", "wf.ts"]);
    assert_eq!(code, Some(0), "{stderr}");
    d.join(".dsh/runs").join(only_run_id(d))
}

#[test]
fn an_unchanged_run_resumes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let run = settled_run(d);
    let (stdout, stderr, code) = dsh_in(d, &["workflow", "resume", run.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "\"hi\"");
}

#[rstest::rstest]
#[case::lock("lock")]
#[case::journal("journal.jsonl")]
#[case::run_json("run.json")]
fn a_symlink_in_the_run_directory_is_refused_not_followed(#[case] name: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let run = settled_run(d);
    let victim = d.join("victim.txt");
    std::fs::write(&victim, "untouched").expect("victim");
    if name == "run.json" {
        // The link points at a copy of the real run.json: a followed link
        // would resume happily.
        std::fs::copy(run.join(name), d.join("copy.json")).expect("copy");
        std::fs::remove_file(run.join(name)).expect("rm");
        std::os::unix::fs::symlink(d.join("copy.json"), run.join(name)).expect("symlink");
    } else {
        std::fs::remove_file(run.join(name)).ok();
        std::os::unix::fs::symlink(&victim, run.join(name)).expect("symlink");
    }
    let (stdout, stderr, code) = dsh_in(d, &["workflow", "resume", run.to_str().expect("utf-8")]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(stderr.starts_with("error[USAGE]: "), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "untouched"
    );
}

#[test]
fn an_edited_run_json_cannot_point_resume_at_another_configuration() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let run = settled_run(d);
    // Another configuration whose default provider would run a command.
    let marker = d.join("pwned");
    let evil = d.join("evil");
    std::fs::create_dir(&evil).expect("mkdir");
    std::fs::write(
        evil.join("dsh.toml"),
        format!(
            "[workflow]\nprovider = \"x\"\n\n[providers.x]\nkind = \"command\"\ncommand = [\"touch\", \"{}\"]\n",
            marker.display()
        ),
    )
    .expect("evil config");
    let info_path = run.join("run.json");
    let info = std::fs::read_to_string(&info_path).expect("run.json");
    let real = d.join("dsh.toml").display().to_string();
    assert!(info.contains(&real), "{info}");
    std::fs::write(
        &info_path,
        info.replace(&real, &evil.join("dsh.toml").display().to_string()),
    )
    .expect("edit");
    // Empty the journal, so the call would have to be answered live.
    std::fs::write(run.join("journal.jsonl"), "").expect("journal");
    let (_, stderr, code) = dsh_in(d, &["workflow", "resume", run.to_str().expect("utf-8")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not the one named now"), "{stderr}");
    assert!(!marker.exists(), "the other configuration's command ran");

    // Named on the command line, it is the user's word: it is used.
    let evil_toml = evil.join("dsh.toml").display().to_string();
    let run_arg = run.to_str().expect("utf-8");
    let (_, stderr, _) = dsh_in(d, &["workflow", "resume", run_arg, "--config", &evil_toml]);
    assert!(!stderr.contains("is not the one named now"), "{stderr}");
}
