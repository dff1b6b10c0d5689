// Claude Code rejects parallel() given promises (a TypeError); dsh awaits
// them as they are, deliberately, with a warning (docs/scripts.md).
export const meta = { name: "promise_items", description: "deliberate: parallel() of started promises" };
let caught = "no";
let r = null;
try { r = await parallel([agent("p started"), () => agent("p thunk")]); } catch (e) { caught = "yes"; }
return { caught, r };
