// A code-review fan-out: one reviewer per file, structured findings,
// then a summary. Run it offline with its fixture:
//
//   dsh workflow run scripts/examples/review.ts \
//     --fixture scripts/examples/review.fixture.json \
//     --args '{"files":["src/parser.rs","src/lexer.rs","src/eval.rs"]}'

export const meta = {
  name: "review-files",
  description: "Review each file for bugs and collect structured findings",
  whenToUse: "When a change touches several files and each deserves its own reviewer",
  phases: [
    { title: "Review", detail: "one reviewer per file, in parallel" },
    { title: "Summarize", detail: "merge the findings into one report" },
  ],
};

interface Finding {
  line: number;
  severity: "low" | "medium" | "high";
  message: string;
}

interface Review {
  file: string;
  findings: Finding[];
}

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
} as const;

const input = (args ?? {}) as { files?: string[] };
const files: string[] = input.files ?? ["src/main.rs"];

phase("Review");
const reviews = (await parallel(
  files.map((file) => () =>
    agent(`Review ${file} for bugs. Report each finding with its line and severity.`, {
      label: file,
      schema: FINDINGS,
      model: "haiku",
    }),
  ),
)) as (Review | null)[];

const done = reviews.filter(Boolean) as Review[];
log(`${done.length} of ${files.length} files reviewed`);

const all = done.flatMap((r) => r.findings.map((f) => ({ file: r.file, ...f })));
const high = all.filter((f) => f.severity === "high");

phase("Summarize");
const summary = await agent(
  `Summarize these review findings for the change author:\n${JSON.stringify(all, null, 2)}`,
  { label: "summary" },
);

return {
  reviewed: done.length,
  failed: files.length - done.length,
  high: high.length,
  findings: all,
  summary,
};
