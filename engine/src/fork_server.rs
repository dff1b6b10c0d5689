//! The fork server: one worker process, exec'd once, that forks the
//! workers of many runs (`dsh-worker --fork-server`). A run started
//! through it skips the exec of the worker binary, the dynamic loader and
//! the fresh image's page faults (docs/performance.md, "Round 9": 100 runs
//! started at once finish in about a third less time).
//!
//! What does not change: every worker is still a process of its own,
//! forked fresh for one run and never reused; it is the host's child (the
//! server forks it with `CLONE_PARENT`), leads its own process group, has
//! its parent-death signal armed against the host, and is ended and
//! reaped by the host like a spawned worker ([`dsh_exec::process`]). It has
//! an empty environment, runs in `/`, holds only its socket, `/dev/null`
//! and its stderr pipe, and applies the run's sandbox policy itself right
//! after `Hello`, at the same point a spawned worker does. The server
//! runs no script and is not sandboxed (it must be able to fork).
//!
//! Runs that overlap share one started for them (`fork_server/shared.rs`;
//! a host's own server, given to its runs, went in issue 34: it was no
//! faster than the shared one).
//! A run whose worker command differs from the server's, or a server that
//! has died, means a spawned worker as usual (never a failed start). Dropping the
//! last handle closes the control socket and SIGKILLs the server.
//!
//! Trade-offs: the server is one more process for as long as the handle
//! lives (its memory is mostly shared with the workers it forks); forks
//! are serialized through it (one round trip each, made under a lock by
//! the thread that calls `start()`: a server that stops
//! answering holds such a thread for up to five seconds, once, and is
//! then taken for gone).

use std::io::{IoSlice, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use dsh_protocol::{DEFAULT_MAX_FRAME_BYTES, FrameBuffer, SandboxPolicy, WorkerMsg, policy_line};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use crate::run::error::StartError;
use crate::run::worker::{ForkedWorker, Spawned};
use dsh_exec::WorkerCommand;
use dsh_exec::process::{ProcessGroup, spawner};

pub(crate) mod shared;

/// How long the server may take to answer one request.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long [`ForkServer::shut_down`] waits for the SIGKILLed server to
/// exit (it takes well under a millisecond unless the machine is stalled).
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a child forked for an unanswered request may take to say
/// `Hello` ([`reap_unanswered`]).
const UNANSWERED_HELLO: std::time::Duration = std::time::Duration::from_secs(2);

/// A running fork server; see the module docs.
pub(crate) struct ForkServer {
    worker: WorkerCommand,
    state: Mutex<State>,
}

/// Whether the server can still fork.
enum State {
    /// Serving: the host's end of its control socket and its process
    /// (in this order: dropped, the socket closes first, then the
    /// server's group is SIGKILLed).
    Serving {
        control: UnixStream,
        process: Box<ProcessGroup>,
    },
    /// It died or spoke nonsense; runs spawn their workers.
    Gone,
}

impl ForkServer {
    /// Spawns the fork server for `worker` (a `dsh-worker`, or `dsh` with
    /// `__worker`) and returns once it is spawned. Must be called inside a
    /// tokio runtime: the server's exit is watched there.
    pub(crate) fn start(worker: &WorkerCommand) -> Result<Arc<ForkServer>, StartError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let spawn_error = |e| StartError::spawn(worker, e);
        // The server's socket stays blocking: a request is one short
        // round trip, made under the state's lock.
        let (host_end, server_end) = UnixStream::pair().map_err(spawn_error)?;
        // A server that stops answering (stopped, stuck) must not hang a
        // run's start: past this, it is taken for gone.
        host_end
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(spawn_error)?;
        // Not the embedding program's stderr: a server in trouble shows
        // as gone, and runs spawn their workers.
        let cmd = crate::run::worker::worker_process(
            worker,
            &["--fork-server"],
            server_end.into(),
            Stdio::null(),
        )
        .map_err(spawn_error)?;
        let process = spawner::spawn_later(cmd, &handle)
            .map_err(spawn_error)?
            .recv()
            .map_err(|_| spawn_error(std::io::Error::other("the spawner thread is gone")))?
            .map_err(spawn_error)?;
        Ok(Arc::new(ForkServer {
            worker: worker.clone(),
            state: Mutex::new(State::Serving {
                process: Box::new(process),
                control: host_end,
            }),
        }))
    }

    /// The server's pid, while it serves.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &*self.state.lock().ok()? {
            State::Serving { process, .. } => Some(process.pid()),
            State::Gone => None,
        }
    }

    /// Ends the server: its control socket closed, SIGKILL to its group,
    /// and a wait (at most [`SHUTDOWN_WAIT`]) until it has exited, so it is
    /// gone by the time the caller goes on. It is reaped in the background,
    /// as a dropped one is.
    pub(crate) async fn shut_down(self) {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let State::Serving { control, process } = state {
            drop(control);
            process.signal(nix::sys::signal::Signal::SIGKILL);
            let _ = tokio::time::timeout(SHUTDOWN_WAIT, process.exited_here()).await;
        }
    }

    /// Forks a worker for a run under `sandbox`. Inside a tokio runtime.
    /// An error means the server is gone (it is not asked again); the
    /// caller spawns the worker instead.
    pub(crate) fn fork(&self, sandbox: SandboxPolicy) -> std::io::Result<Spawned> {
        let forked = self.request()?;
        crate::run::worker::adopt(forked, sandbox)
    }

    /// One round trip: the descriptors out, the pid back. Any failure
    /// makes the server gone (a server that cannot fork, or refuses a
    /// well-formed request, will not do better next time).
    fn request(&self) -> std::io::Result<ForkedWorker> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| std::io::Error::other("the fork server's lock is poisoned"))?;
        let State::Serving { control, .. } = &*state else {
            return Err(std::io::Error::other("the fork server is gone"));
        };
        let (host_end, worker_end) = UnixStream::pair()?;
        let (stderr_r, stderr_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let answer = ask(control, &worker_end, &stderr_w);
        // The server holds its own copies now (or never will).
        drop((worker_end, stderr_w));
        match answer {
            Ok(pid) => {
                // Out of the server's group before the lock is released:
                // another request's failure kills that group (below), and
                // the child may not have run its own setpgid yet.
                if let Ok(raw) = libc::pid_t::try_from(pid) {
                    let p = nix::unistd::Pid::from_raw(raw);
                    let _ = nix::unistd::setpgid(p, p);
                }
                Ok(ForkedWorker {
                    pid,
                    socket: host_end,
                    stderr: stderr_r,
                })
            }
            Err(Failure::NotSent(e) | Failure::Refused(e)) => {
                *state = State::Gone;
                Err(e)
            }
            Err(Failure::Unanswered(e)) => {
                // The server may have forked a child (the host's) and died
                // or stalled before saying so: find it by its Hello, then
                // kill and reap it, before the server's group is killed.
                reap_unanswered(host_end, stderr_r);
                *state = State::Gone;
                Err(e)
            }
        }
    }
}

