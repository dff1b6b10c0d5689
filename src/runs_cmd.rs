//! `dsh workflow runs | show | resume`: thin callers of the library's
//! durable runs (`dsh_orchestrator::journal`), which hold the run
//! directory, the journal and the replay (docs/fixtures.md, "Durable
//! runs"). `show` also draws the agents' text timeline and prints the
//! `--json` view that `report` shares.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use dsh_orchestrator::CallOutcome;
use dsh_orchestrator::journal::summary::{self, CallSummary, RunSummary, cut};
use dsh_orchestrator::journal::{
    JournalError, Replay, ResumeError, ResumeOptions, StoredRun, resume_stored, rundir,
};
use serde_json::{Value, json};

use crate::error::{CliError, exit};
use crate::execute::{execute, open_events_file};
use crate::flags::{ResumeArgs, RunsArgs, ShowArgs};
use crate::request::{self, runs_root};
use crate::terminal::line as esc;

/// `dsh workflow resume`.
pub async fn resume(a: ResumeArgs) -> Result<i32, CliError> {
    let options = ResumeOptions {
        allow_changed: a.allow_changed,
        timeout: a.timeout,
        record: a.record.clone(),
        journal_limit: a.journal_limit,
        replay: if a.retry_failed {
            Replay::Completed
        } else {
            Replay::Answers
        },
    };
    let answering_for =
        |spec: &_| request::resume_provider(a.fixture.as_deref(), a.config.as_deref(), spec);
    let store = match a
        .store
        .as_deref()
        .or(std::env::var("DSH_STORE").ok().as_deref())
    {
        // The configuration is read only when neither names a store: a
        // resume of a run directory never needed it to be readable.
        Some(_) => request::store_url(
            a.store.as_deref(),
            &dsh_orchestrator::config::Config::builtin(),
        )?,
        None => request::load_config(a.config.as_deref())
            .ok()
            .map(|c| request::store_url(None, &c))
            .transpose()?
            .flatten(),
    };
    let mut pools = None;
    let resumed = match &store {
        Some(url) => {
            let store = Arc::new(request::open_store(url).await?);
            pools = Some(dsh_store::pool::Pools::start(store.clone()));
            let id = store
                .resolve(&a.run)
                .await
                .map_err(|e| CliError::usage(e.to_string()))?;
            resume_stored(store, &id, &options, answering_for).await
        }
        None => {
            let root = runs_root(a.runs_dir.as_deref());
            let stored =
                StoredRun::open(&root, &a.run).map_err(|e| CliError::usage(e.to_string()))?;
            stored.resume(&options, answering_for)
        }
    };
    let (mut req, durable, mut answering) = resumed.map_err(|e| match e {
        ResumeError::Run(message) => CliError::usage(message),
        ResumeError::Provider(e) => e,
    })?;
    // In a store, the calls of pooled providers are asked of the fleet's
    // agent hosts, as the run's host asked them: a call one of them is
    // still answering is found, not started again.
    if let (Some(pools), Some(id)) = (&pools, &req.run_id) {
        let config = request::load_config(a.config.as_deref())?;
        answering = crate::fleet::pooled(answering, &config, pools, id)?;
    }
    // A torn journal line is news before anything else can fail.
    for w in durable.take_warnings() {
        crate::error::warn(&w.to_string());
    }
    req.provider = crate::stack::compose(answering, durable.layer());
    // `[telemetry]` of the configuration the run uses, if it can be read
    // (a resume of a run directory never needed it to be).
    let file = request::load_config(a.config.as_deref())
        .map(|c| c.telemetry)
        .unwrap_or_default();
    let telemetry = crate::telemetry::for_run(&mut req, "resumed".to_string(), &file);
    let catalog = request::catalog_for(a.config.as_deref())?;
    let req = req.with_worker(request::worker()?).with_catalog(catalog);
    let events_file = open_events_file(&a.show)?;
    Ok(execute(req, durable, &a.show, events_file, None, None, telemetry).await)
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
    // The configuration only says where a store is: one that cannot be
    // read does not stop a listing of run directories (said once).
    let config = match request::load_config(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) if a.config.is_none() => {
            crate::error::warn(&format!("{}; its [store] is not read", e.message));
            dsh_orchestrator::config::Config::builtin()
        }
        Err(e) => return Err(e),
    };
    if let Some(url) = request::store_url(a.store.as_deref(), &config)? {
        let rt = crate::runtime()?;
        return rt.block_on(stored_runs(&url, a.limit, a.json));
    }
    let root = runs_root(a.runs_dir.as_deref());
    let all = match summary::list(&root) {
        Ok(Some(all)) => all,
        Ok(None) if a.json => Vec::new(),
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
    print_runs(all.iter().take(a.limit), a.json);
    Ok(exit::COMPLETED)
}

