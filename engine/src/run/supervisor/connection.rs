//! The supervisor's end of the worker's socket: frames in, frames out.
//!
//! The write half is owned here, not by a writer task: frames queued
//! during one turn of the supervisor's loop go out together at the start
//! of the next (one write, one wake-up of the worker). A worker that stops
//! reading never blocks the supervisor: what does not fit waits for the
//! socket to become writable.
//!
//! After a write the supervisor may spin briefly for the worker's next
//! frame ([`Inbound::spin_read`], bounded by [`dsh_protocol::spin::Spin`])
//! instead of going back to the runtime to sleep: the worker's next
//! `agent()` call often follows within microseconds, and waking a thread
//! whose vCPU went idle costs more than that.

use std::os::fd::AsRawFd;
use std::time::Duration;

use dsh_protocol::{
    DEFAULT_MAX_FRAME_BYTES, FrameBuffer, FrameError, HostMsg, WorkerMsg, encode_into,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

const READ_CHUNK: usize = 64 * 1024;

/// Whether frames may still go out.
enum Outbox {
    /// Encoded frames not yet written (the worker may be slow to read).
    Open(Vec<u8>),
    /// The run settled (or the worker is gone): later frames are dropped.
    Closed,
}

/// What a read from the worker brought.
pub(super) enum Read {
    /// Bytes arrived; decode them with [`Inbound::next_msg`].
    Data,
    /// The worker closed its end.
    Eof,
    /// The read failed (usually: the worker died).
    Failed(std::io::Error),
}

/// The socket, split so that reading and waiting for room to write can be
/// awaited at once.
pub(super) struct Connection {
    pub(super) inbound: Inbound,
    pub(super) outbound: Outbound,
}

/// Frames from the worker.
pub(super) struct Inbound {
    reader: OwnedReadHalf,
    frames: FrameBuffer,
    buf: Vec<u8>,
}

/// Frames to the worker.
pub(super) struct Outbound {
    writer: OwnedWriteHalf,
    outbox: Outbox,
}

impl Connection {
    pub(super) fn new(socket: tokio::net::UnixStream) -> Connection {
        let (reader, writer) = socket.into_split();
        Connection {
            inbound: Inbound {
                reader,
                frames: FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES),
                buf: vec![0u8; READ_CHUNK],
            },
            outbound: Outbound {
                writer,
                outbox: Outbox::Open(Vec::new()),
            },
        }
    }
}

/// Writing to the worker failed for another reason than the worker being
/// gone: the run must end (a frame that cannot be delivered would leave
/// the script waiting forever).
#[derive(Debug, thiserror::Error)]
#[error("writing to the worker failed: {0}")]
pub(super) struct WriteFailed(std::io::Error);

impl Outbound {
    /// Queues `msg` (dropped once the outbox is closed).
    pub(super) fn send(&mut self, msg: &HostMsg) -> Result<(), FrameError> {
        if let Outbox::Open(out) = &mut self.outbox {
            encode_into(msg, DEFAULT_MAX_FRAME_BYTES, out)?;
        }
        Ok(())
    }

    /// No more frames go out (they would reach a settled run's worker).
    /// What is already queued is still written by [`Outbound::shutdown`].
    pub(super) fn close_outbox(&mut self) -> Vec<u8> {
        match std::mem::replace(&mut self.outbox, Outbox::Closed) {
            Outbox::Open(out) => out,
            Outbox::Closed => Vec::new(),
        }
    }

    /// Writes what was queued before the outbox closed, then shuts down
    /// the write half; bounded by `bound`.
    pub(super) async fn shutdown(&mut self, queued: Vec<u8>, bound: Duration) -> bool {
        let writer = &mut self.writer;
        let flushed = tokio::time::timeout(bound, async {
            if !queued.is_empty() {
                writer.write_all(&queued).await?;
            }
            writer.shutdown().await
        })
        .await;
        matches!(flushed, Ok(Ok(())))
    }

    fn has_pending(&self) -> bool {
        matches!(&self.outbox, Outbox::Open(out) if !out.is_empty())
    }

    /// Writes queued frames without blocking; true when bytes went out.
    /// `Err` is a write failure other than the worker being gone: a frame
    /// that cannot be delivered would leave the script waiting forever, so
    /// the run must end.
    pub(super) fn flush(&mut self) -> Result<bool, WriteFailed> {
        let Outbox::Open(out) = &mut self.outbox else {
            return Ok(false);
        };
        let mut written = 0;
        let res = loop {
            if written == out.len() {
                break Ok(());
            }
            match self.writer.try_write(&out[written..]) {
                Ok(0) => break Ok(()),
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // The worker is gone: the read side and the process wait
                // report how (with its exit status).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    out.clear();
                    return Ok(false);
                }
                Err(e) => break Err(WriteFailed(e)),
            }
        };
        // One move of what is left, not one per partial write.
        out.drain(..written);
        if res.is_err() {
            out.clear();
        }
        res.map(|()| written > 0)
    }

    /// Resolves when the socket can take more of what is queued; never
    /// when nothing is queued.
    pub(super) async fn writable(&self) {
        if self.has_pending() {
            let _ = self.writer.writable().await;
        } else {
            std::future::pending::<()>().await
        }
    }
}

impl Inbound {
    /// Reads what the worker sent (cancel-safe).
    pub(super) async fn read(&mut self) -> Read {
        match self.reader.read(&mut self.buf).await {
            Ok(0) => Read::Eof,
            Ok(n) => {
                self.frames.push(&self.buf[..n]);
                Read::Data
            }
            Err(e) => Read::Failed(e),
        }
    }

    /// Reads without blocking until bytes arrive or `window` has passed;
    /// `None` when nothing came. The socket is read directly, not through
    /// the runtime, whose readiness flag is only refreshed while the
    /// thread sleeps in the reactor (data consumed here just makes its
    /// next readiness report a spurious one, which the read handles).
    pub(super) fn spin_read(&mut self, window: Duration) -> Option<Read> {
        let fd = self.reader.as_ref().as_raw_fd();
        let until = std::time::Instant::now() + window;
        loop {
            match nix::sys::socket::recv(
                fd,
                &mut self.buf,
                nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return Some(Read::Eof),
                Ok(n) => {
                    self.frames.push(&self.buf[..n]);
                    return Some(Read::Data);
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(e) => return Some(Read::Failed(e.into())),
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// The next complete message, if one arrived.
    pub(super) fn next_msg(&mut self) -> Result<Option<WorkerMsg>, FrameError> {
        self.frames.next_msg::<WorkerMsg>()
    }

    /// At the end of the stream: an error when a frame was cut off.
    pub(super) fn finish_frames(&self) -> Result<(), FrameError> {
        self.frames.finish()
    }

    /// Reads what the worker wrote before it exited, for at most `bound`;
    /// the messages are left for [`Inbound::next_msg`]. Returns early
    /// (`true`) when data arrived, so the caller can decode it.
    pub(super) async fn read_for(&mut self, bound: tokio::time::Instant) -> bool {
        matches!(
            tokio::time::timeout_at(bound, self.read()).await,
            Ok(Read::Data)
        )
    }
}
