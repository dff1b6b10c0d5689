//! OpenTelemetry export of runs, against an OTLP/HTTP receiver in the test
//! (protobuf decoded with the OTLP protobuf types, JSON read as JSON): the
//! span tree and its parent links, the GenAI attributes, a failed call's
//! status, content absent by default and present when opted in, metrics,
//! a nested workflow under its caller, a collector that is down or that
//! never answers (the run is not slowed past the bound; it says so), and
//! telemetry off when disabled.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../providers/src/openai/test_server.rs"]
mod test_server;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message as _;
use serde_json::{Value, json};

use common::DSH;

/// One request the receiver took.
#[derive(Debug, Clone)]
struct Posted {
    path: String,
    content_type: String,
    /// Every header line, lower-cased.
    headers: Vec<String>,
    body: Vec<u8>,
}

/// An OTLP/HTTP receiver on a free loopback port. `answer: false` makes a
/// collector that takes connections and never answers.
struct Receiver {
    addr: String,
    posted: Arc<Mutex<Vec<Posted>>>,
}

impl Receiver {
    fn start(answer: bool) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let posted = Arc::new(Mutex::new(Vec::new()));
        let keep = posted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let keep = keep.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                        let (mut len, mut ct) = (0usize, String::new());
                        let mut headers = Vec::new();
                        loop {
                            let mut h = String::new();
                            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                                return;
                            }
                            let h = h.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            let lower = h.to_ascii_lowercase();
                            headers.push(lower.clone());
                            if let Some(v) = lower.strip_prefix("content-length:") {
                                len = v.trim().parse().unwrap_or(0);
                            }
                            if let Some(v) = lower.strip_prefix("content-type:") {
                                ct = v.trim().to_string();
                            }
                        }
                        let mut body = vec![0; len];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        if !answer {
                            // Holds the connection, says nothing.
                            std::thread::sleep(Duration::from_secs(3600));
                            return;
                        }
                        keep.lock().unwrap().push(Posted {
                            path,
                            content_type: ct.clone(),
                            headers,
                            body,
                        });
                        let reply = if ct.contains("json") { "{}" } else { "" };
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n{reply}",
                            if ct.contains("json") {
                                "application/json"
                            } else {
                                "application/x-protobuf"
                            },
                            reply.len()
                        );
                    }
                });
            }
        });
        Receiver { addr, posted }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn posted(&self, path: &str) -> Vec<Posted> {
        self.posted
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.path == path)
            .cloned()
            .collect()
    }
}

/// A span as the tests read it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    id: String,
    parent: String,
    trace: String,
    attrs: serde_json::Map<String, Value>,
    error: Option<String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn any_value(v: &opentelemetry_proto::tonic::common::v1::AnyValue) -> Value {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    match &v.value {
        Some(V::StringValue(s)) => json!(s),
        Some(V::BoolValue(b)) => json!(b),
        Some(V::IntValue(i)) => json!(i),
        Some(V::DoubleValue(d)) => json!(d),
        other => json!(format!("{other:?}")),
    }
}

/// Every span of every protobuf or JSON traces request.
fn spans(posted: &[Posted]) -> Vec<Span> {
    let mut all = Vec::new();
    for p in posted {
        if p.content_type.contains("json") {
            let doc: Value = serde_json::from_slice(&p.body).unwrap();
            for rs in doc["resourceSpans"].as_array().unwrap() {
                for ss in rs["scopeSpans"].as_array().unwrap() {
                    for s in ss["spans"].as_array().unwrap() {
                        let mut attrs = serde_json::Map::new();
                        for a in s["attributes"].as_array().into_iter().flatten() {
                            let v = a["value"].as_object().unwrap().values().next().unwrap();
                            attrs.insert(a["key"].as_str().unwrap().into(), v.clone());
                        }
                        all.push(Span {
                            name: s["name"].as_str().unwrap().into(),
                            id: s["spanId"].as_str().unwrap().to_lowercase(),
                            parent: s["parentSpanId"].as_str().unwrap_or("").to_lowercase(),
                            trace: s["traceId"].as_str().unwrap().to_lowercase(),
                            attrs,
                            error: (s["status"]["code"] == 2)
                                .then(|| s["status"]["message"].as_str().unwrap_or("").into()),
                        });
                    }
                }
            }
        } else {
            let req = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
                &p.body[..],
            )
            .unwrap();
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        let attrs = s
                            .attributes
                            .iter()
                            .map(|kv| {
                                (
                                    kv.key.clone(),
                                    kv.value.as_ref().map_or(Value::Null, any_value),
                                )
                            })
                            .collect();
                        let error = s
                            .status
                            .as_ref()
                            .filter(|st| st.code == 2)
                            .map(|st| st.message.clone());
                        all.push(Span {
                            name: s.name,
                            id: hex(&s.span_id),
                            parent: hex(&s.parent_span_id),
                            trace: hex(&s.trace_id),
                            attrs,
                            error,
                        });
                    }
                }
            }
        }
    }
    all
}

