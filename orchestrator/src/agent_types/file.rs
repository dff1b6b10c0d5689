//! One agent file: its front matter and body parsed, checked, and made
//! into what the router uses (the rules are in the parent module's doc).

use std::path::{Path, PathBuf};

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use crate::config::AgentTypeRoute;

/// The largest front matter parsed (64 KiB).
pub const FRONT_MATTER_LIMIT: usize = 64 << 10;
/// The deepest `[`/`{` nesting accepted in front matter (a hostile file
/// must not make the parser recurse without bound).
const MAX_FLOW_DEPTH: usize = 32;

/// The Claude Code model aliases, which no dsh provider has.
pub const CLAUDE_MODEL_ALIASES: [&str; 3] = ["sonnet", "opus", "haiku"];

/// One agent file, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFile {
    /// The file.
    pub path: PathBuf,
    /// `name`: the agent type's name.
    pub name: String,
    /// `description`.
    pub description: String,
    /// The body: the system prompt (trimmed).
    pub system_prompt: String,
    /// `model` as written (`inherit`, an alias or a model id).
    pub model: Option<String>,
    /// `tools`; `None` when absent (all tools).
    pub tools: Option<Vec<String>>,
    /// `disallowedTools`.
    pub disallowed_tools: Vec<String>,
    /// Front-matter fields dsh does not use, in file order.
    pub ignored_fields: Vec<String>,
    /// How the front matter was read.
    pub front_matter: FrontMatter,
}

/// How an agent file's front matter was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontMatter {
    /// As YAML.
    Yaml,
    /// Not valid YAML, read the way Claude Code reads it: each top-level
    /// `key: value` line's value is the rest of the line, colons included
    /// (a one-line `description: Use it when: …`).
    LineValues,
}

impl AgentFile {
    /// What the file means to the router. `model: inherit` and the Claude
    /// aliases give no model.
    pub fn route(&self) -> AgentTypeRoute {
        AgentTypeRoute {
            model: self
                .model
                .clone()
                .filter(|m| m != "inherit" && !CLAUDE_MODEL_ALIASES.contains(&m.as_str())),
            system_prompt: Some(self.system_prompt.clone()).filter(|s| !s.is_empty()),
            description: Some(self.description.clone()),
            tools: self.tools.clone(),
            disallowed_tools: self.disallowed_tools.clone(),
            defined_at: Some(self.path.display().to_string()),
            ..AgentTypeRoute::default()
        }
    }

    /// What `dsh workflow agents` says about the file beyond its fields.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(m) = &self.model
            && CLAUDE_MODEL_ALIASES.contains(&m.as_str())
        {
            notes.push(format!(
                "model {m:?} names a Claude Code model no dsh provider has; ignored (give a \
                 model id, or configure the provider's model)"
            ));
        }
        if self.front_matter == FrontMatter::LineValues {
            notes.push(
                "the front matter is not valid YAML (a value with `: ` in it); each `key: value` \
                 line was read whole, as Claude Code reads it — quote such values to make it YAML"
                    .to_string(),
            );
        }
        if !self.ignored_fields.is_empty() {
            notes.push(format!(
                "ignored fields: {}",
                self.ignored_fields.join(", ")
            ));
        }
        notes
    }
}

/// An agent file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct AgentFileError {
    /// The file (or directory).
    pub path: PathBuf,
    /// The 1-based line of the problem, when there is one.
    pub line: Option<usize>,
    /// The type the file would define: its `name:` when readable, else its
    /// stem; `None` for a directory's problem.
    pub type_name: Option<String>,
    /// The problem and the fix.
    pub message: String,
}

/// A problem found in an agent file before the type's name is attached:
/// the 1-based file line, when there is one, and the problem with its fix.
type Problem = (Option<usize>, String);

