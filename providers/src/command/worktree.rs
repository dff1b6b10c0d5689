//! `isolation: "worktree"`: a fresh detached `git worktree` per child.
//!
//! Afterwards the worktree's own git files (`.git`, and `commondir`,
//! `gitdir`, `config.worktree` in its git directory) are put back as they
//! were when it was made — the user's git in a kept worktree must never use
//! a git directory the child chose. Then an unchanged worktree (`git status
//! --porcelain` empty and HEAD where it started) is removed (deleted, then
//! `git worktree prune`); a changed one is kept on a new branch
//! `dsh/<provider>-<n>` (`git switch -c`; dsh commits nothing) and reported
//! in the child's `agent-end` event.

mod git;
mod guard;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_seam::KeptWorktree;

pub use git::{GitDirs, GitError};
use git::{git, git_dirs, git_with};
use guard::{Guarded, watched};

/// A worktree made for one child.
#[derive(Debug)]
pub struct Worktree {
    /// The main checkout's top level (where `git worktree` commands run).
    toplevel: PathBuf,
    /// The worktree's git directories, read right after it was made —
    /// before any child ran in it — and used from then on instead of its
    /// `.git` file, which the child can rewrite.
    dirs: GitDirs,
    /// The worktree's root.
    pub path: PathBuf,
    /// Where the child runs: the same subdirectory as the provider's cwd.
    pub run_dir: PathBuf,
    /// HEAD when it was made.
    base: String,
    /// The git files a user's own git command in the kept worktree would
    /// believe, as they were when it was made: restored before the
    /// worktree is handed to the user (see [`Worktree::restore`]).
    guarded: Vec<Guarded>,
    /// The repository's config and hooks as they were ([`watched`]).
    watched: Vec<(PathBuf, Option<Vec<u8>>)>,
}

/// Why a worktree could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The provider's cwd is in no git repository.
    #[error(
        "isolation \"worktree\": {} is not inside a git repository ({source}); run dsh in \
         a git checkout, set the provider's cwd to one, or drop the isolation option",
        cwd.display()
    )]
    NotInRepository { cwd: PathBuf, source: GitError },
    /// It is in a repository without a working tree (a bare one).
    #[error(
        "isolation \"worktree\": {} is not inside a git checkout with a working tree",
        cwd.display()
    )]
    NoWorkingTree { cwd: PathBuf },
    /// The repository has no commit to check out.
    #[error(
        "isolation \"worktree\": the repository at {} has no commit to check out \
         ({source}); commit once first",
        toplevel.display()
    )]
    NoCommit { toplevel: PathBuf, source: GitError },
    /// The directory worktrees go in cannot be made.
    #[error("isolation \"worktree\": cannot create {}: {source}", parent.display())]
    Parent {
        parent: PathBuf,
        source: std::io::Error,
    },
    /// `git worktree add`, or reading what it made, failed.
    #[error("isolation \"worktree\": {0}")]
    Git(#[source] GitError),
    /// The provider's cwd (a subdirectory) cannot be made in the worktree.
    #[error("isolation \"worktree\": cannot create {prefix} in the worktree: {source}")]
    RunDir {
        prefix: String,
        source: std::io::Error,
    },
}

/// `[A-Za-z0-9_-]` only: safe in a branch and a directory name.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() { "agent".into() } else { s }
}

impl Worktree {
    /// A fresh detached worktree of the repository containing `cwd`, made
    /// under `parent`. `child` (`<provider>-<n>`) names it.
    pub(crate) async fn create(
        cwd: &Path,
        parent: &Path,
        child: &str,
    ) -> Result<Worktree, WorktreeError> {
        let (toplevel, prefix, base) = Self::checkout_of(cwd).await?;
        let path = Self::add(&toplevel, &base, parent, child).await?;
        let dirs = match git_dirs(&path).await {
            Ok(d) => d,
            Err(e) => {
                let _ = tokio::task::spawn_blocking({
                    let p = path.clone();
                    move || std::fs::remove_dir_all(p)
                })
                .await;
                let _ = git(&toplevel, &["worktree", "prune"]).await;
                return Err(WorktreeError::Git(e));
            }
        };
        let run_dir = if prefix.is_empty() {
            path.clone()
        } else {
            path.join(&prefix)
        };
        let guarded = Guarded::record(&path, &dirs);
        let watched = watched(&dirs);
        // The cwd may be a directory git does not track (yet).
        if let Err(e) = std::fs::create_dir_all(&run_dir) {
            let wt = Worktree {
                toplevel,
                dirs,
                path,
                run_dir: PathBuf::new(),
                base,
                guarded,
                watched,
            };
            wt.remove().await;
            return Err(WorktreeError::RunDir { prefix, source: e });
        }
        Ok(Worktree {
            toplevel,
            dirs,
            path,
            run_dir,
            base,
            guarded,
            watched,
        })
    }

