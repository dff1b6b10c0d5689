//! Files a user names are read only when they are regular files, and
//! never more than a limit: a device, a FIFO or a symlink to one, named as
//! the script, the fixture or the args file, is refused at once with the
//! flag and the reason (it used to read `/dev/zero` up to 2 GB, and to
//! wait forever on a FIFO).

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
