//! A run's trace and metrics, from its events: one task reads the run's
//! event stream (its own subscription: a slow exporter never costs the
//! terminal an event) and makes the spans as the events come, with the
//! times the events carry.
//!
//! The tree: `invoke_workflow NAME` (the run) → `phase TITLE` → `invoke_agent
//! LABEL`; a nested `workflow()` is an `invoke_workflow NAME` span under
//! the phase (or run) that was current when its first event came, with its
//! own phases and calls under it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use dsh_orchestrator::events::{Event, EventKind, EventStream};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use super::Telemetry;
use super::layer::Note;

/// Span attributes, by name (GenAI semantic conventions, and dsh's own).
mod attr {
    pub const OPERATION: &str = "gen_ai.operation.name";
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    pub const AGENT_ID: &str = "gen_ai.agent.id";
    pub const CONVERSATION: &str = "gen_ai.conversation.id";
    pub const PROVIDER: &str = "gen_ai.provider.name";
    pub const MODEL: &str = "gen_ai.request.model";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const CACHED_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    pub const ERROR_TYPE: &str = "error.type";
}

/// A scope whose phases and calls nest under it: the run, or a nested
/// workflow.
struct Scope {
    cx: Context,
    phase: Option<Context>,
}

impl Scope {
    /// Where a call or a nested workflow of this scope goes.
    fn current(&self) -> &Context {
        self.phase.as_ref().unwrap_or(&self.cx)
    }
}

