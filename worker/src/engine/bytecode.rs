//! QuickJS bytecode for the prelude: compiled once when the worker is built
//! (see build.rs), loaded per run. Parsing the prelude's source costs about
//! 1 ms a run; reading its bytecode a small fraction of that.

use rquickjs::{Ctx, Value, qjs};

/// What the engine said when it refused to compile or load the prelude
/// (an exception's message). Written by hand rather than with `thiserror`:
/// build.rs includes this file and has no dependency but the engine.
#[derive(Debug)]
pub struct BytecodeError(pub String);

impl std::fmt::Display for BytecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BytecodeError {}

/// Compiles `source` as a global script into bytecode.
pub fn compile(ctx: &Ctx<'_>, source: &str, filename: &str) -> Result<Vec<u8>, BytecodeError> {
    let src = std::ffi::CString::new(source).map_err(|e| BytecodeError(e.to_string()))?;
    let name = std::ffi::CString::new(filename).map_err(|e| BytecodeError(e.to_string()))?;
    let raw = ctx.as_raw().as_ptr();
    // SAFETY: `raw` is the live context of `ctx`; the strings are
    // NUL-terminated and outlive the call; the returned value is owned by us
    // and freed by the `Value` wrapper.
    let func = unsafe {
        let v = qjs::JS_Eval(
            raw,
            src.as_ptr(),
            source.len() as _,
            name.as_ptr(),
            (qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_COMPILE_ONLY) as i32,
        );
        Value::from_raw(ctx.clone(), v)
    };
    if func.is_exception() {
        return Err(describe(ctx));
    }
    let mut len: qjs::size_t = 0;
    // SAFETY: `func` is a live compiled function of this context; the buffer
    // returned is allocated by QuickJS, copied out, then freed with js_free.
    unsafe {
        let buf = qjs::JS_WriteObject(
            raw,
            &mut len,
            func.as_raw(),
            qjs::JS_WRITE_OBJ_BYTECODE as i32,
        );
        if buf.is_null() {
            return Err(describe(ctx));
        }
        let bytes = std::slice::from_raw_parts(buf, len as usize).to_vec();
        qjs::js_free(raw, buf as *mut _);
        Ok(bytes)
    }
}

/// Loads bytecode produced by [`compile`] with the same engine and runs it,
/// returning the script's completion value.
pub fn eval<'js>(ctx: &Ctx<'js>, bytes: &[u8]) -> Result<Value<'js>, BytecodeError> {
    let raw = ctx.as_raw().as_ptr();
    // SAFETY: the bytes come from `compile` with the same QuickJS build
    // (embedded at build time from this crate's own engine); ReadObject
    // validates the format version; the returned values are owned by us.
    unsafe {
        let obj = qjs::JS_ReadObject(
            raw,
            bytes.as_ptr(),
            bytes.len() as _,
            qjs::JS_READ_OBJ_BYTECODE as i32,
        );
        let obj = Value::from_raw(ctx.clone(), obj);
        if obj.is_exception() {
            return Err(describe(ctx));
        }
        // EvalFunction consumes its argument: hand it its own reference.
        let v = qjs::JS_EvalFunction(raw, qjs::JS_DupValue(raw, obj.as_raw()));
        let v = Value::from_raw(ctx.clone(), v);
        if v.is_exception() {
            return Err(describe(ctx));
        }
        Ok(v)
    }
}

fn describe(ctx: &Ctx<'_>) -> BytecodeError {
    let e = ctx.catch();
    BytecodeError(
        e.as_exception()
            .and_then(|x| x.message())
            .unwrap_or_else(|| format!("{e:?}")),
    )
}
