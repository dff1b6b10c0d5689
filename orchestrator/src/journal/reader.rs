//! Reading a journal back. A torn last line (a crash in the middle of a
//! write) is ignored and reported, never fatal; a damaged line before the
//! last is an error naming the line.

use std::path::Path;

use super::{JournalError, Line};

/// A journal as read from disk.
#[derive(Debug, Default)]
pub struct Journal {
    /// The complete lines, in file order.
    pub lines: Vec<Line>,
    /// Bytes up to the end of the last complete line: where appending
    /// continues.
    pub valid_len: u64,
    /// The last line was incomplete and was ignored.
    pub torn: bool,
}

impl Journal {
    /// The number of `attempt` lines (1 for a run never resumed).
    pub fn attempts(&self) -> u32 {
        self.lines
            .iter()
            .filter(|l| matches!(l, Line::Attempt { .. }))
            .count() as u32
    }
}

/// Reads `path`; a missing file is an empty journal.
pub fn read(path: &Path) -> Result<Journal, JournalError> {
    // A run directory is data: a symlinked journal is refused.
    let bytes = match crate::files::read_own_bytes(path, crate::files::JOURNAL_LIMIT) {
        Ok(b) => b,
        Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Journal::default());
        }
        Err(e) => {
            return Err(JournalError::Invalid {
                path: path.display().to_string(),
                message: format!("cannot read: {e}"),
            });
        }
    };
    parse(path, &bytes)
}

/// Parses the bytes of a journal; `path` is only named in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Journal, JournalError> {
    let mut j = Journal::default();
    let mut offset = 0usize;
    let mut number = 0usize;
    while offset < bytes.len() {
        number += 1;
        let rest = &bytes[offset..];
        let (text, complete) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        };
        let parsed = std::str::from_utf8(text)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Line>(t).map_err(|e| e.to_string()));
        match (parsed, complete) {
            (Ok(line), true) => {
                j.lines.push(line);
                offset += text.len() + 1;
                j.valid_len = offset as u64;
            }
            // The last line, without its newline: torn by a crash whether
            // or not it happens to parse.
            (_, false) => {
                j.torn = true;
                break;
            }
            (Err(message), true) => {
                let is_last = offset + text.len() + 1 >= bytes.len();
                if is_last {
                    j.torn = true;
                    break;
                }
                return Err(JournalError::Corrupt {
                    path: path.display().to_string(),
                    line: number,
                    message,
                });
            }
        }
    }
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const A: &str = "{\"type\":\"attempt\",\"attempt\":1,\"pid\":7,\"at\":0}\n";

    #[rstest]
    #[case::clean(format!("{A}{A}"), 2, false)]
    #[case::torn_mid_line(format!("{A}{{\"type\":\"sett"), 1, true)]
    #[case::torn_without_newline(format!("{A}{}", A.trim_end()), 1, true)]
    #[case::garbage_last_line(format!("{A}%%%\n"), 1, true)]
    #[case::empty(String::new(), 0, false)]
    fn torn_last_lines_are_ignored(#[case] text: String, #[case] lines: usize, #[case] torn: bool) {
        let j = parse(Path::new("j"), text.as_bytes()).expect("parse");
        assert_eq!(j.lines.len(), lines);
        assert_eq!(j.torn, torn);
        assert_eq!(j.valid_len as usize, A.len() * lines);
    }

    #[test]
    fn damage_before_the_last_line_is_an_error_naming_it() {
        let text = format!("{A}not json\n{A}");
        let err = parse(Path::new("runs/x/journal.jsonl"), text.as_bytes()).expect_err("corrupt");
        let msg = err.to_string();
        assert!(
            msg.starts_with("runs/x/journal.jsonl:2: not a journal line"),
            "{msg}"
        );
    }
}
