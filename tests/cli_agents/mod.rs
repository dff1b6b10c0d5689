//! The real agent CLIs for `tests/agent_cli.rs`: each pinned version is
//! looked up under `$DSH_CLI_CACHE` (default `~/.cache/dsh-clis`) and
//! installed there from the npm registry when missing (`.ci/run` installs
//! them first). Only a machine without `npm` skips these tests, and says
//! so on stderr.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// One agent CLI at the version the tests pin.
#[derive(Debug, Clone, Copy)]
pub struct Cli {
    /// The npm package.
    pub package: &'static str,
    pub version: &'static str,
    /// The program in `node_modules/.bin`.
    pub bin: &'static str,
}

pub const CLAUDE: Cli = Cli {
    package: "@anthropic-ai/claude-code",
    version: "2.1.332",
    bin: "claude",
};

pub const CODEX: Cli = Cli {
    package: "@openai/codex",
    version: "0.171.0",
    bin: "codex",
};

pub const QWEN: Cli = Cli {
    package: "@qwen-code/qwen-code",
    version: "0.24.4",
    bin: "qwen",
};

/// Where the CLIs are kept.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DSH_CLI_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/dsh-clis")
}

impl Cli {
    /// The directory this version is installed in.
    pub fn prefix(&self) -> PathBuf {
        let slug: String = format!("{}@{}", self.package, self.version)
            .chars()
            .map(|c| if c == '/' { '_' } else { c })
            .collect();
        cache_dir().join(slug)
    }

    /// The installed program, installing it when missing; `None` (with a
    /// message on stderr) only when `npm` is not installed.
    pub fn program(&self) -> Option<PathBuf> {
        let prefix = self.prefix();
        let program = prefix.join("node_modules/.bin").join(self.bin);
        if program.is_file() {
            return Some(program);
        }
        if Command::new("npm").arg("--version").output().is_err() {
            eprintln!(
                "SKIPPED: npm is not installed, so {}@{} cannot be installed; install Node.js and \
                 npm to run the agent CLI tests",
                self.package, self.version
            );
            return None;
        }
        install(&prefix, &format!("{}@{}", self.package, self.version));
        assert!(
            program.is_file(),
            "npm installed {}@{} but {} is missing",
            self.package,
            self.version,
            program.display()
        );
        Some(program)
    }
}

/// `npm install` into `prefix`, once even when several test processes ask
/// at the same time (an exclusive lock on a file next to it).
fn install(prefix: &Path, spec: &str) {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(cache_dir()).expect("create the CLI cache");
    let lock_path = PathBuf::from(format!("{}.lock", prefix.display()));
    let lock = std::fs::File::create(&lock_path).expect("create the install lock");
    // SAFETY: flock on a descriptor this function owns; released when
    // `lock` is closed at the end of the function.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", lock_path.display());
    if prefix.join("node_modules").is_dir() {
        return;
    }
    eprintln!("installing {spec} into {} …", prefix.display());
    let out = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(prefix)
        .arg(spec)
        .output()
        .expect("run npm");
    assert!(
        out.status.success(),
        "npm install {spec} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Processes whose environment holds `DSH_TEST_MARKER=marker` (every
/// process a test's CLI started inherits it, unless the CLI filters its
/// commands' environment) or whose command line names `marker` (a test's
/// command can): what must be gone after a call ends.
pub fn marked_processes(marker: &str) -> Vec<(u32, String)> {
    let needle = format!("DSH_TEST_MARKER={marker}");
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let cmd = std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) || cmd.contains(marker) {
            found.push((pid, cmd));
        }
    }
    found
}

/// Waits (bounded) until no process carries `marker`; panics listing the
/// survivors otherwise.
pub fn assert_no_marked_processes(marker: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = marked_processes(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes of the CLI survived the call: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A unique marker for one test.
pub fn marker(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{test}-{}-{nanos}", std::process::id())
}

/// Whether a request to a fake Anthropic server is a model turn (not a
/// token count).
pub fn is_messages(method: &str, path: &str) -> bool {
    method == "POST" && path.starts_with("/v1/messages") && !path.contains("count_tokens")
}

/// The tool results of an Anthropic request, oldest first, as text.
pub fn tool_results(body: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let mut all = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        for c in m["content"].as_array().into_iter().flatten() {
            if c["type"] == "tool_result" {
                all.push(match &c["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    other => other.to_string(),
                });
            }
        }
    }
    all
}
