//! Building [`Diagnostic`]s from byte offsets and rendering them.

use oxc::diagnostics::OxcDiagnostic;

use super::Diagnostic;
use super::positions::LineIndex;

/// A problem at a byte offset of the original source, before it is turned
/// into a line/column [`Diagnostic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) offset: usize,
    pub(crate) message: String,
}

impl Located {
    pub(crate) fn new(offset: impl TryInto<usize>, message: impl Into<String>) -> Located {
        Located {
            offset: offset.try_into().unwrap_or(usize::MAX),
            message: message.into(),
        }
    }

    /// The primary position and the message of an oxc diagnostic.
    pub(crate) fn from_oxc(diagnostic: &OxcDiagnostic) -> Located {
        // The primary label; without one, the latest label: oxc lists the
        // earlier, related place first ("declared here", "opened here").
        let labels = &diagnostic.labels;
        let offset = labels
            .iter()
            .find(|l| l.primary())
            .or_else(|| labels.iter().max_by_key(|l| l.offset()))
            .map_or(0, |l| l.offset());
        Located::new(offset, single_line(&diagnostic.message))
    }
}

fn single_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Diagnostics reported for one file at most. Each keeps its source line,
/// so an unbounded list made memory grow with problems × line length (8,000
/// unknown meta fields on one 71 KB line took 570 MB); the first ones are
/// what a user fixes first anyway.
pub(crate) const MAX_DIAGNOSTICS: usize = 20;

/// Turns located problems into diagnostics of `file`, in file order, without
/// exact duplicates, at most [`MAX_DIAGNOSTICS`] of them; the last one then
/// says how many more there are.
pub(crate) fn build(
    file: &str,
    source: &str,
    index: &LineIndex,
    mut problems: Vec<Located>,
) -> Vec<Diagnostic> {
    problems.sort_by_key(|p| p.offset);
    problems.dedup_by(|a, b| a.offset == b.offset && a.message == b.message);
    let more = problems.len().saturating_sub(MAX_DIAGNOSTICS);
    problems.truncate(MAX_DIAGNOSTICS);
    if more > 0
        && let Some(last) = problems.last_mut()
    {
        last.message.push_str(&format!(
            " ({more} more problem{} not shown; fix these first)",
            if more == 1 { "" } else { "s" }
        ));
    }
    let mut diagnostics: Vec<Diagnostic> = problems
        .into_iter()
        .map(|p| {
            let (line, column) = index.position(source, p.offset);
            let source_line = index
                .line_text(source, (line as usize).saturating_sub(1))
                .to_string();
            Diagnostic {
                file: file.to_string(),
                line,
                column,
                message: p.message,
                source_line,
            }
        })
        .collect();
    diagnostics.dedup();
    diagnostics
}

/// `file:line:col: message`.
fn header(d: &Diagnostic) -> String {
    format!("{}:{}:{}: {}", d.file, d.line, d.column, d.message)
}

/// A line that puts `^` under the 1-based character `column` of
/// `source_line`, reproducing its tabs so the caret lines up.
pub(crate) fn caret_line(source_line: &str, column: u32) -> String {
    let before = (column as usize).saturating_sub(1);
    let mut caret: String = source_line
        .chars()
        .take(before)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    let missing = before.saturating_sub(source_line.chars().count());
    caret.extend(std::iter::repeat_n(' ', missing));
    caret.push('^');
    caret
}

/// Characters of a source line shown on each side of the column when the
/// line is too long to print whole.
const EXCERPT_HALF: usize = 60;

/// The part of `line` an error shows, and the column in it: the whole line
/// when it is short, else a window around `column` marked with `…`.
fn excerpt(line: &str, column: u32) -> (String, u32) {
    let chars = line.chars().count();
    if chars <= 2 * EXCERPT_HALF + 20 {
        return (line.to_string(), column);
    }
    let at = (column as usize).saturating_sub(1).min(chars);
    let start = at.saturating_sub(EXCERPT_HALF);
    let end = (at + EXCERPT_HALF).min(chars);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(line.chars().skip(start).take(end - start));
    if end < chars {
        out.push('…');
    }
    let column = at - start + 1 + usize::from(start > 0);
    (out, u32::try_from(column).unwrap_or(u32::MAX))
}

/// `SCRIPT_PARSE` rendering: header, source line (a window of it when it is
/// long), caret line per diagnostic.
pub(crate) fn render_with_carets(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| {
            let (line, column) = excerpt(&d.source_line, d.column);
            format!("{}\n{}\n{}", header(d), line, caret_line(&line, column))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `META_INVALID` rendering: one header line per diagnostic.
pub(crate) fn render_plain(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(header)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_shown_around_the_column() {
        let line = format!("{}X{}", "a".repeat(500), "b".repeat(500));
        let (shown, column) = excerpt(&line, 501);
        assert!(shown.starts_with('…') && shown.ends_with('…'), "{shown}");
        assert_eq!(shown.chars().nth(column as usize - 1), Some('X'));
        assert!(shown.chars().count() <= 2 * EXCERPT_HALF + 2);
        let short = "const x = ;";
        assert_eq!(excerpt(short, 11), (short.to_string(), 11));
        let (start, column) = excerpt(&line, 1);
        assert!(!start.starts_with('…') && column == 1);
    }
}