const SCRIPT: &str = r#"export const meta = { name: "traced", description: "a traced run" };
phase("Ask");
const [a, b] = await parallel([
  () => agent("say hello", { label: "hello" }),
  () => agent("refuse this", { label: "refused" }),
]);
return { a, b };
"#;

const FIXTURE: &str = r#"{"version": 1, "answers": [
  {"match": {"promptContains": "refuse"}, "fail": "model refused"},
  {"match": {}, "text": "hello back", "usage": {"input": 12, "output": 3, "costUsd": 0.25}}
]}"#;

/// A directory with `SCRIPT` (as `traced.ts`) and its fixture.
fn traced_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("traced.ts"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("fx.json"), FIXTURE).unwrap();
    dir
}

/// Runs `traced.ts` in `dir` with `env` and none of the `OTEL_*`
/// variables of the test's own environment; its exit code, how long it
/// took, and its stderr.
fn run_in(dir: &std::path::Path, env: &[(&str, String)]) -> (Option<i32>, Duration, String) {
    let mut c = std::process::Command::new(DSH);
    c.args([
        "workflow",
        "run",
        "traced.ts",
        "--fixture",
        "fx.json",
        "--events",
        "none",
    ])
    .current_dir(dir);
    for k in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_SDK_DISABLED",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "OTEL_SERVICE_NAME",
        "OTEL_METRICS_EXPORTER",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let started = Instant::now();
    let out = c.output().unwrap();
    (
        out.status.code(),
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `SCRIPT` with `env` in a directory of its own.
fn run(env: &[(&str, String)]) -> (tempfile::TempDir, Option<i32>, Duration, String) {
    let dir = traced_dir();
    let (code, took, err) = run_in(dir.path(), env);
    (dir, code, took, err)
}

/// Waits (bounded) until the receiver has traces.
fn traces_of(r: &Receiver) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = spans(&r.posted("/v1/traces"));
        if s.iter().any(|s| s.name.starts_with("invoke_workflow")) {
            return s;
        }
        assert!(Instant::now() < deadline, "no trace arrived");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn by_name<'a>(all: &'a [Span], name: &str) -> &'a Span {
    all.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name}: {all:#?}"))
}

