//! Embedding dsh workflow with your own subagent provider.
//!
//! Build the worker first, then run the example:
//!
//! ```sh
//! cargo build --workspace && cargo run -p dsh-orchestrator --example custom_provider
//! ```
//!
//! The provider here "answers" every agent() call by upper-casing the prompt
//! after a short delay; a real one would call a model or an agent CLI. It
//! honours cancellation and reports token usage, which feeds `budget`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_orchestrator::{
    AgentRequest, ChildOutcome, ChildResult, ResultFault, StartRefused, StartRequest, Subagent,
    SubagentProvider, Usage, start,
};
use tokio_util::sync::CancellationToken;

struct Shout;

#[async_trait]
impl SubagentProvider for Shout {
    async fn start(
        &self,
        request: AgentRequest,
        _cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        if request.options.isolation.is_some() {
            return Err(StartRefused {
                code: dsh_orchestrator::ErrorCode::UnsupportedOption,
                message: "this provider cannot run children in a worktree".into(),
            });
        }
        Ok(Arc::new(ShoutChild {
            id: format!("shout-{}", request.seq),
            answer: request.prompt.to_uppercase(),
            cancel: CancellationToken::new(),
        }))
    }
}

struct ShoutChild {
    id: String,
    answer: String,
    cancel: CancellationToken,
}

#[async_trait]
impl Subagent for ShoutChild {
    fn id(&self) -> &str {
        &self.id
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => Ok(ChildOutcome {
                result: ChildResult::Text(self.answer.clone()),
                usage: Some(Usage::new(10, self.answer.len() as u64)),
            }),
            _ = self.cancel.cancelled() => Ok(ChildOutcome { result: ChildResult::Cancelled, usage: None }),
        }
    }

    fn cancel(&self) {
        self.cancel.cancel();
    }

    async fn dispose(&self) {
        self.cancel.cancel();
    }
}

const SCRIPT: &str = r#"
export const meta = { name: "shout", description: "ask twice, in parallel" };
const answers = await parallel(["hello", "world"].map((w) => () => agent(`say ${w}`)));
log(`spent ${budget.spent()} output tokens`);
return answers;
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = start(StartRequest::new("shout.ts", SCRIPT).with_provider(Arc::new(Shout)))?;
    let mut events = run.subscribe();
    while let Some(event) = events.next().await {
        println!("event  {}", event.to_json());
    }
    let result = run.dispose().await;
    println!("result {}", result.to_json());
    Ok(())
}
