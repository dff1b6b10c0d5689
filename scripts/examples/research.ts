// A research pipeline: plan questions, then research and fact-check each
// one through a two-stage pipeline (no barrier between stages), then write
// a brief. Run it offline with its fixture:
//
//   dsh workflow run scripts/examples/research.ts \
//     --fixture scripts/examples/research.fixture.json \
//     --args-text "How do process sandboxes on Linux work?"

export const meta = {
  name: "research-brief",
  description: "Break a topic into questions, research and fact-check each, and write a short brief",
  phases: [{ title: "Plan" }, { title: "Research" }, { title: "Write" }],
};

const topic = typeof args === "string" && args.trim() ? args.trim() : "the topic";

phase("Plan");
const plan = await agent(`List three focused research questions about: ${topic}`, {
  label: "plan",
  schema: {
    type: "object",
    properties: { questions: { type: "array", items: { type: "string" } } },
    required: ["questions"],
  },
});
if (!plan) throw new Error("planning failed; nothing to research");
const questions: string[] = plan.questions.slice(0, 3);
log(`researching ${questions.length} questions`);

phase("Research");
const notes = await pipeline(
  questions,
  (q: string, _item: string, i: number) =>
    agent(`Research this question and answer in three sentences: ${q}`, { label: `research ${i + 1}` }),
  async (answer: string | null, q: string, i: number) => {
    if (!answer) return null;
    const check = await agent(`Fact-check this answer to "${q}". Reply "ok" or list the errors.\n\n${answer}`, {
      label: `check ${i + 1}`,
      effort: "low",
    });
    return { question: q, answer, verified: check?.trim().toLowerCase() === "ok" };
  },
);

phase("Write");
const usable = notes.filter(Boolean) as { question: string; answer: string; verified: boolean }[];
const brief = await agent(
  `Write a one-paragraph brief on ${topic} from these notes:\n${JSON.stringify(usable)}`,
  { label: "brief" },
);

return { topic, questions: usable.length, verified: usable.filter((n) => n.verified).length, brief, tokens: budget.spent() };
