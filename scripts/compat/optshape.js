// compat: no-logs
export const meta = { name: "optshape", description: "compat: agent() options that are not an object, option values of the wrong type, getters and traps that throw" };
const out = {};
const cases = [
  ["opts number", () => agent("o number", 5)],
  ["opts string", () => agent("o string", "label")],
  ["opts boolean", () => agent("o boolean", true)],
  ["opts function", () => agent("o function", () => 1)],
  ["opts symbol", () => agent("o symbol", Symbol("s"))],
  ["opts Map", () => agent("o map", new Map([["label", "M"]]))],
  ["opts class", () => { class O { constructor() { this.label = "L"; } } return agent("o class", new O()); }],
  ["getter throws", () => agent("o getter", { get label() { throw new Error("boom"); }, phase: "P" })],
  ["deep getter throws", () => agent("o deep getter", { schema: { type: "object", properties: { get a() { throw new Error("deep"); } } } })],
  ["proxy ownKeys throws", () => agent("o ownKeys", new Proxy({ label: "s" }, { ownKeys() { throw new Error("keys"); } }))],
  ["proxy getPrototypeOf throws", () => agent("o gpo", new Proxy({ label: "s" }, { getPrototypeOf() { throw new Error("proto"); } }))],
  ["proxy get throws", () => agent("o get", new Proxy({ label: "s" }, { get() { throw new Error("get"); } }))],
  ["nulls", () => agent("o nulls", { label: null, phase: null, model: null, effort: null, agentType: null, isolation: null, schema: null, stallMs: null })],
  ["label number", () => agent("o label number", { label: 42 })],
  ["label function", () => agent("o label function", { label: () => 1 })],
  ["phase array", () => agent("o phase array", { phase: [1, 2] })],
  ["model 0", () => agent("o model 0", { model: 0 })],
  ["model NaN", () => agent("o model NaN", { model: NaN })],
  ["model true", () => agent("o model true", { model: true })],
  ["model object", () => agent("o model object", { model: {} })],
  ["effort number", () => agent("o effort number", { effort: 3 })],
  ["effort object", () => agent("o effort object", { effort: {} })],
  ["agentType number", () => agent("o agentType number", { agentType: 3 })],
  ["agentType empty", () => agent("o agentType empty", { agentType: "" })],
  ["schema string", () => agent("o schema string", { schema: "x" })],
  ["schema array", () => agent("o schema array", { schema: [] })],
  ["disallowedTools null", () => agent("o dt null", { disallowedTools: null })],
  ["sharedHeadLength null", () => agent("o shl null", { sharedHeadLength: null })],
  ["bashCommandClamp null", () => agent("o bcc null", { bashCommandClamp: null })],
  ["unknown cyclic", () => { const o = { label: "cyc" }; o.me = o; return agent("o cyclic", o); }],
];
for (const [k, f] of cases) {
  try { const r = await f(); out[k] = r === null ? "null" : typeof r; } catch (e) { out[k] = "fail"; }
}
return out;
