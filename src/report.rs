//! `dsh workflow report`: one run as a single self-contained HTML file —
//! meta, status, result, an SVG timeline of its agents by phase, a details
//! panel (prompt, answer, usage) for the bar clicked, logs when the run
//! directory has them, and totals. No network and no external assets: the
//! CSS, the SVG and the few lines of JS are inline, so the file can be
//! mailed or attached to a ticket and still open.
//!
//! Everything that came from the script or its agents is HTML-escaped
//! ([`esc`]); the per-agent data for the details panel travels as JSON in
//! a `<script type="application/json">` block with `<` escaped, and the JS
//! puts it on the page with `textContent` only.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use dsh_orchestrator::CallOutcome;
use dsh_orchestrator::files;
use dsh_orchestrator::journal::rundir;
use dsh_orchestrator::journal::summary::{self, RunSummary, cut};
use serde_json::{Value, json};

use crate::error::{CliError, exit};
use crate::flags::ReportArgs;
use crate::request::runs_root;
use crate::runs_cmd::{by_phase, duration, end_of, origin_of, show_json};

/// Most characters of a prompt or an answer the file keeps per agent: a
/// 1,000-agent run stays a few MB at most.
const TEXT_CHARS: usize = 2000;
/// Most log lines the file keeps.
const MAX_LOG_LINES: usize = 1000;

/// `dsh workflow report`.
pub fn report(a: &ReportArgs) -> Result<i32, CliError> {
    let config = crate::request::load_config(None)
        .unwrap_or_else(|_| dsh_orchestrator::config::Config::builtin());
    let (s, logs, default_out) = match crate::request::store_url(a.store.as_deref(), &config)? {
        Some(url) => {
            let rt = crate::runtime()?;
            let (s, events) = rt.block_on(async {
                let store = crate::request::open_store(&url).await?;
                let usage = |e: dsh_store::StoreError| CliError::usage(e.to_string());
                let s = store
                    .summary(&a.run, Some(TEXT_CHARS))
                    .await
                    .map_err(usage)?;
                let events = store.events_text(&a.run).await.map_err(usage)?;
                Ok::<_, CliError>((s, events))
            })?;
            let mut warnings = Vec::new();
            let name = format!("{url} (run {}): events", a.run);
            let logs = read_logs_from(
                &name,
                std::io::Cursor::new(events.into_bytes()),
                files::EVENTS_READ_LIMIT,
                &mut warnings,
            );
            for w in &warnings {
                crate::error::warn(w);
            }
            (s, logs, PathBuf::from(format!("{}.html", a.run)))
        }
        None => {
            let root = runs_root(a.runs_dir.as_deref());
            let dir = rundir::resolve(&root, &a.run).map_err(|e| CliError::usage(e.to_string()))?;
            let s = summary::summarize_with_texts(&dir, TEXT_CHARS)
                .map_err(|e| CliError::usage(e.to_string()))?;
            let mut warnings = s.warnings.clone();
            let logs = read_logs(
                &dir.join(rundir::EVENTS_FILE),
                files::EVENTS_READ_LIMIT,
                &mut warnings,
            );
            for w in &warnings {
                crate::error::warn(w);
            }
            (s, logs, dir.join("report.html"))
        }
    };
    let html = render(&s, &logs);
    let out: PathBuf = a.output.clone().unwrap_or(default_out);
    // A new file renamed over the old, never written through what is
    // there: `report.html` in a run directory (which a cloned repository
    // can ship) or the `-o` path may be a symlink to a file of the user's,
    // or a device; those are refused, as `--record` refuses them.
    rundir::write_atomic(&out, html.as_bytes())
        .map_err(|e| CliError::usage(format!("cannot write the report: {e}")))?;
    println!("{}", crate::terminal::line(&out.display().to_string()));
    Ok(exit::COMPLETED)
}

/// The logs a report shows: the last attempt's last [`MAX_LOG_LINES`]
/// `workflow/log` messages, and what was left out, said in the report as
/// well as on stderr.
#[derive(Debug, Default)]
struct Logs {
    lines: VecDeque<String>,
    /// Earlier log lines of the same attempt dropped to keep the last
    /// [`MAX_LOG_LINES`].
    dropped: u64,
    /// The byte cap stopped the reading before the end of the file: a
    /// later attempt's logs, or later lines, may be missing.
    truncated: bool,
}

