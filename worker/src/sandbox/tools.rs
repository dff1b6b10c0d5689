//! The sandbox profile of one tool call (`dsh-worker tool`): unlike the
//! script worker, a tool process must open files in the workspace, and the
//! Bash tool must run arbitrary programs, so this profile grants access
//! *beneath the workspace* instead of granting nothing, and its seccomp
//! filter is a deny-list (default allow) of the calls that reach past the
//! process's own files: namespaces, mounts, kernel modules, other
//! processes' memory, io_uring, and sockets unless the call has network.
//!
//! Layers, in order (each recorded in the [`Tally`] only when in force):
//! rlimits, `no_new_privs`, Landlock, the capability drop, seccomp last.
//! What each tool is granted is in [`Grants`] and docs/sandbox.md
//! ("Tool calls").

use std::path::{Path, PathBuf};

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::sys::resource::{Resource, setrlimit};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use super::{Tally, caps, landlock::kernel_abi};

/// The largest file a tool call (or a program Bash runs) may write.
pub const FSIZE_BYTES: u64 = 64 * 1024 * 1024;

/// CPU seconds a Bash call's processes may each use beyond its timeout: a
/// backstop only (the wall-clock timeout kills the group first), so the
/// margin is generous.
pub const CPU_MARGIN_SECS: u64 = 10;

/// The rule name of the tool deny-list in the report.
pub const SECCOMP_RULE: &str = "seccomp:deny-list";

/// Directories a shell and common programs (ls, cat, grep, git) need to
/// read and execute; those that do not exist are skipped. Not `/etc`,
/// `/root`, `/home` or `/proc`: see docs/sandbox.md for what runs without
/// them.
pub const SYSTEM_DIRS: [&str; 6] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];

/// Single files Bash may read: the dynamic loader's cache (library paths
/// only, no secrets; without it binaries linked against libraries outside
/// the default directories, such as /usr/local/lib, fail to start), and
/// the devices that only produce bytes (zeros, randomness).
pub const SYSTEM_FILES_READ: [&str; 4] = [
    "/etc/ld.so.cache",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
];

/// What filesystem access one tool call is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grants {
    /// Read, Glob, Grep, LS: read files and list directories beneath the
    /// workspace; nothing else.
    ReadWorkspace,
    /// Edit, Write: every right beneath the workspace (but execute).
    WriteWorkspace,
    /// Bash: every right beneath the workspace and its private temporary
    /// directory; read and execute beneath the system directories;
    /// read and write `/dev/null`.
    Shell,
}

/// What the profile is built from.
#[derive(Debug, Clone)]
pub struct Profile {
    pub grants: Grants,
    /// The canonical workspace.
    pub workspace: PathBuf,
    /// Bash only: its private temporary directory (`TMPDIR`), whose parent
    /// is shared by the user's tool calls.
    pub tmp_dir: Option<PathBuf>,
    /// Bash only: directories it may read beneath (a worktree's git
    /// directory).
    pub shell_read: Vec<PathBuf>,
    /// Bash only: directories it may change beneath.
    pub shell_write: Vec<PathBuf>,
    /// TCP and sockets allowed.
    pub network: bool,
    /// Bash only: the CPU-time backstop, in seconds.
    pub cpu_secs: Option<u64>,
    /// Testing only: behave as if the kernel's Landlock ABI were this.
    pub landlock_abi_override: Option<u32>,
}

/// Applies every layer of `profile` to the calling process, recording each
/// in `t`. The process must be single-threaded.
pub fn apply(profile: &Profile, t: &mut Tally) {
    rlimits(profile, t);
    match nix::sys::prctl::set_no_new_privs() {
        Ok(()) => t.enforced("no_new_privs"),
        Err(e) => t.missing("no_new_privs", std::io::Error::from(e)),
    }
    landlock(profile, t);
    caps::drop_all(t);
    // Last: `prctl` and `capset` above are not denied by it either, but
    // nothing after this point may loosen the process.
    let installed = deny_list(profile.network).and_then(|progs| {
        for prog in &progs {
            seccompiler::apply_filter(prog)?;
        }
        Ok(())
    });
    match installed {
        Ok(()) => t.enforced(SECCOMP_RULE),
        Err(e) => t.missing(SECCOMP_RULE, e),
    }
}

