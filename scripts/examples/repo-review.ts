// A real review of the repository you run it in, by agents that read it:
// a survey agent looks around (Glob, LS, Read) and lists the source files
// worth a review; then one reviewer per file reads that file and reports
// findings with line numbers. Every agent works through the agent loop's
// read-only tools, sandboxed to the working directory.
//
// With a DeepSeek key (the default provider):
//
//   export DEEPSEEK_API_KEY=sk-...
//   dsh workflow run scripts/examples/repo-review.ts --args '{"focus":"error handling"}'
//
// CI runs it against a loopback model server (tests/agent_loop.rs).

export const meta = {
  name: "repo-review",
  description: "Survey a repository, then review each source file it finds",
  whenToUse: "To get a first review of a small repository, file by file",
  phases: [
    { title: "Survey", detail: "one explorer lists the files worth reviewing" },
    { title: "Review", detail: "one reviewer per file, in parallel" },
  ],
};

interface Finding {
  line: number;
  severity: "low" | "medium" | "high";
  message: string;
}

const FILES = {
  type: "object",
  properties: { files: { type: "array", items: { type: "string" } } },
  required: ["files"],
  additionalProperties: false,
} as const;

const FINDINGS = {
  type: "object",
  properties: {
    file: { type: "string" },
    findings: {
      type: "array",
      items: {
        type: "object",
        properties: {
          line: { type: "integer" },
          severity: { type: "string", enum: ["low", "medium", "high"] },
          message: { type: "string" },
        },
        required: ["line", "severity", "message"],
        additionalProperties: false,
      },
    },
  },
  required: ["file", "findings"],
  additionalProperties: false,
} as const;

const input = (args ?? {}) as { focus?: string; max?: number };
const focus = input.focus ?? "bugs";
const max = input.max ?? 6;

phase("Survey");
const survey = (await agent(
  `List the source files of this repository worth a review for ${focus}, at most ${max}. ` +
    `Look with Glob and LS; answer with paths relative to the repository root.`,
  { label: "survey", agentType: "Explore", schema: FILES },
)) as { files: string[] } | null;
if (!survey) throw new Error("the survey agent failed; see its agent-end reason");
const files = survey.files.slice(0, max);
log(`${files.length} files to review: ${files.join(", ")}`);

phase("Review");
const reviews = (await parallel(
  files.map((file) => () =>
    agent(
      `Review ${file} for ${focus}. Read the file first. Report each finding with its ` +
        `line number; report nothing you did not see in the file.`,
      { label: file, agentType: "Explore", schema: FINDINGS },
    ),
  ),
)) as ({ file: string; findings: Finding[] } | null)[];

const done = reviews.filter((r) => r !== null);
log(`${done.length} of ${files.length} files reviewed`);
return {
  focus,
  files,
  findings: done.flatMap((r) => r.findings.map((f) => ({ file: r.file, ...f }))),
};
