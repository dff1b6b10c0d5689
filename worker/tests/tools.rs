//! `dsh-worker tool`, end to end through the real binary: each tool's job
//! on a small temporary tree, and each way out of the workspace (paths,
//! symlinks, the shell, the network, outliving the call) refused.

#![cfg(target_os = "linux")]
// Test code: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use rstest::rstest;
use serde_json::{Value, json};

const WORKER: &str = env!("CARGO_BIN_EXE_dsh-worker");

/// A workspace `<tmp>/ws` (with a sibling `<tmp>/outside.txt` to escape
/// to): a git-like tree with an ignored directory.
struct Ws {
    root: tempfile::TempDir,
}

impl Ws {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        for (path, text) in [
            ("src/a.rs", "fn main() {\n    println!(\"hi\");\n}\n"),
            ("src/b.rs", "// TODO one\n// todo two\nfn b() {}\n"),
            ("README.md", "# TODO readme\n"),
            (".gitignore", "target/\n"),
            ("target/ignored.rs", "// TODO ignored\n"),
            (".git/HEAD", "ref: refs/heads/main\n"),
        ] {
            let p = ws.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::write(root.path().join("outside.txt"), "secret\n").unwrap();
        Ws { root }
    }

    fn path(&self) -> PathBuf {
        self.root.path().join("ws")
    }

    fn outside(&self) -> PathBuf {
        self.root.path().join("outside.txt")
    }

    /// One tool call with `extra` merged into the request.
    fn call_with(&self, tool: &str, input: Value, extra: Value, testing: &[&str]) -> Value {
        let mut req = json!({"workspace": self.path(), "tool": tool, "input": input});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        raw_call(&req.to_string(), testing)
    }

    fn call(&self, tool: &str, input: Value) -> Value {
        self.call_with(tool, input, json!({}), &[])
    }
}

/// Runs the binary with `stdin`; it must exit 0 with one JSON object.
/// `testing`: the value of `DSH_WORKER_TESTING` (e.g. `landlock-abi=0`).
fn raw_call(stdin: &str, testing: &[&str]) -> Value {
    let mut cmd = Command::new(WORKER);
    if !testing.is_empty() {
        cmd.env("DSH_WORKER_TESTING", testing.join(","));
    }
    let mut child = cmd
        .arg("tool")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}, stderr {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn status(v: &Value) -> &str {
    v["status"].as_str().unwrap()
}

fn output(v: &Value) -> &str {
    v["output"].as_str().unwrap()
}

fn landlock() -> bool {
    let abi = dsh_worker::sandbox::landlock::kernel_abi();
    if abi == 0 {
        eprintln!("SKIPPED: this kernel has no Landlock (ABI 0); the kernel layer is not tested");
    }
    abi > 0
}

// --- Read ---

#[rstest]
#[case::whole(json!({"file_path": "src/a.rs"}), "     1\tfn main() {\n     2\t    println!(\"hi\");\n     3\t}\n")]
#[case::absolute_offset_limit(json!({"file_path": "ABS/src/a.rs", "offset": 2, "limit": 1}), "     2\t    println!(\"hi\");\n[showing lines 2-2; more follow: read further with offset=3]")]
fn read_numbers_lines(#[case] mut input: Value, #[case] want: &str) {
    let ws = Ws::new();
    let p = input["file_path"]
        .as_str()
        .unwrap()
        .replace("ABS", &ws.path().display().to_string());
    input["file_path"] = p.into();
    let r = ws.call("Read", input);
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r), want);
    assert_eq!(r["sandbox"]["level"], "Full", "{r}");
}

#[test]
fn read_caps_output_and_says_how_to_go_on() {
    let ws = Ws::new();
    let text: String = (1..=500).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.path().join("long.txt"), text).unwrap();
    let r = ws.call_with(
        "Read",
        json!({"file_path": "long.txt"}),
        json!({"maxOutputBytes": 200}),
        &[],
    );
    assert_eq!(status(&r), "ok");
    let out = output(&r);
    assert!(out.len() < 300, "{out}");
    assert!(out.contains("read further with offset="), "{out}");
}

