// TypeScript declarations of the globals a dsh workflow script can use.
// Save as e.g. `dsh-workflow.d.ts` next to your scripts so editors check them:
//   dsh workflow types > dsh-workflow.d.ts

type JsonValue = string | number | boolean | null | readonly JsonValue[] | { readonly [key: string]: JsonValue };
type JsonType = "object" | "array" | "string" | "number" | "integer" | "boolean" | "null";
/** A subschema: a schema object, or `true` (anything) / `false` (nothing). */
type WorkflowSubschema = WorkflowSchema | boolean;

/**
 * A JSON Schema: the whole vocabulary of draft 2020-12 and the draft-07
 * spellings (`items` as an array, `additionalItems`, `dependencies`,
 * `definitions`). The top level must have "type": "object"; a keyword
 * outside JSON Schema (e.g. "x-priority") is refused with UNSUPPORTED_SCHEMA.
 */
type WorkflowSchema = {
  // core
  $schema?: "https://json-schema.org/draft/2020-12/schema" | "https://json-schema.org/draft/2020-12/schema#"
    | "http://json-schema.org/draft-07/schema#" | "http://json-schema.org/draft-07/schema";
  $id?: string;
  /** Only references inside the schema ("#/$defs/x", "#anchor"). */
  $ref?: string;
  $dynamicRef?: string;
  $anchor?: string;
  $dynamicAnchor?: string;
  $comment?: string;
  $vocabulary?: Record<string, boolean>;
  $defs?: Record<string, WorkflowSubschema>;
  definitions?: Record<string, WorkflowSubschema>;
  // any instance
  type?: JsonType | readonly JsonType[];
  enum?: readonly JsonValue[];
  const?: JsonValue;
  allOf?: readonly WorkflowSubschema[];
  anyOf?: readonly WorkflowSubschema[];
  oneOf?: readonly WorkflowSubschema[];
  not?: WorkflowSubschema;
  if?: WorkflowSubschema;
  then?: WorkflowSubschema;
  else?: WorkflowSubschema;
  // numbers
  multipleOf?: number;
  maximum?: number;
  exclusiveMaximum?: number;
  minimum?: number;
  exclusiveMinimum?: number;
  // strings
  maxLength?: number;
  minLength?: number;
  pattern?: string;
  /** Asserted: an unknown format is refused. */
  format?: string;
  contentEncoding?: string;
  contentMediaType?: string;
  contentSchema?: WorkflowSubschema;
  // arrays
  items?: WorkflowSubschema | readonly WorkflowSubschema[];
  prefixItems?: readonly WorkflowSubschema[];
  additionalItems?: WorkflowSubschema;
  unevaluatedItems?: WorkflowSubschema;
  contains?: WorkflowSubschema;
  maxContains?: number;
  minContains?: number;
  maxItems?: number;
  minItems?: number;
  uniqueItems?: boolean;
  // objects
  properties?: Record<string, WorkflowSubschema>;
  patternProperties?: Record<string, WorkflowSubschema>;
  additionalProperties?: WorkflowSubschema;
  unevaluatedProperties?: WorkflowSubschema;
  propertyNames?: WorkflowSubschema;
  maxProperties?: number;
  minProperties?: number;
  required?: readonly string[];
  dependentRequired?: Record<string, readonly string[]>;
  dependentSchemas?: Record<string, WorkflowSubschema>;
  dependencies?: Record<string, WorkflowSubschema | readonly string[]>;
  // annotations
  title?: string;
  description?: string;
  default?: JsonValue;
  examples?: readonly JsonValue[];
  deprecated?: boolean;
  readOnly?: boolean;
  writeOnly?: boolean;
};

