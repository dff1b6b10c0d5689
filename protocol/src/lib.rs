//! The wire protocol between the dsh host (the `dsh-orchestrator` crate) and
//! one workflow worker process (`dsh-worker`).
//!
//! This crate is *sans-io*: it defines the messages ([`WorkerMsg`],
//! [`HostMsg`]), their framing ([`frame`]) and the JSON Schema subset both
//! sides check against ([`schema`]). It does not open sockets or spawn
//! anything.
//!
//! Frames are a `u32` little-endian length followed by a postcard-encoded
//! message. JSON payloads (args, return values, schemas, structured answers)
//! travel as JSON *text* inside the messages, so the wire format never has to
//! model arbitrary JSON and the receiver parses them with its own limits.
//!
//! The host treats every byte from the worker as hostile: decoding never
//! panics and never allocates more than the frame limit.

#![warn(missing_docs)]

pub mod codes;
pub mod frame;
pub mod messages;
pub mod policy_line;
pub mod schema;
pub mod spin;

pub use codes::ErrorCode;
pub use frame::{DEFAULT_MAX_FRAME_BYTES, FrameBuffer, FrameError, decode, encode, encode_into};
pub use messages::*;

/// Version of this protocol. The worker announces it in [`WorkerMsg::Hello`];
/// the host refuses a worker that speaks another one. Version 3 made
/// [`EndResult`] carry an [`EndOutcome`]; version 6 added nested workflows
/// ([`WorkerMsg::WorkflowLoad`]) and `stall_ms` and `disallowed_tools` in
/// [`AgentOptions`] (a `ChildStart` frame of version 5 no longer decodes);
/// version 7 added the cache tokens and the cost to [`Usage`]; version 9
/// sends [`HostMsg::Go`] with [`HostMsg::Init`], and the worker checks for
/// a [`HostMsg::Cancel`] behind it before it runs the body; version 10
/// adds [`WorkerMsg::ChildQueued`], a call waiting for a slot; version 11
/// takes the sandbox policy out of [`Init`]: the [`policy_line`] before
/// `Hello` is the only way it reaches the worker.
pub const PROTOCOL_VERSION: u32 = 11;

/// The worker's exit status when an allocation failed under the sandbox's
/// data limit: the host reports such a death as `MEMORY`.
pub const WORKER_EXIT_OUT_OF_MEMORY: i32 = 86;

#[cfg(test)]
mod tests;
