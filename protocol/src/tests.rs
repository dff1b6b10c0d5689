//! Round-trip and malformed-input tests for every message.

use rstest::rstest;

use crate::*;

fn sample_init() -> Init {
    Init {
        run_id: "run-1".into(),
        script_name: "review.ts".into(),
        script_js: "(async function () {\nreturn 1\n})".into(),
        meta_json: r#"{"name":"n","description":"d"}"#.into(),
        args: Args::Json(r#"{"files":["a.rs"]}"#.into()),
        limits: Limits {
            max_concurrent_agents: 16,
            max_total_agents: 1000,
            max_items_per_call: 4096,
            sync_timeout_ms: 30_000,
            budget_tokens: Some(100),
            memory_bytes: 256 << 20,
            compute_ms: None,
            log_bytes: 1 << 20,
            cancel_interrupt_ms: 250,
        },
    }
}

fn request() -> ChildRequest {
    ChildRequest {
        prompt: "Review a.rs".into(),
        label: "a.rs".into(),
        phase: Some("Review".into()),
        schema_json: Some(r#"{"type":"object"}"#.into()),
        options: AgentOptions {
            model: Some("haiku".into()),
            provider: None,
            effort: Some("low".into()),
            agent_type: Some("x:y".into()),
            isolation: None,
            stall_ms: None,
            disallowed_tools: None,
            shared_head_length: Some(20_000),
        },
        workflow: None,
    }
}

/// The prelude's JSON spelling of a request reads into the same struct
/// the wire carries.
#[test]
fn a_request_reads_from_the_preludes_json() {
    let json = r#"{"prompt":"Review a.rs","label":"a.rs","phase":"Review",
        "schema":"{\"type\":\"object\"}",
        "options":{"model":"haiku","provider":null,"effort":"low","agentType":"x:y","isolation":null,
        "sharedHeadLength":20000}}"#;
    let parsed: ChildRequest = serde_json::from_str(json).expect("prelude JSON");
    assert_eq!(parsed, request());
}

/// `stallMs` and `disallowedTools` read from the prelude's JSON; a request
/// written without them (an older prelude) reads as not given.
#[test]
fn stall_ms_and_disallowed_tools_read_from_the_preludes_json() {
    let json = r#"{"prompt":"p","label":"l","phase":null,"schema":null,
        "options":{"model":null,"provider":null,"effort":null,"agentType":null,"isolation":null,
        "stallMs":300,"disallowedTools":["Bash"]}}"#;
    let parsed: ChildRequest = serde_json::from_str(json).expect("prelude JSON");
    assert_eq!(parsed.options.stall_ms, Some(300));
    assert_eq!(
        parsed.options.disallowed_tools,
        Some(vec!["Bash".to_string()])
    );
    let old = r#"{"prompt":"p","label":"l","phase":null,"schema":null,"options":{}}"#;
    let parsed: ChildRequest = serde_json::from_str(old).expect("older JSON");
    assert_eq!(parsed.options, AgentOptions::default());
    // And they cross the wire.
    let mut r = request();
    r.options.stall_ms = Some(u64::MAX);
    r.options.disallowed_tools = Some(vec!["Bash".into(), "Edit".into()]);
    let msg = WorkerMsg::ChildStart {
        call_id: 1,
        request: r,
    };
    let bytes = encode(&msg, DEFAULT_MAX_FRAME_BYTES).expect("encode");
    assert_eq!(decode::<WorkerMsg>(&bytes[4..]).expect("decode"), msg);
}

