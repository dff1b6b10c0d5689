//! `dsh-worker`: runs exactly one workflow script for a dsh host.
//!
//! The host spawns this program with one end of a private socket pair as an
//! inherited file descriptor (`--fd N`; the host passes its stdin, 0) and
//! its own pid (`--parent PID`: the worker arms its parent-death signal
//! itself, so the host can spawn it without running code between fork and
//! exec). The worker reads its sandbox policy from the socket (the
//! [`dsh_protocol::policy_line`]), says `Hello`, applies
//! its sandbox for that policy (all but the run's own
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
pub(crate) mod fork_server;
pub(crate) mod logs;
pub mod prefork;
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
    let Testing {
        landlock_abi_override,
        server_dies,
    } = match Testing::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("dsh-worker: {TESTING_VAR}: {e}");
            return EXIT_USAGE;
        }
    };
    let mut it = args.into_iter().peekable();
    if it.peek().is_some_and(|a| a == "tool") {
        let rest: Vec<String> = it.skip(1).collect();
        return tools::main(&rest, landlock_abi_override);
    }
    if it.peek().is_some_and(|a| a == "reap") {
        let rest: Vec<String> = it.skip(1).collect();
        return reap::main(&rest);
    }
    let mut fd: Option<i32> = None;
    let mut parent: Option<Option<i32>> = None;
    let mut role = Role::Worker;
    while let Some(a) = it.next() {
        match a.as_str() {
            // Fork workers for the host instead of being one (see
            // `fork_server`).
            "--fork-server" => role = Role::ForkServer,
            "--fd" => fd = it.next().and_then(|v| v.parse().ok()),
            "--parent" => parent = Some(it.next().and_then(|v| v.parse().ok())),
            other => {
                eprintln!(
                    "dsh-worker: unknown argument {other:?}; this program is started by dsh, not by hand"
                );
                return EXIT_USAGE;
            }
        }
    }
    // 0 (stdin) or any descriptor past stderr: never the two a message
    // to the user goes through.
    let Some(fd) = fd.filter(|fd| *fd == 0 || *fd > 2) else {
        eprintln!(
            "dsh-worker: missing --fd N (the host's socket: 0, or 3 and above); this program is started by dsh, not by hand"
        );
        return EXIT_USAGE;
    };
    // Nothing but stdio and the socket: see `close_inherited_except`.
    #[cfg(target_os = "linux")]
    prefork::close_inherited_except(fd);
    match parent {
        None => {}
        Some(Some(pid)) if pid > 0 => die_with_parent(pid),
        Some(_) => {
            eprintln!("dsh-worker: --parent needs the host's process id");
            return EXIT_USAGE;
        }
    }
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
    match (role, parent) {
        (Role::Worker, _) => serve_stream(stream, landlock_abi_override),
        (Role::ForkServer, Some(Some(host))) => {
            fork_server::serve(stream, host.unsigned_abs(), server_dies)
        }
        (Role::ForkServer, _) => {
            eprintln!("dsh-worker: --fork-server needs --parent PID");
            EXIT_USAGE
        }
    }
}

/// A `DSH_WORKER_TESTING` switch this worker does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum TestingError {
    /// `landlock-abi=` without a number.
    #[error("landlock-abi needs a number, not {0:?}")]
    LandlockAbi(String),
    /// A switch of no known name.
    #[error("unknown switch {0:?}")]
    Unknown(String),
}

/// The environment variable of the testing switches ([`Testing`]).
const TESTING_VAR: &str = "DSH_WORKER_TESTING";

/// Switches only tests use, kept out of the worker's arguments: read from
/// `DSH_WORKER_TESTING`, comma-separated. The host starts every worker
/// with an empty environment, so only a test's wrapper script (a
/// `WorkerCommand` running `sh -c 'DSH_WORKER_TESTING=… exec dsh __worker
/// "$@"'`) can set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Testing {
    /// `landlock-abi=N`: pretend the kernel's Landlock ABI is N.
    landlock_abi_override: Option<u32>,
    /// `server-dies-after-fork`: a fork server exits right after its
    /// first fork, without answering (a server dying mid-request).
    server_dies: fork_server::AfterFork,
}

