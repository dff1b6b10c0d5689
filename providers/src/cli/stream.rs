//! Reading an agent CLI's JSON-lines stream while it runs: lines are split
//! and parsed as they arrive, each handed to the CLI's [`Dialect`], which
//! turns it into activity (tool calls, turns, tokens) and into what the
//! call's outcome is made of ([`Observed`]).
//!
//! Memory is bounded whatever the CLI prints: a line longer than
//! [`MAX_LINE`] is skipped (and counted, so a lost answer is explained),
//! and only the last answer is kept.

use serde_json::Value;

use dsh_seam::{Progress, Session, Usage};

/// The longest line kept: 16 MiB (a final answer with a large structured
/// value fits; a runaway line does not grow the host).
pub const MAX_LINE: usize = 16 << 20;

/// The longest a tool call's detail is shown in an activity.
const DETAIL_CHARS: usize = 120;

/// What a CLI's stream said so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Observed {
    /// The CLI's session (thread) id, as soon as it says it.
    pub session: Option<String>,
    /// This run's tokens (and cost) so far; its final totals once it gave
    /// them.
    pub usage: Option<Usage>,
    /// The final answer's text.
    pub text: Option<String>,
    /// The final answer as a structured value (Claude Code's
    /// `structured_output`).
    pub structured: Option<Value>,
    /// The CLI said the task failed, and why.
    pub error: Option<String>,
    /// The CLI printed its final result.
    pub finished: bool,
    /// Model turns seen.
    pub turns: u32,
    /// `usage` is the session's total, earlier runs of a resumed session
    /// included (Codex), not this run's alone (Claude Code).
    pub usage_is_session_total: bool,
}

/// One CLI's stream format.
pub trait Dialect: Send {
    /// One parsed line: update `seen`, tell `progress` what the CLI does.
    fn line(&mut self, line: &Value, seen: &mut Observed, progress: &Progress);
}

/// A tool call's detail for an activity: what it was called on, cut short.
pub fn detail_of(input: &Value) -> String {
    let pick = [
        "file_path",
        "path",
        "absolute_path",
        "command",
        "cmd",
        "pattern",
        "url",
        "query",
        "description",
    ]
    .iter()
    .find_map(|k| input.get(*k))
    .map(|v| match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    })
    .unwrap_or_default();
    cut(&pick, DETAIL_CHARS)
}

/// `s` on one line, at most `n` characters.
pub fn cut(s: &str, n: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= n {
        one
    } else {
        let mut t: String = one.chars().take(n).collect();
        t.push('…');
        t
    }
}

/// The text of a tool result's `content`: a string, or text blocks.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A CLI's stdout, read line by line as it arrives.
pub struct CliStream {
    dialect: Box<dyn Dialect>,
    /// The provider's name, for the sessions it reports.
    provider: String,
    progress: Progress,
    seen: Observed,
    /// The part of a line not yet ended by `\n`.
    partial: Vec<u8>,
    /// The current line is longer than [`MAX_LINE`]: skipped to its end.
    skipping: bool,
    skipped_lines: u64,
}

impl CliStream {
    /// Reads `dialect`'s stream for provider `provider`, telling
    /// `progress` what the CLI does and which session it runs.
    pub fn new(dialect: Box<dyn Dialect>, provider: impl Into<String>, progress: Progress) -> Self {
        CliStream {
            dialect,
            provider: provider.into(),
            progress,
            seen: Observed::default(),
            partial: Vec::new(),
            skipping: false,
            skipped_lines: 0,
        }
    }

    /// The next bytes of stdout.
    pub fn feed(&mut self, mut data: &[u8]) {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            let (head, rest) = data.split_at(nl);
            data = &rest[1..];
            if self.skipping {
                self.skipping = false;
                continue;
            }
            if self.partial.is_empty() {
                self.take_line(head);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.take_line(&line);
            }
        }
        if self.skipping {
            return;
        }
        if self.partial.len() + data.len() > MAX_LINE {
            self.partial.clear();
            self.skipping = true;
            self.skipped_lines += 1;
            return;
        }
        self.partial.extend_from_slice(data);
    }

    /// What the stream said, once the CLI is gone (a last line without a
    /// newline included), and how many lines were too long to read.
    pub fn end(mut self) -> (Observed, u64) {
        if !self.partial.is_empty() && !self.skipping {
            let line = std::mem::take(&mut self.partial);
            self.take_line(&line);
        }
        (self.seen, self.skipped_lines)
    }

    fn take_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        // Lines that are not JSON (a CLI's stray chatter) are not the
        // stream; the result line decides the outcome.
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let before = self.seen.session.clone();
        self.dialect.line(&v, &mut self.seen, &self.progress);
        if self.seen.session != before
            && let Some(id) = &self.seen.session
        {
            self.progress.set_session(Session {
                provider: self.provider.clone(),
                id: id.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Counts lines and takes `answer` lines as the answer.
    struct Echo(u32);

    impl Dialect for Echo {
        fn line(&mut self, line: &Value, seen: &mut Observed, _: &Progress) {
            self.0 += 1;
            if let Some(a) = line.get("answer").and_then(Value::as_str) {
                seen.text = Some(a.into());
                seen.finished = true;
            }
            if let Some(s) = line.get("session").and_then(Value::as_str) {
                seen.session = Some(s.into());
            }
        }
    }

    #[test]
    fn lines_split_anywhere_are_read_whole() {
        let progress = Progress::new();
        let mut s = CliStream::new(Box::new(Echo(0)), "p", progress.clone());
        let text =
            b"{\"session\":\"s1\"}\nnot json\n\r\n{\"answer\":\"hi\"}\r\n{\"answer\":\"last\"}";
        for chunk in text.chunks(3) {
            s.feed(chunk);
        }
        let (seen, skipped) = s.end();
        assert_eq!(seen.text.as_deref(), Some("last"));
        assert_eq!(skipped, 0);
        assert_eq!(
            progress.session(),
            Some(Session {
                provider: "p".into(),
                id: "s1".into()
            })
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_and_counted() {
        let mut s = CliStream::new(Box::new(Echo(0)), "p", Progress::new());
        s.feed(b"{\"answer\":\"");
        let big = vec![b'x'; 1 << 20];
        for _ in 0..17 {
            s.feed(&big);
        }
        s.feed(b"\"}\n{\"answer\":\"after\"}\n");
        let (seen, skipped) = s.end();
        assert_eq!(skipped, 1);
        assert_eq!(seen.text.as_deref(), Some("after"));
    }

    #[test]
    fn details_and_contents() {
        assert_eq!(detail_of(&json!({ "file_path": "a/b.rs" })), "a/b.rs");
        assert_eq!(
            detail_of(&json!({ "command": ["bash", "-lc", "ls"] })),
            "bash -lc ls"
        );
        assert_eq!(detail_of(&json!({ "other": 1 })), "");
        assert_eq!(cut("a\n  b", 10), "a b");
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(
            content_text(
                &json!([{ "type": "text", "text": "x" }, { "type": "text", "text": "y" }])
            ),
            "x\ny"
        );
        assert_eq!(content_text(&json!("z")), "z");
    }
}
