//! `--record FILE`: the calls of one attempt as a fixture (contract §11),
//! one exact-match entry per call in call order with `times: 1`, written
//! atomically so a crash leaves the old file or a valid new one. The
//! [`Recorder`] keeps settled calls in an unlinked scratch file as the run
//! goes, so recording a run costs the host no memory per call.

use std::collections::BTreeMap;
use std::io::{Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use super::JournalError;
use super::line::Outcome;
use super::rundir::replace_file_with;
use dsh_seam::Usage;

/// One call as recorded (the in-memory form the tests compare against).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    /// The call's `seq` in the attempt.
    pub seq: u64,
    /// The call's prompt (matched exactly by the fixture entry).
    pub prompt: String,
    /// The call's schema, matched too; `None` for a text call.
    pub schema: Option<Value>,
    /// The `model` option, matched too; `None` when not given.
    pub model: Option<String>,
    /// How the call ended ([`Outcome::Cancelled`] while it is open; it is
    /// recorded as `hang`).
    pub outcome: Outcome,
    /// The tokens the child reported; `None` when it reported none.
    pub usage: Option<Usage>,
}

/// The fixture document for `calls` (already in call order), in memory;
/// [`Recorder::write`] streams the same document.
#[cfg(test)]
fn fixture(calls: &[Recorded]) -> Value {
    let answers: Vec<Value> = calls.iter().map(entry).collect();
    json!({ "version": 1, "answers": answers })
}

#[cfg(test)]
fn entry(c: &Recorded) -> Value {
    let mut m = Map::new();
    let mut matcher = Map::new();
    matcher.insert("prompt".into(), c.prompt.clone().into());
    if let Some(s) = &c.schema {
        matcher.insert("schema".into(), s.clone());
    }
    if let Some(model) = &c.model {
        matcher.insert("model".into(), model.clone().into());
    }
    m.insert("match".into(), Value::Object(matcher));
    let (k, v) = match &c.outcome {
        Outcome::Text(t) => ("text", Value::from(t.clone())),
        Outcome::Structured(v) => ("structured", v.clone()),
        Outcome::Fail(r) => ("fail", Value::from(r.clone())),
        Outcome::StartError(r) => ("startError", Value::from(r.clone())),
        Outcome::ResultError(r) => ("resultError", Value::from(r.clone())),
        // It never answered: replaying it waits the same way.
        Outcome::Cancelled => ("hang", Value::Bool(true)),
    };
    m.insert(k.into(), v);
    if let Some(u) = c.usage {
        m.insert("usage".into(), json!(u));
    }
    m.insert("times".into(), 1.into());
    Value::Object(m)
}

/// A stretch of the scratch file.
#[derive(Debug, Clone, Copy)]
struct Span {
    offset: u64,
    len: u64,
}

/// A call of the recording while the run goes on: its `match` object
/// (written when it started) and, once it settled, the rest of its entry
/// (`"text": …, "usage": …, "times": 1`), both in the scratch file.
#[derive(Debug, Clone, Copy)]
struct Slot {
    matcher: Span,
    rest: Option<Span>,
}

/// Why the scratch file cannot hold the recording; reported when the
/// recording is written.
#[derive(Debug, thiserror::Error)]
enum ScratchError {
    #[error("cannot create a scratch file: {0}")]
    Create(std::io::Error),
    #[error("cannot write the scratch file: {0}")]
    Write(std::io::Error),
}

struct RecorderState {
    /// An unlinked file beside the recording (nothing is left behind if
    /// the process is killed); `Err` says why it could not be made or
    /// written, and is reported when the recording is written.
    scratch: Result<std::fs::File, ScratchError>,
    end: u64,
    calls: BTreeMap<u64, Slot>,
}

impl RecorderState {
    /// Appends what `write` writes to the scratch file.
    fn append(
        &mut self,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Option<Span> {
        let file = self.scratch.as_mut().ok()?;
        let mut out = std::io::BufWriter::new(file);
        let res = write(&mut out).and_then(|()| out.flush());
        drop(out);
        let end = self.scratch.as_mut().ok()?.stream_position();
        match res.and(end) {
            Ok(end) => {
                let span = Span {
                    offset: self.end,
                    len: end - self.end,
                };
                self.end = end;
                Some(span)
            }
            Err(e) => {
                self.scratch = Err(ScratchError::Write(e));
                None
            }
        }
    }
}

/// The `match` object of a call's entry, by reference.
#[derive(serde::Serialize)]
struct MatchRef<'a> {
    prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
}

