//! The JavaScript engine adapter: one QuickJS runtime and context per run,
//! the prelude (the script-facing hooks) and the single-threaded event loop
//! that connects them to the host.
//!
//! The loop alternates between running JavaScript (one *slice*: a macrotask
//! such as a host reply or a timer, plus every microtask it queues) and
//! waiting on the socket with the next timer as the timeout. The interrupt
//! handler bounds each slice (`syncTimeoutMs`) and, after a cancel, stops a
//! script that keeps spinning.

pub mod bytecode;
mod event_loop;
mod memory;
mod natives;
mod text;

use event_loop::Loop;
use memory::{heap_near_limit, pin_arenas, release_free_heap};

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use dsh_protocol::{
    Args, CancelReason, ChildOutcome, EndOutcome, EndResult, ErrorCode, HostMsg, Init,
    SandboxReport, WorkerMsg,
};
use rquickjs::{Context, Ctx, Function, Object, Persistent, Runtime, context::EvalOptions};

use crate::channel::{Channel, ChannelError};
use crate::clock::{Clock, Interrupted};
use crate::logs::LogBudget;
use crate::timers::Timers;
use dsh_protocol::FrameError;

const PRELUDE: &str = include_str!("prelude.js");

/// How often (at most) the interrupt handler looks at the socket for a
/// `Cancel` while a slice is running. A cancel waits half of this on
/// average before the worker sees it; a non-blocking read every 250 µs
/// costs a spinning script well under 1 % (docs/performance.md, round 10).
const CANCEL_POLL_EVERY: Duration = Duration::from_micros(250);

/// QuickJS's own first collection threshold (`JS_NewRuntime`).
const GC_FIRST_THRESHOLD: usize = 256 * 1024;

/// State shared by the loop, the natives and the interrupt handler.
pub(crate) struct Shared {
    chan: RefCell<Channel>,
    timers: RefCell<Timers>,
    end: RefCell<Option<EndResult>>,
    agents_started: Cell<u64>,
    clock: Clock,
    memory_bytes: Cell<u64>,
    log_budget: RefCell<LogBudget>,
}

impl Shared {
    /// Queues a frame. A broken connection is noticed by the loop's next
    /// wait, so sends from script code never fail the script.
    fn send(&self, msg: &WorkerMsg) {
        if let Ok(mut chan) = self.chan.try_borrow_mut() {
            let _ = chan.send(msg);
        }
    }

    /// Counts the admission of `agent()` call `id` (the prelude numbers
    /// them 1, 2, 3 …; the count is what the End reports).
    fn admitted(&self, id: f64) {
        // A float from the prelude; `as` saturates (NaN is 0).
        let id = id as u64;
        if id > self.agents_started.get() {
            self.agents_started.set(id);
        }
    }

    /// Records how the body settled (the first call wins), with the number
    /// of agents admitted so far.
    fn set_end(&self, outcome: EndOutcome) {
        let mut end = self.end.borrow_mut();
        if end.is_none() {
            *end = Some(EndResult::new(outcome, self.agents_started.get()));
        }
    }

    fn ended(&self) -> bool {
        self.end.borrow().is_some()
    }
}

/// The engine built before `Init` arrives: a QuickJS runtime and context,
/// the natives, and the prelude run (its hooks made and installed on the
/// global object), with the state they share around the host's channel.
/// None of it depends on the run, so a worker builds it right after
/// `Hello`, while the host prepares `Init` or while it waits in a warm pool;
/// the run then starts with the engine ready. The prelude is dsh's own
/// code, compiled into the binary: nothing of the script runs before the
/// sandbox, and the run's limits (the heap cap among them) are set before
/// the prelude's `configure` and the body do.
pub(crate) struct Engine {
    shared: Rc<Shared>,
    /// The engine, or why it could not be built (reported when the run
    /// would have started).
    built: Result<Built, BuildError>,
}

