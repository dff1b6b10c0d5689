//! `argv` templates: `{placeholder}` substitution, checked when the
//! provider is built.
//!
//! Rules (docs/providers.md repeats them):
//! - `{name}` where `name` is an identifier is a placeholder; an unknown
//!   name is a configuration error.
//! - `{{name}}` is the literal text `{name}`.
//! - `${…}` is left alone (shell parameter expansion in `sh -c` scripts),
//!   and so is any other brace (`{"type": "object"}` needs no escaping).
//! - An argument that uses a placeholder whose value is absent (or empty)
//!   is dropped entirely, so `--model={model}` disappears when the call
//!   names no model. `{prompt}` always has a value.

use std::fmt;

/// A value an argument can take from the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// The prompt (with the schema instructions when `schema_prompt` is on).
    Prompt,
    Model,
    Effort,
    AgentType,
    SystemPrompt,
    /// The call's JSON schema, compact JSON.
    Schema,
    /// A path to a temporary file holding the call's JSON schema.
    SchemaFile,
    /// The agent type's tools, comma-separated (`Read,Grep,Glob`); absent
    /// when the type names none (all tools).
    Tools,
    /// The tools the call may not use, comma-separated; absent when none.
    DisallowedTools,
}

impl Placeholder {
    pub const ALL: [Placeholder; 9] = [
        Placeholder::Prompt,
        Placeholder::Model,
        Placeholder::Effort,
        Placeholder::AgentType,
        Placeholder::SystemPrompt,
        Placeholder::Schema,
        Placeholder::SchemaFile,
        Placeholder::Tools,
        Placeholder::DisallowedTools,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Placeholder::Prompt => "prompt",
            Placeholder::Model => "model",
            Placeholder::Effort => "effort",
            Placeholder::AgentType => "agentType",
            Placeholder::SystemPrompt => "systemPrompt",
            Placeholder::Schema => "schema",
            Placeholder::SchemaFile => "schemaFile",
            Placeholder::Tools => "tools",
            Placeholder::DisallowedTools => "disallowedTools",
        }
    }

    fn from_name(name: &str) -> Option<Placeholder> {
        Placeholder::ALL.into_iter().find(|p| p.name() == name)
    }

    /// `{prompt}, {model}, …` for messages.
    pub fn known_list() -> String {
        Placeholder::ALL
            .iter()
            .map(|p| format!("{{{}}}", p.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Var(Placeholder),
}

/// An `argv` element names a placeholder there is none of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown placeholder {{{name}}}; known: {known} (write {{{{{name}}}}} for the literal text)",
    known = Placeholder::known_list()
)]
pub struct UnknownPlaceholder {
    /// The name between the braces.
    pub name: String,
}