/// Parses the text of an agent file: the front matter is cut from the
/// body, read as YAML (or as Claude Code reads it), then its fields are
/// read and checked.
pub fn parse_agent_file(path: &Path, text: &str) -> Result<AgentFile, AgentFileError> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");
    let err = |(line, message): Problem, name: Option<String>| AgentFileError {
        path: path.to_path_buf(),
        line,
        type_name: Some(name.unwrap_or_else(|| stem.clone())),
        message,
    };
    let (front, body) = split_front_matter(&text).map_err(|p| err(p, None))?;
    let guessed_name = || guess_name(&front);
    let (doc, front_matter) = load_front_matter(&front).map_err(|p| err(p, guessed_name()))?;
    let YamlData::Mapping(map) = doc.as_ref().map_or(&YamlData::BadValue, |d| &d.data) else {
        return Err(err(
            (
                Some(doc.map_or(2, |d| file_line(d.span.start.line()))),
                "the front matter is not a mapping of fields: write `name: …` and \
                 `description: …` lines between the `---` lines"
                    .into(),
            ),
            guessed_name(),
        ));
    };
    // The name first, so later errors name the type.
    let name_node = map.iter().find(|(k, _)| key_str(k) == Some("name"));
    let name = name_node
        .and_then(|(_, v)| scalar_string(v))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    let mut out = AgentFile {
        path: path.to_path_buf(),
        name: String::new(),
        description: String::new(),
        system_prompt: body,
        model: None,
        tools: None,
        disallowed_tools: Vec::new(),
        ignored_fields: Vec::new(),
        front_matter,
    };
    let description = read_fields(map, &mut out).map_err(|(problem, named)| {
        let name = if named {
            name.clone().or_else(guessed_name)
        } else {
            None
        };
        err(problem, name)
    })?;
    let Some(name) = name else {
        return Err(err(
            (
                Some(2),
                "the front matter has no `name`: add `name: <type name>` (the `agentType` \
                 scripts pass)"
                    .into(),
            ),
            None,
        ));
    };
    if name.chars().any(char::is_control) {
        return Err(err(
            (
                name_node.map(|(_, v)| file_line(v.span.start.line())),
                "`name` must not contain control characters".into(),
            ),
            None,
        ));
    }
    let Some(description) = description else {
        return Err(err(
            (
                Some(2),
                "the front matter has no `description`: add `description: <what this agent \
                 is for>` (Claude Code requires it too)"
                    .into(),
            ),
            Some(name),
        ));
    };
    out.name = name;
    out.description = description;
    if out
        .tools
        .as_ref()
        .is_some_and(|t| t.iter().any(|x| x == "*"))
    {
        out.tools = None;
    }
    Ok(out)
}

/// Front-matter line N is file line N + 1.
fn file_line(l: usize) -> usize {
    l + 1
}

/// The front matter (from line 2 up to the next line that is `---`) and
/// the body after it, trimmed.
fn split_front_matter(text: &str) -> Result<(String, String), Problem> {
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err((
            Some(1),
            "no front matter: an agent file starts with a line `---`, then `name: …` and \
             `description: …`, then a line `---` and the system prompt"
                .into(),
        ));
    }
    let mut front = String::new();
    let mut body_start = None;
    let mut offset = first.len();
    for l in lines {
        offset += l.len();
        if l.trim_end() == "---" {
            body_start = Some(offset);
            break;
        }
        front.push_str(l);
        if front.len() > FRONT_MATTER_LIMIT {
            return Err((
                Some(1),
                format!(
                    "the front matter is over {FRONT_MATTER_LIMIT} bytes; keep the fields short \
                     and put the system prompt after the closing `---`"
                ),
            ));
        }
    }
    let Some(body_start) = body_start else {
        return Err((
            Some(1),
            "the front matter is not closed: add a line `---` after the last field, before the \
             system prompt"
                .into(),
        ));
    };
    Ok((front, text[body_start..].trim().to_string()))
}

/// The front matter's first YAML document, and how it was read.
fn load_front_matter(front: &str) -> Result<(Option<MarkedYaml<'static>>, FrontMatter), Problem> {
    if let Some(line) = too_deep(front) {
        return Err((
            Some(file_line(line)),
            format!("the front matter nests `[`/`{{` more than {MAX_FLOW_DEPTH} deep; flatten it"),
        ));
    }
    // Claude Code takes a plain `key: value` line's value whole, `: `
    // inside it included; strict YAML does not. When the front matter is
    // not YAML, such lines are quoted and it is read again.
    let (docs, front_matter) = match MarkedYaml::load_from_str(front) {
        Ok(docs) => (Ok(docs), FrontMatter::Yaml),
        Err(e) => match MarkedYaml::load_from_str(&quote_line_values(front)) {
            Ok(docs) => (Ok(docs), FrontMatter::LineValues),
            Err(_) => (Err(e), FrontMatter::Yaml),
        },
    };
    let docs = docs.map_err(|e| {
        (
            Some(file_line(e.marker().line())),
            format!(
                "the front matter is not valid YAML: {} (column {}); fix the YAML between the \
                 `---` lines",
                e.info(),
                e.marker().col() + 1
            ),
        )
    })?;
    Ok((docs.into_iter().next(), front_matter))
}

