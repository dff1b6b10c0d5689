//! The Bash call's private temporary directory (`TMPDIR`): made and locked
//! before the sandbox, removed after the call, and reclaimed by a later
//! call when its owner died first.

use std::path::PathBuf;
use std::time::Duration;

/// The call's private temporary directory, and the lock that says it is
/// in use.
pub(crate) struct TmpDir {
    pub path: PathBuf,
    /// An exclusive `flock` on the directory itself, held as long as this
    /// process lives (close-on-exec, so the shell does not inherit it; the
    /// Bash sentinel closes it too). The kernel drops it however the
    /// process ends, SIGKILL included: an unlocked `call-*` directory is
    /// one whose owner is gone, which [`reclaim_stale`] removes.
    _lock: std::fs::File,
}

/// A staging directory younger than this is left alone by
/// [`reclaim_stale`]: it may be one a live call has just made and not yet
/// locked.
const STAGING_MIN_AGE: Duration = Duration::from_secs(60);
/// At most this many entries of the parent are looked at per call, so a
/// parent flooded with entries cannot make every call slow.
const RECLAIM_SCAN_MAX: usize = 256;

/// Makes the call's private temporary directory, before the sandbox so
/// that Landlock can grant it: `$TMPDIR/dsh-tool-tmp-UID/call-PID-NANOS`,
/// both levels mode 0700. The shared parent exists so that the call's
/// directory can be removed afterwards under Landlock, which is granted
/// only the right to remove directories beneath the parent (the system's
/// `/tmp` itself stays out of reach). A parent that is not a real
/// directory of ours, private to us (something another user planted), is
/// not used. `None` when it cannot be made: then `TMPDIR` is not set and
/// temporary files fail under the sandbox.
///
/// The directory is made as `.new-PID-NANOS`, locked, and only then
/// renamed to `call-…`, so that every `call-…` directory is locked from the
/// moment it has that name. Before making its own, the call removes the
/// directories of calls whose process is gone ([`reclaim_stale`]): a
/// cancelled or killed call cannot always remove its own.
pub(crate) fn make_tmp_dir() -> Option<TmpDir> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    // SAFETY: getuid takes no arguments and cannot fail (nix's wrapper
    // needs a feature the workspace does not enable).
    let uid = unsafe { libc::getuid() };
    let parent = std::env::temp_dir().join(format!("dsh-tool-tmp-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&parent);
    let meta = std::fs::symlink_metadata(&parent).ok()?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return None;
    }
    reclaim_stale(&parent, uid);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let id = format!("{}-{nanos}", std::process::id());
    let staging = parent.join(format!(".new-{id}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .ok()?;
    let Some(lock) = lock_dir(&staging) else {
        let _ = std::fs::remove_dir(&staging);
        return None;
    };
    let dir = parent.join(format!("call-{id}"));
    if std::fs::rename(&staging, &dir).is_err() {
        let _ = std::fs::remove_dir(&staging);
        return None;
    }
    Some(TmpDir {
        path: dir,
        _lock: lock,
    })
}

/// Opens `dir` (a real directory, never through a symlink) and takes an
/// exclusive lock on it without waiting; `None` when it is not a directory
/// or someone holds the lock.
fn lock_dir(dir: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .ok()?;
    f.try_lock().ok()?;
    Some(f)
}

/// Whether `name` is one dsh gives a call's directory: `call-PID-NANOS`
/// (`staging` false) or `.new-PID-NANOS` (`staging` true).
fn call_dir_name(name: &str) -> Option<bool> {
    let (staging, id) = match (name.strip_prefix("call-"), name.strip_prefix(".new-")) {
        (Some(id), _) => (false, id),
        (_, Some(id)) => (true, id),
        _ => return None,
    };
    let (pid, nanos) = id.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(nanos)).then_some(staging)
}

/// Removes the directories of calls whose process is gone: only entries
/// named as dsh names them, real directories (a symlink is never
/// followed, nor removed), owned by `uid`, and not locked — a live call
/// holds its lock until it exits. A staging directory must also be older
/// than [`STAGING_MIN_AGE`] (its owner locks it a moment after making it).
/// Best effort: whatever fails is left for the next call.
fn reclaim_stale(parent: &std::path::Path, uid: u32) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.take(RECLAIM_SCAN_MAX).flatten() {
        let name = entry.file_name();
        let Some(staging) = name.to_str().and_then(call_dir_name) else {
            continue;
        };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        if staging
            && meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age < STAGING_MIN_AGE)
        {
            continue;
        }
        // Held across the removal, so a second call reclaiming at the
        // same time skips it.
        let Some(_lock) = lock_dir(&path) else {
            continue;
        };
        // Does not follow symlinks inside (std removes them as links).
        let _ = std::fs::remove_dir_all(&path);
    }
}

pub(crate) fn remove_tmp_dir(dir: Option<TmpDir>) {
    if let Some(dir) = dir {
        // Best effort: what is left is reclaimed by a later call once this
        // process (and its lock) is gone.
        let _ = std::fs::remove_dir_all(&dir.path);
    }
}
