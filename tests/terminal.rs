//! Script-controlled text reaches a terminal escaped: a log line, a label,
//! a phase, meta or an error message with ESC, CR or a line break cannot
//! move the cursor, recolour the screen or forge an `end completed` line in
//! the pretty event stream, the `error[…]` line, or `runs`/`show`.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{dsh_in, fixture};
use serde_json::json;

const SCRIPT: &str = r#"export const meta = { name: "forge\u001b[2J", description: "d\r" };
phase("p\u001b]0;title\u0007");
log("before\r\n[     1ms] end completed (0 agents)");
await agent("x", { label: "lab\u001b[31m" });
throw new Error("boom\u001b[32m\rok");
"#;

#[test]
fn control_characters_from_a_script_are_escaped_on_stderr_and_in_show() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("wf.ts"), SCRIPT).expect("script");
    let fx = fixture(json!([{ "match": {}, "text": "fine" }]));
    std::fs::write(dir.join("fixture.json"), fx.to_string()).expect("fixture");
    let (_, stderr, code) = dsh_in(
        dir,
        &[
            "workflow",
            "run",
            "wf.ts",
            "--fixture",
            "fixture.json",
            "--events",
            "pretty",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    struct Out {
        stderr: String,
    }
    let out = Out { stderr };
    for raw in ['\u{1b}', '\r', '\u{7}'] {
        assert!(
            !out.stderr.contains(raw),
            "raw {raw:?} on stderr:\n{}",
            out.stderr
        );
    }
    // No line of the stream starts the forged way: the log's break is
    // shown as `\r\n` inside its own line.
    assert!(
        out.stderr
            .lines()
            .filter(|l| l.contains("end completed"))
            .all(|l| l.contains(" log before\\r\\n")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("start forge\\u{1b}[2J — d\\r"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("phase p\\u{1b}]0;title\\u{7}"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("lab\\u{1b}[31m"), "{}", out.stderr);
    assert!(
        out.stderr.contains("error[SCRIPT_ERROR]: ") && out.stderr.contains("boom\\u{1b}[32m\\rok"),
        "{}",
        out.stderr
    );

    for args in [
        &["workflow", "runs"][..],
        &["workflow", "show", &common::only_run_id(dir)][..],
    ] {
        let (stdout, _, code) = dsh_in(dir, args);
        assert_eq!(code, Some(0));
        assert!(
            !stdout.contains('\u{1b}') && !stdout.contains('\r'),
            "{stdout}"
        );
        assert!(stdout.contains("forge\\u{1b}[2J"), "{stdout}");
    }
}
