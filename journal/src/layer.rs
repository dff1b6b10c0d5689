//! The journal as a [`Layer`]: [`JournalLayer`] puts a run's provider
//! behind its [`Journaling`] state, so the journal goes into the provider
//! stack like any other layer, in the one place that composes it (the
//! binary's `src/stack.rs`; an embedder's own `Stack`).
//!
//! [`crate::Durable::layer`] hands it out. [`crate::Durable::start`]
//! refuses a request whose provider was not composed with it: a run that
//! keeps a run directory but journals none of its calls would resume by
//! asking every call again, which nobody asked for.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_seam::{Layer, SubagentProvider};

use crate::{Journaling, JournalingProvider};

/// Journals and replays the calls of the provider behind it.
#[derive(Clone)]
pub struct JournalLayer {
    state: Arc<Journaling>,
}

impl JournalLayer {
    /// The layer of `state`.
    pub fn new(state: Arc<Journaling>) -> Self {
        JournalLayer { state }
    }

    /// The journal with nothing behind it: answered calls replay, the
    /// others are refused with `AGENT_START` (a resumed run that had no
    /// provider).
    pub fn alone(&self) -> Arc<dyn SubagentProvider> {
        self.state.layered.store(true, Ordering::Relaxed);
        Arc::new(JournalingProvider::new(None, self.state.clone()))
    }
}

impl Layer for JournalLayer {
    fn layer(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider> {
        self.state.layered.store(true, Ordering::Relaxed);
        Arc::new(JournalingProvider::new(Some(inner), self.state.clone()))
    }
}

impl std::fmt::Debug for JournalLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalLayer")
    }
}
