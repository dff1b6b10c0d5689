//! The event loop of one run: slices of JavaScript (a macrotask and the
//! microtasks it queues) between waits on the socket, the next timer as
//! the timeout; host messages are turned into settled promises here.

use super::*;

/// The numbers the prelude's `deliver(kind, callId, …)` takes (its
/// `DELIVER_*` and `OUTCOME_*` constants): numbers, so no string is made
/// and compared per reply.
mod deliver {
    pub(super) const START_ERROR: u8 = 0;
    pub(super) const SETTLED: u8 = 1;
    pub(super) const FAILED: u8 = 2;
    pub(super) const WORKFLOW_LOADED: u8 = 3;
    pub(super) const WORKFLOW_ERROR: u8 = 4;
    /// A settled call's outcome.
    pub(super) const TEXT: u8 = 0;
    pub(super) const STRUCTURED: u8 = 1;
    pub(super) const FAILED_OUTCOME: u8 = 2;
    pub(super) const CANCELLED: u8 = 3;
}

pub(super) enum Job<'js> {
    Ran,
    Idle,
    Threw(rquickjs::Value<'js>),
}

pub(super) struct Loop<'a, 'js> {
    pub(super) ctx: &'a Ctx<'js>,
    pub(super) shared: &'a Rc<Shared>,
    pub(super) internal: &'a Internal<'js>,
    /// The body's promise: the backstop for an End the prelude could not
    /// write (its handler failed, e.g. out of memory).
    pub(super) body: &'a RefCell<Option<rquickjs::Promise<'js>>>,
}

