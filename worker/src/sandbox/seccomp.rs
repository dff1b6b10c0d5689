//! The seccomp layer: a tiny classic-BPF filter that makes the syscalls a
//! worker never needs fail with `EPERM`: creating processes (`fork`,
//! `vfork`, `clone`, `clone3`), replacing the program (`execve`,
//! `execveat`), creating sockets (`socket`, `socketpair`; the worker's
//! one socket already exists) and io_uring (which can do both without
//! those syscalls). Landlock covers files, TCP and signals;
//! this covers what Landlock does not (UDP, raw and netlink sockets, and
//! `fork` for root, whom `RLIMIT_NPROC` does not bind).
//!
//! Syscalls of a foreign ABI (i386 `int 0x80` or x32 on x86_64) are denied
//! wholesale, so the filter cannot be sidestepped by another syscall table.
//! Everything else is allowed: this is a deny list on top of Landlock, not
//! the whole sandbox.

use super::Tally;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

// Offsets in struct seccomp_data.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// x32 syscalls on x86_64 carry this bit in their number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The syscalls denied, by name (for the docs and the report) and number.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn denied() -> Vec<(&'static str, libc::c_long)> {
    let mut v = vec![
        ("clone", libc::SYS_clone),
        ("clone3", libc::SYS_clone3),
        ("execve", libc::SYS_execve),
        ("execveat", libc::SYS_execveat),
        ("socket", libc::SYS_socket),
        ("socketpair", libc::SYS_socketpair),
        // io_uring can create sockets (IORING_OP_SOCKET) and open files
        // without the syscalls above.
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([("fork", libc::SYS_fork), ("vfork", libc::SYS_vfork)]);
    v
}

/// The kernel's limit on a classic BPF program (linux/bpf_common.h).
const BPF_MAXINSNS: usize = 4096;

/// Why the filter could not be assembled. Only a change to the denied list
/// can cause one; the report then names it instead of installing a filter
/// whose jumps land somewhere else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A conditional jump can skip at most 255 instructions.
    #[error("the jump at instruction {from} to {to} is longer than classic BPF allows (255)")]
    JumpTooFar { from: usize, to: usize },
    /// Classic BPF only jumps forward.
    #[error("the jump at instruction {from} to {to} would go backward")]
    Backward { from: usize, to: usize },
    /// The kernel refuses longer programs.
    #[error("the filter has {len} instructions, over the kernel's limit of {BPF_MAXINSNS}")]
    TooLong { len: usize },
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The `jt`/`jf` that makes the jump at index `from` land on index `to`:
/// a jump skips that many instructions after its own.
fn offset(from: usize, to: usize) -> Result<u8, ProgramError> {
    let skip = to
        .checked_sub(from.saturating_add(1))
        .ok_or(ProgramError::Backward { from, to })?;
    u8::try_from(skip).map_err(|_| ProgramError::JumpTooFar { from, to })
}

/// Index of the instruction that loads the syscall number.
const LOAD_NR: usize = 3;

/// The filter program. Layout: check arch, load nr, one check per denied
/// syscall jumping to the final `deny`, `allow` in between.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn program() -> Result<Vec<libc::sock_filter>, ProgramError> {
    let nrs = denied()
        .into_iter()
        .filter_map(|(_, nr)| u32::try_from(nr).ok());
    let mut checks: Vec<(u16, u32)> = Vec::new();
    // x32 syscalls: every number at or above the x32 bit.
    #[cfg(target_arch = "x86_64")]
    checks.push((BPF_JGE_K, X32_SYSCALL_BIT));
    checks.extend(nrs.map(|nr| (BPF_JEQ_K, nr)));
    assemble(&checks)
}