impl Testing {
    fn from_env() -> Result<Testing, TestingError> {
        Testing::parse(&std::env::var(TESTING_VAR).unwrap_or_default())
    }

    fn parse(value: &str) -> Result<Testing, TestingError> {
        let mut t = Testing {
            landlock_abi_override: None,
            server_dies: fork_server::AfterFork::Answer,
        };
        for switch in value.split(',').filter(|s| !s.is_empty()) {
            match switch.split_once('=') {
                Some(("landlock-abi", n)) => match n.parse() {
                    Ok(n) => t.landlock_abi_override = Some(n),
                    Err(_) => return Err(TestingError::LandlockAbi(n.to_string())),
                },
                None if switch == "server-dies-after-fork" => {
                    t.server_dies = fork_server::AfterFork::Die;
                }
                _ => return Err(TestingError::Unknown(switch.to_string())),
            }
        }
        Ok(t)
    }
}

/// What `dsh-worker` was started as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// One run's worker (the default).
    Worker,
    /// A server forking workers for the host (`--fork-server`).
    ForkServer,
}

/// Serves one run over `stream` (the host's socket), from the policy line
/// to `End`; returns the exit status. Shared by the exec'd worker and the
/// forked one ([`prefork`]).
pub(crate) fn serve_stream(mut stream: UnixStream, landlock_abi_override: Option<u32>) -> i32 {
    let early_policy = match dsh_protocol::policy_line::read(&mut stream) {
        Ok(Some(p)) => p,
        // The host went away without a run for this worker.
        Ok(None) => return 0,
        Err(e) => {
            eprintln!("dsh-worker: {e}");
            return EXIT_HOST_GONE;
        }
    };
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

/// Exit status when the host was gone before the parent-death signal was
/// armed (the status the host gives a child whose signal it arms itself).
const EXIT_PARENT_GONE: i32 = 111;

/// Arms SIGKILL for when the host (the thread that spawned this process)
/// dies, then checks it had not died already: a process reparented before
/// the signal was armed would otherwise never get it. A parent that is
/// alive but not `parent` is a wrapper that forked this process (a
/// `DSH_WORKER` script); it is left alone.
pub(crate) fn die_with_parent(parent: i32) {
    #[cfg(target_os = "linux")]
    {
        use nix::errno::Errno;
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::{Pid, getppid};
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            eprintln!("dsh-worker: cannot arm the parent-death signal: {e}");
        }
        if getppid() != Pid::from_raw(parent)
            && kill(Pid::from_raw(parent), None) == Err(Errno::ESRCH)
        {
            std::process::exit(EXIT_PARENT_GONE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
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
    let sandbox = match sandbox::finish(early, &inputs) {
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

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::{Testing, fork_server::AfterFork};

    #[rstest]
    #[case::none("", None, AfterFork::Answer)]
    #[case::abi("landlock-abi=0", Some(0), AfterFork::Answer)]
    #[case::both("server-dies-after-fork,landlock-abi=7", Some(7), AfterFork::Die)]
    fn testing_switches_are_read_from_one_variable(
        #[case] value: &str,
        #[case] abi: Option<u32>,
        #[case] dies: AfterFork,
    ) {
        let t = Testing::parse(value).expect("valid");
        assert_eq!((t.landlock_abi_override, t.server_dies), (abi, dies));
    }

    #[rstest]
    #[case::bad_number("landlock-abi=x")]
    #[case::unknown("sandbox=off")]
    fn a_malformed_switch_is_refused(#[case] value: &str) {
        assert!(Testing::parse(value).is_err(), "{value}");
    }
}
