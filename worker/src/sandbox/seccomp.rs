//! The seccomp layer: an allow-list of exactly the system calls a worker
//! makes once it is sandboxed, built with `seccompiler` (rust-vmm's
//! filter compiler). Every other call fails with `EPERM`.
//!
//! The list was read off `strace -f` of the test suites (every worker's
//! calls after it installed the filter), then each group was checked
//! against what the code can do: it is short because a sandboxed worker
//! only talks to the host over the socket it inherited, allocates memory,
//! reads clocks and exits. Opening files, creating processes or threads,
//! sockets, namespaces, keys, SysV IPC, `prctl`, `pidfd_open`, `ptrace`,
//! io_uring, `memfd_create` — none are on it, so none need a rule.
//!
//! Three calls are allowed only with some arguments:
//! - `mmap` only for private mappings without `PROT_EXEC`: a shared
//!   mapping is not counted by `RLIMIT_DATA`, so allowing one would let
//!   a script's memory grow past the worker's limit; and the engine has no
//!   JIT, so no code is ever mapped after start-up;
//! - `mprotect` only without `PROT_EXEC`, for the same reason;
//! - `kill`/`tgkill`/`tkill` only at the worker's own pid (an `abort()`
//!   raises `SIGABRT` at itself); Landlock's signal scope covers the same
//!   ground from ABI 6, this covers it on every kernel.
//!
//! Why `EPERM` rather than killing the worker: a refused call then shows
//! up as an error where it was made (the probe reports each one), and the
//! host learns of a misbehaving worker from its reply, not a `SIGSYS`
//! corpse. A syscall of a foreign ABI (i386 `int 0x80` on x86_64) kills the
//! process: that is `seccompiler`'s architecture check, and no honest
//! worker makes one. x32 syscalls (numbers with bit 30 set on x86_64) are
//! not on the list, so they fail like any other.
//!
//! The filter is installed last, after the capability drop and the
//! working-directory check, so that neither needs a rule of its own.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule,
};

use super::Tally;
use super::seccomp_tree::{self, Call};

/// The rule name in the sandbox report.
pub const RULE: &str = "seccomp:allow-list";

/// What a call may do, beyond being made at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Any arguments.
    Always,
    /// `mmap`: private mappings only (no `MAP_SHARED`, no
    /// `MAP_SHARED_VALIDATE`), never `PROT_EXEC`.
    PrivateNoExec,
    /// `mprotect`: never `PROT_EXEC`.
    NoExec,
    /// The first argument is the worker's own pid.
    OwnPid,
    /// The first argument is 0, "this process" (`prlimit64`: the C
    /// library's `setrlimit`).
    Itself,
}

