//! `dsh workflow runs | show | resume`: thin callers of the library's
//! durable runs (`dsh_orchestrator::journal`), which hold the run
//! directory, the journal and the replay (docs/fixtures.md, "Durable
//! runs").

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use dsh_orchestrator::journal::summary::{self, RunSummary};
use dsh_orchestrator::journal::{JournalError, ResumeError, ResumeOptions, StoredRun, rundir};
use serde_json::Value;

use crate::error::{CliError, exit};
use crate::execute::{execute, open_events_file};
use crate::flags::{ResumeArgs, RunsArgs, ShowArgs};
use crate::request::{self, runs_root};
use crate::terminal::line as esc;

/// `dsh workflow resume`.
pub async fn resume(a: ResumeArgs) -> Result<i32, CliError> {
    let root = runs_root(a.runs_dir.as_deref());
    let stored = StoredRun::open(&root, &a.run).map_err(|e| CliError::usage(e.to_string()))?;
    let options = ResumeOptions {
        allow_changed: a.allow_changed,
        timeout: a.timeout,
        record: a.record.clone(),
        journal_limit: a.journal_limit,
    };
    let (req, durable) = stored
        .resume(&options, |spec| {
            request::resume_provider(a.fixture.as_deref(), a.config.as_deref(), spec)
        })
        .map_err(|e| match e {
            ResumeError::Run(message) => CliError::usage(message),
            ResumeError::Provider(e) => e,
        })?;
    // A torn journal line is news before anything else can fail.
    for w in durable.take_warnings() {
        crate::error::warn(&w.to_string());
    }
    let catalog = request::catalog_for(a.config.as_deref())?;
    let req = req.with_worker(request::worker()?).with_catalog(catalog);
    let events_file = open_events_file(&a.show)?;
    Ok(execute(req, durable, &a.show, events_file).await)
}

/// `2026-11-30 04:38:12Z` for milliseconds since the epoch (UTC); the raw
/// number for a time humantime cannot show (after the year 9999: a
/// damaged or edited `run.json` must not take `runs` down).
fn utc(ms: u64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    match UNIX_EPOCH.checked_add(Duration::from_millis(ms)) {
        Some(at) if write!(out, "{}", humantime::format_rfc3339_seconds(at)).is_ok() => {
            out.replacen('T', " ", 1)
        }
        _ => format!("{ms}ms"),
    }
}

fn elapsed(ms: Option<u64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) if ms < 10_000 => format!("{ms}ms"),
        Some(ms) => format!("{}s", ms / 1000),
    }
}

/// `dsh workflow runs`.
pub fn runs(a: &RunsArgs) -> Result<i32, CliError> {
    let root = runs_root(a.runs_dir.as_deref());
    let all = match summary::list(&root) {
        Ok(Some(all)) => all,
        Ok(None) => {
            println!("no runs under {}", root.display());
            return Ok(exit::COMPLETED);
        }
        Err(JournalError::Io { source, .. }) => {
            return Err(CliError::usage(format!(
                "{}: cannot list: {source}",
                root.display()
            )));
        }
        Err(e) => return Err(CliError::usage(e.to_string())),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<34} {:<20} {:<12} {:<20} {:>13} {:>8}",
        "ID", "NAME", "STATUS", "STARTED", "DONE/FAIL/REP", "ELAPSED"
    );
    for s in all.iter().take(a.limit) {
        let _ = writeln!(
            out,
            "{:<34} {:<20} {:<12} {:<20} {:>13} {:>8}",
            esc(&s.info.id),
            esc(&s.info.name),
            esc(&s.status.to_string()),
            utc(s.info.started_at),
            format!("{}/{}/{}", s.done, s.failed, s.replayed),
            elapsed(s.elapsed_ms)
        );
    }
    Ok(exit::COMPLETED)
}

/// `dsh workflow show`.
pub fn show(a: &ShowArgs) -> Result<i32, CliError> {
    let root = runs_root(a.runs_dir.as_deref());
    let s: RunSummary = rundir::resolve(&root, &a.run)
        .and_then(|p| summary::summarize(&p))
        .map_err(|e| CliError::usage(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "run      {}", esc(&s.info.id));
    let _ = writeln!(out, "name     {}", esc(&s.info.name));
    let _ = writeln!(out, "script   {}", esc(&s.info.script));
    let _ = writeln!(out, "status   {}", esc(&s.status.to_string()));
    let _ = writeln!(out, "started  {}", utc(s.info.started_at));
    let _ = writeln!(out, "elapsed  {}", elapsed(s.elapsed_ms));
    let _ = writeln!(
        out,
        "agents   {} done, {} failed, {} replayed",
        s.done, s.failed, s.replayed
    );
    // A replayed call's outcome column says `replayed`: its answer was
    // given (and counted) in an earlier attempt.
    for c in &s.calls {
        // An answer the script got but the journal lost reads `running` in
        // the journal; say what happened instead.
        let state = if s.unjournaled.contains(&c.seq) {
            "unjournaled"
        } else {
            c.state.as_str()
        };
        let _ = writeln!(out, "  #{:<4} {:<12} {}", c.seq, state, esc(&c.label));
    }
    for seq in &s.unjournaled {
        if !s.calls.iter().any(|c| c.seq == *seq) {
            let _ = writeln!(
                out,
                "  #{seq:<4} {:<12} (not in the journal)",
                "unjournaled"
            );
        }
    }
    if !s.unjournaled.is_empty() {
        let seqs: Vec<String> = s.unjournaled.iter().map(|n| format!("#{n}")).collect();
        let _ = writeln!(
            out,
            "not journaled: {} (the script got these answers, the journal could not keep them; a resume asks them again)",
            seqs.join(", ")
        );
    }
    let result = s
        .result
        .as_ref()
        .map(|r| r["result"].clone())
        .unwrap_or(Value::Null);
    let _ = writeln!(
        out,
        "result\n{}",
        serde_json::to_string_pretty(&result).unwrap_or_else(|_| "null".into())
    );
    Ok(exit::COMPLETED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_the_epoch_and_a_leap_day() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(utc(1_796_013_512_000), "2026-11-30 04:38:32Z");
    }

    #[test]
    fn utc_of_a_time_past_the_year_9999_is_the_number() {
        assert_eq!(utc(253_402_300_800_000), "253402300800000ms");
        assert_eq!(utc(u64::MAX), format!("{}ms", u64::MAX));
    }
}
