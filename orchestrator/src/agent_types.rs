//! Agent types as Claude Code has them: the built-ins, Markdown files with
//! YAML front matter in `.claude/agents/` directories, and dsh.toml's
//! `[agent_types.NAME]`, resolved into one table the router uses.
//!
//! An agent file (`<dir>/NAME.md`):
//!
//! ```markdown
//! ---
//! name: reviewer
//! description: Reviews a change for bugs
//! tools: Read, Grep, Glob        # or a YAML list; absent: all tools
//! model: inherit                 # or a model id; sonnet/opus/haiku are ignored
//! ---
//! You are a careful code reviewer. …
//! ```
//!
//! - `name` (the type's name) and `description` are required, as Claude
//!   Code requires them; `tools` and `disallowedTools` are a
//!   comma-separated string or a list of strings; `model` is a string.
//!   Other fields (`color`, `permissionMode`, …) are accepted and ignored,
//!   and `dsh workflow agents` names them.
//! - The body after the closing `---` is the system prompt.
//! - `model: inherit` means the call's (or provider's) model. `sonnet`,
//!   `opus` and `haiku` name Claude Code's own models, which dsh's
//!   providers do not have: they are ignored (with a note). Any other value
//!   is the calls' model unless the call names one.
//!
//! Files are read safely: at most [`AGENT_FILE_LIMIT`] bytes each, regular
//! files only (a FIFO or device named `x.md` is an error, never a hang),
//! only names ending in `.md`, at most [`MAX_AGENT_FILES`] per directory.
//! The front matter is YAML 1.2, parsed by `saphyr` (pure Rust, positions
//! on every node; `serde_yaml` is unmaintained and `serde_yml` has had
//! soundness problems).
//!
//! A broken file does not stop a run: its type is still known, and a call
//! naming it fails with `AGENT_START` carrying the file's error
//! (`path:line: problem; fix`); `dsh workflow agents` lists it too. The
//! type name of a broken file is its `name:` line when one can be read,
//! else the file's stem.
//!
//! Precedence, highest first: `[agent_types.NAME]` in dsh.toml, then the
//! directories in the order given (the CLI: `<cwd>/.claude/agents`, then
//! `$HOME/.claude/agents`), then the built-ins. A definition hides every
//! lower one of the same name, broken or not.

pub mod builtin;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use crate::config::{AgentTypeRoute, Config};

/// The largest agent file read (1 MiB): a system prompt is far smaller.
pub const AGENT_FILE_LIMIT: u64 = 1 << 20;
/// The largest front matter parsed (64 KiB).
pub const FRONT_MATTER_LIMIT: usize = 64 << 10;
/// At most this many `.md` files are read from one directory.
pub const MAX_AGENT_FILES: usize = 1000;
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

