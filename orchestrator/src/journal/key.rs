//! The key of an agent call: a stable hash of what changes its answer.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::provider::AgentRequest;

/// Hex SHA-256 (first 128 bits) of the canonical JSON of the prompt and
/// the options that change the answer: `schema`, `model`, `effort`,
/// `agentType`, `provider`, `isolation`, the configured system prompt,
/// and (only when given, appended) `disallowedTools`. The label, phase and
/// `stallMs` do not change the answer, so changing them keeps a call's
/// journaled answer.
pub fn call_key(r: &AgentRequest) -> String {
    // Serialized straight into the hash, by reference: the same text as
    // the JSON array `["dsh-call-key/1", prompt, …]`, without copying a
    // prompt that can be megabytes.
    let schema = r.schema.as_ref().map(canonical_json);
    let parts = (
        "dsh-call-key/1",
        &r.prompt,
        &schema,
        &r.options.model,
        &r.options.effort,
        &r.options.agent_type,
        &r.options.provider,
        &r.options.isolation,
        &r.system_prompt,
    );
    let mut hasher = Hashing(Sha256::new());
    // Writing into a hasher cannot fail, and these types always serialize.
    // `disallowedTools` changes what the child can do, so it is keyed (as
    // Claude Code keys it) — appended only when given, so a call without
    // it keeps the key it always had. `stallMs` does not change the
    // answer and is not keyed.
    match r
        .options
        .disallowed_tools
        .as_ref()
        .filter(|t| !t.is_empty())
    {
        None => {
            let _ = serde_json::to_writer(&mut hasher, &parts);
        }
        Some(tools) => {
            let (a, b, c, d, e, f, g, h, i) = parts;
            let _ = serde_json::to_writer(&mut hasher, &(a, b, c, d, e, f, g, h, i, tools));
        }
    }
    let digest = hasher.0.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
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
