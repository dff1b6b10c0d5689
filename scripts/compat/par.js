export const meta = { name: "par", description: "parallel() and pipeline() items that throw are null and logged" };
const r = await parallel([
  () => agent("a"),
  () => { throw new Error("boom"); },
  async () => { throw new TypeError("async boom"); },
  () => 7,
]);
const q = await pipeline([1, 2, 3], (x) => { if (x === 2) throw new Error("no " + x); return x * 10; }, (y) => y + 1);
return { r, q };