/// Why the engine could not be built; the run fails with it as soon as it
/// would start.
#[derive(Debug, thiserror::Error)]
enum BuildError {
    /// QuickJS could not make its runtime or context (out of memory).
    #[error("cannot create the engine: {0}")]
    Create(#[from] rquickjs::Error),
    /// The natives or the prelude failed to load: the exception, described.
    #[error("{0}")]
    Prelude(String),
}

struct Built {
    // Field order is drop order: the prelude's entry points before their
    // context, the context before its runtime.
    internal: Persistent<Object<'static>>,
    ctx: Context,
    rt: Runtime,
}

impl Engine {
    /// Builds the runtime and context, installs the natives and runs the
    /// prelude; `chan` is the host's channel, which the natives write to.
    pub(crate) fn prepare(chan: Channel) -> Engine {
        let shared = Rc::new(Shared {
            chan: RefCell::new(chan),
            timers: RefCell::new(Timers::default()),
            end: RefCell::new(None),
            agents_started: Cell::new(0),
            // Placeholders until `Init` (see `Shared::configure`); no
            // script code runs before then.
            memory_bytes: Cell::new(0),
            log_budget: RefCell::new(LogBudget::new(0)),
            clock: Clock::new(Duration::MAX, Duration::MAX, None),
        });
        let built = build_engine(&shared);
        Engine { shared, built }
    }

    /// The channel to the host, to wait for `Init` on.
    pub(crate) fn channel(&self) -> std::cell::RefMut<'_, Channel> {
        self.shared.chan.borrow_mut()
    }
}

fn build_engine(shared: &Rc<Shared>) -> Result<Built, BuildError> {
    let rt = Runtime::new()?;
    rt.set_max_stack_size(2 * 1024 * 1024);
    // No collection while the engine is built: the intrinsics and the
    // prelude pass QuickJS's first threshold (256 KiB) and a full GC there
    // would find almost nothing to free (a percent of a short run's
    // worker). The threshold is then what that GC would have left.
    rt.set_gc_threshold(usize::MAX);
    let ctx = Context::full(&rt)?;
    let internal = ctx
        .with(|ctx| {
            let natives = natives::install(&ctx, shared).map_err(|e| describe(&ctx, e))?;
            let prelude = load_prelude(&ctx).map_err(|e| describe(&ctx, e))?;
            let internal: Object = prelude.call((natives,)).map_err(|e| describe(&ctx, e))?;
            Ok::<_, String>(Persistent::save(&ctx, internal))
        })
        .map_err(BuildError::Prelude)?;
    pin_arenas(&ctx);
    let built = usize::try_from(rt.memory_usage().malloc_size).unwrap_or(0);
    rt.set_gc_threshold(GC_FIRST_THRESHOLD.max(built.saturating_add(built / 2)));
    Ok(Built { internal, ctx, rt })
}

impl Shared {
    /// The run's limits, from `Init`, before any script code runs.
    fn configure(&self, limits: &dsh_protocol::Limits) {
        self.memory_bytes.set(limits.memory_bytes);
        *self.log_budget.borrow_mut() = LogBudget::new(limits.log_bytes);
        self.clock.configure(
            Duration::from_millis(limits.sync_timeout_ms),
            Duration::from_millis(limits.cancel_interrupt_ms),
            limits.compute_ms.map(Duration::from_millis),
        );
    }
}

/// What an engine error says: an exception's message and stack, or the
/// error itself.
fn describe(ctx: &Ctx<'_>, e: rquickjs::Error) -> String {
    if e.is_exception() {
        let v = ctx.catch();
        match v.as_exception() {
            Some(ex) => format!(
                "{}{}",
                ex.message().unwrap_or_default(),
                ex.stack().map(|s| format!("\n{s}")).unwrap_or_default()
            ),
            None => format!("{v:?}"),
        }
    } else {
        e.to_string()
    }
}

