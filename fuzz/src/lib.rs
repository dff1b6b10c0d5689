//! What the fuzz targets share: the invariants of script preparation
//! (used by `script_bytes` and `script_grammar`) and the grammar-shaped
//! script generator.

pub mod grammar;
pub mod json;

use std::sync::Once;

use dsh_orchestrator::script::{
    PreparedScript, ScriptError, ScriptKind, prepare, validate_meta_json,
};

/// The lines of `text` split at ECMAScript line terminators (`\n`, `\r\n`,
/// lone `\r`, U+2028, U+2029), without them; a leading byte-order mark is
/// not part of the first line. Written independently of the library's
/// `LineIndex` so the two can be compared.
pub fn ecma_lines(text: &str) -> Vec<&str> {
    let text_start = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let mut lines = Vec::new();
    let mut start = text_start;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i < text_start {
            continue;
        }
        match c {
            '\r' => {
                lines.push(&text[start..i]);
                if let Some((_, '\n')) = chars.peek() {
                    chars.next();
                    start = i + 2;
                } else {
                    start = i + 1;
                }
            }
            '\n' | '\u{2028}' | '\u{2029}' => {
                lines.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    lines.push(&text[start..]);
    lines
}

/// `prepare` runs oxc under `catch_unwind`: a panic inside oxc becomes a
/// `SCRIPT_PARSE` ("internal error: the script could not be prepared")
/// instead of taking the host down. libFuzzer's panic hook aborts before
/// anything unwinds, so without this a contained oxc panic would count as
/// a crash of dsh. This hook lets panics raised *inside oxc's crates*
/// unwind to `prepare` (printing one line, so they stay visible), and hands
/// every other panic — dsh's own, the targets' assertions — to libFuzzer's
/// hook, which aborts. `DSH_FUZZ_OXC_PANICS=abort` makes oxc panics crashes
/// again, to hunt them.
pub fn contain_oxc_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var("DSH_FUZZ_OXC_PANICS").as_deref() == Ok("abort") {
            return;
        }
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_oxc = info.location().is_some_and(|l| {
                let file = l.file().replace('\\', "/");
                file.contains("/oxc_") || file.contains("/oxc-")
            });
            if in_oxc {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                eprintln!(
                    "dsh-fuzz: a panic inside oxc, contained by prepare: {} {message}",
                    info.location().map(|l| l.to_string()).unwrap_or_default()
                );
            } else {
                fuzzer_hook(info);
            }
        }));
    });
}

/// The message `prepare` reports for a contained panic of the parser.
pub const CONTAINED_PANIC: &str = "internal error: the script could not be prepared";

/// Prepares `source` as the real entry point does (`script::prepare`, which
/// bounds the nesting and moves deep scripts to a big-stack thread itself)
/// and checks what comes out, which it returns.
pub fn check_prepare(
    name: &str,
    source: &str,
    kind: ScriptKind,
) -> Result<PreparedScript, ScriptError> {
    let lines = ecma_lines(source);
    match prepare(name, source, kind) {
        Err(e) => {
            let ds = e.diagnostics();
            assert!(!ds.is_empty(), "an error without a diagnostic: {e}");
            assert!(
                ds.len() <= 20,
                "more diagnostics than the cap: {}",
                ds.len()
            );
            for d in ds {
                assert_eq!(d.file, name);
                let line = d.line as usize;
                assert!(
                    (1..=lines.len()).contains(&line),
                    "diagnostic line {} outside the source's {} lines: {d:?}\nsource: {source:?}",
                    d.line,
                    lines.len()
                );
                let text = lines[line - 1];
                assert_eq!(
                    d.source_line, text,
                    "the diagnostic's source line is not line {line}"
                );
                let width = text.chars().count();
                assert!(
                    d.column >= 1 && d.column as usize <= width + 1,
                    "diagnostic column {} outside line {line} ({width} characters): {d:?}\nsource: {source:?}",
                    d.column
                );
                assert!(!d.message.is_empty());
            }
            if ds.iter().any(|d| d.message.starts_with(CONTAINED_PANIC)) {
                assert_eq!(ds.len(), 1, "{ds:?}");
                assert_eq!((ds[0].line, ds[0].column), (1, 1), "{ds:?}");
            }
            // Rendering the error (what the CLI prints) must not panic.
            let _ = e.to_string();
            Err(e)
        }
        Ok(p) => {
            check_prepared(&p, source, &lines);
            Ok(p)
        }
    }
}

fn check_prepared(p: &PreparedScript, source: &str, lines: &[&str]) {
    assert!(p.code.starts_with("(async function () {\n"), "{}", p.code);
    assert!(p.code.ends_with("\n})"), "{}", p.code);

    // Every position of the generated code maps into the source or nowhere.
    let in_source = |(l, c): (u32, u32)| {
        let l = l as usize;
        (1..=lines.len()).contains(&l) && c >= 1 && c as usize <= lines[l - 1].chars().count() + 1
    };
    let code_lines = ecma_lines(&p.code);
    let mut budget = 200_000usize;
    for (i, line) in code_lines.iter().enumerate() {
        for column in 1..=line.len() + 2 {
            if budget == 0 {
                break;
            }
            budget -= 1;
            if let Some(pos) = p.original_position(i as u32 + 1, column as u32) {
                assert!(
                    in_source(pos),
                    "generated {}:{column} maps to {pos:?}, outside the source",
                    i + 1
                );
            }
        }
    }
    // Lines past the end and absurd columns map nowhere or into the source.
    for (l, c) in [
        (0, 0),
        (0, 1),
        (u32::MAX, 1),
        (1, u32::MAX),
        (code_lines.len() as u32 + 1, 1),
    ] {
        if let Some(pos) = p.original_position(l, c) {
            assert!(in_source(pos), "{l}:{c} maps to {pos:?}");
        }
    }

    // map_positions rewrites only `name:line:col` it can map, into the
    // source's range.
    let n = &p.display_name;
    let trace = format!(
        "Error: x\n    at <anonymous> ({n}:2:1)\n    at f ({n}:{}:3)\n    at g (other/{n}:2:1)\n{n}:1:1 {n}:99999999999:1",
        code_lines.len()
    );
    let mapped = p.map_positions(&trace);
    assert!(
        mapped.contains(&format!("other/{n}:2:1")),
        "a longer path was rewritten: {mapped}"
    );
    assert_eq!(p.map_positions("no positions here"), "no positions here");

    // The meta read from the literal obeys the same rules as a meta given
    // as JSON (two implementations of one contract).
    if let Some(meta) = &p.meta {
        let json = serde_json::to_value(meta).expect("a Meta serialises");
        match validate_meta_json(&json) {
            Ok(again) => assert_eq!(&again, meta, "the meta's JSON reads back differently"),
            Err(problems) => panic!("the file's meta {json} is invalid as JSON: {problems:?}"),
        }
    }

    // What the worker will compile is plain JavaScript: prepared again as a
    // `.js` file it parses (the only acceptable refusal is the nesting
    // bound, which the wrapper's two levels can cross).
    if let Err(e) = prepare("generated.js", &p.code, ScriptKind::JavaScript) {
        let nesting = e
            .diagnostics()
            .iter()
            .all(|d| d.message.contains("nests deeper than"));
        assert!(
            nesting,
            "the generated code does not parse as JavaScript:\n{e}\n--- source:\n{source}\n--- generated:\n{}",
            p.code
        );
    }
}
