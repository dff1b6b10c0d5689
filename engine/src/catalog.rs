//! The catalog of saved workflows: where `workflow("name")` inside a script,
//! `dsh workflow run NAME` and `dsh workflow list` find a workflow by name,
//! and how a nested workflow's file is read and prepared for the worker.
//!
//! A catalog is an ordered list of directories (for the CLI: the project's
//! `.claude/workflows/`, the user's `~/.claude/workflows/`, then dsh's own
//! `workflows/` beside `dsh.toml`), plus the directory a `{scriptPath}` is
//! relative to. A workflow's name is its meta's `name` — as in Claude Code,
//! not its file name; a file without a readable meta is known by its file
//! stem, so it can still be named and its problem reported. The first
//! directory that has a name wins; later files of that name are shadowed.
//!
//! The catalog does not run anything and holds no state: each lookup reads
//! the directories again, so a file saved during a run is seen by the next
//! `workflow()` call. Every file is read through [`dsh_exec::files`] (regular
//! files only, size-capped), and a directory lists at most
//! [`MAX_FILES_PER_DIR`] scripts.

use std::path::{Path, PathBuf};

use dsh_protocol::{ErrorCode, LoadedWorkflow, WorkflowTarget};

use crate::script::{self, Meta, PreparedScript, ScriptKind};

/// Scripts read from one directory at most; more are left out of the
/// listing (and said so), so a directory of a million files cannot stall a
/// run.
pub const MAX_FILES_PER_DIR: usize = 1000;

/// Which kind of directory a saved workflow came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// The project's `.claude/workflows/`.
    Project,
    /// The user's `~/.claude/workflows/`.
    User,
    /// dsh's own `workflows/` directory (beside `dsh.toml`).
    Dsh,
    /// A directory an embedding application added.
    Other,
}

impl Origin {
    /// `project`, `user`, `dsh` or `other`, as `dsh workflow list` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Project => "project",
            Origin::User => "user",
            Origin::Dsh => "dsh",
            Origin::Other => "other",
        }
    }
}

/// One directory of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogDir {
    /// The directory (it need not exist).
    pub path: PathBuf,
    /// What kind of directory it is.
    pub origin: Origin,
}

/// One saved workflow file.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The name `workflow()` and `dsh workflow run` know it by: its meta's
    /// `name`, else the file stem.
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// The directory kind it came from.
    pub origin: Origin,
    /// Its meta, when the file has a valid one.
    pub meta: Option<Meta>,
    /// Why the file cannot run (a parse error, a missing meta), if it cannot.
    pub problem: Option<String>,
    /// The file that has this name first, when this one is shadowed.
    pub shadowed_by: Option<PathBuf>,
}

/// A nested workflow that could not be loaded: `workflow()` rejects with
/// this code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LoadError {
    /// `INVALID_ARGUMENT` (no such workflow, not a script file),
    /// `SCRIPT_PARSE` or `META_INVALID` (the file is broken).
    pub code: ErrorCode,
    /// Why, naming the target and the file.
    pub message: String,
}

/// A nested workflow, prepared: what the worker compiles, and the prepared
/// script the host maps the child's error positions with.
#[derive(Debug)]
pub struct Loaded {
    /// What goes to the worker.
    pub wire: LoadedWorkflow,
    /// The prepared child (its source mapping).
    pub prepared: PreparedScript,
}

/// Where saved workflows are found. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    dirs: Vec<CatalogDir>,
    base_dir: PathBuf,
    max_script_bytes: usize,
}

