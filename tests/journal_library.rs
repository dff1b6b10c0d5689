//! Durable runs through the library alone, as an embedding application
//! uses them: `Durable::new_run` → `start` → `finish`, the run listed and
//! read by `journal::summary`, `StoredRun::resume` replaying what the
//! journal holds and asking the application's provider for the rest — no
//! CLI anywhere.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{DSH, assert_event_guarantees, fixture, lib};
use dsh_orchestrator::journal::{
    Durable, DurableOptions, JournalMode, JournalWarning, ProviderSpec, ResumeError, ResumeOptions,
    RunStatus, StoredRun, summary,
};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{
    Limits, StartRequest, StopReason, SubagentProvider, WorkerCommand, journal::CallState,
};
use dsh_seam::Stack;
use serde_json::{Value, json};

const SCRIPT: &str = r#"export const meta = { name: "journaled", description: "three calls in a row" };
const a = await agent("first", { label: "a" });
const b = await agent("second", { label: "b" });
const c = await agent("third", { label: "c" });
return [a, b, c];
"#;

fn provider(answers: Value) -> Arc<dyn SubagentProvider> {
    Arc::new(ScriptedProvider::from_value(&fixture(answers)).expect("fixture"))
}

/// The application's provider stack: the journal in front of its provider.
fn behind_journal(mut req: StartRequest, durable: &Durable) -> StartRequest {
    if let Some(p) = req.provider.take() {
        req.provider = Some(Stack::new().option_layer(durable.layer()).provider(p));
    }
    req
}

fn request(script: &Path, provider: Arc<dyn SubagentProvider>) -> StartRequest {
    let limits = Limits {
        dispose_grace: lib::GRACE,
        ..Limits::default()
    };
    StartRequest::from_path(script, &limits)
        .expect("script")
        .with_limits(limits)
        .with_worker(WorkerCommand::dsh(DSH))
        .with_provider(provider)
}

fn keep(runs_dir: &Path) -> DurableOptions {
    DurableOptions {
        runs_dir: runs_dir.to_path_buf(),
        journal: JournalMode::Keep,
        record: None,
        journal_limit: None,
    }
}

