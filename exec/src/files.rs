//! Reading a file someone named — a script, a fixture, an args file, a
//! configuration, a run directory's `run.json` — as text, safely: only a
//! regular file (after symlinks are resolved), never more than a limit.
//!
//! `std::fs::read_to_string` would read `/dev/zero` until memory runs out
//! and block forever on a FIFO nobody writes to; [`read_text`] opens
//! without blocking, checks what it opened (not the name, which could be
//! swapped in between), and reads at most the limit plus one byte.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file could not be read; the caller names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// It cannot be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is a directory, a FIFO, a device or a socket.
    #[error("not a regular file (it is {what}); name a file")]
    NotRegular {
        /// What it is instead: `a directory`, `a FIFO`, …
        what: &'static str,
    },
    /// It is longer than the limit for this kind of file.
    #[error("over {limit} bytes, the limit for this file; it cannot be read whole")]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// It is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotUtf8,
    /// It is a symlink where only a file is read (a run directory's files,
    /// which a cloned repository can plant).
    #[error("a symlink; dsh never follows one here (remove it, or replace it with a regular file)")]
    Symlink,
}

/// Reads `path` as UTF-8 text: a regular file of at most `limit` bytes.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    read(path, limit, 0)
}

/// [`read_text`] for a file of a run directory, which is data and not the
/// user's word: a symlink there is refused, not followed.
pub fn read_own_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    read(path, limit, libc::O_NOFOLLOW)
}

/// [`read_own_text`] as bytes (a journal is checked line by line).
pub fn read_own_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    read_bytes(path, limit, libc::O_NOFOLLOW)
}

fn read(path: &Path, limit: u64, flags: libc::c_int) -> Result<String, ReadError> {
    String::from_utf8(read_bytes(path, limit, flags)?).map_err(|_| ReadError::NotUtf8)
}

fn read_bytes(path: &Path, limit: u64, flags: libc::c_int) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path, flags)?;
    // A huge (sparse) file is refused by its size, before a byte of it is
    // read; the `take` below still bounds one that grows meanwhile.
    if file.metadata()?.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// Opens (creating) a file to append to: never through a symlink, only a
/// regular file, and without blocking on a FIFO in its place.
pub fn append_own(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// Opens a run directory's file for reading as a stream (a journal, read
/// line by line): a regular file, never through a symlink.
pub fn open_own(path: &Path) -> Result<std::fs::File, ReadError> {
    open_regular(path, libc::O_NOFOLLOW)
}

fn open_regular(path: &Path, flags: libc::c_int) -> Result<std::fs::File, ReadError> {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; on a regular
    // file it changes nothing.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
        .map_err(|e| {
            // O_NOFOLLOW on a symlink fails with ELOOP, whose text ("too
            // many levels of symbolic links") says nothing useful.
            if flags & libc::O_NOFOLLOW != 0 && e.raw_os_error() == Some(libc::ELOOP) {
                ReadError::Symlink
            } else {
                ReadError::Io(e)
            }
        })?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(ReadError::NotRegular { what });
    }
    Ok(file)
}

/// Limit of a fixture file: far above any real recording, far below what
/// would hurt the host.
pub const FIXTURE_LIMIT: u64 = 64 << 20;
/// Limit of an args file: the largest frame that could carry it.
pub const ARGS_LIMIT: u64 = dsh_protocol::DEFAULT_MAX_FRAME_BYTES as u64;
/// Limit of a configuration file or a run's `run.json`.
pub const CONFIG_LIMIT: u64 = 1 << 20;
/// Limit of a run's `result.json`: a result travels in one frame, and its
/// pretty-printed JSON stays within a few times that.
pub const RESULT_LIMIT: u64 = 64 << 20;
/// Limit of one line of an events file as `dsh workflow report` reads it;
/// a longer line is skipped.
pub const EVENT_LINE_LIMIT: u64 = dsh_protocol::DEFAULT_MAX_FRAME_BYTES as u64;
/// Most bytes of an events file `dsh workflow report` reads for its logs.
pub const EVENTS_READ_LIMIT: u64 = 256 << 20;
/// Limit of a run's `lock` file as read for the holder's pid.
pub const LOCK_LIMIT: u64 = 64;

/// Limit of one journal line as `runs`, `show` and `resume` read it (the
/// journal itself is streamed, line by line): a line holds at most one
/// call's prompt and answer, each within a 16 MiB frame.
pub const JOURNAL_LINE_LIMIT: u64 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("a.txt");
        std::fs::write(&p, "hello").expect("write");
        assert_eq!(read_text(&p, 5).expect("read"), "hello");
        assert!(matches!(
            read_text(&p, 4),
            Err(ReadError::TooLarge { limit: 4 })
        ));
        std::fs::write(&p, [0xff, 0xfe]).expect("write");
        assert!(matches!(read_text(&p, 10), Err(ReadError::NotUtf8)));
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_at_once() {
        let e = read_text(Path::new("/dev/zero"), 1 << 30).expect_err("device");
        assert!(e.to_string().contains("a character device"), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        let e = read_text(dir.path(), 10).expect_err("dir");
        assert!(e.to_string().contains("a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        // Would block forever with a plain open; here it returns at once.
        let e = read_text(&fifo, 10).expect_err("fifo");
        assert!(e.to_string().contains("a FIFO"), "{e}");
        // A symlink to a device is the device.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        assert!(matches!(
            read_text(&link, 10),
            Err(ReadError::NotRegular { .. })
        ));
    }
}