#[rstest]
#[case::system_file("/etc/passwd")]
#[case::dot_dot("../outside.txt")]
#[case::symlink_out("link")]
#[case::dot_dot_inside("src/../../outside.txt")]
fn read_outside_the_workspace_is_denied(#[case] path: &str) {
    let ws = Ws::new();
    std::os::unix::fs::symlink(ws.outside(), ws.path().join("link")).unwrap();
    let r = ws.call("Read", json!({"file_path": path}));
    assert_eq!(status(&r), "denied", "{r}");
    assert!(
        output(&r).starts_with(&format!("Read refused: {path}")),
        "{r}"
    );
    assert!(output(&r).contains("is outside the workspace"), "{r}");
    assert!(!output(&r).contains("secret"));
}

#[test]
fn read_refuses_binary_files_and_directories() {
    let ws = Ws::new();
    std::fs::write(ws.path().join("blob.bin"), b"ab\0cd").unwrap();
    let r = ws.call("Read", json!({"file_path": "blob.bin"}));
    assert_eq!(status(&r), "error");
    assert!(output(&r).contains("binary"), "{r}");
    let r = ws.call("Read", json!({"file_path": "src"}));
    assert_eq!(status(&r), "error");
    assert!(output(&r).contains("use LS"), "{r}");
    let r = ws.call("Read", json!({"file_path": "nope.rs"}));
    assert_eq!(status(&r), "error");
    assert!(output(&r).contains("nope.rs does not exist"), "{r}");
}

// --- Write and Edit ---

#[test]
fn write_creates_parents_inside_the_workspace() {
    let ws = Ws::new();
    let r = ws.call(
        "Write",
        json!({"file_path": "deep/er/new.txt", "content": "hello"}),
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r), "Created deep/er/new.txt (5 bytes)");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("deep/er/new.txt")).unwrap(),
        "hello"
    );
}

#[rstest]
#[case::dot_dot("../escaped.txt")]
#[case::absolute("ROOT/escaped.txt")]
#[case::through_symlinked_dir("outdir/escaped.txt")]
fn write_outside_is_denied_and_creates_nothing(#[case] path: &str) {
    let ws = Ws::new();
    std::os::unix::fs::symlink(ws.root.path(), ws.path().join("outdir")).unwrap();
    let path = path.replace("ROOT", &ws.root.path().display().to_string());
    let r = ws.call("Write", json!({"file_path": path, "content": "x"}));
    assert_eq!(status(&r), "denied", "{r}");
    assert!(output(&r).contains("outside the workspace"), "{r}");
    assert!(!ws.root.path().join("escaped.txt").exists());
}

#[test]
fn edit_replaces_exactly_and_counts() {
    let ws = Ws::new();
    let r = ws.call(
        "Edit",
        json!({"file_path": "src/a.rs", "old_string": "\"hi\"", "new_string": "\"hello\""}),
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r), "Edited src/a.rs: replaced 1 occurrence");
    assert!(
        std::fs::read_to_string(ws.path().join("src/a.rs"))
            .unwrap()
            .contains("println!(\"hello\")")
    );

    let r = ws.call(
        "Edit",
        json!({"file_path": "src/b.rs", "old_string": "//", "new_string": "#"}),
    );
    assert_eq!(status(&r), "error");
    assert!(output(&r).contains("occurs 2 times in src/b.rs"), "{r}");
    assert!(output(&r).contains("replace_all"), "{r}");

    let r = ws.call(
        "Edit",
        json!({"file_path": "src/b.rs", "old_string": "//", "new_string": "#", "replace_all": true}),
    );
    assert_eq!(output(&r), "Edited src/b.rs: replaced 2 occurrences");

    for (old, new, want) in [
        ("absent", "x", "was not found in src/b.rs"),
        ("fn", "fn", "the same"),
    ] {
        let r = ws.call(
            "Edit",
            json!({"file_path": "src/b.rs", "old_string": old, "new_string": new}),
        );
        assert_eq!(status(&r), "error");
        assert!(output(&r).contains(want), "{r}");
    }
}

// --- Glob, Grep, LS ---

