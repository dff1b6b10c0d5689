//! The native functions the prelude calls (`N.*` in prelude.js). Each one
//! only records state or queues a frame; none of them calls back into
//! JavaScript, so no `RefCell` borrow is ever held while script code runs.

use std::rc::Rc;
use std::time::Duration;

use dsh_protocol::{
    AgentOptions, ChildRequest, EndOutcome, ErrorCode, WorkerMsg, WorkflowTarget, schema,
};
use rquickjs::{Array, Ctx, Function, Object, Promise};
use serde_json::Value;

use super::Shared;
use super::text::{Text, opt, well_formed_json};

/// A call's options from the object the prelude built and filled itself
/// (null-prototype objects and arrays: reading them runs no script code),
/// read field by field: no JSON text is built or parsed. `None` (a call
/// without options) is every option absent.
fn agent_options(o: Option<Object<'_>>) -> rquickjs::Result<AgentOptions> {
    let Some(o) = o else {
        return Ok(AgentOptions::default());
    };
    let whole = |v: Option<f64>| v.filter(|n| n.is_finite() && *n >= 0.0).map(|n| n as u64);
    let text = |key: &str| o.get::<_, Option<Text>>(key).map(opt);
    Ok(AgentOptions {
        model: text("model")?,
        provider: text("provider")?,
        effort: text("effort")?,
        agent_type: text("agentType")?,
        isolation: text("isolation")?,
        stall_ms: whole(o.get("stallMs")?),
        disallowed_tools: o
            .get::<_, Option<Vec<Text>>>("disallowedTools")?
            .map(|tools| tools.into_iter().map(|t| t.0).collect()),
        shared_head_length: whole(o.get("sharedHeadLength")?),
    })
}

/// The label of a call that names none: the prompt's first line (without a
/// trailing carriage return), cut to 47 code points and "…" when it has
/// more than 48. The prelude's `defaultLabel` is the same rule, for the
/// request's size check; here it costs no script code per call.
pub(crate) fn default_label(prompt: &str) -> String {
    let line = prompt.split('\n').next().unwrap_or("");
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(48) {
        None => line.to_owned(),
        Some(_) => {
            let cut = line.char_indices().nth(47).map_or(line.len(), |(i, _)| i);
            format!("{}…", &line[..cut])
        }
    }
}

/// Where the prelude's call record (`[id, resolve, reject, started,
/// parts]`, its `CALL_*` constants) keeps the promise's resolving functions.
const CALL_RESOLVE: usize = 1;
const CALL_REJECT: usize = 2;

/// A new `agent()` call's promise, its resolving functions put in the
/// call's record, and the call's id (the record's first element). Made
/// here rather than with `new Promise(executor)` in the prelude, which
/// also creates and runs the executor (docs/performance.md round 12).
fn call_promise<'js>(call: &Array<'js>) -> rquickjs::Result<(f64, Promise<'js>)> {
    let id: f64 = call.get(0)?;
    let (promise, resolve, reject) = call.ctx().promise()?;
    call.set(CALL_RESOLVE, resolve)?;
    call.set(CALL_REJECT, reject)?;
    Ok((id, promise))
}

/// Sends `ChildStart` for admitted call `id`: the request's parts,
/// positional; a call without options sends a null label (the default is
/// taken from the prompt) and null options.
#[allow(clippy::too_many_arguments)]
fn start_child(
    s: &Shared,
    id: f64,
    prompt: Text,
    label: Option<Text>,
    phase: Option<Text>,
    schema_json: Option<Text>,
    workflow: Option<Text>,
    options: Option<Object<'_>>,
) -> rquickjs::Result<()> {
    s.admitted(id);
    let prompt = prompt.0;
    let label = opt(label).unwrap_or_else(|| default_label(&prompt));
    let request = ChildRequest {
        prompt,
        label,
        phase: opt(phase),
        schema_json: opt(schema_json).map(well_formed_json),
        options: agent_options(options)?,
        workflow: opt(workflow),
    };
    s.send(&WorkerMsg::ChildStart {
        call_id: id as u64,
        request,
    });
    Ok(())
}

