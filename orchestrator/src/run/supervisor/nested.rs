//! Nested workflows, the host's side of `workflow()`: finding and
//! preparing the child file (off the supervisor task: it reads and parses
//! files), answering the worker, and keeping each child's source mapping
//! so an error that escapes the run names original positions in the
//! child's file too.

use std::sync::Arc;

use dsh_protocol::{CallId, ErrorCode, HostMsg, WorkflowTarget};
use tokio::sync::mpsc;

use super::Supervisor;
use super::ledger::Internal;
use crate::catalog::{Loaded, LoadError};
use crate::script::PreparedScript;

/// `workflow()` loads a run may ask for; later ones are refused, so a
/// script looping over `workflow()` cannot keep the host parsing files.
pub(super) const MAX_WORKFLOW_LOADS: u64 = 10_000;
/// Distinct child files whose source mapping is kept.
const MAX_KEPT_CHILDREN: usize = 256;

/// What the supervisor keeps of the run's nested workflows.
#[derive(Default)]
pub(super) struct Nested {
    loads: u64,
    /// The run's loader: one task that loads in request order, so children
    /// started together begin in the order the script started them.
    loader: Option<mpsc::UnboundedSender<(CallId, WorkflowTarget)>>,
    /// The prepared children, one per file (the latest load wins).
    children: Vec<Arc<PreparedScript>>,
}

impl Supervisor {
    pub(super) fn on_workflow_load(&mut self, call_id: CallId, target: WorkflowTarget) {
        self.nested.loads += 1;
        let refuse = |code, message: String| HostMsg::WorkflowLoadError {
            call_id,
            code,
            message,
        };
        if self.phase.is_cancelling() {
            self.send(&refuse(ErrorCode::Cancelled, "the run was cancelled".into()));
            return;
        }
        if self.nested.loads > MAX_WORKFLOW_LOADS {
            self.send(&refuse(
                ErrorCode::InvalidArgument,
                format!(
                    "workflow(): a run may start at most {MAX_WORKFLOW_LOADS} nested workflows; \
                     this was the {}th",
                    self.nested.loads
                ),
            ));
            return;
        }
        let Some(catalog) = self.catalog.clone() else {
            self.send(&refuse(
                ErrorCode::InvalidArgument,
                "workflow(): this run has no workflow catalog, so it cannot start nested \
                 workflows (an embedding application enables them with \
                 StartRequest::with_catalog)"
                    .into(),
            ));
            return;
        };
        let loader = match &self.nested.loader {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                self.tasks.spawn(load_in_order(catalog, rx, self.internal_tx.clone()));
                self.nested.loader = Some(tx.clone());
                tx
            }
        };
        // The loader lives as long as the run's tasks; if it is gone, so
        // is the run.
        let _ = loader.send((call_id, target));
    }

    pub(super) fn on_workflow_loaded(&mut self, call_id: CallId, res: Result<Loaded, LoadError>) {
        if self.phase.is_cancelling() {
            self.send(&HostMsg::WorkflowLoadError {
                call_id,
                code: ErrorCode::Cancelled,
                message: "the run was cancelled".into(),
            });
            return;
        }
        match res {
            Ok(Loaded { wire, prepared }) => {
                let kept = &mut self.nested.children;
                kept.retain(|p| p.display_name != prepared.display_name);
                if kept.len() < MAX_KEPT_CHILDREN {
                    kept.push(Arc::new(prepared));
                }
                self.send(&HostMsg::WorkflowLoaded {
                    call_id,
                    workflow: wire,
                });
            }
            Err(e) => self.send(&HostMsg::WorkflowLoadError {
                call_id,
                code: e.code,
                message: e.message,
            }),
        }
    }

    /// `text` with every position of the run's script and of its nested
    /// workflows mapped back to the original files.
    pub(super) fn map_positions(&self, text: &str) -> String {
        let mut out = self.prepared.map_positions(text);
        for child in &self.nested.children {
            out = child.map_positions(&out);
        }
        out
    }
}

/// Loads each requested child in turn, off the async threads (it reads
/// and parses files), and hands the results to the supervisor.
async fn load_in_order(
    catalog: Arc<crate::catalog::Catalog>,
    mut requests: mpsc::UnboundedReceiver<(CallId, WorkflowTarget)>,
    results: mpsc::UnboundedSender<Internal>,
) {
    while let Some((call_id, target)) = requests.recv().await {
        let catalog = catalog.clone();
        let res = tokio::task::spawn_blocking(move || catalog.load(&target))
            .await
            .unwrap_or_else(|e| {
                Err(LoadError {
                    code: ErrorCode::InvalidArgument,
                    message: format!("workflow(): the child could not be loaded: {e}"),
                })
            });
        if results.send(Internal::WorkflowLoaded { call_id, res }).is_err() {
            return;
        }
    }
}
