//! Keeping a chatty worker off its supervisor's CPU.
//!
//! Why: the supervisor and its worker answer each other within
//! microseconds while a script makes `agent()` calls, and both spin
//! briefly for the other's answer (`dsh_protocol::spin`). On separate CPUs
//! a round trip then takes about 9 µs here; on the *same* CPU each spin
//! only delays the peer, the spins give up, and every answer costs two
//! context switches: 30–50 µs. The scheduler does not undo that on its
//! own: a blocking ping-pong never has two runnable tasks on one CPU, so
//! no balancer moves one of them, and the socket's synchronous wake-ups
//! keep pulling the woken side back next to the waker. Which of the two
//! states a run lands in depends on what the machine did just before
//! (docs/performance.md, round 10): after 60 ms of both CPUs busy, about
//! two runs in three started together.
//!
//! What [`separate`] does: when the supervisor's thread and the worker are
//! on the same CPU, it moves the worker off it by narrowing the worker's
//! CPU affinity to its allowed set minus that CPU ([`Narrowed`]); the
//! supervisor restores the allowed set once the two answer each other
//! apart, so later placement is the scheduler's again. A worker whose mask
//! allows one CPU (pinned by whoever started the host) is left alone, and
//! a mask is only ever narrowed within the worker's own. It is a hint, not
//! a policy: nothing here keeps the two apart once the scheduler decides
//! otherwise, and every failure (the worker gone, a kernel without
//! `/proc`) just means the hint was not given.

/// What [`separate`] found and did.
#[derive(Debug)]
pub enum Placement {
    /// The worker runs on another CPU than the calling thread.
    Apart,
    /// The worker was on the calling thread's CPU; its affinity now
    /// excludes that CPU until [`Narrowed::restore`].
    Moved(Narrowed),
    /// The worker may run on one CPU only (or on none but this one): left
    /// where it is.
    Pinned,
    /// Where the worker runs could not be read or changed (it exited, no
    /// `/proc`, not Linux).
    Unknown,
}

/// A worker whose affinity [`separate`] narrowed. The narrowed mask must
/// outlast the move: a worker asleep in a read is moved only when it next
/// wakes (the kernel places a waking task on an allowed CPU; a sleeping
/// one is not migrated), so the mask is restored later, once the two were
/// seen answering each other apart — never after the worker may have been
/// reaped, since the pid could then name another process (hence no
/// `Drop`: a worker that exits narrowed takes its mask with it).
#[derive(Debug)]
pub struct Narrowed {
    #[cfg(target_os = "linux")]
    pid: nix::unistd::Pid,
    #[cfg(target_os = "linux")]
    allowed: nix::sched::CpuSet,
}

impl Narrowed {
    /// Gives the worker its allowed set back (best effort: a worker that
    /// is gone has nothing to restore). Call only while the worker is a
    /// live, unreaped child.
    pub fn restore(self) {
        #[cfg(target_os = "linux")]
        let _ = nix::sched::sched_setaffinity(self.pid, &self.allowed);
    }
}

