//! The seccomp allow-list laid out as a binary search on the call number.
//!
//! Why not `seccompiler`'s own layout: it tests the call number against each
//! allowed call in turn, and installing a filter makes the kernel run it
//! once per call number, for both of the architecture's tables, to fill its
//! per-call action cache (`seccomp_cache_prepare`, with interrupts off).
//! With ~40 calls that is ~460 × ~80 instructions interpreted, plus the JIT
//! of a 227-instruction program: about 200 µs of every worker's start,
//! measured with a fork that installs it and exits
//! (docs/performance.md, round 8). A search over the sorted numbers takes six
//! comparisons instead of up to forty, and the program is shorter.
//!
//! What is still `seccompiler`'s: each call's argument rules
//! ([`SeccompRule`] → BPF, with its offsets), [`apply_filter`]'s
//! `no_new_privs` and `seccomp(2)`. What is here: the architecture check,
//! loading the number, and the search. The unit tests run both programs
//! through a small interpreter for every call number and every argument
//! pattern the rules look at, and require the same answer.
//!
//! [`apply_filter`]: seccompiler::apply_filter

use seccompiler::{BpfProgram, SeccompRule, sock_filter};

// Classic BPF opcodes (linux/bpf_common.h).
/// BPF_LD | BPF_W | BPF_ABS.
const BPF_LD_W_ABS: u16 = 0x20;
/// BPF_JMP | BPF_JEQ | BPF_K.
const BPF_JMP_JEQ_K: u16 = 0x15;
/// BPF_JMP | BPF_JGE | BPF_K.
const BPF_JMP_JGE_K: u16 = 0x35;
/// BPF_RET | BPF_K.
const BPF_RET_K: u16 = 0x06;

/// `struct seccomp_data`: `nr` then `arch`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

/// The audit architecture the filter accepts (linux/audit.h): a call made
/// through any other table (i386's `int 0x80` on x86_64) kills the process,
/// as `seccompiler`'s check does.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xC000_00B7;

/// At most this many calls are tested one by one at a leaf of the search.
const LEAF: usize = 3;

/// The search could not be encoded: a jump over more than 255
/// instructions (the rules of the calls on one side are too long).
#[derive(Debug, thiserror::Error)]
#[error(
    "the allow-list's search needs a jump over {0} instructions; classic BPF jumps at most 255"
)]
pub struct TooFar(pub usize);

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: usize, jf: usize) -> Result<sock_filter, TooFar> {
    let jt = u8::try_from(jt).map_err(|_| TooFar(jt))?;
    let jf = u8::try_from(jf).map_err(|_| TooFar(jf))?;
    Ok(sock_filter { code, jt, jf, k })
}

/// One allowed call: its number, its argument rules (none: any
/// arguments).
pub struct Call {
    pub nr: u32,
    pub rules: Vec<SeccompRule>,
}

/// What runs once the number matched: `allow` at once, or each rule (its
/// conditions, then `allow`; a failed condition jumps past that `allow` to
/// the next rule) and `deny` when none matched.
fn body(rules: Vec<SeccompRule>, allow: u32, deny: u32) -> BpfProgram {
    if rules.is_empty() {
        return vec![stmt(BPF_RET_K, allow)];
    }
    let mut out = Vec::new();
    for rule in rules {
        out.extend(BpfProgram::from(rule));
        out.push(stmt(BPF_RET_K, allow));
    }
    out.push(stmt(BPF_RET_K, deny));
    out
}

/// The search over `calls` (sorted by number, distinct): every path ends
/// in a return, so the halves can simply follow each other.
fn search(calls: &mut [(u32, BpfProgram)], deny: u32) -> Result<BpfProgram, TooFar> {
    if calls.len() <= LEAF {
        let mut out = Vec::new();
        for (nr, body) in calls.iter_mut() {
            out.push(jump(BPF_JMP_JEQ_K, *nr, 0, body.len())?);
            out.append(body);
        }
        out.push(stmt(BPF_RET_K, deny));
        return Ok(out);
    }
    let mid = calls.len() / 2;
    let pivot = calls[mid].0;
    let (low, high) = calls.split_at_mut(mid);
    let low = search(low, deny)?;
    let high = search(high, deny)?;
    // nr >= pivot: over the low half into the high one.
    let mut out = vec![jump(BPF_JMP_JGE_K, pivot, low.len(), 0)?];
    out.extend(low);
    out.extend(high);
    Ok(out)
}

/// The whole program: the architecture check, the call number, the search.
/// `calls` may come in any order; a number given twice keeps the last.
pub fn compile(mut calls: Vec<Call>, allow: u32, deny: u32) -> Result<BpfProgram, TooFar> {
    calls.sort_by_key(|c| c.nr);
    let mut sorted: Vec<(u32, BpfProgram)> = Vec::with_capacity(calls.len());
    for call in calls {
        if sorted.last().is_some_and(|(nr, _)| *nr == call.nr) {
            sorted.pop();
        }
        sorted.push((call.nr, body(call.rules, allow, deny)));
    }
    let mut out = vec![
        stmt(BPF_LD_W_ABS, ARCH_OFFSET),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 1, 0)?,
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, NR_OFFSET),
    ];
    out.extend(search(&mut sorted, deny)?);
    Ok(out)
}

/// A classic BPF interpreter for the instructions seccomp filters use, to
/// compare two programs' answers in tests.
#[cfg(test)]
pub(crate) mod interpret {
    use seccompiler::sock_filter;

    /// `struct seccomp_data` for one call.
    pub struct Data {
        pub nr: u32,
        pub arch: u32,
        pub args: [u64; 6],
    }

    fn word(d: &Data, offset: u32) -> u32 {
        match offset {
            0 => d.nr,
            4 => d.arch,
            o if (16..64).contains(&o) => {
                let arg = d.args[((o - 16) / 8) as usize];
                if (o - 16) % 8 == 0 {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                }
            }
            o => panic!("load at offset {o}"),
        }
    }

    /// The filter's return value for `d`.
    pub fn run(prog: &[sock_filter], d: &Data) -> u32 {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = &prog[pc];
            pc += 1;
            let class = i.code & 0x07;
            match class {
                0x00 => a = word(d, i.k),                  // LD W ABS
                0x04 if i.code & 0xf0 == 0x50 => a &= i.k, // ALU AND K
                0x05 => {
                    let taken = match i.code & 0xf0 {
                        0x00 => {
                            pc += i.k as usize; // JA
                            continue;
                        }
                        0x10 => a == i.k,
                        0x20 => a > i.k,
                        0x30 => a >= i.k,
                        0x40 => a & i.k != 0,
                        op => panic!("jump op {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return i.k,
                _ => panic!("instruction {:#x}", i.code),
            }
        }
    }
}
