//! Path checks, the tool host's first layer: every path a tool input names
//! is resolved to a canonical path (symlinks followed, `..` applied) and
//! refused with a clear `denied` unless it lies beneath the canonical
//! workspace. Landlock is the second layer, for whatever slips between the
//! check and the use (a symlink swapped in by a concurrent Bash call): the
//! kernel's EACCES/EPERM is mapped to `denied` too ([`io_error`]).

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// Symlinks followed through dangling links before giving up (as the
/// kernel's own limit for a path lookup).
const MAX_LINKS: usize = 40;

/// Resolves `given` (absolute, or relative to the workspace) for `tool`.
/// The path need not exist: then its nearest existing ancestor is
/// canonicalized and the rest appended (the rest may not contain `..`).
pub(crate) fn resolve(workspace: &Path, tool: &str, given: &str) -> Result<PathBuf, ToolError> {
    if given.is_empty() {
        return Err(ToolError::error(format!(
            "{tool}: the path is empty; give an absolute path or one relative to the workspace"
        )));
    }
    let joined = workspace.join(given);
    let resolved = canonical(&joined, 0)
        .map_err(|e| ToolError::error(format!("{tool}: cannot resolve {given}: {e}")))?;
    if resolved.starts_with(workspace) {
        return Ok(resolved);
    }
    let shown = if resolved.as_os_str() == given {
        given.to_string()
    } else {
        format!("{given} (resolves to {})", resolved.display())
    };
    Err(ToolError::Denied(format!(
        "{tool} refused: {shown} is outside the workspace {} (tools may only read and write inside the workspace)",
        workspace.display()
    )))
}

/// Refuses a write (Edit, Write) to a file that takes effect outside the
/// call — on the user's next git command or next dsh run — rather than
/// being work to review: anything beneath a `.git` (hooks and config run
/// programs with the user's rights), beneath a `.claude` (agent types,
/// saved workflows, settings), or a `dsh.toml` (providers whose commands
/// dsh runs). `path` is canonical (links resolved), so a link to one of
/// them is refused too.
///
/// Only the part beneath the workspace is looked at: a workspace that
/// itself lies beneath a `.git` or `.claude` takes ordinary writes. That
/// needs `workspace` canonical too (the tool context's is, [`Ctx`]); a
/// `path` not beneath it is refused rather than judged by its whole
/// absolute path (which refused every write to such a workspace).
///
/// [`Ctx`]: super::Ctx
pub(crate) fn writable(workspace: &Path, tool: &str, path: &Path) -> Result<(), ToolError> {
    let Ok(rel) = path.strip_prefix(workspace) else {
        return Err(ToolError::Denied(format!(
            "{tool} refused: {} is not beneath the workspace {} as resolved (symlinks \
             followed); tools only write inside the workspace",
            path.display(),
            workspace.display()
        )));
    };
    let what = rel.components().find_map(|c| match c.as_os_str().to_str() {
        Some(".git") => Some("git's own files (its hooks and config run programs as the user)"),
        Some(".claude") => Some(
            "Claude Code's and dsh's configuration (agent types, saved workflows), which the next run would use",
        ),
        _ => None,
    });
    let what = what.or_else(|| {
        (rel.file_name().and_then(|n| n.to_str()) == Some(crate::tools::CONFIG_FILE_NAME))
            .then_some("dsh's configuration, whose providers the next run would start")
    });
    match what {
        None => Ok(()),
        Some(what) => Err(ToolError::Denied(format!(
            "{tool} refused: {} is {what}; tools do not change it (ask the user to)",
            shown(workspace, path)
        ))),
    }
}

/// The canonical form of `path`, which may not exist yet.
fn canonical(path: &Path, links: usize) -> std::io::Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(p) => return Ok(p),
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    // A dangling symlink: follow it by hand, so that creating the file
    // would be checked where the kernel would create it.
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.file_type().is_symlink()
    {
        if links >= MAX_LINKS {
            return Err(std::io::Error::other("too many levels of symbolic links"));
        }
        let target = std::fs::read_link(path)?;
        let base = path.parent().unwrap_or(Path::new("/"));
        return canonical(&base.join(target), links + 1);
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(
            ErrorKind::NotFound,
            "no existing ancestor",
        ));
    };
    // `file_name` is None for a path ending in `..`, so `name` is a plain
    // component; the parent is resolved the same way, recursively.
    debug_assert!(matches!(
        Path::new(name).components().next(),
        Some(Component::Normal(_))
    ));
    Ok(canonical(parent, links)?.join(name))
}

/// The path as shown to the model: relative to the workspace (`.` for the
/// workspace itself).
pub(crate) fn shown(workspace: &Path, path: &Path) -> String {
    match path.strip_prefix(workspace) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// An I/O error of `tool` on `path` as the model reads it: the kernel's
/// refusal (Landlock) is `denied`, anything else an `error`.
pub(crate) fn io_error(tool: &str, what: &str, shown: &str, e: &std::io::Error) -> ToolError {
    match e.kind() {
        ErrorKind::PermissionDenied => ToolError::Denied(format!(
            "{tool} refused: {what} {shown}: permission denied by the sandbox (tools may only read and write inside the workspace)"
        )),
        ErrorKind::NotFound => ToolError::error(format!("{tool}: {shown} does not exist")),
        _ => ToolError::error(format!("{tool}: cannot {what} {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review of issue 33: a path the workspace could not be taken off
    /// (a workspace not in canonical form) was judged by its whole
    /// absolute path: refused for an ancestor named `.claude` or `.git`,
    /// and let through otherwise. It is refused, naming both.
    #[test]
    fn a_path_not_beneath_the_workspace_is_refused_not_judged_whole() {
        let e = writable(Path::new("/link/ws"), "Write", Path::new("/real/ws/a.txt"))
            .expect_err("not beneath the workspace as given");
        let msg = e.to_string();
        assert!(matches!(e, ToolError::Denied(_)), "{msg}");
        assert!(
            msg.contains("/real/ws/a.txt is not beneath the workspace /link/ws"),
            "{msg}"
        );
        // Beneath it, only the part below the workspace counts.
        let ws = Path::new("/home/u/.claude/ws");
        assert!(writable(ws, "Write", &ws.join("src/a.rs")).is_ok());
        assert!(writable(ws, "Write", &ws.join(".claude/agents/x.md")).is_err());
    }
}