/// How a request failed.
enum Failure {
    /// It never reached the server: no child.
    NotSent(std::io::Error),
    /// The server answered an error: no child.
    Refused(std::io::Error),
    /// No answer (the server died or stalled): maybe a child.
    Unanswered(std::io::Error),
}

/// A child forked for a request whose answer never came would stay a
/// zombie of the host: it is the host's child (`CLONE_PARENT`), and nobody
/// knows its pid. It does announce it: given a policy line, it says
/// `Hello { pid }`. Then it is killed and reaped like any adopted worker
/// dropped unreaped. No Hello within [`UNANSWERED_HELLO`] (no child was
/// forked, or the server still holds the socket): nothing to do.
fn reap_unanswered(socket: UnixStream, stderr: OwnedFd) {
    let pid = (|| -> std::io::Result<u32> {
        use std::io::Write;
        (&socket).write_all(policy_line::line(SandboxPolicy::BestEffort).as_bytes())?;
        socket.set_read_timeout(Some(UNANSWERED_HELLO))?;
        let mut frames = FrameBuffer::new(DEFAULT_MAX_FRAME_BYTES);
        let mut buf = [0u8; 256];
        loop {
            let n = (&socket).read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            frames.push(&buf[..n]);
            match frames.next_msg::<WorkerMsg>() {
                Ok(Some(WorkerMsg::Hello { pid, .. })) => return Ok(pid),
                Ok(None) => continue,
                Ok(Some(_)) | Err(_) => return Err(std::io::ErrorKind::InvalidData.into()),
            }
        }
    })();
    // The pid is the child's own word: only one of this process's
    // unreaped children is killed on it.
    if let Ok(pid) = pid
        && is_unreaped_child(pid)
        && let Ok(group) = ProcessGroup::adopt(pid, stderr)
    {
        // Dropped unreaped: SIGKILL to its group, reaped once gone.
        drop(group);
    }
}

/// Whether `pid` is a child of this process not reaped yet (`waitid` with
/// `WNOWAIT` reaps nothing; it fails with `ECHILD` for anyone else).
fn is_unreaped_child(pid: u32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(
        waitid(Id::Pid(nix::unistd::Pid::from_raw(raw)), flags),
        Err(nix::errno::Errno::ECHILD)
    )
}

/// Sends one request and reads the answer: a pid, or why not.
fn ask(control: &UnixStream, socket: &UnixStream, stderr: &OwnedFd) -> Result<u32, Failure> {
    let fds = [socket.as_raw_fd(), stderr.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [IoSlice::new(&[1u8])];
    loop {
        match sendmsg::<()>(
            control.as_raw_fd(),
            &iov,
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Failure::NotSent(e.into())),
        }
    }
    let mut buf = [0u8; 4];
    (&*control)
        .read_exact(&mut buf)
        .map_err(Failure::Unanswered)?;
    match i32::from_ne_bytes(buf) {
        pid if pid > 0 => Ok(pid.unsigned_abs()),
        0 => Err(Failure::Refused(std::io::Error::other(
            "the fork server answered pid 0",
        ))),
        errno => Err(Failure::Refused(std::io::Error::from_raw_os_error(
            errno.unsigned_abs().cast_signed(),
        ))),
    }
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer")
            .field("worker", &self.worker)
            .field("pid", &self.pid())
            .finish()
    }
}
