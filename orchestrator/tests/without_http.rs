//! `dsh-orchestrator` without its `http` feature, as an embedder that
//! brings its own provider builds it: no API models, and a `dsh.toml` that
//! names one says what this build lacks and how to get it.
//!
//! Runs only in such a build:
//! `cargo test -p dsh-orchestrator --no-default-features --test without_http`.
#![cfg(not(feature = "http"))]

use std::path::Path;

use dsh_orchestrator::config::{Config, ConfigError};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("/p/dsh.toml"), text)
}

#[test]
fn an_api_kind_says_to_enable_http() {
    let e = parse("[providers.x]\nkind = \"openai\"\nmodel = \"m\"\n").expect_err("no http");
    assert_eq!(e.location(), "/p/dsh.toml:2", "{e}");
    assert_eq!(
        e.to_string(),
        "/p/dsh.toml:2: providers.x.kind: \"openai\" is an API model over HTTP, and this build has \
         no HTTP providers (dsh-orchestrator was built without its `http` feature); enable the \
         `http` feature of dsh-orchestrator (on by default) to use it, or use \"claude-code\", \
         \"codex\", \"qwen\", \"command\" or \"fixture\""
    );
    let e = parse("[providers.y]\nkind = \"anthropic\"\n").expect_err("no http");
    assert!(
        e.to_string()
            .contains("\"anthropic\" is an API model over HTTP"),
        "{e}"
    );
}

#[test]
fn the_other_kinds_load_and_only_they_are_listed() {
    let c = parse("[providers.c]\nkind = \"command\"\ncommand = [\"agent\"]\n").expect("valid");
    assert_eq!(c.providers["c"].kind.kind_name(), "command");
    // No API model is built in, so no key in the environment picks one.
    assert_eq!(c.provider_names(), ["c", "claude-code", "codex"]);
    assert!(c.providers_with_keys(|_| Some("sk-1".into())).is_empty());
    let e = parse("[providers.x]\nkind = \"pigeon\"\n").expect_err("unknown");
    assert!(
        e.to_string().ends_with(
            "unknown kind \"pigeon\"; use \"claude-code\", \"codex\", \"qwen\", \"command\" or \
             \"fixture\""
        ),
        "{e}"
    );
}