/// Follows `events` until the run's end, making its spans and metrics.
/// `provider` is the run's default provider (a call's own comes from the
/// layer's note).
pub(crate) async fn follow(t: &Telemetry, mut events: EventStream, provider: String) {
    let tracer = t.tracer();
    let meter = t.meter();
    let runs = meter
        .u64_counter("dsh.workflow.runs")
        .with_description("Runs by how they ended")
        .build();
    let calls = meter
        .u64_counter("dsh.agent.calls")
        .with_description("Agent calls by outcome, provider and model")
        .build();
    let tokens = meter
        .u64_histogram("gen_ai.client.token.usage")
        .with_unit("{token}")
        .with_description("Tokens per agent call, by type")
        .build();
    let duration = meter
        .f64_histogram("gen_ai.client.operation.duration")
        .with_unit("s")
        .with_description("Agent call duration")
        .build();
    let cost = meter
        .f64_counter("dsh.agent.cost")
        .with_unit("USD")
        .with_description("What agent calls cost, as their providers report it")
        .build();

    let mut origin = SystemTime::now();
    let at = |origin: SystemTime, t: u64| origin + Duration::from_millis(t);
    let mut run: Option<Scope> = None;
    let mut nested: HashMap<String, Scope> = HashMap::new();
    let mut open: HashMap<u64, Call> = HashMap::new();
    let mut run_name = String::new();
    while let Some(e) = events.next().await {
        let Event {
            run_id,
            t: ms,
            kind,
        } = e;
        let when = at(origin, ms);
        match kind {
            EventKind::Start { meta } => {
                // The run's clock: `t` counts from here.
                origin = SystemTime::now() - Duration::from_millis(ms);
                run_name = meta.name.clone();
                let span = tracer
                    .span_builder(format!("invoke_workflow {}", meta.name))
                    .with_kind(SpanKind::Internal)
                    .with_start_time(at(origin, ms))
                    .with_attributes([
                        KeyValue::new(attr::OPERATION, "invoke_workflow"),
                        KeyValue::new(attr::AGENT_NAME, meta.name.clone()),
                        KeyValue::new(attr::CONVERSATION, run_id.to_string()),
                        KeyValue::new("dsh.run.id", run_id.to_string()),
                        KeyValue::new(attr::PROVIDER, provider.clone()),
                    ])
                    .start(&tracer);
                run = Some(Scope {
                    cx: Context::new().with_span(span),
                    phase: None,
                });
            }
            EventKind::Phase { title, workflow } => {
                let Some(scope) =
                    scope_of(&mut run, &mut nested, workflow.as_deref(), &tracer, when)
                else {
                    continue;
                };
                if let Some(p) = scope.phase.take() {
                    p.span().end_with_timestamp(when);
                }
                let span = tracer
                    .span_builder(format!("phase {title}"))
                    .with_start_time(when)
                    .with_attributes([KeyValue::new("dsh.phase", title)])
                    .start_with_context(&tracer, &scope.cx);
                scope.phase = Some(scope.cx.with_span(span));
            }
            EventKind::AgentStart {
                seq,
                label,
                workflow,
                origin: child_origin,
                child_id,
                ..
            } => {
                let Some(scope) =
                    scope_of(&mut run, &mut nested, workflow.as_deref(), &tracer, when)
                else {
                    continue;
                };
                // The id the call's program was given as its parent.
                if let Some(id) = t.calls.span_id(seq) {
                    t.ids.next_span(id);
                }
                let span = tracer
                    .span_builder(format!("invoke_agent {label}"))
                    .with_kind(SpanKind::Client)
                    .with_start_time(when)
                    .with_attributes([
                        KeyValue::new(attr::OPERATION, "invoke_agent"),
                        KeyValue::new(attr::AGENT_NAME, label),
                        KeyValue::new(attr::AGENT_ID, child_id),
                        KeyValue::new(attr::CONVERSATION, run_id.to_string()),
                        KeyValue::new("dsh.agent.seq", seq as i64),
                        KeyValue::new(
                            "dsh.agent.replayed",
                            matches!(child_origin, dsh_seam::provider::ChildOrigin::Replayed),
                        ),
                    ])
                    .start_with_context(&tracer, scope.current());
                open.insert(
                    seq,
                    Call {
                        cx: scope.current().with_span(span),
                        started: ms,
                        turn: None,
                    },
                );
            }
            EventKind::AgentEnd {
                seq,
                outcome,
                usage,
                reason,
                ..
            } => {
                let Some(Call { cx, started, turn }) = open.remove(&seq) else {
                    continue;
                };
                if let Some(turn) = turn {
                    turn.span().end_with_timestamp(when);
                }
                let note: Note = t.calls.take(seq);
                let provider = note.provider.clone().unwrap_or_else(|| provider.clone());
                let model = note.model.clone().unwrap_or_default();
                let span = cx.span();
                span.set_attribute(KeyValue::new(attr::PROVIDER, provider.clone()));
                if !model.is_empty() {
                    span.set_attribute(KeyValue::new(attr::MODEL, model.clone()));
                }
                if let Some(a) = &note.agent_type {
                    span.set_attribute(KeyValue::new("dsh.agent.type", a.clone()));
                }
                span.set_attribute(KeyValue::new("dsh.agent.outcome", outcome.as_str()));
                let base = [
                    KeyValue::new(attr::PROVIDER, provider.clone()),
                    KeyValue::new(attr::MODEL, model.clone()),
                ];
                if let Some(u) = usage {
                    span.set_attribute(KeyValue::new(attr::INPUT_TOKENS, u.input as i64));
                    span.set_attribute(KeyValue::new(attr::OUTPUT_TOKENS, u.output as i64));
                    span.set_attribute(KeyValue::new(attr::CACHED_TOKENS, u.cache_read as i64));
                    let mut input = base.to_vec();
                    input.push(KeyValue::new("gen_ai.token.type", "input"));
                    tokens.record(u.input, &input);
                    let mut output = base.to_vec();
                    output.push(KeyValue::new("gen_ai.token.type", "output"));
                    tokens.record(u.output, &output);
                    if let Some(usd) = u.cost_usd {
                        span.set_attribute(KeyValue::new("dsh.cost_usd", usd));
                        cost.add(usd, &base);
                    }
                }
                if t.capture {
                    if let Some(p) = &note.prompt {
                        span.set_attribute(KeyValue::new(
                            attr::INPUT_MESSAGES,
                            serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": p}]}])
                                .to_string(),
                        ));
                    }
                    if let Some(a) = &note.answer {
                        span.set_attribute(KeyValue::new(
                            attr::OUTPUT_MESSAGES,
                            serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": a}]}])
                                .to_string(),
                        ));
                    }
                }
                let mut labels = base.to_vec();
                labels.push(KeyValue::new("dsh.agent.outcome", outcome.as_str()));
                if outcome.as_str() != "completed" {
                    let why = reason.unwrap_or_else(|| outcome.as_str().to_string());
                    span.set_attribute(KeyValue::new(attr::ERROR_TYPE, outcome.as_str()));
                    span.set_status(Status::error(why));
                    labels.push(KeyValue::new(attr::ERROR_TYPE, outcome.as_str()));
                }
                calls.add(1, &labels);
                let mut d = base.to_vec();
                d.push(KeyValue::new(attr::OPERATION, "invoke_agent"));
                duration.record(ms.saturating_sub(started) as f64 / 1000.0, &d);
                span.end_with_timestamp(when);
            }
            EventKind::End {
                stop_reason, error, ..
            } => {
                for (_, call) in open.drain() {
                    if let Some(turn) = call.turn {
                        turn.span().end_with_timestamp(when);
                    }
                    call.cx.span().end_with_timestamp(when);
                }
                for (_, scope) in nested.drain() {
                    if let Some(p) = scope.phase {
                        p.span().end_with_timestamp(when);
                    }
                    scope.cx.span().end_with_timestamp(when);
                }
                if let Some(scope) = run.take() {
                    if let Some(p) = scope.phase {
                        p.span().end_with_timestamp(when);
                    }
                    let span = scope.cx.span();
                    span.set_attribute(KeyValue::new("dsh.stop_reason", stop_reason.as_str()));
                    if let Some(err) = &error {
                        span.set_attribute(KeyValue::new(attr::ERROR_TYPE, err.code.as_str()));
                        span.set_status(Status::error(format!(
                            "{}: {}",
                            err.code.as_str(),
                            err.message
                        )));
                    }
                    span.end_with_timestamp(when);
                }
                runs.add(
                    1,
                    &[
                        KeyValue::new("dsh.stop_reason", stop_reason.as_str()),
                        KeyValue::new(attr::AGENT_NAME, run_name.clone()),
                    ],
                );
                break;
            }
            EventKind::AgentActivity { seq, activity, .. } => {
                let Some(call) = open.get_mut(&seq) else {
                    continue;
                };
                activity_span(&tracer, call, &activity, when);
            }
            _ => {}
        }
    }
}