/// A group of allowed calls and why the worker needs them.
#[derive(Debug)]
pub struct Group {
    /// A short name for the docs and the tests.
    pub name: &'static str,
    /// Why a sandboxed worker makes these calls.
    pub why: &'static str,
    /// The calls: name, number, and which arguments are allowed.
    pub calls: Vec<(&'static str, libc::c_long, Allowed)>,
}

/// The allow-list, by group. Reviewed as one table: a call added here is
/// a call every script's worker may make.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn allowed() -> Vec<Group> {
    use Allowed::*;
    let mut socket = vec![
        ("recvfrom", libc::SYS_recvfrom, Always),
        ("sendto", libc::SYS_sendto, Always),
        ("recvmsg", libc::SYS_recvmsg, Always),
        ("sendmsg", libc::SYS_sendmsg, Always),
        ("read", libc::SYS_read, Always),
        ("write", libc::SYS_write, Always),
        ("readv", libc::SYS_readv, Always),
        ("writev", libc::SYS_writev, Always),
        ("ppoll", libc::SYS_ppoll, Always),
        ("fcntl", libc::SYS_fcntl, Always),
        ("close", libc::SYS_close, Always),
    ];
    #[cfg(target_arch = "x86_64")]
    socket.push(("poll", libc::SYS_poll, Always));
    let mut time = vec![
        ("clock_gettime", libc::SYS_clock_gettime, Always),
        ("clock_getres", libc::SYS_clock_getres, Always),
        ("gettimeofday", libc::SYS_gettimeofday, Always),
        ("getrusage", libc::SYS_getrusage, Always),
        ("nanosleep", libc::SYS_nanosleep, Always),
        ("clock_nanosleep", libc::SYS_clock_nanosleep, Always),
    ];
    #[cfg(target_arch = "x86_64")]
    time.push(("time", libc::SYS_time, Always));
    vec![
        Group {
            name: "the host's socket and stderr",
            why: "frames to and from the host over the inherited socket (stdin), waiting for them with a timeout, diagnostics on stderr; no call here can open anything new",
            calls: socket,
        },
        Group {
            name: "memory",
            why: "the allocator and the engine's heap; mappings are private and never executable, so RLIMIT_DATA counts every byte",
            calls: vec![
                ("brk", libc::SYS_brk, Always),
                ("mmap", libc::SYS_mmap, PrivateNoExec),
                ("munmap", libc::SYS_munmap, Always),
                ("mremap", libc::SYS_mremap, Always),
                ("madvise", libc::SYS_madvise, Always),
                ("mprotect", libc::SYS_mprotect, NoExec),
            ],
        },
        Group {
            name: "clocks and CPU time",
            why: "timers, Date.now(), and the computeMs budget, which reads the process's CPU time",
            calls: time,
        },
        Group {
            name: "the process itself",
            why: "locks, randomness for hash seeds and Math.random, signal return and masks, its own resource limits (set once Init says them), and ending: exit, or abort(), which raises SIGABRT at itself",
            calls: vec![
                ("futex", libc::SYS_futex, Always),
                ("getrandom", libc::SYS_getrandom, Always),
                ("sched_yield", libc::SYS_sched_yield, Always),
                ("getpid", libc::SYS_getpid, Always),
                ("gettid", libc::SYS_gettid, Always),
                ("rt_sigreturn", libc::SYS_rt_sigreturn, Always),
                ("rt_sigprocmask", libc::SYS_rt_sigprocmask, Always),
                ("rt_sigaction", libc::SYS_rt_sigaction, Always),
                ("sigaltstack", libc::SYS_sigaltstack, Always),
                ("restart_syscall", libc::SYS_restart_syscall, Always),
                ("kill", libc::SYS_kill, OwnPid),
                ("tgkill", libc::SYS_tgkill, OwnPid),
                ("tkill", libc::SYS_tkill, OwnPid),
                // The run's own limits: the filter goes on before `Init`
                // says the data and CPU rlimits (sandbox/mod.rs). Its own
                // limits only; the hard ones equal the soft ones and the
                // capabilities are gone, so a limit can only go down.
                ("prlimit64", libc::SYS_prlimit64, Itself),
                ("exit", libc::SYS_exit, Always),
                ("exit_group", libc::SYS_exit_group, Always),
            ],
        },
    ]
}

/// Why the filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The table above does not compile (a bad condition, say).
    #[error("the allow-list does not compile: {0}")]
    Compile(#[from] seccompiler::BackendError),
    /// The kernel refused it.
    #[error("the kernel refused the filter: {0}")]
    Install(#[from] seccompiler::Error),
    /// The search over the call numbers could not be encoded.
    #[error("{0}")]
    Search(#[from] super::seccomp_tree::TooFar),
    /// A call number that does not fit the filter's 32 bits.
    #[error("the call number of {0} is out of range")]
    Number(&'static str),
}

fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
}

/// The rules for one call.
fn rules(allowed: Allowed, pid: u32) -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let prot_exec = libc::PROT_EXEC as u64;
    Ok(match allowed {
        // An empty rule list matches the call whatever its arguments.
        Allowed::Always => Vec::new(),
        Allowed::PrivateNoExec => {
            // MAP_SHARED is 0x01, MAP_PRIVATE 0x02, MAP_SHARED_VALIDATE
            // 0x03: the two low bits must read exactly MAP_PRIVATE.
            let kind = (libc::MAP_SHARED | libc::MAP_PRIVATE) as u64;
            vec![SeccompRule::new(vec![
                masked(3, kind, libc::MAP_PRIVATE as u64)?,
                masked(2, prot_exec, 0)?,
            ])?]
        }
        Allowed::NoExec => vec![SeccompRule::new(vec![masked(2, prot_exec, 0)?])?],
        Allowed::OwnPid => vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            u64::from(pid),
        )?])?],
        Allowed::Itself => vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            0,
        )?])?],
    })
}

