// Real work in a git repository by coding agents: an explorer finds the
// TODO comments of the repository you run it in; then one agent per TODO
// resolves it in a git worktree of its own (kept on a branch `dsh/…` when
// it changed something, for you to review and merge); a last step lists
// the branches. Written for an agent CLI provider that may edit files:
//
//   # dsh.toml
//   [workflow]
//   provider = "claude"
//   [providers.claude]
//   kind = "claude-code"
//   permission_mode = "acceptEdits"
//   allowed_tools = ["Bash(git diff*)", "Bash(git status*)", "Bash(grep *)"]
//
//   # or: [providers.codex] kind = "codex"; permission_mode = "workspace-write"
//
//   dsh workflow run scripts/examples/fix-todos.ts --args '{"max": 3}'
//
// CI runs it through the real Claude Code and Codex CLIs against a
// loopback model server (tests/agent_cli.rs), and offline against
// fix-todos.fixture.json (`dsh workflow test scripts/`).

export const meta = {
  name: "fix-todos",
  description: "Find the TODO comments of a repository and resolve each in its own worktree",
  whenToUse: "To clear small TODOs in parallel, each change on a branch of its own",
  phases: [
    { title: "Survey", detail: "one read-only explorer lists the TODO comments" },
    { title: "Fix", detail: "one agent per TODO, each in a fresh git worktree" },
  ],
};

// Strict schemas (every object closed, every property required): Codex
// then enforces them itself, as Claude Code enforces any schema.
const TODOS = {
  type: "object",
  properties: {
    todos: {
      type: "array",
      items: {
        type: "object",
        properties: {
          file: { type: "string" },
          line: { type: "integer" },
          text: { type: "string" },
        },
        required: ["file", "line", "text"],
        additionalProperties: false,
      },
    },
  },
  required: ["todos"],
  additionalProperties: false,
} as const;

const FIX = {
  type: "object",
  properties: {
    changed: { type: "boolean" },
    summary: { type: "string" },
  },
  required: ["changed", "summary"],
  additionalProperties: false,
} as const;

interface Todo {
  file: string;
  line: number;
  text: string;
}

const max = ((args ?? {}) as { max?: number }).max ?? 5;

phase("Survey");
const survey = (await agent(
  "List the TODO comments in the source files of this repository (skip vendored and " +
    "generated files): for each, its file path relative to the repository root, its line " +
    "number and its text. Change nothing.",
  { label: "survey", agentType: "Explore", schema: TODOS },
)) as { todos: Todo[] } | null;
const todos = (survey?.todos ?? []).slice(0, max);
log(`${survey?.todos.length ?? 0} TODO comment(s) found; resolving ${todos.length}`);

phase("Fix");
const fixes = await parallel(
  todos.map((t) => () =>
    agent(
      `Resolve the TODO comment at ${t.file}:${t.line} ("${t.text}"). Make the smallest ` +
        "change that does what it asks and remove the comment. Do not commit. Answer whether " +
        "you changed anything, and what, in one sentence.",
      { label: `${t.file}:${t.line}`, isolation: "worktree", schema: FIX },
    ),
  ),
);

return {
  found: survey?.todos.length ?? 0,
  results: todos.map((t, i) => ({
    todo: `${t.file}:${t.line}`,
    changed: (fixes[i] as { changed: boolean } | null)?.changed ?? false,
    summary: (fixes[i] as { summary: string } | null)?.summary ?? "(failed)",
  })),
};
