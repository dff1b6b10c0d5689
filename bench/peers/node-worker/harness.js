// The Node peer of the dsh benchmark: the per-run mechanics of the engine
// dsh workflow replaced, reproduced in plain Node.js (no dependencies).
//
// Every run: a fresh `new Worker(worker.js)` with a MessageChannel port
// handed over in workerData; the worker builds a `vm` context with the hooks
// injected and posts "ready"; the harness answers "go" with the script text;
// the worker runs the body in an async function shell and sends each
// agent() call over the port; the harness answers at once (the instant
// provider); the worker posts the result; the harness closes the port and
// awaits worker.terminate().
//
// Modes:
//   node harness.js serve           one JSON request per stdin line
//                                   ({"fig": "trivial"}), one JSON reply per
//                                   stdout line ({"ok": true, "sample": …});
//                                   what the Rust bench (dsh-bench) uses so it
//                                   can interleave dsh and node samples
//   node harness.js cli             one trivial run, prints its value, exits
//                                   (the whole-process figure)
//   node harness.js all [N]         every figure N times (default 10), prints
//                                   one JSON object of medians
//
// Times are process.hrtime (ns) differences, reported in ms (µs for the
// per-call round trip), calls/s for the 16-outstanding figure, KiB for memory.
"use strict";

const { Worker, MessageChannel } = require("node:worker_threads");
const path = require("node:path");
const readline = require("node:readline");

const WORKER = path.join(__dirname, "worker.js");

const now = () => process.hrtime.bigint();
const ms = (a, b) => Number(b - a) / 1e6;
const sleep = (d) => new Promise((r) => setTimeout(r, d));

const TRIVIAL = "return 1";
const FANOUT =
  "const r = await parallel(Array.from({ length: 200 }, (_, i) => () => agent(`item ${i}`)));\n" +
  "return r.filter(Boolean).length";
const SEQ_CALLS = 1000;
const SEQ = `for (let i = 0; i < ${SEQ_CALLS}; i++) await agent(\`q \${i}\`);\nreturn ${SEQ_CALLS}`;
const LANES = 16;
const PER_LANE = 250;
const OUTSTANDING =
  `const lanes = await parallel(Array.from({ length: ${LANES} }, (_, l) => async () => {\n` +
  `  for (let i = 0; i < ${PER_LANE}; i++) await agent(\`q \${l} \${i}\`);\n` +
  "  return 1;\n" +
  "}));\n" +
  "return lanes.filter(Boolean).length";
const HOLD = 'await agent("hold");\nreturn 0';
const SPIN = 'await agent("x");\nwhile (true) {}';
const IDLE_WORKERS = 20;

// An answer given at once.
function instant(run, m) {
  run.port.postMessage({ t: "result", id: m.id, value: "ok" });
}

// Starts one run. `onAgent(run, message)` answers (or holds) agent() calls.
function startRun(script, onAgent = instant) {
  const { port1, port2 } = new MessageChannel();
  const worker = new Worker(WORKER, {
    workerData: { port: port2, args: null },
    transferList: [port2],
  });
  const run = { worker, port: port1 };
  run.result = new Promise((resolve, reject) => {
    worker.on("message", (m) => {
      if (m.t === "ready") worker.postMessage({ t: "go", script });
      else if (m.t === "end") resolve(m);
    });
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`worker exited (${code}) before its result`)));
  });
  // A run cancelled by terminate() never gets its result; that is expected.
  run.result.catch(() => {});
  port1.on("message", (m) => {
    if (m.t === "agent") onAgent(run, m);
  });
  return run;
}

async function dispose(run) {
  run.port.close();
  await run.worker.terminate();
}

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

function completedWith(r, value, what) {
  expect(
    r.status === "completed" && r.value === value,
    `${what}: expected completed ${value}, got ${JSON.stringify(r)}`,
  );
}

// A clock over the agent() calls of one run: first and last arrival.
function callClock() {
  const c = { first: 0n, last: 0n, count: 0 };
  c.onAgent = (run, m) => {
    const t = now();
    if (c.count === 0) c.first = t;
    c.last = t;
    c.count++;
    instant(run, m);
  };
  return c;
}