impl Logs {
    /// What the report says about lines it does not show.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.dropped > 0 {
            notes.push(format!(
                "{} earlier log line(s) of this attempt are not shown: the report keeps the last {MAX_LOG_LINES}",
                self.dropped
            ));
        }
        if self.truncated {
            notes.push(format!(
                "only the first {} bytes of the events file were read: later logs, or a later attempt's, are not shown",
                files::EVENTS_READ_LIMIT
            ));
        }
        notes
    }
}

/// The `workflow/log` messages of the last attempt in an events file (each
/// attempt appends its events, from its `workflow/start` on); none when
/// there is no such file (logs are a bonus, never a failure). The whole
/// file is read (within the byte cap), since the last attempt's
/// `workflow/start` can come after any number of earlier lines; of that
/// attempt the last [`MAX_LOG_LINES`] messages are kept. The file sits in
/// a run directory, which a cloned repository can ship: it is read the
/// bounded way — never through a symlink, a regular file only (a FIFO
/// would block forever), lines over [`files::EVENT_LINE_LIMIT`] skipped,
/// at most `limit` bytes — and what could not be read is a warning naming
/// the file.
fn read_logs(path: &Path, limit: u64, warnings: &mut Vec<String>) -> Logs {
    let file = match files::open_own(path) {
        Ok(f) => f,
        Err(files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Logs::default();
        }
        Err(e) => {
            warnings.push(format!(
                "{}: cannot read: {e}; the report has no logs",
                path.display()
            ));
            return Logs::default();
        }
    };
    read_logs_from(&path.display().to_string(), file, limit, warnings)
}

/// [`read_logs`] of any reader (a store's events); `name` names it in
/// warnings.
fn read_logs_from(
    name: &str,
    source: impl std::io::Read,
    limit: u64,
    warnings: &mut Vec<String>,
) -> Logs {
    use std::io::{BufRead, Read};
    let mut logs = Logs::default();
    let mut r = std::io::BufReader::new(source.take(limit));
    let mut line = Vec::new();
    let mut skipped = 0usize;
    loop {
        line.clear();
        match (&mut r)
            .take(files::EVENT_LINE_LIMIT + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                warnings.push(format!("{name}: cannot read: {e}"));
                break;
            }
        }
        if line.len() as u64 > files::EVENT_LINE_LIMIT {
            // Skip the rest of the over-long line without keeping it.
            skipped += 1;
            if line.last() != Some(&b'\n') && skip_line(&mut r).is_err() {
                break;
            }
            continue;
        }
        let Ok(ev) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if ev["type"] == "workflow/start" {
            logs.lines.clear();
            logs.dropped = 0;
        } else if ev["type"] == "workflow/log"
            && let Some(m) = ev["message"].as_str()
        {
            if logs.lines.len() == MAX_LOG_LINES {
                logs.lines.pop_front();
                logs.dropped += 1;
            }
            logs.lines.push_back(cut(m, TEXT_CHARS));
        }
    }
    if skipped > 0 {
        warnings.push(format!(
            "{}: {skipped} line(s) over {} bytes skipped",
            name,
            files::EVENT_LINE_LIMIT
        ));
    }
    // Whether anything is left past the cap: one more byte, read from the
    // file itself.
    if r.get_ref().limit() == 0 {
        let mut more = [0u8; 1];
        logs.truncated = r
            .into_inner()
            .into_inner()
            .read(&mut more)
            .is_ok_and(|n| n > 0);
    }
    for note in logs.notes() {
        warnings.push(format!("{name}: {note}"));
    }
    logs
}

/// Reads up to the end of the current line, keeping nothing.
fn skip_line(r: &mut impl std::io::BufRead) -> std::io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            r.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        r.consume(n);
    }
}

/// `s` with `&`, `<`, `>`, `"` and `'` as entities: safe in element text
/// and in quoted attributes. Line breaks become character references too
/// (a browser shows them the same), so every line of the file is one dsh
/// wrote: text from the script or its agents cannot start a line of its
/// own in the file (a shell or config line, should the file ever end up
/// read as one).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON for a `<script type="application/json">` block: `<`, `>` and `&`
/// as `\u` escapes so no text inside can close the block (`</script>`).
fn script_json(v: &Value) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|_| "null".into())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Geometry of the SVG timeline, in pixels.
const LEFT: u64 = 220;
const AXIS: u64 = 900;
const ROW: u64 = 16;
const BAR: u64 = 11;

