//! Files a user names are read only when they are regular files, and
//! never more than a limit: a device, a FIFO or a symlink to one, named as
//! the script, the fixture or the args file, is refused at once with the
//! flag and the reason (it used to read `/dev/zero` up to 2 GB, and to
//! wait forever on a FIFO). Files dsh writes (`--record`, `--events-file`)
//! are a new file or an existing regular one, never a device or a path
//! through a symlink, and a result or recording that could not be written
//! is not exit 0.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::dsh_in;

const SCRIPT: &str = "export const meta = { name: \"s\", description: \"d\" };\nreturn 1;\n";

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(status.success());
}

#[rstest::rstest]
#[case::fixture_device(&["--fixture", "/dev/zero"], "--fixture /dev/zero: cannot read: not a regular file (it is a character device)")]
#[case::fixture_fifo(&["--fixture", "pipe"], "--fixture pipe: cannot read: not a regular file (it is a FIFO)")]
#[case::args_fifo(&["--args-file", "pipe"], "--args-file pipe: cannot read: not a regular file (it is a FIFO)")]
#[case::args_device(&["--args-file", "/dev/zero"], "--args-file /dev/zero: cannot read: not a regular file (it is a character device)")]
fn a_device_or_fifo_named_by_a_flag_is_refused(#[case] flags: &[&str], #[case] says: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("wf.ts"), SCRIPT).expect("script");
    mkfifo(&dir.path().join("pipe"));
    let mut args = vec!["workflow", "run", "wf.ts", "--no-journal"];
    args.extend_from_slice(flags);
    let (stdout, stderr, code) = dsh_in(dir.path(), &args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with(&format!("error[USAGE]: {says}")),
        "{stderr}"
    );
}

#[rstest::rstest]
#[case::fifo("fifo.ts", "a FIFO")]
#[case::symlink_to_a_device("zero.ts", "a character device")]
fn a_script_that_is_not_a_regular_file_is_refused(#[case] name: &str, #[case] what: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    mkfifo(&dir.path().join("fifo.ts"));
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.ts")).expect("symlink");
    for command in ["run", "check"] {
        let mut args = vec!["workflow", command, name];
        if command == "run" {
            args.push("--no-journal");
        }
        let (_, stderr, code) = dsh_in(dir.path(), &args);
        assert_eq!(code, Some(2), "{command}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error[USAGE]: {name}: cannot read the script: not a regular file (it is {what})"
            )),
            "{command}: {stderr}"
        );
    }
}

// ------------------------------------------------------------------ output files

const FIXTURE: &str = r#"{"version": 1, "answers": [{"match": {}, "text": "hi"}]}"#;
const CALLING: &str =
    "export const meta = { name: \"s\", description: \"d\" };\nreturn await agent(\"x\");\n";

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("wf.ts"), CALLING).expect("script");
    std::fs::write(dir.path().join("f.json"), FIXTURE).expect("fixture");
    dir
}

/// `--record` writes a new file or over a regular one, atomically, never
/// through a symlink or onto a device; when it cannot, the run does not
/// exit 0.
#[test]
fn record_never_replaces_a_device_or_a_symlink_and_a_failure_is_not_exit_0() {
    use std::os::unix::fs::FileTypeExt;
    let dir = workspace();
    let d = dir.path();
    let run = |record: &str| {
        dsh_in(
            d,
            &[
                "workflow",
                "run",
                "wf.ts",
                "--fixture",
                "f.json",
                "--no-journal",
                "--record",
                record,
            ],
        )
    };

    let (stdout, stderr, code) = run("/dev/full");
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout.trim(), "\"hi\"", "the result is still shown");
    assert!(
        stderr.contains("error[USAGE]: --record /dev/full: cannot write the fixture"),
        "{stderr}"
    );
    assert!(stderr.contains("is a device"), "{stderr}");
    let dev = std::fs::metadata("/dev/full").expect("/dev/full");
    assert!(
        dev.file_type().is_char_device(),
        "/dev/full must stay a device"
    );

    std::fs::write(d.join("target.json"), "keep").expect("target");
    std::os::unix::fs::symlink(d.join("target.json"), d.join("link.json")).expect("symlink");
    let (_, stderr, code) = run("link.json");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is a symlink"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(d.join("target.json")).expect("read"),
        "keep"
    );

    let (_, stderr, code) = run("no/such/dir/rec.json");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--record no/such/dir/rec.json"), "{stderr}");

    let (_, stderr, code) = run("rec.json");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        std::fs::read_to_string(d.join("rec.json"))
            .expect("recorded")
            .contains("\"hi\"")
    );
}

#[rstest::rstest]
#[case::device("/dev/full", "not a regular file")]
#[case::symlink("link.jsonl", "cannot create")]
fn an_events_file_that_is_a_device_or_a_symlink_is_refused(#[case] path: &str, #[case] says: &str) {
    let dir = workspace();
    let d = dir.path();
    std::os::unix::fs::symlink(d.join("elsewhere.jsonl"), d.join("link.jsonl")).expect("symlink");
    let (stdout, stderr, code) = dsh_in(
        d,
        &[
            "workflow",
            "run",
            "wf.ts",
            "--fixture",
            "f.json",
            "--no-journal",
            "--events-file",
            path,
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with(&format!("error[USAGE]: --events-file {path}: {says}")),
        "{stderr}"
    );
    assert!(
        !d.join("elsewhere.jsonl").exists(),
        "nothing written through the link"
    );
}

/// A result that cannot reach stdout (a full disk) is not a success.
#[test]
fn a_result_that_cannot_be_written_to_stdout_is_exit_1() {
    let dir = workspace();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = std::process::Command::new(common::DSH)
        .current_dir(dir.path())
        .args([
            "workflow",
            "run",
            "wf.ts",
            "--fixture",
            "f.json",
            "--no-journal",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(full)
        .output()
        .expect("run dsh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write the result to stdout"),
        "{stderr}"
    );
}
