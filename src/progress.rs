//! Rendering events on stderr: JSON lines, or one readable line per event
//! (with colour when stderr is a terminal).

use std::io::Write;

use dsh_orchestrator::Activity;
use dsh_orchestrator::events::{Event, EventKind};

use crate::terminal::line as esc;

pub fn line(event: &Event, color: bool) -> String {
    let (dim, bold, red, green, yellow, reset) = if color {
        (
            "\x1b[2m", "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[0m",
        )
    } else {
        ("", "", "", "", "", "")
    };
    let t = format!("{dim}[{:>6}ms]{reset}", event.t);
    match &event.kind {
        EventKind::Start { meta } => format!(
            "{t} {bold}start{reset} {} — {} ({})",
            esc(&meta.name),
            esc(&meta.description),
            event.run_id
        ),
        EventKind::Phase { title, workflow } => format!(
            "{t} {bold}phase{reset} {}{}",
            esc(title),
            workflow
                .as_ref()
                .map(|w| format!(" (in {})", esc(w)))
                .unwrap_or_default()
        ),
        EventKind::Log { message, .. } => format!("{t} log {}", esc(message)),
        EventKind::Warning { message, path } => {
            format!(
                "{t} {yellow}warning{reset} {}",
                esc(&warning_text(message, path.as_deref()))
            )
        }
        EventKind::AgentStart {
            seq, label, phase, ..
        } => format!(
            "{t} agent #{seq} {yellow}started{reset} {}{}",
            esc(label),
            phase
                .as_ref()
                .map(|p| format!(" [{}]", esc(p)))
                .unwrap_or_default()
        ),
        EventKind::AgentEnd {
            seq,
            label,
            outcome,
            reason,
            ..
        } => {
            let c = match outcome.as_str() {
                "completed" => green,
                _ => red,
            };
            // A failed line says why: the reason on the same line, cut
            // (the whole reason is in `show` and the report).
            let why = reason
                .as_deref()
                .map(|r| format!(" — {}", esc(&reason_line(r))))
                .unwrap_or_default();
            format!(
                "{t} agent #{seq} {c}{}{reset} {}{why}",
                outcome.as_str(),
                esc(label)
            )
        }
        EventKind::End {
            stop_reason,
            error,
            agents_started,
            ..
        } => format!(
            "{t} {bold}end{reset} {}{} ({agents_started} agent{})",
            stop_reason.as_str(),
            error
                .as_ref()
                .map(|e| format!(" {}", e.code))
                .unwrap_or_default(),
            if *agents_started == 1 { "" } else { "s" }
        ),
        EventKind::AgentActivity { seq, activity, .. } => {
            format!("{t} agent #{seq} {}", esc(&activity_text(activity)))
        }
        // A kind this build does not render yet: its type, as in JSON.
        _ => format!(
            "{t} {}",
            event.to_json()["type"].as_str().unwrap_or("event")
        ),
    }
}

/// Longest reason a live line shows.
pub const REASON_LINE_CHARS: usize = 120;

/// A failure's reason as a live line shows it: its whitespace (a
/// program's stderr has line breaks) made single spaces, cut to
/// [`REASON_LINE_CHARS`].
pub fn reason_line(reason: &str) -> String {
    let one = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.char_indices().nth(REASON_LINE_CHARS) {
        None => one,
        Some((i, _)) => format!("{}…", &one[..i]),
    }
}

/// One activity as words: `Read src/a.rs`, `Bash denied: …`.
fn activity_text(a: &Activity) -> String {
    match a {
        Activity::Turn { turn } => format!("turn {turn}"),
        Activity::Tokens { usage } => format!("{} in / {} out tokens", usage.input, usage.output),
        Activity::ToolCall { tool, detail } => format!("{tool} {detail}"),
        Activity::ToolEnd {
            tool,
            status,
            ms,
            message,
        } => match message {
            Some(m) => format!("{tool} {status} after {ms}ms: {m}"),
            None => format!("{tool} {status} after {ms}ms"),
        },
        Activity::Retry {
            attempt,
            reason,
            partial,
        } => format!(
            "retry, attempt {attempt}{}: {reason}",
            if *partial {
                " (the partly streamed answer is discarded)"
            } else {
                ""
            }
        ),
        Activity::Held { shared_bytes } => format!(
            "held until an earlier call's answer starts ({shared_bytes} bytes of prompt shared: \
             served from the provider's cache after it)"
        ),
        Activity::Released { waited_ms } => format!("released after {waited_ms}ms"),
        Activity::Concurrency { limit, reason } => {
            format!("the provider's concurrency is now {limit}: {reason}")
        }
    }
}

/// Whether the readable lines show an event: tool calls, failed tool
/// calls and retries are; turns, token counts and tools that succeeded are
/// left to `--events jsonl` (one line each would drown the log).
fn shown_as_line(event: &Event) -> bool {
    match &event.kind {
        EventKind::AgentActivity { activity, .. } => match activity {
            Activity::ToolCall { .. }
            | Activity::Retry { .. }
            | Activity::Held { .. }
            | Activity::Concurrency { .. } => true,
            Activity::ToolEnd { status, .. } => status != "ok",
            _ => false,
        },
        // Waiting for a slot is the live view's (its header's `queued`)
        // and `--events jsonl`'s: a line per queued call and one more when
        // it leaves the queue would double a large fan-out's log.
        EventKind::AgentQueued { .. } => false,
        _ => true,
    }
}

/// Where and how events are shown.
pub enum Mode {
    Jsonl,
    Lines {
        color: bool,
        /// Added to the start line (see [`with_start_note`]).
        start_note: Option<String>,
    },
    None,
}

/// The start line with `note` after it: what the run was given beyond its
/// flags, e.g. the provider an API key chose.
pub fn with_start_note(line: String, event: &Event, note: Option<&str>) -> String {
    match (note, &event.kind) {
        (Some(n), EventKind::Start { .. }) => format!("{line} · {}", esc(n)),
        _ => line,
    }
}

/// A warning as one text: `path: message`, or the message alone.
pub fn warning_text(message: &str, path: Option<&str>) -> String {
    match path {
        Some(p) => format!("{p}: {message}"),
        None => message.to_string(),
    }
}

pub fn show(mode: &Mode, event: &Event) {
    let text = match mode {
        Mode::Jsonl => event.to_json().to_string(),
        Mode::Lines { .. } if !shown_as_line(event) => return,
        Mode::Lines { color, start_note } => {
            with_start_note(line(event, *color), event, start_note.as_deref())
        }
        // A warning is said on stderr whatever the events mode (contract
        // §0): with events off, as a `dsh: warning:` line.
        Mode::None => match &event.kind {
            EventKind::Warning { message, path } => format!(
                "dsh: warning: {}",
                esc(&warning_text(message, path.as_deref()))
            ),
            _ => return,
        },
    };
    // One write per line: stderr is unbuffered, and `writeln!` would make
    // two system calls of every event (the text, then the newline).
    let mut text = text;
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
