//! The live view of a run on a terminal, in the style of cargo and
//! nextest: finished agents, logs and phases scroll above a status area
//! that is redrawn in place — the run's name and elapsed time; agents
//! done, running, queued (waiting for a slot) and failed; tokens so far,
//! running agents' included (output tokens against `--budget`, which
//! counts those); one line per phase; one line per running agent (label, elapsed, latest activity), the
//! longest-running first, collapsed to "+N more" when the terminal is
//! short. At the end the status area is cleared and a summary is printed.
//!
//! The scrolled lines are plain mode's lines ([`progress::line`]), except
//! that an agent's start is shown in the status area instead, and
//! activity only there.
//!
//! The drawing (cursor movement, clearing, the refresh rate) is
//! `indicatif`'s; this module only decides what the lines say. Every
//! script-controlled string goes through [`crate::terminal::line`] first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dsh_orchestrator::events::{Event, EventKind};
use dsh_orchestrator::{Activity, AgentOutcomeKind, RunResult, Usage};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::progress;
use crate::terminal::line as esc;

mod summary;
mod words;

use words::{activity_text, count, cut, gauge, secs, tokens};

/// How often the status area may be redrawn.
const REDRAW_HZ: u8 = 12;
/// How often the lines that came meanwhile are printed above the status
/// area, in one write (printing each as it comes would redraw the area
/// once per event: a fan-out of hundreds would pay for it).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Longest label shown in a status line.
const LABEL_CHARS: usize = 32;
/// Longest activity text shown in a status line.
const ACTIVITY_CHARS: usize = 60;
/// How many slowest agents the summary lists.
const SLOWEST: usize = 3;

/// One running agent.
struct Running {
    label: String,
    phase: Option<String>,
    since: Instant,
    activity: String,
    /// Its tokens so far, from its latest `Tokens` activity (a running
    /// total): counted in the header while it runs, replaced by its
    /// `agent-end` usage when it ends.
    usage: Usage,
}

/// One phase's counts.
#[derive(Default)]
struct PhaseTally {
    started: u64,
    /// Calls of the phase waiting for a concurrency slot now.
    queued: u64,
    done: u64,
    failed: u64,
    cancelled: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    input: u64,
    output: u64,
}

/// A finished agent, for the summary.
struct Ended {
    label: String,
    took: Duration,
}

/// A failed agent, for the summary.
struct Failure {
    seq: u64,
    label: String,
    reason: Option<String>,
}

/// The live view of one run.
pub struct Live {
    bar: ProgressBar,
    /// The terminal's settings before the view turned off `ECHOCTL`,
    /// restored when it ends.
    saved: Option<nix::sys::termios::Termios>,
    color: bool,
    started: Instant,
    name: String,
    budget: Option<u64>,
    running: BTreeMap<u64, Running>,
    /// Calls waiting for a slot (`workflow/agent-queued`), by seq: their
    /// phase.
    queued: BTreeMap<u64, Option<String>>,
    /// Phases in the order they were first seen.
    phases: Vec<(String, PhaseTally)>,
    done: u64,
    failed: u64,
    cancelled: u64,
    input: u64,
    output: u64,
    ended: Vec<Ended>,
    /// The agents that failed, in the order they ended, with their
    /// reasons: listed by the summary (as cargo-nextest lists failures).
    failures: Vec<Failure>,
    /// Lines to print above the status area at the next flush.
    pending: Vec<String>,
    start_note: Option<String>,
}

impl Live {
    /// A live view on stderr; `budget` is the run's token budget,
    /// `start_note` what the start line adds ([`progress::with_start_note`]).
    pub fn new(color: bool, budget: Option<u64>, start_note: Option<String>) -> Live {
        let bar =
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(REDRAW_HZ));
        bar.set_style(
            ProgressStyle::with_template("{msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        Live {
            bar,
            saved: quiet_ctrl_echo(),
            color,
            started: Instant::now(),
            name: String::new(),
            budget,
            running: BTreeMap::new(),
            queued: BTreeMap::new(),
            phases: Vec::new(),
            done: 0,
            failed: 0,
            cancelled: 0,
            input: 0,
            output: 0,
            ended: Vec::new(),
            failures: Vec::new(),
            pending: Vec::new(),
            start_note,
        }
    }

