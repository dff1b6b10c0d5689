//! `dsh-exec`: how dsh workflow touches the operating system on the host.
//!
//! - [`process`]: every child process the host starts (workers, agent
//!   CLIs, `command` programs, the tool host) runs in a process group of
//!   its own and is ended by group, grace then kill;
//! - [`reset`]: what such a child resets between `fork` and `exec`;
//! - [`program`]: the program dsh runs as its own worker, reaper and tool
//!   host ([`WorkerCommand`]);
//! - [`files`]: files the host reads or writes on a user's behalf, read
//!   bounded and without following a hostile path.
//!
//! It is shared by the engine (workers) and the providers (agent CLIs, the
//! command provider, the tool host), so neither imports the other. It
//! knows nothing of scripts, runs or agent calls.

pub mod files;
pub mod process;
pub mod program;
pub mod reset;

pub use program::{WorkerCommand, WorkerMissing};
pub use reset::{NSIG, cloexec_inherited, default_signals};
