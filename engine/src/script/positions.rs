//! Line/column arithmetic and the generated-to-original position mapping.
//!
//! Line terminators are those of ECMAScript (`\n`, `\r\n`, lone `\r`, U+2028,
//! U+2029), the same set oxc's parser and source-map builder use. Columns of
//! the original file count characters; a leading byte-order mark is not a
//! column. Columns of the generated code are 1-based byte offsets within the
//! line, which is what QuickJS reports.

const BOM: char = '\u{feff}';

/// Byte offsets of the starts of the lines of a text.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
    len: usize,
    bom_len: usize,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' => {
                    if bytes.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    }
                    starts.push(i + 1);
                }
                // U+2028 and U+2029 are E2 80 A8 / E2 80 A9.
                0xE2 if bytes.get(i + 1) == Some(&0x80)
                    && matches!(bytes.get(i + 2), Some(&0xA8) | Some(&0xA9)) =>
                {
                    i += 2;
                    starts.push(i + 1);
                }
                _ => {}
            }
            i += 1;
        }
        let bom_len = if text.starts_with(BOM) {
            BOM.len_utf8()
        } else {
            0
        };
        LineIndex {
            starts,
            len: text.len(),
            bom_len,
        }
    }

    /// 0-based line containing byte `offset` (clamped to the text).
    fn line_of(&self, offset: usize) -> usize {
        let offset = offset.min(self.len);
        self.starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// Byte range of 0-based `line` without its terminator, and without a
    /// leading byte-order mark on the first line.
    pub(crate) fn line_range(&self, text: &str, line: usize) -> (usize, usize) {
        let Some(&start) = self.starts.get(line) else {
            return (self.len, self.len);
        };
        let start = if line == 0 {
            start + self.bom_len
        } else {
            start
        };
        let next = self.starts.get(line + 1).copied().unwrap_or(self.len);
        let raw = text.get(start..next.max(start)).unwrap_or("");
        let content = raw
            .strip_suffix("\r\n")
            .or_else(|| raw.strip_suffix('\n'))
            .or_else(|| raw.strip_suffix('\r'))
            .or_else(|| raw.strip_suffix('\u{2028}'))
            .or_else(|| raw.strip_suffix('\u{2029}'))
            .unwrap_or(raw);
        (start, start + content.len())
    }

    /// Text of 0-based `line`, untrimmed, without its terminator.
    pub(crate) fn line_text<'t>(&self, text: &'t str, line: usize) -> &'t str {
        let (start, end) = self.line_range(text, line);
        text.get(start..end).unwrap_or("")
    }

    /// 1-based (line, character column) of byte `offset` in `text`. Offsets
    /// past the end, inside a character or inside a line terminator (between
    /// the `\r` and the `\n` of a CRLF) are clamped: the column is at most
    /// one past the line's last character.
    pub(crate) fn position(&self, text: &str, offset: usize) -> (u32, u32) {
        let offset = floor_char_boundary(text, offset.min(text.len()));
        let line = self.line_of(offset);
        let (start, end) = self.line_range(text, line);
        let column = text
            .get(start..offset.clamp(start, end.max(start)))
            .map_or(0, |s| s.chars().count());
        (to_u32(line + 1), to_u32(column + 1))
    }

    /// Byte offset of the character at 0-based `line` and 0-based UTF-16
    /// `column` counted from the raw start of the line (as source maps count).
    pub(crate) fn offset_of_utf16(&self, text: &str, line: usize, column: usize) -> Option<usize> {
        let start = *self.starts.get(line)?;
        let end = self.starts.get(line + 1).copied().unwrap_or(self.len);
        let mut units = 0;
        for (i, c) in text.get(start..end)?.char_indices() {
            if units >= column {
                return Some(start + i);
            }
            units += c.len_utf16();
        }
        (units >= column).then_some(end)
    }

    /// Raw byte offset of the start of 0-based `line`.
    pub(crate) fn line_start(&self, line: usize) -> Option<usize> {
        self.starts.get(line).copied()
    }

    /// 1-based line and 1-based *byte* column of byte `offset` (clamped),
    /// the way the engine reports positions in the generated code.
    pub(crate) fn byte_position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.len);
        let line = self.line_of(offset);
        let start = self.starts.get(line).copied().unwrap_or(0);
        (to_u32(line + 1), to_u32(offset.saturating_sub(start) + 1))
    }

    /// Byte offset of the 1-based `line` and 1-based character `column`
    /// that [`LineIndex::position`] reports, clamped to the line's end.
    pub(crate) fn offset_at(&self, text: &str, line: u32, column: u32) -> usize {
        let (start, end) = self.line_range(text, (line as usize).saturating_sub(1));
        let content = text.get(start..end).unwrap_or("");
        let skip = (column as usize).saturating_sub(1);
        start
            + content
                .char_indices()
                .nth(skip)
                .map_or(content.len(), |(i, _)| i)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

pub(crate) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// One source-map segment: a place in the generated code and the byte offset
/// in the original source it was printed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Segment {
    /// 1-based line of the complete generated code.
    line: u32,
    /// 0-based byte column within that line.
    column: u32,
    /// Byte offset in the original source.
    source_offset: usize,
}

