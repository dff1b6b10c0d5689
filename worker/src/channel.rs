//! The worker's end of the host connection: blocking, single-threaded,
//! framed IO over the inherited unix socket.
//!
//! Outgoing frames are coalesced in a buffer and written when the loop is
//! about to wait (or the buffer grows large), so a burst of `log()` calls
//! costs one `write` instead of one per line. Incoming bytes are decoded
//! into an inbox; [`Channel::poll_inbox`] may be called from the engine's
//! interrupt handler, which is how a `Cancel` reaches a script that is
//! spinning in a synchronous loop.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use dsh_protocol::{FrameBuffer, FrameError, HostMsg, WorkerMsg, encode};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Why the connection to the host is unusable. The worker cannot report
/// anything once this happens; it exits.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the host closed the connection")]
    Closed,
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame from the host: {0}")]
    Frame(#[from] FrameError),
}

const FLUSH_AT: usize = 64 * 1024;

pub struct Channel {
    stream: UnixStream,
    frames: FrameBuffer,
    inbox: VecDeque<HostMsg>,
    out: Vec<u8>,
    max_frame: usize,
    /// Set once the host side is gone; later sends are dropped.
    broken: Option<String>,
}

impl Channel {
    pub fn new(stream: UnixStream, max_frame: usize) -> Self {
        Channel {
            stream,
            frames: FrameBuffer::new(max_frame),
            inbox: VecDeque::new(),
            out: Vec::with_capacity(4096),
            max_frame,
            broken: None,
        }
    }

    /// Queues a message; large buffers are written at once.
    pub fn send(&mut self, msg: &WorkerMsg) -> Result<(), ChannelError> {
        let frame = encode(msg, self.max_frame)?;
        self.out.extend_from_slice(&frame);
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), ChannelError> {
        if let Some(why) = &self.broken {
            return Err(ChannelError::Io(std::io::Error::other(why.clone())));
        }
        if self.out.is_empty() {
            return Ok(());
        }
        let res = self.stream.write_all(&self.out);
        self.out.clear();
        if let Err(e) = res {
            self.broken = Some(e.to_string());
            return Err(e.into());
        }
        Ok(())
    }

    /// The next decoded message, if one is already in.
    pub fn pop(&mut self) -> Option<HostMsg> {
        self.inbox.pop_front()
    }

    /// Waits up to `timeout` (forever when `None`) for bytes and decodes
    /// whatever arrived into the inbox.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<(), ChannelError> {
        if !self.inbox.is_empty() {
            return Ok(());
        }
        self.flush()?;
        if self.readable(timeout)? {
            self.read_available()?;
        }
        Ok(())
    }

    /// Non-blocking: decodes whatever bytes are already there. Returns true
    /// when the inbox holds a `Cancel`.
    pub fn poll_inbox(&mut self) -> Result<bool, ChannelError> {
        if self.readable(Some(Duration::ZERO))? {
            self.read_available()?;
        }
        Ok(self
            .inbox
            .iter()
            .any(|m| matches!(m, HostMsg::Cancel { .. })))
    }

    fn readable(&self, timeout: Option<Duration>) -> Result<bool, ChannelError> {
        // Longer than poll can say (about 24 days) waits as long as it can.
        let timeout = match timeout {
            None => PollTimeout::NONE,
            Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
        };
        loop {
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(n) => return Ok(n > 0),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
    }

    fn read_available(&mut self) -> Result<(), ChannelError> {
        let mut chunk = [0u8; 64 * 1024];
        let n = loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Err(ChannelError::Closed);
        }
        self.frames.push(&chunk[..n]);
        while let Some(msg) = self.frames.next_msg::<HostMsg>()? {
            self.inbox.push_back(msg);
        }
        Ok(())
    }
}
