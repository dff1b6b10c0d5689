//! [`AnsweredChild`]: a child whose answer is known when it starts — a
//! fixture's answer, a dry run's placeholder, an answer from the journal.
//! One type for all of them, so their cancel and dispose behave alike.

use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::provider::{ChildOrigin, ChildOutcome, ChildResult, ResultFault, Subagent};

/// What the child will say.
#[derive(Debug, Clone)]
enum Answer {
    /// This, once the delay is over.
    Given(Result<ChildOutcome, ResultFault>),
    /// Nothing, until it is cancelled (a fixture's `hang`).
    Never,
}

/// Whether a cancel changes the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnCancel {
    /// A cancel before the answer is handed over makes it `Cancelled`.
    Cancels,
    /// The answer stands (it was given in an earlier attempt).
    Stands,
}

/// A child whose answer is known when it starts (see the module docs).
#[derive(Debug)]
pub struct AnsweredChild {
    id: String,
    origin: ChildOrigin,
    answer: Answer,
    delay: Duration,
    on_cancel: OnCancel,
    cancel: CancellationToken,
}

impl AnsweredChild {
    /// A child that answers `answer` at once; a cancel before the host
    /// asks makes it `Cancelled`.
    pub fn new(
        id: impl Into<String>,
        origin: ChildOrigin,
        answer: Result<ChildOutcome, ResultFault>,
    ) -> Self {
        AnsweredChild {
            id: id.into(),
            origin,
            answer: Answer::Given(answer),
            delay: Duration::ZERO,
            on_cancel: OnCancel::Cancels,
            cancel: CancellationToken::new(),
        }
    }

    /// A child that never answers; only a cancel ends it (`Cancelled`).
    pub fn hanging(id: impl Into<String>, origin: ChildOrigin) -> Self {
        AnsweredChild {
            answer: Answer::Never,
            ..AnsweredChild::new(id, origin, Err(ResultFault(String::new())))
        }
    }

    /// Answers only after `delay` (a cancel meanwhile ends it at once).
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// A cancel does not change the answer (a replayed one: it was
    /// already given, and the script must see it again).
    pub fn answer_stands(mut self) -> Self {
        self.on_cancel = OnCancel::Stands;
        self
    }

    fn cancelled() -> Result<ChildOutcome, ResultFault> {
        Ok(ChildOutcome {
            result: ChildResult::Cancelled,
            usage: None,
        })
    }
}

#[async_trait]
impl Subagent for AnsweredChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let cancels = self.on_cancel == OnCancel::Cancels;
        if !self.delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(self.delay) => {}
                _ = self.cancel.cancelled(), if cancels => return Self::cancelled(),
            }
        }
        if cancels && self.cancel.is_cancelled() {
            return Self::cancelled();
        }
        match &self.answer {
            Answer::Given(answer) => answer.clone(),
            Answer::Never => {
                self.cancel.cancelled().await;
                Self::cancelled()
            }
        }
    }

    fn cancel(&self) {
        self.cancel.cancel();
    }

    async fn dispose(&self) {
        self.cancel.cancel();
    }

    fn origin(&self) -> ChildOrigin {
        self.origin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Result<ChildOutcome, ResultFault> {
        Ok(ChildOutcome {
            result: ChildResult::Text(t.into()),
            usage: None,
        })
    }

    #[tokio::test]
    async fn an_answer_is_given_unless_cancelled_first() {
        let c = AnsweredChild::new("a", ChildOrigin::Live, text("hi"));
        assert_eq!(c.result().await, text("hi"));
        let c = AnsweredChild::new("b", ChildOrigin::DryRun, text("hi"));
        c.cancel();
        assert_eq!(c.result().await, AnsweredChild::cancelled());
        assert_eq!(c.origin(), ChildOrigin::DryRun);
    }

    #[tokio::test]
    async fn a_replayed_answer_stands_after_a_cancel() {
        let c = AnsweredChild::new("r", ChildOrigin::Replayed, text("old")).answer_stands();
        c.cancel();
        assert_eq!(c.result().await, text("old"));
    }

    #[tokio::test]
    async fn a_hanging_or_delayed_child_ends_with_its_cancel() {
        let c = std::sync::Arc::new(AnsweredChild::hanging("h", ChildOrigin::Live));
        let waiting = tokio::spawn({
            let c = c.clone();
            async move { c.result().await }
        });
        c.cancel();
        assert_eq!(waiting.await.expect("join"), AnsweredChild::cancelled());

        let c = std::sync::Arc::new(
            AnsweredChild::new("d", ChildOrigin::Live, text("late"))
                .after(Duration::from_secs(600)),
        );
        let waiting = tokio::spawn({
            let c = c.clone();
            async move { c.result().await }
        });
        c.dispose().await;
        assert_eq!(waiting.await.expect("join"), AnsweredChild::cancelled());
    }
}