#[rstest]
#[case::hello(WorkerMsg::Hello { protocol_version: PROTOCOL_VERSION, pid: 42 })]
#[case::ready(WorkerMsg::Ready { sandbox: SandboxReport { level: SandboxLevel::Partial, landlock_abi: Some(6), enforced: vec!["fs".into()], missing: vec!["landlock:scope (needs ABI 6)".into()] } })]
#[case::phase(WorkerMsg::Phase { title: "Review ✓".into(), workflow: None })]
#[case::child_phase(WorkerMsg::Phase { title: "Scan".into(), workflow: Some("child".into()) })]
#[case::log(WorkerMsg::Log { message: "line\nwith newline".into(), workflow: None })]
#[case::workflow_load(WorkerMsg::WorkflowLoad { call_id: 1, target: WorkflowTarget::Name("review".into()) })]
#[case::workflow_load_path(WorkerMsg::WorkflowLoad { call_id: 2, target: WorkflowTarget::ScriptPath("sub/x.js".into()) })]
#[case::child_start(WorkerMsg::ChildStart { call_id: 7, request: request() })]
#[case::child_queued(WorkerMsg::ChildQueued { call_id: 17, label: "review a.rs".into(), phase: Some("Review".into()), workflow: None })]
#[case::end_completed(WorkerMsg::End { result: EndResult { outcome: EndOutcome::Completed { value_json: "[1,2]".into() }, agents_started: 3, log_bytes_dropped: 0, sandbox: None } })]
#[case::end_error(WorkerMsg::End { result: EndResult { outcome: EndOutcome::Failed { error: WireError { code: ErrorCode::ScriptError, message: "boom".into() } }, agents_started: 0, log_bytes_dropped: 9, sandbox: None } })]
#[case::end_cancelled(WorkerMsg::End { result: EndResult { outcome: EndOutcome::Cancelled { error: WireError { code: ErrorCode::Timeout, message: "wall".into() } }, agents_started: 2, log_bytes_dropped: 0, sandbox: None } })]
fn worker_messages_round_trip(#[case] msg: WorkerMsg) {
    let bytes = encode(&msg, DEFAULT_MAX_FRAME_BYTES).expect("encode");
    let mut buf = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
    buf.push(&bytes);
    assert_eq!(buf.next_msg::<WorkerMsg>().expect("decode"), Some(msg));
    assert_eq!(buf.next_frame().expect("empty"), None);
    buf.finish().expect("nothing left over");
}

#[rstest]
#[case::init(HostMsg::Init(Box::new(sample_init())))]
#[case::go(HostMsg::Go)]
#[case::cancel(HostMsg::Cancel { reason: CancelReason::Requested("user".into()) })]
#[case::cancel_wall(HostMsg::Cancel { reason: CancelReason::WallTimeout { limit_ms: 500 } })]
#[case::started(HostMsg::ChildStarted { call_id: 1, child_id: "c-1".into() })]
#[case::start_error(HostMsg::ChildStartError { call_id: 1, code: ErrorCode::AgentStart, message: "quota".into() })]
#[case::settled_text(HostMsg::ChildSettled { call_id: 1, outcome: ChildOutcome::Text("hi".into()), usage: Some(Usage::new(1, 2)) })]
#[case::settled_costed(HostMsg::ChildSettled { call_id: 1, outcome: ChildOutcome::Text("hi".into()), usage: Some(Usage { input: 10, output: 2, cache_read: 7, cache_write: 1, cost_usd: Some(0.25) }) })]
#[case::settled_structured(HostMsg::ChildSettled { call_id: 1, outcome: ChildOutcome::Structured("{}".into()), usage: None })]
#[case::settled_failed(HostMsg::ChildSettled { call_id: 1, outcome: ChildOutcome::Failed("refused".into()), usage: None })]
#[case::settled_cancelled(HostMsg::ChildSettled { call_id: 1, outcome: ChildOutcome::Cancelled, usage: None })]
#[case::failed(HostMsg::ChildFailed { call_id: 2, message: "reset".into() })]
#[case::workflow_loaded(HostMsg::WorkflowLoaded { call_id: 1, workflow: LoadedWorkflow { name: "review".into(), script_name: ".claude/workflows/review.js".into(), script_js: "(function () {})".into() } })]
#[case::workflow_load_error(HostMsg::WorkflowLoadError { call_id: 1, code: ErrorCode::InvalidArgument, message: "no workflow".into() })]
fn host_messages_round_trip(#[case] msg: HostMsg) {
    let bytes = encode(&msg, DEFAULT_MAX_FRAME_BYTES).expect("encode");
    let mut buf = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
    // Byte by byte: a frame split anywhere still decodes once complete.
    for (i, b) in bytes.iter().enumerate() {
        buf.push(std::slice::from_ref(b));
        let got = buf.next_msg::<HostMsg>().expect("decode");
        if i + 1 < bytes.len() {
            assert_eq!(got, None);
        } else {
            assert_eq!(got, Some(msg.clone()));
        }
    }
}

