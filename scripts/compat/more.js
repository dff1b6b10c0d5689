export const meta = { name: "more", description: "more edge cases" };
const out = {};
const cases = [
  ["phase num", () => agent("x", { phase: 3 })],
  ["effort bad", () => agent("x", { effort: "ultra" })],
  ["schema non-object root", () => agent("x", { schema: { type: "array", items: {} } })],
  ["options null", () => agent("x", null)],
  ["options array", () => agent("x", [])],
  ["prompt object", () => agent({ a: 1 })],
  ["prompt undefined", () => agent(undefined)],
];
for (const [k, f] of cases) {
  try { const r = await f(); out[k] = r === null ? "null" : "ok"; } catch (e) { out[k] = "fail"; }
}
let ph = "none";
try { phase(""); ph = "ok"; } catch (e) { ph = "fail"; }
out.phaseEmpty = ph;
try { phase(5); out.phaseNum = "ok"; } catch (e) { out.phaseNum = "fail"; }
try { log(5); out.logNum = "ok"; } catch (e) { out.logNum = "fail"; }
try { log({a: 1}); out.logObj = "ok"; } catch (e) { out.logObj = "fail"; }
return out;
