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

/// The filter program. Layout: check arch, load nr, one `jeq` per denied
/// syscall jumping to the final `deny`, `allow` in between.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn program() -> Vec<libc::sock_filter> {
    let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let nrs: Vec<u32> = denied()
        .iter()
        .filter_map(|(_, nr)| u32::try_from(*nr).ok())
        .collect();
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        // Native arch: skip the next instruction.
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, deny),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
    ];
    // Each check jumps forward to the deny at the end; `remaining` counts
    // the instructions between the check and that deny.
    let mut checks: Vec<u32> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    checks.push(X32_SYSCALL_BIT);
    checks.extend(nrs);
    let n = checks.len();
    for (i, k) in checks.into_iter().enumerate() {
        // After this check: (n - i - 1) more checks, then `allow`.
        let to_deny = u8::try_from(n - i).unwrap_or(u8::MAX);
        #[cfg(target_arch = "x86_64")]
        let code = if i == 0 { BPF_JGE_K } else { BPF_JEQ_K };
        #[cfg(not(target_arch = "x86_64"))]
        let code = BPF_JEQ_K;
        p.push(jump(code, k, to_deny, 0));
    }
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET_K, deny));
    p
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn apply(t: &mut Tally) {
    let prog = program();
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).unwrap_or(u16::MAX),
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel
    // copies the program. Requires no_new_privs (set before) or CAP_SYS_ADMIN.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc == 0 {
        t.enforced("seccomp:no-fork-exec-socket");
    } else {
        t.missing(
            "seccomp:no-fork-exec-socket",
            std::io::Error::last_os_error(),
        );
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
        let p = program();
        let deny = p.len() - 1;
        assert_eq!(p[deny].code, BPF_RET_K);
        assert_eq!(p[deny].k, SECCOMP_RET_ERRNO | libc::EPERM as u32);
        assert_eq!(p[deny - 1].k, SECCOMP_RET_ALLOW);
        let mut checks = 0;
        for (i, ins) in p.iter().enumerate().skip(4) {
            if ins.code == BPF_JEQ_K || ins.code == BPF_JGE_K {
                assert_eq!(i + 1 + usize::from(ins.jt), deny, "instruction {i}");
                assert_eq!(ins.jf, 0);
                checks += 1;
            }
        }
        assert!(checks >= denied().len());
    }
}
