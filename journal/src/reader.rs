//! Reading a journal back. A torn last line (a crash in the middle of a
//! write) is ignored and reported, never fatal; a damaged line before the
//! last is an error naming the line.

use std::io::{BufRead, Read};
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

/// Reads `path` for a resume; a missing file is an empty journal. Streamed
/// line by line, and the prompts of `start` lines are dropped as they are
/// read (a resume matches calls by key): what stays in memory is the
/// answers, not the whole file.
pub fn read(path: &Path) -> Result<Journal, JournalError> {
    let mut lines = Vec::new();
    let scanned = scan(path, |mut line| {
        if let Line::Start { prompt, .. } = &mut line {
            *prompt = String::new();
        }
        lines.push(line);
    })?;
    Ok(Journal {
        lines,
        valid_len: scanned.valid_len,
        torn: scanned.torn,
    })
}

/// Where a scan ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// Bytes up to the end of the last complete line.
    pub valid_len: u64,
    /// The last line was incomplete (or unreadable) and was ignored.
    pub torn: bool,
}

/// Hands each complete line of the journal at `path` to `each`, in order,
/// holding one line at a time; a missing file has none. Lines longer than
/// [`JOURNAL_LINE_LIMIT`](dsh_exec::files::JOURNAL_LINE_LIMIT) are damage.
pub fn scan(path: &Path, each: impl FnMut(Line)) -> Result<Scanned, JournalError> {
    let invalid = |message: String| JournalError::Invalid {
        path: path.display().to_string(),
        message,
    };
    // A run directory is data: a symlinked journal is refused.
    let file = match dsh_exec::files::open_own(path) {
        Ok(f) => f,
        Err(dsh_exec::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Scanned::default());
        }
        Err(e) => return Err(invalid(format!("cannot read: {e}"))),
    };
    scan_reader(path, std::io::BufReader::new(file), each)
        .map_err(|e| e.unwrap_or_else(|io| invalid(format!("cannot read: {io}"))))
}

/// [`scan`] over any reader; `path` is only named in errors. The error is
/// a journal error, or (`Err(Err(io))`) a read failure.
fn scan_reader(
    path: &Path,
    mut r: impl BufRead,
    mut each: impl FnMut(Line),
) -> Result<Scanned, Result<JournalError, std::io::Error>> {
    let limit = dsh_exec::files::JOURNAL_LINE_LIMIT;
    let mut s = Scanned::default();
    let mut buf = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        let n = (&mut r)
            .take(limit + 1)
            .read_until(b'\n', &mut buf)
            .map_err(Err)?;
        if n == 0 {
            return Ok(s);
        }
        number += 1;
        let complete = buf.last() == Some(&b'\n');
        if !complete {
            if buf.len() as u64 > limit {
                return Err(Ok(JournalError::Corrupt {
                    path: path.display().to_string(),
                    line: number,
                    message: format!("the line is longer than {limit} bytes"),
                }));
            }
            // The last line, without its newline: torn by a crash whether
            // or not it happens to parse.
            s.torn = true;
            return Ok(s);
        }
        let text = &buf[..buf.len() - 1];
        let parsed = std::str::from_utf8(text)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Line>(t).map_err(|e| e.to_string()));
        match parsed {
            Ok(line) => {
                each(line);
                s.valid_len += buf.len() as u64;
            }
            Err(message) => {
                let is_last = r.fill_buf().map_err(Err)?.is_empty();
                if is_last {
                    s.torn = true;
                    return Ok(s);
                }
                return Err(Ok(JournalError::Corrupt {
                    path: path.display().to_string(),
                    line: number,
                    message,
                }));
            }
        }
    }
}

/// Hands each complete line of the journal `bytes` to `each`, in order,
/// as [`scan`] does for a file; `path` is only named in errors.
pub fn scan_bytes(
    path: &Path,
    bytes: &[u8],
    each: impl FnMut(Line),
) -> Result<Scanned, JournalError> {
    scan_reader(path, bytes, each).map_err(|e| {
        e.unwrap_or_else(|io| JournalError::Invalid {
            path: path.display().to_string(),
            message: format!("cannot read: {io}"),
        })
    })
}

/// Parses the bytes of a journal; `path` is only named in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Journal, JournalError> {
    let mut lines = Vec::new();
    let scanned = scan_reader(path, bytes, |l| lines.push(l)).map_err(|e| {
        e.unwrap_or_else(|io| JournalError::Invalid {
            path: path.display().to_string(),
            message: format!("cannot read: {io}"),
        })
    })?;
    Ok(Journal {
        lines,
        valid_len: scanned.valid_len,
        torn: scanned.torn,
    })
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