/// Assembles the program for `checks` (each a jump opcode and its
/// constant; a match denies). Every jump offset is computed from the
/// instruction's own index and its target's.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn assemble(checks: &[(u16, u32)]) -> Result<Vec<libc::sock_filter>, ProgramError> {
    let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let first_check = LOAD_NR + 1;
    let allow_at = first_check + checks.len();
    let deny_at = allow_at + 1;
    let len = deny_at + 1;
    if len > BPF_MAXINSNS {
        return Err(ProgramError::TooLong { len });
    }
    let mut p = Vec::with_capacity(len);
    p.push(stmt(BPF_LD_W_ABS, OFFSET_ARCH));
    // Native arch: skip the deny below, on to loading the number.
    p.push(jump(BPF_JEQ_K, AUDIT_ARCH, offset(p.len(), LOAD_NR)?, 0));
    p.push(stmt(BPF_RET_K, deny));
    p.push(stmt(BPF_LD_W_ABS, OFFSET_NR));
    for &(code, k) in checks {
        p.push(jump(code, k, offset(p.len(), deny_at)?, 0));
    }
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET_K, deny));
    debug_assert_eq!(p.len(), len);
    Ok(p)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn apply(t: &mut Tally) {
    const RULE: &str = "seccomp:no-fork-exec-socket";
    let prog = match program() {
        Ok(prog) => prog,
        Err(e) => return t.missing(RULE, e),
    };
    let Ok(len) = u16::try_from(prog.len()) else {
        return t.missing(RULE, ProgramError::TooLong { len: prog.len() });
    };
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `prog` and holds its length; both outlive
    // the call, and the kernel only reads (copies) the program. No safe
    // wrapper exists (nix has none for seccomp). Requires no_new_privs (set
    // before) or CAP_SYS_ADMIN; without them the call fails, it does no harm.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc == 0 {
        t.enforced(RULE);
    } else {
        t.missing(RULE, std::io::Error::last_os_error());
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn apply(t: &mut Tally) {
    t.missing(
        "seccomp:no-fork-exec-socket",
        "the filter is written for x86_64 and aarch64 only",
    );
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn every_check_jumps_to_the_final_deny() {
        let p = program().expect("the filter assembles");
        let deny = p.len() - 1;
        assert_eq!(p[deny].code, BPF_RET_K);
        assert_eq!(p[deny].k, SECCOMP_RET_ERRNO | libc::EPERM as u32);
        assert_eq!(p[deny - 1].k, SECCOMP_RET_ALLOW);
        let mut checks = 0;
        for (i, ins) in p.iter().enumerate().skip(LOAD_NR + 1) {
            if ins.code == BPF_JEQ_K || ins.code == BPF_JGE_K {
                assert_eq!(i + 1 + usize::from(ins.jt), deny, "instruction {i}");
                assert_eq!(ins.jf, 0);
                checks += 1;
            }
        }
        assert!(checks >= denied().len());
    }

    #[test]
    fn the_arch_check_lands_on_loading_the_number() {
        let p = program().expect("the filter assembles");
        assert_eq!((p[0].code, p[0].k), (BPF_LD_W_ABS, OFFSET_ARCH));
        assert_eq!((p[1].code, p[1].k), (BPF_JEQ_K, AUDIT_ARCH));
        let target = 1 + 1 + usize::from(p[1].jt);
        assert_eq!(target, LOAD_NR);
        assert_eq!((p[target].code, p[target].k), (BPF_LD_W_ABS, OFFSET_NR));
        // Not the native arch: fall through to the deny.
        assert_eq!(p[2].code, BPF_RET_K);
        assert_eq!(p[2].k, SECCOMP_RET_ERRNO | libc::EPERM as u32);
    }

    #[test]
    fn offsets_are_computed_and_checked() {
        assert_eq!(offset(1, 3), Ok(1));
        assert_eq!(offset(4, 5), Ok(0));
        assert_eq!(offset(4, 4 + 256), Ok(255));
        assert_eq!(
            offset(4, 4 + 257),
            Err(ProgramError::JumpTooFar { from: 4, to: 261 })
        );
        assert_eq!(offset(5, 5), Err(ProgramError::Backward { from: 5, to: 5 }));
    }

    #[test]
    fn a_list_too_long_for_the_jumps_is_a_typed_error() {
        // 255 checks: the first jumps 254 checks plus `allow`, 255 in all.
        let fits = vec![(BPF_JEQ_K, 1); 255];
        let p = assemble(&fits).expect("the longest list that fits");
        assert_eq!(p[LOAD_NR + 1].jt, u8::MAX);
        let too_many = vec![(BPF_JEQ_K, 1); 256];
        assert_eq!(
            assemble(&too_many),
            Err(ProgramError::JumpTooFar {
                from: LOAD_NR + 1,
                to: LOAD_NR + 1 + 256 + 1
            })
        );
        assert_eq!(
            assemble(&vec![(BPF_JEQ_K, 1); BPF_MAXINSNS]),
            Err(ProgramError::TooLong {
                len: BPF_MAXINSNS + 6
            })
        );
    }
}
