//! The worker's end of the host connection: blocking, single-threaded,
//! framed IO over the inherited unix socket.
//!
//! Outgoing frames are coalesced in a buffer and written when the loop is
//! about to wait (or the buffer grows large), so a burst of `log()` calls
//! costs one `write` instead of one per line. Requests the host answers
//! (`agent()` and `workflow()` calls) go out every [`FLUSH_REQUESTS`]: a
//! script that starts many calls in one turn lets the host work on the
//! first ones while it is still making the rest. Incoming bytes are decoded
//! into an inbox; [`Channel::poll_inbox`] may be called from the engine's
//! interrupt handler, which is how a `Cancel` reaches a script that is
//! spinning in a synchronous loop.
//!
//! A wait that follows a write spins briefly before it blocks (see
//! [`dsh_protocol::spin`]): the host usually answers within microseconds,
//! and waking a process that went to sleep costs more than that on a
//! virtual machine.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use dsh_protocol::spin::Spin;
use dsh_protocol::{FrameBuffer, FrameError, HostMsg, WorkerMsg, encode_into};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{MsgFlags, recv};

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
/// Requests the host answers that are written together at most. With
/// every reply of a turn held until the turn ended, the two processes took
/// turns (16 calls outstanding: one worked while the other waited); eight
/// at a time keeps both busy (measured: 4 and 8 alike, about 1.4× the
/// calls per second of a whole turn; 2 and 12 between; see
/// docs/performance.md).
const FLUSH_REQUESTS: usize = 8;
/// Bytes read from the socket at a time. Above glibc's threshold for
/// serving an allocation with its own `mmap` (128 KiB), so the zeroed
/// buffer comes from fresh zero pages that `calloc` does not write: only
/// the pages a read fills become resident (one for a typical frame).
const READ_CHUNK: usize = 256 * 1024;

