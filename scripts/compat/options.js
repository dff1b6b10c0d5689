export const meta = { name: "options", description: "lenient options" };
const a = await agent("", { label: "empty" });
const b = await agent(42);
const c = await agent("c", { temperature: 0.2, bogus: true });
const d = await agent("d", { isolation: "vm" });
const e = await agent("e", { stallMs: 60000, disallowedTools: ["Write"], bashCommandClamp: ["Bash(ls)"], sharedHeadLength: 10 });
return [a, b, c, d, e];
