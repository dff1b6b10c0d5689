export const meta = { name: "combinators", description: "compat: parallel() and pipeline() inputs and stages" };
const out = {};
out.empty = await parallel([]);
out.mixed = await parallel([() => 1, () => Promise.resolve("two"), async () => [4]]);
out.nestedPar = await parallel([() => parallel([() => "a", () => "b"]), () => "c"]);
try { out.notArray = await parallel("nope"); } catch (e) { out.notArray = ["threw", typeof e.message]; }
try { out.badItem = await parallel([() => 1, 42]); } catch (e) { out.badItem = ["threw", typeof e.message]; }
out.pipe = await pipeline([1, 2, 3],
  (v, item, i) => v * 10,
  async (prev, item, i) => { if (item === 2) throw new Error("drop two"); return prev + i; },
  (prev, item) => (item === 3 ? null : prev),
  (prev, item) => [prev, item]);
out.pipeOne = await pipeline(["x"], (v) => v + "!");
try { out.noStages = await pipeline([1]); } catch (e) { out.noStages = ["threw", typeof e.message]; }
try { out.badStage = await pipeline([1], 5); } catch (e) { out.badStage = ["threw", typeof e.message]; }
try { out.pipeNotArray = await pipeline(5, (v) => v); } catch (e) { out.pipeNotArray = ["threw", typeof e.message]; }
out.agents = await pipeline(["p", "q"], (v) => agent("pipeline item " + v), (ans, item) => item + ":" + typeof ans);
const seen = [];
out.nulls = await pipeline([1, 2, 3, 4, null],
  (v) => (v === 1 ? null : v === 2 ? undefined : v === 3 ? 0 : false),
  (prev, item) => { seen.push([item, prev === undefined ? "undefined" : prev]); return "s2:" + item; });
out.seen = seen;
out.noStagesNull = await pipeline([1, null]);
return out;
