//! Replacing a file so that a crash leaves either the old or the new
//! content (a temporary file beside it, renamed over), never through a
//! symlink or over a device, and cleaning up after writers that died.

use std::io::Write;
use std::path::Path;

use crate::JournalError;

/// Writes a file so that a crash leaves either the old or the new content:
/// a temporary file in the same directory, synced, then renamed over.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), JournalError> {
    replace_file(path, bytes, true)
}

/// A temporary file renamed over `path`; synced first when `durable`.
pub(super) fn replace_file(path: &Path, bytes: &[u8], durable: bool) -> Result<(), JournalError> {
    replace_file_with(path, durable, |f| f.write_all(bytes))
}

/// [`write_atomic`] for content written by `fill` (streamed, not built in
/// memory first); synced before the rename when `durable`.
pub(crate) fn replace_file_with(
    path: &Path,
    durable: bool,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), JournalError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    // Only a new file or an existing regular one is replaced: renaming over
    // a symlink would replace the link, over a device (`/dev/full`) the
    // device node.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let t = m.file_type();
        let what = if t.is_symlink() {
            Some("a symlink")
        } else if t.is_dir() {
            Some("a directory")
        } else if t.is_char_device() || t.is_block_device() {
            Some("a device")
        } else if t.is_fifo() || t.is_socket() {
            Some("a FIFO or socket")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(JournalError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "is {what}; refusing to replace it (name a regular file or a new path)"
                ),
            });
        }
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    // A temporary file of an earlier process with this pid (killed before
    // its rename) is ours to remove; a new one is created, never opened
    // through a link someone left there.
    let _ = std::fs::remove_file(&tmp);
    remove_stale_temps(dir, &name);
    let res = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        fill(&mut f)?;
        if durable {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res.map_err(|e| JournalError::io(path, e))
}

/// Removes `.{name}.tmp-<pid>` files beside `name` whose process is gone
/// (a `kill -9` between create and rename): the next write cleans up
/// after the one that died. A live process's temporary file is left alone.
fn remove_stale_temps(dir: &Path, name: &str) {
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file_name = e.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        // Signal 0 checks existence only; ESRCH: no such process.
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        // Only regular files: never follow or remove something else.
        let regular = e.file_type().is_ok_and(|t| t.is_file());
        if gone && regular {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_write_removes_the_temporary_files_of_dead_writers_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("rec.json");
        // A pid that cannot be running (above the kernel's pid_max).
        let dead = dir.path().join(".rec.json.tmp-2147483646");
        let alive = dir.path().join(format!(
            ".rec.json.tmp-{}",
            std::os::unix::process::parent_id()
        ));
        let other = dir.path().join(".other.json.tmp-2147483646");
        for p in [&dead, &alive, &other] {
            std::fs::write(p, b"partial").expect("temp");
        }
        write_atomic(&target, b"new").expect("write");
        assert!(!dead.exists(), "a dead writer's temp is removed");
        assert!(alive.exists(), "a live process's temp is left alone");
        assert!(other.exists(), "another file's temp is left alone");
        assert_eq!(std::fs::read(&target).expect("read"), b"new");
    }

    #[test]
    fn an_atomic_write_replaces_only_regular_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("out.json");
        write_atomic(&target, b"one").expect("new file");
        write_atomic(&target, b"two").expect("over a regular file");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "two");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let e = write_atomic(&link, b"three").expect_err("symlink");
        assert!(e.to_string().contains("is a symlink; refusing"), "{e}");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("still a link")
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "two");
        let e = write_atomic(Path::new("/dev/full"), b"x").expect_err("device");
        assert!(e.to_string().contains("is a device"), "{e}");
        assert!(
            std::fs::metadata("/dev/full")
                .expect("dev")
                .file_type()
                .is_char_device(),
            "/dev/full is still a device"
        );
        // A stale temporary file of this pid is cleaned, not followed.
        let stale = dir
            .path()
            .join(format!(".out.json.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink("/etc/hostname", &stale).expect("stale link");
        write_atomic(&target, b"four").expect("write past a stale temp");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "four");
        assert!(
            std::fs::symlink_metadata(&stale).is_err(),
            "the temp is gone"
        );
    }
}
