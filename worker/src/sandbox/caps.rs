//! The capability layer: a worker started by root would otherwise hold
//! every capability root has (bypassing file permissions, raising its own
//! rlimits, ignoring `RLIMIT_NPROC`). Dropping the effective, permitted and
//! inheritable sets, and the ambient set, leaves it with none; with
//! `no_new_privs` and exec denied it can never gain them back.
//!
//! Raw calls: nix wraps neither `PR_CAP_AMBIENT` nor `capset(2)`.

use super::Tally;

// linux/capability.h
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

pub fn drop_all(t: &mut Tally) {
    // SAFETY: prctl with PR_CAP_AMBIENT takes no pointers. EINVAL on
    // kernels without ambient capabilities is fine: there are none to clear.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads a v3 header and two data structs, which is what
    // we pass; lowering one's own capabilities needs no privilege.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc == 0 {
        t.enforced("capabilities:none");
    } else {
        t.missing("capabilities:none", std::io::Error::last_os_error());
    }
}
