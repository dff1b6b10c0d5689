//! Journal parsing (`journal::reader::parse`, what `resume`, `runs` and
//! `show` read from `journal.jsonl`) on arbitrary bytes.
//!
//! Invariants checked:
//! - never panics; a damaged line before the last is an error naming the
//!   file and that line, a torn last line is ignored and reported;
//! - `valid_len` (where appending continues) is the end of a complete
//!   line inside the file, and the prefix up to it parses to the same lines
//!   with nothing torn;
//! - every line read prints (`Line::to_text`, what the writer appends) as
//!   one line that reads back to the same line, so a journal rewritten by
//!   dsh reads back as it was.
#![no_main]

use std::path::Path;

use dsh_orchestrator::journal::JournalError;
use dsh_orchestrator::journal::reader::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("runs/r/journal.jsonl");
    let journal = match parse(path, data) {
        Ok(j) => j,
        Err(JournalError::Corrupt { path: p, line, .. }) => {
            assert_eq!(p, "runs/r/journal.jsonl");
            let lines = data.split(|b| *b == b'\n').count();
            assert!(line >= 1 && line < lines, "corrupt line {line} of {lines}");
            return;
        }
        Err(e) => panic!("unexpected error {e}"),
    };
    let valid = usize::try_from(journal.valid_len).expect("fits");
    assert!(valid <= data.len());
    assert!(
        valid == 0 || data[valid - 1] == b'\n',
        "valid_len is not after a newline"
    );
    assert_eq!(
        journal.torn,
        valid < data.len(),
        "torn iff bytes were left over"
    );
    assert_eq!(
        data[..valid].iter().filter(|b| **b == b'\n').count(),
        journal.lines.len(),
        "one line per newline up to valid_len"
    );

    let prefix = parse(path, &data[..valid]).expect("the valid prefix parses");
    assert!(!prefix.torn);
    assert_eq!(prefix.lines, journal.lines);
    assert_eq!(prefix.valid_len, journal.valid_len);

    let mut rewritten = String::new();
    for line in &journal.lines {
        let text = line.to_text();
        assert_eq!(
            text.matches('\n').count(),
            1,
            "a journal line spans lines: {text:?}"
        );
        rewritten.push_str(&text);
    }
    let again = parse(path, rewritten.as_bytes()).expect("a rewritten journal parses");
    assert!(!again.torn);
    assert_eq!(
        again.lines, journal.lines,
        "lines changed when printed and read back"
    );
});
