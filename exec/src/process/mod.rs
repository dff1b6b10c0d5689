//! Child processes: every process the host starts — a workflow's worker,
//! a warm pool's idle worker, an agent CLI of the command provider — is
//! spawned, supervised and ended here, one way.
//!
//! - [`spawner`]: children are forked from one long-lived thread with a
//!   parent-death signal, so a host killed by SIGKILL leaves none behind.
//! - [`group`]: each child leads its own process group; its exit is
//!   observed *without* reaping it, so the group can still be killed
//!   (grandchildren included) before the leader is reaped and its pid can
//!   be reused. Stopping is explicit steps: SIGTERM, a grace, SIGKILL,
//!   reap ([`Termination`] says which step ended it).
//! - [`status`]: exit statuses in words, for messages.
//!
//! What the child is for (the worker's socket, an agent's pipes) is its
//! owner's business: `run/worker.rs`, `pool.rs`,
//! `providers/command/process.rs`.

pub mod group;
pub mod placement;
pub mod spawner;
pub mod status;

pub use group::{ProcessGroup, Termination};
pub use status::describe_status;
