export const meta = {
  name: "meta_fields",
  description: "compat: meta fields Claude Code accepts and dsh does not use",
  examples: ["run it", { args: { a: 1 } }],
  version: 1,
  whenToUse: 5,
  phases: ["Review", { title: "Sum", detail: 5, x: 1 }, { detail: "no title" }, { title: "" }],
  model: "haiku",
  version: 2,
};
phase("Review");
return await agent("m hello");