    /// Takes one event: scrolls its line above the status area (as plain
    /// mode would print it) and updates the status.
    pub fn event(&mut self, ev: &Event) {
        let now = Instant::now();
        match &ev.kind {
            EventKind::Start { meta } => self.name = meta.name.clone(),
            EventKind::AgentStart {
                seq, label, phase, ..
            } => {
                self.agent_started(*seq, label, phase, now);
                // A running agent has its line in the status area; only
                // its end scrolls.
                return;
            }
            EventKind::AgentQueued {
                seq,
                phase,
                waiting,
                ..
            } => {
                self.agent_queued(*seq, phase, *waiting);
                return;
            }
            EventKind::AgentActivity { seq, activity, .. } => {
                if let Some(r) = self.running.get_mut(seq) {
                    r.activity = activity_text(activity);
                    if let Activity::Tokens { usage } = activity {
                        r.usage = *usage;
                    }
                }
                // Activity is shown in the status area (at the next
                // tick), not scrolled.
                return;
            }
            EventKind::AgentEnd {
                seq,
                label,
                outcome,
                usage,
                reason,
                ..
            } => self.agent_ended(*seq, label, *outcome, *usage, reason, now),
            _ => {}
        }
        self.pending.push(progress::with_start_note(
            progress::line(ev, self.color),
            ev,
            self.start_note.as_deref(),
        ));
        if matches!(ev.kind, EventKind::End { .. }) {
            self.flush();
        }
    }

    /// An agent started: its line in the status area, its phase's count.
    fn agent_started(&mut self, seq: u64, label: &str, phase: &Option<String>, now: Instant) {
        self.running.insert(
            seq,
            Running {
                label: label.to_owned(),
                phase: phase.clone(),
                since: now,
                activity: "started".into(),
                usage: Usage::default(),
            },
        );
        let p = self.phase(phase.as_deref());
        p.started += 1;
        p.first.get_or_insert(now);
    }

    /// A call waits for a slot (`waiting`), or stops waiting.
    fn agent_queued(&mut self, seq: u64, phase: &Option<String>, waiting: bool) {
        // Counted in the header and in its phase's total while it
        // waits; it leaves with `waiting: false` (its start is
        // next, or it never starts).
        if waiting {
            if self.queued.insert(seq, phase.clone()).is_none() {
                self.phase(phase.as_deref()).queued += 1;
            }
        } else if let Some(phase) = self.queued.remove(&seq) {
            let p = self.phase(phase.as_deref());
            p.queued = p.queued.saturating_sub(1);
        }
    }

    /// An agent ended: the run's and its phase's counts and tokens, a
    /// failure kept for the summary, its time for the slowest list.
    fn agent_ended(
        &mut self,
        seq: u64,
        label: &str,
        outcome: AgentOutcomeKind,
        usage: Option<Usage>,
        reason: &Option<String>,
        now: Instant,
    ) {
        let r = self.running.remove(&seq);
        if outcome == AgentOutcomeKind::Failed {
            self.failures.push(Failure {
                seq,
                label: label.to_owned(),
                reason: reason.clone(),
            });
        }
        match outcome {
            AgentOutcomeKind::Completed => self.done += 1,
            AgentOutcomeKind::Failed => self.failed += 1,
            _ => self.cancelled += 1,
        }
        let (i, o) = usage.map_or((0, 0), |u| (u.input, u.output));
        self.input += i;
        self.output += o;
        if let Some(r) = r {
            let p = self.phase(r.phase.as_deref());
            match outcome {
                AgentOutcomeKind::Completed => p.done += 1,
                AgentOutcomeKind::Failed => p.failed += 1,
                _ => p.cancelled += 1,
            }
            p.last = Some(now);
            p.input += i;
            p.output += o;
            self.ended.push(Ended {
                label: r.label,
                took: now.duration_since(r.since),
            });
        }
    }

