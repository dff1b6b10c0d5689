//! A server's words quoted in a message: the start of a body or a field,
//! valid UTF-8, one line, bounded. Used by the HTTP part (error bodies)
//! and by every API's reader.

/// How much of a body a message quotes.
pub const EXCERPT_CHARS: usize = 300;

/// The start of a body, for messages: valid UTF-8, one line, bounded.
pub fn excerpt(body: &[u8]) -> String {
    short(&String::from_utf8_lossy(body))
}

/// `s` as one line of at most [`EXCERPT_CHARS`] characters (`…` marks a
/// cut); `(empty)` when nothing visible is left.
pub fn short(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EXCERPT_CHARS + 1)
        .collect();
    let one_line = one_line.trim();
    if one_line.is_empty() {
        return "(empty)".into();
    }
    if one_line.chars().count() > EXCERPT_CHARS {
        let cut: String = one_line.chars().take(EXCERPT_CHARS).collect();
        format!("{cut}…")
    } else {
        one_line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_single_lines() {
        assert_eq!(excerpt(b""), "(empty)");
        assert_eq!(excerpt(b"a\nb\r\n"), "a b");
        let long = "x".repeat(1000);
        let e = excerpt(long.as_bytes());
        assert_eq!(e.chars().count(), EXCERPT_CHARS + 1);
        assert!(e.ends_with('…'));
        assert_eq!(excerpt(&[0xff, b'a']), "\u{fffd}a");
    }
}
