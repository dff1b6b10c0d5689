//! What a script can make the host hold (issue: hardening, item 3). The
//! host's peak memory for any script stays under 64 MiB plus the largest
//! frame: labels are cut, recordings and journals are streamed to disk,
//! journals are read back line by line, the journal has a size limit, and
//! a slow event reader costs a bounded queue, never the run's progress.
//!
//! The host reports its own peak (`-v`: `dsh: host peak memory N MiB`),
//! which is the host alone; the worker's memory is the script's and has
//! its own limit.

// Tests fail loudly: unwrap and expect are how they say what broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::Instant;

use common::*;
use serde_json::json;

/// The bound of the issue: 64 MiB plus the largest frame (16 MiB).
const HOST_BOUND_MIB: f64 = 64.0 + 16.0;

fn peak_mib(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("dsh: host peak memory "))
        .unwrap_or_else(|| panic!("no peak memory line in {stderr}"));
    line["dsh: host peak memory ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {line}"))
}

fn catch_all() -> serde_json::Value {
    fixture(json!([{ "match": {}, "text": "fine" }]))
}

#[test]
fn megabyte_labels_and_prompts_recorded_and_journaled_keep_the_host_small() {
    // 16 calls, each with a 4 MiB label and a 4 MiB prompt: before the
    // bounds, every label was held in every event and the ledger, and the
    // recording held every prompt (40 × 8 MB labels: 665 MB).
    let script = r#"
        export const meta = { name: "big", description: "big labels and prompts" };
        const label = "L".repeat(4 * 1024 * 1024);
        const prompt = "P".repeat(4 * 1024 * 1024);
        for (let i = 0; i < 16; i++) await agent(prompt + i, { label: label + i });
        return "done";
    "#;
    let ws = Workspace::new("big.ts", script, Some(&catch_all()));
    let out = ws.run(&["--verbose", "--record", "rec.json", "--output", "result"]);
    out.assert_code(0);
    assert_eq!(out.json()["value"], "done");
    let peak = peak_mib(&out.stderr);
    eprintln!("host peak {peak} MiB");
    assert!(peak < HOST_BOUND_MIB, "host peak {peak} MiB");
    // Events carry the label cut to 200 characters.
    let starts = out.events_of("workflow/agent-start");
    assert_eq!(starts.len(), 16);
    for s in &starts {
        let label = s["label"].as_str().expect("label");
        assert_eq!(label.chars().count(), 200, "{}", &label[..20]);
        assert!(label.ends_with('…'));
    }
    // The recording is whole: every prompt exactly, in call order.
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.dir.path().join("rec.json")).expect("recording"),
    )
    .expect("recording is JSON");
    let answers = rec["answers"].as_array().expect("answers");
    assert_eq!(answers.len(), 16);
    for (i, a) in answers.iter().enumerate() {
        let p = a["match"]["prompt"].as_str().expect("prompt");
        assert_eq!(p.len(), 4 * 1024 * 1024 + i.to_string().len());
        assert!(p.ends_with(&i.to_string()));
        assert_eq!(a["text"], "fine");
    }
}

#[test]
fn the_journal_limit_stops_the_run_with_budget_and_a_resume_with_more_finishes_it() {
    let script = r#"
        export const meta = { name: "journal", description: "fills its journal" };
        const pad = "x".repeat(50 * 1024);
        const out = [];
        for (let i = 0; i < 10; i++) out.push(await agent(pad + i));
        return out.length;
    "#;
    let ws = Workspace::new("j.ts", script, Some(&catch_all()));
    let out = ws.run(&["--journal-limit", "200KiB", "--output", "result"]);
    out.assert_code(1);
    out.assert_error_line("BUDGET");
    let result = out.json();
    assert_eq!(result["error"]["code"], "BUDGET");
    let msg = result["error"]["message"].as_str().expect("message");
    assert!(msg.contains("--journal-limit"), "{msg}");
    let run = only_run_id(out.dir.path());
    let journal = out
        .dir
        .path()
        .join(".dsh/runs")
        .join(&run)
        .join("journal.jsonl");
    let len = std::fs::metadata(&journal).expect("journal").len();
    // Over the limit by at most the small `settled` lines of the calls.
    assert!(len <= 200 * 1024 + 4096, "journal is {len} bytes");
    // Four 50 KiB calls fit in 200 KiB; the fifth was refused.
    let ended = out.events_of("workflow/agent-end").len();
    assert_eq!(ended, 3, "{:#?}", out.events);

    let (stdout, stderr, code) = dsh_in(
        out.dir.path(),
        &[
            "workflow",
            "resume",
            &run,
            "--journal-limit",
            "10MiB",
            "--output",
            "result",
            "--events",
            "none",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).expect("result");
    assert_eq!(result["value"], 10);
    assert!(stderr.contains("3 call(s) replayed"), "{stderr}");
}

#[test]
fn a_stderr_nobody_reads_neither_stalls_the_run_nor_grows_the_host() {
    // 10,000 phases and 2,000 log lines: far more than a pipe holds, so the
    // terminal output blocks while the run goes on.
    let script = r#"
        export const meta = { name: "chatty", description: "more output than a pipe holds" };
        for (let i = 0; i < 10000; i++) phase("phase number " + i);
        for (let i = 0; i < 2000; i++) log("log line " + i + " " + "y".repeat(400));
        return "finished";
    "#;
    let ws = Workspace::new("chatty.ts", script, None);
    let mut cmd = ws.command(&["--events", "pretty", "--log-limit", "2MiB"]);
    cmd.stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn dsh");
    let mut stderr = child.stderr.take().expect("stderr");
    // The run ends (its --events-file, a subscriber of its own, gets the
    // end) while nobody has read a byte of stderr.
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        let events = read_events(&ws.events_file, false);
        if events.iter().any(|e| e["type"] == "workflow/end") {
            assert_eq!(events.last().expect("end")["stopReason"], "completed");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run stalled behind its stderr: {} events",
            events.len()
        );
        std::thread::sleep(POLL);
    }
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "dsh should still be blocked writing to its stderr"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status");
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    eprintln!("host peak while blocked: {:.1} MiB", hwm_kib / 1024.0);
    assert!(hwm_kib / 1024.0 < HOST_BOUND_MIB, "{hwm_kib} KiB");
    let mut text = String::new();
    stderr.read_to_string(&mut text).expect("read stderr");
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
    assert!(
        text.contains("phase number 9999"),
        "the output is whole once read"
    );
}