#[test]
fn glob_lists_newest_first_and_honours_gitignore() {
    let ws = Ws::new();
    let now = SystemTime::now();
    for (file, age) in [("src/a.rs", 300), ("src/b.rs", 100)] {
        std::fs::File::options()
            .write(true)
            .open(ws.path().join(file))
            .unwrap()
            .set_modified(now - Duration::from_secs(age))
            .unwrap();
    }
    let r = ws.call("Glob", json!({"pattern": "**/*.rs"}));
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r), "src/b.rs\nsrc/a.rs\n");
    let r = ws.call("Glob", json!({"pattern": "*.rs", "path": "src"}));
    assert_eq!(output(&r), "src/b.rs\nsrc/a.rs\n");
    let r = ws.call("Glob", json!({"pattern": "*.py"}));
    assert_eq!(output(&r), "No files found");
}

#[rstest]
#[case::content_n_glob(json!({"pattern": "todo", "-i": true, "output_mode": "content", "-n": true, "glob": "*.rs"}),
    "src/b.rs:1:// TODO one\nsrc/b.rs:2:// todo two\n")]
#[case::content_context(json!({"pattern": "println", "output_mode": "content", "-B": 1}),
    "src/a.rs-1-fn main() {\nsrc/a.rs:2:    println!(\"hi\");\n")]
#[case::files(json!({"pattern": "TODO"}), "README.md\nsrc/b.rs\n")]
#[case::count(json!({"pattern": "(?i)todo", "output_mode": "count"}), "README.md:1\nsrc/b.rs:2\n")]
#[case::type_filter(json!({"pattern": "TODO", "type": "rust"}), "src/b.rs\n")]
#[case::head_limit(json!({"pattern": "(?i)todo", "output_mode": "content", "head_limit": 1}),
    "README.md:1:# TODO readme\n[stopped at head_limit=1]")]
#[case::none(json!({"pattern": "zebra"}), "No files found")]
fn grep_modes(#[case] input: Value, #[case] want: &str) {
    let ws = Ws::new();
    let r = ws.call("Grep", input);
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r), want);
}

#[test]
fn grep_names_a_bad_regex_and_skips_binary_files() {
    let ws = Ws::new();
    let r = ws.call("Grep", json!({"pattern": "a(b"}));
    assert_eq!(status(&r), "error");
    assert!(
        output(&r).contains("invalid regular expression \"a(b\""),
        "{r}"
    );
    std::fs::write(ws.path().join("bin.dat"), b"TODO\0").unwrap();
    let r = ws.call("Grep", json!({"pattern": "TODO"}));
    assert!(!output(&r).contains("bin.dat"), "{r}");
}

#[test]
fn ls_lists_sorted_with_directories_marked() {
    let ws = Ws::new();
    let r = ws.call("LS", json!({"path": "."}));
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r), ".git/\n.gitignore\nREADME.md\nsrc/\ntarget/\n");
    let r = ws.call("LS", json!({"path": "src", "ignore": ["b.*"]}));
    assert_eq!(output(&r), "src/a.rs\n");
}

// --- Bad requests ---

#[rstest]
#[case::not_json("{nope", "invalid tool request")]
#[case::unknown_tool(
    r#"{"workspace": "/", "tool": "Rm", "input": {}}"#,
    "unknown tool \"Rm\": expected one of Read, Glob, Grep, LS, Edit, Write, Bash"
)]
#[case::missing_field(
    r#"{"workspace": "/tmp", "tool": "Read", "input": {}}"#,
    "missing field `file_path`"
)]
#[case::wrong_type(
    r#"{"workspace": "/tmp", "tool": "Read", "input": {"file_path": "a", "limit": "ten"}}"#,
    "expected usize"
)]
fn bad_requests_are_errors_with_a_clear_message(#[case] req: &str, #[case] want: &str) {
    let r = raw_call(req, &[]);
    assert_eq!(status(&r), "error", "{r}");
    assert!(output(&r).contains(want), "{r}");
}

// --- Bash ---

