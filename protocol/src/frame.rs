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
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversized { len: usize, max: usize },
    #[error("stream ended inside a frame ({have} of {want} bytes received)")]
    Truncated { have: usize, want: usize },
    #[error("undecodable frame: {0}")]
    Decode(String),
    #[error("message of {len} bytes is too large to send (limit {max} bytes)")]
    TooLargeToSend { len: usize, max: usize },
}

/// Encodes `msg` as one frame (header included). Fails when the encoding
/// would exceed `max` bytes, so a sender never produces a frame its peer must
/// reject.
pub fn encode<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; HEADER];
    let mut out = postcard::to_extend(msg, std::mem::take(&mut out))
        .map_err(|e| FrameError::Decode(e.to_string()))?;
    let len = out.len() - HEADER;
    if len > max {
        return Err(FrameError::TooLargeToSend { len, max });
    }
    let header = u32::try_from(len).map_err(|_| FrameError::TooLargeToSend { len, max })?;
    out[..HEADER].copy_from_slice(&header.to_le_bytes());
    Ok(out)
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

/// Accumulates received bytes and yields whole frames.
#[derive(Debug)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    max: usize,
}

impl FrameBuffer {
    pub fn new(max: usize) -> Self {
        FrameBuffer {
            buf: Vec::new(),
            max,
        }
    }

    /// Appends received bytes. Call [`FrameBuffer::next_frame`] until it
    /// returns `Ok(None)` after every push, so the buffer never holds more
    /// than one partial frame.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame body, `Ok(None)` when more bytes are needed.
    /// An oversized declared length is an error as soon as the header is in.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let mut header = [0u8; HEADER];
        header.copy_from_slice(&self.buf[..HEADER]);
        let len = u32::from_le_bytes(header) as usize;
        if len > self.max {
            return Err(FrameError::Oversized { len, max: self.max });
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let body = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some(body))
    }

    /// The next complete message, decoded.
    pub fn next_msg<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        match self.next_frame()? {
            Some(body) => decode(&body).map(Some),
            None => Ok(None),
        }
    }

    /// Call at end of stream: an error when a partial frame is left.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let want = if self.buf.len() >= HEADER {
            let mut header = [0u8; HEADER];
            header.copy_from_slice(&self.buf[..HEADER]);
            HEADER + u32::from_le_bytes(header) as usize
        } else {
            HEADER
        };
        Err(FrameError::Truncated {
            have: self.buf.len(),
            want,
        })
    }

    /// How many bytes the buffer needs before the next frame could complete;
    /// lets a reader size its next read without over-reading.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}
