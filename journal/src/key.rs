//! The key of an agent call: a stable hash of what changes its answer.

use serde_json::Value;
use sha2::{Digest, Sha256};

use dsh_seam::AgentRequest;

/// Hex SHA-256 (first 128 bits) of the canonical JSON of the prompt and
/// the options that change the answer: `schema`, `model`, `effort`,
/// `agentType`, `provider`, `isolation`, the configured system prompt, and
/// — only when the request has one — the tool set (`tools`,
/// `disallowedTools`: the request's and its options') as an 11th element
/// `{"tools": …, "disallowedTools": […]}`, so a call without tools keeps
/// the key journals made before tool sets existed. The label, phase and
/// `stallMs` only name or bound the call, so changing them keeps its
/// journaled answer.
pub fn call_key(r: &AgentRequest) -> String {
    // Serialized straight into the hash, by reference: the same text as
    // the JSON array `["dsh-call-key/1", prompt, …]`, without copying a
    // prompt that can be megabytes.
    let schema = r.schema.as_ref().map(canonical_json);
    let mut hasher = Hashing(Sha256::new());
    // Writing into a hasher cannot fail, and these types always serialize.
    // The call's own `disallowedTools` and its agent type's, once each.
    let mut disallowed = r.disallowed_tools.clone();
    for t in r.options.disallowed_tools.iter().flatten() {
        if !disallowed.contains(t) {
            disallowed.push(t.clone());
        }
    }
    let tools = (r.tools.is_some() || !disallowed.is_empty()).then_some(ToolSet {
        tools: &r.tools,
        disallowed_tools: &disallowed,
    });
    let parts = KeyParts {
        r,
        schema: &schema,
        tools,
    };
    let _ = serde_json::to_writer(&mut hasher, &parts);
    let digest = hasher.0.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// What a key hashes, as the JSON array `["dsh-call-key/1", prompt,
/// schema, model, effort, agentType, provider, isolation, systemPrompt]`
/// with the tool set appended only when there is one.
struct KeyParts<'a> {
    r: &'a AgentRequest,
    schema: &'a Option<Value>,
    tools: Option<ToolSet<'a>>,
}

impl serde::Serialize for KeyParts<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let o = &self.r.options;
        let mut seq = s.serialize_seq(None)?;
        seq.serialize_element("dsh-call-key/1")?;
        seq.serialize_element(&self.r.prompt)?;
        seq.serialize_element(self.schema)?;
        seq.serialize_element(&o.model)?;
        seq.serialize_element(&o.effort)?;
        seq.serialize_element(&o.agent_type)?;
        seq.serialize_element(&o.provider)?;
        seq.serialize_element(&o.isolation)?;
        seq.serialize_element(&self.r.system_prompt)?;
        if let Some(t) = &self.tools {
            seq.serialize_element(t)?;
        }
        seq.end()
    }
}

/// The tool set part of a key.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSet<'a> {
    tools: &'a Option<Vec<String>>,
    disallowed_tools: &'a Vec<String>,
}

/// A SHA-256 as an `io::Write`.
struct Hashing(Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// JSON with object keys sorted at every level, so two schemas that differ
/// only in key order have one key.
fn canonical_json(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), canonical_json(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical_json).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_key_is_the_hash_of_the_documented_array_so_old_journals_still_match() {
        let mut r = req("a \"quoted\" prompt\n");
        r.schema = Some(json!({"type": "object", "required": ["b", "a"]}));
        r.options.model = Some("m".into());
        let text = json!([
            "dsh-call-key/1",
            r.prompt,
            r.schema.as_ref().map(canonical_json),
            r.options.model,
            r.options.effort,
            r.options.agent_type,
            r.options.provider,
            r.options.isolation,
            r.system_prompt,
        ])
        .to_string();
        let digest = Sha256::digest(text.as_bytes());
        let want: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(call_key(&r), want);
    }

    /// A key made before tool sets existed, by this very code: it must
    /// never change, or resumes of old runs stop replaying.
    #[test]
    fn a_call_without_tools_keeps_its_old_key() {
        let mut r = req("Review src/lib.rs");
        r.options.model = Some("m1".into());
        r.system_prompt = Some("Be careful.".into());
        assert_eq!(call_key(&r), "e910154e3efcbb85319871506f2e6c51");
    }

    #[test]
    fn tools_change_the_key_when_present() {
        let base = call_key(&req("p"));
        let mut t = req("p");
        t.tools = Some(vec!["Read".into()]);
        let with_tools = call_key(&t);
        assert_ne!(base, with_tools);
        let mut none = req("p");
        none.tools = Some(Vec::new());
        assert_ne!(base, call_key(&none), "no tools differs from all tools");
        let mut d = req("p");
        d.disallowed_tools = vec!["Write".into()];
        assert_ne!(base, call_key(&d));
        assert_ne!(with_tools, call_key(&d));
        let text = json!([
            "dsh-call-key/1", "p", null, null, null, null, null, null, null,
            {"tools": ["Read"], "disallowedTools": []}
        ])
        .to_string();
        let digest = Sha256::digest(text.as_bytes());
        let want: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(with_tools, want);
    }

    fn req(prompt: &str) -> AgentRequest {
        AgentRequest::new(1, prompt, "l")
    }

    #[test]
    fn label_seq_and_phase_do_not_change_the_key() {
        let a = req("p");
        let mut b = req("p");
        b.label = "other".into();
        b.seq = 9;
        b.phase = Some("x".into());
        assert_eq!(call_key(&a), call_key(&b));
        assert_eq!(call_key(&a).len(), 32);
    }

    #[test]
    fn prompt_and_options_change_the_key() {
        let base = call_key(&req("p"));
        assert_ne!(base, call_key(&req("q")));
        let mut m = req("p");
        m.options.model = Some("m".into());
        assert_ne!(base, call_key(&m));
        let mut s = req("p");
        s.schema = Some(json!({"type": "object"}));
        assert_ne!(base, call_key(&s));
    }

    #[test]
    fn stall_ms_is_not_keyed_and_disallowed_tools_only_when_given() {
        let base = call_key(&req("p"));
        // The pinned key of a plain call: journals written before stallMs
        // and disallowedTools existed still match.
        let text = json!([
            "dsh-call-key/1",
            "p",
            null,
            null,
            null,
            null,
            null,
            null,
            null
        ])
        .to_string();
        let digest = Sha256::digest(text.as_bytes());
        let want: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(base, want);
        let mut s = req("p");
        s.options.stall_ms = Some(300);
        assert_eq!(call_key(&s), base);
        let mut empty = req("p");
        empty.options.disallowed_tools = Some(vec![]);
        assert_eq!(call_key(&empty), base);
        let mut t = req("p");
        t.options.disallowed_tools = Some(vec!["Bash".into()]);
        assert_ne!(call_key(&t), base);
    }

    #[test]
    fn schema_key_order_does_not_matter() {
        let mut a = req("p");
        a.schema = Some(json!({"type": "object", "required": ["x"]}));
        let mut b = req("p");
        b.schema = Some(json!({"required": ["x"], "type": "object"}));
        assert_eq!(call_key(&a), call_key(&b));
    }
}