impl<'js> Loop<'_, 'js> {
    /// Runs one macrotask and drains its microtasks, as one slice.
    pub(super) fn slice(&self, task: impl FnOnce() -> rquickjs::Result<()>) {
        self.shared.clock.start_slice();
        if task().is_err() {
            // Exceptions inside the prelude's entry points are caught there;
            // what reaches us is an interrupt or an engine failure.
            let thrown = self.ctx.catch();
            self.escaped(thrown);
        }
        while self.shared.clock.fired().is_none() && !self.shared.ended() {
            match self.run_job() {
                Job::Ran => {}
                Job::Idle => break,
                Job::Threw(thrown) => self.escaped(thrown),
            }
        }
    }

    /// `deliver(SETTLED, callId, outcome, payload, outputTokens)`, the one
    /// call made for nearly every `agent()` answer, made directly: through
    /// rquickjs's `Function::call` the arguments' conversion, their vector
    /// and the return value's took about 2,000 instructions a call beside
    /// the call itself (callgrind, docs/performance.md round 12).
    fn deliver_settled(
        &self,
        call_id: f64,
        outcome: u8,
        payload: &str,
        output_tokens: f64,
    ) -> rquickjs::Result<()> {
        use rquickjs::qjs;
        let ctx = self.ctx.as_raw().as_ptr();
        // SAFETY: `ctx` is the live context this loop runs in (we are
        // inside `Context::with`) and `deliver` one of its functions. The
        // string is created from a valid UTF-8 slice with its length; the
        // numbers need no freeing; the string and the call's result are
        // freed exactly once, and an exception stays pending on the
        // context for `slice` to catch, as with `Function::call`.
        unsafe {
            let text = qjs::JS_NewStringLen(ctx, payload.as_ptr().cast(), payload.len() as _);
            if qjs::JS_IsException(text) {
                return Err(rquickjs::Error::Exception);
            }
            let mut args = [
                qjs::JS_NewFloat64(f64::from(deliver::SETTLED)),
                qjs::JS_NewFloat64(call_id),
                qjs::JS_NewFloat64(f64::from(outcome)),
                text,
                qjs::JS_NewFloat64(output_tokens),
            ];
            let ret = qjs::JS_Call(
                ctx,
                self.internal.deliver.as_raw(),
                qjs::JS_UNDEFINED,
                args.len() as _,
                args.as_mut_ptr(),
            );
            qjs::JS_FreeValue(ctx, text);
            if qjs::JS_IsException(ret) {
                return Err(rquickjs::Error::Exception);
            }
            qjs::JS_FreeValue(ctx, ret);
        }
        Ok(())
    }

    /// Runs one pending promise job. Unlike rquickjs's helper this reports
    /// an exception that escaped the job: ordinary script errors never do
    /// (promise jobs capture them), so one that does is an interrupt or the
    /// engine running out of memory, and the run must end.
    fn run_job(&self) -> Job<'js> {
        let ctx = self.ctx.as_raw().as_ptr();
        let mut job_ctx = std::mem::MaybeUninit::<*mut rquickjs::qjs::JSContext>::uninit();
        // SAFETY: `ctx` is the live context this loop runs in (we are inside
        // `Context::with`), and JS_ExecutePendingJob only writes `job_ctx`.
        let res = unsafe {
            let rt = rquickjs::qjs::JS_GetRuntime(ctx);
            rquickjs::qjs::JS_ExecutePendingJob(rt, job_ctx.as_mut_ptr())
        };
        match res {
            0 => Job::Idle,
            r if r > 0 => Job::Ran,
            // There is only one context, so the exception is pending on ours.
            _ => Job::Threw(self.ctx.catch()),
        }
    }

    /// The body settled but the prelude's handler wrote no End: the
    /// handler failed itself, which only an exhausted heap makes happen (a
    /// rejection's own message is used when it has one).
    fn check_body_settled(&self) {
        if self.shared.ended() || self.shared.clock.fired().is_some() {
            return;
        }
        let Some(promise) = self.body.borrow().clone() else {
            return;
        };
        match promise.state() {
            rquickjs::promise::PromiseState::Pending => {}
            rquickjs::promise::PromiseState::Rejected => {
                let reason = match promise.result::<rquickjs::Value>() {
                    Some(Err(_)) => self.ctx.catch(),
                    _ => rquickjs::Value::new_null(self.ctx.clone()),
                };
                self.escaped(reason);
            }
            rquickjs::promise::PromiseState::Resolved => {
                self.escaped(rquickjs::Value::new_null(self.ctx.clone()));
            }
        }
    }

    /// An exception escaped into the loop: unless it is the interrupt (whose
    /// End is written by `interrupted`), end the run with what it says.
    fn escaped(&self, thrown: rquickjs::Value<'js>) {
        if self.shared.clock.fired().is_some() || self.shared.ended() {
            return;
        }
        let message = thrown
            .as_exception()
            .and_then(|e| e.message())
            .or_else(|| thrown.as_string().and_then(|s| s.to_string().ok()));
        // Here a bare null can only be the engine's: a script's own `throw
        // null` is captured by the promise machinery and reported by the
        // prelude. Null means QuickJS could not even allocate its
        // out-of-memory error.
        let out_of_memory = thrown.is_null() || message.as_deref() == Some("out of memory");
        let (code, text) = if out_of_memory {
            (
                ErrorCode::Memory,
                format!(
                    "the script exceeded its memory limit of {} bytes (memoryBytes)",
                    self.shared.memory_bytes.get()
                ),
            )
        } else {
            (
                ErrorCode::ScriptError,
                format!(
                    "the engine stopped the script: {}",
                    message.unwrap_or_else(|| "unknown engine error".into())
                ),
            )
        };
        self.shared.set_end(EndOutcome::failed(code, text));
    }

    fn interrupted(&self) -> bool {
        match self.shared.clock.fired() {
            None => false,
            Some(why) => {
                let outcome = match why {
                    Interrupted::SyncTimeout => EndOutcome::failed(
                        ErrorCode::Timeout,
                        format!(
                            "a synchronous slice of the script ran longer than syncTimeoutMs ({} ms); \
                             the script was stopped",
                            self.shared.clock_sync_ms()
                        ),
                    ),
                    Interrupted::Compute => EndOutcome::failed(
                        ErrorCode::Timeout,
                        format!(
                            "the script used more than computeMs ({} ms) of CPU time; the \
                             script was stopped",
                            self.shared
                                .clock
                                .compute_limit()
                                .map_or(0, |d| d.as_millis())
                        ),
                    ),
                    Interrupted::Cancelled => EndOutcome::cancelled(
                        ErrorCode::Cancelled,
                        "the run was cancelled; the script kept running and was interrupted",
                    ),
                };
                self.shared.set_end(outcome);
                true
            }
        }
    }

    pub(super) fn run(&self) -> Result<(), ChannelError> {
        let mut cancel_reason: Option<CancelReason> = None;
        loop {
            self.check_body_settled();
            if self.interrupted() || self.shared.ended() {
                if let (Some(reason), Some(end)) =
                    (&cancel_reason, self.shared.end.borrow_mut().as_mut())
                {
                    // However the body ended, a cancelled run reports the cancel.
                    let (code, message) = cancel_text(reason);
                    end.outcome = EndOutcome::cancelled(code, message);
                }
                return Ok(());
            }
            let wait = self.shared.timers.borrow_mut().next_wait(Instant::now());
            let msg = {
                let mut chan = self.shared.chan.borrow_mut();
                chan.wait(wait)?;
                chan.pop()
            };
            if let Some(msg) = msg {
                self.handle(msg, &mut cancel_reason);
                continue;
            }
            let due = self.shared.timers.borrow_mut().pop_due(Instant::now());
            if let Some(id) = due {
                self.slice(|| self.internal.fire_timer.call::<_, ()>((id as f64,)));
            }
        }
    }

    fn handle(&self, msg: HostMsg, cancel_reason: &mut Option<CancelReason>) {
        let d = &self.internal.deliver;
        match msg {
            HostMsg::Cancel { reason } => self.on_cancel(reason, cancel_reason),
            // Nothing in the script can see that a child started (its id
            // is in the host's events, not in `agent()`'s promise), so no
            // JavaScript runs for it: one slice fewer per call.
            HostMsg::ChildStarted { .. } => {}
            HostMsg::ChildStartError {
                call_id,
                code,
                message,
            } => {
                self.slice(|| {
                    d.call::<_, ()>((deliver::START_ERROR, call_id as f64, code.as_str(), message))
                });
            }
            HostMsg::ChildSettled {
                call_id,
                outcome,
                usage,
            } => {
                let out = usage.map(|u| u.output as f64).unwrap_or(0.0);
                let (kind, payload) = match outcome {
                    ChildOutcome::Text(t) => (deliver::TEXT, t),
                    ChildOutcome::Structured(j) => (deliver::STRUCTURED, j),
                    ChildOutcome::Failed(r) => (deliver::FAILED_OUTCOME, r),
                    ChildOutcome::Cancelled => (deliver::CANCELLED, String::new()),
                };
                self.slice(|| self.deliver_settled(call_id as f64, kind, &payload, out));
            }
            HostMsg::ChildFailed { call_id, message } => {
                self.slice(|| d.call::<_, ()>((deliver::FAILED, call_id as f64, message)));
            }
            HostMsg::WorkflowLoaded { call_id, workflow } => {
                self.on_workflow_loaded(call_id, workflow);
            }
            HostMsg::WorkflowLoadError {
                call_id,
                code,
                message,
            } => {
                self.slice(|| {
                    d.call::<_, ()>((
                        deliver::WORKFLOW_ERROR,
                        call_id as f64,
                        code.as_str(),
                        message,
                    ))
                });
            }
            // Out of place here; a confused host is not a reason to crash.
            HostMsg::Init(_) | HostMsg::Go => {}
        }
    }

    /// The first cancel: timers cleared, every hook told (they throw
    /// CANCELLED from now on), and the run ended here when nothing else
    /// can settle the body; a second cancel changes nothing.
    fn on_cancel(&self, reason: CancelReason, cancel_reason: &mut Option<CancelReason>) {
        if cancel_reason.is_some() {
            return;
        }
        self.shared.clock.note_cancel();
        self.shared.timers.borrow_mut().clear_all();
        let (code, message) = cancel_text(&reason);
        *cancel_reason = Some(reason);
        // Inside the script every hook throws CANCELLED after any
        // cancel, a wall timeout included (contract §7); the run's
        // own code (TIMEOUT for the wall budget) is in the End.
        self.slice(|| {
            self.internal
                .cancel
                .call::<_, ()>((ErrorCode::Cancelled.as_str(), message.as_str()))
        });
        // Whatever could still settle the body needed the host or a
        // timer; both are gone now. End the run here.
        if !self.shared.ended() && self.shared.clock.fired().is_none() {
            let _ = self
                .internal
                .force_end
                .call::<_, ()>((code.as_str(), message.as_str()));
        }
    }

    /// A nested workflow the host prepared: compiled here and handed to
    /// the waiting `workflow()` call, or its rejection.
    fn on_workflow_loaded(
        &self,
        call_id: dsh_protocol::CallId,
        workflow: dsh_protocol::LoadedWorkflow,
    ) {
        let d = &self.internal.deliver;
        // The host prepared the child, so its code compiles; if the
        // engine refuses it anyway, workflow() rejects saying so.
        let compiled: rquickjs::Result<rquickjs::Value> = self.ctx.eval_with_options(
            workflow.script_js.as_str(),
            eval_opts(&workflow.script_name),
        );
        match compiled {
            Ok(outer) => self.slice(|| {
                d.call::<_, ()>((
                    deliver::WORKFLOW_LOADED,
                    call_id as f64,
                    outer,
                    workflow.name,
                    workflow.script_name,
                ))
            }),
            Err(_) => {
                let why = self.ctx.catch();
                let why = why
                    .as_exception()
                    .and_then(|e| e.message())
                    .unwrap_or_else(|| "the engine refused it".into());
                let message = format!(
                    "workflow(): {}: the engine rejected the prepared script: {why}",
                    workflow.script_name
                );
                self.slice(|| {
                    d.call::<_, ()>((
                        deliver::WORKFLOW_ERROR,
                        call_id as f64,
                        ErrorCode::ScriptParse.as_str(),
                        message,
                    ))
                });
            }
        }
    }
}
