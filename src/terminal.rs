//! Script-controlled text on a terminal: labels, phase titles, logs, meta,
//! error messages and file names reach stderr and `runs`/`show`, where a
//! raw ESC, CR or line break could move the cursor, recolour the screen or
//! forge a line such as `end completed`. Everything of that kind goes
//! through [`line()`] or [`text()`] first.

use std::borrow::Cow;

/// For text that must stay on one line (an event line, a table cell):
/// every control character, line breaks included, as a visible escape.
pub fn line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// For text that may span lines (an error message with its source
/// excerpt): line breaks and tabs stay, every other control character is
/// escaped.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// Characters that are not controls to Rust (`char::is_control` is the
/// Cc category) but move text on a terminal all the same: the line and
/// paragraph separators (U+2028, U+2029), which some terminals and most
/// log viewers break lines at, and the bidirectional controls (U+061C,
/// U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which reorder what
/// follows them — a label could show `end completed` where the bytes say
/// otherwise (the "Trojan Source" trick).
fn moves_text(c: char) -> bool {
    matches!(
        c,
        '\u{2028}'
            | '\u{2029}'
            | '\u{061c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

fn escape(s: &str, keep_breaks: bool) -> Cow<'_, str> {
    let unsafe_char =
        |c: char| (c.is_control() && !(keep_breaks && (c == '\n' || c == '\t'))) || moves_text(c);
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible() {
        assert_eq!(line("plain — ünïcode"), "plain — ünïcode");
        assert_eq!(line("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(
            line("ok\r\n[   1ms] end completed"),
            "ok\\r\\n[   1ms] end completed"
        );
        assert_eq!(line("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(text("line 1\n\tline 2\x07"), "line 1\n\tline 2\\u{7}");
        assert_eq!(text("a\rb"), "a\\rb");
    }

    /// U+2028/U+2029 and the bidi controls are not Cc, so `is_control`
    /// let them through: a label could break a line or reorder it.
    #[test]
    fn separators_and_bidi_controls_become_visible() {
        assert_eq!(line("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(text("a\u{2028}b"), "a\\u{2028}b");
        assert_eq!(
            line("x\u{202e}detelpmoc\u{202c}y"),
            "x\\u{202e}detelpmoc\\u{202c}y"
        );
        for c in [
            '\u{061c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202d}', '\u{2066}',
            '\u{2067}', '\u{2068}', '\u{2069}', '\u{85}',
        ] {
            assert_eq!(line(&c.to_string()), format!("\\u{{{:x}}}", u32::from(c)));
        }
        // Other non-ASCII text is left alone.
        assert_eq!(line("naïve — 日本語 ✓"), "naïve — 日本語 ✓");
    }
}
