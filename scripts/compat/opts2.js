export const meta = { name: "opts2", description: "option types" };
const out = {};
for (const [k, v] of [["stallMs", "x"], ["stallMs", -1], ["disallowedTools", "Bash"], ["disallowedTools", [1]], ["sharedHeadLength", "x"], ["bashCommandClamp", []], ["label", 3], ["model", 3]]) {
  try { await agent("p " + k, { [k]: v }); out[k + ":" + JSON.stringify(v)] = "ok"; } catch (e) { out[k + ":" + JSON.stringify(v)] = "fail"; }
}
return out;
