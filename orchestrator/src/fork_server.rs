//! The fork server: one worker process, exec'd once, that forks the
//! workers of many runs (`dsh-worker --fork-server`). A run started
//! through it skips the exec of the worker binary, the dynamic loader and
//! the fresh image's page faults (docs/performance.md, "Round 9": about a
//! third of a short worker's CPU when 100 runs start at once).
//!
//! What does not change: every worker is still a process of its own,
//! forked fresh for one run and never reused; it is the host's child (the
//! server forks it with `CLONE_PARENT`), leads its own process group, has
//! its parent-death signal armed against the host, and is ended and
//! reaped by the host like a spawned worker ([`crate::process`]). It has
//! an empty environment, runs in `/`, holds only its socket, `/dev/null`
//! and its stderr pipe, and applies the run's sandbox policy itself right
//! after `Hello`, at the same point a spawned worker does. The server
//! runs no script and is not sandboxed (it must be able to fork).
//!
//! Opt-in, like [`crate::WorkerPool`]: [`ForkServer::start`], then
//! [`crate::StartRequest::with_fork_server`] on each run. A run whose
//! worker command differs from the server's, or a server that has died,
//! means a spawned worker as usual (never a failed start). Dropping the
//! last handle closes the control socket; the server exits.
//!
//! Trade-offs: the server is one more process for as long as the handle
//! lives (its memory is mostly shared with the workers it forks); forks
//! are serialized through it (one round trip, about 0.1 ms each).

use std::io::{IoSlice, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use dsh_protocol::SandboxPolicy;
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use crate::process::{ProcessGroup, spawner};
use crate::run::worker::{ForkedWorker, Spawned};
use crate::run::{StartError, WorkerCommand};

/// How long the server may take to answer one request.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A running fork server; see the module docs.
pub struct ForkServer {
    worker: WorkerCommand,
    state: Mutex<State>,
}

/// Whether the server can still fork.
enum State {
    /// Serving: its process and the host's end of its control socket.
    Serving {
        process: Box<ProcessGroup>,
        control: UnixStream,
    },
    /// It died or spoke nonsense; runs spawn their workers.
    Gone,
}

impl ForkServer {
    /// Spawns the fork server for `worker` (a `dsh-worker`, or `dsh` with
    /// `__worker`) and returns once it is spawned. Must be called inside a
    /// tokio runtime: the server's exit is watched there.
    pub fn start(worker: &WorkerCommand) -> Result<Arc<ForkServer>, StartError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let spawn_error = |source: std::io::Error| StartError::Spawn {
            program: worker.program.display().to_string(),
            source,
        };
        // The server's socket stays blocking: a request is one short
        // round trip, made under the state's lock.
        let (host_end, server_end) = UnixStream::pair().map_err(spawn_error)?;
        // A server that stops answering (stopped, stuck) must not hang a
        // run's start: past this, it is taken for gone.
        host_end
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(spawn_error)?;
        let program = crate::run::worker::absolute_program(worker).map_err(spawn_error)?;
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&worker.args)
            .arg("--fork-server")
            .arg("--fd")
            .arg("0")
            .arg("--parent")
            .arg(std::process::id().to_string())
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(OwnedFd::from(server_end)))
            .stdout(Stdio::null())
            // Not the embedding program's stderr: a server in trouble
            // shows as gone, and runs spawn their workers.
            .stderr(Stdio::null());
        spawner::own_group_self_armed(&mut cmd);
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

    /// The worker command the server forks.
    pub fn worker(&self) -> &WorkerCommand {
        &self.worker
    }

    /// The server's pid, while it serves.
    pub fn pid(&self) -> Option<u32> {
        match &*self.state.lock().ok()? {
            State::Serving { process, .. } => Some(process.pid()),
            State::Gone => None,
        }
    }

    /// Forks a worker for a run under `sandbox`. Inside a tokio runtime.
    /// An error means the server is gone (it is not asked again); the
    /// caller spawns the worker instead.
    pub(crate) fn fork(&self, sandbox: SandboxPolicy) -> std::io::Result<Spawned> {
        let forked = self.request()?;
        crate::run::worker::adopt(forked, sandbox)
    }

    /// One round trip: the descriptors out, the pid back.
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
            Ok(pid) => Ok(ForkedWorker {
                pid,
                socket: host_end,
                stderr: stderr_r,
            }),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::InvalidInput {
                    // Whatever the server did, it is not asked again;
                    // dropping its group kills it.
                    *state = State::Gone;
                }
                Err(e)
            }
        }
    }
}

/// Sends one request and reads the answer: a pid, or why not.
fn ask(control: &UnixStream, socket: &UnixStream, stderr: &OwnedFd) -> std::io::Result<u32> {
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
            Err(e) => return Err(e.into()),
        }
    }
    let mut buf = [0u8; 4];
    (&*control).read_exact(&mut buf)?;
    let answer = i32::from_ne_bytes(buf);
    if answer > 0 {
        Ok(answer.unsigned_abs())
    } else if answer == -libc::EINVAL {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the fork server refused the request",
        ))
    } else if answer < 0 {
        Err(std::io::Error::from_raw_os_error(
            answer.unsigned_abs().cast_signed(),
        ))
    } else {
        Err(std::io::Error::other("the fork server answered pid 0"))
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
