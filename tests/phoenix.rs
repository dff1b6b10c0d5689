//! A real trace viewer: a run exported to Arize Phoenix (PyPI
//! `arize-phoenix`, on loopback) and read back through Phoenix's REST API.
//!
//! Phoenix is large (about 850 MB installed), so `.ci/run` does not
//! install it: this test runs where it is installed — `$DSH_TEST_PHOENIX`
//! (its `phoenix` program), or `~/.cache/dsh-phoenix/bin/phoenix`
//! (`python3 -m venv ~/.cache/dsh-phoenix && ~/.cache/dsh-phoenix/bin/pip
//! install arize-phoenix`) — and says so and passes elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::DSH;

fn phoenix() -> Option<PathBuf> {
    let program = std::env::var_os("DSH_TEST_PHOENIX").map_or_else(
        || {
            let home =
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
            home.join(".cache/dsh-phoenix/bin/phoenix")
        },
        PathBuf::from,
    );
    if program.is_file() {
        Some(program)
    } else {
        eprintln!(
            "SKIPPED: no Arize Phoenix at {} (see this file's docs)",
            program.display()
        );
        None
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(url: &str) -> Option<Value> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", url])
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

#[test]
fn a_run_reads_back_as_one_trace_in_phoenix() {
    let Some(program) = phoenix() else { return };
    let work = tempfile::tempdir().unwrap();
    let (port, grpc) = (free_port(), free_port());
    let mut server = common::Ended(
        Command::new(&program)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", work.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("DO_NOT_TRACK", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(180);
    while get(&format!("{base}/v1/projects")).is_none() {
        assert!(Instant::now() < deadline, "Phoenix did not start");
        assert!(server.0.try_wait().unwrap().is_none(), "Phoenix exited");
        std::thread::sleep(Duration::from_millis(250));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("wf.ts"),
        "export const meta = { name: \"seen-in-phoenix\", description: \"d\" };\nphase(\"Ask\");\nconst r = await parallel([() => agent(\"one\", { label: \"one\" }), () => agent(\"two\", { label: \"two\" })]);\nreturn r;\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("fx.json"),
        r#"{"version": 1, "answers": [{"match": {}, "text": "ok", "usage": {"input": 5, "output": 1}}]}"#,
    )
    .unwrap();
    let out = Command::new(DSH)
        .args([
            "workflow",
            "run",
            "wf.ts",
            "--fixture",
            "fx.json",
            "--events",
            "none",
        ])
        .current_dir(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &base)
        .env("OTEL_METRICS_EXPORTER", "none")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("telemetry:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Phoenix ingests in the background: read until the four spans are in.
    let deadline = Instant::now() + Duration::from_secs(60);
    let spans = loop {
        let spans = get(&format!("{base}/v1/projects/default/spans?limit=100"))
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default();
        if spans.len() >= 4 {
            break spans;
        }
        assert!(Instant::now() < deadline, "Phoenix has {spans:?}");
        std::thread::sleep(Duration::from_millis(250));
    };
    let id_of = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {spans:?}"))
    };
    let run = id_of("invoke_workflow seen-in-phoenix");
    let phase = id_of("phase Ask");
    let one = id_of("invoke_agent one");
    let two = id_of("invoke_agent two");
    assert_eq!(phase["parent_id"], run["context"]["span_id"]);
    assert_eq!(one["parent_id"], phase["context"]["span_id"]);
    assert_eq!(two["parent_id"], phase["context"]["span_id"]);
    assert_eq!(one["context"]["trace_id"], run["context"]["trace_id"]);
    assert_eq!(one["attributes"]["gen_ai.usage.input_tokens"], 5);
    drop(server);
}
