//! What a child may have changed that a user's git would trust: the
//! worktree's own git files, recorded when it was made and put back
//! afterwards; the repository's config and hooks, compared and reported;
//! a `.git` made in a submodule's directory, removed.

use std::path::{Path, PathBuf};

use super::Worktree;
use super::git::GitDirs;

/// One file git reads for a worktree, with its content when the worktree
/// was made (`None`: it did not exist).
#[derive(Debug, Clone)]
pub(super) struct Guarded {
    path: PathBuf,
    content: Option<Vec<u8>>,
}

impl Guarded {
    /// The guarded files of the worktree at `path` as they are now (one
    /// that cannot be read is left out: there is nothing to put back).
    pub(super) fn record(path: &Path, dirs: &GitDirs) -> Vec<Guarded> {
        let mut guarded = Vec::new();
        for p in guarded_paths(path, dirs) {
            match snapshot(&p) {
                Ok(content) => guarded.push(Guarded { path: p, content }),
                Err(e) => tracing::debug!("{}: {e}", p.display()),
            }
        }
        guarded
    }
}

/// Most bytes of a guarded git file read (they are a line or a small
/// config; a larger one is not git's and is restored as missing).
const GUARDED_LIMIT: u64 = 1 << 20;

/// What `path` holds now: `Some(bytes)` for a regular file (never through
/// a symlink, bounded), `None` for nothing; `Err` for anything else.
fn snapshot(path: &Path) -> Result<Option<Vec<u8>>, dsh_exec::files::ReadError> {
    match dsh_exec::files::read_own_bytes(path, GUARDED_LIMIT) {
        Ok(b) => Ok(Some(b)),
        Err(dsh_exec::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The files whose content a git command in the worktree at `path`
/// trusts, besides the repository's own config and hooks: the `.git` file
/// (where its git directory is), and in that directory `commondir` (where
/// the repository is), `gitdir` and `config.worktree` (a config of the
/// worktree's own, read when `extensions.worktreeConfig` is on).
fn guarded_paths(path: &Path, dirs: &GitDirs) -> Vec<PathBuf> {
    vec![
        path.join(".git"),
        dirs.admin.join("commondir"),
        dirs.admin.join("gitdir"),
        dirs.admin.join("config.worktree"),
    ]
}

/// The repository files a call could change to make the user's next git
/// command run a program (`core.fsmonitor`, `core.hooksPath`, a hook):
/// not restored (the user may change them meanwhile), but a change is
/// reported.
pub(super) fn watched(dirs: &GitDirs) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for p in [
        dirs.common.join("config"),
        dirs.common.join("config.worktree"),
    ] {
        let c = snapshot(&p).ok().flatten();
        out.push((p, c));
    }
    let hooks = dirs.common.join("hooks");
    let mut names: Vec<String> = std::fs::read_dir(&hooks)
        .map(|r| {
            r.filter_map(Result::ok)
                .take(1000)
                .map(|e| {
                    let m = e.metadata().ok();
                    format!(
                        "{} {:?} {:?}",
                        e.file_name().to_string_lossy(),
                        m.as_ref().map(std::fs::Metadata::len),
                        m.and_then(|m| m.modified().ok())
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    out.push((hooks, Some(names.join("\n").into_bytes())));
    out
}

impl Worktree {
    /// Puts back the git files a git command in the worktree trusts (its
    /// `.git` file, and `commondir`, `gitdir`, `config.worktree` of its
    /// git directory) as they were when the worktree was made, whatever the
    /// call left there — a `.git` that names a git directory of the call's
    /// own making with `core.fsmonitor` set to a command would otherwise
    /// run that command at the user's `git -C <kept path> status`. Says
    /// (tracing, warn) what it put back, and what it found changed but
    /// does not own (the repository's config and hooks).
    pub(super) fn restore(&self, branch_stem: &str) {
        for g in &self.guarded {
            let now = snapshot(&g.path);
            if matches!(&now, Ok(c) if *c == g.content) {
                continue;
            }
            // Anything else there — a rewritten file, a symlink, a
            // directory — goes, and the recorded content comes back.
            let removed = match std::fs::symlink_metadata(&g.path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&g.path),
                Ok(_) => std::fs::remove_file(&g.path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            let written = removed.and_then(|()| match &g.content {
                None => Ok(()),
                Some(bytes) => {
                    use std::io::Write;
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&g.path)
                        .and_then(|mut f| f.write_all(bytes))
                }
            });
            match written {
                Ok(()) => tracing::warn!(
                    "call {branch_stem} changed {} in its worktree; dsh put it back as it was \
                     when it made the worktree (a git file there decides which repository and \
                     config git uses)",
                    g.path.display()
                ),
                Err(e) => tracing::warn!(
                    "call {branch_stem} changed {} in its worktree and dsh could not put it \
                     back ({e}); do not run git in {} before you have checked that file",
                    g.path.display(),
                    self.path.display()
                ),
            }
        }
        for (p, before) in watched(&self.dirs).into_iter().zip(&self.watched) {
            if p.1 != before.1 {
                tracing::warn!(
                    "{} changed while call {branch_stem} ran in a worktree of the repository; \
                     a git config or hook can make git run a program (core.fsmonitor, \
                     core.hooksPath, core.pager, a hook): check it before running git there",
                    p.0.display()
                );
            }
        }
    }

    /// Removes a `.git` the call put in a submodule's directory. `git
    /// worktree add` leaves submodules unpopulated; the user's `git status`
    /// in the kept worktree runs `git status` inside every populated one,
    /// with that one's config — so a `.git` naming a git directory of the
    /// call's own (`core.fsmonitor` set to a command) would run its
    /// command. The submodule's files stay; only the link to a git
    /// directory goes.
    pub(super) async fn unpopulate_submodules(&self, branch_stem: &str) {
        let Ok(listing) = self.git_here(&["ls-files", "--stage", "-z"]).await else {
            return;
        };
        for entry in listing.split('\0') {
            // `<mode> <object> <stage>\t<path>`; mode 160000 is a gitlink.
            let Some((meta, rel)) = entry.split_once('\t') else {
                continue;
            };
            if !meta.starts_with("160000 ") || Path::new(rel).is_absolute() || rel.contains("..") {
                continue;
            }
            let dot_git = self.path.join(rel).join(".git");
            let removed = match std::fs::symlink_metadata(&dot_git) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&dot_git),
                Ok(_) => std::fs::remove_file(&dot_git),
                Err(_) => continue,
            };
            match removed {
                Ok(()) => tracing::warn!(
                    "call {branch_stem} made the submodule {rel} a git checkout of its own in \
                     its worktree; dsh removed {} (git status would run git inside it, with \
                     its config)",
                    dot_git.display()
                ),
                Err(e) => tracing::warn!(
                    "call {branch_stem} made the submodule {rel} a git checkout of its own and \
                     dsh could not remove {} ({e}); do not run git in {} before you have \
                     removed it",
                    dot_git.display(),
                    self.path.display()
                ),
            }
        }
    }
}
