//! Script preparation (`dsh_orchestrator::script::prepare`: nesting bound,
//! parse, module-syntax and decorator checks, meta extraction, TypeScript
//! strip, source map) on arbitrary bytes.
//!
//! Byte 0 picks the kind (even: TypeScript, odd: JavaScript); the rest is
//! the file, decoded lossily as UTF-8 (as a file read through
//! `String::from_utf8` would have been refused, the lossy form keeps the
//! fuzzer's mutations useful).
//!
//! Invariants (see `dsh_fuzz::check_prepare`): no panic escapes and
//! nothing aborts (deep scripts are bounded and moved to a big stack by
//! `prepare` itself; a panic inside oxc is contained by `prepare` as a
//! `SCRIPT_PARSE` at 1:1, see `dsh_fuzz::contain_oxc_panics`); every diagnostic names a line and a column inside the source
//! and quotes that line; a prepared script's code is the async wrapper,
//! every generated position maps into the source or nowhere, its meta
//! reads back the same through the JSON meta validator, and its code
//! parses again as JavaScript.
#![no_main]

use dsh_orchestrator::script::ScriptKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    dsh_fuzz::contain_oxc_panics();
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let (kind, name) = if first % 2 == 0 {
        (ScriptKind::TypeScript, "fuzz.ts")
    } else {
        (ScriptKind::JavaScript, "fuzz.js")
    };
    let source = String::from_utf8_lossy(rest);
    let _ = dsh_fuzz::check_prepare(name, &source, kind);
});
