//! The run's cost budget (`--budget-usd`, `Limits::budget_usd`): a
//! wrapper in front of the run's provider that adds up what its children
//! report they cost (agent CLIs report it: see [`dsh_seam::Usage`])
//! and
//! - gives each call what is left as its cap
//!   ([`AgentRequest::cost_cap_usd`]), which a CLI that can cap its own
//!   spend enforces (Claude Code's `--max-budget-usd`);
//! - refuses further calls with `BUDGET` once the budget is spent, which
//!   stops the run as the token budget does.
//!
//! Calls running at once each get what was left when they started, so
//! together they can pass the budget by what they spend; the next call is
//! refused. Children that report no cost count as free.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_protocol::ErrorCode;
use tokio_util::sync::CancellationToken;

use dsh_seam::{
    AgentRequest, CallLimits, ChildHook, ChildOutcome, HookedChild, Layer, ResultFault,
    StartRefused, Subagent, SubagentProvider,
};

/// The [`Layer`] that keeps a run within a budget of so many US dollars.
#[derive(Debug, Clone, Copy)]
pub struct CostLayer {
    budget_usd: f64,
}

impl CostLayer {
    /// A budget of `budget_usd` US dollars; it must be positive
    /// (`Limits::validate`).
    pub fn new(budget_usd: f64) -> Self {
        CostLayer { budget_usd }
    }
}

impl Layer for CostLayer {
    fn layer(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider> {
        Arc::new(CostBudget::new(inner, self.budget_usd))
    }
}

/// `inner` within a budget of `budget_usd` US dollars.
pub struct CostBudget {
    inner: Arc<dyn SubagentProvider>,
    budget_usd: f64,
    spent: Arc<Mutex<f64>>,
}

impl CostBudget {
    /// Wraps `inner`; `budget_usd` must be positive.
    pub fn new(inner: Arc<dyn SubagentProvider>, budget_usd: f64) -> Self {
        CostBudget {
            inner,
            budget_usd,
            spent: Arc::new(Mutex::new(0.0)),
        }
    }

    /// What the children that settled so far cost.
    pub fn spent(&self) -> f64 {
        *self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl SubagentProvider for CostBudget {
    fn call_limits(&self, request: &AgentRequest) -> CallLimits {
        self.inner.call_limits(request)
    }

    fn prepare(&self, request: &mut AgentRequest) {
        self.inner.prepare(request);
    }

    async fn start(
        &self,
        mut request: AgentRequest,
        cancel: CancellationToken,
    ) -> Result<Arc<dyn Subagent>, StartRefused> {
        let spent = self.spent();
        let left = self.budget_usd - spent;
        if left <= 0.0 {
            return Err(StartRefused {
                code: ErrorCode::Budget,
                message: format!(
                    "agent(): the run's cost budget of ${:.4} is spent (${spent:.4} so far); \
                     raise --budget-usd",
                    self.budget_usd
                ),
            });
        }
        request.cost_cap_usd = Some(request.cost_cap_usd.map_or(left, |c| c.min(left)));
        let child = self.inner.start(request, cancel).await?;
        Ok(Arc::new(HookedChild::new(child, Spend(self.spent.clone()))))
    }
}

/// Adds a child's reported cost to the run's.
struct Spend(Arc<Mutex<f64>>);

#[async_trait]
impl ChildHook for Spend {
    async fn result(
        &self,
        result: Result<ChildOutcome, ResultFault>,
    ) -> Result<ChildOutcome, ResultFault> {
        if let Ok(o) = &result
            && let Some(c) = o.usage.and_then(|u| u.cost_usd)
        {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) += c;
        }
        result
    }
}
