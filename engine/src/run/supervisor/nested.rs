//! Nested workflows, the host's side of `workflow()`: finding and
//! preparing the child file, answering the worker, and keeping each
//! child's source mapping so an error that escapes the run names original
//! positions in the child's file too.
//!
//! A load runs inline, on the supervisor's task: it reads and parses a few
//! files, each at most `max_script_bytes` (1 MiB by default), a directory
//! at most [`crate::catalog::MAX_FILES_PER_DIR`] of them. Inline keeps the
//! order deterministic: the worker learns of a child before any answer
//! the host gets later, so children started together begin in the order
//! the script started them and before the agents of one another answer —
//! as in Claude Code, where loading is fast next to any model's answer.

use std::sync::Arc;

use dsh_protocol::{CallId, ErrorCode, HostMsg, WorkflowTarget};

use super::Supervisor;
use crate::catalog::{LoadError, Loaded};
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
            self.send(&refuse(
                ErrorCode::Cancelled,
                "the run was cancelled".into(),
            ));
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
        let res = catalog.load(&target);
        self.on_workflow_loaded(call_id, res);
    }

    fn on_workflow_loaded(&mut self, call_id: CallId, res: Result<Loaded, LoadError>) {
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
