// The peer's worker: one per run, created by harness.js with `new Worker`.
//
// It reproduces the per-run mechanics of the engine dsh workflow replaced:
// build a `vm` context with the hooks injected (agent, parallel, phase, log),
// post "ready", wait for "go" with the script text, run the body inside an
// async function shell, send every agent() call over a MessagePort to the
// parent (which answers), and post the result.
//
// Plain Node.js, no dependencies. Mirrors dsh's defaults where they shape
// the figures: at most 16 agent() calls outstanding (maxConcurrentAgents),
// further calls queue; parallel() starts every thunk and gathers results in
// input order, an ordinary failure becomes null, a cancel rejects.
"use strict";

const { parentPort, workerData } = require("node:worker_threads");
const vm = require("node:vm");

const MAX_CONCURRENT_AGENTS = 16;
const port = workerData.port;

let nextId = 1;
let running = 0;
let cancelled = false;
const pending = new Map();
const queue = [];

function cancelledError() {
  const e = new Error("the run was cancelled");
  e.code = "CANCELLED";
  return e;
}

function send(call) {
  running++;
  pending.set(call.id, call);
  port.postMessage({ t: "agent", id: call.id, prompt: call.prompt, label: call.label });
}

function release() {
  running--;
  while (!cancelled && queue.length > 0 && running < MAX_CONCURRENT_AGENTS) send(queue.shift());
}

function agent(prompt, options) {
  return new Promise((resolve, reject) => {
    if (cancelled) return reject(cancelledError());
    if (typeof prompt !== "string" || prompt.length === 0) {
      return reject(new TypeError("agent(): prompt must be a non-empty string"));
    }
    const label = options && typeof options.label === "string" ? options.label : prompt.slice(0, 49);
    const call = { id: nextId++, prompt, label, resolve, reject };
    if (running < MAX_CONCURRENT_AGENTS) send(call);
    else queue.push(call);
  });
}

function parallel(thunks) {
  if (cancelled) return Promise.reject(cancelledError());
  const items = Array.from(thunks);
  return Promise.all(
    items.map((it) => {
      let p;
      try {
        p = Promise.resolve(typeof it === "function" ? it() : it);
      } catch (e) {
        p = Promise.reject(e);
      }
      return p.catch((e) => {
        if (e && e.code === "CANCELLED") throw e;
        return null;
      });
    }),
  );
}

function phase(title) {
  if (!cancelled) parentPort.postMessage({ t: "phase", title: String(title) });
}

function log(message) {
  if (!cancelled) parentPort.postMessage({ t: "log", message: String(message) });
}

port.on("message", (m) => {
  if (m.t === "result") {
    const call = pending.get(m.id);
    if (!call) return;
    pending.delete(m.id);
    release();
    call.resolve(m.value);
  } else if (m.t === "cancel") {
    cancelled = true;
    const err = cancelledError();
    for (const call of pending.values()) call.reject(err);
    pending.clear();
    for (const call of queue) call.reject(err);
    queue.length = 0;
  }
});

// The context and its hooks exist before "ready", like the replaced engine.
const context = vm.createContext({
  agent,
  parallel,
  phase,
  log,
  args: workerData.args,
  console: { log },
});

function end(status, value, message) {
  parentPort.postMessage({ t: "end", status, value, message });
}

parentPort.on("message", (m) => {
  if (m.t !== "go") return;
  let promise;
  try {
    const script = new vm.Script("(async () => {\n" + m.script + "\n})()", {
      filename: "workflow.js",
      lineOffset: -1,
    });
    promise = script.runInContext(context);
  } catch (e) {
    end("error", null, String(e && e.message));
    return;
  }
  promise.then(
    (v) => end("completed", v === undefined ? null : JSON.parse(JSON.stringify(v))),
    (e) => end(e && e.code === "CANCELLED" ? "cancelled" : "error", null, String(e && e.message)),
  );
});

parentPort.postMessage({ t: "ready" });
