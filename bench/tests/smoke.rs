//! The bench runs and prints a figure (a few trivial runs, no Node peer):
//! a guard against the bench rotting, not a measurement. Speed is checked
//! by running the bench (docs/performance.md), never by timed tests.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn quick_trivial_prints_its_figure() {
    let bench = Path::new(env!("CARGO_BIN_EXE_dsh-bench"));
    // `cargo test --workspace` builds the root package's `dsh` next to us.
    let dsh = bench.with_file_name("dsh");
    if !dsh.is_file() {
        eprintln!(
            "skipped: no dsh binary at {} (run `cargo test --workspace`, or `cargo build -p dsh` first)",
            dsh.display()
        );
        return;
    }
    let out = Command::new(bench)
        .args([
            "--quick",
            "--only",
            "trivial",
            "--no-peer",
            "--iterations",
            "2",
            "--dsh",
        ])
        .arg(&dsh)
        .output()
        .expect("run dsh-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "dsh-bench failed ({}); if {} is stale, rebuild it with `cargo build -p dsh`\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status,
        dsh.display()
    );
    assert!(
        stdout.contains("trivial — trivial run") && stdout.contains("(n=2)"),
        "no trivial figure in the output:\n{stdout}"
    );
    assert!(stdout.contains("baseline"), "no baseline:\n{stdout}");
}