/// Parses the text of an agent file.
pub fn parse_agent_file(path: &Path, text: &str) -> Result<AgentFile, AgentFileError> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");
    let err = |line: Option<usize>, name: Option<String>, message: String| AgentFileError {
        path: path.to_path_buf(),
        line,
        type_name: Some(name.unwrap_or_else(|| stem.clone())),
        message,
    };
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(err(
            Some(1),
            None,
            "no front matter: an agent file starts with a line `---`, then `name: …` and \
             `description: …`, then a line `---` and the system prompt"
                .into(),
        ));
    }
    // The front matter: from line 2 up to the next line that is `---`.
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
            return Err(err(
                Some(1),
                None,
                format!(
                    "the front matter is over {FRONT_MATTER_LIMIT} bytes; keep the fields short \
                     and put the system prompt after the closing `---`"
                ),
            ));
        }
    }
    let Some(body_start) = body_start else {
        return Err(err(
            Some(1),
            None,
            "the front matter is not closed: add a line `---` after the last field, before the \
             system prompt"
                .into(),
        ));
    };
    let body = text[body_start..].trim().to_string();
    // Front-matter line N is file line N + 1.
    let file_line = |l: usize| l + 1;
    let guessed_name = || guess_name(&front);
    if let Some(line) = too_deep(&front) {
        return Err(err(
            Some(file_line(line)),
            guessed_name(),
            format!("the front matter nests `[`/`{{` more than {MAX_FLOW_DEPTH} deep; flatten it"),
        ));
    }
    // Claude Code takes a plain `key: value` line's value whole, `: `
    // inside it included; strict YAML does not. When the front matter is
    // not YAML, such lines are quoted and it is read again.
    let (docs, front_matter) = match MarkedYaml::load_from_str(&front) {
        Ok(docs) => (Ok(docs), FrontMatter::Yaml),
        Err(e) => match MarkedYaml::load_from_str(&quote_line_values(&front)) {
            Ok(docs) => (Ok(docs), FrontMatter::LineValues),
            Err(_) => (Err(e), FrontMatter::Yaml),
        },
    };
    let docs = docs.map_err(|e| {
        err(
            Some(file_line(e.marker().line())),
            guessed_name(),
            format!(
                "the front matter is not valid YAML: {} (column {}); fix the YAML between the \
                 `---` lines",
                e.info(),
                e.marker().col() + 1
            ),
        )
    })?;
    let doc = docs.into_iter().next();
    let YamlData::Mapping(map) = doc.as_ref().map_or(&YamlData::BadValue, |d| &d.data) else {
        return Err(err(
            Some(doc.map_or(2, |d| file_line(d.span.start.line()))),
            guessed_name(),
            "the front matter is not a mapping of fields: write `name: …` and `description: …` \
             lines between the `---` lines"
                .into(),
        ));
    };
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
    // The name first, so later errors name the type.
    let name_node = map.iter().find(|(k, _)| key_str(k) == Some("name"));
    let name = name_node
        .and_then(|(_, v)| scalar_string(v))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    let bad = |node: &MarkedYaml, message: String| {
        err(
            Some(file_line(node.span.start.line())),
            name.clone().or_else(guessed_name),
            message,
        )
    };
    let mut description = None;
    for (k, v) in map {
        let Some(key) = key_str(k) else {
            return Err(bad(k, "a front-matter key must be a plain string".into()));
        };
        match key {
            "name" => {
                if name.is_none() {
                    return Err(err(
                        Some(file_line(v.span.start.line())),
                        None,
                        "`name` must be a non-empty string: the agent type's name".into(),
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
    let Some(name) = name else {
        return Err(err(
            Some(2),
            None,
            "the front matter has no `name`: add `name: <type name>` (the `agentType` scripts \
             pass)"
                .into(),
        ));
    };
    if name.chars().any(char::is_control) {
        return Err(err(
            name_node.map(|(_, v)| file_line(v.span.start.line())),
            None,
            "`name` must not contain control characters".into(),
        ));
    }
    let Some(description) = description else {
        return Err(err(
            Some(2),
            Some(name),
            "the front matter has no `description`: add `description: <what this agent is \
             for>` (Claude Code requires it too)"
                .into(),
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

/// Reads every `*.md` file of `dir`, sorted by file name. A directory that
/// does not exist gives nothing; one that cannot be read gives one error.
pub fn load_agent_dir(dir: &Path) -> Vec<Result<AgentFile, AgentFileError>> {
    let dir_error = |message: String| AgentFileError {
        path: dir.to_path_buf(),
        line: None,
        type_name: None,
        message,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => return vec![Err(dir_error(format!("cannot read the directory: {e}")))],
    };
    let mut paths: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        // A directory named x.md is not an agent file; anything else
        // (a FIFO, a device) is refused by the safe read below.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        paths.push(path);
    }
    paths.sort();
    let mut out = Vec::new();
    if paths.len() > MAX_AGENT_FILES {
        out.push(Err(dir_error(format!(
            "{} agent files; only the first {MAX_AGENT_FILES} (by name) are read",
            paths.len()
        ))));
        paths.truncate(MAX_AGENT_FILES);
    }
    // A link may point anywhere beneath the directory that holds
    // `.claude/` (the project, or the home directory), never out of it:
    // anyone who can write in a project (a model with Bash) could
    // otherwise plant `.claude/agents/x.md` linking to a host file it
    // cannot read, whose text would become a system prompt sent to a
    // model, or be quoted in a parse error.
    let root = dir
        .parent()
        .and_then(Path::parent)
        .and_then(|r| std::fs::canonicalize(r).ok());
    for path in paths {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        if is_link
            && let Some(root) = &root
            && let Ok(real) = std::fs::canonicalize(&path)
            && !real.starts_with(root)
        {
            out.push(Err(AgentFileError {
                path: path.clone(),
                line: None,
                type_name: stem,
                message: format!(
                    "a symlink to {}, outside {}; dsh does not follow a link out of it for an \
                     agent file (copy the file in instead)",
                    real.display(),
                    root.display()
                ),
            }));
            continue;
        }
        out.push(match crate::files::read_text(&path, AGENT_FILE_LIMIT) {
            Ok(text) => parse_agent_file(&path, &text),
            Err(e) => Err(AgentFileError {
                path: path.clone(),
                line: None,
                type_name: stem,
                message: format!("cannot read: {e}"),
            }),
        });
    }
    out
}

/// Where an agent type is defined.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AgentTypeSource {
    /// dsh's copy of a Claude Code built-in.
    BuiltIn,
    /// `[agent_types.NAME]` in dsh.toml: `path:line`.
    Config(String),
    /// An agent file.
    File(PathBuf),
}

impl fmt::Display for AgentTypeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentTypeSource::BuiltIn => f.write_str(builtin::BUILT_IN),
            AgentTypeSource::Config(at) => f.write_str(at),
            AgentTypeSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One definition of an agent type.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTypeDef {
    /// The type's name (`agentType`).
    pub name: String,
    /// Where it is defined.
    pub source: AgentTypeSource,
    /// What it means, or why its file cannot be used.
    pub route: Result<AgentTypeRoute, AgentFileError>,
    /// Remarks for `dsh workflow agents` (ignored model alias, ignored
    /// fields).
    pub notes: Vec<String>,
}

/// The agent types of a run, resolved by precedence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentTypes {
    /// The definition in force for each name.
    pub types: BTreeMap<String, AgentTypeDef>,
    /// Definitions hidden by a higher one of the same name, each with the
    /// source that hides it.
    pub shadowed: Vec<(AgentTypeDef, AgentTypeSource)>,
    /// Problems that belong to no type (a directory that cannot be read).
    pub problems: Vec<AgentFileError>,
}

impl AgentTypes {
    /// The built-ins and `config`'s `[agent_types.NAME]`, no files.
    pub fn from_config(config: &Config) -> AgentTypes {
        AgentTypes::resolve(config, &[])
    }

    /// The built-ins, the agent files of `dirs` (highest precedence first;
    /// a directory that does not exist is skipped) and `config`'s
    /// `[agent_types.NAME]`.
    pub fn resolve(config: &Config, dirs: &[PathBuf]) -> AgentTypes {
        // Lowest precedence first; each layer replaces the one below.
        let mut layers: Vec<Vec<AgentTypeDef>> = Vec::new();
        layers.push(
            builtin::builtin_agent_types()
                .into_iter()
                .map(|(name, route)| AgentTypeDef {
                    name,
                    source: AgentTypeSource::BuiltIn,
                    route: Ok(route),
                    notes: Vec::new(),
                })
                .collect(),
        );
        let mut problems = Vec::new();
        let mut seen_dirs: Vec<PathBuf> = Vec::new();
        let mut dir_layers = Vec::new();
        for dir in dirs {
            // The same directory twice (cwd is $HOME) is read once.
            let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            if seen_dirs.contains(&canon) {
                continue;
            }
            seen_dirs.push(canon);
            let mut layer = Vec::new();
            for r in load_agent_dir(dir) {
                let def = match r {
                    Ok(f) => AgentTypeDef {
                        name: f.name.clone(),
                        source: AgentTypeSource::File(f.path.clone()),
                        route: Ok(f.route()),
                        notes: f.notes(),
                    },
                    Err(e) => match e.type_name.clone() {
                        Some(name) => AgentTypeDef {
                            name,
                            source: AgentTypeSource::File(e.path.clone()),
                            route: Err(e.clone()),
                            notes: Vec::new(),
                        },
                        None => {
                            problems.push(e);
                            continue;
                        }
                    },
                };
                // Two files of one directory with one name: the first (by
                // file name) wins, the other is shadowed by it.
                layer.push(def);
            }
            // Within a layer the first of a name must win: reverse so the
            // later insert (the first file) replaces the others.
            layer.reverse();
            dir_layers.push(layer);
        }
        // dirs are highest first; layers go lowest first.
        layers.extend(dir_layers.into_iter().rev());
        layers.push(
            config
                .agent_types
                .iter()
                .map(|(name, route)| AgentTypeDef {
                    name: name.clone(),
                    source: AgentTypeSource::Config(
                        route
                            .defined_at
                            .clone()
                            .unwrap_or_else(|| config.location()),
                    ),
                    route: Ok(route.clone()),
                    notes: Vec::new(),
                })
                .collect(),
        );
        let mut types: BTreeMap<String, AgentTypeDef> = BTreeMap::new();
        let mut shadowed = Vec::new();
        for layer in layers {
            for def in layer {
                let by = def.source.clone();
                if let Some(old) = types.insert(def.name.clone(), def) {
                    shadowed.push((old, by));
                }
            }
        }
        shadowed.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        AgentTypes {
            types,
            shadowed,
            problems,
        }
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.types.keys().map(String::as_str).collect()
    }

    /// The definition in force for `name`.
    pub fn get(&self, name: &str) -> Option<&AgentTypeDef> {
        self.types.get(name)
    }
}

/// The CLI's directories: `<cwd>/.claude/agents`, then
/// `$HOME/.claude/agents` (when `HOME` is set and not empty).
pub fn default_dirs(cwd: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![cwd.join(".claude").join("agents")];
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        dirs.push(PathBuf::from(home).join(".claude").join("agents"));
    }
    dirs
}

#[cfg(test)]
mod tests;
