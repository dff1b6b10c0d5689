export const meta = { name: "compat-thrower", description: "compat: a nested workflow that throws" };
throw new Error("boom in child");
