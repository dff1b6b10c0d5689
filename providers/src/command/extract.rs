//! Finding the JSON answer in a program's output.
//!
//! The whole output when it is JSON; otherwise the **last** top-level JSON
//! object or array in the text (agent CLIs often print some chatter, or a
//! fenced code block, before the value). The scan is linear in practice
//! and has a hard work budget, so a hostile output (megabytes of
//! unbalanced brackets) costs bounded time.

use serde_json::Value;

/// serde_json's own nesting limit: deeper spans can never parse.
const MAX_DEPTH: usize = 128;

/// The JSON value in `text`, if any.
pub fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Some(v);
    }
    last_json_value(trimmed)
}

enum Span {
    /// A balanced span ending before this byte offset.
    Closed(usize),
    /// Unbalanced, too deep or unterminated: not a JSON value.
    Broken,
}

/// Finds the bracket that closes the one at `start` (string-aware inside
/// the brackets). `work` counts bytes looked at.
fn match_span(b: &[u8], start: usize, work: &mut usize) -> Span {
    let mut stack: Vec<u8> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut i = start;
    while i < b.len() {
        *work += 1;
        let c = b[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
        } else {
            match c {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    if stack.len() >= MAX_DEPTH {
                        return Span::Broken;
                    }
                    stack.push(if c == b'{' { b'}' } else { b']' });
                }
                b'}' | b']' => {
                    if stack.pop() != Some(c) {
                        return Span::Broken;
                    }
                    if stack.is_empty() {
                        return Span::Closed(i + 1);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    Span::Broken
}

/// The last top-level JSON object or array in `text`.
fn last_json_value(text: &str) -> Option<Value> {
    let b = text.as_bytes();
    // Generous for real output, bounded for hostile output.
    let budget = b.len().saturating_mul(64).saturating_add(1 << 16);
    let mut work = 0usize;
    let mut best = None;
    let mut pos = 0;
    while pos < b.len() && work < budget {
        let Some(off) = b[pos..].iter().position(|&c| c == b'{' || c == b'[') else {
            break;
        };
        let start = pos + off;
        match match_span(b, start, &mut work) {
            Span::Closed(end) => {
                work += end - start;
                // Brackets are ASCII, so both ends are char boundaries.
                match serde_json::from_str::<Value>(&text[start..end]) {
                    Ok(v) => {
                        best = Some(v);
                        pos = end;
                    }
                    // Not JSON (prose in brackets): look inside it.
                    Err(_) => pos = start + 1,
                }
            }
            Span::Broken => pos = start + 1,
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::whole_object(r#"{"ok": true}"#, json!({"ok": true}))]
    #[case::whole_with_newline("{\"ok\": true}\n\n", json!({"ok": true}))]
    #[case::whole_scalar("42", json!(42))]
    #[case::whole_string("\"hi\"", json!("hi"))]
    #[case::after_chatter("Thinking…\nHere it is: {\"ok\": true}\nbye", json!({"ok": true}))]
    #[case::nested_stays_outer("answer: {\"a\": {\"b\": [1, {\"c\": 2}]}}", json!({"a": {"b": [1, {"c": 2}]}}))]
    #[case::last_of_several("{\"n\": 1}\n{\"n\": 2}\n", json!({"n": 2}))]
    #[case::fenced("Sure!\n```json\n{\"ok\": false}\n```\n", json!({"ok": false}))]
    #[case::array("items: [1, 2, 3].", json!([1, 2, 3]))]
    #[case::prose_braces_before("use {braces} like this: {\"ok\": 1}", json!({"ok": 1}))]
    #[case::prose_brackets_after("{\"ok\": 1} [see note]", json!({"ok": 1}))]
    #[case::unclosed_before("a [b and then {\"ok\": 1}", json!({"ok": 1}))]
    #[case::quote_in_prose("don't \"quote\" me: {\"q\": \"a } b\"}", json!({"q": "a } b"}))]
    #[case::escaped_quote("x {\"q\": \"say \\\"}\\\"\"} y", json!({"q": "say \"}\""}))]
    #[case::inside_invalid_outer("[note: {\"ok\": 1}]", json!({"ok": 1}))]
    #[case::unicode("ünïcödé → {\"k\": \"ß\"} ✓", json!({"k": "ß"}))]
    fn finds(#[case] text: &str, #[case] want: Value) {
        assert_eq!(extract_json(text), Some(want), "{text}");
    }

    #[rstest]
    #[case::empty("")]
    #[case::blank("  \n")]
    #[case::prose("no json here")]
    #[case::braces_only("{not json}")]
    #[case::unclosed("{\"a\": 1")]
    fn finds_nothing(#[case] text: &str) {
        assert_eq!(extract_json(text), None);
    }

    #[test]
    fn hostile_output_costs_bounded_time() {
        // Deep unbalanced brackets, long unterminated strings, and a value
        // at the very end: found, quickly.
        let mut text = "[".repeat(2_000_000);
        text.push_str(&"[\"".repeat(200_000));
        text.push_str(&"{]".repeat(200_000));
        text.push_str("{\"ok\": true}");
        let t0 = std::time::Instant::now();
        let got = extract_json(&text);
        assert!(t0.elapsed() < std::time::Duration::from_secs(20));
        // Found unless the budget ran out first; never a hang or a panic.
        if let Some(v) = got {
            assert_eq!(v, json!({"ok": true}));
        }
    }
}