#[test]
fn end_outcomes_report_their_stop_reason_and_error() {
    let done = EndResult::new(EndOutcome::completed("1"), 4);
    assert_eq!(done.stop(), StopReason::Completed);
    assert_eq!(done.outcome.error(), None);
    assert_eq!((done.agents_started, done.log_bytes_dropped), (4, 0));

    let failed = EndOutcome::failed(ErrorCode::Memory, "full");
    assert_eq!(failed.stop(), StopReason::Error);
    assert_eq!(
        failed.error(),
        Some(&WireError {
            code: ErrorCode::Memory,
            message: "full".into()
        })
    );

    let cancelled = EndOutcome::cancelled(ErrorCode::Cancelled, "user");
    assert_eq!(cancelled.stop(), StopReason::Cancelled);
    assert_eq!(
        cancelled.error().map(|e| e.code),
        Some(ErrorCode::Cancelled)
    );
}

#[test]
fn every_sandbox_policy_round_trips_through_its_name() {
    let names: Vec<&str> = SandboxPolicy::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(names, ["strict", "best-effort", "off"]);
    for policy in SandboxPolicy::ALL {
        assert_eq!(policy.as_str().parse::<SandboxPolicy>(), Ok(policy));
        assert_eq!(policy.to_string(), policy.as_str());
    }
    let err = "Strict"
        .parse::<SandboxPolicy>()
        .expect_err("names are lower case");
    assert_eq!(err.name, "Strict");
    let text = err.to_string();
    for policy in SandboxPolicy::ALL {
        assert!(text.contains(policy.as_str()), "{text}");
    }
}

#[test]
fn oversized_header_is_rejected_before_buffering_the_body() {
    let mut buf = FrameBuffer::new(1024);
    buf.push(&u32::MAX.to_le_bytes());
    assert_eq!(
        buf.next_frame(),
        Err(FrameError::Oversized {
            len: u32::MAX as usize,
            max: 1024
        })
    );
}

#[test]
fn truncated_stream_is_reported_at_finish() {
    let bytes = encode(
        &WorkerMsg::Log {
            message: "hello".into(),
            workflow: None,
        },
        1024,
    )
    .expect("encode");
    let mut buf = FrameBuffer::new(1024);
    buf.push(&bytes[..bytes.len() - 2]);
    assert_eq!(buf.next_frame(), Ok(None));
    assert!(matches!(buf.finish(), Err(FrameError::Truncated { .. })));
    let mut header_only = FrameBuffer::new(1024);
    header_only.push(&[1, 0]);
    assert!(matches!(
        header_only.finish(),
        Err(FrameError::Truncated { have: 2, want: 4 })
    ));
}

#[rstest]
#[case::empty_body(vec![])]
#[case::bad_variant(vec![200])]
#[case::garbage(vec![0xff; 64])]
#[case::huge_string_len(vec![3, 0xff, 0xff, 0xff, 0xff, 0x0f])]
#[case::huge_vec_len(vec![1, 0xff, 0xff, 0xff, 0xff, 0x0f])]
fn garbage_bodies_are_typed_errors(#[case] body: Vec<u8>) {
    let mut framed = (body.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&body);
    let mut buf = FrameBuffer::new(1024);
    buf.push(&framed);
    assert!(matches!(
        buf.next_msg::<WorkerMsg>(),
        Err(FrameError::Decode(_))
    ));
}

#[test]
fn trailing_bytes_after_a_message_are_rejected() {
    let mut bytes = encode(&HostMsg::Go, 1024).expect("encode");
    bytes.push(0);
    bytes[0] += 1;
    let mut buf = FrameBuffer::new(1024);
    buf.push(&bytes);
    assert!(matches!(
        buf.next_msg::<HostMsg>(),
        Err(FrameError::Decode(_))
    ));
}

#[test]
fn sender_refuses_frames_over_the_limit() {
    let msg = WorkerMsg::Log {
        message: "x".repeat(2000),
        workflow: None,
    };
    assert!(matches!(
        encode(&msg, 1000),
        Err(FrameError::TooLargeToSend { .. })
    ));
}

