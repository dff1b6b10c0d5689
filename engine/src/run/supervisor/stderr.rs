//! The worker's stderr: drained continuously into the host's tracing, so
//! a chatty worker never blocks on a full pipe.

use std::sync::Arc;

use tokio::io::AsyncReadExt;

/// Longest stderr line kept; the rest of a longer line is dropped, so a
/// worker cannot make the host buffer an unbounded line.
const STDERR_LINE_MAX: usize = 4096;

/// Reads the worker's stderr to its end, one tracing line per line.
pub(super) async fn drain(mut stderr: dsh_exec::process::group::Stderr, run_id: Arc<str>) {
    let mut chunk = [0u8; 4096];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                tracing::debug!(target: "dsh::worker", run = %run_id, "{}", String::from_utf8_lossy(&line));
                line.clear();
            } else if line.len() < STDERR_LINE_MAX {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        tracing::debug!(target: "dsh::worker", run = %run_id, "{}", String::from_utf8_lossy(&line));
    }
}
