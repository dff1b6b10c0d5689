//! A call as the store keeps it (`dsh_calls.request`): every field of an
//! [`AgentRequest`] the provider reads, in JSON. The conversion names each
//! field of the request, so a field added to it does not compile until it
//! is carried here (or said not to be).

use std::time::Duration;

use dsh_protocol::AgentOptions;
use dsh_seam::{AgentRequest, AgentTypeOrigin, LoopLimits, Session};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// [`AgentRequest`] in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CallRequest {
    seq: u64,
    prompt: String,
    label: String,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    workflow: Option<String>,
    #[serde(default)]
    schema: Option<Value>,
    #[serde(default)]
    options: AgentOptions,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    disallowed_tools: Vec<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    network: Option<bool>,
    #[serde(default)]
    bash_timeout_ms: Option<u64>,
    #[serde(default)]
    agent_type_origin: Option<Origin>,
    /// The session an earlier attempt of the call left (its provider's,
    /// its id); continued only by a provider of the same name.
    #[serde(default)]
    resume: Option<(String, String)>,
    #[serde(default)]
    cost_cap_usd: Option<f64>,
    #[serde(default)]
    trace_parent: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Origin {
    BuiltIn,
    Defined,
}

impl From<&AgentRequest> for CallRequest {
    fn from(r: &AgentRequest) -> Self {
        let AgentRequest {
            seq,
            prompt,
            label,
            phase,
            workflow,
            schema,
            options,
            system_prompt,
            tools,
            disallowed_tools,
            loop_limits,
            agent_type_origin,
            resume,
            cost_cap_usd,
            // The row's own key: (run, key, n).
            slot: _,
            trace_parent,
        } = r;
        CallRequest {
            seq: *seq,
            prompt: prompt.clone(),
            label: label.clone(),
            phase: phase.clone(),
            workflow: workflow.clone(),
            schema: schema.clone(),
            options: options.clone(),
            system_prompt: system_prompt.clone(),
            tools: tools.clone(),
            disallowed_tools: disallowed_tools.clone(),
            max_turns: loop_limits.max_turns,
            network: loop_limits.network,
            bash_timeout_ms: loop_limits
                .bash_timeout
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            agent_type_origin: agent_type_origin.map(|o| match o {
                AgentTypeOrigin::BuiltIn => Origin::BuiltIn,
                AgentTypeOrigin::Defined => Origin::Defined,
            }),
            resume: resume.as_ref().map(|s| (s.provider.clone(), s.id.clone())),
            cost_cap_usd: *cost_cap_usd,
            trace_parent: trace_parent.clone(),
        }
    }
}

impl CallRequest {
    /// The request for provider `pool`: a session is continued only when
    /// that provider started it.
    pub(crate) fn into_request(self, pool: &str) -> AgentRequest {
        let mut r = AgentRequest::new(self.seq, self.prompt, self.label);
        r.phase = self.phase;
        r.workflow = self.workflow;
        r.schema = self.schema;
        r.options = self.options;
        r.system_prompt = self.system_prompt;
        r.tools = self.tools;
        r.disallowed_tools = self.disallowed_tools;
        r.loop_limits = LoopLimits {
            max_turns: self.max_turns,
            network: self.network,
            bash_timeout: self.bash_timeout_ms.map(Duration::from_millis),
        };
        r.agent_type_origin = self.agent_type_origin.map(|o| match o {
            Origin::BuiltIn => AgentTypeOrigin::BuiltIn,
            Origin::Defined => AgentTypeOrigin::Defined,
        });
        r.resume = self
            .resume
            .filter(|(provider, _)| provider == pool)
            .map(|(provider, id)| Session { provider, id });
        r.cost_cap_usd = self.cost_cap_usd;
        r.trace_parent = self.trace_parent;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_comes_back_as_it_went() {
        let mut r = AgentRequest::new(7, "review src/", "review");
        r.phase = Some("Review".into());
        r.schema = Some(serde_json::json!({"type": "object"}));
        r.options.model = Some("m".into());
        r.options.stall_ms = Some(5000);
        r.system_prompt = Some("be brief".into());
        r.tools = Some(vec!["Read".into()]);
        r.disallowed_tools = vec!["Bash".into()];
        r.loop_limits = LoopLimits {
            max_turns: Some(3),
            network: Some(false),
            bash_timeout: Some(Duration::from_secs(9)),
        };
        r.agent_type_origin = Some(AgentTypeOrigin::Defined);
        r.resume = Some(Session {
            provider: "claude".into(),
            id: "s1".into(),
        });
        r.cost_cap_usd = Some(0.5);
        let text = serde_json::to_string(&CallRequest::from(&r)).unwrap();
        let back: CallRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back.clone().into_request("claude"), r);
        // Another pool's provider does not continue claude's session.
        assert_eq!(back.into_request("codex").resume, None);
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let e = serde_json::from_str::<CallRequest>(
            r#"{"seq":1,"prompt":"p","label":"l","command":"rm -rf /"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `command`"), "{e}");
    }
}