/// One parsed `argv` element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgTemplate {
    pieces: Vec<Piece>,
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ArgTemplate {
    /// Parses one argument; the error names the unknown placeholder.
    pub(crate) fn parse(arg: &str) -> Result<ArgTemplate, UnknownPlaceholder> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = arg;
        while let Some(open) = rest.find('{') {
            lit.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            // `${...}`: shell expansion, literal.
            if lit.ends_with('$') {
                lit.push('{');
                rest = after;
                continue;
            }
            // `{{name}}`: the literal `{name}`.
            if let Some(inner) = after.strip_prefix('{')
                && let Some(close) = inner.find("}}")
                && is_ident(&inner[..close])
            {
                lit.push('{');
                lit.push_str(&inner[..close]);
                lit.push('}');
                rest = &inner[close + 2..];
                continue;
            }
            match after.find('}') {
                Some(close) if is_ident(&after[..close]) => {
                    let name = &after[..close];
                    let p = Placeholder::from_name(name).ok_or_else(|| UnknownPlaceholder {
                        name: name.to_string(),
                    })?;
                    if !lit.is_empty() {
                        pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                    }
                    pieces.push(Piece::Var(p));
                    rest = &after[close + 1..];
                }
                _ => {
                    lit.push('{');
                    rest = after;
                }
            }
        }
        lit.push_str(rest);
        if !lit.is_empty() || pieces.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(ArgTemplate { pieces })
    }

    /// Whether the argument uses `p`.
    pub fn uses(&self, p: Placeholder) -> bool {
        self.pieces.contains(&Piece::Var(p))
    }

    /// Whether the argument has no placeholder at all.
    pub fn is_literal(&self) -> bool {
        self.pieces.iter().all(|x| matches!(x, Piece::Lit(_)))
    }

    /// The argument for one call; `None` when a placeholder it uses has no
    /// (or an empty) value, which drops the argument.
    pub fn render<'a>(&self, value: impl Fn(Placeholder) -> Option<&'a str>) -> Option<String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Lit(s) => out.push_str(s),
                Piece::Var(p) => match value(*p) {
                    Some(v) if !v.is_empty() || *p == Placeholder::Prompt => out.push_str(v),
                    _ => return None,
                },
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn values(p: Placeholder) -> Option<&'static str> {
        match p {
            Placeholder::Prompt => Some("say hi"),
            Placeholder::Model => Some("opus"),
            Placeholder::Effort => Some(""),
            Placeholder::AgentType => None,
            Placeholder::SystemPrompt => Some("be brief"),
            Placeholder::Schema => None,
            Placeholder::SchemaFile => None,
            Placeholder::Tools => Some("Read,Grep"),
            Placeholder::DisallowedTools => None,
        }
    }

    #[rstest]
    #[case::literal("-p", Some("-p"))]
    #[case::empty("", Some(""))]
    #[case::whole("{prompt}", Some("say hi"))]
    #[case::embedded("--model={model}", Some("--model=opus"))]
    #[case::two("{model}:{prompt}", Some("opus:say hi"))]
    #[case::absent_drops("{agentType}", None)]
    #[case::absent_embedded_drops("--agent={agentType}", None)]
    #[case::empty_drops("--effort={effort}", None)]
    #[case::escaped("{{prompt}}", Some("{prompt}"))]
    #[case::escaped_unknown("{{anything}}", Some("{anything}"))]
    #[case::shell("echo ${HOME} {model}", Some("echo ${HOME} opus"))]
    #[case::json(r#"{"type":"object"}"#, Some(r#"{"type":"object"}"#))]
    #[case::nested_json(r#"{"a":{"b":1}}"#, Some(r#"{"a":{"b":1}}"#))]
    #[case::lone_brace("a{b", Some("a{b"))]
    #[case::lone_close("a}b", Some("a}b"))]
    #[case::space_inside("{ prompt }", Some("{ prompt }"))]
    #[case::system(
        "--append-system-prompt={systemPrompt}",
        Some("--append-system-prompt=be brief")
    )]
    #[case::tools("--allowedTools={tools}", Some("--allowedTools=Read,Grep"))]
    #[case::no_disallowed("--disallowedTools={disallowedTools}", None)]
    fn renders(#[case] arg: &str, #[case] want: Option<&str>) {
        let t = ArgTemplate::parse(arg).expect("valid");
        assert_eq!(t.render(values).as_deref(), want, "{arg}");
    }

    #[test]
    fn an_empty_prompt_is_still_substituted() {
        let t = ArgTemplate::parse("{prompt}").expect("valid");
        assert_eq!(t.render(|_| Some("")).as_deref(), Some(""));
    }

    #[rstest]
    #[case::typo("{modle}", "{modle}")]
    #[case::snake("{agent_type}", "{agent_type}")]
    #[case::embedded("--x={nope}", "{nope}")]
    fn unknown_placeholders_are_errors(#[case] arg: &str, #[case] name: &str) {
        let err = ArgTemplate::parse(arg).expect_err("unknown");
        assert_eq!(format!("{{{}}}", err.name), name);
        let err = err.to_string();
        assert!(err.contains(name), "{err}");
        assert!(err.contains("{prompt}, {model}"), "{err}");
    }

    #[test]
    fn uses_and_literal() {
        let t = ArgTemplate::parse("--model={model}").expect("valid");
        assert!(t.uses(Placeholder::Model));
        assert!(!t.uses(Placeholder::Prompt));
        assert!(!t.is_literal());
        assert!(ArgTemplate::parse("{{model}}").expect("valid").is_literal());
    }
}
