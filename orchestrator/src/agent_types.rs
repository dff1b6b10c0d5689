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
mod file;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::{AgentTypeRoute, Config};

pub use file::{
    AgentFile, AgentFileError, CLAUDE_MODEL_ALIASES, FRONT_MATTER_LIMIT, FrontMatter,
    parse_agent_file,
};

/// The largest agent file read (1 MiB): a system prompt is far smaller.
pub const AGENT_FILE_LIMIT: u64 = 1 << 20;
/// At most this many `.md` files are read from one directory.
pub const MAX_AGENT_FILES: usize = 1000;

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
