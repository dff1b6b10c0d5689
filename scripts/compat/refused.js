// compat: no-logs (the failure messages are each runtime's own words)
export const meta = { name: "refused", description: "calls that cannot be made are null inside parallel()" };
const r = await parallel([
  () => agent("a"),
  () => agent("c", { schema: { type: "array" } }),
  () => agent("x", { schema: { type: "object", properties: { n: { type: "number" } } } }),
]);
let outside = "none";
try { await agent("c", { schema: { type: "array" } }); outside = "ok"; } catch (e) { outside = "caught"; }
return { r, outside };