/// The rest of an entry after its `match`: the answer, its usage and
/// `"times":1`, without the surrounding braces.
fn rest_text(outcome: &Outcome, usage: Option<Usage>) -> String {
    let mut m = Map::new();
    let (k, v) = match outcome {
        Outcome::Text(t) => ("text", Value::from(t.as_str())),
        Outcome::Structured(v) => ("structured", v.clone()),
        Outcome::Fail(r) => ("fail", Value::from(r.as_str())),
        Outcome::StartError(r) => ("startError", Value::from(r.as_str())),
        Outcome::ResultError(r) => ("resultError", Value::from(r.as_str())),
        // It never answered: replaying it waits the same way.
        Outcome::Cancelled => ("hang", Value::Bool(true)),
    };
    m.insert(k.into(), v);
    if let Some(u) = usage {
        m.insert("usage".into(), json!(u));
    }
    m.insert("times".into(), 1.into());
    let object = Value::Object(m).to_string();
    // `{…}` → `…`: spliced after the `match` member.
    object[1..object.len() - 1].to_string()
}

/// `--record`, written as the run goes: each call's `match` goes to a
/// scratch file when it starts and its answer when it settles, so the host
/// holds no prompt or answer for the recording, and [`Recorder::write`]
/// assembles the fixture in call order from the scratch file, one piece
/// at a time.
pub struct Recorder {
    state: Mutex<RecorderState>,
}

impl Recorder {
    /// A recorder for a fixture to be written to `path`.
    pub fn new(path: &Path) -> Self {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // Beside the target (same filesystem, so the space it needs is
        // the space the recording will need); else the system's temp dir,
        // and the write then reports the target's own problem.
        let scratch = tempfile::tempfile_in(dir)
            .or_else(|_| tempfile::tempfile())
            .map_err(ScratchError::Create);
        Recorder {
            state: Mutex::new(RecorderState {
                scratch,
                end: 0,
                calls: BTreeMap::new(),
            }),
        }
    }

