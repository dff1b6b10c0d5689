//! An answer's schema problems as the reason the model (in a corrective
//! turn) and the user (in `agent-end`) read; shared by the agent loop and
//! the agent CLIs, so both word it alike.

use dsh_protocol::schema::Violation;

/// How many validation problems a correction lists.
const PROBLEM_LIMIT: usize = 20;

/// The validation problems of an answer, for the model and the reason:
/// at most [`PROBLEM_LIMIT`] lines.
pub(crate) fn problem_list(problems: &[Violation]) -> String {
    let mut lines: Vec<String> = problems
        .iter()
        .take(PROBLEM_LIMIT)
        .map(|p| format!("- {p}"))
        .collect();
    if problems.len() > PROBLEM_LIMIT {
        lines.push(format!("- … and {} more", problems.len() - PROBLEM_LIMIT));
    }
    format!(
        "the answer does not match the schema:\n{}",
        lines.join("\n")
    )
}