    /// Prints the lines that came since the last tick and redraws the
    /// status area (the elapsed times move on).
    pub fn tick(&mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let lines = std::mem::take(&mut self.pending).join("\n");
            self.bar.println(lines);
        }
        self.redraw();
    }

    /// Clears the status area and prints the summary.
    pub fn finish(&mut self, result: &RunResult, run_id: Option<&str>) {
        self.flush();
        self.bar.finish_and_clear();
        self.restore();
        eprint!("{}", self.summary(result, run_id));
    }

    fn restore(&mut self) {
        if let Some(t) = self.saved.take() {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stderr(),
                nix::sys::termios::SetArg::TCSANOW,
                &t,
            );
        }
    }

    fn phase(&mut self, title: Option<&str>) -> &mut PhaseTally {
        let title = title.unwrap_or("(no phase)");
        let i = match self.phases.iter().position(|(t, _)| t == title) {
            Some(i) => i,
            None => {
                self.phases.push((title.to_string(), PhaseTally::default()));
                self.phases.len() - 1
            }
        };
        &mut self.phases[i].1
    }

    fn redraw(&mut self) {
        let rows = console_rows();
        self.bar.set_message(self.status(rows));
    }

    /// The status area's lines, fitted to a terminal of `rows` rows.
    fn status(&self, rows: usize) -> String {
        let (bold, dim, yellow, reset) = if self.color {
            ("\x1b[1m", "\x1b[2m", "\x1b[33m", "\x1b[0m")
        } else {
            ("", "", "", "")
        };
        let now = Instant::now();
        let mut lines = Vec::new();
        // Ended agents' usage plus what the running ones have streamed.
        let (input, output) = self
            .running
            .values()
            .fold((self.input, self.output), |(i, o), r| {
                (i + r.usage.input, o + r.usage.output)
            });
        let tokens = match self.budget {
            // `--budget` counts output tokens only (the worker adds each
            // settled call's `usage.output`): the header shows that sum
            // against it, not input and output together.
            Some(b) => format!(" · {} of {} output tokens", count(output), count(b)),
            None if input + output > 0 => {
                format!(" · {}", tokens(input + output))
            }
            None => String::new(),
        };
        lines.push(format!(
            "{bold}{}{reset} {dim}{}{reset} · {} done · {} running · {} queued · {} failed{}{tokens}",
            esc(if self.name.is_empty() {
                "run"
            } else {
                &self.name
            }),
            secs(now.duration_since(self.started)),
            self.done,
            self.running.len(),
            self.queued.len(),
            self.failed,
            if self.cancelled > 0 {
                format!(" · {} cancelled", self.cancelled)
            } else {
                String::new()
            },
        ));
        for (title, p) in &self.phases {
            let finished = p.done + p.failed + p.cancelled;
            // The phase's calls: started, and waiting for a slot.
            let total = p.started + p.queued;
            lines.push(format!(
                "  {:<20} {} {finished}/{total}{}{}",
                cut(&esc(title), 20),
                gauge(finished, total, 12),
                if p.queued > 0 {
                    format!(" ({} queued)", p.queued)
                } else {
                    String::new()
                },
                if p.failed > 0 {
                    format!(" ({} failed)", p.failed)
                } else {
                    String::new()
                }
            ));
        }
        // The longest-running first; as many as fit in half the screen.
        let mut running: Vec<&Running> = self.running.values().collect();
        running.sort_by_key(|r| r.since);
        let room = (rows / 2).saturating_sub(lines.len()).max(1);
        let shown = if running.len() > room {
            room.saturating_sub(1).max(1)
        } else {
            running.len()
        };
        for r in running.iter().take(shown) {
            lines.push(format!(
                "  {yellow}▸{reset} {:<w$} {:>6}  {dim}{}{reset}",
                cut(&esc(&r.label), LABEL_CHARS),
                secs(now.duration_since(r.since)),
                cut(&esc(&r.activity), ACTIVITY_CHARS),
                w = LABEL_CHARS
            ));
        }
        if running.len() > shown {
            lines.push(format!("  {dim}+{} more{reset}", running.len() - shown));
        }
        lines.join("\n")
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        self.restore();
    }
}