#[test]
fn a_run_is_one_trace_with_the_genai_attributes() {
    let r = Receiver::start(true);
    let (_dir, code, _, err) = run(&[("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint())]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !err.contains("telemetry:"),
        "all delivered, nothing said: {err}"
    );
    let all = traces_of(&r);
    assert!(
        r.posted("/v1/traces")
            .iter()
            .all(|p| p.content_type == "application/x-protobuf"),
        "protobuf is the default"
    );
    let run = by_name(&all, "invoke_workflow traced");
    let phase = by_name(&all, "phase Ask");
    let hello = by_name(&all, "invoke_agent hello");
    let refused = by_name(&all, "invoke_agent refused");
    // One trace; run → phase → agents.
    assert!(all.iter().all(|s| s.trace == run.trace), "{all:#?}");
    assert!(
        run.parent.is_empty() || run.parent.chars().all(|c| c == '0'),
        "{run:?}"
    );
    assert_eq!(phase.parent, run.id);
    assert_eq!(hello.parent, phase.id);
    assert_eq!(refused.parent, phase.id);
    assert_eq!(run.attrs["gen_ai.operation.name"], "invoke_workflow");
    assert_eq!(run.attrs["gen_ai.agent.name"], "traced");
    assert_eq!(run.attrs["dsh.stop_reason"], "completed");
    assert_eq!(hello.attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(hello.attrs["gen_ai.agent.name"], "hello");
    assert_eq!(hello.attrs["gen_ai.provider.name"], "fixture");
    assert_eq!(hello.attrs["gen_ai.usage.input_tokens"], 12);
    assert_eq!(hello.attrs["gen_ai.usage.output_tokens"], 3);
    assert_eq!(hello.attrs["dsh.cost_usd"], 0.25);
    assert_eq!(hello.attrs["dsh.agent.replayed"], false);
    assert_eq!(hello.error, None);
    // A failed call: error status with the reason, and its type.
    assert_eq!(refused.attrs["dsh.agent.outcome"], "failed");
    assert_eq!(refused.attrs["error.type"], "failed");
    assert!(
        refused
            .error
            .as_deref()
            .is_some_and(|m| m.contains("model refused")),
        "{refused:?}"
    );
    // Content is not exported unless asked for.
    assert!(
        all.iter()
            .all(|s| !s.attrs.contains_key("gen_ai.input.messages")
                && !s.attrs.contains_key("gen_ai.output.messages")),
        "{all:#?}"
    );
    // Metrics came too.
    let deadline = Instant::now() + Duration::from_secs(30);
    while r.posted("/v1/metrics").is_empty() {
        assert!(Instant::now() < deadline, "no metrics arrived");
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics =
        opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest::decode(
            &r.posted("/v1/metrics")[0].body[..],
        )
        .unwrap();
    let names: Vec<String> = metrics
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .map(|m| m.name.clone())
        .collect();
    for want in [
        "dsh.workflow.runs",
        "dsh.agent.calls",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "dsh.agent.cost",
    ] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
}

#[test]
fn content_is_exported_when_opted_in_over_json() {
    let r = Receiver::start(true);
    let (_dir, code, _, err) = run(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".into()),
        (
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
            "true".into(),
        ),
        ("OTEL_SERVICE_NAME", "my-workflows".into()),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let all = traces_of(&r);
    assert!(
        r.posted("/v1/traces")
            .iter()
            .all(|p| p.content_type == "application/json")
    );
    let hello = by_name(&all, "invoke_agent hello");
    let input = hello.attrs["gen_ai.input.messages"].as_str().unwrap();
    assert!(input.contains("say hello"), "{input}");
    let output = hello.attrs["gen_ai.output.messages"].as_str().unwrap();
    assert!(output.contains("hello back"), "{output}");
    let body: Value = serde_json::from_slice(&r.posted("/v1/traces")[0].body).unwrap();
    assert!(
        body.to_string().contains("\"my-workflows\""),
        "OTEL_SERVICE_NAME is the service: {body}"
    );
}

#[test]
fn a_nested_workflow_is_a_child_of_its_caller() {
    let r = Receiver::start(true);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("child.ts"),
        "export const meta = { name: \"child\", description: \"c\" };\nphase(\"Inner\");\nreturn await agent(\"inner call\", { label: \"inner\" });\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("parent.ts"),
        "phase(\"Outer\");\nconst v = await workflow({ scriptPath: \"child.ts\" });\nreturn v;\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("fx.json"), FIXTURE).unwrap();
    let out = std::process::Command::new(DSH)
        .args([
            "workflow",
            "run",
            "parent.ts",
            "--fixture",
            "fx.json",
            "--events",
            "none",
        ])
        .current_dir(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint())
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let all = traces_of(&r);
    let outer = by_name(&all, "phase Outer");
    let child = by_name(&all, "invoke_workflow child");
    let inner_phase = by_name(&all, "phase Inner");
    let inner = by_name(&all, "invoke_agent inner");
    assert_eq!(child.parent, outer.id, "{all:#?}");
    assert_eq!(inner_phase.parent, child.id, "{all:#?}");
    assert_eq!(inner.parent, inner_phase.id, "{all:#?}");
}

#[test]
fn a_collector_that_is_down_or_silent_does_not_hold_the_run() {
    // Down: nothing listens on the port.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (_dir, code, took, err) = run(&[(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{port}"),
    )]);
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // Counted: the run, its phase and its two calls.
    assert!(
        err.contains("telemetry: 4 of the run's 4 spans were not delivered to the collector: "),
        "the loss is counted and said: {err}"
    );
    // Silent: takes the request, never answers. The run's value is out,
    // and the CLI says the spans were dropped, within its bound.
    let silent = Receiver::start(false);
    let (_dir, code, took, err) = run(&[("OTEL_EXPORTER_OTLP_ENDPOINT", silent.endpoint())]);
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(
        err.contains("telemetry: 4 of the run's 4 spans were not delivered to the collector"),
        "the loss is counted and said: {err}"
    );
}

#[test]
fn disabled_or_unconfigured_telemetry_sends_nothing() {
    let r = Receiver::start(true);
    let (_dir, code, _, err) = run(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint()),
        ("OTEL_SDK_DISABLED", "true".into()),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (_dir, code, _, err) = run(&[]);
    assert_eq!(code, Some(0), "{err}");
    // Nothing could have been sent by a run that has ended.
    assert!(r.posted.lock().unwrap().is_empty());
    // A protocol dsh does not export is said, and the run goes on.
    let (_dir, code, _, err) = run(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\""),
        "{err}"
    );
}

/// A call's program gets `TRACEPARENT` naming the run's trace and the
/// call's own span, so its spans nest under the call (Claude Code reads
/// it): a `command` provider that prints it is the witness.
#[test]
fn a_calls_program_gets_the_traceparent_of_its_span() {
    let r = Receiver::start(true);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("dsh.toml"),
        "[workflow]\nprovider = \"echo\"\n\n[providers.echo]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"printf %s \\\"$TRACEPARENT\\\"\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tp.ts"),
        "phase(\"P\");\nreturn await agent(\"who is my parent?\", { label: \"child\" });\n",
    )
    .unwrap();
    let out = std::process::Command::new(DSH)
        .args(["workflow", "run", "tp.ts", "--events", "none"])
        .current_dir(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint())
        .env(
            "TRACEPARENT",
            "00-11111111111111111111111111111111-2222222222222222-01",
        )
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said: String = serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    let all = traces_of(&r);
    let call = by_name(&all, "invoke_agent child");
    assert_eq!(
        said,
        format!("00-{}-{}-01", call.trace, call.id),
        "{all:#?}"
    );
    // Without telemetry, nothing is added (a TRACEPARENT of dsh's own
    // environment is not passed to the program either).
    let out = std::process::Command::new(DSH)
        .args(["workflow", "run", "tp.ts", "--events", "none"])
        .current_dir(dir.path())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env(
            "TRACEPARENT",
            "00-11111111111111111111111111111111-2222222222222222-01",
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "\"\"");
}

