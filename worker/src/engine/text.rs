//! JavaScript strings into Rust ones, without refusing the ones UTF-8
//! cannot hold.
//!
//! A JavaScript string is UTF-16 and may hold a lone surrogate
//! (`"\ud800"`, half of an emoji cut by `slice`). QuickJS hands such a
//! string over as WTF-8 — the surrogate's own three bytes — and a strict
//! conversion fails the call with "invalid utf-8 sequence". The natives take
//! [`Text`] instead: each lone surrogate becomes U+FFFD, which is what
//! JavaScript's own UTF-8 writers (`TextEncoder`, Node's `Buffer`, an HTTP
//! request body) make of it, so `agent("\ud800…")` sends what Claude Code
//! would send rather than failing the run.
//!
//! JSON text is the other way such a string crosses: `JSON.stringify` writes
//! a lone surrogate as an escape (`"\ud800"`), which serde_json refuses.
//! [`well_formed_json`] rewrites those escapes to `\ufffd`.

use rquickjs::{Ctx, FromJs, Value};

/// A string argument of a native, lone surrogates replaced by U+FFFD.
pub(crate) struct Text(pub String);

impl<'js> FromJs<'js> for Text {
    fn from_js(ctx: &Ctx<'js>, value: Value<'js>) -> rquickjs::Result<Self> {
        let s = rquickjs::String::from_js(ctx, value)?;
        match s.to_string() {
            Ok(text) => Ok(Text(text)),
            Err(rquickjs::Error::Utf8(_)) => {
                let c = s.to_cstring()?;
                // SAFETY: `as_ptr` and `len` are what JS_ToCStringLen gave
                // back; the buffer lives until `c` is dropped, after the
                // copy below.
                let bytes = unsafe { std::slice::from_raw_parts(c.as_ptr().cast::<u8>(), c.len()) };
                Ok(Text(wtf8_lossy(bytes)))
            }
            Err(e) => Err(e),
        }
    }
}

/// Text for `Option<Text>` parameters.
pub(crate) fn opt(t: Option<Text>) -> Option<String> {
    t.map(|t| t.0)
}

/// WTF-8 (UTF-8 that may hold the three-byte encoding of a lone surrogate)
/// to UTF-8: one U+FFFD per surrogate, as `String.prototype.toWellFormed`
/// does; any other invalid byte becomes U+FFFD too.
pub(crate) fn wtf8_lossy(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    loop {
        let e = match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.push_str(valid);
                return out;
            }
            Err(e) => e,
        };
        let (good, bad) = rest.split_at(e.valid_up_to());
        out.push_str(&String::from_utf8_lossy(good));
        out.push('\u{FFFD}');
        let skip = match bad {
            // ED A0..BF 80..BF: U+D800..U+DFFF, a surrogate.
            [0xED, 0xA0..=0xBF, 0x80..=0xBF, ..] => 3,
            _ => e.error_len().unwrap_or(bad.len()),
        };
        rest = &bad[skip..];
    }
}

/// `json` with every `\uXXXX` escape of a lone surrogate replaced by
/// `\ufffd`; a high surrogate followed by a low one is a pair and stays.
/// Valid JSON has backslashes only inside strings, so no parsing is needed;
/// text without `\u` is returned as it is.
pub(crate) fn well_formed_json(json: String) -> String {
    if !json.contains("\\u") {
        return json;
    }
    let b = json.as_bytes();
    let unit = |at: usize| -> Option<u32> {
        let hex = b.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let high = |u: Option<u32>| matches!(u, Some(0xD800..=0xDBFF));
    let low = |u: Option<u32>| matches!(u, Some(0xDC00..=0xDFFF));
    let mut out = String::new();
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            // `\\`, `\"`, `\n`…: the escaped byte is not the start of one.
            i += 2;
            continue;
        }
        let u = unit(i + 2);
        let paired = high(u) && b.get(i + 6..i + 8) == Some(b"\\u") && low(unit(i + 8));
        if paired {
            i += 12;
        } else if high(u) || low(u) {
            // Backslashes are ASCII, so `i` is a character boundary.
            out.push_str(&json[copied..i]);
            out.push_str("\\ufffd");
            i += 6;
            copied = i;
        } else {
            i += 2;
        }
    }
    if copied == 0 {
        return json;
    }
    out.push_str(&json[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::{well_formed_json, wtf8_lossy};

    #[rstest]
    #[case::valid(b"abc \xC3\xA9", "abc é")]
    #[case::lone_high(b"\xED\xA0\x80abc", "\u{FFFD}abc")]
    #[case::lone_low_at_end(b"x\xED\xB0\x80", "x\u{FFFD}")]
    #[case::two_lone(b"\xED\xA0\x80\xED\xA0\x80", "\u{FFFD}\u{FFFD}")]
    #[case::other_invalid(b"a\xFFb", "a\u{FFFD}b")]
    // Not a surrogate (cut short): each invalid byte, as `from_utf8_lossy`.
    #[case::truncated(b"a\xED\xA0", "a\u{FFFD}\u{FFFD}")]
    fn a_lone_surrogate_becomes_one_replacement_character(
        #[case] bytes: &[u8],
        #[case] want: &str,
    ) {
        assert_eq!(wtf8_lossy(bytes), want);
    }

    #[rstest]
    #[case::no_escape(r#"{"a":"b"}"#, r#"{"a":"b"}"#)]
    #[case::ordinary_escape(r#""\u0041\n""#, r#""\u0041\n""#)]
    #[case::lone_high(r#"{"s":"\ud800"}"#, r#"{"s":"\ufffd"}"#)]
    #[case::lone_low_upper(r#""a\uDC00b""#, r#""a\ufffdb""#)]
    #[case::pair_kept(r#""\ud83d\ude00""#, r#""\ud83d\ude00""#)]
    #[case::high_then_high(r#""\ud800\ud800""#, r#""\ufffd\ufffd""#)]
    #[case::escaped_backslash_is_not_an_escape(r#""\\ud800""#, r#""\\ud800""#)]
    #[case::after_non_ascii(r#"["é\ud800é"]"#, r#"["é\ufffdé"]"#)]
    #[case::cut_short(r#""\ud8"#, r#""\ud8"#)]
    fn lone_surrogate_escapes_become_ufffd(#[case] json: &str, #[case] want: &str) {
        assert_eq!(well_formed_json(json.to_owned()), want);
    }

    #[test]
    fn the_rewritten_json_parses_and_says_ufffd() {
        let v: serde_json::Value =
            serde_json::from_str(&well_formed_json(r#"{"s":"a\ud800"}"#.to_owned()))
                .expect("parses");
        assert_eq!(v["s"], "a\u{FFFD}");
    }
}
