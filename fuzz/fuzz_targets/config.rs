//! `dsh.toml` (`config::Config::parse`): TOML parsing, the `[workflow]`,
//! `[providers.NAME]` and `[agent_types.NAME]` checks, durations and sizes
//! (`units`), and the line numbers errors point at.
//!
//! Invariants checked:
//! - never panics (the error locator slices the text at offsets and line
//!   numbers it computes);
//! - an error names the file, and a line inside the text when it names one;
//! - a configuration that loads gives limits that validate, and those
//!   limits survive `run.json` (`limits_to_json` / `limits_from_json`, what
//!   `resume` reads back) still valid and unchanged at the millisecond
//!   level: a run started under a configuration can be resumed with it;
//! - every route names a provider the configuration has, and the default
//!   provider, when set, is one of them.
#![no_main]

use std::path::Path;

use dsh_orchestrator::config::{Config, ConfigError};
use dsh_orchestrator::journal::rundir::{limits_from_json, limits_to_json};
use libfuzzer_sys::fuzz_target;

const FILE: &str = "project/dsh.toml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(Path::new(FILE), text) {
        Err(ConfigError::Invalid { location, message }) => {
            assert!(!message.is_empty());
            match location.strip_prefix(FILE) {
                Some("") => {}
                Some(rest) => {
                    let line: usize = rest
                        .strip_prefix(':')
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("location {location:?}"));
                    // `lines()` drops a final empty line; an error can
                    // point at the end of the text.
                    let lines = text.split('\n').count();
                    assert!(
                        (1..=lines).contains(&line),
                        "line {line} of a {lines}-line file"
                    );
                }
                None => panic!("the location {location:?} does not name the file"),
            }
        }
        Err(other) => panic!("parse gave {other:?}"),
        Ok(config) => {
            let limits = config.workflow.limits();
            limits
                .validate()
                .expect("a loaded configuration's limits validate");
            let stored = limits_to_json(&limits);
            let back = limits_from_json(&stored).expect("run.json's limits read back");
            if let Err(e) = back.validate() {
                panic!(
                    "limits valid at the start are invalid on resume ({}: {}): {stored}",
                    e.knob, e.message
                );
            }
            assert_eq!(
                limits_to_json(&back),
                stored,
                "the limits changed through run.json"
            );
            for (name, route) in &config.agent_types {
                if let Some(p) = &route.provider {
                    assert!(
                        config.providers.contains_key(p),
                        "route {name} to unknown {p}"
                    );
                }
            }
            if let Some(p) = &config.workflow.provider {
                assert!(config.providers.contains_key(p));
            }
        }
    }
});
