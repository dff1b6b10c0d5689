//! `dsh completions SHELL` and `dsh man`: what a Rust CLI is expected to
//! ship, made from the clap definition itself — so they cannot drift from
//! the flags. The bash script is sourced into a real bash and asked to
//! complete; the man page is rendered by the real groff.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use rstest::rstest;

fn dsh(args: &[&str]) -> (String, String, Option<i32>) {
    let out = Command::new(common::DSH)
        .args(args)
        .output()
        .expect("run dsh");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

#[rstest]
#[case("bash")]
#[case("zsh")]
#[case("fish")]
#[case("elvish")]
#[case("powershell")]
fn every_shell_gets_a_script_naming_the_commands(#[case] shell: &str) {
    let (stdout, stderr, code) = dsh(&["completions", shell]);
    assert_eq!(code, Some(0), "{stderr}");
    // (fish spells a long flag `-l store`.)
    for word in ["dsh", "workflow", "resume", "store", "agents"] {
        assert!(stdout.contains(word), "{shell}: no {word:?}");
    }
}

/// The bash script, sourced into bash, completes subcommands and flags.
#[rstest]
#[case(&["dsh", "workflow", "re"], "report resume")]
#[case(&["dsh", "comp"], "completions")]
#[case(&["dsh", "workflow", "host", "--ag"], "--agents")]
fn bash_completes_commands_and_flags(#[case] words: &[&str], #[case] want: &str) {
    let script = dsh(&["completions", "bash"]).0;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dsh.bash");
    std::fs::write(&file, script).expect("script");
    let words_arr = words
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let last = words.len() - 1;
    let program = format!(
        "source '{}'; COMP_WORDS=({words_arr}); COMP_CWORD={last}; \
         _dsh dsh '{}' '{}'; echo \"${{COMPREPLY[*]}}\"",
        file.display(),
        words[last],
        words[last - 1]
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash");
    let got = String::from_utf8_lossy(&out.stdout);
    assert_eq!(got.trim(), want, "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_shells() {
    let (_, stderr, code) = dsh(&["completions", "tcsh"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("possible values: bash, elvish, fish, powershell, zsh"),
        "{stderr}"
    );
}

/// The man page renders with groff without a warning and documents every
/// `dsh workflow` command.
#[test]
fn the_man_page_renders_and_names_every_workflow_command() {
    let (page, stderr, code) = dsh(&["man"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains(".TH dsh 1"), "{page}");
    let groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut groff) = groff else {
        eprintln!("groff is not installed: the page's text is checked, not its rendering");
        return;
    };
    use std::io::Write as _;
    groff
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page");
    let out = groff.wait_with_output().expect("groff");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "groff warned");
    let text = String::from_utf8_lossy(&out.stdout);
    for command in [
        "run",
        "check",
        "types",
        "test",
        "runs",
        "show",
        "report",
        "resume",
        "submit",
        "host",
        "wait",
        "cancel",
        "mcp",
        "providers",
        "list",
        "agents",
    ] {
        assert!(
            text.contains(&format!("workflow-{command}(1)")),
            "no {command} in:\n{text}"
        );
    }
    assert!(text.contains("dsh-completions(1)"), "{text}");
}