/// `[telemetry]` in dsh.toml configures what the variables do not: the
/// endpoint, the protocol, headers, the service name, content capture.
#[test]
fn dsh_toml_configures_telemetry_when_the_variables_do_not() {
    let r = Receiver::start(true);
    let dir = traced_dir();
    std::fs::write(
        dir.path().join("dsh.toml"),
        format!(
            "[telemetry]\nendpoint = \"{}/\"\nprotocol = \"http/json\"\nservice_name = \"from-the-file\"\ncapture_content = true\n\n[telemetry.headers]\nx-api-key = \"secret-key\"\n",
            r.endpoint()
        ),
    )
    .unwrap();
    let (code, _, err) = run_in(dir.path(), &[]);
    assert_eq!(code, Some(0), "{err}");
    let all = traces_of(&r);
    let posted = r.posted("/v1/traces");
    assert!(posted.iter().all(|p| p.content_type == "application/json"));
    let body = String::from_utf8_lossy(&posted[0].body);
    assert!(body.contains("\"from-the-file\""), "{body}");
    assert!(
        posted[0]
            .headers
            .iter()
            .any(|h| h == "x-api-key: secret-key"),
        "{:?}",
        posted[0].headers
    );
    let hello = by_name(&all, "invoke_agent hello");
    assert!(
        hello.attrs["gen_ai.input.messages"]
            .as_str()
            .is_some_and(|m| m.contains("say hello")),
        "{hello:?}"
    );
    // The variables come first: OTEL_SDK_DISABLED turns the file's off.
    let before = r.posted.lock().unwrap().len();
    let (code, _, err) = run_in(dir.path(), &[("OTEL_SDK_DISABLED", "true".into())]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(r.posted.lock().unwrap().len(), before);
}

/// The built-in agent loop's model turns are `chat` spans under the call,
/// and its tool calls `execute_tool` spans under their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loops_turns_and_tool_calls_are_spans() {
    use test_server::{Reply, TestServer};
    let r = Receiver::start(true);
    let server = TestServer::start(vec![
        Reply::stream_tools(&[("Read", json!({ "file_path": "README.md" }))], 10, 2),
        Reply::stream_text("it says hello", 20, 4),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "hello\n").unwrap();
    std::fs::write(
        dir.path().join("dsh.toml"),
        format!(
            "[workflow]\nprovider = \"m\"\n\n[providers.m]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"DSH_TELEMETRY_KEY\"\nmodel = \"m-1\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("loop.ts"),
        "phase(\"Read\");\nreturn await agent(\"What does the README say?\", { label: \"reader\" });\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(DSH)
        .args([
            "workflow",
            "run",
            "loop.ts",
            "--events",
            "none",
            "--no-journal",
        ])
        .current_dir(dir.path())
        .env("DSH_TELEMETRY_KEY", "sk-test")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint())
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("DSH_WORKER")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let all = tokio::task::spawn_blocking(move || {
        let all = traces_of(&r);
        drop(r);
        all
    })
    .await
    .unwrap();
    let call = by_name(&all, "invoke_agent reader");
    let turns: Vec<&Span> = all.iter().filter(|s| s.name == "chat").collect();
    assert_eq!(turns.len(), 2, "{all:#?}");
    assert!(turns.iter().all(|t| t.parent == call.id), "{all:#?}");
    let tool = by_name(&all, "execute_tool Read");
    assert_eq!(tool.attrs["gen_ai.tool.name"], "Read");
    assert_eq!(tool.attrs["dsh.tool.status"], "ok");
    assert_eq!(tool.attrs["dsh.tool.denied"], false);
    let first = turns.iter().find(|t| t.attrs["dsh.turn"] == 1).unwrap();
    assert_eq!(tool.parent, first.id, "{all:#?}");
}
