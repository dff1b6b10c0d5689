//! The policy line: how every worker learns its sandbox policy, before
//! anything else crosses its socket.
//!
//! The host writes the run's [`SandboxPolicy`] as one line of text
//! (`best-effort\n`) on the worker's socket before the first frame; the
//! worker reads it before it says `Hello`, and applies all of its sandbox
//! but the run's own limits right after. One way for every worker: a
//! spawned one finds the line waiting when it starts, a worker forked
//! before its run was known (the command line's prefork, the fork
//! server's children) waits for it. Nothing else carries the policy:
//! `Init` does not (since protocol version 11), and neither does the
//! worker's command line.
//!
//! A line rather than a frame: the worker reads it byte by byte with a
//! plain blocking read, before its channel exists, and the bytes after the
//! newline are the first frame, untouched.

use std::io::Read;

use crate::{SandboxPolicy, UnknownSandboxPolicy};

/// The longest line the worker accepts (the longest policy name is far
/// shorter).
pub const MAX: usize = 64;

/// The line that names `policy`.
pub fn line(policy: SandboxPolicy) -> String {
    format!("{}\n", policy.as_str())
}

/// What is wrong with the policy line the host sent.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLineError {
    /// The stream ended in the middle of the line.
    #[error("the host closed the socket in the middle of the policy line")]
    Cut,
    /// No newline within [`MAX`] bytes.
    #[error("the policy line is longer than {MAX} bytes")]
    TooLong,
    /// The read failed.
    #[error("reading the policy line: {0}")]
    Read(std::io::Error),
    /// The line is not UTF-8.
    #[error("the policy line is not UTF-8")]
    NotUtf8,
    /// The line names no policy.
    #[error("the policy line: {0}")]
    Unknown(#[from] UnknownSandboxPolicy),
}

/// Reads the policy line from `stream`, and not a byte past its newline;
/// `None` when the stream ends before its first byte (the host went away
/// without a run for this worker).
pub fn read(stream: &mut impl Read) -> Result<Option<SandboxPolicy>, PolicyLineError> {
    let mut line = Vec::with_capacity(16);
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(0) => return Err(PolicyLineError::Cut),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if line.len() < MAX => line.push(byte[0]),
            Ok(_) => return Err(PolicyLineError::TooLong),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(PolicyLineError::Read(e)),
        }
    }
    let text = std::str::from_utf8(&line).map_err(|_| PolicyLineError::NotUtf8)?;
    Ok(Some(text.parse::<SandboxPolicy>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_round_trips_and_the_rest_is_left_unread() {
        for policy in SandboxPolicy::ALL {
            let mut bytes = line(policy).into_bytes();
            bytes.extend_from_slice(b"rest");
            let mut cursor = std::io::Cursor::new(bytes);
            assert_eq!(read(&mut cursor).ok(), Some(Some(policy)));
            let mut rest = String::new();
            cursor.read_to_string(&mut rest).expect("rest");
            assert_eq!(rest, "rest");
        }
    }

    #[test]
    fn an_empty_stream_is_no_run_and_a_bad_line_an_error() {
        assert_eq!(read(&mut std::io::empty()).ok(), Some(None));
        let err = |bytes: &[u8]| read(&mut std::io::Cursor::new(bytes.to_vec())).err();
        assert!(
            err(b"nonsense\n").is_some_and(|e| e.to_string().contains("unknown sandbox policy"))
        );
        assert!(err(&[b'x'; 100]).is_some_and(|e| e.to_string().contains("longer than")));
        assert!(err(b"of").is_some_and(|e| e.to_string().contains("middle")));
        assert!(err(b"\xff\n").is_some_and(|e| e.to_string().contains("UTF-8")));
    }
}
