//! Length-prefixed framing: `u32` little-endian length, then the postcard
//! encoding of one message.
//!
//! [`FrameBuffer`] is the receiving side for both peers: bytes go in as they
//! arrive, whole messages come out. The declared length is checked against
//! the limit *before* any byte of the body is buffered, so a hostile peer can
//! never make the receiver allocate more than the limit.

use serde::{Serialize, de::DeserializeOwned};

/// Default hard maximum of one frame's body (16 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

const HEADER: usize = 4;

/// Why bytes could not become a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A received header declares a body over the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversized {
        /// The declared body length.
        len: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({have} of {want} bytes received)")]
    Truncated {
        /// Bytes of the frame (header included) that arrived.
        have: usize,
        /// Bytes the frame needed (header included).
        want: usize,
    },
    /// The body is not a valid message (or the message could not be encoded).
    #[error("undecodable frame: {0}")]
    Decode(String),
    /// The message's encoding is over the sender's limit; nothing was sent.
    #[error("message of {len} bytes is too large to send (limit {max} bytes)")]
    TooLargeToSend {
        /// The encoded body length.
        len: usize,
        /// The sender's limit.
        max: usize,
    },
}

/// Encodes `msg` as one frame (header included). Fails when the encoding
/// would exceed `max` bytes, so a sender never produces a frame its peer must
/// reject.
pub fn encode<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_into(msg, max, &mut out)?;
    Ok(out)
}