/// The scope an event of `workflow` (`None`: the run's own script) belongs
/// to; a nested workflow's span starts at its first event, under the
/// run's current phase.
fn scope_of<'a>(
    run: &'a mut Option<Scope>,
    nested: &'a mut HashMap<String, Scope>,
    workflow: Option<&str>,
    tracer: &opentelemetry_sdk::trace::Tracer,
    when: SystemTime,
) -> Option<&'a mut Scope> {
    let run = run.as_mut()?;
    let Some(name) = workflow else {
        return Some(run);
    };
    if !nested.contains_key(name) {
        let span = tracer
            .span_builder(format!("invoke_workflow {name}"))
            .with_start_time(when)
            .with_attributes([
                KeyValue::new(attr::OPERATION, "invoke_workflow"),
                KeyValue::new(attr::AGENT_NAME, name.to_string()),
            ])
            .start_with_context(tracer, run.current());
        nested.insert(
            name.to_string(),
            Scope {
                cx: run.current().with_span(span),
                phase: None,
            },
        );
    }
    nested.get_mut(name)
}

/// An agent call being followed: its span, when it started, and the span
/// of the model turn it is in (agent loops that report their turns).
struct Call {
    cx: Context,
    started: u64,
    turn: Option<Context>,
}

/// The spans a call's activity makes: a model turn is a `chat` span from
/// its start to the next turn (or the call's end); a tool call is an
/// `execute_tool` span under its turn, from its start to its end (the
/// activity that reports its end says how long it took).
fn activity_span(
    tracer: &opentelemetry_sdk::trace::Tracer,
    call: &mut Call,
    activity: &dsh_seam::Activity,
    when: SystemTime,
) {
    use dsh_seam::Activity;
    use opentelemetry::trace::Span as _;
    match activity {
        Activity::Turn { turn } => {
            if let Some(previous) = call.turn.take() {
                previous.span().end_with_timestamp(when);
            }
            let span = tracer
                .span_builder("chat")
                .with_kind(SpanKind::Client)
                .with_start_time(when)
                .with_attributes([
                    KeyValue::new(attr::OPERATION, "chat"),
                    KeyValue::new("dsh.turn", i64::from(*turn)),
                ])
                .start_with_context(tracer, &call.cx);
            call.turn = Some(call.cx.with_span(span));
        }
        Activity::ToolEnd {
            tool,
            status,
            ms,
            message,
        } => {
            let parent = call.turn.as_ref().unwrap_or(&call.cx);
            let mut span = tracer
                .span_builder(format!("execute_tool {tool}"))
                .with_kind(SpanKind::Internal)
                .with_start_time(when - Duration::from_millis(*ms))
                .with_attributes([
                    KeyValue::new(attr::OPERATION, "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", tool.clone()),
                    KeyValue::new("dsh.tool.status", status.clone()),
                    KeyValue::new("dsh.tool.denied", status == "denied"),
                ])
                .start_with_context(tracer, parent);
            if status != "ok" {
                span.set_attribute(KeyValue::new(attr::ERROR_TYPE, status.clone()));
                span.set_status(Status::error(
                    message.clone().unwrap_or_else(|| status.clone()),
                ));
            }
            span.end_with_timestamp(when);
        }
        _ => {}
    }
}
