// The script-facing hook layer of the dsh worker (contract §2–§6).
//
// Evaluated once per engine, before the script. It is a function of the
// native bindings `N` (see engine/natives.rs) and the run's init data, and
// returns the internal entry points the Rust loop drives: `run`, `deliver`,
// `fireTimer`, `cancel`. Everything a script can reach is installed on
// globalThis here; the natives themselves never are.
//
// Built-ins are captured before any script code runs, so a script that
// replaces `JSON.stringify` or `Array.isArray` can confuse only itself, not
// the value boundary or the error classification.
(function (N, init) {
  "use strict";

  const G = globalThis;
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const getPrototypeOf = Object.getPrototypeOf;
  const defineProperty = Object.defineProperty;
  const objectKeys = Object.keys;
  const ownSymbols = Object.getOwnPropertySymbols;
  const ownNames = Object.getOwnPropertyNames;
  const freeze = Object.freeze;
  const create = Object.create;
  const isArray = Array.isArray;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const PromiseCtor = Promise;
  const promiseThen = Promise.prototype.then;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseReject = Promise.reject.bind(Promise);
  const isFiniteNumber = Number.isFinite;
  const ErrorCtor = Error;
  const StringCtor = String;
  const arrayFrom = Array.from;
  const MapCtor = Map;
  const SetCtor = Set;
  const WeakSetCtor = WeakSet;
  const identRe = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  // Brackets a bigint's digits inside console JSON so they print unquoted.
  const BIG = "\ue000dsh-bigint\ue000";

  const limits = init.limits;
  const scriptName = init.scriptName;

  // ---------------------------------------------------------------- errors

  // Only errors created here are fatal: a script cannot forge one by
  // throwing an object that merely looks like a WorkflowError.
  const runtimeErrors = new WeakSetCtor();

  class WorkflowError extends ErrorCtor {
    constructor(code, message) {
      super(message);
      defineProperty(this, "name", { value: "WorkflowError", writable: true, configurable: true });
      this.code = code;
      this.fatal = true;
    }
  }

  function fatal(code, message) {
    const e = new WorkflowError(code, message);
    runtimeErrors.add(e);
    return e;
  }

  function isFatal(e) {
    return e !== null && typeof e === "object" && runtimeErrors.has(e);
  }

  // ---------------------------------------------------------------- state

  let cancelled = false;
  let cancelCode = "CANCELLED";
  let cancelMessage = "the run was cancelled";
  let ended = false;
  let currentPhase = null;
  let agentsStarted = 0;
  let running = 0;
  let spent = 0;
  const queue = []; // calls waiting for a slot, FIFO
  const calls = new MapCtor(); // callId -> call record, until settled

  function cancelledError() {
    return fatal(cancelCode, cancelMessage);
  }

  // ---------------------------------------------------------------- describing values

  function pathKey(path, key) {
    return identRe.test(key) ? path + "." + key : path + "[" + stringify(key) + "]";
  }

  function typeName(v) {
    if (v === null) return "null";
    if (isArray(v)) return "an array";
    const t = typeof v;
    if (t === "object") {
      let proto;
      try {
        proto = getPrototypeOf(v);
      } catch (_) {
        return "an object";
      }
      if (proto === null || proto === ObjectProto) return "an object";
      const ctor = proto && proto.constructor;
      const name = ctor && typeof ctor.name === "string" && ctor.name ? ctor.name : "object";
      return "a " + name;
    }
    if (t === "undefined") return "undefined";
    return "a " + t;
  }

  // ---------------------------------------------------------------- value boundary (§5)

  function boundaryError(code, path, message) {
    return fatal(code, path + ": " + message);
  }

  // Copies `v` into plain, lossless JSON data or throws `code` naming the
  // offending path. Getters are called exactly once (the copy is what gets
  // serialized), a DAG is fine, a cycle is not.
  function toPlain(v, path, code, stack) {
    switch (typeof v) {
      case "string":
      case "boolean":
        return v;
      case "number":
        if (!isFiniteNumber(v)) throw boundaryError(code, path, StringCtor(v) + " is not representable in JSON");
        return v;
      case "undefined":
        throw boundaryError(code, path, "undefined is not JSON (use null, or leave the key out)");
      case "function":
        throw boundaryError(code, path, "a function is not JSON");
      case "symbol":
        throw boundaryError(code, path, "a symbol is not JSON");
      case "bigint":
        throw boundaryError(code, path, "a bigint is not JSON (convert it to a number or a string)");
    }
    if (v === null) return null;
    if (stack.has(v)) throw boundaryError(code, path, "cycle: the value contains itself");
    stack.add(v);
    try {
      let proto;
      try {
        proto = getPrototypeOf(v);
      } catch (e) {
        throw boundaryError(code, path, "cannot inspect the value: " + describeThrown(e));
      }
      if (isArray(v)) {
        if (proto !== ArrayProto) throw boundaryError(code, path, "an array subclass is not plain JSON");
        if (ownSymbols(v).length > 0) throw boundaryError(code, path, "symbol keys are not JSON");
        const n = v.length;
        const names = ownNames(v);
        if (names.length !== n + 1) {
          for (const k of names) {
            if (k === "length") continue;
            const i = +k;
            if (!(StringCtor(i >>> 0) === k && i < n)) {
              throw boundaryError(code, path, "an array with the extra property " + stringify(k) + " is not plain JSON");
            }
          }
          for (let i = 0; i < n; i++) {
            if (!(i in v)) throw boundaryError(code, path, "a sparse array (hole at index " + i + ") is not plain JSON");
          }
        }
        const out = [];
        for (let i = 0; i < n; i++) {
          const itemPath = path + "[" + i + "]";
          let item;
          try {
            item = v[i];
          } catch (e) {
            throw boundaryError(code, itemPath, "the getter threw: " + describeThrown(e));
          }
          out.push(toPlain(item, itemPath, code, stack));
        }
        return out;
      }
      if (proto !== ObjectProto && proto !== null) {
        throw boundaryError(code, path, typeName(v) + " is not a plain object (only {…} literals and arrays are JSON)");
      }
      if (ownSymbols(v).length > 0) throw boundaryError(code, path, "symbol keys are not JSON");
      const out = create(null);
      for (const k of objectKeys(v)) {
        const childPath = pathKey(path, k);
        let child;
        try {
          child = v[k];
        } catch (e) {
          throw boundaryError(code, childPath, "the getter threw: " + describeThrown(e));
        }
        defineProperty(out, k, {
          value: toPlain(child, childPath, code, stack),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    } finally {
      stack.delete(v);
    }
  }

  function toJsonText(v, path, code) {
    return stringify(toPlain(v, path, code, new SetCtor()));
  }

  // ---------------------------------------------------------------- rendering thrown values and log arguments

  function safeString(v) {
    try {
      return StringCtor(v);
    } catch (_) {
      return "[unprintable " + typeof v + "]";
    }
  }

  // The first position inside the script file, from an engine stack.
  function scriptPosition(e) {
    let stack;
    try {
      stack = e.stack;
    } catch (_) {
      return null;
    }
    if (typeof stack !== "string") return null;
    const marker = scriptName + ":";
    let at = stack.indexOf(marker);
    while (at !== -1) {
      const m = /^(\d+):(\d+)/.exec(stack.slice(at + marker.length));
      if (m) return scriptName + ":" + m[1] + ":" + m[2];
      at = stack.indexOf(marker, at + 1);
    }
    return null;
  }

  function describeThrown(e) {
    if (e !== null && typeof e === "object") {
      let name, message;
      try {
        name = e.name;
        message = e.message;
      } catch (_) {
        return "[object that throws on access]";
      }
      if (typeof message === "string") {
        return (typeof name === "string" && name ? name + ": " : "") + message;
      }
      return formatValue(e);
    }
    return formatValue(e);
  }

  // Compact JSON for log arguments; cycles as "[Circular]", bigints as their
  // digits; never "[object Object]".
  function formatValue(v) {
    if (typeof v === "string") return v;
    if (v instanceof ErrorCtor) {
      try {
        return (v.name || "Error") + ": " + v.message;
      } catch (_) {
        return "Error";
      }
    }
    if (typeof v === "bigint") return StringCtor(v);
    if (typeof v === "object" && v !== null) {
      const stack = [];
      try {
        const text = stringify(v, function (key, value) {
          if (typeof value === "bigint") return BIG + StringCtor(value) + BIG;
          if (value instanceof ErrorCtor) return describeThrown(value);
          if (typeof value === "object" && value !== null) {
            // `this` is the holder; trim the ancestor stack down to it.
            while (stack.length > 0 && stack[stack.length - 1] !== this) stack.pop();
            if (stack.indexOf(value) !== -1) return "[Circular]";
            stack.push(value);
          }
          return value;
        });
        if (typeof text === "string") return text.split('"' + BIG).join("").split(BIG + '"').join("");
        if (text === undefined) return typeName(v).replace(/^an? /, "[") + "]";
      } catch (_) {
        // fall through to the string form
      }
      const s = safeString(v);
      return s === "[object Object]" ? typeName(v).replace(/^an? /, "[") + "]" : s;
    }
    return safeString(v);
  }

  // ---------------------------------------------------------------- agent() (§3)

  const SUPPORTED_OPTIONS = ["label", "phase", "schema", "model", "provider", "effort", "agentType", "isolation"];
  const STRING_OPTIONS = ["label", "phase", "model", "provider", "effort", "agentType"];

  function defaultLabel(prompt) {
    let end = prompt.indexOf("\n");
    if (end === -1) end = prompt.length;
    let line = prompt.slice(0, end);
    if (line.endsWith("\r")) line = line.slice(0, -1);
    // Count characters (code points) only as far as needed: a prompt may be huge.
    const chars = [];
    for (const ch of line) {
      chars.push(ch);
      if (chars.length > 48) break;
    }
    return chars.length > 48 ? chars.slice(0, 47).join("") + "…" : line;
  }

  // Validates and normalizes options; throws the fatal error to reject with.
  function readOptions(options) {
    if (options === undefined || options === null) {
      if (options === null) throw fatal("INVALID_ARGUMENT", "agent(): options must be an object, got null");
      return { plain: {}, schemaJson: null };
    }
    if (typeof options !== "object" || isArray(options)) {
      throw fatal("INVALID_ARGUMENT", "agent(): options must be an object, got " + typeName(options));
    }
    // An option explicitly set to undefined counts as not given, so options
    // built with spreads and conditionals keep working.
    const given = {};
    for (const k of objectKeys(options)) {
      let v;
      try {
        v = options[k];
      } catch (e) {
        throw fatal("INVALID_ARGUMENT", pathKey("options", k) + ": the getter threw: " + describeThrown(e));
      }
      if (v !== undefined) given[k] = v;
    }
    if (getPrototypeOf(options) !== ObjectProto && getPrototypeOf(options) !== null) {
      throw fatal("INVALID_ARGUMENT", "options: " + typeName(options) + " is not a plain object");
    }
    const unknown = objectKeys(given).filter((k) => SUPPORTED_OPTIONS.indexOf(k) === -1);
    if (unknown.length > 0) {
      throw fatal(
        "UNSUPPORTED_OPTION",
        "agent(): unsupported option" + (unknown.length > 1 ? "s " : " ") + unknown.map((k) => stringify(k)).join(", ") +
          "; supported options: " + SUPPORTED_OPTIONS.join(", "),
      );
    }
    const plain = toPlain(given, "options", "INVALID_ARGUMENT", new SetCtor());
    for (const k of STRING_OPTIONS) {
      if (k in plain && typeof plain[k] !== "string") {
        throw fatal("INVALID_ARGUMENT", "options." + k + ": must be a string, got " + typeName(plain[k]));
      }
    }
    if ("isolation" in plain && plain.isolation !== "worktree") {
      throw fatal("INVALID_ARGUMENT", 'options.isolation: must be "worktree", got ' + stringify(plain.isolation));
    }
    let schemaJson = null;
    if ("schema" in plain) {
      const s = plain.schema;
      if (s === null || typeof s !== "object" || isArray(s)) {
        throw fatal("UNSUPPORTED_SCHEMA", "options.schema: must be a JSON Schema object with type \"object\", got " + typeName(s));
      }
      schemaJson = stringify(s);
      const violations = N.checkSchema(schemaJson, "options.schema");
      if (violations.length > 0) throw fatal("UNSUPPORTED_SCHEMA", violations.join("\n"));
    }
    return { plain, schemaJson };
  }

  function agent(prompt, options) {
    return new PromiseCtor(function (resolve, reject) {
      if (cancelled) throw cancelledError();
      if (typeof prompt !== "string" || prompt.length === 0) {
        throw fatal("INVALID_ARGUMENT", "agent(): prompt must be a non-empty string, got " +
          (typeof prompt === "string" ? "an empty string" : typeName(prompt)));
      }
      const { plain, schemaJson } = readOptions(options);
      const request = {
        prompt,
        label: "label" in plain ? plain.label : defaultLabel(prompt),
        phase: "phase" in plain ? plain.phase : currentPhase,
        schema: schemaJson,
        model: "model" in plain ? plain.model : null,
        provider: "provider" in plain ? plain.provider : null,
        effort: "effort" in plain ? plain.effort : null,
        agentType: "agentType" in plain ? plain.agentType : null,
        isolation: "isolation" in plain ? plain.isolation : null,
      };
      const requestJson = stringify(request);
      // UTF-16 length × 3 bounds the UTF-8 size; ask for the exact size only near the limit.
      if (requestJson.length * 3 > init.maxRequestBytes && N.utf8Bytes(requestJson) > init.maxRequestBytes) {
        throw fatal("INVALID_ARGUMENT", "agent(): the request (prompt, schema and options) is " + N.utf8Bytes(requestJson) +
          " bytes, over the limit of " + init.maxRequestBytes + " bytes for one request; send less");
      }
      if (agentsStarted >= limits.maxTotalAgents) {
        throw fatal("AGENT_CAP", "agent(): the run may start at most " + limits.maxTotalAgents +
          " agents (maxTotalAgents); this was call " + (agentsStarted + 1));
      }
      if (init.budget !== null && spent >= init.budget) {
        throw fatal("BUDGET", "agent(): the output-token budget of " + init.budget + " is spent (" + spent + " used)");
      }
      const id = N.admit(); // the host-visible seq: 1, 2, 3 … in admission order
      agentsStarted = id;
      const call = { id, requestJson, resolve, reject, hasSchema: schemaJson !== null, started: false };
      calls.set(id, call);
      if (running < limits.maxConcurrentAgents) startCall(call);
      else queue.push(call);
    });
  }

  function startCall(call) {
    running++;
    call.started = true;
    N.childStart(call.id, call.requestJson);
  }

  // A slot freed: start the oldest waiting call.
  function release() {
    running--;
    while (!cancelled && queue.length > 0 && running < limits.maxConcurrentAgents) {
      startCall(queue.shift());
    }
  }

  // Host replies, routed by the Rust loop. Replies for unknown or settled
  // calls are dropped: the host is trusted less than it seems.
  const deliverers = {
    started(call /*, childId */) {
      call.childStarted = true;
    },
    startError(call, code, message) {
      calls.delete(call.id);
      release();
      call.reject(fatal(code, message));
    },
    settled(call, kind, payload, outputTokens) {
      calls.delete(call.id);
      spent += outputTokens;
      release();
      if (kind === "text") {
        call.resolve(payload);
      } else if (kind === "structured") {
        let value = null;
        try {
          value = parse(payload);
        } catch (e) {
          call.reject(fatal("AGENT_RESULT", "agent(): the structured answer was not JSON: " + describeThrown(e)));
          return;
        }
        call.resolve(value);
      } else if (kind === "cancelled" && cancelled) {
        call.reject(cancelledError());
      } else {
        call.resolve(null); // failed, or cancelled for its own reasons
      }
    },
    failed(call, message) {
      calls.delete(call.id);
      release();
      call.reject(fatal("AGENT_RESULT", message));
    },
  };

  function deliver(kind, callId, a, b, c) {
    const call = calls.get(callId);
    if (call === undefined || !call.started) return;
    const f = deliverers[kind];
    if (f !== undefined) f(call, a, b, c);
  }

  // ---------------------------------------------------------------- combinators (§4)

  function isThenable(v) {
    if (v === null || (typeof v !== "object" && typeof v !== "function")) return false;
    try {
      return typeof v.then === "function";
    } catch (_) {
      return false;
    }
  }

  function checkItems(name, items) {
    if (cancelled) throw cancelledError();
    if (!isArray(items)) {
      throw fatal("INVALID_ARGUMENT", name + "(): expected an array, got " + typeName(items));
    }
    if (items.length > limits.maxItemsPerCall) {
      throw fatal("ITEM_CAP", name + "(): " + items.length + " items exceed the limit of " +
        limits.maxItemsPerCall + " per call (maxItemsPerCall); split the work into smaller calls");
    }
  }

  function parallel(thunks) {
    return new PromiseCtor(function (resolve, reject) {
      checkItems("parallel", thunks);
      const n = thunks.length;
      const items = thunks.slice();
      for (let i = 0; i < n; i++) {
        const it = items[i];
        if (typeof it !== "function" && !isThenable(it)) {
          throw fatal("INVALID_ARGUMENT", "parallel(): item " + i + " is " + typeName(it) +
            ", expected a function returning a promise (e.g. () => agent(…)) or a promise");
        }
      }
      gather(n, resolve, reject, function (i) {
        const it = items[i];
        return typeof it === "function" ? it() : it;
      });
    });
  }

  function pipeline(items, ...stages) {
    return new PromiseCtor(function (resolve, reject) {
      checkItems("pipeline", items);
      if (stages.length === 0) throw fatal("INVALID_ARGUMENT", "pipeline(): expected at least one stage function");
      for (let s = 0; s < stages.length; s++) {
        if (typeof stages[s] !== "function") {
          throw fatal("INVALID_ARGUMENT", "pipeline(): stage " + (s + 1) + " is " + typeName(stages[s]) + ", expected a function");
        }
      }
      const input = items.slice();
      const n = input.length;
      // Each item runs through all stages on its own: no barrier between stages.
      gather(n, resolve, reject, async function (i) {
        const item = input[i];
        let prev = item;
        for (let s = 0; s < stages.length; s++) prev = await stages[s](prev, item, i);
        return prev;
      });
    });
  }

  // Runs `start(i)` for every index at once and resolves with the results
  // in input order. An ordinary throw makes that item null; the first
  // fatal WorkflowError rejects the whole call.
  function gather(n, resolve, reject, start) {
    const results = new Array(n).fill(null);
    let remaining = n;
    let failed = false;
    if (n === 0) {
      resolve(results);
      return;
    }
    const settled = function () {
      if (--remaining === 0 && !failed) resolve(results);
    };
    for (let i = 0; i < n; i++) {
      let p;
      try {
        p = start(i);
      } catch (e) {
        p = promiseReject(e);
      }
      promiseThen.call(
        promiseResolve(p),
        function (v) {
          results[i] = v;
          settled();
        },
        function (e) {
          if (isFatal(e)) {
            if (!failed) {
              failed = true;
              reject(e);
            }
            return;
          }
          results[i] = null;
          settled();
        },
      );
    }
  }

  // ---------------------------------------------------------------- narration

  function phase(title) {
    if (cancelled) throw cancelledError();
    if (typeof title !== "string" || title.length === 0) {
      throw fatal("INVALID_ARGUMENT", "phase(): title must be a non-empty string, got " + typeName(title));
    }
    currentPhase = title;
    N.phase(title);
  }

  function log(message) {
    if (cancelled) throw cancelledError();
    if (typeof message !== "string") {
      throw fatal("INVALID_ARGUMENT", "log(): message must be a string, got " + typeName(message) +
        " (use console.log for other values)");
    }
    N.log(message);
  }

  function consoleMethod() {
    return function () {
      if (cancelled) return; // narration after a cancel is dropped
      const parts = [];
      for (let i = 0; i < arguments.length; i++) parts.push(formatValue(arguments[i]));
      N.log(parts.join(" "));
    };
  }

  // ---------------------------------------------------------------- timers

  let nextTimerId = 1;
  const timers = new MapCtor();

  function setTimeout(fn, ms, ...rest) {
    if (typeof fn !== "function") {
      throw fatal("INVALID_ARGUMENT", "setTimeout(): expected a function, got " + typeName(fn));
    }
    const id = nextTimerId++;
    if (cancelled) return id; // pending timers die with the run
    let delay = +ms;
    if (!(delay > 0)) delay = 0;
    timers.set(id, { fn, rest });
    N.setTimer(id, delay);
    return id;
  }

  function clearTimeout(id) {
    if (timers.delete(id)) N.clearTimer(id);
  }

  function fireTimer(id) {
    const t = timers.get(id);
    if (t === undefined) return;
    timers.delete(id);
    try {
      t.fn.apply(undefined, t.rest);
    } catch (e) {
      finish(false, e); // an uncaught throw in a timer fails the run, as in any runtime
    }
  }

  // ---------------------------------------------------------------- budget, args

  const budget = freeze({
    total: init.budget,
    spent: function () {
      return spent;
    },
    remaining: function () {
      return init.budget === null ? Infinity : Math.max(0, init.budget - spent);
    },
  });

  let args;
  if (init.argsKind === "json") args = parse(init.argsText);
  else if (init.argsKind === "text") args = init.argsText;
  else args = undefined;

  // ---------------------------------------------------------------- globals

  const hidden = { writable: true, enumerable: false, configurable: true };
  function install(name, value) {
    defineProperty(G, name, Object.assign({ value }, hidden));
  }
  install("agent", agent);
  install("parallel", parallel);
  install("pipeline", pipeline);
  install("phase", phase);
  install("log", log);
  install("args", args);
  install("budget", budget);
  install("WorkflowError", WorkflowError);
  install("setTimeout", setTimeout);
  install("clearTimeout", clearTimeout);
  const consoleObject = {};
  for (const m of ["log", "info", "warn", "error", "debug"]) consoleObject[m] = consoleMethod();
  install("console", consoleObject);

  // ---------------------------------------------------------------- settling the body

  function finish(ok, v) {
    if (ended) return;
    ended = true;
    if (cancelled) {
      N.end("cancelled", cancelCode, cancelMessage, null);
      return;
    }
    if (ok) {
      let json;
      try {
        json = v === undefined ? "null" : toJsonText(v, "value", "RESULT_UNSERIALIZABLE");
      } catch (e) {
        if (isFatal(e)) N.end("error", e.code, e.message, null);
        else N.end("error", "RESULT_UNSERIALIZABLE", describeThrown(e), null);
        return;
      }
      N.end("completed", null, null, json);
      return;
    }
    if (isFatal(v)) {
      N.end(v.code === "CANCELLED" ? "cancelled" : "error", v.code, v.message, null);
      return;
    }
    if (isOutOfMemory(v)) {
      N.end("error", "MEMORY", "the script exceeded its memory limit of " + init.memoryBytes + " bytes (memoryBytes)");
      return;
    }
    const where = v !== null && typeof v === "object" ? scriptPosition(v) : null;
    const text = describeThrown(v);
    N.end("error", "SCRIPT_ERROR", where ? where + ": " + text : text, null);
  }

  // QuickJS reports an exhausted heap as InternalError "out of memory", or
  // as a bare null when even that error could not be allocated.
  function isOutOfMemory(e) {
    if (e === null) return N.heapNearLimit();
    try {
      return e instanceof InternalError && e.message === "out of memory";
    } catch (_) {
      return false;
    }
  }

  function run(body) {
    let p;
    try {
      p = body();
    } catch (e) {
      p = promiseReject(e);
    }
    promiseThen.call(
      p,
      function (v) {
        finish(true, v);
      },
      function (e) {
        finish(false, e);
      },
    );
    return p;
  }

  function cancel(code, message) {
    if (cancelled) return;
    cancelled = true;
    cancelCode = code;
    cancelMessage = message;
    queue.length = 0;
    timers.clear();
    const waiting = arrayFrom(calls.values());
    calls.clear();
    for (const call of waiting) call.reject(cancelledError());
  }

  function isEnded() {
    return ended;
  }

  // Called by the Rust loop when the body can no longer finish by itself
  // (cancelled and parked, or interrupted).
  function forceEnd(stop, code, message) {
    if (ended) return;
    ended = true;
    N.end(stop, code, message, null);
  }

  return { run, deliver, fireTimer, cancel, isEnded, forceEnd };
});
