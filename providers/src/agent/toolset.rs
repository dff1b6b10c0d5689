//! The tools a model may call: their names, what they are for and the
//! shape of their input (sent to the API), and which of them one call
//! gets.
//!
//! Which tools a call gets: the agent type's `tools` when it names some
//! (`[agent_types.NAME] tools`, a `.claude/agents/*.md` front matter's
//! `tools`), else the provider's `tools` (default [`READ_ONLY`]); minus the
//! call's and the agent type's `disallowedTools`; and never a writing tool
//! ([`WRITING`]) for `Explore` and `Plan`, whatever their definition says.
//! A schema call also gets [`STRUCTURED_OUTPUT`], which ends it.

use serde_json::{Value, json};

use dsh_seam::AgentRequest;

/// The reading tools: what a provider gives when its `tools` is not set.
pub const READ_ONLY: [&str; 4] = ["Read", "Glob", "Grep", "LS"];

/// The tools that change the workspace or run programs.
pub const WRITING: [&str; 3] = ["Edit", "Write", "Bash"];

/// Every tool dsh runs.
pub const ALL: [&str; 7] = ["Read", "Glob", "Grep", "LS", "Edit", "Write", "Bash"];

/// The tool a schema call answers with; its input schema is the call's.
pub const STRUCTURED_OUTPUT: &str = "StructuredOutput";

/// Agent types that never get a writing tool.
const READ_ONLY_TYPES: [&str; 2] = ["Explore", "Plan"];

/// One tool as the API is told about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
}

/// Names in `list` that are not tools dsh runs (for configuration checks).
pub fn unknown(list: &[String]) -> Vec<String> {
    list.iter()
        .filter(|t| !ALL.contains(&t.as_str()))
        .cloned()
        .collect()
}

/// The tools `request` may use, given the provider's own list (`None`:
/// [`READ_ONLY`]). Names dsh does not run (an agent file written for
/// Claude Code may list `WebFetch`, `Task`, …) are left out.
pub fn selected(request: &AgentRequest, provider_tools: Option<&[String]>) -> Vec<&'static str> {
    let wanted: Vec<String> = match (&request.tools, provider_tools) {
        (Some(t), _) => t.clone(),
        (None, Some(p)) => p.to_vec(),
        (None, None) => READ_ONLY.iter().map(|s| s.to_string()).collect(),
    };
    let read_only_type = request
        .options
        .agent_type
        .as_deref()
        .is_some_and(|t| READ_ONLY_TYPES.contains(&t));
    ALL.iter()
        .copied()
        .filter(|t| wanted.iter().any(|w| w == t))
        .filter(|t| {
            !request.disallowed_tools.iter().any(|d| d == t)
                && !request
                    .options
                    .disallowed_tools
                    .as_ref()
                    .is_some_and(|d| d.iter().any(|x| x == t))
        })
        .filter(|t| !(read_only_type && WRITING.contains(t)))
        .collect()
}

/// The specs of `names`, plus [`STRUCTURED_OUTPUT`] for a schema call.
pub fn specs(names: &[&str], schema: Option<&Value>) -> Vec<ToolSpec> {
    let mut out: Vec<ToolSpec> = names.iter().filter_map(|n| spec(n)).collect();
    if let Some(s) = schema {
        out.push(ToolSpec {
            name: STRUCTURED_OUTPUT.into(),
            description: "Give your final answer. Call this exactly once, when the task is done, \
                          with an input that matches its schema; the call ends your work."
                .into(),
            input_schema: object_schema(s),
        });
    }
    out
}

/// Tool APIs want an object as a tool's input; a schema of another type is
/// wrapped as `{"value": …}` (and unwrapped by [`unwrap_answer`]).
fn object_schema(s: &Value) -> Value {
    if is_object_schema(s) {
        s.clone()
    } else {
        json!({
            "type": "object",
            "properties": { "value": s },
            "required": ["value"],
            "additionalProperties": false,
        })
    }
}

fn is_object_schema(s: &Value) -> bool {
    s.get("type").and_then(Value::as_str) == Some("object")
}

