// The script-facing hook layer of the dsh worker (contract §2–§6).
//
// Evaluated once per engine, before the script and before the run is
// known: a worker runs it while it waits for `Init`. It is a function of
// the native bindings `N` (see engine/natives.rs) and returns the internal
// entry points the Rust loop drives: `configure` (the run's init data, once,
// before the body is compiled), `run`, `deliver`, `fireTimer`, `cancel`.
// Everything a script can reach is installed on globalThis here; the
// natives themselves never are.
//
// A script may tamper with any built-in before it calls a hook, and the
// hooks must not notice. So, in this file:
// - every intrinsic used at call time is captured below, before any script
//   code runs, and called through `apply`: no `.call`/`.apply`/`.bind`, no
//   method looked up on a prototype at call time;
// - no `for…of`, spread or array destructuring (they consult
//   `Array.prototype[Symbol.iterator]` and the iterator's `next`); rest
//   parameters are fine (they build their array directly);
// - internal records and tables are null-prototype objects (`{ __proto__:
//   null, … }`, `create(null)`): reading or assigning a key never reaches
//   a prototype, where a script may have planted getters or setters;
// - arrays handed to the script are filled with `defineData` (define, not
//   assign, so an index setter on `Array.prototype` is never called) and
//   only read by own index;
// - JSON.stringify only ever quotes strings: given an object it keeps its
//   stack of visited objects in an array it fills by assignment, which an
//   index setter on Array.prototype would intercept; `plainJson` and
//   `consoleJson` below write JSON text themselves;
// - promises are followed with `await`, which uses the engine's own
//   machinery (not `globalThis.Promise`, not `Promise.prototype.then`);
// - what capturing cannot defend, because the engine itself looks it up on
//   values at run time, is locked at the end of this file: `then` and
//   `toJSON` on `Object.prototype` and `Array.prototype`, `constructor` on
//   `Promise.prototype`.
(function (N) {
  "use strict";

  // ---------------------------------------------------------------- intrinsics

  const G = globalThis;
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const PromiseProto = Promise.prototype;
  const apply = Reflect.apply;
  const construct = Reflect.construct;
  const reflectDefineProperty = Reflect.defineProperty;
  const getPrototypeOf = Object.getPrototypeOf;
  const defineProperty = Object.defineProperty;
  const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const objectKeys = Object.keys;
  const ownSymbols = Object.getOwnPropertySymbols;
  const ownNames = Object.getOwnPropertyNames;
  const freeze = Object.freeze;
  const create = Object.create;
  const isArray = Array.isArray;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const PromiseCtor = Promise;
  const isFiniteNumber = Number.isFinite;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const InternalErrorCtor = typeof InternalError === "function" ? InternalError : null;
  const StringCtor = String;
  const SetCtor = Set;
  const WeakMapCtor = WeakMap;
  const hasInstanceF = Function.prototype[Symbol.hasInstance];
  const setHasF = Set.prototype.has;
  const setAddF = Set.prototype.add;
  const setDeleteF = Set.prototype.delete;
  const weakMapGetF = WeakMap.prototype.get;
  const weakMapSetF = WeakMap.prototype.set;
  const weakMapHasF = WeakMap.prototype.has;
  const strIndexOfF = String.prototype.indexOf;
  const strSliceF = String.prototype.slice;
  const charCodeAtF = String.prototype.charCodeAt;
  // The wrapper objects JSON unwraps (new Number(1) …), with brand checks.
  const NumberProto = Number.prototype;
  const StringProto = String.prototype;
  const BooleanProto = Boolean.prototype;
  const BigIntProto = typeof BigInt === "function" ? BigInt.prototype : null;
  const numberValueOfF = Number.prototype.valueOf;
  const stringValueOfF = String.prototype.valueOf;
  const booleanValueOfF = Boolean.prototype.valueOf;
  const bigintValueOfF = BigIntProto !== null ? BigIntProto.valueOf : null;
  // QuickJS-ng calls Error.prepareStackTrace (and reads stackTraceLimit)
  // whenever an Error is built; the hooks switch both off around their own.
  const prepareDesc = getOwnPropertyDescriptor(ErrorCtor, "prepareStackTrace");
  const limitDesc = getOwnPropertyDescriptor(ErrorCtor, "stackTraceLimit");
  const prepareGet = prepareDesc && typeof prepareDesc.get === "function" ? prepareDesc.get : null;
  const prepareSet = prepareDesc && typeof prepareDesc.set === "function" ? prepareDesc.set : null;
  const limitGet = limitDesc && typeof limitDesc.get === "function" ? limitDesc.get : null;
  const limitSet = limitDesc && typeof limitDesc.set === "function" ? limitDesc.set : null;
  const defaultStackLimit = limitGet !== null ? apply(limitGet, ErrorCtor, []) : 10;

  function setHas(s, v) {
    return apply(setHasF, s, [v]);
  }
  function setAdd(s, v) {
    apply(setAddF, s, [v]);
  }
  function setDelete(s, v) {
    apply(setDeleteF, s, [v]);
  }
  function weakMapGet(m, k) {
    return apply(weakMapGetF, m, [k]);
  }
  function weakMapSet(m, k, v) {
    apply(weakMapSetF, m, [k, v]);
  }
  function weakMapHas(m, k) {
    return apply(weakMapHasF, m, [k]);
  }
  function strIndexOf(s, search, from) {
    return apply(strIndexOfF, s, [search, from]);
  }
  function strSlice(s, start, end) {
    return apply(strSliceF, s, [start, end]);
  }
  function charCodeAt(s, i) {
    return apply(charCodeAtF, s, [i]);
  }
  function startsWith(s, prefix) {
    return strSlice(s, 0, prefix.length) === prefix;
  }
  // `v instanceof ErrorCtor` without consulting ErrorCtor[Symbol.hasInstance].
  function isInstance(v, ctor) {
    try {
      return apply(hasInstanceF, ctor, [v]);
    } catch (_) {
      return false; // a Proxy whose getPrototypeOf trap throws
    }
  }

  // Defines (never assigns) a plain data property on an object of ours: an
  // index setter planted on Array.prototype is never called. Only ever used
  // on objects the prelude created, so no script code runs in between and
  // one descriptor object can be reused.
  const slot = { __proto__: null, value: undefined, writable: true, enumerable: true, configurable: true };
  function defineData(o, k, v) {
    slot.value = v;
    defineProperty(o, k, slot);
    slot.value = undefined;
  }
  function append(arr, v) {
    defineData(arr, arr.length, v);
  }

  // The run's limits and names: set once by `configure`, from `Init`,
  // before the body is compiled (no script code runs before that).
  let maxConcurrentAgents = 0;
  let maxTotalAgents = 0;
  let maxItemsPerCall = 0;
  // The run's script, then each nested workflow's file as it is loaded.
  const scriptNames = [];
  let maxRequestBytes = 0;
  let budgetTotal = null;
  let memoryBytes = 0;

  // ---------------------------------------------------------------- errors

  // Only errors created here are fatal: a script cannot forge one by
  // throwing an object that merely looks like a WorkflowError. Each one's
  // code and message as created are kept here too.
  const runtimeErrors = new WeakMapCtor();

  // The run-level stops (contract §6): the only codes that propagate
  // through parallel()/pipeline() and whose errors say `fatal: true`. Every
  // other runtime error is an ordinary rejection a combinator turns into
  // null, as in Claude Code.
  const RUN_LEVEL = create(null);
  RUN_LEVEL.BUDGET = true;
  RUN_LEVEL.CANCELLED = true;
  RUN_LEVEL.TIMEOUT = true;
  RUN_LEVEL.MEMORY = true;
  RUN_LEVEL.WORKER_EXITED = true;
  RUN_LEVEL.SANDBOX_UNAVAILABLE = true;

  class WorkflowError extends ErrorCtor {
    constructor(code, message) {
      super(message);
      defineProperty(this, "name", { __proto__: null, value: "WorkflowError", writable: true, configurable: true });
      defineProperty(this, "code", { __proto__: null, value: code, writable: true, enumerable: true, configurable: true });
      defineProperty(this, "fatal", { __proto__: null, value: RUN_LEVEL[code] === true, writable: true, enumerable: true, configurable: true });
    }
  }

  // Builds the error without running script code: not WorkflowError's own
  // constructor (its [[Prototype]] is reachable from the script) and with
  // Error.prepareStackTrace switched off.
  function newError(ctor, message, newTarget) {
    let savedPrepare, savedLimit;
    if (prepareGet !== null && prepareSet !== null) {
      savedPrepare = apply(prepareGet, ErrorCtor, []);
      apply(prepareSet, ErrorCtor, [undefined]);
    }
    if (limitGet !== null && limitSet !== null) {
      savedLimit = apply(limitGet, ErrorCtor, []);
      apply(limitSet, ErrorCtor, [defaultStackLimit]);
    }
    try {
      return construct(ctor, [message], newTarget);
    } finally {
      if (prepareSet !== null) apply(prepareSet, ErrorCtor, [savedPrepare]);
      if (limitSet !== null) apply(limitSet, ErrorCtor, [savedLimit]);
    }
  }

  // Builds a runtime error (a WorkflowError with `code`). Named `fatal`
  // for history: only a run-level code makes it fatal.
  function fatal(code, message) {
    const e = newError(ErrorCtor, message, WorkflowError);
    defineProperty(e, "name", { __proto__: null, value: "WorkflowError", writable: true, configurable: true });
    defineData(e, "code", code);
    defineData(e, "fatal", RUN_LEVEL[code] === true);
    weakMapSet(runtimeErrors, e, { __proto__: null, code, message });
    return e;
  }

  // A runtime-made error (any code): ends the run with its own code when
  // nothing catches it.
  function isFatal(e) {
    return e !== null && typeof e === "object" && weakMapHas(runtimeErrors, e);
  }

  // A run-level stop made by the runtime, by the code it was made with
  // (the script cannot forge one, nor promote an ordinary one).
  function isRunLevel(e) {
    return isFatal(e) && RUN_LEVEL[weakMapGet(runtimeErrors, e).code] === true;
  }

  // The code and message a fatal error ends the run with: as the script
  // left them if it changed them to other strings, else as created.
  function fatalParts(e) {
    const made = weakMapGet(runtimeErrors, e);
    let code = made.code;
    let message = made.message;
    try {
      const c = e.code;
      const m = e.message;
      if (typeof c === "string") code = c;
      if (typeof m === "string") message = m;
    } catch (_) {
      // a getter the script planted on its own caught error: keep the originals
    }
    return { __proto__: null, code, message };
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
  // Calls waiting for a slot, FIFO: queue[queueHead] … queue[queueTail - 1].
  let queue = create(null);
  let queueHead = 0;
  let queueTail = 0;
  let calls = create(null); // callId -> call record, until settled
  // A call record is an array, not an object literal: QuickJS defines a
  // literal's fields one at a time through its generic path, an array
  // literal is one allocation (5 % of the worker's instructions per
  // agent() call, callgrind, docs/performance.md round 8). Its elements
  // are its own, so no setter planted on Array.prototype runs.
  const CALL_ID = 0;
  const CALL_RESOLVE = 1;
  const CALL_REJECT = 2;
  const CALL_STARTED = 3; // false while it waits in the queue
  const CALL_PARTS = 4; // the request's parts while it waits, then null
  let loads = create(null); // workflow() load id -> { resolve, reject, argsJson }, until answered
  let nextLoadId = 1;
  const runsOfWorkflow = create(null); // nested workflow name -> times started

  function cancelledError() {
    return fatal(cancelCode, cancelMessage);
  }

  // ---------------------------------------------------------------- describing values

  function isIdentifier(key) {
    const n = key.length;
    if (n === 0) return false;
    for (let i = 0; i < n; i++) {
      const c = charCodeAt(key, i);
      const start = (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 36;
      if (!start && !(i > 0 && c >= 48 && c <= 57)) return false;
    }
    return true;
  }

  function pathKey(path, key) {
    return isIdentifier(key) ? path + "." + key : path + "[" + stringify(key) + "]";
  }

  function typeName(v) {
    if (v === null) return "null";
    const t = typeof v;
    if (t === "object") {
      try {
        if (isArray(v)) return "an array";
        const proto = getPrototypeOf(v);
        if (proto === null || proto === ObjectProto) return "an object";
        const ctor = proto.constructor;
        const name = ctor ? ctor.name : undefined;
        return "a " + (typeof name === "string" && name ? name : "object");
      } catch (_) {
        return "an object";
      }
    }
    if (t === "undefined") return "undefined";
    return "a " + t;
  }

  // "an object" -> "[object]", "a Foo" -> "[Foo]".
  function bracketTypeName(v) {
    const n = typeName(v);
    if (startsWith(n, "an ")) return "[" + strSlice(n, 3, n.length) + "]";
    if (startsWith(n, "a ")) return "[" + strSlice(n, 2, n.length) + "]";
    return n + "]";
  }

  // ---------------------------------------------------------------- value boundary (§5)

  function boundaryError(code, path, message) {
    return fatal(code, path + ": " + message);
  }

  // Copies `v` into plain, lossless JSON data or throws `code` naming the
  // offending path. Getters are called exactly once (the copy is what gets
  // serialized), a DAG is fine, a cycle is not. Objects in the copy have a
  // null prototype; arrays are ordinary arrays filled by definition.
  // What a member becomes when Claude Code's conversion drops it.
  const OMIT = create(null);

  // toPlain for a value in an array: what would be dropped is null there.
  function itemToPlain(v, path, code, stack) {
    const x = toPlain(v, path, code, stack);
    return x === OMIT ? null : x;
  }

  function toPlain(v, path, code, stack) {
    switch (typeof v) {
      case "string":
      case "boolean":
        return v;
      case "number":
        if (!isFiniteNumber(v)) {
          warn(StringCtor(v) + " is not JSON; sent as null, as Claude Code sends it", path);
          return null;
        }
        return v;
      case "undefined":
        warn("undefined is not JSON; left out (null in an array), as Claude Code does", path);
        return OMIT;
      case "function":
        warn("a function is not JSON; left out (null in an array), as Claude Code does", path);
        return OMIT;
      case "symbol":
        warn("a symbol is not JSON; left out (null in an array), as Claude Code does", path);
        return OMIT;
      case "bigint":
        throw boundaryError(code, path, "a bigint is not JSON (convert it to a number or a string)");
    }
    if (v === null) return null;
    if (setHas(stack, v)) throw boundaryError(code, path, "cycle: the value contains itself");
    setAdd(stack, v);
    try {
      // A Proxy whose traps throw loses what they guard, as in Claude
      // Code's copy: a prototype that cannot be read leaves the own
      // fields, keys that cannot be listed leave {}.
      let array;
      try {
        array = isArray(v);
      } catch (e) {
        throw boundaryError(code, path, "cannot inspect the value: " + describeThrown(e));
      }
      let proto = array ? ArrayProto : ObjectProto;
      try {
        proto = getPrototypeOf(v);
      } catch (e) {
        warn("cannot read the value's prototype (" + describeThrown(e) + "); sent as its own enumerable fields, as Claude Code sends it", path);
      }
      if (array) return arrayToPlain(v, proto, path, code, stack);
      if (proto !== ObjectProto && proto !== null) {
        // A Map, Set, Date, boxed primitive or class instance: its own
        // enumerable fields (toJSON is not called), as Claude Code does.
        warn(typeName(v) + " is not a plain object; sent as its own enumerable fields, as Claude Code sends it", path);
      }
      let symbols, keys;
      try {
        symbols = ownSymbols(v).length;
        keys = objectKeys(v);
      } catch (e) {
        warn("cannot list the value's keys (" + describeThrown(e) + "); sent as {}, as Claude Code sends it", path);
        return create(null);
      }
      if (symbols > 0) warn("symbol keys are not JSON; left out, as Claude Code does", path);
      const out = create(null);
      for (let j = 0; j < keys.length; j++) {
        const k = keys[j];
        const childPath = pathKey(path, k);
        if (k === "__proto__") {
          // Claude Code's copy drops it; keeping it would hand a prototype
          // to whoever parses the JSON carelessly.
          warn("a \"__proto__\" key is left out, as Claude Code leaves it out", childPath);
          continue;
        }
        let child;
        try {
          child = v[k];
        } catch (e) {
          // Claude Code's copy leaves out a member whose getter throws.
          warn("the getter threw (" + describeThrown(e) + "); left out, as Claude Code does", childPath);
          continue;
        }
        const x = toPlain(child, childPath, code, stack);
        if (x !== OMIT) defineData(out, k, x);
      }
      return out;
    } finally {
      setDelete(stack, v);
    }
  }

  function arrayToPlain(v, proto, path, code, stack) {
    if (proto !== ArrayProto) warn("an array subclass is sent as a plain array", path);
    let symbols, n, names;
    try {
      symbols = ownSymbols(v).length;
      n = v.length;
      names = ownNames(v);
    } catch (e) {
      throw boundaryError(code, path, "cannot inspect the value: " + describeThrown(e));
    }
    if (symbols > 0) warn("symbol keys of an array are not JSON; left out", path);
    if (names.length !== n + 1) {
      for (let j = 0; j < names.length; j++) {
        const k = names[j];
        if (k === "length") continue;
        const i = +k;
        if (!(StringCtor(i >>> 0) === k && i < n)) {
          warn("the array's extra property " + stringify(k) + " is not JSON; left out, as Claude Code does", path);
        }
      }
    }
    const out = [];
    for (let i = 0; i < n; i++) {
      const itemPath = path + "[" + i + "]";
      let item, present;
      try {
        present = i in v;
        item = v[i];
      } catch (e) {
        // As in an object, a throwing getter loses the element: null here.
        warn("the getter threw (" + describeThrown(e) + "); sent as null, as Claude Code sends it", itemPath);
        append(out, null);
        continue;
      }
      if (!present) {
        warn("a hole in an array is sent as null, as Claude Code sends it", itemPath);
        append(out, null);
        continue;
      }
      append(out, itemToPlain(item, itemPath, code, stack));
    }
    return out;
  }

  // JSON text of a value made by toPlain (or of the request): objects of
  // ours with a null prototype, arrays filled by definition, finite numbers.
  function plainJson(v) {
    switch (typeof v) {
      case "string":
        return stringify(v);
      case "number":
        return StringCtor(v);
      case "boolean":
        return v ? "true" : "false";
    }
    if (v === null) return "null";
    let out;
    if (isArray(v)) {
      out = "[";
      for (let i = 0; i < v.length; i++) out += (i > 0 ? "," : "") + plainJson(v[i]);
      return out + "]";
    }
    const keys = objectKeys(v);
    out = "{";
    for (let j = 0; j < keys.length; j++) {
      out += (j > 0 ? "," : "") + stringify(keys[j]) + ":" + plainJson(v[keys[j]]);
    }
    return out + "}";
  }

  function toJsonText(v, path, code) {
    return plainJson(itemToPlain(v, path, code, new SetCtor()));
  }

  // ---------------------------------------------------------------- rendering thrown values and log arguments

  function safeString(v) {
    try {
      return StringCtor(v);
    } catch (_) {
      return "[unprintable " + typeof v + "]";
    }
  }

  // The end of the run of ASCII digits starting at `i`.
  function digitsEnd(s, i) {
    let j = i;
    while (j < s.length) {
      const c = charCodeAt(s, j);
      if (c < 48 || c > 57) break;
      j++;
    }
    return j;
  }

  // The first position inside the script file, from an engine stack.
  // The innermost frame of the run's script or of a nested workflow's
  // file: `file:line:col` as the engine reports it (the host maps it back).
  function scriptPosition(e) {
    let stack;
    try {
      stack = e.stack;
    } catch (_) {
      return null;
    }
    if (typeof stack !== "string") return null;
    let best = null;
    let bestAt = -1;
    for (let i = 0; i < scriptNames.length; i++) {
      const name = scriptNames[i];
      const marker = name + ":";
      let at = strIndexOf(stack, marker, 0);
      while (at !== -1 && (bestAt === -1 || at < bestAt)) {
        const line = at + marker.length;
        const lineEnd = digitsEnd(stack, line);
        if (lineEnd > line && charCodeAt(stack, lineEnd) === 58 /* : */) {
          const colEnd = digitsEnd(stack, lineEnd + 1);
          if (colEnd > lineEnd + 1) {
            best = name + ":" + strSlice(stack, line, lineEnd) + ":" + strSlice(stack, lineEnd + 1, colEnd);
            bestAt = at;
            break;
          }
        }
        at = strIndexOf(stack, marker, at + 1);
      }
    }
    return best;
  }

  // The message a runtime-made error ends the run with. An unsupported
  // schema is the script's mistake at one call, so the end names that call
  // (`wf.ts:12:15: options.schema…`) as a SCRIPT_ERROR names its throw.
  // Only here, where the host maps the engine's position back to the
  // original file: the message a script catches carries no position of
  // the generated code.
  function endMessage(e, parts) {
    if (parts.code !== "UNSUPPORTED_SCHEMA") return parts.message;
    const where = scriptPosition(e);
    return where !== null ? where + ": " + parts.message : parts.message;
  }

  // What `parallel[i] failed:` says: an error's message, or the thrown
  // value as console.log would show it.
  function failureText(e) {
    if (e !== null && typeof e === "object") {
      try {
        const m = e.message;
        if (typeof m === "string") return m;
      } catch (_) {
        return "[object that throws on access]";
      }
    }
    return formatValue(e);
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

  // The primitive inside a Number/String/Boolean/BigInt wrapper object
  // (what JSON.stringify unwraps), or `v` itself. Only objects whose
  // prototype is one of those four are brand-checked; a Number or String
  // wrapper converts through its own valueOf/toString, as in JSON.stringify.
  function unwrap(v) {
    let proto;
    try {
      proto = getPrototypeOf(v);
    } catch (_) {
      return v;
    }
    if (proto === NumberProto && hasBrand(numberValueOfF, v)) return +v;
    if (proto === StringProto && hasBrand(stringValueOfF, v)) return StringCtor(v);
    if (proto === BooleanProto && hasBrand(booleanValueOfF, v)) return apply(booleanValueOfF, v, []);
    if (BigIntProto !== null && proto === BigIntProto && hasBrand(bigintValueOfF, v)) return apply(bigintValueOfF, v, []);
    return v;
  }

  // Whether the built-in `valueOf` accepts `v` (it throws for any object
  // without the matching internal slot).
  function hasBrand(valueOf, v) {
    try {
      apply(valueOf, v, []);
      return true;
    } catch (_) {
      return false;
    }
  }

  // JSON.stringify(value) for log arguments, written out here: bigints as
  // their digits, Errors as "Name: message", a value that contains itself
  // as "[Circular]" (`path` holds the objects being written, outermost
  // first). Returns undefined where JSON.stringify would (a function, a
  // symbol, undefined); throws what a getter, toJSON or Proxy trap throws.
  function consoleJson(key, value, path, depth) {
    if ((typeof value === "object" && value !== null) || typeof value === "bigint") {
      const toJSON = value.toJSON;
      if (typeof toJSON === "function") value = apply(toJSON, value, [key]);
    }
    if (typeof value === "bigint") return StringCtor(value);
    if (isInstance(value, ErrorCtor)) return stringify(describeThrown(value));
    if (typeof value === "object" && value !== null) {
      for (let j = 0; j < depth; j++) if (path[j] === value) return '"[Circular]"';
      value = unwrap(value);
    }
    switch (typeof value) {
      case "string":
        return stringify(value);
      case "number":
        return isFiniteNumber(value) ? StringCtor(value) : "null";
      case "boolean":
        return value ? "true" : "false";
      case "bigint":
        return StringCtor(value);
      case "object":
        break;
      default:
        return undefined; // function, symbol, undefined
    }
    if (value === null) return "null";
    path[depth] = value;
    let out;
    if (isArray(value)) {
      const n = value.length;
      out = "[";
      for (let i = 0; i < n; i++) {
        const item = consoleJson(StringCtor(i), value[i], path, depth + 1);
        out += (i > 0 ? "," : "") + (item === undefined ? "null" : item);
      }
      out += "]";
    } else {
      const keys = objectKeys(value);
      out = "{";
      let first = true;
      for (let j = 0; j < keys.length; j++) {
        const k = keys[j];
        const item = consoleJson(k, value[k], path, depth + 1);
        if (item === undefined) continue;
        out += (first ? "" : ",") + stringify(k) + ":" + item;
        first = false;
      }
      out += "}";
    }
    path[depth] = undefined;
    return out;
  }

  // Compact JSON for log arguments; cycles as "[Circular]", bigints as their
  // digits; never "[object Object]".
  function formatValue(v) {
    if (typeof v === "string") return v;
    if (isInstance(v, ErrorCtor)) {
      try {
        return (v.name || "Error") + ": " + v.message;
      } catch (_) {
        return "Error";
      }
    }
    if (typeof v === "bigint") return StringCtor(v);
    if (typeof v === "object" && v !== null) {
      try {
        const text = consoleJson("", v, create(null), 0);
        if (typeof text === "string") return text;
        if (text === undefined) return bracketTypeName(v);
      } catch (_) {
        // fall through to the string form
      }
      const s = safeString(v);
      return s === "[object Object]" ? bracketTypeName(v) : s;
    }
    return safeString(v);
  }

  // ---------------------------------------------------------------- agent() (§3)

  const SUPPORTED_OPTIONS = {
    __proto__: null,
    label: true,
    phase: true,
    schema: true,
    model: true,
    provider: true,
    effort: true,
    agentType: true,
    isolation: true,
  };
  const SUPPORTED_LIST = "label, phase, schema, model, provider, effort, agentType, isolation";
  // Options Claude Code knows, read apart from the others: stallMs,
  // disallowedTools and sharedHeadLength are sent to the host;
  // bashCommandClamp is checked and not acted on yet (docs/scripts.md).
  const ACCEPTED_OPTIONS = {
    __proto__: null,
    stallMs: true,
    disallowedTools: true,
    bashCommandClamp: true,
    sharedHeadLength: true,
  };

  // ---------------------------------------------------------------- warnings

  // Contract §0: what Claude Code silently accepts, dsh accepts and says
  // so — once per distinct message and path, at most MAX_WARNINGS times.
  const MAX_WARNINGS = 1000;
  let warned = create(null);
  let warnedCount = 0;
  function warn(message, path) {
    const key = (path === null ? "" : path) + "\u0000" + message;
    if (warned[key] === true || warnedCount >= MAX_WARNINGS || cancelled) return;
    warned[key] = true;
    warnedCount++;
    N.warn(message, path);
  }
  const STRING_OPTIONS = ["label", "phase", "model", "provider", "effort", "agentType"];

  function isHighSurrogate(c) {
    return c >= 0xd800 && c <= 0xdbff;
  }
  function isLowSurrogate(c) {
    return c >= 0xdc00 && c <= 0xdfff;
  }

  // The prompt's first line (a trailing \r dropped); longer than 48 code
  // points: its first 47 and "…". Scans no further than needed: a prompt
  // may be huge.
  function defaultLabel(prompt) {
    let end = strIndexOf(prompt, "\n", 0);
    if (end === -1) end = prompt.length;
    if (end > 0 && charCodeAt(prompt, end - 1) === 13) end--;
    let i = 0;
    let count = 0;
    let cut = 0;
    while (i < end) {
      if (count === 47) cut = i;
      if (count === 48) return strSlice(prompt, 0, cut) + "…"; // a 49th code point follows
      const pair = isHighSurrogate(charCodeAt(prompt, i)) && i + 1 < end && isLowSurrogate(charCodeAt(prompt, i + 1));
      i += pair ? 2 : 1;
      count++;
    }
    return strSlice(prompt, 0, end);
  }

  function isSpace(c) {
    return c <= 32 || c === 160 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
      c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
  }

  function listHas(list, x) {
    for (let i = 0; i < list.length; i++) if (list[i] === x) return true;
    return false;
  }

  function isNonEmptyStringArray(v) {
    if (!isArray(v)) return false;
    for (let i = 0; i < v.length; i++) if (typeof v[i] !== "string" || v[i].length === 0) return false;
    return true;
  }

  // The longest stallMs sent: a whole number JSON prints as an integer.
  const MAX_STALL_MS = 9007199254740991;

  // stallMs as the host gets it: a positive number of milliseconds (rounded
  // up to a whole one), else null. Claude Code takes Number(stallMs); a
  // value that is not a positive number is ignored here, with a warning.
  function readStallMs(a) {
    if (!("stallMs" in a) || a.stallMs === null) return null;
    const n = a.stallMs;
    if (typeof n !== "number" || !(n > 0) || !isFiniteNumber(n)) {
      warn("options.stallMs: must be a positive number of milliseconds, got " + plainJson(n) +
        "; ignored, the call has no stall timeout of its own", "options.stallMs");
      return null;
    }
    const whole = n % 1 === 0 ? n : n - (n % 1) + 1;
    return whole > MAX_STALL_MS ? MAX_STALL_MS : whole;
  }

  // The options Claude Code knows and dsh does not act on yet are still
  // checked as Claude Code checks them: a call it would refuse, dsh refuses.
  function checkAccepted(a) {
    if ("disallowedTools" in a && !isNonEmptyStringArray(a.disallowedTools)) {
      throw fatal("INVALID_ARGUMENT", "options.disallowedTools: must be an array of non-empty tool names (e.g. [\"Bash\"]), got " +
        plainJson(a.disallowedTools));
    }
    if ("sharedHeadLength" in a) {
      const n = a.sharedHeadLength;
      if (typeof n !== "number" || !(n >= 0) || n % 1 !== 0) {
        throw fatal("INVALID_ARGUMENT", "options.sharedHeadLength: must be a whole number of characters, 0 or more, got " + plainJson(n));
      }
    }
    if ("bashCommandClamp" in a) {
      const c = a.bashCommandClamp;
      if (!isNonEmptyStringArray(c)) {
        throw fatal("INVALID_ARGUMENT", "options.bashCommandClamp: must be an array of non-empty strings, got " + plainJson(c));
      }
      for (let i = 0; i < c.length; i++) {
        const r = c[i];
        const inner = r.length > 6 && strSlice(r, 0, 5) === "Bash(" && strSlice(r, r.length - 1, r.length) === ")"
          ? strSlice(r, 5, r.length - 1) : "";
        if (inner.length === 0 || isSpace(charCodeAt(inner, 0)) || isSpace(charCodeAt(inner, inner.length - 1))) {
          throw fatal("INVALID_ARGUMENT", "options.bashCommandClamp[" + i + "]: must be a Bash(<command or prefix>) rule, got " + plainJson(r));
        }
      }
      if (c.length > 0 && "disallowedTools" in a && listHas(a.disallowedTools, "Bash")) {
        throw fatal("INVALID_ARGUMENT", "options.bashCommandClamp: the call's disallowedTools removes Bash, so the clamp has nothing to bind");
      }
    }
  }

  function noOptions() {
    return { __proto__: null, plain: create(null), schemaJson: null };
  }

  // String() of a label or phase that is not a string, as Claude Code
  // takes it: of its copy (so a getter that throws or a toString of the
  // script's own is never run), null for a function (its copy drops it).
  function optionText(v, path) {
    switch (typeof v) {
      case "function":
        return null;
      case "symbol":
      case "bigint":
        return safeString(v);
    }
    if (v === null || typeof v !== "object") return safeString(v);
    return copyText(toPlain(v, path, "INVALID_ARGUMENT", new SetCtor()));
  }

  // String() of a value made by toPlain: an array joins its elements
  // (null as ""), an object is "[object Object]".
  function copyText(x) {
    if (x === null) return "";
    if (isArray(x)) {
      let out = "";
      for (let i = 0; i < x.length; i++) out += (i > 0 ? "," : "") + copyText(x[i]);
      return out;
    }
    if (typeof x === "object") return "[object Object]";
    return StringCtor(x);
  }

  // Validates and copies the options; throws the fatal error to reject with.
  // The options object is read once: its prototype, then each own enumerable
  // string key in Object.keys order (a getter runs once); the copy is what
  // is checked and sent. What Claude Code's copy of the options loses —
  // options that are not an object, a key whose getter throws, an object
  // whose keys cannot be listed — is lost here too, with a warning.
  function readOptions(options) {
    if (options === undefined) return noOptions();
    if (options === null || typeof options !== "object") {
      // Claude Code runs the call as if no options were given.
      warn("agent(): options " + (options === null ? "is null" : "is " + typeName(options) + ", not an object") +
        "; the call runs with no options, as in Claude Code", "options");
      return noOptions();
    }
    const noKeys = function (e) {
      warn("agent(): cannot list the options (" + describeThrown(e) + "); the call runs with no options, as in Claude Code",
        "options");
      return noOptions();
    };
    let array, proto, keys;
    try {
      array = isArray(options);
    } catch (e) {
      return noKeys(e); // a revoked Proxy
    }
    if (array) {
      warn("agent(): options is an array; the call runs with no options, as in Claude Code", "options");
      return noOptions();
    }
    try {
      proto = getPrototypeOf(options);
    } catch (e) {
      proto = null;
      warn("agent(): cannot read the options' prototype (" + describeThrown(e) + "); its own fields are read, as Claude Code reads them",
        "options");
    }
    if (proto !== ObjectProto && proto !== null) {
      warn("agent(): options is " + typeName(options) + ", not a plain object; its own enumerable fields are read, as Claude Code reads them",
        "options");
    }
    try {
      keys = objectKeys(options);
    } catch (e) {
      return noKeys(e);
    }
    // An option explicitly set to undefined (or null) counts as not given,
    // so options built with spreads and conditionals keep working.
    const given = create(null);
    // Claude Code's own options, checked as it checks them, then dropped.
    const accepted = create(null);
    for (let j = 0; j < keys.length; j++) {
      const k = keys[j];
      const path = pathKey("options", k);
      if (k === "__proto__") {
        warn("a \"__proto__\" key is left out, as Claude Code leaves it out", path);
        continue;
      }
      let v;
      try {
        v = options[k];
      } catch (e) {
        warn("the getter threw (" + describeThrown(e) + "); the option is left out, as Claude Code leaves it out", path);
        continue;
      }
      if (v === undefined) continue;
      if (ACCEPTED_OPTIONS[k] === true) {
        // Claude Code refuses a null one of these: kept, to be refused below.
        defineData(accepted, k, v);
        continue;
      }
      if (SUPPORTED_OPTIONS[k] !== true) {
        // Claude Code ignores an option it does not know; so does dsh, out loud.
        warn("unknown agent() option, ignored (known options: " + SUPPORTED_LIST +
          ", and Claude Code's stallMs, disallowedTools, bashCommandClamp, sharedHeadLength)", path);
        continue;
      }
      // Claude Code takes a null label, phase, schema, model, … as absent.
      if (v === null) continue;
      defineData(given, k, v);
    }
    for (let j = 0; j < 2; j++) {
      const k = j === 0 ? "label" : "phase";
      if (k in given && typeof given[k] !== "string") {
        const text = optionText(given[k], "options." + k);
        if (text === null) {
          warn("options." + k + " is a function; left out, as Claude Code leaves it out", "options." + k);
          delete given[k];
          continue;
        }
        // Claude Code takes a label or phase of another type as String(v).
        warn("options." + k + " is " + typeName(given[k]) + ", not a string; used as its string form, as Claude Code does",
          "options." + k);
        defineData(given, k, text);
      }
    }
    const acceptedPlain = toPlain(accepted, "options", "INVALID_ARGUMENT", new SetCtor());
    checkAccepted(acceptedPlain);
    const plain = toPlain(given, "options", "INVALID_ARGUMENT", new SetCtor());
    // Claude Code lower-cases a model it is given: a falsy one (0, NaN,
    // false) is no model, any other that is not a string fails the call.
    if ("model" in plain && typeof plain.model !== "string" && !plain.model) {
      warn("options.model is " + plainJson(plain.model) + ", not a model name; ignored, as Claude Code ignores it", "options.model");
      delete plain.model;
    }
    // Claude Code does not check the effort; one that is not a string is ignored.
    if ("effort" in plain && typeof plain.effort !== "string") {
      warn("options.effort is " + typeName(plain.effort) + ", not a string; ignored, as Claude Code ignores it", "options.effort");
      delete plain.effort;
    }
    for (let j = 0; j < STRING_OPTIONS.length; j++) {
      const k = STRING_OPTIONS[j];
      if (k in plain && typeof plain[k] !== "string") {
        throw fatal("INVALID_ARGUMENT", "options." + k + ": must be a string, got " + typeName(plain[k]));
      }
    }
    if ("isolation" in plain && plain.isolation !== "worktree") {
      // Contract §6 (revision 2): a warning, and the call runs without isolation.
      warn('isolation other than "worktree" is ignored; the call runs without isolation (got ' +
        plainJson(plain.isolation) + ")", "options.isolation");
      delete plain.isolation;
    }
    let schemaJson = null;
    if ("schema" in plain) {
      const s = plain.schema;
      if (s === null || typeof s !== "object" || isArray(s)) {
        throw fatal("UNSUPPORTED_SCHEMA", "options.schema: must be a JSON Schema object with type \"object\", got " + typeName(s));
      }
      schemaJson = plainJson(s);
      const violations = N.checkSchema(schemaJson, "options.schema");
      if (violations !== "") throw fatal("UNSUPPORTED_SCHEMA", violations);
    }
    return { __proto__: null, plain, schemaJson, accepted: acceptedPlain };
  }

  function agent(prompt, options) {
    return agentFor(null, prompt, options);
  }

  // One agent() call; `child` is the nested workflow making it (its name
  // and the phase its calls are grouped under), null for the run's script.
  // The call's promise is made by the native call that admits it
  // (`childAdmitStart` or `admit`), which puts its resolving functions in the
  // call's record: `new Promise(executor)` also runs the executor, about
  // 4 % of the worker's instructions per call (docs/performance.md round
  // 12). What throws before that makes the rejected promise instead, as a
  // throw from an executor would.
  function agentFor(child, prompt, options) {
    try {
      return startAgent(child, prompt, options);
    } catch (e) {
      return rejectedWith(e);
    }
  }

  function rejectedWith(e) {
    let rejectIt = null;
    const promise = new PromiseCtor(function (_resolve, reject) { rejectIt = reject; });
    rejectIt(e);
    return promise;
  }

  function startAgent(child, prompt, options) {
    if (cancelled) throw cancelledError();
    if (typeof prompt !== "string") {
      // Claude Code sends a non-string prompt as its text form.
      warn("agent(): the prompt is " + typeName(prompt) + ", not a string; sent as its text form, as Claude Code does", "prompt");
      prompt = ccText(prompt);
    }
    if (prompt.length === 0) warn("agent(): the prompt is empty; sent as it is", "prompt");
    // A nested workflow's calls are grouped under it, as Claude Code
    // groups them, whatever phase the child names.
    let phase = child !== null ? child.phase : currentPhase;
    const workflow = child !== null ? child.name : null;
    // Without options (the common call) nothing more is built: the label
    // is left null for the native side to take from the prompt (the
    // same rule as defaultLabel), and no options object is sent.
    let label = null;
    let schemaJson = null;
    let opts = null;
    if (options !== undefined) {
      const read = readOptions(options);
      const plain = read.plain;
      schemaJson = read.schemaJson;
      const accepted = read.accepted === undefined ? create(null) : read.accepted;
      if ("label" in plain) label = plain.label;
      if (child === null && "phase" in plain) {
        phase = plain.phase;
        if (phase === "") {
          // As Claude Code attributes it: to no phase, not the current one.
          warn("options.phase is empty; the call has no phase, as in Claude Code", "options.phase");
          phase = null;
        }
      }
      opts = {
        __proto__: null,
        model: "model" in plain ? plain.model : null,
        provider: "provider" in plain ? plain.provider : null,
        effort: "effort" in plain ? plain.effort : null,
        agentType: "agentType" in plain ? plain.agentType : null,
        isolation: "isolation" in plain ? plain.isolation : null,
        stallMs: readStallMs(accepted),
        disallowedTools: "disallowedTools" in accepted ? accepted.disallowedTools : null,
        sharedHeadLength: "sharedHeadLength" in accepted ? accepted.sharedHeadLength : null,
      };
    }
    // The request goes to the native side as its parts; its JSON text
    // (what the limit is about) is built only when a bound says it could
    // be near the limit: a UTF-16 unit is at most 6 bytes of JSON (a \u
    // escape), the keys and punctuation well under 1 KiB. A default
    // label is a prefix of the prompt's first line and one "…".
    let units = prompt.length + (label !== null ? label.length : prompt.length + 1);
    if (phase !== null) units += phase.length;
    if (schemaJson !== null) units += schemaJson.length;
    if (workflow !== null) units += workflow.length;
    if (opts !== null) units += optionUnits(opts);
    if (units * 6 + 1024 > maxRequestBytes) {
      const requestJson = plainJson({
        __proto__: null,
        prompt,
        label: label !== null ? label : defaultLabel(prompt),
        phase,
        schema: schemaJson,
        options: opts !== null ? opts : NO_OPTIONS,
        workflow,
      });
      if (requestJson.length * 3 > maxRequestBytes && N.utf8Bytes(requestJson) > maxRequestBytes) {
        throw fatal("INVALID_ARGUMENT", "agent(): the request (prompt, schema and options) is " + N.utf8Bytes(requestJson) +
          " bytes, over the limit of " + maxRequestBytes + " bytes for one request; send less");
      }
    }
    if (agentsStarted >= maxTotalAgents) {
      throw fatal("AGENT_CAP", "agent(): the run may start at most " + maxTotalAgents +
        " agents (maxTotalAgents); this was call " + (agentsStarted + 1));
    }
    if (budgetTotal !== null && spent >= budgetTotal) {
      throw fatal("BUDGET", "agent(): the output-token budget of " + budgetTotal + " is spent (" + spent + " used)");
    }
    // The host-visible seq: 1, 2, 3 … in admission order. The native side
    // counts it from the call that carries it (`childAdmitStart`, or
    // `admit` for a call that waits for a slot): one native call per
    // agent(), not two.
    // The call is registered only once the native call has returned (its
    // promise made, its ChildStart written): one that throws leaves no
    // record without resolving functions behind, and the host's answer
    // cannot arrive before this code has run.
    const id = ++agentsStarted;
    if (running < maxConcurrentAgents) {
      const call = [id, null, null, true, null];
      const promise = N.childAdmitStart(call, prompt, label, phase, schemaJson, workflow, opts);
      running++;
      calls[id] = call;
      return promise;
    }
    const call = [id, null, null, false, [prompt, label, phase, schemaJson, workflow, opts]];
    const promise = N.admit(call, prompt, label, phase, workflow);
    calls[id] = call;
    queue[queueTail++] = call;
    return promise;
  }

  // What the JSON of a call without options holds in their place.
  const NO_OPTIONS = freeze({
    __proto__: null, model: null, provider: null, effort: null, agentType: null, isolation: null,
    stallMs: null, disallowedTools: null, sharedHeadLength: null,
  });

  // The UTF-16 units of the options' strings.
  function optionUnits(o) {
    let n = 0;
    for (let i = 0; i < STRING_OPTIONS.length; i++) {
      const v = o[STRING_OPTIONS[i]];
      if (typeof v === "string") n += v.length;
    }
    if (typeof o.isolation === "string") n += o.isolation.length;
    const d = o.disallowedTools;
    if (d !== null) for (let i = 0; i < d.length; i++) n += d[i].length + 3;
    return n;
  }

  // A queued call's turn.
  function startCall(call) {
    running++;
    call[CALL_STARTED] = true;
    const p = call[CALL_PARTS];
    call[CALL_PARTS] = null;
    N.childStart(call[CALL_ID], p[0], p[1], p[2], p[3], p[4], p[5]);
  }

  // A slot freed: start the oldest waiting call.
  function release() {
    running--;
    while (!cancelled && queueHead < queueTail && running < maxConcurrentAgents) {
      const call = queue[queueHead];
      delete queue[queueHead];
      queueHead++;
      startCall(call);
    }
  }

  // Host replies, routed by the Rust loop (event_loop.rs). `kind` is a
  // number, as is a settled call's outcome (numbers, not strings: no string
  // is made and compared per reply). Replies for unknown or settled calls
  // are dropped: the host is trusted less than it seems.
  const DELIVER_START_ERROR = 0;
  const DELIVER_SETTLED = 1;
  const DELIVER_FAILED = 2;
  const DELIVER_WORKFLOW_LOADED = 3;
  const DELIVER_WORKFLOW_ERROR = 4;
  const OUTCOME_TEXT = 0;
  const OUTCOME_STRUCTURED = 1;
  const OUTCOME_CANCELLED = 3; // 2 is failed: resolves null, as any other

  function deliver(kind, callId, a, b, c) {
    if (typeof callId !== "number") return;
    if (kind === DELIVER_WORKFLOW_LOADED || kind === DELIVER_WORKFLOW_ERROR) {
      deliverLoad(kind, callId, a, b, c);
      return;
    }
    const call = calls[callId];
    if (call === undefined || !call[CALL_STARTED]) return;
    if (kind === DELIVER_SETTLED) settled(call, a, b, c);
    else if (kind === DELIVER_FAILED) {
      delete calls[call[CALL_ID]];
      release();
      call[CALL_REJECT](fatal("AGENT_RESULT", a));
    } else if (kind === DELIVER_START_ERROR) {
      delete calls[call[CALL_ID]];
      release();
      call[CALL_REJECT](fatal(a, b));
    }
  }

  function settled(call, outcome, payload, outputTokens) {
    delete calls[call[CALL_ID]];
    spent += outputTokens;
    release();
    if (outcome === OUTCOME_TEXT) {
      call[CALL_RESOLVE](payload);
    } else if (outcome === OUTCOME_STRUCTURED) {
      let value = null;
      try {
        value = parse(payload);
      } catch (e) {
        call[CALL_REJECT](fatal("AGENT_RESULT", "agent(): the structured answer was not JSON: " + describeThrown(e)));
        return;
      }
      call[CALL_RESOLVE](value);
    } else if (outcome === OUTCOME_CANCELLED && cancelled) {
      call[CALL_REJECT](cancelledError());
    } else {
      call[CALL_RESOLVE](null); // failed, or cancelled for its own reasons
    }
  }

  // ---------------------------------------------------------------- combinators (§4)

  // A native promise counts whatever its prototype says now; any other
  // object counts when it has a callable `then`.
  function isThenable(v) {
    if (v === null || (typeof v !== "object" && typeof v !== "function")) return false;
    if (N.isPromise(v)) return true;
    try {
      return typeof v.then === "function";
    } catch (_) {
      return false;
    }
  }

  // Returns the array's length, read once.
  function checkItems(name, items) {
    if (cancelled) throw cancelledError();
    if (!isArray(items)) {
      throw fatal("INVALID_ARGUMENT", name + "(): expected an array, got " + typeName(items));
    }
    const n = items.length;
    if (n > maxItemsPerCall) {
      throw fatal("ITEM_CAP", name + "(): " + n + " items exceed the limit of " +
        maxItemsPerCall + " per call (maxItemsPerCall); split the work into smaller calls");
    }
    return n;
  }

  // The script's array copied by index into a table of ours.
  function copyItems(items, n) {
    const copy = create(null);
    for (let i = 0; i < n; i++) copy[i] = items[i];
    return copy;
  }

  function parallel(thunks) {
    return new PromiseCtor(function (resolve, reject) {
      const n = checkItems("parallel", thunks);
      const items = copyItems(thunks, n);
      for (let i = 0; i < n; i++) {
        const it = items[i];
        if (typeof it !== "function" && !isThenable(it)) {
          throw fatal("INVALID_ARGUMENT", "parallel(): item " + i + " is " + typeName(it) +
            ", expected a function returning a promise (e.g. () => agent(…)) or a promise");
        }
        if (typeof it !== "function") {
          // Deliberately more than Claude Code, which refuses it (contract §0).
          warn("parallel(): an item is a promise, not a function; awaited as it is (Claude Code " +
            "refuses it: pass () => agent(…) to run under Claude Code too)", "parallel");
        }
      }
      gather(n, resolve, reject, function (i) {
        const it = items[i];
        return typeof it === "function" ? it() : it;
      }, "parallel");
    });
  }

  function pipeline(items, ...stages) {
    return new PromiseCtor(function (resolve, reject) {
      const n = checkItems("pipeline", items);
      for (let s = 0; s < stages.length; s++) {
        if (typeof stages[s] !== "function") {
          throw fatal("INVALID_ARGUMENT", "pipeline(): stage " + (s + 1) + " is " + typeName(stages[s]) + ", expected a function");
        }
      }
      const input = copyItems(items, n);
      // Each item runs through all stages on its own: no barrier between stages.
      gather(n, resolve, reject, async function (i) {
        const item = input[i];
        let prev = item;
        for (let s = 0; s < stages.length; s++) {
          // As in Claude Code, a null value ends the item: a null item
          // runs no stage, a stage returning null skips the rest
          // (undefined flows on).
          if (prev === null) return null;
          prev = await stages[s](prev, item, i);
        }
        return prev;
      }, "pipeline");
    });
  }

  // Runs `start(i)` for every index at once and resolves with the results
  // in input order. An ordinary throw (a call that could not be made
  // included) makes that item null, logged as `<name>[i] failed: …` when
  // `name` is given — once every item settled, in index order, as Claude
  // Code logs them; the first run-level stop rejects the whole call.
  function gather(n, resolve, reject, start, name) {
    const results = [];
    for (let i = 0; i < n; i++) append(results, null);
    const failures = create(null); // index -> failure text
    let remaining = n;
    let failed = false;
    if (n === 0) {
      resolve(results);
      return;
    }
    const settleOne = function () {
      if (--remaining !== 0 || failed) return;
      if (name !== undefined && !cancelled) {
        for (let i = 0; i < n; i++) {
          if (failures[i] !== undefined) N.log(name + "[" + i + "] failed: " + failures[i], null);
        }
      }
      resolve(results);
    };
    // Never rejects: every outcome is handled here.
    const one = async function (i) {
      let v;
      try {
        v = await start(i);
      } catch (e) {
        if (isRunLevel(e)) {
          if (!failed) {
            failed = true;
            reject(e);
          }
          return;
        }
        failures[i] = failureText(e);
        v = null;
      }
      results[i] = v;
      settleOne();
    };
    for (let i = 0; i < n; i++) one(i);
  }

  // ---------------------------------------------------------------- narration

  // A value where Claude Code wants text (a prompt, a log message, a phase
  // title), rendered the way it renders one: objects and arrays as
  // "[object]", functions as "[function]", anything else as String(v).
  function ccText(v) {
    if (v !== null && typeof v === "object") return "[object]";
    if (typeof v === "function") return "[function]";
    return safeString(v);
  }

  function phase(title) {
    if (cancelled) throw cancelledError();
    if (typeof title !== "string") {
      warn("phase(): the title is " + typeName(title) + ", not a string; used as its text form, as Claude Code does", "phase");
      title = ccText(title);
    }
    if (title.length === 0) {
      // Claude Code attributes the calls that follow to no phase; there
      // is no phase to announce.
      warn("phase(): the title is empty; the calls that follow have no phase, as in Claude Code", "phase");
      currentPhase = null;
      return;
    }
    currentPhase = title;
    N.phase(title, null);
  }

  function log(message) {
    if (cancelled) throw cancelledError();
    if (typeof message !== "string") {
      warn("log(): the message is " + typeName(message) + ", not a string; logged as its text form, as Claude Code does", "log");
      message = ccText(message);
    }
    N.log(message, null);
  }

  // `prefix` and `workflow`: a nested workflow's "[name] " and name; ""
  // and null for the run's script.
  function consoleMethod(prefix, workflow) {
    return function () {
      if (cancelled) return; // narration after a cancel is dropped
      let line = "";
      for (let i = 0; i < arguments.length; i++) {
        line = i === 0 ? formatValue(arguments[i]) : line + " " + formatValue(arguments[i]);
      }
      N.log(prefix + line, workflow);
    };
  }

  function consoleFor(prefix, workflow) {
    const c = {};
    const names = ["log", "info", "warn", "error", "debug"];
    for (let i = 0; i < names.length; i++) defineData(c, names[i], consoleMethod(prefix, workflow));
    return c;
  }

  // ---------------------------------------------------------------- nested workflows

  // workflow(name | {scriptPath}, args): the host finds and prepares the
  // child; it runs here, in this engine, with hooks of its own — so it
  // shares the run's concurrency slots, agent count, budget and cancel —
  // and one level deep only.
  function readTarget(target) {
    if (typeof target === "string") return { __proto__: null, kind: "name", value: target };
    if (target !== null && typeof target === "object" && !isArray(target)) {
      let p;
      try {
        p = target.scriptPath;
      } catch (_) {
        p = undefined;
      }
      if (typeof p === "string") return { __proto__: null, kind: "path", value: p };
    }
    return null;
  }

  function workflow(target, childArgs) {
    return new PromiseCtor(function (resolve, reject) {
      if (cancelled) throw cancelledError();
      const t = readTarget(target);
      if (t === null) {
        throw fatal("INVALID_ARGUMENT", "workflow(): expected a saved workflow's name (a string) or " +
          "{scriptPath: string}, got " + typeName(target));
      }
      // The child's args leave this script as any value does (§5) and
      // reach the child as a fresh copy.
      const argsJson = childArgs === undefined ? undefined : toJsonText(childArgs, "args", "INVALID_ARGUMENT");
      const id = nextLoadId++;
      loads[id] = { __proto__: null, resolve, reject, argsJson };
      N.workflowLoad(id, t.kind, t.value);
    });
  }

  function nestedWorkflow() {
    return new PromiseCtor(function () {
      if (cancelled) throw cancelledError();
      throw fatal("INVALID_ARGUMENT", "workflow(): a nested workflow cannot start another one; nesting " +
        "is one level deep (as in Claude Code): call the inner workflow from the parent, or its agents directly");
    });
  }

  function deliverLoad(kind, id, a, b, c) {
    const load = loads[id];
    if (load === undefined) return;
    delete loads[id];
    if (kind === DELIVER_WORKFLOW_ERROR) {
      load.reject(fatal(typeof a === "string" ? a : "INVALID_ARGUMENT", safeString(b)));
      return;
    }
    if (typeof a !== "function" || typeof b !== "string") return;
    if (typeof c === "string" && !listHas(scriptNames, c)) append(scriptNames, c);
    runChild(load, a, b);
  }

  // Never rejects by itself: the outcome goes to the workflow() promise.
  async function runChild(load, outer, name) {
    let v;
    try {
      v = await childBody(load, outer, name);
    } catch (e) {
      load.reject(e);
      return;
    }
    load.resolve(v);
  }

  async function childBody(load, outer, name) {
    const count = (runsOfWorkflow[name] === undefined ? 0 : runsOfWorkflow[name]) + 1;
    runsOfWorkflow[name] = count;
    const child = { __proto__: null, name, phase: count === 1 ? "\u25b8 " + name : "\u25b8 " + name + " #" + count };
    const prefix = "[" + name + "] ";
    const childAgent = function agent(prompt, options) {
      return agentFor(child, prompt, options);
    };
    const childPhase = function phase(title) {
      if (cancelled) throw cancelledError();
      if (typeof title !== "string") {
        warn("phase(): the title is " + typeName(title) + ", not a string; used as its text form, as Claude Code does", "phase");
        title = ccText(title);
      }
      if (title.length === 0) {
        warn("phase(): the title is empty; nothing to announce", "phase");
        return;
      }
      // Shown attributed to the child; its agents stay grouped under it.
      N.phase(title, name);
    };
    const childLog = function log(message) {
      if (cancelled) throw cancelledError();
      if (typeof message !== "string") {
        warn("log(): the message is " + typeName(message) + ", not a string; logged as its text form, as Claude Code does", "log");
        message = ccText(message);
      }
      N.log(prefix + message, name);
    };
    const childArgs = load.argsJson === undefined ? undefined : parse(load.argsJson);
    N.log("\u25b8 running dynamic workflow " + name, name);
    let v;
    try {
      const body = apply(outer, undefined, [childAgent, childPhase, childLog, consoleFor(prefix, name), nestedWorkflow, childArgs]);
      v = await body();
    } catch (e) {
      if (!cancelled) N.log("\u25b8 " + name + " failed: " + describeThrown(e), name);
      throw e;
    }
    if (!cancelled) N.log("\u25b8 " + name + " done", name);
    // The child's value leaves it as a run's value does (§5); the parent
    // gets a fresh copy. Undefined stays undefined, as in Claude Code.
    if (v === undefined) return undefined;
    return parse(toJsonText(v, "value", "RESULT_UNSERIALIZABLE"));
  }

  // ---------------------------------------------------------------- timers

  let nextTimerId = 1;
  let timers = create(null); // id -> { fn, rest }

  function setTimeout(fn, ms, ...rest) {
    if (typeof fn !== "function") {
      throw fatal("INVALID_ARGUMENT", "setTimeout(): expected a function, got " + typeName(fn));
    }
    const id = nextTimerId++;
    if (cancelled) return id; // pending timers die with the run
    let delay = +ms;
    if (!(delay > 0)) delay = 0;
    timers[id] = { __proto__: null, fn, rest };
    N.setTimer(id, delay);
    return id;
  }

  function clearTimeout(id) {
    if (typeof id !== "number" || timers[id] === undefined) return;
    delete timers[id];
    N.clearTimer(id);
  }

  function fireTimer(id) {
    const t = timers[id];
    if (t === undefined) return;
    delete timers[id];
    try {
      apply(t.fn, undefined, t.rest);
    } catch (e) {
      finish(false, e); // an uncaught throw in a timer fails the run, as in any runtime
    }
  }

  // ---------------------------------------------------------------- budget, args

  function budgetFor(total) {
    return freeze({
      total,
      spent: function () {
        return spent;
      },
      remaining: function () {
        if (budgetTotal === null) return Infinity;
        const left = budgetTotal - spent;
        return left > 0 ? left : 0;
      },
    });
  }

  // ---------------------------------------------------------------- globals

  function install(name, value) {
    defineProperty(G, name, { __proto__: null, value, writable: true, enumerable: false, configurable: true });
  }
  install("agent", agent);
  install("parallel", parallel);
  install("pipeline", pipeline);
  install("phase", phase);
  install("log", log);
  // Defined by `configure` (here only to keep the globals' order).
  install("args", undefined);
  install("budget", undefined);
  install("WorkflowError", WorkflowError);
  install("setTimeout", setTimeout);
  install("clearTimeout", clearTimeout);
  install("workflow", workflow);
  install("console", consoleFor("", null));

  // Date.now(), Math.random() and an argument-less new Date() (or Date())
  // work, which Claude Code refuses before launch so that its resume,
  // keyed on the order of calls, replays the same run; dsh's resume keys
  // calls by content, so it does not need them banned (contract §0). A
  // script that uses them says so, once per run for each, as they make its
  // result differ between runs.
  function nondeterministic(what) {
    warn(what + " gives a different value on every run; accepted (Claude Code refuses a script " +
      "that uses it; pass the value in args to run there too)", what);
  }
  const MathObj = G.Math;
  const randomF = MathObj.random;
  const DateCtor = G.Date;
  const dateNowF = DateCtor.now;
  const dataDesc = function (value) {
    return { __proto__: null, value, writable: true, enumerable: false, configurable: true };
  };
  defineProperty(MathObj, "random", dataDesc(function random() {
    nondeterministic("Math.random()");
    return apply(randomF, MathObj, []);
  }));
  defineProperty(DateCtor, "now", dataDesc(function now() {
    nondeterministic("Date.now()");
    return apply(dateNowF, DateCtor, []);
  }));
  const DateProxy = new Proxy(DateCtor, {
    __proto__: null,
    construct: function (target, argv, newTarget) {
      if (argv.length === 0) nondeterministic("new Date()");
      return construct(target, argv, newTarget === DateProxy ? target : newTarget);
    },
    apply: function (target, thisArg, argv) {
      nondeterministic("Date()");
      return apply(target, thisArg, argv);
    },
  });
  defineProperty(DateCtor.prototype, "constructor", dataDesc(DateProxy));
  install("Date", DateProxy);

  // ---------------------------------------------------------------- settling the body

  function finish(ok, v) {
    if (ended) return;
    ended = true;
    if (cancelled) {
      N.endCancelled(cancelCode, cancelMessage);
      return;
    }
    if (ok) {
      let json;
      try {
        json = v === undefined ? "null" : toJsonText(v, "value", "RESULT_UNSERIALIZABLE");
      } catch (e) {
        if (isFatal(e)) {
          const parts = fatalParts(e);
          N.endFailed(parts.code, parts.message);
        } else if (isOutOfMemory(e)) {
          // The heap cap bit while the value was turned into JSON: a
          // memory limit, not a value that cannot be represented.
          N.endFailed(
            "MEMORY",
            "value: the script exceeded its memory limit of " + memoryBytes +
              " bytes (memoryBytes) while its return value was serialized; return less, or a summary",
          );
        } else {
          N.endFailed("RESULT_UNSERIALIZABLE", describeThrown(e));
        }
        return;
      }
      N.endCompleted(json);
      return;
    }
    if (isFatal(v)) {
      const parts = fatalParts(v);
      if (parts.code === "CANCELLED") N.endCancelled(parts.code, parts.message);
      else N.endFailed(parts.code, endMessage(v, parts));
      return;
    }
    if (isOutOfMemory(v)) {
      N.endFailed("MEMORY", "the script exceeded its memory limit of " + memoryBytes + " bytes (memoryBytes)");
      return;
    }
    const where = v !== null && typeof v === "object" ? scriptPosition(v) : null;
    const text = describeThrown(v);
    N.endFailed("SCRIPT_ERROR", where ? where + ": " + text : text);
  }

  // QuickJS reports an exhausted heap as InternalError "out of memory", or
  // as a bare null when even that error could not be allocated.
  function isOutOfMemory(e) {
    if (e === null) return N.heapNearLimit();
    if (InternalErrorCtor === null || !isInstance(e, InternalErrorCtor)) return false;
    try {
      return e.message === "out of memory";
    } catch (_) {
      return false;
    }
  }

  // Follows the body's promise to its end. Never rejects.
  async function settleBody(p) {
    let v;
    try {
      v = await p;
    } catch (e) {
      finish(false, e);
      return;
    }
    finish(true, v);
  }

  function run(body) {
    let p;
    try {
      p = body();
    } catch (e) {
      p = new PromiseCtor(function (_, reject) {
        reject(e);
      });
    }
    settleBody(p);
    return p;
  }

  function cancel(code, message) {
    if (cancelled) return;
    cancelled = true;
    cancelCode = code;
    cancelMessage = message;
    queue = create(null);
    queueHead = 0;
    queueTail = 0;
    timers = create(null);
    // Integer keys list in ascending order: the order the calls were admitted.
    const waiting = calls;
    const ids = objectKeys(waiting);
    calls = create(null);
    for (let i = 0; i < ids.length; i++) waiting[ids[i]][CALL_REJECT](cancelledError());
    const loading = loads;
    const loadIds = objectKeys(loading);
    loads = create(null);
    for (let i = 0; i < loadIds.length; i++) loading[loadIds[i]].reject(cancelledError());
  }

  function isEnded() {
    return ended;
  }

  // Called by the Rust loop when a cancelled body can no longer finish by
  // itself (it is parked on the host or a timer, both gone).
  function forceEnd(code, message) {
    if (ended) return;
    ended = true;
    N.endCancelled(code, message);
  }

  // ---------------------------------------------------------------- locks

  // Capturing cannot defend what the engine itself looks up on values at
  // run time: resolving a promise with an object reads its `then`,
  // JSON.stringify reads `toJSON`, and `await` reads a promise's
  // `constructor` (when it is not Promise, the promise is followed through
  // its `then`). An inherited one planted by the script would reach every
  // value the hooks resolve or serialize, so these are locked on the
  // prototypes with a non-configurable accessor: reading gives what an
  // untampered engine has (undefined, or Promise); assigning on the
  // prototype itself throws; assigning on any other object defines an
  // ordinary own property there, as it would without the lock.
  function lock(target, targetName, key, why, value) {
    const message = "dsh: " + targetName + "." + key + " is locked: " + why;
    defineProperty(target, key, {
      __proto__: null,
      enumerable: false,
      configurable: false,
      get: function () {
        return value;
      },
      set: function (v) {
        if (this === target) throw newError(TypeErrorCtor, message, TypeErrorCtor);
        if (this === null || (typeof this !== "object" && typeof this !== "function")) return;
        // false (a frozen receiver) is ignored, as a failed assignment in sloppy code
        reflectDefineProperty(this, key, { __proto__: null, value: v, writable: true, enumerable: true, configurable: true });
      },
    });
  }
  const hijacksAwait = "an inherited then would hijack every await in the hooks";
  const forgesJson = "an inherited toJSON would forge every value the hooks serialize";
  lock(ObjectProto, "Object.prototype", "then", hijacksAwait, undefined);
  lock(ArrayProto, "Array.prototype", "then", hijacksAwait, undefined);
  lock(ObjectProto, "Object.prototype", "toJSON", forgesJson, undefined);
  lock(ArrayProto, "Array.prototype", "toJSON", forgesJson, undefined);
  lock(PromiseProto, "Promise.prototype", "constructor",
    "await reads it, and a replaced one would hijack every await in the hooks", PromiseCtor);
  // The engine asks Error.prepareStackTrace to format a stack with call
  // sites, whose getFunction() hands out every function on the stack —
  // the hooks' own among them (run, gather, fireTimer): calling one could
  // end the run with a forged value. Stacks stay the engine's strings.
  lock(ErrorCtor, "Error", "prepareStackTrace",
    "its call sites would hand the script the hooks' own functions", undefined);

  // The run's init data (engine/mod.rs `init_object`), once, after `Init`
  // and before the body is compiled: the limits the hooks check, the
  // script's name, and the two globals that depend on the run.
  let configured = false;
  function configure(init) {
    if (configured) return;
    configured = true;
    const limits = init.limits;
    maxConcurrentAgents = limits.maxConcurrentAgents;
    maxTotalAgents = limits.maxTotalAgents;
    maxItemsPerCall = limits.maxItemsPerCall;
    append(scriptNames, init.scriptName);
    maxRequestBytes = init.maxRequestBytes;
    budgetTotal = init.budget;
    memoryBytes = init.memoryBytes;
    let args;
    if (init.argsKind === "json") args = parse(init.argsText);
    else if (init.argsKind === "text") args = init.argsText;
    else args = undefined;
    install("args", args);
    install("budget", budgetFor(budgetTotal));
  }

  return { configure, run, deliver, fireTimer, cancel, isEnded, forceEnd };
});
