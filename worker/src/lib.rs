//! `dsh-worker`: runs exactly one workflow script for a dsh host.
//!
//! The host spawns this program with one end of a private socket pair as an
//! inherited file descriptor (`--fd N`). The worker says `Hello`, applies
//! its sandbox for the policy named by `--sandbox` (all but the run's own
//! limits, [`sandbox::early`]) and builds a QuickJS engine with the
//! script-facing hooks ([`engine`]) while it waits, receives `Init`, sets
//! the run's limits, hands the hooks the run's data and compiles the body,
//! reports `Ready`, runs the body after `Go`, and ends with
//! exactly one `End` frame. It owns no subagents: every `agent()` call is
//! an RPC to the host.
//!
//! `dsh-worker tool` is the other mode: one sandboxed tool call of the
//! agent loop (Read, Grep, Bash, …), JSON in on stdin, JSON out on stdout;
//! see [`tools`].
//!
//! `dsh-worker reap -- PROGRAM ...` is the third: a subreaper shim around
//! an agent CLI, so that nothing the CLI starts outlives its call; see
//! [`reap`].
//!
//! This crate is not a general JavaScript runtime: there is no filesystem,
//! network, `process`, `require` or module loader, on purpose.

pub mod alloc;
pub(crate) mod channel;
pub(crate) mod clock;
pub mod engine;
pub(crate) mod logs;
pub mod reap;
pub mod sandbox;
pub(crate) mod timers;
pub mod tools;

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;

use dsh_protocol::{
    DEFAULT_MAX_FRAME_BYTES, EndOutcome, EndResult, ErrorCode, HostMsg, PROTOCOL_VERSION,
    SandboxPolicy, WorkerMsg,
};

use channel::{Channel, ChannelError};

/// Exit status when the host went away or spoke nonsense.
pub(crate) const EXIT_HOST_GONE: i32 = 3;
/// Exit status for a bad command line.
pub(crate) const EXIT_USAGE: i32 = 2;
/// Exit status when an allocation failed under the sandbox's data limit
/// (the `memoryBytes` backstop); the host reports it as `MEMORY`.
pub const EXIT_OUT_OF_MEMORY: i32 = dsh_protocol::WORKER_EXIT_OUT_OF_MEMORY;

/// Runs the worker with the given arguments (without the program name).
/// Returns the process exit status.
pub fn main_with_args<I: IntoIterator<Item = String>>(args: I) -> i32 {
    let mut it = args.into_iter().peekable();
    if it.peek().is_some_and(|a| a == "tool") {
        let rest: Vec<String> = it.skip(1).collect();
        return tools::main(&rest);
    }
    if it.peek().is_some_and(|a| a == "reap") {
        let rest: Vec<String> = it.skip(1).collect();
        return reap::main(&rest);
    }
    let mut fd: Option<i32> = None;
    let mut landlock_abi_override: Option<u32> = None;
    let mut early_policy = SandboxPolicy::Off;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--fd" => fd = it.next().and_then(|v| v.parse().ok()),
            // Testing only: pretend the kernel's Landlock ABI is N.
            "--landlock-abi" => match it.next().and_then(|v| v.parse().ok()) {
                Some(n) => landlock_abi_override = Some(n),
                None => {
                    eprintln!("dsh-worker: --landlock-abi needs a number");
                    return EXIT_USAGE;
                }
            },
            // The run's sandbox policy, applied before `Init` (see
            // `sandbox::early`); without it, all of it after `Init`.
            "--sandbox" => match it.next().map(|v| v.parse::<SandboxPolicy>()) {
                Some(Ok(p)) => early_policy = p,
                Some(Err(e)) => {
                    eprintln!("dsh-worker: --sandbox: {e}");
                    return EXIT_USAGE;
                }
                None => {
                    eprintln!("dsh-worker: --sandbox needs a policy");
                    return EXIT_USAGE;
                }
            },
            other => {
                eprintln!(
                    "dsh-worker: unknown argument {other:?}; this program is started by dsh, not by hand"
                );
                return EXIT_USAGE;
            }
        }
    }
    let Some(fd) = fd.filter(|fd| *fd > 2) else {
        eprintln!(
            "dsh-worker: missing --fd N (the host's socket); this program is started by dsh, not by hand"
        );
        return EXIT_USAGE;
    };
    // SAFETY: `--fd` names the descriptor the host left open for us (its end
    // of the socket pair, moved to that number just before exec), and
    // nothing else in this process owns it: the stream takes it over. std
    // has no safe way to adopt an inherited descriptor. `peer_addr` below
    // refuses anything that is not a connected socket before any other use.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    if stream.peer_addr().is_err() {
        eprintln!("dsh-worker: --fd {fd} is not a connected socket");
        return EXIT_USAGE;
    }
    alloc::exit_on_failure();
    match serve(
        Channel::new(stream, DEFAULT_MAX_FRAME_BYTES),
        landlock_abi_override,
        early_policy,
    ) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dsh-worker: {e}");
            EXIT_HOST_GONE
        }
    }
}

fn serve(
    mut chan: Channel,
    landlock_abi_override: Option<u32>,
    early_policy: SandboxPolicy,
) -> Result<(), ChannelError> {
    chan.send(&WorkerMsg::Hello {
        protocol_version: PROTOCOL_VERSION,
        pid: std::process::id(),
    })?;
    chan.flush()?;
    // Before the engine: nothing of it runs unconfined longer than it must.
    let early = sandbox::early(early_policy, landlock_abi_override);
    // Built while the host prepares `Init` (or while a pool worker waits):
    // see `engine::Engine`.
    let engine = engine::Engine::prepare(chan);
    let init = loop {
        let mut chan = engine.channel();
        chan.wait(None)?;
        match chan.pop() {
            Some(HostMsg::Init(init)) => break init,
            Some(HostMsg::Cancel { .. }) => return Ok(()),
            Some(_) | None => continue,
        }
    };
    let inputs = sandbox::Inputs {
        memory_bytes: init.limits.memory_bytes,
        compute_ms: init.limits.compute_ms,
        landlock_abi_override,
    };
    let sandbox = match sandbox::finish(early, init.sandbox, &inputs) {
        Ok(report) => report,
        Err(refused) => {
            let mut result = EndResult::new(
                EndOutcome::failed(ErrorCode::SandboxUnavailable, refused.to_string()),
                0,
            );
            result.sandbox = Some(refused.reached);
            let mut chan = engine.channel();
            chan.send(&WorkerMsg::End { result })?;
            return chan.flush();
        }
    };
    engine::run(engine, *init, sandbox)
}
