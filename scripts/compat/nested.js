export const meta = { name: "nested", description: "compat: workflow() runs a saved workflow or a file, one level deep" };
phase("Parent");
const one = await workflow("compat-child", { n: 1, tags: ["a"] });
const two = await parallel([() => workflow("compat-child", { n: 2 }), () => workflow("compat-empty")]);
const values = await workflow({ scriptPath: ".claude/workflows/child-values.js" }, "text args");
const after = await agent("parent after its children");
return { one, two, values, after };