/// One run of `runs --json`.
pub(crate) fn run_json(s: &RunSummary) -> Value {
    json!({
        "runId": s.info.id,
        "name": s.info.name,
        "status": s.status.to_string(),
        "heldBy": s.holder,
        "startedAt": s.info.started_at,
        "done": s.done,
        "failed": s.failed,
        "replayed": s.replayed,
        "elapsedMs": s.elapsed_ms,
    })
}

/// The `runs` table: one line per run, newest first (its warnings first);
/// with `json`, a JSON array of the same.
fn print_runs<'a>(all: impl Iterator<Item = &'a RunSummary> + Clone, json: bool) {
    for w in all.clone().flat_map(|s| &s.warnings) {
        crate::error::warn(w);
    }
    let mut out = std::io::stdout().lock();
    if json {
        let runs: Vec<Value> = all.map(run_json).collect();
        let _ = writeln!(out, "{}", Value::Array(runs));
        return;
    }
    let _ = writeln!(
        out,
        "{:<34} {:<20} {:<12} {:<20} {:>13} {:>8}",
        "ID", "NAME", "STATUS", "STARTED", "DONE/FAIL/REP", "ELAPSED"
    );
    for s in all {
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
}

/// `dsh workflow runs` of a store: the same table, from any machine.
async fn stored_runs(url: &dsh_store::StoreUrl, limit: usize, json: bool) -> Result<i32, CliError> {
    let store = request::open_store(url).await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let all = store
        .summaries(limit)
        .await
        .map_err(|e| CliError::usage(e.to_string()))?;
    if all.is_empty() && !json {
        println!("no runs in the store {url}");
        return Ok(exit::COMPLETED);
    }
    print_runs(all.iter(), json);
    Ok(exit::COMPLETED)
}

/// The summary `show` and `report` read: the run directory's, or with a
/// store (`--store`, `DSH_STORE`, `[store] url`) the store's run of that
/// exact id. `texts` as for `summarize_with_texts`.
pub(crate) fn summary_of(
    run: &str,
    runs_dir: Option<&std::path::Path>,
    store: Option<&str>,
    texts: Option<usize>,
) -> Result<RunSummary, CliError> {
    let config =
        request::load_config(None).unwrap_or_else(|_| dsh_orchestrator::config::Config::builtin());
    if let Some(url) = request::store_url(store, &config)? {
        let rt = crate::runtime()?;
        return rt.block_on(async {
            let store = request::open_store(&url).await?;
            let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
            let id = store.resolve(run).await.map_err(usage)?;
            store.summary(&id, texts).await.map_err(usage)
        });
    }
    let root = runs_root(runs_dir);
    let dir = rundir::resolve(&root, run).map_err(|e| CliError::usage(e.to_string()))?;
    match texts {
        None => summary::summarize(&dir),
        Some(max) => summary::summarize_with_texts(&dir, max),
    }
    .map_err(|e| CliError::usage(e.to_string()))
}

/// `dsh workflow show`.
pub fn show(a: &ShowArgs) -> Result<i32, CliError> {
    let s = summary_of(&a.run, a.runs_dir.as_deref(), a.store.as_deref(), None)?;
    for w in &s.warnings {
        crate::error::warn(w);
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        let text = serde_json::to_string_pretty(&show_json(&s)).unwrap_or_else(|_| "{}".into());
        let _ = writeln!(out, "{text}");
        return Ok(exit::COMPLETED);
    }
    let _ = writeln!(out, "run      {}", esc(&s.info.id));
    let _ = writeln!(out, "name     {}", esc(&s.info.name));
    let _ = writeln!(out, "script   {}", esc(&s.info.script));
    let _ = writeln!(out, "status   {}", esc(&s.status.to_string()));
    if let Some(holder) = &s.holder {
        let _ = writeln!(out, "held by  {}", esc(holder));
    }
    let _ = writeln!(out, "started  {}", utc(s.info.started_at));
    let _ = writeln!(out, "elapsed  {}", elapsed(s.elapsed_ms));
    let _ = writeln!(
        out,
        "agents   {} done, {} failed, {} replayed",
        s.done, s.failed, s.replayed
    );
    let (tin, tout) = tokens(&s.calls);
    let _ = writeln!(out, "tokens   {tin} in, {tout} out");
    let _ = writeln!(out, "cost     {}", dollars(cost(&s.calls)));
    if !s.calls.is_empty() {
        let _ = writeln!(
            out,
            "  {:<5} {:<12} {:<LABEL_COLS$} {:<PHASE_COLS$} {:>7} {:>7} {:>13} {:>9}  WORKTREE / REASON",
            "SEQ", "OUTCOME", "LABEL", "PHASE", "START", "DUR", "TOKENS IN/OUT", "COST",
        );
    }
    let origin = origin_of(&s);
    // A replayed call's outcome column says `replayed`: its answer was
    // given (and counted) in an earlier attempt.
    for c in &s.calls {
        let _ = writeln!(out, "{}", call_row(&s, c, origin).trim_end());
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
    if !s.calls.is_empty() {
        let _ = writeln!(out, "timeline");
        for l in timeline(&s, columns()) {
            let _ = writeln!(out, "{l}");
        }
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

/// One call's row of `show`'s table (trailing spaces not yet trimmed).
fn call_row(s: &RunSummary, c: &CallSummary, origin: u64) -> String {
    // An answer the script got but the journal lost reads `running` in
    // the journal; say what happened instead.
    // A replayed call says so here; how the attempt that answered it
    // ended, when not completed, leads its reason.
    let state = if s.unjournaled.contains(&c.seq) {
        "unjournaled"
    } else if c.replayed {
        "replayed"
    } else {
        c.word()
    };
    let tokens = c
        .usage
        .map_or_else(|| "-".to_string(), |u| format!("{}/{}", u.input, u.output));
    // The worktree and the reason come last and uncut in width: they
    // matter more than alignment, and the reason is already bounded.
    let mut tail = Vec::new();
    if let Some(w) = &c.worktree {
        tail.push(format!("worktree {}", esc(w)));
    }
    if let Some(id) = &c.session {
        tail.push(format!("session {}", esc(id)));
    }
    if let Some(r) = &c.reason {
        let r = esc(&one_line(&cut(r, REASON_CHARS))).into_owned();
        tail.push(if c.replayed {
            format!("{}: {r}", c.word())
        } else {
            r
        });
    }
    format!(
        "  #{:<4} {:<12} {:<LABEL_COLS$} {:<PHASE_COLS$} {:>7} {:>7} {:>13} {:>9}  {}",
        c.seq,
        state,
        cut(&esc(&c.label), LABEL_COLS - 1),
        cut(&esc(c.phase.as_deref().unwrap_or("-")), PHASE_COLS - 1),
        format!("+{}", duration(c.started_at.saturating_sub(origin))),
        c.duration_ms().map_or_else(|| "-".to_string(), duration),
        tokens,
        dollars(c.usage.and_then(|u| u.cost_usd)),
        tail.join("  ")
    )
}

/// `s` on one line: a reason may hold a program's stderr, and a table
/// row or a live line is one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Width of the LABEL column of `show`'s table (labels are cut to fit).
const LABEL_COLS: usize = 24;
/// Width of the PHASE column.
const PHASE_COLS: usize = 12;
/// Longest failure reason `show` prints; `--json` and `report` have more.
const REASON_CHARS: usize = 80;

/// The terminal's width for the timeline: `COLUMNS` when it is a sensible
/// number (a pipe has no width to ask for), else 80.
fn columns() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| (20..=1000).contains(c))
        .unwrap_or(80)
}

/// `350ms`, `1.2s`, `2m03s`.
pub(crate) fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// Input and output tokens summed over `calls`.
pub(crate) fn tokens(calls: &[CallSummary]) -> (u64, u64) {
    calls
        .iter()
        .filter_map(|c| c.usage)
        .fold((0, 0), |(i, o), u| {
            (i.saturating_add(u.input), o.saturating_add(u.output))
        })
}

/// What `calls` cost in US dollars, as their providers reported it;
/// `None` when none reported a cost.
pub(crate) fn cost(calls: &[CallSummary]) -> Option<f64> {
    calls
        .iter()
        .filter_map(|c| c.usage.and_then(|u| u.cost_usd))
        .fold(None, |t, c| Some(t.unwrap_or(0.0) + c))
}

/// A cost as `show` prints it: `$0.0123`, or `-` when unknown.
pub(crate) fn dollars(c: Option<f64>) -> String {
    c.map_or_else(|| "-".to_string(), |c| format!("${c:.4}"))
}

/// Where the time axis starts: the last attempt's start, else its first
/// call's (a journal without an `attempt` line).
pub(crate) fn origin_of(s: &RunSummary) -> u64 {
    let first = s.calls.iter().map(|c| c.started_at).min().unwrap_or(0);
    s.attempt_started_at.map_or(first, |a| a.min(first))
}

/// Where the time axis ends: the last call's end (or start), or the run's
/// end when it is later; never before `origin`.
pub(crate) fn end_of(s: &RunSummary, origin: u64) -> u64 {
    let ended = s.result.as_ref().and_then(|r| r["endedAt"].as_u64());
    s.calls
        .iter()
        .map(|c| c.settled_at.unwrap_or(c.started_at))
        .chain(ended.filter(|e| *e >= origin))
        .max()
        .unwrap_or(origin)
        .max(origin)
}

/// The calls grouped by phase, phases in order of their first call; calls
/// without a phase are grouped under `-`.
pub(crate) fn by_phase(calls: &[CallSummary]) -> Vec<(String, Vec<&CallSummary>)> {
    let mut groups: Vec<(String, Vec<&CallSummary>)> = Vec::new();
    for c in calls {
        let name = c.phase.clone().unwrap_or_else(|| "-".into());
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(c),
            None => groups.push((name, vec![c])),
        }
    }
    groups
}

/// `show`'s timeline: one line per call, `PHASE ▕ bar ▏ label duration`,
/// the bar placed on a time axis that fills `cols` columns.
fn timeline(s: &RunSummary, cols: usize) -> Vec<String> {
    const NAME: usize = 12;
    const TAIL: usize = 22;
    let axis = cols.saturating_sub(NAME + TAIL + 4).max(10);
    let origin = origin_of(s);
    let span = end_of(s, origin).saturating_sub(origin).max(1);
    let col = |t: u64| -> usize {
        let off = t.saturating_sub(origin).min(span);
        // u128: a span of years times a wide axis still fits.
        usize::try_from(u128::from(off) * axis as u128 / u128::from(span)).unwrap_or(axis)
    };
    let mut lines = Vec::new();
    for (phase, calls) in by_phase(&s.calls) {
        for (i, c) in calls.iter().enumerate() {
            let from = col(c.started_at).min(axis - 1);
            let to = c.settled_at.map_or(axis, col).clamp(from + 1, axis);
            // A different block per outcome, so the timeline reads without
            // colour (it may be piped).
            let block = match &c.outcome {
                _ if c.replayed => '▒',
                Some(CallOutcome::Completed) => '█',
                None => '░',
                Some(_) => '▓',
            };
            let bar: String = (0..axis)
                .map(|x| if (from..to).contains(&x) { block } else { ' ' })
                .collect();
            let name = if i == 0 {
                cut(&esc(&phase), NAME - 1)
            } else {
                String::new()
            };
            let dur = c.duration_ms().map_or_else(|| "-".to_string(), duration);
            let label = cut(&esc(&c.label), TAIL.saturating_sub(dur.chars().count() + 1));
            lines.push(format!("{name:<NAME$} ▕{bar}▏ {label} {dur}"));
        }
    }
    lines.push(format!(
        "{:<NAME$}  0{:>width$}",
        "",
        format!("+{}", duration(span)),
        width = axis - 1
    ));
    lines.push(format!(
        "{:<NAME$}  █ completed ▓ failed/cancelled ▒ replayed ░ running",
        ""
    ));
    lines
}

/// The one JSON object of `show --json`.
pub(crate) fn show_json(s: &RunSummary) -> Value {
    let origin = origin_of(s);
    let (tin, tout) = tokens(&s.calls);
    let stop = s
        .result
        .as_ref()
        .and_then(|r| r["result"]["stopReason"].as_str())
        .map(str::to_string);
    let agents: Vec<Value> = s
        .calls
        .iter()
        .map(|c| {
            json!({
                "seq": c.seq,
                "label": c.label,
                "phase": c.phase,
                "workflow": c.workflow,
                "startMs": c.started_at.saturating_sub(origin),
                "durationMs": c.duration_ms(),
                "usage": c.usage.map(|u| json!({"input": u.input, "output": u.output})),
                "costUsd": c.usage.and_then(|u| u.cost_usd),
                "session": c.session,
                "outcome": if s.unjournaled.contains(&c.seq) { "unjournaled" } else { c.word() },
                "reason": c.reason,
                "replayed": c.replayed,
                "worktree": c.worktree,
            })
        })
        .collect();
    json!({
        "runId": s.info.id,
        "name": s.info.name,
        "description": s.info.meta.get("description").and_then(Value::as_str),
        "script": s.info.script,
        "status": s.status.to_string(),
        "heldBy": s.holder,
        "stopReason": stop,
        "startedAt": s.info.started_at,
        "totals": {
            "agents": s.calls.len(),
            "completed": s.done,
            "failed": s.failed,
            "replayed": s.replayed,
            "tokensIn": tin,
            "tokensOut": tout,
            "costUsd": cost(&s.calls),
            "wallMs": s.elapsed_ms.unwrap_or_else(|| end_of(s, origin).saturating_sub(origin)),
        },
        "agents": agents,
        // What `result.json` holds once the run settled: value,
        // stopReason, error, usage.
        "result": s.result.as_ref().map(|r| r["result"].clone()),
    })
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
    fn durations_read_at_a_glance() {
        assert_eq!(duration(0), "0ms");
        assert_eq!(duration(999), "999ms");
        assert_eq!(duration(1250), "1.2s");
        assert_eq!(duration(123_000), "2m03s");
    }

    #[test]
    fn utc_of_a_time_past_the_year_9999_is_the_number() {
        assert_eq!(utc(253_402_300_800_000), "253402300800000ms");
        assert_eq!(utc(u64::MAX), format!("{}ms", u64::MAX));
    }
}