#[test]
fn bash_runs_in_the_workspace() {
    let ws = Ws::new();
    let r = ws.call(
        "Bash",
        json!({"command": "ls src && cat src/a.rs && echo $HOME"}),
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(
        output(&r),
        format!(
            "a.rs\nb.rs\nfn main() {{\n    println!(\"hi\");\n}}\n{}\n",
            ws.path().display()
        )
    );
    let r = ws.call("Bash", json!({"command": "echo out; echo err >&2; exit 3"}));
    assert_eq!(output(&r), "out\nerr\n\n[exit code 3]");
}

#[test]
fn bash_output_is_capped_and_the_rest_drained() {
    let ws = Ws::new();
    let r = ws.call_with(
        "Bash",
        json!({"command": "head -c 1000000 /dev/zero | tr '\\0' x; echo done >&2"}),
        json!({"maxOutputBytes": 1000}),
        &[],
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert!(output(&r).len() < 1200, "{}", output(&r).len());
    assert!(output(&r).contains("printed 1000005 bytes"), "{r}");
}

#[test]
fn bash_cannot_read_outside_the_workspace() {
    if !landlock() {
        return;
    }
    let ws = Ws::new();
    let r = ws.call(
        "Bash",
        json!({"command": "cat /etc/passwd; cat ../outside.txt"}),
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert!(!output(&r).contains("root:"), "{r}");
    assert!(!output(&r).contains("secret"), "{r}");
    assert!(output(&r).contains("Permission denied"), "{r}");
    assert!(output(&r).ends_with("[exit code 1]"), "{r}");
}

#[test]
fn bash_cannot_write_outside_the_workspace() {
    if !landlock() {
        return;
    }
    let ws = Ws::new();
    let target = ws.root.path().join("written-by-bash");
    let r = ws.call(
        "Bash",
        json!({"command": format!("echo x > {}; echo x > /tmp/dsh-tool-test-{}", target.display(), std::process::id())}),
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert!(!target.exists());
    assert!(!Path::new(&format!("/tmp/dsh-tool-test-{}", std::process::id())).exists());
    // Its own TMPDIR is writable, and removed after the call.
    let r = ws.call(
        "Bash",
        json!({"command": "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo \"$TMPDIR\""}),
    );
    let out = output(&r);
    let tmp = out.strip_prefix("t\n").expect(out).trim_end();
    assert!(tmp.contains("dsh-tool-tmp-"), "{r}");
    assert!(!Path::new(tmp).exists(), "{tmp} left behind");
}

fn tcp_probe(port: u16) -> String {
    if Path::new("/bin/bash").exists() {
        format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
    } else {
        format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port})); print(\"connected\")'"
        )
    }
}

#[rstest]
#[case::without_network(false)]
#[case::with_network(true)]
fn bash_reaches_the_network_only_when_allowed(#[case] network: bool) {
    let ws = Ws::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = ws.call_with(
        "Bash",
        json!({"command": tcp_probe(port)}),
        json!({"network": network}),
        &[],
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(output(&r).contains("connected"), network, "{r}");
    assert_eq!(listener.accept().is_ok(), network, "{r}");
}

#[test]
fn bash_timeout_kills_the_whole_group() {
    let ws = Ws::new();
    let started = Instant::now();
    let r = ws.call_with(
        "Bash",
        json!({"command": "sleep 100 & echo $! > bg.pid; echo started; sleep 100"}),
        json!({"bashTimeoutMs": 500}),
        &[],
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status(&r), "timeout", "{r}");
    assert!(output(&r).starts_with("started\n"), "{r}");
    assert!(output(&r).contains("[timed out after 500 ms"), "{r}");
    let pid = std::fs::read_to_string(ws.path().join("bg.pid")).unwrap();
    assert_gone(pid.trim());
}

#[test]
fn bash_background_processes_die_with_the_call() {
    let ws = Ws::new();
    let r = ws.call("Bash", json!({"command": "sleep 100 & echo $! > bg.pid"}));
    assert_eq!(status(&r), "ok", "{r}");
    let pid = std::fs::read_to_string(ws.path().join("bg.pid")).unwrap();
    assert_gone(pid.trim());
}

#[test]
fn bash_cannot_leave_its_process_group() {
    let ws = Ws::new();
    let r = ws.call("Bash", json!({"command": "setsid sleep 100; echo rc=$?"}));
    assert_eq!(status(&r), "ok", "{r}");
    assert!(output(&r).contains("rc=1"), "{r}");
    // Not vacuous: without the sandbox the same call succeeds.
    let r = ws.call_with(
        "Bash",
        json!({"command": "setsid true; echo rc=$?"}),
        json!({"sandbox": "off"}),
        &[],
    );
    assert_eq!(output(&r), "rc=0\n", "{r}");
}

#[test]
fn bash_cannot_make_namespaces() {
    let ws = Ws::new();
    let probe = json!({"command": "unshare -Ur true; echo rc=$?"});
    let off = ws.call_with("Bash", probe.clone(), json!({"sandbox": "off"}), &[]);
    if !output(&off).contains("rc=0") {
        eprintln!("SKIPPED: this machine refuses user namespaces even unsandboxed: {off}");
        return;
    }
    let r = ws.call("Bash", probe);
    assert_eq!(status(&r), "ok", "{r}");
    assert!(
        output(&r).contains("unshare failed: Operation not permitted"),
        "{r}"
    );
    assert!(output(&r).contains("rc=1"), "{r}");
}

/// The process is gone (or a zombie waiting for its new parent to reap it:
/// dead either way).
fn assert_gone(pid: &str) {
    let stat = format!("/proc/{pid}/stat");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match std::fs::read_to_string(&stat) {
            Err(_) => return,
            Ok(s)
                if s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z') =>
            {
                return;
            }
            Ok(s) => assert!(Instant::now() < deadline, "{pid} still alive: {s}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// --- Policies ---

#[test]
fn sandbox_off_lets_bash_read_system_files() {
    let ws = Ws::new();
    let r = ws.call_with(
        "Bash",
        json!({"command": "cat /etc/passwd"}),
        json!({"sandbox": "off"}),
        &[],
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert!(output(&r).contains("root:"), "{r}");
    assert_eq!(r["sandbox"]["level"], "None");
}

#[test]
fn strict_without_landlock_refuses_and_runs_nothing() {
    let ws = Ws::new();
    let r = ws.call_with(
        "Write",
        json!({"file_path": "new.txt", "content": "x"}),
        json!({"sandbox": "strict"}),
        &["landlock-abi=0"],
    );
    assert_eq!(status(&r), "sandbox-unavailable", "{r}");
    assert!(output(&r).contains("landlock:fs"), "{r}");
    assert_eq!(r["sandbox"]["level"], "Partial");
    assert!(!ws.path().join("new.txt").exists());
}

#[test]
fn strict_on_a_full_kernel_runs() {
    if !landlock() {
        return;
    }
    let ws = Ws::new();
    let r = ws.call_with(
        "Bash",
        json!({"command": "echo ok"}),
        json!({"sandbox": "strict"}),
        &[],
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(r["sandbox"]["level"], "Full", "{r}");
}

/// Edit and Write never change what takes effect outside the call — git's
/// files, `.claude/` (agent types, saved workflows), a `dsh.toml` — by
/// name or through a link; the file is left as it was.
#[rstest]
#[case::git_hook(".git/hooks/pre-commit")]
#[case::git_config(".git/config")]
#[case::claude_agent(".claude/agents/evil.md")]
#[case::claude_workflow(".claude/workflows/evil.ts")]
#[case::dsh_toml("dsh.toml")]
#[case::nested_dsh_toml("sub/dsh.toml")]
#[case::through_a_link("link-to-git/config")]
fn edit_and_write_leave_configuration_alone(#[case] path: &str) {
    let ws = Ws::new();
    std::os::unix::fs::symlink(ws.path().join(".git"), ws.path().join("link-to-git")).unwrap();
    let target = ws.path().join(path);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(&target, "before\n").unwrap();
    let r = ws.call("Write", json!({"file_path": path, "content": "after\n"}));
    assert_eq!(status(&r), "denied", "{r}");
    assert!(output(&r).contains("tools do not change it"), "{r}");
    let r = ws.call(
        "Edit",
        json!({"file_path": path, "old_string": "before", "new_string": "after"}),
    );
    assert_eq!(status(&r), "denied", "{r}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "before\n");
    // Other files with similar names are work like any other.
    let r = ws.call(
        "Write",
        json!({"file_path": "docs/dsh.toml.md", "content": "x"}),
    );
    assert_eq!(status(&r), "ok", "{r}");
}

/// Review of issue 33: the configuration check looked at the whole
/// absolute path whenever it could not take the workspace off its front,
/// so a workspace beneath a `.claude` or a `.git` directory had every
/// write refused. A workspace there, named directly or through a
/// symlink, takes ordinary writes — and still refuses its own `.git`.
#[rstest]
#[case::beneath_claude(".claude/ws", false)]
#[case::beneath_git("repo/.git/ws", false)]
#[case::beneath_claude_through_a_link(".claude/ws", true)]
fn a_workspace_beneath_a_configuration_directory_is_writable(
    #[case] dir: &str,
    #[case] through_link: bool,
) {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join(dir);
    std::fs::create_dir_all(real.join(".git")).unwrap();
    std::fs::write(real.join("a.txt"), "before\n").unwrap();
    let workspace = if through_link {
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        link
    } else {
        real.clone()
    };
    let call = |tool: &str, input: Value| {
        raw_call(
            &json!({"workspace": workspace, "tool": tool, "input": input}).to_string(),
            &[],
        )
    };
    let r = call("Write", json!({"file_path": "b/new.txt", "content": "x"}));
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(
        std::fs::read_to_string(real.join("b/new.txt")).unwrap(),
        "x"
    );
    let r = call(
        "Edit",
        json!({"file_path": workspace.join("a.txt"), "old_string": "before", "new_string": "after"}),
    );
    assert_eq!(status(&r), "ok", "{r}");
    assert_eq!(
        std::fs::read_to_string(real.join("a.txt")).unwrap(),
        "after\n"
    );
    let r = call("Write", json!({"file_path": ".git/config", "content": "x"}));
    assert_eq!(status(&r), "denied", "{r}");
}

// --- Signals ---

/// Regression (issue 33): the tool process holds SIGTERM around the
/// shell's spawn, and the shell inherited it blocked, with or without the
/// sandbox: `kill` and `timeout` did nothing to what Bash started.
#[rstest]
#[case::sandboxed("best-effort")]
#[case::off("off")]
fn bash_commands_start_with_default_signals(#[case] sandbox: &str) {
    let ws = Ws::new();
    let r = ws.call_with(
        "Bash",
        json!({"command": "sleep 20 & kill $!; wait $!; echo rc=$?"}),
        json!({"sandbox": sandbox}),
        &[],
    );
    assert_eq!(output(&r), "rc=143\n", "{r}");
    if sandbox == "off" {
        // /proc is withheld under the sandbox; without it, the mask itself.
        let r = ws.call_with(
            "Bash",
            json!({"command": "grep -E '^Sig(Blk|Ign)' /proc/self/status"}),
            json!({"sandbox": sandbox}),
            &[],
        );
        assert_eq!(
            output(&r),
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
            "{r}"
        );
    }
}

// --- Leftovers of a stopped call ---

/// A tool process running `command` in Bash with `TMPDIR=tmp`, and the
/// temporary directory the call got, once the command has written it to
/// `tmpdir.txt` (so the shell is running by then).
fn start_bash(ws: &Ws, tmp: &Path, command: &str) -> (std::process::Child, PathBuf) {
    let marker = ws.path().join("tmpdir.txt");
    let _ = std::fs::remove_file(&marker);
    // Returned to the caller, which waits for it.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(WORKER)
        .arg("tool")
        .env("TMPDIR", tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let req = json!({"workspace": ws.path(), "tool": "Bash", "input": {
        "command": format!("echo \"$TMPDIR\" > t.part && mv t.part tmpdir.txt; {command}")
    }});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(&marker)
            && s.ends_with('\n')
        {
            return (child, PathBuf::from(s.trim()));
        }
        assert!(
            Instant::now() < deadline,
            "the command did not start: {:?}",
            child.try_wait()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for `child` to exit.
fn wait_exited(child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the tool process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Regression (issue 33): a cancelled Bash call (the host's SIGTERM)
/// left its temporary directory behind, up to 64 MiB a call.
#[test]
fn a_cancelled_bash_call_removes_its_temporary_directory() {
    let ws = Ws::new();
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, dir) = start_bash(&ws, tmp.path(), "echo x > \"$TMPDIR/f\"; sleep 100");
    assert!(dir.starts_with(tmp.path()), "{}", dir.display());
    // SAFETY: plain syscall on our own unreaped child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    wait_exited(&mut child);
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

/// Regression (issue 33): a call killed outright cannot clean up; the
/// next call removes its directory — and nothing else: not a symlink
/// named like one (nor its target), not a directory of another name, not
/// a directory being made right now.
#[test]
fn a_killed_bash_calls_temporary_directory_is_reclaimed_by_the_next_call() {
    let ws = Ws::new();
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, dir) = start_bash(&ws, tmp.path(), "echo x > \"$TMPDIR/f\"; sleep 100");
    // The marker start_bash waits for is written before `f`: on a loaded
    // machine the kill could come first, so wait for `f` itself.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("f").exists() {
        assert!(Instant::now() < deadline, "the call never wrote its file");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(dir.join("f").exists(), "a SIGKILLed call cannot clean up");
    let parent = dir.parent().unwrap().to_path_buf();
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    std::os::unix::fs::symlink(&target, parent.join("call-1-1")).unwrap();
    std::fs::create_dir(parent.join("keep-me")).unwrap();
    std::fs::create_dir(parent.join(".new-1-2")).unwrap();

    let (mut again, _) = start_bash(&ws, tmp.path(), "true");
    wait_exited(&mut again);
    assert!(!dir.exists(), "{} was not reclaimed", dir.display());
    assert!(target.join("keep").exists());
    assert!(parent.join("call-1-1").symlink_metadata().is_ok());
    assert!(parent.join("keep-me").is_dir());
    assert!(parent.join(".new-1-2").is_dir());
}

/// Regression (issue 33): background jobs of a Bash call whose tool
/// process was SIGKILLed (or whose host was: the tool process has a
/// parent-death signal) ran on until their CPU limit, which an idle job
/// never reaches. Both a plain `&` job and a double fork.
#[rstest]
#[case::background("sleep 100 & echo $! > bg.pid; sleep 100")]
#[case::double_fork("(sleep 100 & echo $! > bg.pid) ; sleep 100")]
fn background_jobs_die_with_a_killed_tool_process(#[case] command: &str) {
    let ws = Ws::new();
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, _) = start_bash(&ws, tmp.path(), command);
    let pid_file = ws.path().join("bg.pid");
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        if let Ok(s) = std::fs::read_to_string(&pid_file)
            && s.ends_with('\n')
        {
            break s.trim().to_string();
        }
        assert!(Instant::now() < deadline, "no bg.pid");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_gone(&pid);
}

/// Regression (issue 33): a descriptor the tool process inherited open
/// (from whoever started it) was handed on to the shell, and a sandboxed
/// command could read a file outside the workspace through it: Landlock
/// checks opens, not descriptors already open.
#[test]
fn bash_gets_no_descriptor_beyond_its_stdio() {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::CommandExt as _;
    let ws = Ws::new();
    let secret = std::fs::File::open(ws.outside()).unwrap();
    let fd = secret.as_raw_fd();
    let mut cmd = Command::new(WORKER);
    cmd.arg("tool")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    let mut child = cmd.spawn().unwrap();
    let req = json!({"workspace": ws.path(), "tool": "Bash",
        "input": {"command": "cat <&5; echo rc=$?"}});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!output(&r).contains("secret"), "{r}");
    assert!(output(&r).contains("Bad file descriptor"), "{r}");
}

/// Regression (review of issue 33): once the shell's group was reaped the
/// SIGTERM handler did nothing, so a cancel that came while the tool
/// process wrote its answer (here: blocked on a full stdout the host no
/// longer reads) was swallowed and the host waited out its whole grace
/// before SIGKILL. SIGTERM must end the tool process then too.
#[test]
fn sigterm_after_the_shell_is_gone_still_ends_the_tool_process() {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::ExitStatusExt as _;
    let ws = Ws::new();
    let mut child = Command::new(WORKER)
        .arg("tool")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // An answer far larger than a pipe's buffer: the tool process blocks
    // writing it, as nobody reads.
    let req = json!({"workspace": ws.path(), "tool": "Bash", "maxOutputBytes": 1_000_000,
        "input": {"command": "head -c 400000 /dev/zero | tr '\\0' x"}});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // The answer has begun to arrive: the call is over, the group reaped.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD on our own pipe's read end, into a c_int.
        let rc = unsafe { libc::ioctl(stdout.as_raw_fd(), libc::FIONREAD, &mut queued) };
        assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        if queued > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no answer began");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: plain syscall on our own unreaped child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the tool process ignored SIGTERM after its shell was gone");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    drop(stdout);
}
