//! The native functions the prelude calls (`N.*` in prelude.js). Each one
//! only records state or queues a frame; none of them calls back into
//! JavaScript, so no `RefCell` borrow is ever held while script code runs.

use std::rc::Rc;
use std::time::Duration;

use dsh_protocol::{ChildRequest, EndResult, ErrorCode, StopReason, WireError, WorkerMsg, schema};
use rquickjs::{Ctx, Function, Object};
use serde_json::Value;

use super::Shared;

/// The request as the prelude serializes it (camelCase JSON).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsRequest {
    prompt: String,
    label: String,
    phase: Option<String>,
    schema: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    effort: Option<String>,
    agent_type: Option<String>,
    isolation: Option<String>,
}

pub fn install<'js>(ctx: &Ctx<'js>, shared: &Rc<Shared>) -> rquickjs::Result<Object<'js>> {
    let n = Object::new(ctx.clone())?;

    let s = shared.clone();
    n.set(
        "phase",
        Function::new(ctx.clone(), move |title: String| {
            s.send(&WorkerMsg::Phase { title });
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "log",
        Function::new(ctx.clone(), move |message: String| {
            if let Some(message) = s.log_budget.borrow_mut().admit(message) {
                s.send(&WorkerMsg::Log { message });
            }
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "admit",
        Function::new(ctx.clone(), move || -> f64 {
            let id = s.agents_started.get() + 1;
            s.agents_started.set(id);
            id as f64
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "childStart",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'_>, id: f64, request: String| -> rquickjs::Result<()> {
                let req: JsRequest = serde_json::from_str(&request).map_err(|e| {
                    rquickjs::Exception::throw_internal(&ctx, &format!("bad agent request: {e}"))
                })?;
                s.send(&WorkerMsg::ChildStart {
                    call_id: id as u64,
                    request: ChildRequest {
                        prompt: req.prompt,
                        label: req.label,
                        phase: req.phase,
                        schema_json: req.schema,
                        model: req.model,
                        provider: req.provider,
                        effort: req.effort,
                        agent_type: req.agent_type,
                        isolation: req.isolation,
                    },
                });
                Ok(())
            },
        )?,
    )?;

    let s = shared.clone();
    n.set(
        "heapNearLimit",
        Function::new(ctx.clone(), move |ctx: Ctx<'_>| -> bool {
            let near = super::heap_near_limit(&ctx, s.memory_bytes);
            if near {
                // Write the End here: the prelude may not have the memory
                // left to build its own.
                s.set_end(end_result(
                    "error",
                    Some(ErrorCode::Memory.as_str().into()),
                    Some(format!(
                        "the script exceeded its memory limit of {} bytes (memoryBytes)",
                        s.memory_bytes
                    )),
                    None,
                    s.agents_started.get(),
                ));
            }
            near
        })?,
    )?;

    n.set(
        "utf8Bytes",
        Function::new(ctx.clone(), move |text: String| -> f64 {
            text.len() as f64
        })?,
    )?;

    // The violations, one per line; empty when the schema is fine. A string,
    // not an array: rquickjs fills arrays by assignment, which an index
    // setter planted on Array.prototype by the script would intercept.
    n.set(
        "checkSchema",
        Function::new(ctx.clone(), move |json: String, path: String| -> String {
            match serde_json::from_str::<Value>(&json) {
                Ok(v) => schema::check_schema(&v, &path)
                    .into_iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(e) => format!("{path}: not JSON: {e}"),
            }
        })?,
    )?;

    // A brand check no script can fool: whether `v` is a native promise,
    // whatever its prototype or `then` say now.
    n.set(
        "isPromise",
        Function::new(ctx.clone(), move |v: rquickjs::Value<'_>| -> bool {
            v.is_promise()
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "setTimer",
        Function::new(ctx.clone(), move |id: f64, ms: f64| {
            let ms = if ms.is_finite() && ms > 0.0 { ms } else { 0.0 };
            s.timers
                .borrow_mut()
                .set(id as u64, Duration::from_secs_f64(ms.min(1e12) / 1000.0));
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "clearTimer",
        Function::new(ctx.clone(), move |id: f64| {
            s.timers.borrow_mut().clear(id as u64);
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "end",
        Function::new(
            ctx.clone(),
            move |stop: String,
                  code: Option<String>,
                  message: Option<String>,
                  value_json: Option<String>| {
                s.set_end(end_result(
                    &stop,
                    code,
                    message,
                    value_json,
                    s.agents_started.get(),
                ));
            },
        )?,
    )?;

    Ok(n)
}

/// Builds the `End` payload from the prelude's strings. An unknown code can
/// only come from a bug in the prelude; it degrades to `SCRIPT_ERROR` rather
/// than failing the run's report.
pub fn end_result(
    stop: &str,
    code: Option<String>,
    message: Option<String>,
    value_json: Option<String>,
    agents_started: u64,
) -> EndResult {
    let stop = match stop {
        "completed" => StopReason::Completed,
        "cancelled" => StopReason::Cancelled,
        _ => StopReason::Error,
    };
    let error = code.map(|c| WireError {
        code: ErrorCode::parse(&c).unwrap_or(ErrorCode::ScriptError),
        message: message.unwrap_or_default(),
    });
    EndResult {
        stop,
        value_json: if stop == StopReason::Completed {
            value_json
        } else {
            None
        },
        error,
        agents_started,
        log_bytes_dropped: 0,
    }
}
