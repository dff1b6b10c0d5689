//! The message decoders: a frame body as `WorkerMsg` (what the host reads)
//! and as `HostMsg` (what the worker reads), and an `agent()` call as the
//! prelude's JSON (`ChildRequest`, what the worker's native parses), plus
//! the JSON payloads the host parses out of a decoded message (a call's
//! schema, the End's value).
//!
//! Invariants checked:
//! - no decoder panics;
//! - a body that decodes re-encodes to bytes that decode to the same
//!   message, no longer than the body, and identical to it unless the body
//!   used an over-long varint (postcard's decoder accepts `0xad 0x00` for
//!   45; its encoder always writes the shortest form): the host acts on
//!   the decoded value only, so that slack is harmless;
//! - a `ChildRequest` that parses from JSON prints to JSON that parses back
//!   to the same request;
//! - the host's handling of a decoded `ChildStart` schema (`check_schema`,
//!   every violation under the `options.schema` path) and of an `End`
//!   value does not panic.
#![no_main]

use dsh_protocol::schema::check_schema;
use dsh_protocol::{ChildRequest, EndOutcome, HostMsg, WorkerMsg, decode, encode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn host_side(msg: &WorkerMsg) {
    match msg {
        WorkerMsg::ChildStart { request, .. } => {
            if let Some(text) = &request.schema_json
                && let Ok(schema) = serde_json::from_str::<Value>(text)
            {
                let problems = check_schema(&schema, "options.schema");
                for p in &problems {
                    assert!(p.path.starts_with("options.schema"), "{p:?}");
                }
            }
        }
        WorkerMsg::End { result } => {
            if let EndOutcome::Completed { value_json } = &result.outcome {
                let _ = serde_json::from_str::<Value>(value_json);
            }
        }
        _ => {}
    }
}

/// The canonical encoding is never longer, and differs only where the
/// input had an over-long varint: some byte with the continuation bit set
/// followed by a zero byte ends a varint that could have been shorter.
fn check_reencoding(canonical: &[u8], data: &[u8]) {
    assert!(canonical.len() <= data.len(), "re-encoding grew the body");
    if canonical != data {
        let overlong = data.windows(2).any(|w| w[0] & 0x80 != 0 && w[1] == 0);
        assert!(
            overlong,
            "re-encoded differently without an over-long varint: {data:?} vs {canonical:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = decode::<WorkerMsg>(data) {
        let frame = encode(&msg, usize::MAX).expect("a decoded WorkerMsg encodes");
        check_reencoding(&frame[4..], data);
        assert_eq!(decode::<WorkerMsg>(&frame[4..]).as_ref(), Ok(&msg));
        host_side(&msg);
    }
    if let Ok(msg) = decode::<HostMsg>(data) {
        let frame = encode(&msg, usize::MAX).expect("a decoded HostMsg encodes");
        check_reencoding(&frame[4..], data);
        assert_eq!(decode::<HostMsg>(&frame[4..]).as_ref(), Ok(&msg));
    }
    if let Ok(request) = serde_json::from_slice::<ChildRequest>(data) {
        let text = serde_json::to_string(&request).expect("a ChildRequest prints");
        let back: ChildRequest = serde_json::from_str(&text).expect("printed JSON parses");
        assert_eq!(back, request);
    }
});