/// `ms` of a `span` as pixels of the axis; u128, so even an edited
/// journal's absurd times cannot overflow.
fn px(ms: u64, span: u64) -> u64 {
    u64::try_from(u128::from(ms) * u128::from(AXIS) / u128::from(span.max(1))).unwrap_or(AXIS)
}

/// The report's HTML.
fn render(s: &RunSummary, logs: &Logs) -> String {
    let view = show_json(s);
    let origin = origin_of(s);
    let span = end_of(s, origin).saturating_sub(origin).max(1);
    let mut h = String::with_capacity(64 * 1024 + s.calls.len() * 600);
    header(&mut h, s, &view);
    timeline(&mut h, s, origin, span);
    h.push_str(
        "<h2>Details</h2><div id=\"details\"><p class=\"hint\">Click a bar in the timeline.</p></div>",
    );

    let result = s
        .result
        .as_ref()
        .map_or(Value::Null, |r| r["result"].clone());
    let _ = write!(
        h,
        "<h2>Result</h2><pre class=\"result\">{}</pre>",
        esc(&serde_json::to_string_pretty(&result).unwrap_or_else(|_| "null".into()))
    );
    let notes = logs.notes();
    if !logs.lines.is_empty() || !notes.is_empty() {
        h.push_str("<h2>Logs</h2>");
        for n in &notes {
            let _ = write!(h, "<p class=\"hint\">{}</p>", esc(n));
        }
        h.push_str("<pre class=\"logs\">");
        for l in &logs.lines {
            h.push_str(&esc(l));
            h.push('\n');
        }
        h.push_str("</pre>");
    }

    details_data(&mut h, s, &view);
    h
}

/// The head, the title, the run's description and status, its totals.
fn header(h: &mut String, s: &RunSummary, view: &Value) {
    let desc = s.info.meta.get("description").and_then(Value::as_str);
    let stop = view["stopReason"].as_str().unwrap_or("-");
    let totals = &view["totals"];
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = write!(
        h,
        "<title>dsh run {} — {}</title><style>{CSS}</style></head><body>",
        esc(&s.info.id),
        esc(&s.info.name)
    );
    let _ = write!(h, "<h1>{}</h1>", esc(&s.info.name));
    if let Some(d) = desc {
        let _ = write!(h, "<p class=\"desc\">{}</p>", esc(d));
    }
    let _ = write!(
        h,
        "<table class=\"meta\"><tr><th>run</th><td>{}</td></tr><tr><th>script</th><td>{}</td></tr>\
         <tr><th>status</th><td class=\"st-{}\">{}</td></tr><tr><th>stop reason</th><td>{}</td></tr></table>",
        esc(&s.info.id),
        esc(&s.info.script),
        esc(stop),
        esc(&s.status.to_string()),
        esc(stop)
    );
    let _ = write!(
        h,
        "<h2>Totals</h2><table class=\"totals\"><tr><th>agents</th><th>completed</th><th>failed</th>\
         <th>replayed</th><th>tokens in</th><th>tokens out</th><th>cost</th><th>wall</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        totals["agents"],
        totals["completed"],
        totals["failed"],
        totals["replayed"],
        totals["tokensIn"],
        totals["tokensOut"],
        esc(&crate::runs_cmd::dollars(totals["costUsd"].as_f64())),
        duration(totals["wallMs"].as_u64().unwrap_or(0))
    );
}

