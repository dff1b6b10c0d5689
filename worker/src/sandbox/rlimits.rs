//! Resource limits: the kernel's per-process ceilings, set soft = hard so
//! that (with capabilities dropped afterwards) they can never be raised.

use nix::sys::resource::{Resource, setrlimit};

use super::{Inputs, Tally};

/// Descriptors the worker may hold: 0–2 and the socket at 3 are already
/// open; it needs no new ones.
pub const NOFILE: u64 = 8;

/// Heap headroom above `memoryBytes` for everything that is not the script
/// heap: the engine's own structures, and the copies of a result while it
/// is serialized (up to two frames of the protocol's maximum size).
pub const DATA_HEADROOM: u64 = 64 * 1024 * 1024 + 2 * dsh_protocol::DEFAULT_MAX_FRAME_BYTES as u64;

/// CPU seconds above `computeMs` before the kernel's backstop fires: the
/// interrupt handler stops the script first; this only catches a script
/// that defeats it.
pub const CPU_HEADROOM_SECS: u64 = 2;

/// The data-segment limit for a given script heap cap.
pub fn data_limit(memory_bytes: u64) -> u64 {
    memory_bytes.saturating_add(DATA_HEADROOM)
}

/// The CPU-time limit (seconds, soft) for a given `computeMs`. SIGXCPU at
/// the soft limit, SIGKILL one second later.
pub fn cpu_limit_secs(compute_ms: u64) -> u64 {
    compute_ms.div_ceil(1000).saturating_add(CPU_HEADROOM_SECS)
}

fn set(t: &mut Tally, rule: &str, resource: Resource, soft: u64, hard: u64) {
    match setrlimit(resource, soft, hard) {
        Ok(()) => t.enforced(rule),
        Err(e) => t.missing(rule, std::io::Error::from(e)),
    }
}

/// The limits every run gets, whatever its `Init` says.
pub fn apply_fixed(t: &mut Tally) {
    set(t, "rlimit:core=0", Resource::RLIMIT_CORE, 0, 0);
    set(t, "rlimit:fsize=0", Resource::RLIMIT_FSIZE, 0, 0);
    set(t, "rlimit:nofile", Resource::RLIMIT_NOFILE, NOFILE, NOFILE);
    // Stops fork for ordinary users; root is exempt from this one, which
    // is why the seccomp allow-list has no fork/clone either.
    set(t, "rlimit:nproc=0", Resource::RLIMIT_NPROC, 0, 0);
}

/// The limits derived from the run's `memoryBytes` and `computeMs`.
pub fn apply_run(inputs: &Inputs, t: &mut Tally) {
    let mut set = |rule: &str, resource, soft: u64, hard: u64| set(t, rule, resource, soft, hard);
    let data = data_limit(inputs.memory_bytes);
    set("rlimit:data", Resource::RLIMIT_DATA, data, data);
    if let Some(ms) = inputs.compute_ms {
        let secs = cpu_limit_secs(ms);
        set(
            "rlimit:cpu",
            Resource::RLIMIT_CPU,
            secs,
            secs.saturating_add(1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_leave_headroom_above_the_budgets() {
        assert_eq!(data_limit(256 << 20), (256 << 20) + DATA_HEADROOM);
        assert_eq!(data_limit(u64::MAX), u64::MAX);
        assert_eq!(cpu_limit_secs(1), 3);
        assert_eq!(cpu_limit_secs(1000), 3);
        assert_eq!(cpu_limit_secs(1001), 4);
    }
}