fn rlimits(profile: &Profile, t: &mut Tally) {
    let mut set = |rule: &str, resource, soft: u64, hard: u64| match setrlimit(resource, soft, hard)
    {
        Ok(()) => t.enforced(rule),
        Err(e) => t.missing(rule, std::io::Error::from(e)),
    };
    set("rlimit:core=0", Resource::RLIMIT_CORE, 0, 0);
    set(
        "rlimit:fsize=64MiB",
        Resource::RLIMIT_FSIZE,
        FSIZE_BYTES,
        FSIZE_BYTES,
    );
    // Inherited by every program Bash starts, each with its own count: a
    // backstop against a CPU-bound process that somehow outlives the
    // group kill, not a budget.
    if let Some(secs) = profile.cpu_secs {
        set(
            "rlimit:cpu",
            Resource::RLIMIT_CPU,
            secs,
            secs.saturating_add(1),
        );
    }
    // No RLIMIT_NPROC: it counts every process of the user, not of this
    // call, so any fixed cap either breaks a busy developer's account or
    // bounds nothing; and root (the usual case in containers) is exempt
    // from it whatever its capabilities. A fork bomb is bounded by the
    // timeout and the group kill instead (docs/sandbox.md).
}

fn landlock(profile: &Profile, t: &mut Tally) {
    let abi_n = profile.landlock_abi_override.unwrap_or_else(kernel_abi);
    t.set_landlock_abi(abi_n);
    if abi_n == 0 {
        let why = "Landlock is not available in this kernel (ABI 0)";
        t.missing("landlock:fs", why);
        if !profile.network {
            t.missing("landlock:net-tcp", why);
        }
        t.missing("landlock:scope", why);
        return;
    }
    let abi = ABI::from(i32::try_from(abi_n).unwrap_or(i32::MAX));
    match restrict(abi, profile) {
        Ok(status) => match status.ruleset {
            RulesetStatus::FullyEnforced => {
                t.enforced("landlock:fs");
                if !profile.network {
                    if abi >= ABI::V4 {
                        t.enforced("landlock:net-tcp");
                    } else {
                        t.missing(
                            "landlock:net-tcp",
                            format!("needs ABI 4, kernel has {abi_n}"),
                        );
                    }
                }
                if abi >= ABI::V6 {
                    t.enforced("landlock:scope-abstract-unix");
                    t.enforced("landlock:scope-signal");
                } else {
                    t.missing("landlock:scope", format!("needs ABI 6, kernel has {abi_n}"));
                }
                if !status.no_new_privs {
                    t.revoke(
                        "no_new_privs",
                        "Landlock's restrict_self reports it is not set",
                    );
                }
            }
            other => t.missing(
                "landlock",
                format!("the kernel offers ABI {abi_n} but the ruleset is {other:?}"),
            ),
        },
        Err(e) => t.missing(
            "landlock",
            format!("the kernel offers ABI {abi_n} but restricting failed: {e}"),
        ),
    }
}

/// Why the ruleset could not be built.
#[derive(Debug, thiserror::Error)]
enum RestrictError {
    #[error(transparent)]
    Ruleset(#[from] ::landlock::RulesetError),
    #[error("cannot open a path to grant: {0}")]
    Path(#[from] ::landlock::PathFdError),
}

fn restrict(abi: ABI, profile: &Profile) -> Result<RestrictionStatus, RestrictError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?;
    // With network the TCP rights are simply not handled (allowed).
    if abi >= ABI::V4 && !profile.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
    let all = AccessFs::from_all(abi);
    let workspace = match profile.grants {
        Grants::ReadWorkspace => read,
        Grants::WriteWorkspace => all & !AccessFs::Execute,
        Grants::Shell => all,
    };
    created = created.add_rule(PathBeneath::new(
        PathFd::new(&profile.workspace)?,
        workspace,
    ))?;
    if profile.grants == Grants::Shell {
        if let Some(tmp) = &profile.tmp_dir {
            created = created.add_rule(PathBeneath::new(PathFd::new(tmp)?, all))?;
            // Only so the tool process can remove the call's directory
            // afterwards: the right to remove (empty) directories beneath
            // the shared parent, which nobody may list.
            if let Some(parent) = tmp.parent() {
                created = created
                    .add_rule(PathBeneath::new(PathFd::new(parent)?, AccessFs::RemoveDir))?;
            }
        }
        for dir in existing(&SYSTEM_DIRS) {
            created = created.add_rule(PathBeneath::new(
                PathFd::new(dir)?,
                AccessFs::from_read(abi),
            ))?;
        }
        for file in existing(&SYSTEM_FILES_READ) {
            created = created.add_rule(PathBeneath::new(PathFd::new(file)?, AccessFs::ReadFile))?;
        }
        for dir in &profile.shell_read {
            created = created.add_rule(PathBeneath::new(PathFd::new(dir)?, read))?;
        }
        for dir in &profile.shell_write {
            created = created.add_rule(PathBeneath::new(
                PathFd::new(dir)?,
                all & !AccessFs::Execute,
            ))?;
        }
        // Read, write and truncate (`> /dev/null` opens with O_TRUNC).
        let null = AccessFs::from_file(abi) & !AccessFs::Execute;
        created = created.add_rule(PathBeneath::new(PathFd::new("/dev/null")?, null))?;
    }
    Ok(created.restrict_self()?)
}

fn existing<'a>(paths: &'a [&'a str]) -> impl Iterator<Item = &'a str> {
    paths.iter().copied().filter(|p| Path::new(p).exists())
}

/// Why a seccomp filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("the deny-list does not compile: {0}")]
    Compile(String),
    #[error("the kernel refused the filter: {0}")]
    Install(String),
}

impl From<seccompiler::BackendError> for FilterError {
    fn from(e: seccompiler::BackendError) -> Self {
        FilterError::Compile(e.to_string())
    }
}

impl From<seccompiler::Error> for FilterError {
    fn from(e: seccompiler::Error) -> Self {
        FilterError::Install(e.to_string())
    }
}

/// The calls every tool process (and everything Bash starts) is refused,
/// with `EPERM`. Reviewed as one table.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn denied(network: bool) -> Vec<(&'static str, libc::c_long)> {
    let mut calls = vec![
        // Other processes: tracing them or reading/writing their memory.
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        // The filesystem namespace: mounts (the old and the new API), root
        // changes. A user namespace would make them possible unprivileged.
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("chroot", libc::SYS_chroot),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("move_mount", libc::SYS_move_mount),
        ("open_tree", libc::SYS_open_tree),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        // Kernel attack surface no tool needs.
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        // io_uring performs file and socket operations without the system
        // calls this filter sees.
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        // The machine itself.
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("reboot", libc::SYS_reboot),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
    ];
    if !network {
        // Every socket family: Landlock (below ABI 9) confines neither UDP
        // nor pathname unix sockets. socketpair stays: it reaches nothing.
        calls.push(("socket", libc::SYS_socket));
    }
    calls
}

