//! The provider against a scripted HTTP server on 127.0.0.1: request shape,
//! answers, the corrective retry, the retry policy, malformed responses and
//! cancellation. Every wait is bounded and synchronizes on what the server
//! or the child reports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::test_server::{BOUND, Reply, TestServer};
use super::*;
use dsh_protocol::ErrorCode;
use dsh_seam::AgentOptions;
use dsh_seam::{ChildOutcome, ChildResult, Subagent, Usage};

fn config(server: &TestServer) -> OpenAiConfig {
    OpenAiConfig {
        base_url: server.base_url(),
        model: "test-model".into(),
        api_key_env: "DSH_TEST_OPENAI_KEY".into(),
        max_attempts: 3,
        backoff: Duration::from_millis(1),
        timeout: Duration::from_secs(20),
        // One completion per call: the tool loop has its own tests
        // (agent_loop.rs).
        agent: crate::agent::LoopSettings {
            tools: Some(Vec::new()),
            ..Default::default()
        },
        ..OpenAiConfig::default()
    }
}

fn provider(cfg: &OpenAiConfig) -> OpenAiProvider {
    OpenAiProvider::with_key("p", cfg, "sk-test").expect("provider")
}

fn request(prompt: &str) -> AgentRequest {
    AgentRequest::new(1, prompt, "label")
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": { "ok": { "type": "boolean" } },
        "required": ["ok"],
        "additionalProperties": false
    })
}

fn schema_request(prompt: &str) -> AgentRequest {
    AgentRequest {
        schema: Some(schema()),
        ..request(prompt)
    }
}

async fn start(p: &OpenAiProvider, req: AgentRequest) -> Arc<dyn Subagent> {
    p.start(req, CancellationToken::new())
        .await
        .map_err(|e| e.message)
        .expect("started")
}

/// Starts a child, waits (bounded) for its outcome, disposes it.
async fn outcome(p: &OpenAiProvider, req: AgentRequest) -> ChildOutcome {
    let child = start(p, req).await;
    let out = tokio::time::timeout(BOUND, child.result())
        .await
        .expect("the child settles")
        .expect("no fault");
    child.dispose().await;
    out
}

