// Claude Code refuses this script before launch (for its resume); dsh runs
// it deliberately, with one warning per run for each call (docs/scripts.md).
export const meta = { name: "nondeterminism", description: "deliberate: Date.now(), Math.random(), new Date() run, with a warning" };
return {
  random: typeof Math.random(),
  now: typeof Date.now(),
  date: new Date() instanceof Date,
  call: typeof Date(),
  epoch: new Date(0).toISOString(),
};
