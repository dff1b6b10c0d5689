//! The script's narration — `phase()`, `warn()`, `log()` — as events,
//! bounded on the host side rather than trusting the worker's budget: a
//! hostile worker cannot grow the event history without limit.

use super::Supervisor;
use crate::events::EventKind;

/// Phase events kept per run; later `phase()` calls still set the phase in
/// the worker but emit nothing.
const MAX_PHASE_EVENTS: u64 = 10_000;
/// Distinct warnings a run may emit; later ones are dropped.
const MAX_WARNINGS: usize = 1000;
/// Room above `logBytes` for the worker's truncation marker line.
const LOG_MARKER_SLACK: u64 = 1024;

/// Narration counted on the host side.
#[derive(Default)]
pub(super) struct Narration {
    phases: u64,
    log_bytes: u64,
    /// The distinct (message, path) warnings emitted so far.
    warnings: std::collections::HashSet<(String, Option<String>)>,
}

impl Supervisor {
    /// `phase()`: a `workflow/phase` event, up to [`MAX_PHASE_EVENTS`].
    pub(super) fn on_phase(&mut self, title: &str, workflow: Option<&str>) {
        // The host bounds narration itself rather than trusting the
        // worker's budget: a hostile worker cannot grow the event
        // history without limit.
        self.narration.phases += 1;
        if !self.phase.is_cancelling() && self.narration.phases <= MAX_PHASE_EVENTS {
            self.hub.emit(EventKind::Phase {
                title: crate::events::shown_label(title),
                workflow: workflow.map(crate::events::shown_label),
            });
        }
    }

    /// A warning: a `workflow/warning` event, once per distinct warning.
    pub(super) fn on_warning(&mut self, message: &str, path: Option<&str>) {
        // Bounded on the host side too: distinct warnings only, at
        // most MAX_WARNINGS of them, each cut like a label.
        let message = crate::events::shown(message, crate::events::MAX_REASON_CHARS);
        let path = path.map(|p| crate::events::shown(p, crate::events::MAX_REASON_CHARS));
        if !self.phase.is_cancelling()
            && self.narration.warnings.len() < MAX_WARNINGS
            && self
                .narration
                .warnings
                .insert((message.clone(), path.clone()))
        {
            self.hub.emit(EventKind::Warning { message, path });
        }
    }

    /// `log()`: a `workflow/log` event, within the run's `logBytes`.
    pub(super) fn on_log(&mut self, message: String, workflow: Option<&str>) {
        // Counted like the worker counts: newlines are free.
        self.narration.log_bytes += message.bytes().filter(|b| *b != b'\n').count() as u64;
        let allowed = self.limits.log_bytes + LOG_MARKER_SLACK;
        if !self.phase.is_cancelling() && self.narration.log_bytes <= allowed {
            self.hub.emit(EventKind::Log {
                message,
                workflow: workflow.map(crate::events::shown_label),
            });
        }
    }
}