    /// A call started: its `match` is written now. Until it settles it is
    /// recorded as `hang`.
    pub fn start(&self, seq: u64, prompt: &str, schema: Option<&Value>, model: Option<&str>) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let matcher = MatchRef {
            prompt,
            schema,
            model,
        };
        if let Some(matcher) = st.append(|w| serde_json::to_writer(w, &matcher).map_err(Into::into))
        {
            st.calls.insert(
                seq,
                Slot {
                    matcher,
                    rest: None,
                },
            );
        }
    }

    /// A started call settled with `outcome`.
    pub fn settle(&self, seq: u64, outcome: &Outcome, usage: Option<Usage>) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if !st.calls.contains_key(&seq) {
            return;
        }
        let text = rest_text(outcome, usage);
        if let Some(rest) = st.append(|w| w.write_all(text.as_bytes()))
            && let Some(slot) = st.calls.get_mut(&seq)
        {
            slot.rest = Some(rest);
        }
    }

    /// Writes the fixture to `path` atomically: the calls in call order,
    /// each copied from the scratch file, each still open as `hang`.
    pub fn write(&self, path: &Path) -> Result<(), JournalError> {
        let st = self.state.lock().map_err(|_| {
            JournalError::io(path, std::io::Error::other("the recorder was poisoned"))
        })?;
        let scratch = st
            .scratch
            .as_ref()
            .map_err(|e| JournalError::io(path, std::io::Error::other(e.to_string())))?;
        let hang = rest_text(&Outcome::Cancelled, None);
        replace_file_with(path, true, |file| {
            let mut out = std::io::BufWriter::new(file);
            let mut buf = Vec::new();
            let mut copy = |out: &mut dyn Write, span: Span| -> std::io::Result<()> {
                buf.resize(usize::try_from(span.len).map_err(std::io::Error::other)?, 0);
                scratch.read_exact_at(&mut buf, span.offset)?;
                out.write_all(&buf)
            };
            out.write_all(b"{\"version\":1,\"answers\":[")?;
            for (i, slot) in st.calls.values().enumerate() {
                out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
                out.write_all(b"{\"match\":")?;
                copy(&mut out, slot.matcher)?;
                out.write_all(b",")?;
                match slot.rest {
                    Some(rest) => copy(&mut out, rest)?,
                    None => out.write_all(hang.as_bytes())?,
                }
                out.write_all(b"}")?;
            }
            out.write_all(b"\n]}\n")?;
            out.flush()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_providers::scripted::ScriptedProvider;

    #[test]
    fn a_recording_is_a_valid_fixture_with_exact_matches_in_call_order() {
        let calls = vec![
            Recorded {
                seq: 1,
                prompt: "plan".into(),
                schema: None,
                model: Some("m1".into()),
                outcome: Outcome::Text("1. parse".into()),
                usage: Some(Usage::new(3, 4)),
            },
            Recorded {
                seq: 2,
                prompt: "check".into(),
                schema: Some(json!({"type": "object"})),
                model: None,
                outcome: Outcome::Structured(json!({"ok": true})),
                usage: None,
            },
            Recorded {
                seq: 3,
                prompt: "refuse".into(),
                schema: None,
                model: None,
                outcome: Outcome::Fail("no".into()),
                usage: None,
            },
            Recorded {
                seq: 4,
                prompt: "stuck".into(),
                schema: None,
                model: None,
                outcome: Outcome::Cancelled,
                usage: None,
            },
        ];
        let doc = fixture(&calls);
        assert_eq!(
            doc["answers"][0]["match"],
            json!({"prompt": "plan", "model": "m1"})
        );
        assert_eq!(doc["answers"][0]["usage"], json!({"input": 3, "output": 4}));
        assert_eq!(doc["answers"][1]["structured"], json!({"ok": true}));
        assert_eq!(doc["answers"][3]["hang"], json!(true));
        assert!(
            doc["answers"]
                .as_array()
                .expect("answers")
                .iter()
                .all(|a| a["times"] == 1)
        );
        ScriptedProvider::from_json_text("rec.json", &doc.to_string()).expect("a valid fixture");
        // The recorder streams exactly this document.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        let rec = Recorder::new(&path);
        for c in &calls {
            rec.start(c.seq, &c.prompt, c.schema.as_ref(), c.model.as_deref());
            if c.outcome != Outcome::Cancelled {
                rec.settle(c.seq, &c.outcome, c.usage);
            }
        }
        rec.write(&path).expect("write");
        let streamed: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
        assert_eq!(streamed, doc);
    }

    #[test]
    fn the_recorder_writes_calls_in_call_order_and_open_ones_as_hang() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        let rec = Recorder::new(&path);
        let call = |seq: u64, prompt: &str, outcome: Outcome| Recorded {
            seq,
            prompt: prompt.into(),
            schema: None,
            model: None,
            outcome,
            usage: None,
        };
        for seq in 1..=3 {
            rec.start(seq, &format!("p{seq}"), None, None);
        }
        // Settled out of order; 2 never settles.
        rec.settle(3, &Outcome::Text("three".into()), None);
        rec.settle(1, &Outcome::Structured(json!({"a": [1, "\n"]})), None);
        rec.write(&path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        let doc: Value = serde_json::from_str(&text).expect("JSON");
        let expected = fixture(&[
            call(1, "p1", Outcome::Structured(json!({"a": [1, "\n"]}))),
            call(2, "p2", Outcome::Cancelled),
            call(3, "p3", Outcome::Text("three".into())),
        ]);
        assert_eq!(doc, expected);
        ScriptedProvider::from_json_text("rec.json", &text).expect("a valid fixture");
        // Nothing but the recording is left in the directory.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("rec.json")]);
    }

    #[test]
    fn a_recording_of_no_calls_is_an_empty_fixture() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        Recorder::new(&path).write(&path).expect("write");
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
        assert_eq!(doc, json!({"version": 1, "answers": []}));
    }

    /// A recording replays whatever numbers its calls' schemas hold. With
    /// serde_json's default float parser, which may be one unit in the
    /// last place off, `1.1970897358768741e-304` written by `--record` read
    /// back as another number: the recorded call no longer matched its own
    /// entry and took the next one. Found by the `fixture` fuzz target
    /// (fuzz/corpus/fixture/regress-float-schema); fixed by serde_json's
    /// `float_roundtrip` feature.
    #[tokio::test]
    async fn a_recorded_schema_with_any_float_matches_its_call_on_replay() {
        use dsh_seam::{AgentRequest, ChildResult, SubagentProvider};
        let schema =
            json!({"type": "object", "properties": {"n": {"const": 1.1970897358768741e-304}}});
        let calls = vec![
            Recorded {
                seq: 1,
                prompt: "p".into(),
                schema: Some(schema.clone()),
                model: None,
                outcome: Outcome::Text("first".into()),
                usage: None,
            },
            Recorded {
                seq: 2,
                prompt: "p".into(),
                schema: None,
                model: None,
                outcome: Outcome::Text("second".into()),
                usage: None,
            },
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.json");
        let rec = Recorder::new(&path);
        for c in &calls {
            rec.start(c.seq, &c.prompt, c.schema.as_ref(), c.model.as_deref());
            rec.settle(c.seq, &c.outcome, c.usage);
        }
        rec.write(&path).expect("write");
        let provider = ScriptedProvider::from_file(&path).expect("a valid fixture");
        let request = AgentRequest {
            schema: Some(schema),
            ..AgentRequest::new(1, "p", "p")
        };
        let child = provider
            .start(request, tokio_util::sync::CancellationToken::new())
            .await
            .expect("the recorded answer");
        let outcome = child.result().await.expect("an answer");
        assert!(
            matches!(&outcome.result, ChildResult::Text(t) if t == "first"),
            "{:?}",
            outcome.result
        );
    }
}
