//! Wrappers in front of a provider, composed in one expression — tower's
//! `Layer` and `ServiceBuilder` for the subagent seam.
//!
//! A [`Layer`] takes the provider behind it and returns one that does
//! something more (keeps a budget, refuses unknown agent types, journals
//! every call). A [`Stack`] lists layers outermost first and puts them in
//! front of the provider that answers:
//!
//! ```
//! # use std::sync::Arc;
//! # use dsh_seam::{Layer, Stack, SubagentProvider};
//! # fn demo(answering: Arc<dyn SubagentProvider>, budget: impl Layer + 'static) {
//! let provider = Stack::new().layer(budget).provider(answering);
//! # let _ = provider; }
//! ```
//!
//! What a wrapper must pass on is in [`SubagentProvider`]'s provided
//! methods (`prepare`, `call_limits`) and [`Subagent`]'s
//! (`abandon`, `progress`, `settled`, …): a wrapper that changes only a
//! child's result wraps it in [`HookedChild`] and writes that one hook.

use std::sync::Arc;

use async_trait::async_trait;

use crate::outcome::CallOutcome;
use crate::provider::{
    ChildOrigin, ChildOutcome, KeptWorktree, Progress, ResultFault, Subagent, SubagentProvider,
};

/// Something that goes in front of a provider.
pub trait Layer: Send + Sync {
    /// `inner` with this layer in front of it.
    fn layer(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider>;
}

/// Layers, outermost first, to put in front of a provider.
#[derive(Default)]
pub struct Stack {
    layers: Vec<Box<dyn Layer>>,
}

impl Stack {
    /// No layer: [`Stack::provider`] returns the provider as it is.
    pub fn new() -> Self {
        Stack::default()
    }

    /// `layer` inside the layers added before it.
    pub fn layer(mut self, layer: impl Layer + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// [`Stack::layer`] when `layer` is `Some`.
    pub fn option_layer(self, layer: Option<impl Layer + 'static>) -> Self {
        match layer {
            Some(l) => self.layer(l),
            None => self,
        }
    }

    /// `inner` behind every layer: the first one added is the outermost,
    /// the one the engine calls.
    pub fn provider(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider> {
        self.layers.iter().rev().fold(inner, |p, l| l.layer(p))
    }
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("layers", &self.layers.len())
            .finish()
    }
}

/// What a wrapper changes about a child: its result. Everything else
/// [`HookedChild`] passes on to the wrapped child unchanged.
#[async_trait]
pub trait ChildHook: Send + Sync + 'static {
    /// Sees (and may change) the child's result on its way to the host.
    async fn result(
        &self,
        result: Result<ChildOutcome, ResultFault>,
    ) -> Result<ChildOutcome, ResultFault>;
}

/// A child wrapped by a layer that changes only its result (see
/// [`ChildHook`]); every other method is the wrapped child's.
pub struct HookedChild<H> {
    inner: Arc<dyn Subagent>,
    hook: H,
}

impl<H: ChildHook> HookedChild<H> {
    /// `inner`, its result passed through `hook`.
    pub fn new(inner: Arc<dyn Subagent>, hook: H) -> Self {
        HookedChild { inner, hook }
    }
}

#[async_trait]
impl<H: ChildHook> Subagent for HookedChild<H> {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn result(&self) -> Result<ChildOutcome, ResultFault> {
        let r = self.inner.result().await;
        self.hook.result(r).await
    }

    fn cancel(&self) {
        self.inner.cancel();
    }

    fn abandon(&self, reason: &str) {
        self.inner.abandon(reason);
    }

    fn progress(&self) -> Option<Progress> {
        self.inner.progress()
    }

    async fn dispose(&self) {
        self.inner.dispose().await;
    }

    fn origin(&self) -> ChildOrigin {
        self.inner.origin()
    }

    fn kept_worktree(&self) -> Option<KeptWorktree> {
        self.inner.kept_worktree()
    }

    async fn settled(&self, outcome: &CallOutcome) {
        self.inner.settled(outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AnsweredChild;
    use crate::provider::{AgentRequest, ChildResult, StartRefused};
    use std::sync::Mutex;
    use tokio_util::sync::CancellationToken;

    fn text(id: &str, text: String) -> AnsweredChild {
        let outcome = ChildOutcome {
            result: ChildResult::Text(text),
            usage: None,
        };
        AnsweredChild::new(id, ChildOrigin::Live, Ok(outcome))
    }

    /// Answers every call with the prompt it got.
    struct Echo;

    #[async_trait]
    impl SubagentProvider for Echo {
        async fn start(
            &self,
            request: AgentRequest,
            _cancel: CancellationToken,
        ) -> Result<Arc<dyn Subagent>, StartRefused> {
            Ok(Arc::new(text("echo", request.prompt)))
        }
    }

    /// Appends its name to every prompt, so the order of layers shows.
    struct Tag(&'static str, Arc<Mutex<Vec<&'static str>>>);

    struct Tagged(
        &'static str,
        Arc<dyn SubagentProvider>,
        Arc<Mutex<Vec<&'static str>>>,
    );

    impl Layer for Tag {
        fn layer(&self, inner: Arc<dyn SubagentProvider>) -> Arc<dyn SubagentProvider> {
            Arc::new(Tagged(self.0, inner, self.1.clone()))
        }
    }

    #[async_trait]
    impl SubagentProvider for Tagged {
        async fn start(
            &self,
            mut request: AgentRequest,
            cancel: CancellationToken,
        ) -> Result<Arc<dyn Subagent>, StartRefused> {
            self.2.lock().unwrap().push(self.0);
            request.prompt.push_str(self.0);
            self.1.start(request, cancel).await
        }
    }

    #[tokio::test]
    async fn the_first_layer_added_is_the_outermost() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let p = Stack::new()
            .layer(Tag("a", seen.clone()))
            .option_layer(None::<Tag>)
            .layer(Tag("b", seen.clone()))
            .provider(Arc::new(Echo));
        let child = p
            .start(AgentRequest::new(1, "x", "l"), CancellationToken::new())
            .await
            .unwrap();
        let out = child.result().await.unwrap();
        assert_eq!(out.result, ChildResult::Text("xab".into()));
        assert_eq!(*seen.lock().unwrap(), vec!["a", "b"]);
    }

    struct Upper;

    #[async_trait]
    impl ChildHook for Upper {
        async fn result(
            &self,
            result: Result<ChildOutcome, ResultFault>,
        ) -> Result<ChildOutcome, ResultFault> {
            result.map(|mut o| {
                if let ChildResult::Text(t) = &mut o.result {
                    *t = t.to_uppercase();
                }
                o
            })
        }
    }

    #[tokio::test]
    async fn a_hooked_child_changes_its_result_and_passes_the_rest_on() {
        let inner: Arc<dyn Subagent> = Arc::new(text("c-1", "hi".into()));
        let child = HookedChild::new(inner, Upper);
        assert_eq!(child.id(), "c-1");
        assert_eq!(child.origin(), ChildOrigin::Live);
        let out = child.result().await.unwrap();
        assert_eq!(out.result, ChildResult::Text("HI".into()));
        child.dispose().await;
    }
}
