//! How the live view writes numbers and words: seconds, counts, tokens,
//! plurals, the gauge, activity text, cuts to a width.

use std::time::Duration;

use dsh_orchestrator::Activity;

/// An activity as a few words for a status line.
pub(super) fn activity_text(a: &Activity) -> String {
    match a {
        Activity::Turn { turn } => format!("turn {turn}"),
        Activity::Tokens { usage } => tokens(usage.input + usage.output),
        Activity::ToolCall { tool, detail } => format!("{tool} {detail}"),
        Activity::ToolEnd { tool, status, .. } if status != "ok" => format!("{tool} {status}"),
        Activity::ToolEnd { tool, .. } => format!("{tool} done"),
        Activity::Retry { attempt, .. } => format!("retrying (attempt {attempt})"),
        Activity::Held { .. } => "waiting for a cached prompt".into(),
        Activity::Released { .. } => "queued".into(),
        Activity::Concurrency { limit, .. } => format!("provider concurrency {limit}"),
    }
}

/// `12.3s`, `4m05s`.
pub(super) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// `980`, `12.3k`, `4.5M`.
pub(super) fn count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// `word` or `words` for `n` of them (`word` + "s": every noun the view
/// counts is regular).
pub(super) fn noun(n: u64, word: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}

/// `1 agent`, `3 agents`.
pub(super) fn plural(n: u64, word: &str) -> String {
    format!("{n} {}", noun(n, word))
}

/// `1 token`, `12.3k tokens`.
pub(super) fn tokens(n: u64) -> String {
    format!("{} {}", count(n), noun(n, "token"))
}

/// A bar of `width` cells, `done` of `total` filled.
pub(super) fn gauge(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else {
        ((done as f64 / total as f64) * width as f64).round() as usize
    }
    .min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

/// `s` cut to `max` characters, with `…` when longer.
pub(super) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}