#[test]
fn show_and_runs_read_a_large_journal_line_by_line() {
    // A finished run, whose journal is then grown to 96 MiB with valid
    // lines: `show` and `runs` used to read it whole (631 MB for 320 MB).
    let ws = Workspace::new(
        "s.ts",
        r#"export const meta = { name: "s", description: "d" }; return await agent("x");"#,
        Some(&catch_all()),
    );
    let out = ws.run(&[]);
    out.assert_code(0);
    let runs = out.dir.path().join(".dsh/runs");
    let run = only_run_id(out.dir.path());
    let journal = runs.join(&run).join("journal.jsonl");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .expect("journal");
        let prompt = "q".repeat(1 << 20);
        for seq in 2..98u64 {
            let line = json!({"type": "start", "seq": seq, "key": format!("k{seq}"),
                "label": "grown", "prompt": prompt, "at": 0});
            writeln!(f, "{line}").expect("append");
        }
    }
    assert!(std::fs::metadata(&journal).expect("journal").len() > 96 << 20);
    for args in [
        vec!["workflow", "show", run.as_str()],
        vec!["workflow", "runs"],
    ] {
        // Reaped by wait4 below, which also returns its peak memory.
        #[allow(clippy::zombie_processes)]
        let mut child = std::process::Command::new(DSH)
            .current_dir(out.dir.path())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut stdout)
            .expect("stdout");
        let (code, maxrss_kib) = wait_with_rusage(child.id());
        assert_eq!(code, 0, "{args:?}: {stdout}");
        assert!(
            stdout.contains(&run) || stdout.contains("grown"),
            "{stdout}"
        );
        let mib = maxrss_kib as f64 / 1024.0;
        eprintln!("{args:?}: peak {mib:.1} MiB");
        assert!(mib < 64.0, "{args:?} peaked at {mib:.1} MiB");
    }
}

/// Reaps `pid` (a child of this process with no children of its own) and
/// returns its exit code and peak RSS in KiB.
fn wait_with_rusage(pid: u32) -> (i32, i64) {
    let pid = libc::pid_t::try_from(pid).expect("pid");
    let mut status = 0;
    // SAFETY: wait4 writes the status and one rusage into the locals given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `pid` is our own unreaped child.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "status {status}");
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}

#[test]
fn answers_the_disk_could_not_keep_are_warned_about_once_and_named_by_show() {
    use std::os::unix::process::CommandExt;
    let script = r#"
        export const meta = { name: "full", description: "the disk fills up mid-run" };
        const pad = "z".repeat(30 * 1024);
        const got = [];
        for (let i = 0; i < 5; i++) got.push(await agent(pad + i));
        return got.length;
    "#;
    let ws = Workspace::new("full.ts", script, Some(&catch_all()));
    let mut cmd = ws.command(&["--output", "result"]);
    // SAFETY: between fork and exec the closure only makes two
    // async-signal-safe calls (setrlimit, signal) on the child itself.
    unsafe {
        cmd.pre_exec(|| {
            // Every file dsh writes may grow to 40 KiB: the journal is the
            // one that does not fit — a disk that fills up mid-run.
            let lim = libc::rlimit {
                rlim_cur: 40 * 1024,
                rlim_max: 40 * 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A write past the limit fails with EFBIG instead of killing.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = Running::adopt(cmd.spawn().expect("spawn dsh"), ws).finish();
    // The script got every answer; the run completed.
    out.assert_code(0);
    assert_eq!(out.json()["value"], 5);
    let cannot_write = out.stderr.matches("cannot write").count();
    assert_eq!(
        cannot_write, 1,
        "one warning for the journal: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains(
            "answer(s) reached the script but could not be journaled (calls #2, #3, #4, #5)"
        ),
        "{}",
        out.stderr
    );
    let run = only_run_id(out.dir.path());
    let (shown, err, rc) = dsh_in(out.dir.path(), &["workflow", "show", &run]);
    assert_eq!(rc, Some(0), "{err}");
    assert!(shown.contains("status   completed"), "{shown}");
    assert!(shown.contains("not journaled: #2, #3, #4, #5"), "{shown}");
    assert!(shown.contains("#2    unjournaled"), "{shown}");
}
