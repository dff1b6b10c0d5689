export const meta = { name: "values", description: "lossy values" };
class P { constructor() { this.a = 1; } }
const a = [1, undefined, NaN, Infinity];
a[6] = 7;
return { u: undefined, f: () => 1, arr: a, m: new Map([[1, 2]]), s: new Set([1]), d: new Date(0), p: new P(), n: new Number(3), t: { toJSON() { return "T"; } } };
