//! The shim on Linux: subreaper, signals through a signalfd, one child,
//! and the sweep of whatever it left behind.
//!
//! Signals are never handled asynchronously: TERM, INT, HUP and CHLD are
//! blocked from the first moment and read from a signalfd in a plain poll
//! loop, so there is no handler to keep async-signal-safe and no signal
//! can be lost between two checks. The only code that runs between fork
//! and exec is the `pre_exec` closure, which calls `pthread_sigmask`,
//! `prctl`, `getppid` and `_exit` only.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid, getppid};

use super::tree::{self, Proc};
use super::{Args, EXIT_CANNOT_RUN, EXIT_NOT_FOUND, say};

/// After SIGKILL, how long the program may take to actually go (a process
/// in uninterruptible sleep) before the shim stops waiting for it.
const STUCK_AFTER_KILL: Duration = Duration::from_secs(5);
/// The longest the leftovers get between SIGTERM and SIGKILL once the
/// program has exited (less if `--grace-ms` is smaller).
const LEFTOVER_GRACE: Duration = Duration::from_millis(500);
/// How long the SIGKILL rounds of the sweep may go on (a fork bomb racing
/// the walk) before the shim gives up and says so.
const KILL_ROUNDS_BOUND: Duration = Duration::from_secs(5);
/// How often the sweep looks again while nothing wakes it: a leftover's
/// death is not always the shim's SIGCHLD (its parent may be another
/// leftover).
const SWEEP_TICK: Duration = Duration::from_millis(20);
/// At most this many leftovers are named in the stderr line.
const MAX_NAMED: usize = 10;

/// How the program ended, as far as the shim knows.
enum End {
    Status(WaitStatus),
    /// Still not gone [`STUCK_AFTER_KILL`] after SIGKILL.
    Stuck,
}

/// What one round of `waitpid` found.
struct Reaped {
    program: Option<WaitStatus>,
    children_left: bool,
}

/// What one wait on the signalfd brought.
enum Woke {
    Stop,
    Other,
    Timeout,
}

struct Shim {
    me: i32,
    sfd: SignalFd,
    grace: Duration,
}

pub(super) fn run(args: &Args) -> i32 {
    // Read before anything else: if the parent dies before the new
    // parent-death signal is armed, getppid() will differ afterwards.
    let parent = getppid();
    let mut watched = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        watched.add(s);
    }
    // Blocked before the parent-death signal is re-armed as SIGTERM, so
    // that a SIGTERM from then on waits in the signalfd instead of
    // killing the shim with nothing cleaned up.
    let original_mask = match watched.thread_swap_mask(SigmaskHow::SIG_BLOCK) {
        Ok(m) => m,
        Err(e) => return fail(&format!("cannot block signals: {e}")),
    };
    let sfd = match SignalFd::with_flags(&watched, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => return fail(&format!("cannot create a signalfd: {e}")),
    };
    // Without it orphans would go to init and escape the sweep; the agent
    // still runs, so this is a warning, not a refusal (it cannot fail on
    // any kernel since 3.4).
    if let Err(e) = prctl::set_child_subreaper(true) {
        say(&format!(
            "dsh: warning: cannot become a child subreaper ({e}); processes the agent detaches may survive it"
        ));
    }
    // Replaces the SIGKILL dsh's spawner armed: a dying dsh now gives the
    // shim the chance to stop the whole subtree.
    let _ = prctl::set_pdeathsig(Signal::SIGTERM);
    if getppid() != parent {
        // The parent died before the signal was armed: as if SIGTERM came,
        // with nothing started yet.
        return exit_as(WaitStatus::Signaled(getpid(), Signal::SIGTERM, false));
    }
    let shim = Shim {
        me: getpid().as_raw(),
        sfd,
        grace: args.grace,
    };

    let program = match spawn(args, shim.me, original_mask) {
        Ok(pid) => pid,
        Err(code) => return code,
    };

    let end = shim.supervise(program);
    let (left, stuck) = shim.sweep();
    report(&left, &stuck);
    match end {
        End::Status(st) => exit_as(st),
        End::Stuck => {
            say(&format!(
                "dsh: {:?} did not end within {}s of SIGKILL; leaving it",
                args.program,
                STUCK_AFTER_KILL.as_secs()
            ));
            exit_as(WaitStatus::Signaled(program, Signal::SIGKILL, false))
        }
    }
}

