//! A run's events written to a file as JSON lines, one event a line, as
//! they come: the run directory's `events.jsonl` and `--events-file` use
//! this one writer, with one rule for errors — the first write error
//! stops the writing (the run goes on; the caller says it once).
//!
//! The writes are blocking file system calls, so they happen on a thread
//! of their own, never on the runtime's worker threads: a slow or full
//! disk must not stall the run's tasks. Each line is written whole, in
//! one `write`, as soon as the thread gets it — nothing is buffered in
//! the process beyond the few lines on their way to that thread — so what
//! a killed host leaves in the file is every event up to about the moment
//! it died, each line complete except at most the last.
//!
//! A file can be given a size limit: the run directory's `events.jsonl`
//! is written for every run, and a long fan-out must not fill the disk.
//! A line that would take the file past the limit is not written, nor is
//! anything after it ([`Written::capped`]). Since each attempt (a resume)
//! appends its events to the same file, an attempt whose first line does
//! not fit any more starts the file afresh ([`Written::restarted`]): the
//! last attempt's events are the ones worth keeping, and they begin with
//! its `workflow/start`.

use std::fs::File;
use std::io::Write;

use crate::events::EventStream;

/// Lines on their way to the writing thread; the run's subscriber queue
/// (bounded itself) holds the rest while the disk is slow.
const LINES_IN_FLIGHT: usize = 256;

/// How writing an events file went.
#[derive(Debug, Default)]
pub struct Written {
    /// The first write error; nothing was written after it.
    pub error: Option<std::io::Error>,
    /// A line would have taken the file past its size limit: it and every
    /// later event were left out.
    pub capped: bool,
    /// The file already held earlier attempts' events up to its limit and
    /// was started afresh with this attempt's first line.
    pub restarted: bool,
    /// Events this writer missed because it fell too far behind the run
    /// ([`EventStream::dropped`]).
    pub dropped: u64,
}

/// Writes every event of `events` to `file` as a JSON line, appending to
/// what the file holds, until the run ends; at most `limit` bytes of file
/// when given (see the module's documentation). Returns once every line
/// it wrote is in the file.
pub async fn write_events(file: File, mut events: EventStream, limit: Option<u64>) -> Written {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(LINES_IN_FLIGHT);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("dsh-events-file".into())
        .spawn(move || {
            let mut w = LineWriter::new(file, limit);
            while let Some(line) = rx.blocking_recv() {
                if !w.write(&line) {
                    // Dropping the receiver tells the sender to stop.
                    break;
                }
            }
            let _ = done_tx.send(w.written);
        });
    if let Err(e) = spawned {
        return Written {
            error: Some(e),
            ..Written::default()
        };
    }
    while let Some(ev) = events.next().await {
        let mut line = ev.to_json().to_string().into_bytes();
        line.push(b'\n');
        if tx.send(line).await.is_err() {
            // The writer stopped (an error, the limit): nothing more to
            // format.
            break;
        }
    }
    drop(tx);
    let mut written = done_rx.await.unwrap_or_else(|_| Written {
        error: Some(std::io::Error::other(
            "the thread writing the events file stopped unexpectedly",
        )),
        ..Written::default()
    });
    written.dropped = events.dropped();
    written
}

/// The writing thread's state: the file, its size and limit, and how it
/// went.
struct LineWriter {
    file: File,
    limit: Option<u64>,
    /// The file's size as this writer knows it (what it found plus what
    /// it wrote); unknown sizes count as empty.
    size: u64,
    first: bool,
    written: Written,
}

impl LineWriter {
    fn new(file: File, limit: Option<u64>) -> LineWriter {
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        LineWriter {
            file,
            limit,
            size,
            first: true,
            written: Written::default(),
        }
    }

    /// Writes one line whole; `false` once nothing more is to be written
    /// (the first error, or the limit reached).
    fn write(&mut self, line: &[u8]) -> bool {
        let len = line.len() as u64;
        if let Some(limit) = self.limit {
            if self.first && self.size > 0 && self.size.saturating_add(len) > limit {
                if let Err(e) = self.file.set_len(0) {
                    self.written.error = Some(e);
                    return false;
                }
                self.size = 0;
                self.written.restarted = true;
            }
            if self.size.saturating_add(len) > limit {
                self.written.capped = true;
                return false;
            }
        }
        self.first = false;
        // The whole line in one write: a `File` is unbuffered, so the line
        // is in the file when the write returns.
        match self.file.write_all(line) {
            Ok(()) => {
                self.size += len;
                true
            }
            Err(e) => {
                self.written.error = Some(e);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(path: &std::path::Path, limit: Option<u64>) -> LineWriter {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open: {e}"));
        LineWriter::new(file, limit)
    }

    fn text(path: &std::path::Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read: {e}"))
    }

    #[test]
    fn a_line_past_the_limit_stops_the_writing() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let path = dir.path().join("events.jsonl");
        let mut w = writer(&path, Some(10));
        assert!(w.write(b"1234\n"));
        assert!(w.write(b"5678\n"));
        assert!(!w.write(b"9\n"), "the 11th byte is past the limit");
        assert!(w.written.capped && !w.written.restarted);
        assert_eq!(text(&path), "1234\n5678\n");
        assert!(!w.write(b"\n"));
    }

    #[test]
    fn an_attempt_whose_first_line_does_not_fit_starts_the_file_afresh() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "old attempt\n").unwrap_or_else(|e| panic!("write: {e}"));
        // Room left: appended.
        let mut w = writer(&path, Some(20));
        assert!(w.write(b"next\n"));
        assert!(!w.written.restarted);
        assert_eq!(text(&path), "old attempt\nnext\n");
        // No room for the first line: started afresh, then appended.
        let mut w = writer(&path, Some(20));
        assert!(w.write(b"new start\n"));
        assert!(w.write(b"log\n"));
        assert!(w.written.restarted && !w.written.capped);
        assert_eq!(text(&path), "new start\nlog\n");
    }

    #[test]
    fn without_a_limit_everything_is_appended() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let path = dir.path().join("events.jsonl");
        let mut w = writer(&path, None);
        for _ in 0..100 {
            assert!(w.write(b"0123456789\n"));
        }
        assert_eq!(text(&path).len(), 1100);
        assert!(w.written.error.is_none() && !w.written.capped);
    }

    #[test]
    fn the_first_write_error_stops_the_writing() {
        let Ok(full) = std::fs::OpenOptions::new().append(true).open("/dev/full") else {
            return;
        };
        let mut w = LineWriter::new(full, None);
        assert!(!w.write(b"x\n"));
        assert!(w.written.error.is_some());
    }
}