#[cfg(target_arch = "x86_64")]
const ARCH: seccompiler::TargetArch = seccompiler::TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: seccompiler::TargetArch = seccompiler::TargetArch::aarch64;

/// `clone` flags that make a namespace (the same as `unshare`).
const CLONE_NS_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// The deny-list, compiled as two filters (both installed; the kernel runs
/// every filter and applies the strictest answer): the table above plus
/// `clone` with a namespace flag, refused with `EPERM`; and `clone3`, whose
/// flags live in memory seccomp cannot read, refused with `ENOSYS` so that
/// the C library falls back to `clone` (which the first filter inspects).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn deny_list(network: bool) -> Result<[BpfProgram; 2], FilterError> {
    use std::collections::BTreeMap;
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in denied(network) {
        map.insert(nr, Vec::new());
    }
    let mut ns_rules = Vec::new();
    for flag in CLONE_NS_FLAGS {
        let flag = flag as u64;
        ns_rules.push(SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )?])?);
    }
    map.insert(libc::SYS_clone, ns_rules);
    let eperm = SeccompFilter::new(
        map,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    let enosys = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;
    Ok([BpfProgram::try_from(eperm)?, BpfProgram::try_from(enosys)?])
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn deny_list(_network: bool) -> Result<[BpfProgram; 2], FilterError> {
    Err(FilterError::Compile(
        "the deny-list is written for x86_64 and aarch64 only".into(),
    ))
}

/// For the Bash child, installed in it after `setsid`: `setsid` and
/// `setpgid` refused, so no descendant can leave the process group that
/// the timeout kills.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn stay_in_group() -> Result<BpfProgram, FilterError> {
    use std::collections::BTreeMap;
    let filter = SeccompFilter::new(
        BTreeMap::from([
            (libc::SYS_setsid, Vec::new()),
            (libc::SYS_setpgid, Vec::new()),
        ]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    Ok(BpfProgram::try_from(filter)?)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn stay_in_group() -> Result<BpfProgram, FilterError> {
    Err(FilterError::Compile(
        "the filter is written for x86_64 and aarch64 only".into(),
    ))
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn the_deny_list_names_each_call_once_and_socket_only_without_network() {
        for network in [false, true] {
            let calls = denied(network);
            let mut seen = std::collections::HashSet::new();
            for (name, nr) in &calls {
                assert!(seen.insert(*nr), "{name} listed twice");
            }
            assert_eq!(calls.iter().any(|(n, _)| *n == "socket"), !network);
        }
        assert!(stay_in_group().is_ok());
        assert!(deny_list(false).is_ok() && deny_list(true).is_ok());
    }
}
