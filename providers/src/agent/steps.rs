//! The steps of one turn of the agent loop: ask the model (within the
//! turn's and the conversation's bounds), then take its answer or correct
//! it once, or run its tool calls.

use serde_json::Value;

use super::answer::{AnswerMismatch, correction, structured_answer, text_answer};
use super::conversation::{Message, Reply, ToolResult};
use super::toolset::STRUCTURED_OUTPUT;
use super::{Call, MAX_CONVERSATION_BYTES, MAX_TURN_BYTES, Model, Turn, run_one};
use dsh_seam::{Activity, ChildResult};

/// What the loop carries from turn to turn, besides the conversation.
pub(super) struct LoopState {
    /// The one corrective turn was spent.
    pub(super) corrected: bool,
    /// The problems of the answer the last turn corrected, for the reason
    /// should the corrective request itself fail.
    pub(super) correcting: Option<AnswerMismatch>,
    /// Tool calls run so far.
    pub(super) tool_calls: u32,
    /// The conversation's size, checked against
    /// [`MAX_CONVERSATION_BYTES`] before every turn.
    pub(super) conversation_bytes: usize,
    /// The call's share of the host's budget for model calls (every call's
    /// together): its conversation for as long as the call, and a turn's
    /// request and response during the turn (budget's module docs).
    pub(super) held: crate::budget::Held<'static>,
}

impl LoopState {
    /// One model turn: the reply to `ask`, within the turn's and the
    /// conversation's bounds, its usage counted; `Err` is how the call
    /// ends instead.
    pub(super) async fn ask(
        &mut self,
        model: &dyn Model,
        call: &Call<'_>,
        turn: u32,
        ask: &Turn<'_>,
    ) -> Result<Reply, ChildResult> {
        let conversation_bytes = self.conversation_bytes;
        if conversation_bytes > MAX_CONVERSATION_BYTES {
            return Err(ChildResult::Failed(format!(
                "gave up before turn {turn}: the conversation grew to {conversation_bytes} bytes, \
                 over the limit of {MAX_CONVERSATION_BYTES} (tool output and answers of the \
                 earlier turns)"
            )));
        }
        if let Err(e) = self.held.cover(conversation_bytes, "the conversation") {
            return Err(ChildResult::Failed(format!(
                "gave up before turn {turn}: {e}"
            )));
        }
        call.progress.activity(Activity::Turn { turn });
        let reply = tokio::select! {
            biased;
            _ = call.cancel.cancelled() => return Err(ChildResult::Cancelled),
            r = model.turn(ask, call.progress, call.usage.now(), &mut self.held) => r,
        };
        let reply = match reply {
            Ok(r) => r,
            Err(failed) => {
                // The transport retried what could be retried; what reaches
                // the loop ends the call, whatever its kind.
                return Err(failed
                    .map_reason(|reason| match (&self.correcting, turn) {
                        (Some(problems), _) => {
                            format!("{problems}\nThe corrective request then failed: {reason}")
                        }
                        (None, 1) => reason,
                        (None, _) => format!("turn {turn}: {reason}"),
                    })
                    .into_child_result());
            }
        };
        self.correcting = None;
        let turn_bytes = reply.text.len()
            + reply
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.input.as_value().to_string().len())
                .sum::<usize>();
        if turn_bytes > MAX_TURN_BYTES {
            return Err(ChildResult::Failed(format!(
                "turn {turn}: the model's answer is {turn_bytes} bytes of text and tool \
                 arguments, over the limit of {MAX_TURN_BYTES} bytes per turn"
            )));
        }
        self.conversation_bytes += turn_bytes;
        // The turn's request and response are parsed and gone: the call
        // keeps its conversation's share only.
        self.held.shrink_to(self.conversation_bytes);
        if let Some(u) = reply.usage {
            let total = call.usage.add(u);
            call.progress.activity(Activity::Tokens { usage: total });
        }
        Ok(reply)
    }

    /// A reply without tool calls: the call's answer, or (a schema call's
    /// text that does not match) the corrective turn — `None` goes on.
    pub(super) fn on_answer(
        &mut self,
        messages: &mut Vec<Message>,
        schema: Option<&Value>,
        reply: Reply,
        tool_schema: bool,
    ) -> Option<ChildResult> {
        let Some(schema) = schema else {
            return Some(ChildResult::Text(reply.text));
        };
        // No StructuredOutput call: a model that answered with the
        // JSON as text is taken at its word when the JSON is valid.
        let problems = match text_answer(schema, &reply) {
            Ok(v) => return Some(ChildResult::Structured(v)),
            Err(p) => p,
        };
        if self.corrected {
            return Some(ChildResult::Failed(format!(
                "{problems}\n(after one corrective turn)"
            )));
        }
        self.corrected = true;
        messages.push(Message::Assistant {
            text: reply.text,
            tool_calls: Vec::new(),
        });
        messages.push(Message::User(correction(&problems.0, tool_schema)));
        self.correcting = Some(problems);
        None
    }

    /// A reply with tool calls: a `StructuredOutput` answer taken (or
    /// corrected once), the other tools run within `max_tool_calls`, their
    /// results added to the conversation — `None` goes on.
    pub(super) async fn on_tool_calls(
        &mut self,
        messages: &mut Vec<Message>,
        call: &Call<'_>,
        schema: Option<&Value>,
        reply: Reply,
    ) -> Option<ChildResult> {
        let calls = reply.tool_calls.clone();
        messages.push(Message::Assistant {
            text: reply.text,
            tool_calls: reply.tool_calls,
        });
        let mut results = Vec::with_capacity(calls.len());
        for c in calls {
            if c.name == STRUCTURED_OUTPUT
                && let Some(schema) = schema
            {
                match structured_answer(schema, &c.input) {
                    Ok(v) => return Some(ChildResult::Structured(v)),
                    Err(problems) if self.corrected => {
                        return Some(ChildResult::Failed(format!(
                            "{problems}\n(after one corrective turn)"
                        )));
                    }
                    Err(problems) => {
                        self.corrected = true;
                        results.push(ToolResult {
                            id: c.id,
                            content: correction(&problems.0, true),
                            is_error: true,
                        });
                        self.correcting = Some(problems);
                        continue;
                    }
                }
            }
            self.tool_calls += 1;
            if self.tool_calls > call.settings.max_tool_calls {
                return Some(ChildResult::Failed(format!(
                    "gave up: the model made more than {} tool calls without answering \
                     (max_tool_calls; raise it in the provider's table or the agent type)",
                    call.settings.max_tool_calls
                )));
            }
            let result = run_one(call, &c.name, &c.id, &c.input).await;
            self.conversation_bytes += result.content.len();
            results.push(result);
            if call.cancel.is_cancelled() {
                return Some(ChildResult::Cancelled);
            }
        }
        messages.push(Message::ToolResults(results));
        None
    }
}
