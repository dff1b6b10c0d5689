export const meta = { name: "compat-child", description: "compat: a nested workflow's own hooks" };
phase("child phase");
log("child args " + JSON.stringify(args));
console.log("console in child", { n: args.n });
const a = await agent("child prompt " + args.n, { label: "child " + args.n, phase: "not used" });
const s = await agent("child structured " + args.n, {
  schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] },
});
return { n: args.n, a, s, typeofWorkflow: typeof workflow, typeofArgs: typeof args };
