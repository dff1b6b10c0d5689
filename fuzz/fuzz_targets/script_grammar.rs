//! Script preparation on grammar-shaped input: `dsh_fuzz::grammar` builds
//! nested JavaScript/TypeScript from the fuzzer's bytes (brackets,
//! templates with substitutions, strings with escapes, comments, regular
//! expressions, types and generics, arrows, classes, enums, namespaces,
//! `export const meta = {...}` literals, refused module syntax and
//! decorators), so most inputs parse and the meta reader, the type strip
//! and the position mapping are reached with deep, realistic structure.
//!
//! Invariants: those of `dsh_fuzz::check_prepare` (see `script_bytes`),
//! plus determinism: preparing the same text twice gives the same code,
//! meta and diagnostics.
#![no_main]

use dsh_fuzz::grammar::{Script, render};
use dsh_orchestrator::script::{ScriptKind, prepare};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|script: Script| {
    dsh_fuzz::contain_oxc_panics();
    let text = render(&script);
    // To see the script of a reproducer: DSH_FUZZ_PRINT=1 <binary> <file>.
    if std::env::var_os("DSH_FUZZ_PRINT").is_some() {
        eprintln!(
            "--- script ({:?}):\n{text}\n--- {text:?}",
            script.typescript
        );
    }
    let (kind, name) = if script.typescript {
        (ScriptKind::TypeScript, "workflows/fuzz.ts")
    } else {
        (ScriptKind::JavaScript, "workflows/fuzz.js")
    };
    let first = dsh_fuzz::check_prepare(name, &text, kind);
    let again = prepare(name, &text, kind);
    match (first, again) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.code, b.code, "two preparations printed different code");
            assert_eq!(a.meta, b.meta);
        }
        (Err(a), Err(b)) => assert_eq!(a.diagnostics(), b.diagnostics()),
        (a, b) => panic!(
            "two preparations disagree: {} then {}",
            if a.is_ok() { "ok" } else { "error" },
            if b.is_ok() { "ok" } else { "error" }
        ),
    }
});