#[test]
fn every_random_byte_string_decodes_or_errors_without_panic() {
    // A tiny deterministic xorshift fuzz: no panics, no hangs.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 48) as usize;
        let body: Vec<u8> = (0..len)
            .map(|i| (state.rotate_left(i as u32 * 5) & 0xff) as u8)
            .collect();
        let _ = decode::<WorkerMsg>(&body);
        let _ = decode::<HostMsg>(&body);
    }
}

#[test]
fn usage_as_json_omits_what_is_zero_and_reads_older_json() {
    let u = Usage::new(3, 4);
    assert_eq!(
        serde_json::to_string(&u).expect("json"),
        r#"{"input":3,"output":4}"#
    );
    let full = Usage {
        input: 10,
        output: 2,
        cache_read: 7,
        cache_write: 1,
        cost_usd: Some(0.25),
    };
    let text = serde_json::to_string(&full).expect("json");
    assert_eq!(
        text,
        r#"{"input":10,"output":2,"cacheRead":7,"cacheWrite":1,"costUsd":0.25}"#
    );
    assert_eq!(serde_json::from_str::<Usage>(&text).expect("back"), full);
    assert_eq!(
        serde_json::from_str::<Usage>(r#"{"input":3,"output":4}"#).expect("old"),
        u
    );
}

/// A cost no figure can use (NaN, an infinity, a negative amount) is
/// refused, on the wire and in JSON: the fuzzer's frame target found a NaN
/// that decoded, then compared unequal to itself after a round trip.
#[rstest]
#[case::nan(f64::NAN)]
#[case::infinite(f64::INFINITY)]
#[case::negative(-0.5)]
fn an_unusable_cost_is_refused(#[case] cost: f64) {
    let sent = Usage {
        cost_usd: Some(cost),
        ..Usage::new(1, 2)
    };
    let body = postcard::to_allocvec(&sent).expect("encodes");
    assert!(postcard::from_bytes::<Usage>(&body).is_err());
    assert_eq!(Usage::dollars(cost), None);
    let json = serde_json::from_str::<Usage>(r#"{"input":1,"output":2,"costUsd":-0.5}"#);
    let e = json.expect_err("a negative cost").to_string();
    assert!(e.contains("costUsd must be a finite number"), "{e}");
    let zero = Usage {
        cost_usd: Some(0.0),
        ..sent
    };
    let back: Usage =
        postcard::from_bytes(&postcard::to_allocvec(&zero).expect("encodes")).expect("decodes");
    assert_eq!(back, zero);
    let huge = Usage {
        cost_usd: Some(f64::MAX),
        ..sent
    };
    assert_eq!(huge.plus(huge).cost_usd, Some(f64::MAX));
}

#[test]
fn frames_appended_to_one_buffer_decode_in_order_and_a_refused_one_leaves_it_as_it_was() {
    let mut out = Vec::new();
    encode_into(
        &WorkerMsg::ChildStart {
            call_id: 1,
            request: request(),
        },
        DEFAULT_MAX_FRAME_BYTES,
        &mut out,
    )
    .expect("encode");
    encode_into(
        &WorkerMsg::ChildStart {
            call_id: 2,
            request: request(),
        },
        DEFAULT_MAX_FRAME_BYTES,
        &mut out,
    )
    .expect("encode");
    let before = out.clone();
    let big = WorkerMsg::Log {
        message: "x".repeat(2000),
        workflow: None,
    };
    assert!(matches!(
        encode_into(&big, 1000, &mut out),
        Err(FrameError::TooLargeToSend { .. })
    ));
    assert_eq!(out, before, "a refused frame left bytes behind");
    let mut frames = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
    frames.push(&out);
    for want in [1, 2] {
        match frames.next_msg::<WorkerMsg>().expect("decodes") {
            Some(WorkerMsg::ChildStart { call_id, .. }) => assert_eq!(call_id, want),
            other => panic!("expected call {want}, got {other:?}"),
        }
    }
    assert!(frames.next_msg::<WorkerMsg>().expect("decodes").is_none());
}
