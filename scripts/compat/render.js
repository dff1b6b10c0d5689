export const meta = { name: "render", description: "how values render" };
for (const v of [null, undefined, true, 5, [1, 2], { a: 1 }, () => 1, new Error("e"), Symbol("s"), 10n, "str"]) {
  try { log(v); } catch (e) { log("threw " + e.message); }
}
for (const v of [null, [1, 2], true]) {
  try { phase(v); log("phase ok"); } catch (e) { log("phase threw " + e.message); }
}
const r = await agent([1, 2], { label: { x: 1 } });
return r;
