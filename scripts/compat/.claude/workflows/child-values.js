export const meta = { name: "child-values", description: "compat: what a nested workflow's value becomes" };
log("got " + JSON.stringify(args));
return { m: new Map([[1, 2]]), u: undefined, d: [1, undefined], nan: NaN, f: () => 1, args };