/// The answer inside a [`STRUCTURED_OUTPUT`] input (see `object_schema`).
pub fn unwrap_answer(schema: &Value, input: Value) -> Value {
    if is_object_schema(schema) {
        return input;
    }
    match input {
        Value::Object(mut m) if m.len() == 1 && m.contains_key("value") => {
            m.remove("value").unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// The tool `name` as the model is told of it: its description and input
/// schema.
// Long because: a flat table, one arm per tool.
fn spec(name: &str) -> Option<ToolSpec> {
    let (description, schema) = match name {
        "Read" => (
            "Read a text file of the workspace. Lines come numbered; long files are read in \
             parts with offset (the first line to show, from 1) and limit (how many lines).",
            json!({
                "type": "object",
                "properties": {
                    "file_path": { "type": "string", "description": "The file, relative to the workspace or absolute inside it" },
                    "offset": { "type": "integer", "minimum": 1 },
                    "limit": { "type": "integer", "minimum": 1 }
                },
                "required": ["file_path"]
            }),
        ),
        "Glob" => (
            "Find files whose path matches a glob pattern such as **/*.rs (newest first).",
            json!({
                "type": "object",
                "properties": {
                    "pattern": { "type": "string" },
                    "path": { "type": "string", "description": "The directory to search (default: the workspace)" }
                },
                "required": ["pattern"]
            }),
        ),
        "Grep" => (
            "Search file contents with a regular expression. output_mode: files_with_matches \
             (default), content (matching lines; -n for line numbers, -A/-B/-C for context) or \
             count. glob filters the files searched; head_limit caps the entries shown.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": { "type": "string" },
                    "path": { "type": "string" },
                    "glob": { "type": "string" },
                    "output_mode": { "type": "string", "enum": ["files_with_matches", "content", "count"] },
                    "-i": { "type": "boolean" },
                    "-n": { "type": "boolean" },
                    "-A": { "type": "integer", "minimum": 0 },
                    "-B": { "type": "integer", "minimum": 0 },
                    "-C": { "type": "integer", "minimum": 0 },
                    "head_limit": { "type": "integer", "minimum": 1 }
                },
                "required": ["pattern"]
            }),
        ),
        "LS" => (
            "List a directory of the workspace (directories end with /).",
            json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string" },
                    "ignore": { "type": "array", "items": { "type": "string" } }
                },
                "required": ["path"]
            }),
        ),
        "Edit" => (
            "Replace an exact string in a file of the workspace. old_string must occur exactly \
             once unless replace_all is true.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": { "type": "string" },
                    "old_string": { "type": "string" },
                    "new_string": { "type": "string" },
                    "replace_all": { "type": "boolean" }
                },
                "required": ["file_path", "old_string", "new_string"]
            }),
        ),
        "Write" => (
            "Create or overwrite a file of the workspace with the given content.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": { "type": "string" },
                    "content": { "type": "string" }
                },
                "required": ["file_path", "content"]
            }),
        ),
        "Bash" => (
            "Run a shell command in the workspace (sandboxed: no access outside it, no network \
             unless enabled). Output is stdout and stderr together; timeout is in milliseconds.",
            json!({
                "type": "object",
                "properties": {
                    "command": { "type": "string" },
                    "timeout": { "type": "integer", "minimum": 1 },
                    "description": { "type": "string" }
                },
                "required": ["command"]
            }),
        ),
        _ => return None,
    };
    Some(ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: schema,
    })
}

/// A short description of a call, for activity events: its path, pattern
/// or command, cut to 120 characters.
pub fn detail(name: &str, input: &Value) -> String {
    let key = match name {
        "Read" | "Edit" | "Write" => "file_path",
        "Glob" | "Grep" => "pattern",
        "LS" => "path",
        "Bash" => "command",
        _ => "",
    };
    let text = input
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_default();
    cut(&text, 120)
}

/// `s` cut to `max` characters, with `…` when it was longer.
pub fn cut(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn req(agent_type: Option<&str>, tools: Option<&[&str]>, disallowed: &[&str]) -> AgentRequest {
        let mut r = AgentRequest::new(1, "p", "l");
        r.options.agent_type = agent_type.map(str::to_string);
        r.tools = tools.map(|t| t.iter().map(|s| s.to_string()).collect());
        r.options.disallowed_tools = Some(disallowed.iter().map(|s| s.to_string()).collect());
        r
    }

    #[rstest]
    #[case::default_is_read_only(None, None, None, &[], &["Read", "Glob", "Grep", "LS"])]
    #[case::provider_enables_writes(None, None, Some(&["Read", "Bash", "Edit"][..]), &[], &["Read", "Edit", "Bash"])]
    #[case::type_wins(None, Some(&["Read", "Write"][..]), Some(&["Bash"][..]), &[], &["Read", "Write"])]
    #[case::disallowed_removed(None, None, Some(&ALL[..]), &["Bash", "Write"], &["Read", "Glob", "Grep", "LS", "Edit"])]
    #[case::explore_never_writes(Some("Explore"), Some(&["Read", "Bash", "Edit"][..]), None, &[], &["Read"])]
    #[case::plan_never_writes(Some("Plan"), None, Some(&ALL[..]), &[], &["Read", "Glob", "Grep", "LS"])]
    #[case::unknown_names_left_out(None, Some(&["Read", "WebFetch", "Task"][..]), None, &[], &["Read"])]
    fn which_tools_a_call_gets(
        #[case] agent_type: Option<&str>,
        #[case] type_tools: Option<&[&str]>,
        #[case] provider: Option<&[&str]>,
        #[case] disallowed: &[&str],
        #[case] want: &[&str],
    ) {
        let provider: Option<Vec<String>> =
            provider.map(|p| p.iter().map(|s| s.to_string()).collect());
        let got = selected(
            &req(agent_type, type_tools, disallowed),
            provider.as_deref(),
        );
        assert_eq!(got, want);
    }

    #[test]
    fn a_non_object_schema_is_wrapped_and_unwrapped() {
        let s = json!({ "type": "array", "items": { "type": "string" } });
        let specs = specs(&["Read"], Some(&s));
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].name, STRUCTURED_OUTPUT);
        assert_eq!(specs[1].input_schema["properties"]["value"], s);
        assert_eq!(unwrap_answer(&s, json!({ "value": ["a"] })), json!(["a"]));
        let o = json!({ "type": "object", "properties": {} });
        assert_eq!(specs_of_object(&o), o);
        assert_eq!(
            unwrap_answer(&o, json!({ "value": 1 })),
            json!({ "value": 1 })
        );
    }

    fn specs_of_object(o: &Value) -> Value {
        specs(&[], Some(o))[0].input_schema.clone()
    }

    #[test]
    fn details_are_cut() {
        assert_eq!(
            detail("Read", &json!({ "file_path": "src/a.rs" })),
            "src/a.rs"
        );
        let long = "x".repeat(200);
        let d = detail("Bash", &json!({ "command": long }));
        assert_eq!(d.chars().count(), 121);
        assert_eq!(detail("Nope", &json!({})), "");
    }
}