/// The object of natives the prelude gets (`N`), by kind.
pub(crate) fn install<'js>(ctx: &Ctx<'js>, shared: &Rc<Shared>) -> rquickjs::Result<Object<'js>> {
    let n = Object::new(ctx.clone())?;
    messages(ctx, &n, shared)?;
    calls(ctx, &n, shared)?;
    checks(ctx, &n, shared)?;
    timers(ctx, &n, shared)?;
    ends(ctx, &n, shared)?;
    Ok(n)
}

/// `phase`, `log`, `warn`: frames to the host, nothing back.
fn messages<'js>(ctx: &Ctx<'js>, n: &Object<'js>, shared: &Rc<Shared>) -> rquickjs::Result<()> {
    let s = shared.clone();
    n.set(
        "phase",
        Function::new(ctx.clone(), move |title: Text, workflow: Option<Text>| {
            s.send(&WorkerMsg::Phase {
                title: title.0,
                workflow: opt(workflow),
            });
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "log",
        Function::new(ctx.clone(), move |message: Text, workflow: Option<Text>| {
            if let Some(message) = s.log_budget.borrow_mut().admit(message.0) {
                s.send(&WorkerMsg::Log {
                    message,
                    workflow: opt(workflow),
                });
            }
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "warn",
        Function::new(ctx.clone(), move |message: Text, path: Option<Text>| {
            s.send(&WorkerMsg::Warning {
                message: message.0,
                path: opt(path),
            });
        })?,
    )?;
    Ok(())
}

/// `agent()` and `workflow()` calls: admitted, queued, started, loaded.
fn calls<'js>(ctx: &Ctx<'js>, n: &Object<'js>, shared: &Rc<Shared>) -> rquickjs::Result<()> {
    // An agent() call that waits for a slot: admitted (counted) now, its
    // promise made here (see `call_promise`), started later by
    // `childStart`. The host hears that it waits (`ChildQueued`), so the
    // calls behind a full concurrency limit are not invisible.
    let s = shared.clone();
    n.set(
        "admit",
        Function::new(
            ctx.clone(),
            move |call: Array<'js>,
                  prompt: Text,
                  label: Option<Text>,
                  phase: Option<Text>,
                  workflow: Option<Text>|
                  -> rquickjs::Result<Promise<'js>> {
                let (id, promise) = call_promise(&call)?;
                s.admitted(id);
                let label = opt(label).unwrap_or_else(|| default_label(&prompt.0));
                s.send(&WorkerMsg::ChildQueued {
                    call_id: id as u64,
                    label,
                    phase: opt(phase),
                    workflow: opt(workflow),
                });
                Ok(promise)
            },
        )?,
    )?;

    // An agent() call with a free slot: admitted, its promise made, and
    // started, in one native call.
    let s = shared.clone();
    n.set(
        "childAdmitStart",
        Function::new(
            ctx.clone(),
            move |call: Array<'js>,
                  prompt: Text,
                  label: Option<Text>,
                  phase: Option<Text>,
                  schema_json: Option<Text>,
                  workflow: Option<Text>,
                  options: Option<Object<'js>>|
                  -> rquickjs::Result<Promise<'js>> {
                let (id, promise) = call_promise(&call)?;
                start_child(&s, id, prompt, label, phase, schema_json, workflow, options)?;
                Ok(promise)
            },
        )?,
    )?;

    // A call that waited in the queue gets its slot (its promise exists).
    let s = shared.clone();
    n.set(
        "childStart",
        Function::new(
            ctx.clone(),
            move |id: f64,
                  prompt: Text,
                  label: Option<Text>,
                  phase: Option<Text>,
                  schema_json: Option<Text>,
                  workflow: Option<Text>,
                  options: Option<Object<'_>>|
                  -> rquickjs::Result<()> {
                start_child(&s, id, prompt, label, phase, schema_json, workflow, options)
            },
        )?,
    )?;

    // workflow(): the prelude has checked the target's shape; `kind` is
    // "name" or "path".
    let s = shared.clone();
    n.set(
        "workflowLoad",
        Function::new(ctx.clone(), move |id: f64, kind: Text, value: Text| {
            let value = value.0;
            let target = match kind.0.as_str() {
                "path" => WorkflowTarget::ScriptPath(value),
                _ => WorkflowTarget::Name(value),
            };
            s.send(&WorkerMsg::WorkflowLoad {
                call_id: id as u64,
                target,
            });
        })?,
    )?;
    Ok(())
}