/// The timeline: an SVG with a phase title row, then one bar per agent,
/// on an axis from `origin` over `span` milliseconds.
fn timeline(h: &mut String, s: &RunSummary, origin: u64, span: u64) {
    // The timeline: a phase title row, then one row per agent.
    let groups = by_phase(&s.calls);
    let rows = groups.iter().map(|(_, c)| c.len() as u64 + 1).sum::<u64>();
    let height = rows * ROW + 24;
    let width = LEFT + AXIS + 20;
    h.push_str(
        "<h2>Timeline</h2><p class=\"legend\"><span class=\"k o-completed\"></span>completed \
        <span class=\"k o-failed\"></span>failed <span class=\"k o-cancelled\"></span>cancelled \
        <span class=\"k o-replayed\"></span>replayed <span class=\"k o-running\"></span>running \
        — click a bar for its details</p><div class=\"scroll\">",
    );
    let _ = write!(
        h,
        "<svg id=\"timeline\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\">"
    );
    // Axis ticks: 0, ¼, ½, ¾ and the end.
    for i in 0..=4u64 {
        let x = LEFT + AXIS * i / 4;
        let _ = write!(
            h,
            "<line class=\"tick\" x1=\"{x}\" y1=\"14\" x2=\"{x}\" y2=\"{height}\"/>\
             <text class=\"tick\" x=\"{x}\" y=\"11\">{}</text>",
            duration(span * i / 4)
        );
    }
    let mut y = 20;
    for (phase, calls) in &groups {
        let _ = write!(
            h,
            "<text class=\"phase\" x=\"4\" y=\"{}\">{}</text>",
            y + BAR,
            // `by_phase` groups calls without a phase under `-`.
            if phase == "-" {
                "(no phase)".to_string()
            } else {
                esc(phase)
            }
        );
        y += ROW;
        for c in calls {
            let start = c.started_at.saturating_sub(origin).min(span);
            let end = c
                .settled_at
                .map_or(span, |t| t.saturating_sub(origin))
                .clamp(start, span);
            let x = LEFT + px(start, span);
            // At least one pixel, so a 1,000-agent run of instant calls
            // still shows every bar.
            let w = px(end - start, span).max(1);
            let class = match &c.outcome {
                _ if c.replayed => "replayed",
                Some(CallOutcome::Completed) => "completed",
                None => "running",
                Some(CallOutcome::Cancelled) => "cancelled",
                Some(_) => "failed",
            };
            let dur = c.duration_ms().map_or_else(|| "-".to_string(), duration);
            let label = cut(&c.label, 32);
            let _ = write!(
                h,
                "<text class=\"label\" x=\"{}\" y=\"{}\">#{} {}</text>\
                 <rect class=\"bar o-{class}\" data-seq=\"{}\" x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{BAR}\">\
                 <title>#{} {} — {} {}</title></rect>",
                LEFT - 6,
                y + BAR - 1,
                c.seq,
                esc(&label),
                c.seq,
                c.seq,
                esc(&c.label),
                esc(c.word()),
                esc(&dur)
            );
            y += ROW;
        }
    }
    h.push_str("</svg></div>");
}

