//! Qwen Code (`qwen -p`): its command line and its JSON lines.
//! (Being written: see docs/providers.md when done.)

use serde_json::Value;

use super::Invocation;
use super::stream::{Dialect, Observed};
use crate::provider::Progress;

/// The arguments after the program.
pub(super) fn args(_inv: &Invocation<'_>) -> Vec<String> {
    vec!["-p".into()]
}

/// Qwen Code's stream.
#[derive(Default)]
pub(super) struct Lines;

impl Dialect for Lines {
    fn line(&mut self, _v: &Value, _seen: &mut Observed, _progress: &Progress) {}
}