pub struct Channel {
    stream: UnixStream,
    frames: FrameBuffer,
    inbox: VecDeque<HostMsg>,
    out: Vec<u8>,
    max_frame: usize,
    /// Set once the host side is gone; later sends are dropped.
    broken: Option<String>,
    spin: Spin,
    /// Where reads land. Allocated once and reused: a fresh 64 KiB array
    /// per read was zeroed every time (measured: 40 % of a worker's
    /// instructions over 1,000 `agent()` calls); untouched pages of this
    /// buffer cost nothing (see [`READ_CHUNK`]).
    buf: Vec<u8>,
    /// Requests in `out` (see [`FLUSH_REQUESTS`]).
    out_requests: usize,
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
            spin: Spin::default(),
            buf: vec![0u8; READ_CHUNK],
            out_requests: 0,
        }
    }

    /// Queues a message; large buffers are written at once, and so is
    /// every [`FLUSH_REQUESTS`]th request the host must answer.
    pub fn send(&mut self, msg: &WorkerMsg) -> Result<(), ChannelError> {
        encode_into(msg, self.max_frame, &mut self.out)?;
        if matches!(
            msg,
            WorkerMsg::ChildStart { .. } | WorkerMsg::WorkflowLoad { .. }
        ) {
            self.out_requests += 1;
        }
        if self.out.len() >= FLUSH_AT || self.out_requests >= FLUSH_REQUESTS {
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
        self.out_requests = 0;
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
    /// whatever arrived into the inbox. A wait that wrote something first
    /// spins for the host's answer before it blocks (see [`Spin`]).
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<(), ChannelError> {
        if !self.inbox.is_empty() {
            return Ok(());
        }
        let wrote = !self.out.is_empty();
        self.flush()?;
        let window = match timeout {
            Some(t) => self.spin.window().min(t),
            None => self.spin.window(),
        };
        if wrote && !window.is_zero() {
            if self.spin_for(window)? {
                self.spin.hit();
                return Ok(());
            }
            self.spin.miss();
        }
        let blocked = Instant::now();
        if self.readable(timeout)? {
            self.read_available()?;
            if wrote {
                self.spin.blocked_for(blocked.elapsed());
            }
        }
        Ok(())
    }

    /// Reads without blocking until bytes arrive or `window` has passed;
    /// true when bytes arrived (they are decoded into the inbox).
    fn spin_for(&mut self, window: Duration) -> Result<bool, ChannelError> {
        let until = Instant::now() + window;
        loop {
            match recv(
                self.stream.as_raw_fd(),
                &mut self.buf,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return Err(ChannelError::Closed),
                Ok(n) => {
                    self.frames.push(&self.buf[..n]);
                    self.decode()?;
                    return Ok(true);
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
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
        let n = loop {
            match self.stream.read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Err(ChannelError::Closed);
        }
        self.frames.push(&self.buf[..n]);
        self.decode()
    }

    /// Moves every complete frame received so far into the inbox.
    fn decode(&mut self) -> Result<(), ChannelError> {
        while let Some(msg) = self.frames.next_msg::<HostMsg>()? {
            self.inbox.push_back(msg);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dsh_protocol::{DEFAULT_MAX_FRAME_BYTES, FrameBuffer, HostMsg, WorkerMsg, encode};

    use super::*;

    fn phase() -> WorkerMsg {
        WorkerMsg::Phase {
            title: "t".into(),
            workflow: None,
        }
    }

    /// A host on a thread: for each frame the worker sends, waits
    /// `delay`, then answers `Go`; after `answers` frames it hangs up.
    fn host(stream: UnixStream, delay: Duration, answers: usize) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let mut stream = stream;
            let mut frames = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
            let mut buf = [0u8; 4096];
            let mut seen = 0;
            while seen < answers {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    return;
                }
                frames.push(&buf[..n]);
                while let Ok(Some(_)) = frames.next_msg::<WorkerMsg>() {
                    seen += 1;
                    std::thread::sleep(delay);
                    let frame = encode(&HostMsg::Go, DEFAULT_MAX_FRAME_BYTES).expect("encodes");
                    if stream.write_all(&frame).is_err() {
                        return;
                    }
                }
            }
        })
    }

    #[test]
    fn answers_arrive_whether_the_wait_spins_or_blocks() {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let host = host(theirs, Duration::ZERO, 20);
        let mut chan = Channel::new(ours, DEFAULT_MAX_FRAME_BYTES);
        for i in 0..20 {
            chan.send(&phase()).expect("queued");
            while chan.pop().is_none() {
                chan.wait(None).expect("the host answers");
            }
            assert!(chan.pop().is_none(), "answer {i}: one Go per frame");
        }
        host.join().expect("host thread");
        // The host hung up: a wait (spinning or not) says so.
        chan.send(&phase()).expect("queued");
        let end = (0..3).find_map(|_| chan.wait(None).err());
        assert!(
            matches!(end, Some(ChannelError::Closed | ChannelError::Io(_))),
            "{end:?}"
        );
    }

    #[test]
    fn a_host_that_answers_late_closes_the_spin_window() {
        const ANSWERS: usize = 12;
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        // 50 ms per answer: no 50 µs spin can see it, unless the worker
        // was preempted that long between its write and its spin; four
        // misses in a row are needed, and twelve answers allow for that.
        let host = host(theirs, Duration::from_millis(50), ANSWERS);
        let mut chan = Channel::new(ours, DEFAULT_MAX_FRAME_BYTES);
        let mut closed_after = None;
        for i in 1..=ANSWERS {
            chan.send(&phase()).expect("queued");
            while chan.pop().is_none() {
                chan.wait(None).expect("the host answers");
            }
            if chan.spin.window().is_zero() {
                closed_after = Some(i);
                break;
            }
        }
        assert!(closed_after.is_some_and(|n| n >= 4), "{closed_after:?}");
        // A wait with nothing written never spins and leaves it alone.
        let _ = chan.wait(Some(Duration::from_millis(1)));
        assert_eq!(chan.spin.window(), Duration::ZERO);
        drop(chan);
        drop(host.join());
    }

    fn call(id: u64) -> WorkerMsg {
        WorkerMsg::ChildStart {
            call_id: id,
            request: dsh_protocol::ChildRequest {
                prompt: "p".into(),
                label: "p".into(),
                phase: None,
                schema_json: None,
                options: Default::default(),
                workflow: None,
            },
        }
    }

    /// Frames already written to the socket, read without waiting.
    fn written(theirs: &UnixStream) -> usize {
        let mut frames = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
        let mut buf = [0u8; 65536];
        let mut n = 0;
        while let Ok(got) = recv(theirs.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            if got == 0 {
                break;
            }
            frames.push(&buf[..got]);
            while frames.next_msg::<WorkerMsg>().expect("decodes").is_some() {
                n += 1;
            }
        }
        n
    }

    #[test]
    fn requests_go_out_in_groups_of_eight_and_other_frames_wait_for_the_wait() {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let mut chan = Channel::new(ours, DEFAULT_MAX_FRAME_BYTES);
        for _ in 0..20 {
            chan.send(&phase()).expect("queued");
        }
        for id in 1..FLUSH_REQUESTS as u64 {
            chan.send(&call(id)).expect("queued");
        }
        assert_eq!(
            written(&theirs),
            0,
            "nothing goes out before the eighth request"
        );
        chan.send(&call(FLUSH_REQUESTS as u64)).expect("queued");
        assert_eq!(
            written(&theirs),
            20 + FLUSH_REQUESTS,
            "the eighth request writes what was queued"
        );
        chan.send(&call(99)).expect("queued");
        assert_eq!(written(&theirs), 0);
        // A wait writes the rest.
        let _ = chan.wait(Some(Duration::ZERO));
        assert_eq!(written(&theirs), 1);
    }
}