/// The details panel's data (a JSON script element) and the script that
/// shows it.
fn details_data(h: &mut String, s: &RunSummary, view: &Value) {
    // The `show --json` agent plus prompt and answer, keyed by seq.
    let agents: Vec<Value> = s
        .calls
        .iter()
        .zip(view["agents"].as_array().into_iter().flatten())
        .map(|(c, a)| {
            let mut a = a.clone();
            a["prompt"] = json!(c.prompt);
            a["answer"] = c.answer.clone().unwrap_or(Value::Null);
            a
        })
        .collect();
    let _ = writeln!(
        h,
        "<script type=\"application/json\" id=\"agents\">{}</script><script>{JS}</script></body></html>",
        script_json(&Value::Array(agents))
    );
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}\
h1{margin:0 0 .2em}h2{margin:1.2em 0 .4em;font-size:1.1em}.desc{margin:0;color:#555}\
table{border-collapse:collapse}th,td{text-align:left;padding:2px 10px 2px 0}\
.totals td,.totals th{text-align:right;padding:2px 8px}.st-completed{color:#1a7f37}.st-error{color:#cf222e}\
.scroll{max-height:60vh;overflow:auto;border:1px solid #ddd}\
svg text{font:11px ui-monospace,monospace}text.label{text-anchor:end;fill:#333}\
text.phase{font-weight:bold;fill:#000}text.tick{fill:#888;text-anchor:middle}line.tick{stroke:#eee}\
rect.bar{cursor:pointer}rect.bar:hover,rect.bar.sel{stroke:#000;stroke-width:1.5}\
.o-completed{fill:#2da44e;background:#2da44e}.o-failed{fill:#cf222e;background:#cf222e}\
.o-cancelled{fill:#8c959f;background:#8c959f}.o-replayed{fill:#0969da;background:#0969da}\
.o-running{fill:#d4a72c;background:#d4a72c}\
.k{display:inline-block;width:10px;height:10px;margin:0 4px 0 8px}\
#details{border:1px solid #ddd;padding:.5em 1em;min-height:3em}\
#details dl{display:grid;grid-template-columns:7em minmax(0,1fr);gap:3px 1em;margin:0}#details dt{font-weight:bold}\
#details dd{margin:0}pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.5em;margin:.2em 0}\
.hint{color:#888}";

/// Selects a bar on click, and on load when the URL ends in `#select=SEQ`
/// (the same path, so a headless browser can check the panel). Text goes
/// in with `textContent` only: nothing from the run is parsed as HTML.
const JS: &str = r#"(function(){
var agents={};JSON.parse(document.getElementById('agents').textContent).forEach(function(a){agents[a.seq]=a;});
var panel=document.getElementById('details');
function row(dl,k,v,pre){if(v===null||v===undefined||v==='')return;var dt=document.createElement('dt');dt.textContent=k;
var dd=document.createElement(pre?'pre':'dd');dd.textContent=v;dl.appendChild(dt);dl.appendChild(dd);}
function dur(ms){return ms===null?'-':(ms<1000?ms+'ms':(ms/1000).toFixed(1)+'s');}
function select(seq){var a=agents[seq];if(!a)return;
document.querySelectorAll('rect.bar.sel').forEach(function(r){r.classList.remove('sel');});
var r=document.querySelector('rect.bar[data-seq="'+seq+'"]');if(r)r.classList.add('sel');
panel.textContent='';var dl=document.createElement('dl');dl.id='detail-'+seq;
row(dl,'agent','#'+a.seq+' '+a.label);row(dl,'phase',a.phase);row(dl,'workflow',a.workflow);
row(dl,'outcome',a.outcome+(a.replayed?' (replayed)':''));row(dl,'reason',a.reason,true);
row(dl,'start','+'+dur(a.startMs));row(dl,'duration',dur(a.durationMs));
row(dl,'usage',a.usage?a.usage.input+' in / '+a.usage.output+' out':null);row(dl,'cost',a.costUsd!=null?'$'+a.costUsd.toFixed(4):null);row(dl,'worktree',a.worktree);
row(dl,'prompt',a.prompt,true);
row(dl,'answer',a.answer===null?null:(typeof a.answer==='string'?a.answer:JSON.stringify(a.answer,null,2)),true);
panel.appendChild(dl);}
document.getElementById('timeline').addEventListener('click',function(e){var s=e.target.getAttribute('data-seq');if(s)select(s);});
var m=/[#&]select=(\d+)/.exec(location.hash);if(m)select(m[1]);
})();"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            esc("<script>alert('x')&\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
        assert_eq!(esc("a\nb\r\nc"), "a&#10;b&#13;&#10;c");
        assert_eq!(
            script_json(&json!(["</script><b>&"])),
            r#"["\u003c/script\u003e\u003cb\u003e\u0026"]"#
        );
    }

    /// A last attempt that starts past the byte cap is not found: the
    /// logs shown are an earlier attempt's, and the report says the file
    /// was not read to its end.
    #[test]
    fn logs_past_the_byte_cap_are_said_to_be_missing() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let path = dir.path().join("events.jsonl");
        let start = "{\"type\":\"workflow/start\"}\n";
        let log = |m: &str| format!("{{\"type\":\"workflow/log\",\"message\":\"{m}\"}}\n");
        let head = format!("{start}{}", log("early"));
        let text = format!("{head}{start}{}", log("late"));
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("write: {e}"));

        let mut warnings = Vec::new();
        let logs = read_logs(&path, text.len() as u64, &mut warnings);
        assert_eq!(logs.lines, ["late"]);
        assert!(!logs.truncated && warnings.is_empty(), "{warnings:?}");

        let logs = read_logs(&path, head.len() as u64, &mut warnings);
        assert_eq!(logs.lines, ["early"]);
        assert!(logs.truncated);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("a later attempt's, are not shown")),
            "{warnings:?}"
        );
    }
}