    /// The checkout `cwd` is in: its top level, `cwd`'s path below it
    /// (`""` or `sub/dir/`), and its HEAD commit.
    async fn checkout_of(cwd: &Path) -> Result<(PathBuf, String, String), WorktreeError> {
        let top = git(cwd, &["rev-parse", "--show-toplevel", "--show-prefix"])
            .await
            .map_err(|source| WorktreeError::NotInRepository {
                cwd: cwd.to_path_buf(),
                source,
            })?;
        let mut lines = top.lines();
        let toplevel = PathBuf::from(lines.next().unwrap_or_default().trim());
        let prefix = lines.next().unwrap_or_default().trim().to_string();
        if toplevel.as_os_str().is_empty() {
            return Err(WorktreeError::NoWorkingTree {
                cwd: cwd.to_path_buf(),
            });
        }
        let base = git(&toplevel, &["rev-parse", "--verify", "HEAD"])
            .await
            .map_err(|source| WorktreeError::NoCommit {
                toplevel: toplevel.clone(),
                source,
            })?
            .trim()
            .to_string();
        Ok((toplevel, prefix, base))
    }

    /// `git worktree add` of `base`, detached, in a new directory under
    /// `parent` named after `child` (and unique to this process).
    async fn add(
        toplevel: &Path,
        base: &str,
        parent: &Path,
        child: &str,
    ) -> Result<PathBuf, WorktreeError> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir_name = format!(
            "dsh-wt-{}-{}-{}-{nanos:08x}",
            sanitize(child),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        std::fs::create_dir_all(parent).map_err(|source| WorktreeError::Parent {
            parent: parent.to_path_buf(),
            source,
        })?;
        let path = parent.join(dir_name);
        let path_str = path.to_string_lossy().into_owned();
        git(
            toplevel,
            &["worktree", "add", "--detach", "--quiet", &path_str, base],
        )
        .await
        .map_err(WorktreeError::Git)?;
        Ok(path)
    }

    /// The worktree's git directories, as they were when it was made (the
    /// agent loop grants its tools access to them).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub fn git_dirs(&self) -> &GitDirs {
        &self.dirs
    }

    /// `git <args>` in the worktree, pinned to its recorded directories.
    async fn git_here(&self, args: &[&str]) -> Result<String, GitError> {
        git_with(&self.path, args, Some((&self.dirs, &self.path))).await
    }

    /// Removes the worktree, whatever is in it (used when the child did not
    /// start, or changed nothing).
    pub async fn remove(&self) {
        // Deleted directly, then pruned from the repository: `git worktree
        // remove` would look inside the child's worktree first.
        let p = self.path.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(p)).await {
            tracing::debug!("deleting {}: {e}", self.path.display());
        }
        if let Err(e) = git(&self.toplevel, &["worktree", "prune"]).await {
            tracing::debug!("{e}");
        }
    }

    /// After the child: removed when unchanged (`None`), else kept on a new
    /// branch `dsh/<branch_stem>` (or `-2`, `-3`, … when taken). Either
    /// way the worktree's own git files are put back first
    /// ([`Worktree::restore`]), so the user is never handed a worktree
    /// whose `.git` the call chose.
    pub async fn finish(&self, branch_stem: &str) -> Option<KeptWorktree> {
        self.restore(branch_stem);
        self.unpopulate_submodules(branch_stem).await;
        let status = self
            .git_here(&["status", "--porcelain", "--untracked-files=all"])
            .await;
        let head = self.git_here(&["rev-parse", "--verify", "HEAD"]).await;
        let unchanged = matches!((&status, &head), (Ok(s), Ok(h)) if s.trim().is_empty() && h.trim() == self.base);
        if unchanged {
            self.remove().await;
            return None;
        }
        // Changed, or git could not tell: keep it, never lose work.
        let stem = format!("dsh/{}", sanitize(branch_stem));
        let mut branch = String::new();
        for i in 1..=50 {
            let name = if i == 1 {
                stem.clone()
            } else {
                format!("{stem}-{i}")
            };
            match self.git_here(&["switch", "--quiet", "-c", &name]).await {
                Ok(_) => {
                    branch = name;
                    break;
                }
                Err(GitError::AlreadyExists { .. }) => continue,
                Err(e) => {
                    // A state switch refuses (e.g. mid-merge): a branch at
                    // HEAD without touching the worktree.
                    match self.git_here(&["branch", &name, "HEAD"]).await {
                        Ok(_) => branch = name,
                        Err(e2) => tracing::warn!(
                            "kept worktree {}: no branch ({e}; {e2})",
                            self.path.display()
                        ),
                    }
                    break;
                }
            }
        }
        Some(KeptWorktree {
            path: self.path.clone(),
            branch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitized_names() {
        assert_eq!(sanitize("claude-3"), "claude-3");
        assert_eq!(sanitize("my claude/x-1"), "my-claude-x-1");
        assert_eq!(sanitize("..."), "agent");
        assert_eq!(sanitize("ünï-2"), "n--2");
    }

    /// A branch that exists is a type the kept-worktree loop decides on,
    /// and its text is still git's.
    #[tokio::test]
    async fn an_existing_branch_is_already_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        for args in [
            &["init", "--quiet"][..],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "--allow-empty",
                "-m",
                "x",
            ],
            &["branch", "taken"],
        ] {
            git(p, args).await.expect("git setup");
        }
        let e = git(p, &["switch", "--quiet", "-c", "taken"])
            .await
            .expect_err("taken");
        assert!(matches!(e, GitError::AlreadyExists { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("git switch --quiet -c taken failed: "),
            "{e}"
        );
        let e = git(p, &["switch", "--quiet", "no-such-branch"])
            .await
            .expect_err("missing");
        assert!(matches!(e, GitError::Failed { .. }), "{e:?}");
    }
}