/// Starts PROGRAM in the shim's own process group. On failure, says why
/// and returns the exit status (127 not found, 126 otherwise).
fn spawn(args: &Args, me: i32, original_mask: SigSet) -> Result<Pid, i32> {
    let mut cmd = Command::new(&args.program);
    cmd.args(&args.args);
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (pthread_sigmask, prctl, getppid, _exit);
    // it allocates nothing (the mask was copied in beforehand).
    unsafe {
        cmd.pre_exec(move || {
            // The program gets the mask the shim was started with, not the
            // shim's blocked set.
            let _ = original_mask.thread_set_mask();
            // If the shim is SIGKILLed (dsh's grace ran out), the program
            // must not run on unsupervised.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != me {
                libc::_exit(EXIT_CANNOT_RUN);
            }
            Ok(())
        });
    }
    match cmd.spawn() {
        // std does not wait for a dropped Child: the shim reaps it itself.
        Ok(child) => Ok(Pid::from_raw(child.id() as i32)),
        Err(e) => {
            say(&format!("dsh: cannot run {:?}: {e}", args.program));
            if e.kind() == std::io::ErrorKind::NotFound {
                Err(EXIT_NOT_FOUND)
            } else {
                Err(EXIT_CANNOT_RUN)
            }
        }
    }
}

impl Shim {
    /// Waits for the program to end, running the stop sequence (SIGTERM to
    /// every descendant, the grace, SIGKILL to every descendant) when a
    /// stop signal arrives.
    fn supervise(&self, program: Pid) -> End {
        // None while running; else when the next step is due, and whether
        // SIGKILL has been sent.
        let mut stopping: Option<(Instant, bool)> = None;
        loop {
            if let Some(st) = self.reap(Some(program)).program {
                return End::Status(st);
            }
            match self.wait(stopping.map(|(due, _)| due)) {
                Woke::Stop if stopping.is_none() => {
                    self.signal_all(Signal::SIGTERM);
                    stopping = Some((Instant::now() + self.grace, false));
                }
                Woke::Timeout => match stopping {
                    Some((_, false)) => {
                        self.signal_all(Signal::SIGKILL);
                        stopping = Some((Instant::now() + STUCK_AFTER_KILL, true));
                    }
                    Some((_, true)) => return End::Stuck,
                    None => {}
                },
                // A child ended (the loop reaps it), or a second stop
                // signal: the sequence already runs on its own deadline.
                Woke::Stop | Woke::Other => {}
            }
        }
    }

    /// After the program: SIGTERM to whatever is left, a short wait,
    /// SIGKILL in rounds until the shim has no child at all. Returns every
    /// process found alive, and those that could not be stopped in time.
    fn sweep(&self) -> (Vec<Proc>, Vec<Proc>) {
        let mut seen: Vec<Proc> = Vec::new();
        // The happy path: no child left means nothing beneath the shim
        // (every descendant's chain passes through one of its children),
        // so /proc is not walked at all.
        if !self.reap(None).children_left {
            return (seen, Vec::new());
        }
        let term_until = Instant::now() + self.grace.min(LEFTOVER_GRACE);
        let first = tree::descendants(self.me);
        for p in &first {
            tree::signal(p, Signal::SIGTERM);
            // A stopped process acts on SIGTERM only once continued.
            tree::signal(p, Signal::SIGCONT);
        }
        remember(&mut seen, first);
        loop {
            if !self.reap(None).children_left {
                return (seen, Vec::new());
            }
            if Instant::now() >= term_until {
                break;
            }
            self.wait(Some((Instant::now() + SWEEP_TICK).min(term_until)));
        }
        let give_up = Instant::now() + KILL_ROUNDS_BOUND;
        loop {
            let live = tree::descendants(self.me);
            for p in &live {
                tree::signal(p, Signal::SIGKILL);
            }
            remember(&mut seen, live.clone());
            if !self.reap(None).children_left {
                return (seen, Vec::new());
            }
            if Instant::now() >= give_up {
                return (seen, live);
            }
            self.wait(Some(Instant::now() + SWEEP_TICK));
        }
    }

