export const meta = { name: "compat-empty", description: "compat: returns nothing" };
log("args are " + typeof args);