/// Runs the whole life of a worker after `Init` (and its sandbox): the
/// run's limits, the body compiled, Ready, wait for Go, run the body, End.
/// Returns when `End` has been written (or the host is gone).
pub(crate) fn run(engine: Engine, init: Init, sandbox: SandboxReport) -> Result<(), ChannelError> {
    let limits = &init.limits;
    let Engine { shared, built } = engine;
    shared.configure(limits);
    let Built { internal, ctx, rt } = match built {
        Ok(built) => built,
        Err(e) => return fail_before_start(&shared, e.to_string()),
    };
    rt.set_memory_limit(usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX));
    {
        let shared = shared.clone();
        let mut last_poll = Instant::now();
        rt.set_interrupt_handler(Some(Box::new(move || {
            if !shared.clock.is_cancelled() && last_poll.elapsed() >= CANCEL_POLL_EVERY {
                last_poll = Instant::now();
                if let Ok(mut chan) = shared.chan.try_borrow_mut() {
                    // Narration written during a long slice goes out now,
                    // before any cancel could make the host drop it.
                    let flushed = chan.flush();
                    // A dead host also means: stop.
                    if flushed.is_err() || chan.poll_inbox().unwrap_or(true) {
                        shared.clock.note_cancel();
                    }
                }
            }
            shared.clock.should_interrupt()
        })));
    }

    let outcome = ctx.with(|ctx| drive(&ctx, &shared, &init, sandbox, internal));
    let mut end = shared.end.borrow_mut().take();
    if let Some(end) = end.as_mut() {
        end.log_bytes_dropped = shared.log_budget.borrow().dropped();
    }
    let mut chan = shared.chan.borrow_mut();
    match outcome {
        Ok(()) => {
            if let Some(result) = end {
                let agents_started = result.agents_started;
                let log_bytes_dropped = result.log_bytes_dropped;
                let value_len = match &result.outcome {
                    EndOutcome::Completed { value_json } => value_json.len(),
                    EndOutcome::Failed { .. } | EndOutcome::Cancelled { .. } => 0,
                };
                if let Err(ChannelError::Frame(FrameError::TooLargeToSend { len, max })) =
                    chan.send(&WorkerMsg::End { result })
                {
                    // The frame is the value plus its message around it: say
                    // both, so a value of exactly the limit does not read
                    // as "N over a limit of N".
                    let mut end = EndResult::new(
                        EndOutcome::failed(
                            ErrorCode::ResultUnserializable,
                            format!(
                                "value: the return value is {value_len} bytes of JSON; with the \
                                 message around it that is {len} bytes, over the protocol's \
                                 frame limit of {max} bytes; return less, or a summary"
                            ),
                        ),
                        agents_started,
                    );
                    end.log_bytes_dropped = log_bytes_dropped;
                    chan.send(&WorkerMsg::End { result: end })?;
                }
            }
            chan.flush()?;
            drop(chan);
            // The process exits next: tearing the engine down (a full GC
            // and a free of every object) would only delay the exit and
            // take CPU from other runs (a tenth of a short run's worker
            // time); the kernel takes the memory back at once.
            std::mem::forget(ctx);
            std::mem::forget(rt);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn fail_before_start(shared: &Shared, message: String) -> Result<(), ChannelError> {
    let mut chan = shared.chan.borrow_mut();
    chan.send(&WorkerMsg::End {
        result: EndResult::new(EndOutcome::failed(ErrorCode::WorkerExited, message), 0),
    })?;
    chan.flush()
}

/// The entry points the prelude returns.
struct Internal<'js> {
    run: Function<'js>,
    deliver: Function<'js>,
    fire_timer: Function<'js>,
    cancel: Function<'js>,
    force_end: Function<'js>,
}

fn eval_opts(filename: &str) -> EvalOptions {
    let mut opts = EvalOptions::default();
    opts.global = true;
    opts.strict = false;
    opts.promise = false;
    opts.backtrace_barrier = true;
    opts.filename = Some(filename.to_string());
    opts
}

/// The prelude's bytecode, compiled by build.rs (empty if that failed).
const PRELUDE_BYTECODE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/prelude.bc"));

/// The prelude function: from bytecode when it loads, else from source.
fn load_prelude<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Function<'js>> {
    if !PRELUDE_BYTECODE.is_empty()
        && let Some(f) = bytecode::eval(ctx, PRELUDE_BYTECODE)
            .ok()
            .and_then(|v| v.into_function())
    {
        return Ok(f);
    }
    ctx.eval_with_options(PRELUDE, eval_opts("dsh:prelude"))
}

fn init_object<'js>(ctx: &Ctx<'js>, init: &Init) -> rquickjs::Result<Object<'js>> {
    let o = Object::new(ctx.clone())?;
    o.set("scriptName", init.script_name.as_str())?;
    let limits = Object::new(ctx.clone())?;
    limits.set("maxConcurrentAgents", init.limits.max_concurrent_agents)?;
    limits.set("maxTotalAgents", init.limits.max_total_agents as f64)?;
    limits.set("maxItemsPerCall", init.limits.max_items_per_call as f64)?;
    o.set("limits", limits)?;
    o.set("memoryBytes", init.limits.memory_bytes as f64)?;
    // Room for the rest of the ChildStart frame around prompt and schema.
    o.set(
        "maxRequestBytes",
        (dsh_protocol::DEFAULT_MAX_FRAME_BYTES - 64 * 1024) as f64,
    )?;
    match init.limits.budget_tokens {
        Some(b) => o.set("budget", b as f64)?,
        None => o.set("budget", rquickjs::Null)?,
    }
    let (kind, text) = match &init.args {
        Args::None => ("none", ""),
        Args::Json(t) => ("json", t.as_str()),
        Args::Text(t) => ("text", t.as_str()),
    };
    o.set("argsKind", kind)?;
    o.set("argsText", text)?;
    Ok(o)
}