impl Catalog {
    /// An empty catalog: `{scriptPath}` relative to `base_dir`, no named
    /// workflows until [`Catalog::with_dir`] adds a directory.
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        Catalog {
            dirs: Vec::new(),
            base_dir: base_dir.into(),
            max_script_bytes: crate::Limits::default().max_script_bytes,
        }
    }

    /// The CLI's catalog: `<project>/.claude/workflows/`, then
    /// `<home>/.claude/workflows/` (when there is a home), then `dsh_dir`
    /// (dsh's own `workflows/`, when given); `{scriptPath}` relative to
    /// `project`.
    pub fn standard(project: &Path, home: Option<&Path>, dsh_dir: Option<&Path>) -> Self {
        let mut c = Catalog::new(project)
            .with_dir(project.join(".claude").join("workflows"), Origin::Project);
        if let Some(home) = home {
            c = c.with_dir(home.join(".claude").join("workflows"), Origin::User);
        }
        if let Some(dir) = dsh_dir {
            c = c.with_dir(dir, Origin::Dsh);
        }
        c
    }

    /// Adds a directory after the ones already there (it loses to them on
    /// a shared name).
    pub fn with_dir(mut self, path: impl Into<PathBuf>, origin: Origin) -> Self {
        let path = path.into();
        if !self.dirs.iter().any(|d| d.path == path) {
            self.dirs.push(CatalogDir { path, origin });
        }
        self
    }

    /// The largest script file read (default: [`crate::Limits`]'
    /// `max_script_bytes`).
    pub fn with_max_script_bytes(mut self, bytes: usize) -> Self {
        self.max_script_bytes = bytes;
        self
    }

    /// The directories, in lookup order.
    pub fn dirs(&self) -> &[CatalogDir] {
        &self.dirs
    }

    /// The directory `{scriptPath}` is relative to.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// Every script file of every directory, in lookup order (directory,
    /// then file name), shadowed ones marked. Directories that do not exist
    /// are skipped; ones that cannot be read are too (they hold nothing
    /// this run could use).
    pub fn list(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = Vec::new();
        for dir in &self.dirs {
            for path in script_files(&dir.path) {
                let mut entry = self.describe(&path, dir.origin);
                entry.shadowed_by = out
                    .iter()
                    .find(|e| e.name == entry.name && e.shadowed_by.is_none())
                    .map(|e| e.path.clone());
                out.push(entry);
            }
        }
        out
    }

    /// The workflow `name` refers to: the first entry of that name.
    pub fn find(&self, name: &str) -> Option<Entry> {
        self.list()
            .into_iter()
            .find(|e| e.name == name && e.shadowed_by.is_none())
    }

    /// Reads and prepares the workflow `target` names, for `workflow()`.
    pub fn load(&self, target: &WorkflowTarget) -> Result<Loaded, LoadError> {
        let (what, path) = match target {
            WorkflowTarget::Name(name) => {
                let what = format!("workflow({})", quoted(name));
                let entries = self.list();
                match entries
                    .iter()
                    .find(|e| e.name == *name && e.shadowed_by.is_none())
                {
                    Some(e) => (what, e.path.clone()),
                    None => {
                        return Err(invalid(format!(
                            "{what}: no saved workflow has that name; {}; save one there, or \
                             use {{scriptPath}}",
                            self.known_in(&entries)
                        )));
                    }
                }
            }
            WorkflowTarget::ScriptPath(p) => {
                let what = format!("workflow({{scriptPath: {}}})", quoted(p));
                if p.is_empty() {
                    return Err(invalid(format!(
                        "{what}: the path is empty; give a script file, relative to {}",
                        self.base_dir.display()
                    )));
                }
                (what, self.base_dir.join(p))
            }
        };
        let display = self.display_name(&path);
        // Only the project's own directory is confined: the user's
        // `~/.claude/workflows/` and dsh's `workflows/` are the user's.
        let confined = match target {
            WorkflowTarget::ScriptPath(_) => true,
            WorkflowTarget::Name(_) => self.origin_of(&path) == Some(Origin::Project),
        };
        let prepared = self
            .prepare_file(&path, &display, confined)
            .map_err(|e| LoadError {
                code: e.code,
                message: format!("{what}: {}", e.message),
            })?;
        let Some(meta) = prepared.meta.clone() else {
            return Err(LoadError {
                code: ErrorCode::MetaInvalid,
                message: format!(
                    "{what}: {display} has no `export const meta = {{ name, description }}`; a \
                     nested workflow needs one (Claude Code requires it too), as its first \
                     statement"
                ),
            });
        };
        Ok(Loaded {
            wire: LoadedWorkflow {
                name: meta.name,
                script_name: display,
                script_js: prepared.nested_code(),
            },
            prepared,
        })
    }

    /// One file as the listing shows it.
    fn describe(&self, path: &Path, origin: Origin) -> Entry {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let display = self.display_name(path);
        let (meta, problem) = match self.prepare_file(path, &display, origin == Origin::Project) {
            Ok(p) => match p.meta {
                Some(m) => (Some(m), None),
                None => (
                    None,
                    Some(format!(
                        "{display}: no `export const meta`; a saved workflow needs a meta with \
                         its name and description"
                    )),
                ),
            },
            Err(e) => (None, Some(e.message)),
        };
        Entry {
            name: meta.as_ref().map_or(stem, |m| m.name.clone()),
            path: path.to_path_buf(),
            origin,
            meta,
            problem,
            shadowed_by: None,
        }
    }

    /// The origin of the catalog directory `path` is directly in.
    fn origin_of(&self, path: &Path) -> Option<Origin> {
        let parent = path.parent()?;
        self.dirs
            .iter()
            .find(|d| d.path == parent)
            .map(|d| d.origin)
    }

    /// Reads and prepares one file; errors name `display`. A `confined`
    /// file (a `{scriptPath}`, or one of the project's
    /// `.claude/workflows/`) is refused when a symlink leads it out of the
    /// project: anyone who can write in the project (a model with Bash)
    /// could otherwise plant `creds.ts` → a host file it may not read
    /// itself, and have the host read it and quote it in a parse error.
    /// A file outside the project that a path names directly (no link) is
    /// still read, as documented, but its parse errors name the place
    /// without quoting its lines.
    fn prepare_file(
        &self,
        path: &Path,
        display: &str,
        confined: bool,
    ) -> Result<PreparedScript, LoadError> {
        let Some(kind) = ScriptKind::from_path(path) else {
            return Err(invalid(format!(
                "{display}: a workflow script must end in .ts, .mts, .js or .mjs"
            )));
        };
        let reach = self.reach(path);
        if confined && let Reach::LinkedOut(real) = &reach {
            return Err(invalid(self.linked_out_message(display, real)));
        }
        let source =
            dsh_exec::files::read_text(path, self.max_script_bytes as u64).map_err(|e| {
                invalid(format!(
                    "{display}: cannot read the script: {e}; check the path (relative to {})",
                    self.base_dir.display()
                ))
            })?;
        if source.contains('\0') {
            return Err(invalid(format!(
                "{display}: it contains NUL bytes, so it is not script text"
            )));
        }
        let quote = matches!(reach, Reach::Inside) || !confined;
        script::prepare(display, &source, kind).map_err(|e| LoadError {
            code: match e {
                script::ScriptError::MetaInvalid(_) => ErrorCode::MetaInvalid,
                _ => ErrorCode::ScriptParse,
            },
            message: if quote {
                e.to_string()
            } else {
                e.without_source()
            },
        })
    }

    fn linked_out_message(&self, display: &str, real: &Path) -> String {
        format!(
            "{display}: a symlink to {}, outside the project {}; dsh never follows a link out \
             of the project for a workflow file (copy the file into the project, or name it by \
             its own path)",
            real.display(),
            self.base_dir.display()
        )
    }

    /// Why `entry` (found by name) must not be run: a file of the project's
    /// `.claude/workflows/` that a symlink leads out of the project. `dsh
    /// workflow run NAME` asks before it reads the file.
    pub fn refusal(&self, entry: &Entry) -> Option<String> {
        if entry.origin != Origin::Project {
            return None;
        }
        match self.reach(&entry.path) {
            Reach::LinkedOut(real) => {
                Some(self.linked_out_message(&self.display_name(&entry.path), &real))
            }
            _ => None,
        }
    }

    /// Where `path` really is, compared with the project (`base_dir`).
    fn reach(&self, path: &Path) -> Reach {
        let (Ok(base), Ok(real)) = (
            std::fs::canonicalize(&self.base_dir),
            std::fs::canonicalize(path),
        ) else {
            // Nothing to read there: the read that follows says so.
            return Reach::Inside;
        };
        if real.starts_with(&base) {
            return Reach::Inside;
        }
        // The path as written, with `..` applied to the text only: equal to
        // the real one when no symlink was followed. The project directory
        // itself may be reached through a link (`/home` → `/data/home`), so
        // the path is taken relative to it first.
        let written = match path.strip_prefix(&self.base_dir) {
            Ok(rest) => base.join(rest),
            Err(_) => path.to_path_buf(),
        };
        if lexical(&written) == real {
            Reach::NamedOutside
        } else {
            Reach::LinkedOut(real)
        }
    }

    /// `path` relative to the base directory when it is inside it.
    fn display_name(&self, path: &Path) -> String {
        path.strip_prefix(&self.base_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// What a failed lookup tells the user: "known: a, b (looked in …)",
    /// or "there are none (looked in …)".
    pub fn known(&self) -> String {
        self.known_in(&self.list())
    }

    fn known_in(&self, entries: &[Entry]) -> String {
        let mut names: Vec<&str> = entries
            .iter()
            .filter(|e| e.shadowed_by.is_none())
            .map(|e| e.name.as_str())
            .collect();
        names.sort_unstable();
        let dirs = self.dirs_shown();
        let dirs = if dirs.is_empty() {
            "no workflow directories are configured".to_string()
        } else {
            format!("looked in {dirs}")
        };
        if names.is_empty() {
            format!("there are none ({dirs})")
        } else {
            format!("known: {} ({dirs})", names.join(", "))
        }
    }

    /// The directories as messages list them: `a, b, c`.
    pub fn dirs_shown(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where a workflow file is, as [`Catalog::reach`] finds it.
#[derive(Debug)]
enum Reach {
    /// Inside the project (or nothing is there).
    Inside,
    /// Outside, named by its own path: no symlink on the way.
    NamedOutside,
    /// Outside, reached through a symlink; the real path.
    LinkedOut(PathBuf),
}

/// `path` with `.` and `..` applied to its text, symlinks not looked at.
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn invalid(message: String) -> LoadError {
    LoadError {
        code: ErrorCode::InvalidArgument,
        message,
    }
}

/// `'name'`, as Claude Code quotes a target in its messages; long names cut.
fn quoted(s: &str) -> String {
    let shown = crate::events::shown_label(s);
    format!("'{shown}'")
}

/// The script files of `dir`, sorted by name, at most [`MAX_FILES_PER_DIR`];
/// hidden files and anything but regular files (or links to them) left out.
fn script_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| ScriptKind::from_path(p).is_some())
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .take(MAX_FILES_PER_DIR * 4)
        .collect();
    files.sort();
    files.truncate(MAX_FILES_PER_DIR);
    files
}

#[cfg(test)]
mod tests;