/// The runs under `runs_dir` once none reads as running. A run's lock is
/// released when `finish` returns, but another test of this binary may be
/// forking a worker at that moment: the child holds a copy of every
/// descriptor (the lock's too) until its exec closes them.
fn settled_list(runs_dir: &Path) -> Vec<summary::RunSummary> {
    let deadline = std::time::Instant::now() + common::WAIT_BOUND;
    loop {
        let all = summary::list(runs_dir)
            .expect("list")
            .expect("the runs dir exists");
        if !all
            .iter()
            .any(|s| matches!(s.status, RunStatus::Running { .. }))
        {
            return all;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {all:?}"
        );
        std::thread::sleep(common::POLL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_journals_a_run_and_resumes_it_without_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("wf.ts");
    std::fs::write(&script, SCRIPT).expect("script");
    let runs_dir = dir.path().join("runs");

    // Attempt 1: a and b are answered, c never is; the application cancels.
    let first = provider(json!([
        { "match": { "label": "a" }, "text": "A from attempt 1" },
        { "match": { "label": "b" }, "text": "B from attempt 1" },
        { "match": { "label": "c" }, "hang": true },
    ]));
    let mut req = request(&script, first);
    let durable = Durable::new_run(&mut req, &script, ProviderSpec::None, &keep(&runs_dir));
    assert_eq!(durable.take_warnings(), vec![]);
    let req = behind_journal(req, &durable);
    let run = durable.start(req).expect("start");
    let mut events = run.run().subscribe();
    lib::wait_for(&mut events, "the start of c", |e| {
        e["type"] == "workflow/agent-start" && e["label"] == "c"
    })
    .await;
    run.run().cancel("the application stops");
    let id = run.run().id().to_string();
    let finished = run.finish().await;
    assert_eq!(finished.result.stop_reason, StopReason::Cancelled);
    assert_eq!((finished.replayed, finished.live), (0, 3));
    assert_eq!(finished.resumed, None);
    assert!(finished.warnings.is_empty(), "{:?}", finished.warnings);

    // The run as `summary` reads it.
    let all = settled_list(&runs_dir);
    assert_eq!(all.len(), 1);
    let s = &all[0];
    assert_eq!(s.info.id, id);
    assert_eq!(s.info.name, "journaled");
    assert_eq!(s.status, RunStatus::Settled("cancelled".into()));
    assert_eq!((s.done, s.failed, s.replayed), (2, 0, 0));
    let states: Vec<(&str, CallState)> = s
        .calls
        .iter()
        .map(|c| (c.label.as_str(), c.state))
        .collect();
    assert_eq!(
        states,
        [
            ("a", CallState::Completed),
            ("b", CallState::Completed),
            ("c", CallState::Cancelled)
        ]
    );

    // Attempt 2: the application's provider would answer everything
    // differently; the journal's answers win for a and b.
    let second = provider(json!([
        { "match": {}, "text": "from attempt 2", "times": 3 },
    ]));
    let stored = StoredRun::open(&runs_dir, &id).expect("open");
    assert_eq!(stored.info().provider, ProviderSpec::None);
    let (mut req, durable, second) = stored
        .resume(&ResumeOptions::default(), |spec| {
            assert_eq!(*spec, ProviderSpec::None);
            Ok::<_, std::convert::Infallible>(second)
        })
        .expect("resume");
    req.provider = Some(second);
    let req = behind_journal(req, &durable).with_worker(WorkerCommand::dsh(DSH));
    let run = durable.start(req).expect("start the resume");
    let events = lib::collect_events(run.run()).await;
    let finished = run.finish().await;
    assert_event_guarantees(&events);
    assert_eq!(finished.result.stop_reason, StopReason::Completed);
    assert_eq!(
        finished.result.value,
        json!(["A from attempt 1", "B from attempt 1", "from attempt 2"])
    );
    assert_eq!((finished.replayed, finished.live), (2, 1));
    assert_eq!(finished.resumed.as_deref(), Some(id.as_str()));

    let all = settled_list(&runs_dir);
    let s = &all[0];
    assert_eq!(s.status, RunStatus::Settled("completed".into()));
    assert_eq!((s.done, s.replayed), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_refuses_a_changed_script_and_reports_the_applications_provider_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("wf.ts");
    std::fs::write(&script, SCRIPT).expect("script");
    let runs_dir = dir.path().join("runs");
    let mut req = request(
        &script,
        provider(json!([{ "match": {}, "text": "x", "times": 3 }])),
    );
    let durable = Durable::new_run(&mut req, &script, ProviderSpec::None, &keep(&runs_dir));
    let req = behind_journal(req, &durable);
    let run = durable.start(req).expect("start");
    let id = run.run().id().to_string();
    assert_eq!(run.finish().await.result.stop_reason, StopReason::Completed);

    // A provider the application cannot make: its error comes back as is.
    let stored = StoredRun::open(&runs_dir, &id).expect("open");
    let err = stored
        .resume(&ResumeOptions::default(), |_| {
            Err::<(), _>("no provider today")
        })
        .err()
        .expect("refused");
    assert!(
        matches!(err, ResumeError::Provider("no provider today")),
        "{err}"
    );

    // The script changed: refused unless allowed, naming the fix.
    std::fs::write(&script, SCRIPT.replace("third", "3rd")).expect("edit");
    let stored = StoredRun::open(&runs_dir, &id).expect("open");
    let err = stored
        .resume(&ResumeOptions::default(), |_| Ok::<_, ()>(()))
        .err()
        .expect("refused");
    let ResumeError::Run(message) = &err else {
        panic!("not a run problem: {err:?}");
    };
    assert!(message.contains("--allow-changed"), "{message}");
    let stored = StoredRun::open(&runs_dir, &id).expect("open");
    let allowed = ResumeOptions {
        allow_changed: true,
        ..ResumeOptions::default()
    };
    assert!(stored.resume(&allowed, |_| Ok::<_, ()>(())).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_usable_runs_dir_the_run_goes_on_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("wf.ts");
    std::fs::write(&script, SCRIPT).expect("script");
    // A file where the runs directory should be: nothing can be created.
    let blocked = dir.path().join("not-a-dir");
    std::fs::write(&blocked, "").expect("file");
    let mut req = request(
        &script,
        provider(json!([{ "match": {}, "text": "x", "times": 3 }])),
    );
    let durable = Durable::new_run(
        &mut req,
        &script,
        ProviderSpec::None,
        &keep(&blocked.join("runs")),
    );
    let warnings = durable.take_warnings();
    assert!(
        matches!(warnings.as_slice(), [JournalWarning::NoJournal { .. }]),
        "{warnings:?}"
    );
    assert!(warnings[0].to_string().contains("cannot be resumed"));
    let req = behind_journal(req, &durable);
    let run = durable.start(req).expect("start");
    let finished = run.finish().await;
    assert_eq!(finished.result.stop_reason, StopReason::Completed);
    assert!(finished.warnings.is_empty(), "{:?}", finished.warnings);

    // Journal off: no directory at all, and nothing to say about it.
    let runs_dir = dir.path().join("runs");
    let mut req = request(
        &script,
        provider(json!([{ "match": {}, "text": "x", "times": 3 }])),
    );
    let off = DurableOptions {
        journal: JournalMode::Off,
        ..keep(&runs_dir)
    };
    let durable = Durable::new_run(&mut req, &script, ProviderSpec::None, &off);
    assert!(durable.take_warnings().is_empty());
    let finished = durable.start(req).expect("start").finish().await;
    assert_eq!(finished.result.stop_reason, StopReason::Completed);
    assert!(!runs_dir.exists());
}

/// A run that keeps a journal but whose provider is not behind it would
/// journal none of its calls, and a resume would ask them all again: it is
/// refused before it starts, naming the fix, and leaves no run directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_not_behind_the_journal_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("wf.ts");
    std::fs::write(&script, SCRIPT).expect("script");
    let runs_dir = dir.path().join("runs");
    let mut req = request(
        &script,
        provider(json!([{ "match": {}, "text": "x", "times": 3 }])),
    );
    let durable = Durable::new_run(&mut req, &script, ProviderSpec::None, &keep(&runs_dir));
    let err = durable.start(req).err().expect("refused");
    assert_eq!(err.code(), dsh_orchestrator::ErrorCode::Usage);
    assert!(err.to_string().contains("Durable::layer()"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&runs_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}
