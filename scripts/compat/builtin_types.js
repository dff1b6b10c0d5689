export const meta = { name: "builtin_types", description: "compat: a built-in agent type sends the prompt as written" };
const out = {};
for (const t of ["general-purpose", "Explore", "Plan", "claude", "statusline-setup"]) {
  out[t] = await agent("describe the " + t + " type", { agentType: t });
}
out.structured = await agent("structured as Plan", { agentType: "Plan", schema: { type: "object", properties: { p: { type: "string" } }, required: ["p"] } });
return out;
