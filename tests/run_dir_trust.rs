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

/// Runs `dsh ARGS` in `dir` with its address space capped at 4 GiB (a
/// runaway read fails there instead of taking the machine's memory) and
/// killed after `limit`: `(stdout, stderr, code)`, or `None` when it had
/// to be killed.
fn dsh_capped(
    dir: &Path,
    args: &[&str],
    limit: std::time::Duration,
) -> Option<(String, String, Option<i32>)> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let out = tempfile::tempdir().expect("tempdir");
    let (out_p, err_p) = (out.path().join("out"), out.path().join("err"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_p).expect("out"))
        .stderr(std::fs::File::create(&err_p).expect("err"));
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let cap = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &cap) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn dsh");
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Some((
        std::fs::read_to_string(out_p).unwrap_or_default(),
        std::fs::read_to_string(err_p).unwrap_or_default(),
        status.code(),
    ))
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: a valid C string; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// What a cloned repository can leave in place of a run directory's file.
#[derive(Debug, Clone, Copy)]
enum Planted {
    /// A symlink to `/dev/zero`: endless bytes.
    DevZero,
    /// A FIFO nobody writes to: an open or a read blocks forever.
    Fifo,
    /// A sparse file of 64 GiB: all zeros, no newline.
    Sparse,
}

fn plant(path: &Path, what: Planted) {
    let _ = std::fs::remove_file(path);
    match what {
        Planted::DevZero => std::os::unix::fs::symlink("/dev/zero", path).expect("symlink"),
        Planted::Fifo => mkfifo(path),
        Planted::Sparse => std::fs::File::create(path)
            .and_then(|f| f.set_len(64 << 30))
            .expect("sparse file"),
    }
}

/// `runs`, `show` and `report` read `result.json` and `events.jsonl` the
/// bounded way: a planted link to `/dev/zero`, a FIFO or a huge sparse
/// file costs neither unbounded memory nor a hang, and the warning names
/// the file.
#[rstest::rstest]
#[case::result_dev_zero("result.json", Planted::DevZero)]
#[case::result_fifo("result.json", Planted::Fifo)]
#[case::result_sparse("result.json", Planted::Sparse)]
#[case::events_dev_zero("events.jsonl", Planted::DevZero)]
#[case::events_fifo("events.jsonl", Planted::Fifo)]
#[case::events_sparse("events.jsonl", Planted::Sparse)]
fn a_planted_special_file_in_a_run_directory_is_read_bounded(
    #[case] name: &str,
    #[case] what: Planted,
) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let run = settled_run(d);
    let id = only_run_id(d);
    plant(&run.join(name), what);
    let bound = std::time::Duration::from_secs(60);
    let commands: &[&[&str]] = if name == "events.jsonl" {
        &[&["workflow", "report", &id]]
    } else {
        &[
            &["workflow", "runs"],
            &["workflow", "show", &id],
            &["workflow", "report", &id],
        ]
    };
    for args in commands {
        let (stdout, stderr, code) = dsh_capped(d, args, bound)
            .unwrap_or_else(|| panic!("dsh {args:?} with {name} as {what:?} hung"));
        assert_eq!(code, Some(0), "{args:?}: {stdout}\n{stderr}");
        assert!(stdout.contains(&id) || args[1] == "report", "{stdout}");
        assert!(
            stderr.contains(&format!("dsh: .dsh/runs/{id}/{name}: ")),
            "{args:?} should warn naming {name}: {stderr}"
        );
    }
}

/// `resume` reads the script `run.json` names bounded too (a device is
/// passed over for the copy), and its copy only as a file of the run
/// directory.
#[rstest::rstest]
#[case::script_is_dev_zero("/dev/zero", None, 0)]
#[case::copy_outside_the_run_directory("/nonexistent/wf.ts", Some("../../../victim.txt"), 2)]
#[case::script_is_not_a_script_file("VICTIM", None, 0)]
fn resume_reads_the_script_named_by_run_json_bounded(
    #[case] script: &str,
    #[case] copy: Option<&str>,
    #[case] expected: i32,
) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let run = settled_run(d);
    std::fs::write(d.join("victim.txt"), "secret\n").expect("victim");
    let info_path = run.join("run.json");
    let mut info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info_path).expect("run.json"))
            .expect("JSON");
    info["script"] = if script == "VICTIM" {
        d.join("victim.txt").display().to_string().into()
    } else {
        script.into()
    };
    if let Some(c) = copy {
        info["scriptCopy"] = c.into();
    }
    std::fs::write(&info_path, info.to_string()).expect("edit");
    let run_arg = run.to_str().expect("utf-8");
    let (stdout, stderr, code) = dsh_capped(
        d,
        &["workflow", "resume", run_arg, "--allow-changed"],
        std::time::Duration::from_secs(60),
    )
    .expect("resume hung");
    assert_eq!(code, Some(expected), "{stdout}\n{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
    assert!(!stdout.contains("secret"), "{stdout}");
    if expected == 0 {
        // The copy ran: the original was not a script file to read.
        assert_eq!(stdout.trim(), "\"hi\"");
        return;
    }
    assert!(stderr.starts_with("error[USAGE]: "), "{stderr}");
    assert!(
        stderr.contains("not a file name in the run directory"),
        "{stderr}"
    );
}