/// A raw source-map token as oxc's codegen produces it: 0-based lines and
/// UTF-16 columns, generated side relative to the printed body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawToken {
    pub(crate) dst_line: u32,
    pub(crate) dst_col: u32,
    pub(crate) src_line: u32,
    pub(crate) src_col: u32,
}

/// Everything needed to map engine positions in the generated code back to
/// the original file.
#[derive(Debug, Clone)]
pub(crate) struct SourceMapping {
    source: String,
    source_index: LineIndex,
    code: String,
    code_index: LineIndex,
    segments: Vec<Segment>,
}

impl SourceMapping {
    /// `body` was printed by codegen and placed in `code` after
    /// `prefix_lines` complete lines; `tokens` are codegen's source map of it.
    pub(crate) fn new(
        source: &str,
        code: &str,
        body: &str,
        prefix_lines: u32,
        tokens: &[RawToken],
    ) -> SourceMapping {
        let source_index = LineIndex::new(source);
        let body_index = LineIndex::new(body);
        let code_index = LineIndex::new(code);
        let mut segments: Vec<Segment> = tokens
            .iter()
            .filter_map(|t| {
                let source_offset = source_index.offset_of_utf16(
                    source,
                    t.src_line as usize,
                    t.src_col as usize,
                )?;
                let dst_line = t.dst_line as usize;
                let generated = body_index.offset_of_utf16(body, dst_line, t.dst_col as usize)?;
                let column = generated.checked_sub(body_index.line_start(dst_line)?)?;
                Some(Segment {
                    line: t.dst_line.checked_add(prefix_lines)?.checked_add(1)?,
                    column: to_u32(column),
                    source_offset,
                })
            })
            .collect();
        segments.sort();
        segments.dedup_by_key(|s| (s.line, s.column));
        SourceMapping {
            source: source.to_string(),
            source_index,
            code: code.to_string(),
            code_index,
            segments,
        }
    }

    /// See [`PreparedScript::original_position`](super::PreparedScript::original_position).
    pub(crate) fn original_position(&self, line: u32, column: u32) -> Option<(u32, u32)> {
        let column0 = column.saturating_sub(1);
        let first = self.segments.partition_point(|s| s.line < line);
        let end = self.segments.partition_point(|s| s.line <= line);
        let on_line = self.segments.get(first..end)?;
        if on_line.is_empty() {
            return None;
        }
        let after = on_line.partition_point(|s| s.column <= column0);
        let segment = if after == 0 {
            on_line[0]
        } else {
            on_line[after - 1]
        };
        let offset = self
            .refine(segment, line, column0)
            .unwrap_or(segment.source_offset);
        Some(self.source_index.position(&self.source, offset))
    }

    /// When the generated text from the segment up to the requested column is
    /// identical to the original text after the segment's source offset (the
    /// usual case: codegen reprints expressions verbatim), the exact original
    /// offset of the column.
    fn refine(&self, segment: Segment, line: u32, column0: u32) -> Option<usize> {
        let delta = column0.checked_sub(segment.column)? as usize;
        if delta == 0 {
            return Some(segment.source_offset);
        }
        let (line_start, line_end) = self
            .code_index
            .line_range(&self.code, (line as usize).checked_sub(1)?);
        let from = line_start + segment.column as usize;
        let to = from.checked_add(delta)?;
        if to > line_end {
            return None;
        }
        let generated = self.code.get(from..to)?;
        let original = self
            .source
            .get(segment.source_offset..segment.source_offset.checked_add(delta)?)?;
        (generated == original).then_some(segment.source_offset + delta)
    }
}

/// Replaces every `<name>:<line>:<col>` in `text` whose position `map`
/// translates; the name must not be preceded by a character that would make
/// it part of a longer path.
pub(crate) fn rewrite_positions(
    text: &str,
    name: &str,
    map: impl Fn(u32, u32) -> Option<(u32, u32)>,
) -> String {
    if name.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = text.get(search..).and_then(|rest| rest.find(name)) {
        let start = search + found;
        let after_name = start + name.len();
        search = after_name;
        let preceded_by_path = text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '/' | '\\' | '.' | '_' | '-'));
        if preceded_by_path {
            continue;
        }
        let Some((line, column, end)) = parse_line_col(text, after_name) else {
            continue;
        };
        let Some((orig_line, orig_column)) = map(line, column) else {
            search = end;
            continue;
        };
        out.push_str(&text[copied..after_name]);
        out.push_str(&format!(":{orig_line}:{orig_column}"));
        copied = end;
        search = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Parses `:<digits>:<digits>` at byte `at`; returns the numbers and the end.
fn parse_line_col(text: &str, at: usize) -> Option<(u32, u32, usize)> {
    let (line, after_line) = parse_colon_number(text, at)?;
    let (column, end) = parse_colon_number(text, after_line)?;
    Some((line, column, end))
}

fn parse_colon_number(text: &str, at: usize) -> Option<(u32, usize)> {
    let rest = text.get(at..)?.strip_prefix(':')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let number = rest[..digits].parse().ok()?;
    // A longer number run (e.g. a version `:1:2.3`) is still a position; a
    // following digit cannot happen because the run is maximal.
    Some((number, at + 1 + digits))
}
