export const meta = { name: "unusable", description: "compat: schemas no answer can satisfy are refused before the call; the satisfiable ones next to them run" };
const out = {};
const O = (p, extra) => ({ type: "object", properties: p, ...extra });
const cases = {
  requiredExcluded: O({ a: { type: "string" } }, { required: ["a", "b"], additionalProperties: false }),
  requiredExcludedInProperty: O({ o: { type: "object", properties: {}, required: ["x"], additionalProperties: false } }, { required: ["o"] }),
  requiredExcludedInItems: O({ l: { type: "array", items: { type: "object", properties: {}, required: ["q"], additionalProperties: false } } }),
  minimumAboveMaximum: O({ n: { type: "number", minimum: 5, maximum: 1 } }),
  exclusiveBoundsEqual: O({ n: { type: "number", exclusiveMinimum: 1, exclusiveMaximum: 1 } }),
  minLengthAboveMax: O({ s: { type: "string", minLength: 5, maxLength: 2 } }),
  minItemsAboveMax: O({ a: { type: "array", minItems: 3, maxItems: 1, items: { type: "string" } } }),
  rootMinPropertiesAboveMax: O({}, { minProperties: 2, maxProperties: 1 }),
  emptyEnum: O({ e: { type: "string", enum: [] } }),
  enumWithoutTheType: O({ e: { type: "number", enum: ["a"] } }),
  constWithoutTheType: O({ e: { type: "number", const: "a" } }),
  closedAndSatisfiable: O({ a: { type: "string" } }, { required: ["a"], additionalProperties: false }),
  equalBounds: O({ n: { type: "number", minimum: 1, maximum: 1 } }),
  unknownFormat: O({ s: { type: "string", format: "x-custom" } }),
  annotations: O({ s: { type: "string", deprecated: true, readOnly: true, examples: ["x"] } }),
};
for (const [k, s] of Object.entries(cases)) {
  try { const r = await agent("u " + k, { schema: s }); out[k] = r; } catch (e) { out[k] = "fail"; }
}
return out;
