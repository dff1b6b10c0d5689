//! The kinds this crate has built in, listed once: the one file that
//! names every provider, so that the registry itself names none (each
//! kind's file imports the registry, never the other way round).

use std::sync::Arc;

use crate::cli::config::CliKind;
use crate::registry::{ProviderKind, Registry};

impl Registry {
    /// The built-in kinds: `openai` and `anthropic` (with the `http`
    /// feature), `claude-code`, `codex`, `qwen`, `command`, `fixture`.
    pub fn builtin() -> Registry {
        let mut kinds: Vec<Arc<dyn ProviderKind>> = Vec::new();
        #[cfg(feature = "http")]
        {
            kinds.push(Arc::new(crate::openai::OpenAiKind));
            kinds.push(Arc::new(crate::anthropic::AnthropicKind));
        }
        for kind in CliKind::ALL {
            kinds.push(Arc::new(crate::cli::CliProviderKind(kind)));
        }
        kinds.push(Arc::new(crate::command::CommandKind));
        kinds.push(Arc::new(crate::scripted::FixtureKind));
        Registry { kinds }
    }
}