#[track_caller]
fn failed(out: &ChildOutcome) -> &str {
    match &out.result {
        ChildResult::Failed(r) => r,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn usage(input: u64, output: u64) -> Option<Usage> {
    Some(Usage::new(input, output))
}

// ------------------------------------------------------------------ request shape

#[rstest]
#[case::plain_text(StructuredOutput::JsonObject, false, None, None, false, None)]
#[case::system_prompt(
    StructuredOutput::JsonObject,
    false,
    Some("You are terse."),
    Some("other-model"),
    false,
    None
)]
#[case::json_object(StructuredOutput::JsonObject, false, None, None, true, Some("high"))]
#[case::json_schema(
    StructuredOutput::JsonSchema,
    true,
    Some("You are terse."),
    None,
    true,
    Some("low")
)]
#[case::no_format(StructuredOutput::None, true, None, None, true, Some("max"))]
#[tokio::test]
async fn request_shape(
    #[case] mode: StructuredOutput,
    #[case] effort_supported: bool,
    #[case] system_prompt: Option<&str>,
    #[case] model: Option<&str>,
    #[case] with_schema: bool,
    #[case] effort: Option<&str>,
) {
    let answer = if with_schema { r#"{"ok":true}"# } else { "hi" };
    let server = TestServer::start(vec![Reply::chat(answer)]).await;
    let cfg = OpenAiConfig {
        structured_output: mode,
        reasoning_effort: effort_supported,
        ..config(&server)
    };
    let req = AgentRequest {
        system_prompt: system_prompt.map(str::to_string),
        schema: with_schema.then(schema),
        options: AgentOptions {
            model: model.map(str::to_string),
            effort: effort.map(str::to_string),
            ..AgentOptions::default()
        },
        ..request("Say hi")
    };
    let out = outcome(&provider(&cfg), req).await;
    assert!(
        matches!(
            out.result,
            ChildResult::Text(_) | ChildResult::Structured(_)
        ),
        "{out:?}"
    );

    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.json();
    assert_eq!(body["model"], model.unwrap_or("test-model"));
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({ "include_usage": true }));
    assert!(body.get("tools").is_none(), "no tools configured: {body}");

    let messages = body["messages"].as_array().expect("messages");
    let user = messages.last().expect("a user message");
    assert_eq!(*user, json!({ "role": "user", "content": "Say hi" }));
    let system = messages
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str());
    match (system_prompt, with_schema) {
        (None, false) => assert_eq!(messages.len(), 1, "{body}"),
        _ => {
            assert_eq!(messages.len(), 2, "{body}");
            let system = system.expect("a system message");
            if let Some(p) = system_prompt {
                assert!(system.starts_with(p), "{system}");
            }
            if with_schema {
                assert!(system.contains("json"), "DeepSeek needs the word: {system}");
                assert!(system.contains("\"required\""), "the schema text: {system}");
            }
        }
    }

    let format = body.get("response_format");
    match (with_schema, mode) {
        (false, _) | (true, StructuredOutput::None) => assert_eq!(format, None, "{body}"),
        (true, StructuredOutput::JsonObject) => {
            assert_eq!(format, Some(&json!({ "type": "json_object" })))
        }
        (true, StructuredOutput::JsonSchema) => assert_eq!(
            format,
            Some(&json!({
                "type": "json_schema",
                "json_schema": { "name": "answer", "schema": schema(), "strict": false }
            }))
        ),
    }

    let sent_effort = body.get("reasoning_effort").and_then(Value::as_str);
    let want_effort = effort
        .filter(|_| effort_supported)
        .map(|e| if e == "max" { "high" } else { e });
    assert_eq!(sent_effort, want_effort, "{body}");
}

#[tokio::test]
async fn extra_headers_and_no_key() {
    let server = TestServer::start(vec![Reply::chat("hi")]).await;
    let cfg = OpenAiConfig {
        api_key_env: String::new(),
        headers: [("X-Team".to_string(), "core".to_string())].into(),
        ..config(&server)
    };
    let p = OpenAiProvider::new("local", &cfg).expect("no key needed");
    let out = outcome(&p, request("hi")).await;
    assert_eq!(out.result, ChildResult::Text("hi".into()));
    let r = &server.requests()[0];
    assert_eq!(r.header("x-team"), Some("core"));
    assert_eq!(r.header("authorization"), None);
}

// ------------------------------------------------------------------ answers

#[tokio::test]
async fn text_answer_and_usage() {
    let server = TestServer::start(vec![Reply::chat_usage("Hello there", 12, 7)]).await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    assert_eq!(
        out,
        ChildOutcome {
            result: ChildResult::Text("Hello there".into()),
            usage: usage(12, 7),
        }
    );
}

