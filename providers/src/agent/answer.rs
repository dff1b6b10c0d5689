//! A schema call's answer: the JSON taken from a `StructuredOutput` call
//! or from the text, checked against the schema, and the corrective
//! message when it does not match.

use dsh_protocol::schema;
use serde_json::Value;

use super::conversation::{Input, Reply};
use super::toolset::{self, STRUCTURED_OUTPUT};
use crate::problems::problem_list;

/// Why an answer to a schema call is not taken: the problem list, shown to
/// the model in the corrective turn and, should the answer stay wrong, the
/// call's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct AnswerMismatch(pub(super) String);

/// A `StructuredOutput` input, checked against the call's schema.
pub(super) fn structured_answer(schema: &Value, input: &Input) -> Result<Value, AnswerMismatch> {
    let Input::Json(v) = input else {
        return Err(AnswerMismatch(format!(
            "the {STRUCTURED_OUTPUT} arguments are not JSON"
        )));
    };
    let answer = toolset::unwrap_answer(schema, v.clone());
    check(schema, answer)
}

/// A text answer to a schema call: the JSON in it (code fences allowed),
/// checked against the schema.
pub(super) fn text_answer(schema: &Value, reply: &Reply) -> Result<Value, AnswerMismatch> {
    let cut = if reply.finish_reason.as_deref() == Some("length") {
        " (the answer was cut off at the token limit)"
    } else {
        ""
    };
    let v: Value = serde_json::from_str(strip_fences(&reply.text)).map_err(|e| {
        AnswerMismatch(format!(
            "the answer is not JSON{cut}: {e}; it starts: {}",
            toolset::cut(reply.text.trim(), 200)
        ))
    })?;
    check(schema, v)
}

fn check(schema: &Value, v: Value) -> Result<Value, AnswerMismatch> {
    let problems = schema::validate(schema, &v, "value");
    if problems.is_empty() {
        Ok(v)
    } else {
        Err(AnswerMismatch(problem_list(&problems)))
    }
}

/// The JSON inside a Markdown code fence (its info string dropped), or
/// the text trimmed.
pub(crate) fn strip_fences(s: &str) -> &str {
    let t = s.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let Some(inner) = rest.strip_suffix("```") else {
        return t;
    };
    // Drop the info string ("json") on the opening line.
    match inner.find('\n') {
        Some(i) => inner[i + 1..].trim(),
        None => inner.trim(),
    }
}

/// The corrective message: what is wrong, and how to answer.
pub(super) fn correction(problems: &str, tool: bool) -> String {
    if tool {
        format!(
            "{problems}\nCall {STRUCTURED_OUTPUT} again with an input that fixes every problem \
             listed."
        )
    } else {
        format!("{problems}\nReply again in json: only the corrected object, nothing else.")
    }
}
