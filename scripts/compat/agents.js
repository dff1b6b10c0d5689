// compat: no-logs (the failure lines are error messages, worded by each runtime)
export const meta = { name: "agents", description: "compat: built-in and .claude/agents agent types; an unknown one rejects" };
const out = {};
out.builtins = await parallel(["general-purpose", "Explore", "Plan"].map((t) => () => agent("as " + t, { agentType: t })));
out.custom = await agent("review this change", { agentType: "compat-reviewer" });
try { await agent("nobody", { agentType: "no-such-compat-type" }); out.unknown = "resolved"; } catch (e) { out.unknown = typeof e.message; }
out.inParallel = await parallel([() => agent("nobody either", { agentType: "no-such-compat-type" }), () => agent("someone")]);
return out;
