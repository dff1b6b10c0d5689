//! The frame decoder (`dsh_protocol::frame`) on arbitrary bytes, delivered
//! in arbitrary pieces: what a hostile or broken worker can send the host.
//!
//! Invariants checked:
//! - `FrameBuffer` never panics and never returns a body over its limit;
//! - how the bytes are split into reads changes nothing: the frames, the
//!   first error and (without an error) what is left buffered are those of
//!   one single read;
//! - the frames returned are exactly the stream's prefix, header by header
//!   (nothing lost, duplicated or reordered), and `finish` is an error
//!   exactly when bytes are left over;
//! - a body that decodes as a `WorkerMsg` or `HostMsg` re-encodes to a
//!   frame that decodes to the same message and is no longer than the
//!   original (the encoding is the canonical, shortest one).
#![no_main]

use dsh_protocol::{FrameBuffer, FrameError, HostMsg, WorkerMsg, decode, encode};
use libfuzzer_sys::fuzz_target;

/// What feeding a stream produced.
#[derive(Debug, PartialEq)]
struct Outcome {
    frames: Vec<Vec<u8>>,
    error: Option<FrameError>,
    buffered: usize,
    finish_ok: bool,
}

/// Feeds `stream` in pieces of the given lengths (cycled), pulling every
/// complete frame after each push, as the host's reader does; stops at the
/// first error, as the host does (a bad frame ends the run).
fn feed(stream: &[u8], max: usize, pieces: &[usize]) -> Outcome {
    let mut buf = FrameBuffer::new(max);
    let mut frames = Vec::new();
    let mut at = 0;
    let mut n = 0;
    let mut error = None;
    'outer: while at < stream.len() {
        let len = pieces
            .get(n % pieces.len().max(1))
            .copied()
            .unwrap_or(stream.len());
        n += 1;
        let end = (at + len.max(1)).min(stream.len());
        buf.push(&stream[at..end]);
        at = end;
        loop {
            match buf.next_frame() {
                Ok(Some(body)) => {
                    assert!(body.len() <= max, "a body over the limit came out");
                    frames.push(body);
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break 'outer;
                }
            }
        }
    }
    let buffered = buf.buffered();
    let finish_ok = buf.finish().is_ok();
    Outcome {
        frames,
        error,
        buffered,
        finish_ok,
    }
}

fuzz_target!(|data: &[u8]| {
    // Byte 0: the limit (small limits reach the oversized path); byte 1..4:
    // the read sizes; the rest is the stream.
    if data.len() < 4 {
        return;
    }
    let max = match data[0] {
        0 => dsh_protocol::DEFAULT_MAX_FRAME_BYTES,
        m => usize::from(m) * 4,
    };
    let pieces: Vec<usize> = data[1..4]
        .iter()
        .map(|&p| usize::from(p % 17) + 1)
        .collect();
    let stream = &data[4..];

    let whole = feed(stream, max, &[stream.len().max(1)]);
    let split = feed(stream, max, &pieces);
    let bytewise = feed(stream, max, &[1]);
    // After an error the reader stops; how much it had buffered by then
    // depends on the read sizes, so only the frames and the error compare.
    let same = |a: &Outcome, b: &Outcome| {
        a.frames == b.frames
            && a.error == b.error
            && (a.error.is_some() || (a.buffered == b.buffered && a.finish_ok == b.finish_ok))
    };
    assert!(
        same(&whole, &split),
        "read sizes {pieces:?} changed the outcome: {whole:?} vs {split:?}"
    );
    assert!(
        same(&whole, &bytewise),
        "byte-by-byte reads changed the outcome: {whole:?} vs {bytewise:?}"
    );

    // The frames are the stream's prefix, header by header.
    let mut rebuilt = Vec::new();
    for body in &whole.frames {
        rebuilt.extend_from_slice(&(body.len() as u32).to_le_bytes());
        rebuilt.extend_from_slice(body);
    }
    assert!(
        stream.starts_with(&rebuilt),
        "frames are not the stream's prefix"
    );
    if whole.error.is_none() {
        assert_eq!(rebuilt.len() + whole.buffered, stream.len(), "bytes lost");
        assert_eq!(whole.finish_ok, whole.buffered == 0);
    } else {
        assert!(
            matches!(whole.error, Some(FrameError::Oversized { len, max: m }) if len > m && m == max)
        );
    }

    for body in &whole.frames {
        if let Ok(msg) = decode::<WorkerMsg>(body) {
            let again = encode(&msg, usize::MAX).expect("a decoded WorkerMsg encodes");
            assert!(again.len() - 4 <= body.len(), "re-encoding grew the frame");
            assert_eq!(decode::<WorkerMsg>(&again[4..]).as_ref(), Ok(&msg));
        }
        if let Ok(msg) = decode::<HostMsg>(body) {
            let again = encode(&msg, usize::MAX).expect("a decoded HostMsg encodes");
            assert!(again.len() - 4 <= body.len(), "re-encoding grew the frame");
            assert_eq!(decode::<HostMsg>(&again[4..]).as_ref(), Ok(&msg));
        }
    }
});