/// The compiled filter for a worker whose pid is `pid`: the rules above,
/// found by a binary search on the call number (`seccomp_tree`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn program(pid: u32) -> Result<BpfProgram, FilterError> {
    let mut calls = Vec::new();
    for group in allowed() {
        for (name, nr, allowed) in group.calls {
            let nr = u32::try_from(nr).map_err(|_| FilterError::Number(name))?;
            calls.push(Call {
                nr,
                rules: rules(allowed, pid)?,
            });
        }
    }
    Ok(seccomp_tree::compile(
        calls,
        u32::from(SeccompAction::Allow),
        u32::from(SeccompAction::Errno(libc::EPERM as u32)),
    )?)
}

/// The same rules as `seccompiler` lays them out (one test per call in
/// turn): what the search must agree with.
#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
fn linear_program(pid: u32) -> Result<BpfProgram, FilterError> {
    use seccompiler::{SeccompFilter, TargetArch};
    use std::collections::BTreeMap;
    #[cfg(target_arch = "x86_64")]
    const ARCH: TargetArch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    const ARCH: TargetArch = TargetArch::aarch64;
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for group in allowed() {
        for (_, nr, allowed) in group.calls {
            map.insert(nr, rules(allowed, pid)?);
        }
    }
    let filter = SeccompFilter::new(
        map,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        ARCH,
    )?;
    Ok(BpfProgram::try_from(filter)?)
}