    /// Reaps every child that has ended. Returns the status of `program`
    /// if it was among them, and whether the shim still has a child.
    fn reap(&self, program: Option<Pid>) -> Reaped {
        let mut program_status = None;
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(st @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))) => {
                    if Some(pid) == program {
                        program_status = Some(st);
                    }
                }
                Ok(WaitStatus::StillAlive) => {
                    return Reaped {
                        program: program_status,
                        children_left: true,
                    };
                }
                // ECHILD: no child at all (EINTR cannot happen: the
                // signals that could interrupt are blocked).
                Err(_) => {
                    return Reaped {
                        program: program_status,
                        children_left: false,
                    };
                }
                // Stop/continue reports are not asked for (no WUNTRACED).
                Ok(_) => {}
            }
        }
    }

    fn signal_all(&self, sig: Signal) {
        for p in tree::descendants(self.me) {
            tree::signal(&p, sig);
        }
    }

    /// Waits on the signalfd until `until` (forever if None) and drains it.
    fn wait(&self, until: Option<Instant>) -> Woke {
        let timeout = match until {
            None => PollTimeout::NONE,
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                // Rounded up: a deadline a fraction of a millisecond away
                // must not turn into a busy loop of zero timeouts.
                let ms = left.as_micros().div_ceil(1000);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(&self.sfd),
            PollFlags::POLLIN,
        )];
        match poll(&mut fds, timeout) {
            Ok(0) => {
                return if until.is_some_and(|t| Instant::now() >= t) {
                    Woke::Timeout
                } else {
                    Woke::Other
                };
            }
            Ok(_) => {}
            Err(_) => return Woke::Other,
        }
        let mut woke = Woke::Other;
        while let Ok(Some(info)) = self.sfd.read_signal() {
            if matches!(
                Signal::try_from(info.ssi_signo as i32),
                Ok(Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP)
            ) {
                woke = Woke::Stop;
            }
        }
        woke
    }
}

/// Adds the processes not seen yet (pid and start time) to `seen`.
fn remember(seen: &mut Vec<Proc>, found: Vec<Proc>) {
    for p in found {
        if !seen.iter().any(|s| s.pid == p.pid && s.start == p.start) {
            seen.push(p);
        }
    }
}

/// The one stderr line about leftovers, and one about survivors.
fn report(left: &[Proc], stuck: &[Proc]) {
    if !left.is_empty() {
        say(&format!(
            "dsh: stopped {} process(es) the agent left behind: {}",
            left.len(),
            name_list(left)
        ));
    }
    if !stuck.is_empty() {
        say(&format!(
            "dsh: could not stop {} process(es) within {}s: {}",
            stuck.len(),
            KILL_ROUNDS_BOUND.as_secs(),
            name_list(stuck)
        ));
    }
}

/// `PID (comm), …`, at most [`MAX_NAMED`] of them. The name is chosen by
/// the process itself: anything unprintable becomes `?`.
pub(super) fn name_list(procs: &[Proc]) -> String {
    let mut parts: Vec<String> = procs
        .iter()
        .take(MAX_NAMED)
        .map(|p| {
            let comm: String = p
                .comm
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect();
            format!("{} ({comm})", p.pid)
        })
        .collect();
    if procs.len() > MAX_NAMED {
        parts.push(format!("… and {} more", procs.len() - MAX_NAMED));
    }
    parts.join(", ")
}

/// Ends the shim the way the program ended. A program killed by a signal
/// is mirrored by the shim dying of the same signal (handler reset, core
/// dumps off so a SIGSEGV does not leave a core of the shim), so that the
/// host's "was killed by SIGTERM" stays true with the shim in between; an
/// exit status `128+N` would read as an ordinary exit. Falls back to
/// `128+N` if the signal does not end the shim.
fn exit_as(st: WaitStatus) -> i32 {
    match st {
        WaitStatus::Exited(_, code) => code,
        WaitStatus::Signaled(_, sig, _) => {
            let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
            // SAFETY: resetting a disposition to the default installs no
            // handler; the shim is single-threaded.
            let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
            let _ = std::io::stderr().flush();
            let mut one = SigSet::empty();
            one.add(sig);
            let _ = one.thread_unblock();
            let _ = nix::sys::signal::raise(sig);
            128 + sig as i32
        }
        _ => EXIT_CANNOT_RUN,
    }
}

fn fail(what: &str) -> i32 {
    say(&format!("dsh: reap: {what}"));
    EXIT_CANNOT_RUN
}