/// Turns off the terminal's echo of control characters (`^C` on Ctrl-C):
/// the echo lands inside the status area, behind the drawing's back, and
/// would leave a stale status line on the screen. Returns the settings to
/// restore; `None` when stderr is not a terminal that allows it.
fn quiet_ctrl_echo() -> Option<nix::sys::termios::Termios> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let saved = tcgetattr(std::io::stderr()).ok()?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHOCTL);
    tcsetattr(std::io::stderr(), SetArg::TCSANOW, &quiet).ok()?;
    Some(saved)
}

/// The terminal's rows (24 when unknown).
fn console_rows() -> usize {
    let (rows, _) = console::Term::stderr().size();
    usize::from(rows).max(4)
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dsh_orchestrator::{ChildOrigin, ErrorCode, Event, Meta, RunError, StopReason};

    use super::*;

    fn ev(kind: EventKind) -> Event {
        Event {
            run_id: Arc::from("run-test"),
            t: 0,
            kind,
        }
    }

    fn start(seq: u64, phase: &str) -> Event {
        ev(EventKind::AgentStart {
            seq,
            label: format!("a{seq}"),
            phase: Some(phase.into()),
            child_id: format!("c-{seq}"),
            origin: ChildOrigin::Live,
            workflow: None,
        })
    }

    fn end(seq: u64, phase: &str, outcome: AgentOutcomeKind, usage: Option<Usage>) -> Event {
        ev(EventKind::AgentEnd {
            seq,
            label: format!("a{seq}"),
            phase: Some(phase.into()),
            child_id: format!("c-{seq}"),
            outcome,
            origin: ChildOrigin::Live,
            usage,
            reason: None,
            worktree: None,
            workflow: None,
        })
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            ..Usage::default()
        }
    }

    fn live(budget: Option<u64>) -> Live {
        let mut l = Live::new(false, budget, None);
        l.bar.set_draw_target(ProgressDrawTarget::hidden());
        l.event(&ev(EventKind::Start {
            meta: Meta::default_for(std::path::Path::new("t.ts")),
        }));
        l
    }

    fn result(stop: StopReason, agents_started: u64) -> RunResult {
        RunResult {
            value: serde_json::Value::Null,
            stop_reason: stop,
            error: (stop != StopReason::Completed)
                .then(|| RunError::new(ErrorCode::Cancelled, "the run was cancelled")),
            agents_started,
            log_bytes_dropped: 0,
            sandbox: None,
            usage: None,
        }
    }

    /// "1 agents", "1 tokens": every count in the summary agrees with its
    /// noun.
    #[test]
    fn the_summary_says_one_agent_and_one_token() {
        let mut l = live(None);
        l.event(&start(1, "Work"));
        l.event(&end(
            1,
            "Work",
            AgentOutcomeKind::Completed,
            Some(usage(1, 0)),
        ));
        let summary = l.summary(&result(StopReason::Completed, 1), None);
        assert!(
            summary.contains(": 1 agent, 0 failed, 1 token in / 0 out"),
            "{summary}"
        );
        assert!(summary.contains("   1 agent     0 failed"), "{summary}");
        assert!(summary.contains("1 token\n"), "{summary}");
        assert!(!summary.contains("1 agents"), "{summary}");
    }

    /// A run cancelled while a call waited for a slot: its end line counts
    /// the call (agentsStarted), and so does the summary.
    #[test]
    fn a_cancelled_run_counts_its_agents_as_its_end_line_does() {
        let mut l = live(None);
        l.event(&start(1, "Work"));
        l.event(&end(1, "Work", AgentOutcomeKind::Completed, None));
        l.event(&start(2, "Work"));
        l.event(&end(2, "Work", AgentOutcomeKind::Cancelled, None));
        let r = result(StopReason::Cancelled, 3);
        let end_line = progress::line(
            &ev(EventKind::End {
                stop_reason: r.stop_reason,
                error: r.error.clone(),
                agents_started: r.agents_started,
                log_bytes_dropped: 0,
            }),
            false,
        );
        assert!(end_line.ends_with("(3 agents)"), "{end_line}");
        let summary = l.summary(&r, None);
        assert!(
            summary.contains("cancelled in ")
                && summary.contains(": 3 agents (1 never started), 0 failed"),
            "{summary}"
        );
    }

    fn queued(seq: u64, phase: &str, waiting: bool) -> Event {
        ev(EventKind::AgentQueued {
            seq,
            label: format!("a{seq}"),
            phase: Some(phase.into()),
            waiting,
            workflow: None,
        })
    }

    /// Calls behind a full concurrency limit count in the header
    /// (`queued`) and in their phase's total until they leave the queue.
    #[test]
    fn calls_waiting_for_a_slot_are_counted() {
        let mut l = live(None);
        l.event(&start(1, "Work"));
        l.event(&queued(2, "Work", true));
        l.event(&queued(3, "Work", true));
        let status = l.status(40);
        assert!(
            status.contains("0 done · 1 running · 2 queued · 0 failed"),
            "{status}"
        );
        assert!(status.contains(" 0/3 (2 queued)"), "{status}");
        l.event(&end(1, "Work", AgentOutcomeKind::Completed, None));
        l.event(&queued(2, "Work", false));
        l.event(&start(2, "Work"));
        let status = l.status(40);
        assert!(
            status.contains("1 done · 1 running · 1 queued · 0 failed"),
            "{status}"
        );
        assert!(status.contains(" 1/3 (1 queued)"), "{status}");
        // A call that leaves the queue and never starts (refused, or the
        // run settled) no longer counts as waiting.
        l.event(&queued(3, "Work", false));
        let status = l.status(40);
        assert!(status.contains("· 0 queued ·"), "{status}");
        assert!(status.contains(" 1/2"), "{status}");
    }

    /// `--budget` counts output tokens; the header showed input and output
    /// together against it, and nothing of the agents still running.
    #[test]
    fn tokens_against_the_budget_are_output_tokens_counted_as_they_stream() {
        let mut l = live(Some(1000));
        l.event(&start(1, "Work"));
        l.event(&end(
            1,
            "Work",
            AgentOutcomeKind::Completed,
            Some(usage(900, 100)),
        ));
        l.event(&start(2, "Work"));
        l.event(&ev(EventKind::AgentActivity {
            seq: 2,
            label: "a2".into(),
            activity: Activity::Tokens {
                usage: usage(50, 20),
            },
            workflow: None,
        }));
        let status = l.status(40);
        assert!(status.contains("120 of 1.0k output tokens"), "{status}");
        // Without a budget: everything so far, the running agent included.
        let mut l = live(None);
        l.event(&start(1, "Work"));
        l.event(&ev(EventKind::AgentActivity {
            seq: 1,
            label: "a1".into(),
            activity: Activity::Tokens { usage: usage(1, 0) },
            workflow: None,
        }));
        let status = l.status(40);
        assert!(status.contains(" · 1 token"), "{status}");
    }

    #[test]
    fn numbers_and_bars() {
        assert_eq!(count(999), "999");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(secs(Duration::from_millis(1500)), "1.5s");
        assert_eq!(secs(Duration::from_secs(245)), "4m05s");
        assert_eq!(gauge(1, 2, 4), "██░░");
        assert_eq!(gauge(0, 0, 3), "░░░");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