#[tokio::test]
async fn structured_answer() {
    let server = TestServer::start(vec![Reply::chat(r#"{"ok": true}"#)]).await;
    let out = outcome(&provider(&config(&server)), schema_request("check")).await;
    assert_eq!(out.result, ChildResult::Structured(json!({ "ok": true })));
    assert_eq!(server.requests().len(), 1);
}

#[rstest]
#[case::invalid(r#"{"ok":"yes"}"#, "value.ok")]
#[case::not_json("Sure, here you go: ok", "not JSON")]
#[tokio::test]
async fn one_corrective_retry_fixes_the_answer(#[case] bad: &str, #[case] problem: &str) {
    let server = TestServer::start(vec![
        Reply::chat_usage(bad, 100, 10),
        Reply::chat_usage(r#"{"ok":false}"#, 130, 4),
    ])
    .await;
    let out = outcome(&provider(&config(&server)), schema_request("check")).await;
    assert_eq!(
        out,
        ChildOutcome {
            result: ChildResult::Structured(json!({ "ok": false })),
            usage: usage(230, 14),
        }
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    let first = seen[0].json();
    let second = seen[1].json();
    let msgs = second["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 4, "{second}");
    assert_eq!(
        msgs[..2],
        first["messages"].as_array().expect("messages")[..]
    );
    assert_eq!(msgs[2], json!({ "role": "assistant", "content": bad }));
    assert_eq!(msgs[3]["role"], "user");
    let correction = msgs[3]["content"].as_str().expect("text");
    assert!(correction.contains(problem), "{correction}");
    assert!(correction.contains("json"), "{correction}");
    assert_eq!(second["response_format"], first["response_format"]);
}

#[tokio::test]
async fn still_invalid_after_the_corrective_retry_fails() {
    let server = TestServer::start(vec![
        Reply::chat_usage(r#"{"ok":"yes"}"#, 1, 2),
        Reply::chat_usage(r#"{"ok":1}"#, 3, 4),
        Reply::chat(r#"{"ok":true}"#),
    ])
    .await;
    let out = outcome(&provider(&config(&server)), schema_request("check")).await;
    let reason = failed(&out);
    assert!(reason.contains("does not match the schema"), "{reason}");
    assert!(reason.contains("value.ok"), "{reason}");
    assert!(reason.contains("after one corrective turn"), "{reason}");
    assert_eq!(out.usage, usage(4, 6), "tokens spent count anyway");
    assert_eq!(server.requests().len(), 2, "exactly one corrective retry");
}

#[tokio::test]
async fn a_failing_corrective_request_names_both_problems() {
    let server = TestServer::start(vec![
        Reply::chat(r#"{"ok":"yes"}"#),
        Reply::status(400, "context too long"),
    ])
    .await;
    let out = outcome(&provider(&config(&server)), schema_request("check")).await;
    let reason = failed(&out);
    assert!(reason.contains("value.ok"), "{reason}");
    assert!(
        reason.contains("corrective request then failed: HTTP 400"),
        "{reason}"
    );
    assert!(reason.contains("context too long"), "{reason}");
}

#[rstest]
#[case::not_json("{\"choices\": [", "not JSON")]
#[case::html("<html>502</html>", "not JSON")]
#[case::no_choices(r#"{"object":"chat.completion"}"#, "no choices[0]")]
#[case::empty_choices(r#"{"choices":[]}"#, "no choices[0]")]
#[case::null_content(r#"{"choices":[{"message":{"content":null}}]}"#, "no text")]
#[case::refusal(r#"{"choices":[{"message":{"refusal":"no"}}]}"#, "refused")]
#[case::json_array("[1,2]", "no choices[0]")]
#[case::empty("", "not JSON")]
#[tokio::test]
async fn malformed_bodies_fail_the_child_clearly(#[case] body: &str, #[case] want: &str) {
    let server = TestServer::start(vec![Reply::body(body)]).await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    let reason = failed(&out);
    assert!(reason.contains(want), "{reason} should contain {want}");
    assert_eq!(server.requests().len(), 1, "a malformed 200 is not retried");
}

// ------------------------------------------------------------------ retries

#[tokio::test]
async fn too_many_requests_honours_retry_after() {
    let server = TestServer::start(vec![
        Reply::status(429, "slow down").header("Retry-After", "1"),
        Reply::chat_usage("finally", 1, 1),
    ])
    .await;
    let cfg = OpenAiConfig {
        // Without Retry-After the wait would be about a millisecond.
        backoff: Duration::from_millis(1),
        ..config(&server)
    };
    let begun = Instant::now();
    let out = outcome(&provider(&cfg), request("hi")).await;
    assert_eq!(out.result, ChildResult::Text("finally".into()));
    assert_eq!(out.usage, usage(1, 1));
    assert!(
        begun.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        begun.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
}

#[rstest]
#[case::internal(500)]
#[case::bad_gateway(502)]
#[case::unavailable(503)]
#[case::too_many_at_a_fixed_concurrency(429)]
#[tokio::test]
async fn retryable_statuses_until_attempts_run_out(#[case] status: u16) {
    let replies = (0..4)
        .map(|i| Reply::status(status, &format!("overloaded #{i}")))
        .collect();
    let server = TestServer::start(replies).await;
    let cfg = OpenAiConfig {
        concurrency: crate::dispatch::Concurrency::Fixed(4),
        ..config(&server)
    };
    let out = outcome(&provider(&cfg), request("hi")).await;
    let reason = failed(&out);
    assert!(reason.contains("gave up after 3 attempts"), "{reason}");
    assert!(reason.contains(&format!("HTTP {status}")), "{reason}");
    assert!(reason.contains("overloaded #2"), "the last one: {reason}");
    assert_eq!(server.requests().len(), 3);
}

/// Under adaptive concurrency a 429 is waited out, not counted against
/// `max_attempts`; an endpoint that never stops refusing still ends.
#[tokio::test]
async fn rate_limits_are_waited_out_up_to_a_bound() {
    use crate::dispatch::RATE_LIMITED_ATTEMPTS;
    let mut replies: Vec<Reply> = (0..5)
        .map(|_| Reply::status(429, "slow down").header("Retry-After", "0"))
        .collect();
    replies.push(Reply::chat("patience"));
    let server = TestServer::start(replies).await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    assert_eq!(out.result, ChildResult::Text("patience".into()));
    assert_eq!(
        server.requests().len(),
        6,
        "five 429s, more than max_attempts"
    );

    let replies = (0..RATE_LIMITED_ATTEMPTS + 5)
        .map(|i| Reply::status(429, &format!("no #{i}")).header("retry-after-ms", "1"))
        .collect();
    let server = TestServer::start(replies).await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    let reason = failed(&out);
    assert!(
        reason.starts_with(&format!("rate limited {RATE_LIMITED_ATTEMPTS} times")),
        "{reason}"
    );
    assert_eq!(server.requests().len(), RATE_LIMITED_ATTEMPTS as usize);
}

#[tokio::test]
async fn a_retry_can_succeed() {
    let server = TestServer::start(vec![
        Reply::status(503, "busy"),
        Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cho".to_vec()),
        Reply::chat("third time"),
    ])
    .await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    assert_eq!(out.result, ChildResult::Text("third time".into()));
    assert_eq!(server.requests().len(), 3);
}

#[rstest]
#[case::bad_request(400, r#"{"error":{"message":"invalid model"}}"#)]
#[case::unauthorized(401, "Authentication Fails")]
#[case::not_found(404, "no such route")]
#[case::payment(402, "Insufficient Balance")]
#[tokio::test]
async fn other_client_errors_fail_at_once(#[case] status: u16, #[case] body: &str) {
    let server = TestServer::start(vec![Reply::status(status, body), Reply::chat("no")]).await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    let reason = failed(&out);
    assert!(reason.starts_with(&format!("HTTP {status}")), "{reason}");
    assert!(reason.contains(body), "{reason}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_long_error_body_is_cut_short() {
    let body = "e".repeat(100_000);
    let server = TestServer::start(vec![Reply::status(400, &body)]).await;
    let out = outcome(&provider(&config(&server)), request("hi")).await;
    let reason = failed(&out);
    assert!(reason.len() < 1000, "{} bytes", reason.len());
    assert!(reason.ends_with('…'), "{reason}");
}

#[tokio::test]
async fn a_timed_out_request_is_not_retried() {
    let server = TestServer::start(vec![Reply::Hang, Reply::Hang]).await;
    let cfg = OpenAiConfig {
        timeout: Duration::from_millis(300),
        max_attempts: 2,
        ..config(&server)
    };
    let out = outcome(&provider(&cfg), request("hi")).await;
    let reason = failed(&out);
    assert!(reason.contains("within 300ms (timeout)"), "{reason}");
    assert!(reason.contains("not retried"), "{reason}");
    server.wait_dropped(1).await;
    assert_eq!(server.requests().len(), 1, "one request, no retry");
}

#[tokio::test]
async fn a_body_that_stalls_times_out() {
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"choices\":";
    let server = TestServer::start(vec![Reply::Stall(head.to_vec())]).await;
    let cfg = OpenAiConfig {
        timeout: Duration::from_millis(300),
        max_attempts: 1,
        ..config(&server)
    };
    let out = outcome(&provider(&cfg), request("hi")).await;
    let reason = failed(&out);
    assert!(
        reason.starts_with("no complete response within 300ms"),
        "{reason}"
    );
    server.wait_dropped(1).await;
}

#[rstest]
#[case::http("http")]
// Also proves the TLS client (rustls on ring) can be built.
#[case::https("https")]
#[tokio::test]
async fn connection_refused_is_retried_then_reported(#[case] scheme: &str) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let cfg = OpenAiConfig {
        base_url: format!("{scheme}://127.0.0.1:{port}/v1"),
        max_attempts: 2,
        backoff: Duration::from_millis(1),
        ..OpenAiConfig::default()
    };
    let out = outcome(&provider(&cfg), request("hi")).await;
    let reason = failed(&out);
    assert!(reason.contains("gave up after 2 attempts"), "{reason}");
    assert!(reason.contains("cannot connect to"), "{reason}");
}

// ------------------------------------------------------------------ cancellation

enum Stop {
    Cancel,
    RunToken,
    Dispose,
    Drop,
}

#[rstest]
#[case::cancel(Stop::Cancel)]
#[case::run_token(Stop::RunToken)]
#[case::dispose(Stop::Dispose)]
#[case::drop(Stop::Drop)]
#[tokio::test]
async fn stopping_a_child_drops_its_request(#[case] stop: Stop) {
    // The answer would come a minute later: only a dropped request ends
    // this test in time.
    let server = TestServer::start(vec![Reply::chat("late").after(Duration::from_secs(60))]).await;
    let p = provider(&config(&server));
    let run = CancellationToken::new();
    let child = p
        .start(request("slow"), run.clone())
        .await
        .map_err(|e| e.message)
        .expect("started");
    server.wait_requests(1).await;
    let begun = Instant::now();
    let child = match stop {
        Stop::Cancel => {
            child.cancel();
            Some(child)
        }
        Stop::RunToken => {
            run.cancel();
            Some(child)
        }
        Stop::Dispose => {
            child.dispose().await;
            Some(child)
        }
        Stop::Drop => {
            drop(child);
            None
        }
    };
    if let Some(child) = child {
        let out = tokio::time::timeout(Duration::from_secs(5), child.result())
            .await
            .expect("result() returns promptly after a stop")
            .expect("no fault");
        assert_eq!(out.result, ChildResult::Cancelled);
        assert_eq!(out.usage, None);
        child.dispose().await;
    }
    server.wait_dropped(1).await;
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "the server saw the hang-up after {:?}",
        begun.elapsed()
    );
    assert_eq!(server.seen().late_answers, 0);
}

#[tokio::test]
async fn a_cancel_after_the_answer_arrived_still_wins() {
    let server = TestServer::start(vec![Reply::chat("done")]).await;
    let p = provider(&config(&server));
    let child = p
        .start_child(request("hi"), CancellationToken::new())
        .map_err(|e| e.message)
        .expect("started");
    // The answer is waiting in the channel once the task has finished.
    tokio::time::timeout(BOUND, async {
        while !child.task_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the request task finishes");
    child.cancel();
    let out = child.result().await.expect("no fault");
    assert_eq!(out.result, ChildResult::Cancelled);
    // The tokens were spent all the same.
    assert_eq!(out.usage, usage(10, 5));
    child.dispose().await;
}

// ------------------------------------------------------------------ start, ids, construction

#[tokio::test]
async fn isolation_is_refused_as_unsupported() {
    let server = TestServer::start(vec![]).await;
    let p = provider(&config(&server));
    let req = AgentRequest {
        options: AgentOptions {
            isolation: Some("container".into()),
            ..AgentOptions::default()
        },
        ..request("hi")
    };
    let refused = p
        .start(req, CancellationToken::new())
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code, ErrorCode::UnsupportedOption);
    assert!(refused.message.contains("isolation"), "{}", refused.message);
    assert!(refused.message.contains("\"p\""), "{}", refused.message);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn child_ids_count_per_provider_and_the_client_is_built_lazily() {
    let server = TestServer::start(vec![Reply::chat("a"), Reply::chat("b")]).await;
    let p = provider(&config(&server));
    assert!(!p.shared.endpoint.client_built(), "no client before a call");
    let a = start(&p, request("a")).await;
    let b = start(&p, request("b")).await;
    assert_eq!(a.id(), "p-1");
    assert_eq!(b.id(), "p-2");
    for c in [a, b] {
        let out = tokio::time::timeout(BOUND, c.result())
            .await
            .expect("settles")
            .expect("no fault");
        assert!(matches!(out.result, ChildResult::Text(_)), "{out:?}");
        c.dispose().await;
    }
    assert!(p.shared.endpoint.client_built());
}

#[test]
fn new_reads_the_key_from_the_environment() {
    let cfg = OpenAiConfig {
        api_key_env: "DSH_TEST_SURELY_UNSET_OPENAI_KEY".into(),
        ..OpenAiConfig::default()
    };
    let err = OpenAiProvider::new("deepseek", &cfg).err().expect("no key");
    assert!(
        err.to_string()
            .starts_with("DSH_TEST_SURELY_UNSET_OPENAI_KEY is not set; export it"),
        "{err}"
    );
    // PATH is always set; it stands in for a key.
    let cfg = OpenAiConfig {
        api_key_env: "PATH".into(),
        ..OpenAiConfig::default()
    };
    let p = OpenAiProvider::new("deepseek", &cfg).expect("a key");
    assert_eq!(p.name(), "deepseek");
    let bad = OpenAiConfig {
        max_attempts: 0,
        ..cfg
    };
    assert!(OpenAiProvider::new("x", &bad).is_err());
}

// ------------------------------------------------------------------ progress

#[tokio::test]
async fn a_response_arriving_is_progress_even_when_its_body_stalls() {
    // The head of a response, then nothing: the host's stall timer sees
    // the head as progress (and nothing after it).
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"choices\":";
    let server = TestServer::start(vec![Reply::Stall(head.to_vec())]).await;
    let child = start(&provider(&config(&server)), request("hi")).await;
    let progress = child
        .progress()
        .expect("the openai provider reports progress");
    let before = progress.last();
    let begun = Instant::now();
    while progress.last() == before {
        assert!(
            begun.elapsed() < BOUND,
            "no progress reported for the response"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.cancel();
    let out = child.result().await.expect("an outcome");
    assert_eq!(out.result, ChildResult::Cancelled);
    child.dispose().await;
    server.wait_dropped(1).await;
}

#[test]
fn the_endpoint_joins_the_path_and_refuses_bad_keys() {
    use reqwest::header::AUTHORIZATION;
    let cfg = OpenAiConfig {
        base_url: "http://127.0.0.1:9/v1/".into(),
        ..OpenAiConfig::default()
    };
    let e = endpoint(&cfg, Some("k")).expect("valid");
    assert_eq!(e.url(), "http://127.0.0.1:9/v1/chat/completions");
    assert!(e.headers()[AUTHORIZATION].is_sensitive());
    let err = endpoint(&cfg, Some("bad\nkey")).err().expect("refused");
    assert!(err.to_string().contains("DEEPSEEK_API_KEY"), "{err}");
    assert!(
        !err.to_string().contains("bad"),
        "the key is never shown: {err}"
    );
    let none = endpoint(&cfg, None).expect("valid");
    assert!(none.headers().get(AUTHORIZATION).is_none());
    assert!(!none.client_built(), "the client is built lazily");
}