interface AgentOptions {
  /** Display label (default: the prompt's first line, cut to 48 characters). */
  label?: string;
  /** Phase attribution (default: the current phase() title). */
  phase?: string;
  /** Ask for a structured value, validated against this schema. */
  schema?: WorkflowSchema;
  /** Model override, passed to the provider. */
  model?: string;
  /** Named provider override for this call. */
  provider?: string;
  /** Reasoning effort hint, e.g. "low" … "max". */
  effort?: string;
  /** A named agent type the provider resolves. */
  agentType?: string;
  /** Run the child in a fresh git worktree where the provider supports it. */
  isolation?: "worktree";
  /** No-progress timeout in milliseconds: the call fails (resolves null) when the provider reports no progress for this long. */
  stallMs?: number;
  /** Tools this child may not use, for providers that have tools. */
  disallowedTools?: readonly string[];
  /** Bash rules the child's Bash tool is clamped to, e.g. ["Bash(git log:*)"] (accepted as Claude Code accepts it). */
  bashCommandClamp?: readonly string[];
  /** Accepted as Claude Code accepts it: the length of a prompt prefix shared by several calls. */
  sharedHeadLength?: number;
}

/** Starts one subagent. Resolves with its text (or structured value with `schema`), or null when the child failed. */
declare function agent(prompt: string, options?: AgentOptions & { schema?: undefined }): Promise<string | null>;
declare function agent<T = any>(prompt: string, options: AgentOptions & { schema: WorkflowSchema }): Promise<T | null>;

/** Runs every thunk; results in input order; an ordinary throw makes that item null. */
declare function parallel<T>(thunks: ReadonlyArray<(() => T | Promise<T>) | Promise<T>>): Promise<(Awaited<T> | null)[]>;

/** Each item flows through every stage, `stage(previous, item, index)`; no barrier between stages; a null ends the item. */
declare function pipeline<I>(items: readonly I[], ...stages: ((previous: any, item: I, index: number) => any)[]): Promise<any[]>;

/** Runs a saved workflow (by its meta name) or a script file inside this run, one level deep; resolves with its return value. */
declare function workflow(target: string | { scriptPath: string }, args?: unknown): Promise<any>;

/** Sets the current phase for later agent() calls. */
declare function phase(title: string): void;

/** Emits a log line. */
declare function log(message: string): void;

/** The run's input: JSON from --args, a string from --args-text, or undefined. */
declare const args: any;

/** The run's output-token budget. */
declare const budget: {
  readonly total: number | null;
  spent(): number;
  remaining(): number;
};

/** The run-level stops: `fatal: true`, and inside parallel()/pipeline() they reject the whole call. */
type RunLevelCode = "BUDGET" | "CANCELLED" | "TIMEOUT" | "MEMORY" | "WORKER_EXITED" | "SANDBOX_UNAVAILABLE";
/** Every other code: `fatal: false`, and inside parallel()/pipeline() only that element becomes null. */
type OrdinaryCode =
  | "SCRIPT_ERROR" | "INVALID_ARGUMENT" | "UNSUPPORTED_OPTION" | "UNSUPPORTED_SCHEMA"
  | "AGENT_CAP" | "ITEM_CAP" | "AGENT_START" | "AGENT_RESULT" | "RESULT_UNSERIALIZABLE";

interface WorkflowErrorOf<C extends RunLevelCode | OrdinaryCode, F extends boolean> extends Error {
  readonly name: "WorkflowError";
  readonly code: C;
  /** Decided by `code`: narrowing on one narrows the other. */
  readonly fatal: F;
}

/** The error hooks throw. Branch on `code`, never on instanceof. */
type WorkflowError = WorkflowErrorOf<RunLevelCode, true> | WorkflowErrorOf<OrdinaryCode, false>;
declare const WorkflowError: {
  new (code: RunLevelCode, message?: string): WorkflowErrorOf<RunLevelCode, true>;
  new (code: OrdinaryCode, message?: string): WorkflowErrorOf<OrdinaryCode, false>;
  readonly prototype: WorkflowError;
};

declare const console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
  debug(...args: unknown[]): void;
};

declare function setTimeout(fn: (...args: any[]) => void, ms?: number, ...args: any[]): number;
declare function clearTimeout(id: number | undefined): void;