/// [`encode`], appending the frame to `out` (a sender's buffer of frames
/// not yet written: no buffer of its own per frame). On an error `out` is
/// left as it was.
pub fn encode_into<T: Serialize>(msg: &T, max: usize, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    let header = match postcard::to_extend(msg, Append(out)) {
        Ok(_) => {
            let len = out.len() - start - HEADER;
            u32::try_from(len)
                .ok()
                .filter(|_| len <= max)
                .ok_or(FrameError::TooLargeToSend { len, max })
        }
        Err(e) => Err(FrameError::Decode(e.to_string())),
    };
    match header {
        Ok(header) => {
            out[start..start + HEADER].copy_from_slice(&header.to_le_bytes());
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// A buffer postcard appends to in place (it takes its writer by value).
struct Append<'a>(&'a mut Vec<u8>);

impl Extend<u8> for Append<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

/// Decodes one frame body (without header).
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    let (msg, rest) =
        postcard::take_from_bytes::<T>(body).map_err(|e| FrameError::Decode(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::Decode(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    Ok(msg)
}

/// A [`FrameBuffer`] keeps at most this much capacity between frames.
const KEEP_CAPACITY: usize = 256 * 1024;

/// Accumulates received bytes and yields whole frames.
///
/// Returned frames are not removed from the front of the buffer one by one
/// (that moves every byte behind them, so a push holding many small frames
/// would cost quadratic time): a read offset marks what was consumed, and
/// the consumed prefix is dropped once per [`FrameBuffer::push`], before the
/// new bytes are appended.
#[derive(Debug)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    max: usize,
}

impl FrameBuffer {
    /// An empty buffer that rejects frames whose body exceeds `max` bytes.
    pub fn new(max: usize) -> Self {
        FrameBuffer {
            buf: Vec::new(),
            start: 0,
            max,
        }
    }

    /// Appends received bytes. Call [`FrameBuffer::next_frame`] until it
    /// returns `Ok(None)` after every push, so the buffer never holds more
    /// than one partial frame.
    pub fn push(&mut self, bytes: &[u8]) {
        self.compact();
        // A frame's header says how long it is: room for exactly that, so
        // a large frame does not grow the buffer to twice its size.
        if let Some(len) = self.declared_len()
            && len <= self.max
        {
            let want = (HEADER + len).saturating_sub(self.buf.len());
            self.buf.reserve_exact(want.max(bytes.len()));
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Drops the consumed prefix: one move of the unconsumed bytes.
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
        } else if self.start > 0 {
            self.buf.drain(..self.start);
        }
        self.start = 0;
    }

    /// The bytes received but not yet returned as frames.
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The body length the pending bytes declare, once their header is in.
    fn declared_len(&self) -> Option<usize> {
        let header: [u8; HEADER] = self.pending().get(..HEADER)?.try_into().ok()?;
        Some(u32::from_le_bytes(header) as usize)
    }

    /// The next complete frame body, `Ok(None)` when more bytes are needed.
    /// An oversized declared length is an error as soon as the header is in.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(len) = self.complete_len()? else {
            return Ok(None);
        };
        let body = self.pending()[HEADER..HEADER + len].to_vec();
        self.consume(len);
        Ok(Some(body))
    }

    /// The body length of the frame at the front once all of it is in;
    /// an oversized declared length is an error as soon as the header is.
    fn complete_len(&self) -> Result<Option<usize>, FrameError> {
        let Some(len) = self.declared_len() else {
            return Ok(None);
        };
        if len > self.max {
            return Err(FrameError::Oversized { len, max: self.max });
        }
        Ok((self.pending().len() >= HEADER + len).then_some(len))
    }

    /// Marks the frame of body length `len` at the front as consumed.
    fn consume(&mut self, len: usize) {
        self.start += HEADER + len;
        if self.start == self.buf.len() {
            // Everything was consumed: reuse the allocation from the front,
            // unless a large frame made it large (it is not kept for the
            // rest of the run).
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf.shrink_to(KEEP_CAPACITY);
            }
        }
    }

    /// The next complete message, decoded from the buffer in place (the
    /// body is not copied out first).
    pub fn next_msg<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        let Some(len) = self.complete_len()? else {
            return Ok(None);
        };
        let msg = decode(&self.pending()[HEADER..HEADER + len]);
        self.consume(len);
        msg.map(Some)
    }

    /// Call at end of stream: an error when a partial frame is left.
    pub fn finish(&self) -> Result<(), FrameError> {
        let have = self.buffered();
        if have == 0 {
            return Ok(());
        }
        let want = self
            .declared_len()
            .map_or(HEADER, |len| HEADER.saturating_add(len));
        Err(FrameError::Truncated { have, want })
    }

    /// How many received bytes have not been returned as frames yet.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many small frames in one push (what a burst of `Log` frames looks
    /// like) all come out, in order, with nothing left over. Before the read
    /// offset each frame drained the buffer's front, moving every byte behind
    /// it: quadratic in the number of frames per push.
    #[test]
    fn many_small_frames_in_one_push_decode_in_order() {
        const N: u32 = 100_000;
        let mut bytes = Vec::new();
        for i in 0..N {
            bytes.extend_from_slice(&encode(&i, 64).expect("encode"));
        }
        let mut buf = FrameBuffer::new(64);
        buf.push(&bytes);
        for i in 0..N {
            assert_eq!(buf.next_msg::<u32>().expect("decode"), Some(i));
        }
        assert_eq!(buf.next_frame().expect("empty"), None);
        assert_eq!(buf.buffered(), 0);
        buf.finish().expect("nothing left over");
    }

    /// A partial frame left behind survives the compaction of the next push.
    #[test]
    fn a_partial_frame_survives_compaction() {
        let one = encode(&"one", 64).expect("encode");
        let two = encode(&"two", 64).expect("encode");
        let mut first = one.clone();
        first.extend_from_slice(&two[..3]);
        let mut buf = FrameBuffer::new(64);
        buf.push(&first);
        assert_eq!(
            buf.next_msg::<String>().expect("decode"),
            Some("one".into())
        );
        assert_eq!(buf.next_frame().expect("partial"), None);
        assert_eq!(buf.buffered(), 3);
        assert!(matches!(
            buf.finish(),
            Err(FrameError::Truncated { have: 3, want: 4 })
        ));
        buf.push(&two[3..]);
        assert_eq!(
            buf.next_msg::<String>().expect("decode"),
            Some("two".into())
        );
        assert_eq!(buf.buffered(), 0);
    }
}
