//! Finding the cases of `dsh workflow test`: scripts with a sibling
//! fixture, under the paths given, without leaving the searched tree.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use dsh_orchestrator::script::ScriptKind;

use super::Case;

/// The cases under `paths`: a file is a case when it is a script with a
/// sibling fixture; a directory is searched recursively (hidden
/// directories, `node_modules`, directories tagged as caches with a
/// `CACHEDIR.TAG` such as Cargo's `target/`, and symlinked directories are
/// skipped), and a symlink (to a script, or a fixture, args or expected
/// file beside one) counts only when it stays inside the searched tree: a
/// pull request adding `leak.js -> /proc/self/environ` must not get a
/// file from outside into the test log. Sorted per path, each script once.
/// A path that does not exist is an error.
pub(super) fn discover(paths: &[PathBuf]) -> Result<Vec<Case>, CannotRead> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(CannotRead::at(path))?;
        let mut found = Vec::new();
        if meta.is_dir() {
            let root = std::fs::canonicalize(path).map_err(CannotRead::at(path))?;
            walk(path, &root, &mut found)?;
            // `dsh workflow test` (or `.`) shows `a/b.ts`, not `./a/b.ts`.
            for f in &mut found {
                if let Ok(rest) = f.strip_prefix(".") {
                    *f = rest.to_path_buf();
                }
            }
            found.sort();
        } else {
            found.push(path.clone());
        }
        for script in found {
            let Some(case) = Case::of(&script) else {
                continue;
            };
            let key = std::fs::canonicalize(&script).unwrap_or_else(|_| script.clone());
            if seen.insert(key) {
                out.push(case);
            }
        }
    }
    Ok(out)
}

/// Whether `path` (a symlink or not) resolves to a place under `root`. A
/// sibling that does not exist is fine (it is optional or reported later).
fn stays_inside(path: &Path, root: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Err(_) => true,
        Ok(m) if !m.file_type().is_symlink() => true,
        Ok(_) => std::fs::canonicalize(path).is_ok_and(|real| real.starts_with(root)),
    }
}

/// A path named to `dsh workflow test`, or a directory under it, that
/// cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot read: {source}", path.display())]
pub(super) struct CannotRead {
    path: PathBuf,
    source: std::io::Error,
}

impl CannotRead {
    fn at(path: &Path) -> impl FnOnce(std::io::Error) -> CannotRead + '_ {
        move |source| CannotRead {
            path: path.to_path_buf(),
            source,
        }
    }
}

fn walk(dir: &Path, root: &Path, found: &mut Vec<PathBuf>) -> Result<(), CannotRead> {
    let entries = std::fs::read_dir(dir).map_err(CannotRead::at(dir))?;
    for entry in entries {
        let entry = entry.map_err(CannotRead::at(dir))?;
        let path = entry.path();
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if file_type.is_dir() {
            if name.starts_with('.') || name == "node_modules" || path.join("CACHEDIR.TAG").exists()
            {
                continue;
            }
            walk(&path, root, found)?;
        } else if ScriptKind::from_path(&path).is_some() && path.is_file() {
            // is_file follows a symlink to a script file; one that leaves
            // the tree is skipped, as is a script whose fixture, args or
            // expected file does.
            let Some(case) = Case::of(&path) else {
                continue;
            };
            if [&case.script, &case.fixture, &case.args, &case.expected]
                .into_iter()
                .all(|p| stays_inside(p, root))
            {
                found.push(path);
            }
        }
    }
    Ok(())
}