/// Moves the worker `pid` off the calling thread's CPU when both are on
/// the same one (see the module docs). Costs a `/proc` read, and one
/// `sched_setaffinity` when it moves the worker. `pid` must be a live,
/// unreaped child of this process.
#[cfg(target_os = "linux")]
pub fn separate(pid: u32) -> Placement {
    use nix::sched::{sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;

    let Ok(here) = usize::try_from(current_cpu()) else {
        return Placement::Unknown;
    };
    let Some(there) = last_cpu(pid) else {
        return Placement::Unknown;
    };
    if here != there {
        return Placement::Apart;
    }
    let Ok(raw) = i32::try_from(pid) else {
        return Placement::Unknown;
    };
    let pid = Pid::from_raw(raw);
    let Ok(allowed) = sched_getaffinity(pid) else {
        return Placement::Unknown;
    };
    let mut elsewhere = allowed;
    if elsewhere.unset(here).is_err() {
        return Placement::Unknown;
    }
    if cpus_in(&elsewhere) == 0 {
        return Placement::Pinned;
    }
    match sched_setaffinity(pid, &elsewhere) {
        Ok(()) => Placement::Moved(Narrowed { pid, allowed }),
        Err(_) => Placement::Unknown,
    }
}

/// Not Linux: nothing to read, nothing done.
#[cfg(not(target_os = "linux"))]
pub fn separate(_pid: u32) -> Placement {
    Placement::Unknown
}

/// How many CPUs `set` allows.
#[cfg(target_os = "linux")]
fn cpus_in(set: &nix::sched::CpuSet) -> usize {
    (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .count()
}

/// The calling thread's CPU (`sched_getcpu`, a vDSO call), or -1.
#[cfg(target_os = "linux")]
fn current_cpu() -> i32 {
    // SAFETY: sched_getcpu takes no arguments and only returns a number.
    unsafe { libc::sched_getcpu() }
}

/// The CPU `pid` last ran on: field 39 of `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
fn last_cpu(pid: u32) -> Option<usize> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    processor_field(&stat)
}

/// Field 39 (`processor`) of a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces and parentheses, so
/// the fields are counted after its *last* `)`.
fn processor_field(stat: &str) -> Option<usize> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (the state).
    rest.split_whitespace().nth(39 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processor_field_is_counted_after_the_last_parenthesis() {
        // Fields 3..=52 of a real line, with a command name that holds
        // a space and a parenthesis; field 39 is 1.
        let line = "4242 (dsh (worker) x) S 1 4242 4242 0 -1 4194560 3129 0 0 0 \
                    10 4 0 0 20 0 1 0 1234 110000000 2000 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert_eq!(processor_field(line), Some(1));
        assert_eq!(processor_field("4242 (short) S 1"), None);
        assert_eq!(processor_field("no parenthesis at all"), None);
    }

    /// A child that last ran on this thread's CPU is moved off it: its
    /// mask excludes that CPU until restored, and the restore gives back
    /// the set it had; a child allowed only this CPU is left alone.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_on_this_threads_cpu_is_moved_off_it_and_gets_its_set_back() {
        use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
        use nix::unistd::Pid;

        let me = Pid::from_raw(0);
        let mine = sched_getaffinity(me).expect("own affinity");
        let here = usize::try_from(current_cpu()).expect("a cpu");
        let mut only_here = CpuSet::new();
        only_here.set(here).expect("a valid cpu");
        // This thread stays on `here`, and the child starts there (it
        // inherits the mask) and falls asleep there: a sleeping task is
        // not migrated, so `here` is where it last ran, deterministically.
        if let Err(e) = sched_setaffinity(me, &only_here) {
            // A sandbox that forbids changing affinity: nothing to test.
            eprintln!("skipped: this thread cannot change its affinity here ({e})");
            return;
        }
        struct Child(std::process::Child);
        impl Drop for Child {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .map(Child);
        (|| {
            let child = child.expect("sleep starts");
            let pid = child.0.id();
            let cpid = Pid::from_raw(i32::try_from(pid).expect("a pid"));
            // Allowed this cpu only: nowhere else to go.
            let pinned = separate(pid);
            assert!(matches!(pinned, Placement::Pinned), "{pinned:?}");
            if cpus_in(&mine) < 2 {
                return;
            }
            // Allowed everywhere, last ran here: moved off this cpu. It may
            // still be on its way to its sleep (and be pulled elsewhere
            // while runnable): then try again.
            sched_setaffinity(cpid, &mine).expect("widened");
            let mut tries = Vec::new();
            let narrowed = loop {
                match separate(pid) {
                    Placement::Moved(n) => break n,
                    other => tries.push(format!("{other:?}")),
                }
                assert!(tries.len() < 500, "never moved: {tries:?}");
                sched_setaffinity(cpid, &only_here).expect("back here");
                std::thread::sleep(std::time::Duration::from_millis(2));
                sched_setaffinity(cpid, &mine).expect("widened");
            };
            let mask = sched_getaffinity(cpid).expect("readable");
            assert!(!mask.is_set(here).expect("valid"), "this cpu is excluded");
            narrowed.restore();
            assert_eq!(sched_getaffinity(cpid).expect("readable"), mine, "restored");
        })();
        sched_setaffinity(me, &mine).expect("this thread unpinned");
    }
}