/// Questions the prelude asks: memory, sizes, schemas, promises.
fn checks<'js>(ctx: &Ctx<'js>, n: &Object<'js>, shared: &Rc<Shared>) -> rquickjs::Result<()> {
    let s = shared.clone();
    n.set(
        "heapNearLimit",
        Function::new(ctx.clone(), move |ctx: Ctx<'_>| -> bool {
            let near = super::heap_near_limit(&ctx, s.memory_bytes.get());
            if near {
                // Write the End here: the prelude may not have the memory
                // left to build its own.
                s.set_end(EndOutcome::failed(
                    ErrorCode::Memory,
                    format!(
                        "the script exceeded its memory limit of {} bytes (memoryBytes)",
                        s.memory_bytes.get()
                    ),
                ));
            }
            near
        })?,
    )?;

    n.set(
        "utf8Bytes",
        Function::new(ctx.clone(), move |text: Text| -> f64 {
            text.0.len() as f64
        })?,
    )?;

    // The violations, one per line; empty when the schema is fine. A string,
    // not an array: rquickjs fills arrays by assignment, which an index
    // setter planted on Array.prototype by the script would intercept.
    n.set(
        "checkSchema",
        Function::new(ctx.clone(), move |json: Text, path: Text| -> String {
            let (json, path) = (well_formed_json(json.0), path.0);
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
    Ok(())
}

/// `setTimeout` and `clearTimeout`: deadlines kept by the event loop.
fn timers<'js>(ctx: &Ctx<'js>, n: &Object<'js>, shared: &Rc<Shared>) -> rquickjs::Result<()> {
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
    Ok(())
}

/// How the body settled (`endCompleted`, `endFailed`, `endCancelled`).
fn ends<'js>(ctx: &Ctx<'js>, n: &Object<'js>, shared: &Rc<Shared>) -> rquickjs::Result<()> {
    // How the body settled: one native per outcome, so the only thing
    // that crosses from the prelude as text is the error code.
    let s = shared.clone();
    n.set(
        "endCompleted",
        Function::new(ctx.clone(), move |value_json: Text| {
            s.set_end(EndOutcome::completed(well_formed_json(value_json.0)));
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "endFailed",
        Function::new(ctx.clone(), move |code: Text, message: Text| {
            s.set_end(EndOutcome::failed(code_from_prelude(&code.0), message.0));
        })?,
    )?;

    let s = shared.clone();
    n.set(
        "endCancelled",
        Function::new(ctx.clone(), move |code: Text, message: Text| {
            s.set_end(EndOutcome::cancelled(code_from_prelude(&code.0), message.0));
        })?,
    )?;
    Ok(())
}

/// An error code the prelude names: one of its own constants, one the host
/// sent (`ErrorCode::as_str`), or whatever string a script wrote into the
/// `code` of a fatal error it caught and rethrew. An unknown one degrades to
/// `SCRIPT_ERROR` rather than failing the run's report.
fn code_from_prelude(code: &str) -> ErrorCode {
    ErrorCode::parse(code).unwrap_or(ErrorCode::ScriptError)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::default_label;

    #[rstest]
    #[case::short("q 0 0", "q 0 0")]
    #[case::empty("", "")]
    #[case::first_line_only("plan\nthe rest", "plan")]
    #[case::carriage_return("plan\r\nthe rest", "plan")]
    #[case::one_carriage_return_only("plan\r\r\nx", "plan\r")]
    #[case::forty_eight_kept(&"x".repeat(48), &"x".repeat(48))]
    #[case::forty_nine_cut(&"x".repeat(49), &format!("{}…", "x".repeat(47)))]
    #[case::code_points_not_bytes(&"é".repeat(48), &"é".repeat(48))]
    #[case::astral_counts_once(&format!("{}😀yz", "x".repeat(45)), &format!("{}😀yz", "x".repeat(45)))]
    #[case::astral_cut_whole(&format!("{}😀😀yz", "x".repeat(46)), &format!("{}😀…", "x".repeat(46)))]
    #[case::long_second_line_ignored(&format!("a\n{}", "y".repeat(100)), "a")]
    fn a_default_label_is_the_first_line_cut_to_48_code_points(
        #[case] prompt: &str,
        #[case] want: &str,
    ) {
        assert_eq!(default_label(prompt), want);
    }
}
