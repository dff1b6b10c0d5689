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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::process::Command;

use dsh_seam::KeptWorktree;

/// Bound of one git command.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);

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

/// One file git reads for a worktree, with its content when the worktree
/// was made (`None`: it did not exist).
#[derive(Debug, Clone)]
struct Guarded {
    path: PathBuf,
    content: Option<Vec<u8>>,
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
fn watched(dirs: &GitDirs) -> Vec<(PathBuf, Option<Vec<u8>>)> {
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

/// A worktree's git directories, as they were when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirs {
    /// Its own git directory (`<common>/worktrees/<name>`): HEAD, index.
    pub admin: PathBuf,
    /// The repository's git directory (objects, refs, config, hooks).
    pub common: PathBuf,
}

/// Why a git command gave no answer to use. `what` is the command
/// (`git worktree add …`).
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// No `git` program.
    #[error(
        "{what}: git is not installed (or not on PATH); install git to use isolation \"worktree\""
    )]
    NotInstalled { what: String },
    /// It could not be run.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// It did not end within [`GIT_TIMEOUT`] (and was killed).
    #[error("{what}: no answer within {} s", GIT_TIMEOUT.as_secs())]
    TimedOut { what: String },
    /// It refused because what it was to make exists (a branch, a path).
    #[error("{what} failed: {stderr}")]
    AlreadyExists { what: String, stderr: String },
    /// It failed otherwise; `stderr` is what it said, trimmed.
    #[error("{what} failed: {stderr}")]
    Failed { what: String, stderr: String },
    /// `git rev-parse` answered without naming the git directories.
    #[error("git rev-parse in {} did not name the git directories", path.display())]
    NoGitDirs { path: PathBuf },
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

/// `git <args>` in `dir`: stdout on success, why not on failure.
pub(crate) async fn git(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    git_with(dir, args, None).await
}

/// `git <args>` in `dir`; with `pinned`, git uses exactly those
/// directories (never what a `.git` file in `dir` says), and runs no hook
/// and no fsmonitor whatever a config says: what a child left in its
/// worktree cannot make the host run a program.
async fn git_with(
    dir: &Path,
    args: &[&str],
    pinned: Option<(&GitDirs, &Path)>,
) -> Result<String, GitError> {
    let mut cmd = Command::new("git");
    if pinned.is_some() {
        cmd.args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
        ]);
    }
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        // Variables that would point git elsewhere (set inside git hooks).
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_COMMON_DIR")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some((dirs, work_tree)) = pinned {
        cmd.env("GIT_DIR", &dirs.admin)
            .env("GIT_COMMON_DIR", &dirs.common)
            .env("GIT_WORK_TREE", work_tree);
    }
    let what = format!("git {}", args.join(" "));
    let out = match tokio::time::timeout(GIT_TIMEOUT, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(GitError::NotInstalled { what });
        }
        Ok(Err(source)) => return Err(GitError::Io { what, source }),
        Err(_) => return Err(GitError::TimedOut { what }),
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        // git words it `a branch named 'x' already exists` (switch -c,
        // branch) and `'path' already exists` (worktree add); it has no
        // exit code of its own for it.
        if stderr.contains("already exists") {
            Err(GitError::AlreadyExists { what, stderr })
        } else {
            Err(GitError::Failed { what, stderr })
        }
    }
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

/// The git directories of the worktree at `path`, canonical.
async fn git_dirs(path: &Path) -> Result<GitDirs, GitError> {
    let out = git(
        path,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
        ],
    )
    .await?;
    let mut lines = out.lines().map(|l| PathBuf::from(l.trim()));
    match (lines.next(), lines.next()) {
        (Some(admin), Some(common)) => Ok(GitDirs {
            admin: std::fs::canonicalize(&admin).unwrap_or(admin),
            common: std::fs::canonicalize(&common).unwrap_or(common),
        }),
        _ => Err(GitError::NoGitDirs {
            path: path.to_path_buf(),
        }),
    }
}

impl Worktree {
    /// A fresh detached worktree of the repository containing `cwd`, made
    /// under `parent`. `child` (`<provider>-<n>`) names it.
    pub(crate) async fn create(
        cwd: &Path,
        parent: &Path,
        child: &str,
    ) -> Result<Worktree, WorktreeError> {
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
            &toplevel,
            &["worktree", "add", "--detach", "--quiet", &path_str, &base],
        )
        .await
        .map_err(WorktreeError::Git)?;
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
        let mut guarded = Vec::new();
        for p in guarded_paths(&path, &dirs) {
            match snapshot(&p) {
                Ok(content) => guarded.push(Guarded { path: p, content }),
                Err(e) => tracing::debug!("{}: {e}", p.display()),
            }
        }
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

    /// Puts back the git files a git command in the worktree trusts (its
    /// `.git` file, and `commondir`, `gitdir`, `config.worktree` of its
    /// git directory) as they were when the worktree was made, whatever the
    /// call left there — a `.git` that names a git directory of the call's
    /// own making with `core.fsmonitor` set to a command would otherwise
    /// run that command at the user's `git -C <kept path> status`. Says
    /// (tracing, warn) what it put back, and what it found changed but
    /// does not own (the repository's config and hooks).
    fn restore(&self, branch_stem: &str) {
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
    async fn unpopulate_submodules(&self, branch_stem: &str) {
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
