//! Running git for a worktree: a bounded `git` with git's variables
//! cleared (and, for a worktree a child had, pinned to the directories
//! recorded when it was made), and what its answer means.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// Bound of one git command.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);

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

/// `git <args>` in `dir`: stdout on success, why not on failure.
pub(crate) async fn git(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    git_with(dir, args, None).await
}

/// `git <args>` in `dir`; with `pinned`, git uses exactly those
/// directories (never what a `.git` file in `dir` says), and runs no hook
/// and no fsmonitor whatever a config says: what a child left in its
/// worktree cannot make the host run a program.
pub(super) async fn git_with(
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

/// The git directories of the worktree at `path`, canonical.
pub(super) async fn git_dirs(path: &Path) -> Result<GitDirs, GitError> {
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