/// Reads the front matter's fields into `out` (all but `name`, which the
/// caller read first), and returns the description. An error says whether
/// the type's name goes with it (`false` for a bad `name` itself).
fn read_fields(
    map: &saphyr::AnnotatedMapping<'_, MarkedYaml<'_>>,
    out: &mut AgentFile,
) -> Result<Option<String>, (Problem, bool)> {
    let bad = |node: &MarkedYaml, message: String| {
        ((Some(file_line(node.span.start.line())), message), true)
    };
    let mut description = None;
    for (k, v) in map {
        let Some(key) = key_str(k) else {
            return Err(bad(k, "a front-matter key must be a plain string".into()));
        };
        match key {
            "name" => {
                let named = scalar_string(v).is_some_and(|n| !n.trim().is_empty());
                if !named {
                    return Err((
                        (
                            Some(file_line(v.span.start.line())),
                            "`name` must be a non-empty string: the agent type's name".into(),
                        ),
                        false,
                    ));
                }
            }
            "description" => match scalar_string(v) {
                Some(d) if !d.trim().is_empty() => description = Some(d.trim().to_string()),
                _ => {
                    return Err(bad(
                        v,
                        "`description` must be a non-empty string: say what the agent type is for"
                            .into(),
                    ));
                }
            },
            "model" => match &v.data {
                YamlData::Value(Scalar::Null) => {}
                _ => match scalar_string(v) {
                    Some(m) if !m.trim().is_empty() => out.model = Some(m.trim().to_string()),
                    Some(_) => {}
                    None => {
                        return Err(bad(
                            v,
                            "`model` must be a string: `inherit`, or a model id".into(),
                        ));
                    }
                },
            },
            "tools" => out.tools = tool_list(v).map_err(|m| bad(v, format!("`tools` {m}")))?,
            "disallowedTools" => {
                out.disallowed_tools = tool_list(v)
                    .map_err(|m| bad(v, format!("`disallowedTools` {m}")))?
                    .unwrap_or_default();
            }
            other => out.ignored_fields.push(other.to_string()),
        }
    }
    Ok(description)
}

fn key_str<'a>(k: &'a MarkedYaml<'_>) -> Option<&'a str> {
    match &k.data {
        YamlData::Value(Scalar::String(s)) => Some(s.as_ref()),
        _ => None,
    }
}

/// A scalar as text (`name: 12` is the name "12", as YAML readers that
/// take strings do).
fn scalar_string(v: &MarkedYaml<'_>) -> Option<String> {
    match &v.data {
        YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
        YamlData::Value(Scalar::Integer(i)) => Some(i.to_string()),
        YamlData::Value(Scalar::FloatingPoint(f)) => Some(f.to_string()),
        YamlData::Value(Scalar::Boolean(b)) => Some(b.to_string()),
        YamlData::Tagged(_, inner) => scalar_string(inner),
        _ => None,
    }
}

/// Why a `tools`/`disallowedTools` value is no list of tools (its Display
/// follows the field's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ToolListError {
    /// An item of a YAML list is not a name (1-based file line).
    #[error("must list tool names (line {line}: not a name)")]
    NotAName { line: usize },
    /// Neither a string nor a list.
    #[error(
        "must be a comma-separated string (`Read, Grep`) or a list of tool \
                         names"
    )]
    NotAList,
}

/// `Read, Grep` or `[Read, Grep]`; null or an empty string is absent.
fn tool_list(v: &MarkedYaml<'_>) -> Result<Option<Vec<String>>, ToolListError> {
    match &v.data {
        YamlData::Value(Scalar::Null) => Ok(None),
        YamlData::Sequence(items) => items
            .iter()
            .map(|i| {
                scalar_string(i)
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| ToolListError::NotAName {
                        line: i.span.start.line() + 1,
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        _ => match scalar_string(v) {
            Some(s) if s.trim().is_empty() => Ok(None),
            Some(s) => Ok(Some(
                s.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect(),
            )),
            None => Err(ToolListError::NotAList),
        },
    }
}

/// `front` with the value of every top-level `key: value` line in single
/// quotes (unless it is already quoted, a flow collection, a block scalar
/// or a comment), so a value with `: ` in it reads as the whole rest of
/// the line, as Claude Code reads it.
fn quote_line_values(front: &str) -> String {
    let mut out = String::with_capacity(front.len() + 64);
    for line in front.split_inclusive('\n') {
        let (text, end) = match line.strip_suffix('\n') {
            Some(t) => (t, "\n"),
            None => (line, ""),
        };
        let key_len = text
            .find(':')
            .filter(|&i| {
                i > 0
                    && text[..i]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            .filter(|&i| text[i + 1..].starts_with(' '));
        let quoted = key_len.and_then(|i| {
            let value = text[i + 1..].trim();
            let plain = !value.is_empty()
                && !value.starts_with(['\'', '"', '[', '{', '|', '>', '#', '&', '*', '!']);
            plain.then(|| format!("{}: '{}'", &text[..i], value.replace('\'', "''")))
        });
        match quoted {
            Some(q) => out.push_str(&q),
            None => out.push_str(text),
        }
        out.push_str(end);
    }
    out
}

/// The `name:` of front matter that is not valid YAML, read line by line.
fn guess_name(front: &str) -> Option<String> {
    front.lines().find_map(|l| {
        let v = l.strip_prefix("name:")?.trim().trim_matches(['"', '\'']);
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The 1-based line where flow nesting passes [`MAX_FLOW_DEPTH`].
fn too_deep(front: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, line) in front.lines().enumerate() {
        for c in line.chars() {
            match c {
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Some(i + 1);
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    None
}