const figures = {
  // new Worker → result of `return 1`; also → worker terminated.
  async trivial() {
    const t0 = now();
    const run = startRun(TRIVIAL);
    const r = await run.result;
    const t1 = now();
    await dispose(run);
    const t2 = now();
    completedWith(r, 1, "trivial");
    return { ms: ms(t0, t1), reaped_ms: ms(t0, t2) };
  },

  // 100 workers created at once → every result.
  async burst100() {
    const t0 = now();
    const runs = Array.from({ length: 100 }, () => startRun(TRIVIAL));
    const results = await Promise.all(runs.map((r) => r.result));
    const t1 = now();
    await Promise.all(runs.map(dispose));
    for (const r of results) completedWith(r, 1, "burst100");
    return { ms: ms(t0, t1) };
  },

  // 200 agent() calls through parallel() (16 outstanding at most).
  async fanout200() {
    const t0 = now();
    const run = startRun(FANOUT);
    const r = await run.result;
    const t1 = now();
    await dispose(run);
    completedWith(r, 200, "fanout200");
    return { ms: ms(t0, t1) };
  },

  // 1000 sequential agent() calls; per-call round trip from the harness's
  // view: time between the first and the last call's arrival / (n - 1).
  async agent_seq() {
    const clock = callClock();
    const run = startRun(SEQ, clock.onAgent);
    const r = await run.result;
    await dispose(run);
    completedWith(r, SEQ_CALLS, "agent_seq");
    return { us: Number(clock.last - clock.first) / 1e3 / (clock.count - 1) };
  },

  // 16 lanes of sequential agent() calls: 16 outstanding at all times.
  async agent16() {
    const clock = callClock();
    const run = startRun(OUTSTANDING, clock.onAgent);
    const r = await run.result;
    await dispose(run);
    completedWith(r, LANES, "agent16");
    expect(clock.count === LANES * PER_LANE, `agent16: ${clock.count} calls`);
    return { per_s: (clock.count - 1) / (Number(clock.last - clock.first) / 1e9) };
  },

  // Process RSS delta / N with N live workers, each idle in `await agent()`.
  async memory() {
    if (global.gc) global.gc();
    await sleep(20);
    const rss0 = process.memoryUsage().rss;
    let held = 0;
    let allHeld;
    const ready = new Promise((r) => (allHeld = r));
    const runs = Array.from({ length: IDLE_WORKERS }, () =>
      startRun(HOLD, () => {
        if (++held === IDLE_WORKERS) allHeld();
      }),
    );
    await ready;
    await sleep(20);
    const rss1 = process.memoryUsage().rss;
    for (const run of runs) run.port.postMessage({ t: "cancel" });
    await Promise.all(runs.map((r) => r.result));
    await Promise.all(runs.map(dispose));
    return { workers: IDLE_WORKERS, rss_kib: (rss1 - rss0) / 1024 / IDLE_WORKERS };
  },

  // A run waiting on an agent() that never answers: cancel → result.
  async cancel_hang() {
    let heldNow;
    const held = new Promise((r) => (heldNow = r));
    const run = startRun(HOLD, () => heldNow());
    await held;
    const t0 = now();
    run.port.postMessage({ t: "cancel" });
    const r = await run.result;
    const t1 = now();
    await dispose(run);
    expect(r.status === "cancelled", `cancel_hang: ${JSON.stringify(r)}`);
    return { ms: ms(t0, t1) };
  },

  // A script spinning after an await: worker.terminate() → terminated.
  async cancel_spin() {
    let answeredNow;
    const answered = new Promise((r) => (answeredNow = r));
    const run = startRun(SPIN, (run, m) => {
      instant(run, m);
      answeredNow();
    });
    await answered;
    await sleep(5);
    const t0 = now();
    run.port.close();
    await run.worker.terminate();
    const t1 = now();
    return { ms: ms(t0, t1) };
  },
};

async function serve() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (line.trim() === "") continue;
    let reply;
    try {
      const req = JSON.parse(line);
      const fig = figures[req.fig];
      if (!fig) throw new Error(`unknown figure ${req.fig}`);
      reply = { ok: true, sample: await fig() };
    } catch (e) {
      reply = { ok: false, error: String((e && e.stack) || e) };
    }
    process.stdout.write(JSON.stringify(reply) + "\n");
  }
}

async function cli() {
  const run = startRun(TRIVIAL);
  const r = await run.result;
  await dispose(run);
  completedWith(r, 1, "cli");
  process.stdout.write(JSON.stringify(r.value) + "\n");
}

async function all(n) {
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor(s.length / 2)];
  };
  const out = { node: process.version, n };
  for (const [name, fig] of Object.entries(figures)) {
    await fig(); // warm-up
    const samples = [];
    for (let i = 0; i < n; i++) samples.push(await fig());
    const keys = Object.keys(samples[0]);
    out[name] = Object.fromEntries(keys.map((k) => [k, median(samples.map((s) => s[k]))]));
  }
  process.stdout.write(JSON.stringify(out, null, 2) + "\n");
}

const mode = process.argv[2] || "serve";
const main =
  mode === "serve" ? serve() : mode === "cli" ? cli() : mode === "all" ? all(Number(process.argv[3] || 10)) : null;
if (!main) {
  process.stderr.write("usage: node harness.js serve | cli | all [N]\n");
  process.exit(2);
}
main.catch((e) => {
  process.stderr.write(String((e && e.stack) || e) + "\n");
  process.exit(1);
});
