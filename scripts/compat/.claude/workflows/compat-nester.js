export const meta = { name: "compat-nester", description: "compat: nesting twice" };
return await workflow("compat-child", { n: 9 });
