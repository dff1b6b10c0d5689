// compat: no-logs (the failure lines are error messages, worded by each runtime)
export const meta = { name: "nested_fail", description: "compat: failing nested workflows reject; parallel() makes them null" };
const out = {};
try { await workflow("compat-thrower"); } catch (e) { out.thrown = [e.name, e.message]; }
try { await workflow("compat-nester"); } catch (e) { out.nested = typeof e.message; }
try { await workflow("no-such-compat-workflow"); } catch (e) { out.missing = typeof e.message; }
try { await workflow(42); } catch (e) { out.badTarget = typeof e.message; }
try { await workflow({ scriptPath: "no/such/file.js" }); } catch (e) { out.noFile = typeof e.message; }
out.par = await parallel([() => workflow("compat-thrower"), () => agent("still runs beside a failed child")]);
return out;
