//! Fixture files (`ScriptedProvider::from_json_text`, what `--fixture FILE`
//! and `[providers.X] kind = "fixture"` load), and the fixture `--record`
//! writes.
//!
//! Byte 0 picks the mode:
//! - even: the rest is the fixture's text. It must load or be refused with
//!   an error naming the file, never panic; a loaded fixture then answers
//!   (or refuses) a few calls without panicking, and a cancelled child
//!   ends as cancelled at once.
//! - odd: the rest builds the calls of one attempt (prompts, schemas,
//!   models, outcomes, usage: arbitrary). They go through the `--record`
//!   `journal::record::Recorder` as a run feeds it (every call started,
//!   then settled in reverse order, some left open), and the fixture it
//!   writes must load, and replaying the same calls in order must give back
//!   each call's own outcome (text, structured value, failure, start error,
//!   result fault, or a hang for a call that never answered).
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use arbitrary::{Arbitrary, Unstructured};
use dsh_orchestrator::journal::Outcome;
use dsh_orchestrator::journal::record::Recorder;
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{AgentOptions, AgentRequest, ChildResult, SubagentProvider, Usage};
use libfuzzer_sys::fuzz_target;
use tokio_util::sync::CancellationToken;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    })
}

/// Polls once: a fixture answers at once unless it has a delay or hangs.
fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

fn text_mode(text: &str) {
    let loaded = ScriptedProvider::from_json_text("f.fixture.json", text);
    let provider = match loaded {
        Ok(p) => p,
        Err(e) => {
            assert_eq!(e.file, "f.fixture.json");
            assert!(e.to_string().starts_with("f.fixture.json: "), "{e}");
            return;
        }
    };
    let _rt = runtime().enter();
    let calls = [
        AgentRequest::new(1, "Review a.rs", "a"),
        AgentRequest {
            phase: Some("Review".into()),
            schema: Some(serde_json::json!({"type": "object"})),
            options: AgentOptions {
                model: Some("m1".into()),
                agent_type: Some("reviewer".into()),
                ..AgentOptions::default()
            },
            ..AgentRequest::new(2, "", "")
        },
        AgentRequest::new(3, text.chars().take(80).collect::<String>(), "x"),
    ];
    for call in calls {
        let token = CancellationToken::new();
        let Some(started) = poll_once(provider.start(call, token.clone())) else {
            continue; // a delayed start error
        };
        if let Ok(child) = started {
            if poll_once(child.result()).is_none() {
                // Delayed or hanging: a cancel ends it at once.
                child.cancel();
                let after = poll_once(child.result()).expect("a cancelled child ends at once");
                assert!(
                    matches!(&after, Ok(o) if matches!(o.result, ChildResult::Cancelled)),
                    "{after:?}"
                );
            }
        }
    }
}

/// One call of the attempt.
#[derive(Debug)]
struct Recorded {
    seq: u64,
    prompt: String,
    schema: Option<serde_json::Value>,
    model: Option<String>,
    outcome: Outcome,
    usage: Option<Usage>,
}

#[derive(Debug)]
struct Attempt(Vec<Recorded>);

/// Where this process records (one file, rewritten every input).
fn record_path() -> &'static std::path::Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("dsh-fuzz-fixture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir.join("rec.json")
    })
}

impl<'a> Arbitrary<'a> for Attempt {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let n = u.int_in_range(0..=8)?;
        let mut calls = Vec::with_capacity(n);
        for seq in 1..=n as u64 {
            let prompt = String::arbitrary(u)?;
            let schema = if bool::arbitrary(u)? {
                Some(dsh_fuzz::json::value(u, dsh_fuzz::json::MAX_DEPTH)?)
            } else {
                None
            };
            let model = Option::<String>::arbitrary(u)?;
            let outcome = match u.int_in_range(0..=5)? {
                0 => Outcome::Text(String::arbitrary(u)?),
                1 => Outcome::Structured(dsh_fuzz::json::value(u, dsh_fuzz::json::MAX_DEPTH)?),
                2 => Outcome::Fail(String::arbitrary(u)?),
                3 => Outcome::StartError(String::arbitrary(u)?),
                4 => Outcome::ResultError(String::arbitrary(u)?),
                _ => Outcome::Cancelled,
            };
            let usage = if bool::arbitrary(u)? {
                Some(Usage::new(u64::arbitrary(u)?, u64::arbitrary(u)?))
            } else {
                None
            };
            calls.push(Recorded {
                seq,
                prompt,
                schema,
                model,
                outcome,
                usage,
            });
        }
        Ok(Attempt(calls))
    }
}

fn record_mode(data: &[u8]) {
    let Ok(Attempt(calls)) = Attempt::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    // As a run feeds the recorder: every call starts, then they settle in
    // reverse order; a cancelled call is settled as cancelled when its seq
    // is even and left open otherwise (both are written as `hang`).
    let path = record_path();
    let recorder = Recorder::new(path);
    for c in &calls {
        recorder.start(c.seq, &c.prompt, c.schema.as_ref(), c.model.as_deref());
    }
    for c in calls.iter().rev() {
        if !matches!(c.outcome, Outcome::Cancelled) || c.seq % 2 == 0 {
            recorder.settle(c.seq, &c.outcome, c.usage);
        }
    }
    recorder.write(path).expect("the recording is written");
    let text = std::fs::read_to_string(path).expect("the recording reads back");
    let provider = match ScriptedProvider::from_file(path) {
        Ok(p) => p,
        Err(e) => panic!("the recorded fixture does not load: {e}\n{text}"),
    };
    let _rt = runtime().enter();
    for c in &calls {
        let request = AgentRequest {
            schema: c.schema.clone(),
            options: AgentOptions {
                model: c.model.clone(),
                ..AgentOptions::default()
            },
            ..AgentRequest::new(c.seq, c.prompt.clone(), "label")
        };
        let started = poll_once(provider.start(request, CancellationToken::new()))
            .expect("a recorded answer starts at once");
        match (&c.outcome, started) {
            (Outcome::StartError(m), Err(refused)) => assert_eq!(&refused.message, m),
            (Outcome::StartError(_), Ok(_)) => panic!("call {} should be refused", c.seq),
            (_, Err(refused)) => panic!(
                "call {} refused on replay: {}\n{text}",
                c.seq, refused.message
            ),
            (Outcome::Cancelled, Ok(child)) => {
                assert!(
                    poll_once(child.result()).is_none(),
                    "a recorded hang answered"
                );
            }
            (want, Ok(child)) => {
                let got = poll_once(child.result()).expect("a recorded answer is at once");
                match (want, got) {
                    (Outcome::ResultError(m), Err(fault)) => assert_eq!(&fault.0, m),
                    (want, Ok(o)) => {
                        assert_eq!(o.usage, c.usage, "call {}: usage", c.seq);
                        let same = match (want, &o.result) {
                            (Outcome::Text(a), ChildResult::Text(b)) => a == b,
                            (Outcome::Structured(a), ChildResult::Structured(b)) => a == b,
                            (Outcome::Fail(a), ChildResult::Failed(b)) => a == b,
                            _ => false,
                        };
                        assert!(
                            same,
                            "call {}: recorded {want:?}, replayed {:?}",
                            c.seq, o.result
                        );
                    }
                    (want, got) => panic!("call {}: recorded {want:?}, replayed {got:?}", c.seq),
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        text_mode(&String::from_utf8_lossy(rest));
    } else {
        record_mode(rest);
    }
});