/// Installs the filter on the calling thread (the worker has no other).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn apply(t: &mut Tally) {
    let installed = program(std::process::id())
        .and_then(|prog| seccompiler::apply_filter(&prog).map_err(FilterError::from));
    match installed {
        Ok(()) => t.enforced(RULE),
        Err(e) => t.missing(RULE, e),
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn apply(t: &mut Tally) {
    t.missing(
        RULE,
        "the allow-list is written for x86_64 and aarch64 only",
    );
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn the_table_compiles_and_names_each_call_once() {
        let prog = program(1234).expect("the allow-list compiles");
        assert!(prog.len() < 4096, "{} instructions", prog.len());
        let mut seen = std::collections::HashSet::new();
        for group in allowed() {
            assert!(!group.why.is_empty());
            for (name, nr, _) in group.calls {
                assert!(seen.insert(nr), "{name} is listed twice");
            }
        }
    }

    /// The search answers exactly as `seccompiler`'s one-by-one layout for
    /// every call number (both tables, x32's too) and every argument the
    /// rules look at.
    #[test]
    fn the_search_decides_every_call_as_the_linear_filter_does() {
        use crate::sandbox::seccomp_tree::{AUDIT_ARCH, interpret};
        let pid = 4321;
        let tree = program(pid).expect("compiles");
        let linear = linear_program(pid).expect("compiles");
        assert!(
            tree.len() < linear.len(),
            "{} vs {}",
            tree.len(),
            linear.len()
        );
        let prot = [
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            (libc::PROT_READ | libc::PROT_EXEC) as u64,
            // Only the low 32 bits are compared.
            (1 << 32) | libc::PROT_READ as u64,
        ];
        let flags = [
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
            libc::MAP_SHARED as u64,
            libc::MAP_SHARED_VALIDATE as u64,
            0,
        ];
        let first = [
            u64::from(pid),
            u64::from(pid) + 1,
            0,
            (1 << 32) | u64::from(pid),
        ];
        let (mut calls, mut allowed) = (0, 0);
        for arch in [AUDIT_ARCH, 0x4000_0003] {
            for nr in (0..1024).chain([0x4000_0000, 0x4000_0001, 0x4000_00ff, u32::MAX]) {
                for a0 in first {
                    for a2 in prot {
                        for a3 in flags {
                            let d = interpret::Data {
                                nr,
                                arch,
                                args: [a0, 0, a2, a3, 0, 0],
                            };
                            let want = interpret::run(&linear, &d);
                            assert_eq!(
                                interpret::run(&tree, &d),
                                want,
                                "nr {nr} arch {arch:#x} args {:?}",
                                d.args
                            );
                            calls += 1;
                            allowed += usize::from(want == libc::SECCOMP_RET_ALLOW);
                        }
                    }
                }
            }
        }
        // Both answers were seen, so the comparison covered something.
        assert!(allowed > 0 && allowed < calls, "{allowed} of {calls}");
    }

    #[rstest::rstest]
    #[case::read(libc::SYS_read, [0, 0, 0, 0], libc::SECCOMP_RET_ALLOW)]
    #[case::openat(libc::SYS_openat, [0, 0, 0, 0], libc::SECCOMP_RET_ERRNO | libc::EPERM as u32)]
    #[case::mmap_private(libc::SYS_mmap, [0, 0, libc::PROT_READ as u64, (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64], libc::SECCOMP_RET_ALLOW)]
    #[case::mmap_exec(libc::SYS_mmap, [0, 0, libc::PROT_EXEC as u64, libc::MAP_PRIVATE as u64], libc::SECCOMP_RET_ERRNO | libc::EPERM as u32)]
    #[case::mmap_shared(libc::SYS_mmap, [0, 0, libc::PROT_READ as u64, libc::MAP_SHARED as u64], libc::SECCOMP_RET_ERRNO | libc::EPERM as u32)]
    #[case::kill_self(libc::SYS_kill, [4321, 0, 0, 0], libc::SECCOMP_RET_ALLOW)]
    #[case::kill_other(libc::SYS_kill, [1, 0, 0, 0], libc::SECCOMP_RET_ERRNO | libc::EPERM as u32)]
    #[case::exit_group(libc::SYS_exit_group, [0, 0, 0, 0], libc::SECCOMP_RET_ALLOW)]
    fn the_search_answers(#[case] nr: libc::c_long, #[case] args: [u64; 4], #[case] want: u32) {
        use crate::sandbox::seccomp_tree::{AUDIT_ARCH, interpret};
        let prog = program(4321).expect("compiles");
        let d = interpret::Data {
            nr: nr as u32,
            arch: AUDIT_ARCH,
            args: [args[0], args[1], args[2], args[3], 0, 0],
        };
        assert_eq!(interpret::run(&prog, &d), want);
        let foreign = interpret::Data {
            arch: 0x4000_0003,
            ..d
        };
        assert_eq!(
            interpret::run(&prog, &foreign),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn nothing_that_makes_or_reaches_another_process_is_allowed() {
        let listed: Vec<&str> = allowed()
            .into_iter()
            .flat_map(|g| g.calls.into_iter().map(|(name, _, _)| name))
            .collect();
        for never in [
            "clone",
            "clone3",
            "execve",
            "execveat",
            "socket",
            "socketpair",
            "openat",
            "unshare",
            "setns",
            "prctl",
            "ptrace",
            "pidfd_open",
            "add_key",
            "keyctl",
            "request_key",
            "shmget",
            "msgget",
            "semget",
            "memfd_create",
            "io_uring_setup",
            "process_vm_writev",
        ] {
            assert!(!listed.contains(&never), "{never} must not be allowed");
        }
    }
}
