//! What the live view prints when the run is over: the end line, one line
//! per phase, the slowest agents, the failures, how to show or resume.

use dsh_orchestrator::RunResult;

use super::words::{count, cut, noun, plural, secs, tokens};
use super::{Ended, LABEL_CHARS, Live, SLOWEST, esc};
use crate::progress;

impl Live {
    /// The summary printed when the run settled.
    pub(super) fn summary(&self, result: &RunResult, run_id: Option<&str>) -> String {
        let (bold, red, reset) = if self.color {
            ("\x1b[1m", "\x1b[31m", "\x1b[0m")
        } else {
            ("", "", "")
        };
        // The count the end line prints (`workflow/end`'s agentsStarted:
        // every call admitted), so a cancelled run's end line and summary
        // agree; calls that never got an agent-start (cancelled while they
        // waited for a slot, refused at start) are said apart.
        let ended = self.done + self.failed + self.cancelled;
        let agents = result.agents_started.max(ended);
        let unstarted = if agents > ended {
            format!(" ({} never started)", agents - ended)
        } else {
            String::new()
        };
        let mut out = format!(
            "\n{bold}{}{reset} {} in {}: {}{unstarted}, {} failed, {} in / {} out\n",
            esc(if self.name.is_empty() {
                "run"
            } else {
                &self.name
            }),
            result.stop_reason.as_str(),
            secs(self.started.elapsed()),
            plural(agents, "agent"),
            self.failed,
            tokens(self.input),
            count(self.output),
        );
        for (title, p) in &self.phases {
            let wall = match (p.first, p.last) {
                (Some(a), Some(b)) => secs(b.duration_since(a)),
                _ => "-".into(),
            };
            out.push_str(&format!(
                "  {:<20} {:>4} {:<6} {:>4} failed {:>8} {:>9} {}\n",
                cut(&esc(title), 20),
                p.started,
                noun(p.started, "agent"),
                p.failed,
                wall,
                count(p.input + p.output),
                noun(p.input + p.output, "token"),
            ));
        }
        let mut slow: Vec<&Ended> = self.ended.iter().collect();
        slow.sort_by_key(|e| std::cmp::Reverse(e.took));
        if !slow.is_empty() {
            out.push_str("  slowest:");
            for e in slow.iter().take(SLOWEST) {
                out.push_str(&format!(
                    " {} {}",
                    cut(&esc(&e.label), LABEL_CHARS),
                    secs(e.took)
                ));
            }
            out.push('\n');
        }
        for f in &self.failures {
            let why = f
                .reason
                .as_deref()
                .map(|r| format!(" — {}", esc(&progress::reason_line(r))))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {red}FAILED{reset} #{} {}{why}\n",
                f.seq,
                cut(&esc(&f.label), LABEL_CHARS)
            ));
        }
        if let Some(id) = run_id {
            out.push_str(&format!("  show:   dsh workflow show {id}\n"));
            out.push_str(&format!("  resume: dsh workflow resume {id}\n"));
        }
        out
    }
}
