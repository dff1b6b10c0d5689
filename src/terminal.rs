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

fn escape(s: &str, keep_breaks: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && !(keep_breaks && (c == '\n' || c == '\t'));
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
}