/// The engine refused the run's part (an exception, described): the run
/// fails with `SCRIPT_PARSE`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Rejected(String);

/// The run's part of the engine: the prelude's entry points, `configure`
/// called with the run's init data, the body compiled.
fn build<'js>(
    ctx: &Ctx<'js>,
    init: &Init,
    internal: Persistent<Object<'static>>,
) -> Result<(Internal<'js>, Function<'js>), Rejected> {
    let internal: Object = internal
        .restore(ctx)
        .map_err(|e| Rejected(describe(ctx, e)))?;
    let get = |name: &str| -> Result<Function<'js>, Rejected> {
        internal.get(name).map_err(|e| Rejected(describe(ctx, e)))
    };
    let configure = get("configure")?;
    let init_obj = init_object(ctx, init).map_err(|e| Rejected(describe(ctx, e)))?;
    configure
        .call::<_, ()>((init_obj,))
        .map_err(|e| Rejected(describe(ctx, e)))?;
    let internal = Internal {
        run: get("run")?,
        deliver: get("deliver")?,
        fire_timer: get("fireTimer")?,
        cancel: get("cancel")?,
        force_end: get("forceEnd")?,
    };
    let body: Function = ctx
        .eval_with_options(init.script_js.as_str(), eval_opts(&init.script_name))
        .map_err(|e| Rejected(describe(ctx, e)))?;
    Ok((internal, body))
}

fn drive<'js>(
    ctx: &Ctx<'js>,
    shared: &Rc<Shared>,
    init: &Init,
    sandbox: SandboxReport,
    internal: Persistent<Object<'static>>,
) -> Result<(), ChannelError> {
    shared.clock.start_slice();
    let (internal, body) = match build(ctx, init, internal) {
        Ok(x) => x,
        Err(message) => {
            shared.set_end(EndOutcome::failed(
                ErrorCode::ScriptParse,
                format!(
                    "{}: the engine rejected the prepared script: {message}",
                    init.script_name
                ),
            ));
            return Ok(());
        }
    };

    release_free_heap();
    memory::mark_baseline();
    {
        let mut chan = shared.chan.borrow_mut();
        chan.send(&WorkerMsg::Ready { sandbox })?;
        chan.flush()?;
    }

    // Ready → Go: a run cancelled before the body starts never runs a line
    // of it. The host sends `Go` with `Init`, so it is usually in already;
    // a `Cancel` sent since (the run cancelled while this worker built it)
    // wins over it.
    loop {
        let msg = {
            let mut chan = shared.chan.borrow_mut();
            chan.wait(None)?;
            chan.pop()
        };
        match msg {
            Some(HostMsg::Go) => {
                if shared.chan.borrow_mut().poll_inbox()? {
                    continue;
                }
                shared.clock.start_compute();
                break;
            }
            Some(HostMsg::Cancel { reason }) => {
                let (code, message) = cancel_text(&reason);
                shared.set_end(EndOutcome::cancelled(code, message));
                return Ok(());
            }
            Some(_) | None => continue,
        }
    }

    let body_promise: RefCell<Option<rquickjs::Promise<'_>>> = RefCell::new(None);
    let lp = Loop {
        ctx,
        shared,
        internal: &internal,
        body: &body_promise,
    };
    lp.slice(|| {
        let p: rquickjs::Promise = internal.run.call((body,))?;
        *body_promise.borrow_mut() = Some(p);
        Ok(())
    });
    lp.run()
}

/// The code and message a cancelled run settles with.
fn cancel_text(reason: &CancelReason) -> (ErrorCode, String) {
    match reason {
        CancelReason::Requested(why) if why.is_empty() => {
            (ErrorCode::Cancelled, "the run was cancelled".into())
        }
        CancelReason::Requested(why) => (
            ErrorCode::Cancelled,
            format!("the run was cancelled: {why}"),
        ),
        CancelReason::WallTimeout { limit_ms } => (
            ErrorCode::Timeout,
            format!("the run's wall-clock budget of {limit_ms} ms ran out"),
        ),
    }
}

impl Shared {
    fn clock_sync_ms(&self) -> u128 {
        self.clock.sync_limit().as_millis()
    }
}
