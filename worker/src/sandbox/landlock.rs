//! The Landlock layer: a ruleset that handles every access right the
//! running kernel knows and grants none, so the worker can open no path,
//! bind or connect no TCP port, reach no abstract unix socket and signal no
//! process outside its own domain. Its socket to the host was connected
//! before, so nothing it needs is lost.
//!
//! The kernel's ABI is read once (or overridden by a test) and the ruleset
//! asks for exactly what that ABI offers, as a hard requirement: anything
//! the crate cannot enforce is an error we report, not a silent downgrade.

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictSelfAttr, Ruleset,
    RulesetAttr, Scope,
};

use super::Tally;

/// The Landlock ABI of the running kernel: 0 when Landlock is not built in
/// or not enabled. A raw call: the landlock crate keeps its own query
/// private, and the ruleset must be built for this ABI before it exists.
pub fn kernel_abi() -> u32 {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    u32::try_from(v).unwrap_or(0)
}

pub fn apply(abi_override: Option<u32>, t: &mut Tally) {
    let abi_n = abi_override.unwrap_or_else(kernel_abi);
    t.set_landlock_abi(abi_n);
    if abi_n == 0 {
        let why = "Landlock is not available in this kernel (ABI 0)";
        for rule in ["landlock:fs", "landlock:net-tcp", "landlock:scope"] {
            t.missing(rule, why);
        }
        return;
    }
    let abi = ABI::from(i32::try_from(abi_n).unwrap_or(i32::MAX));
    match restrict(abi) {
        Ok(()) => {
            t.enforced("landlock:fs");
            if abi >= ABI::V4 {
                t.enforced("landlock:net-tcp");
            } else {
                t.missing(
                    "landlock:net-tcp",
                    format!("needs ABI 4, kernel has {abi_n}"),
                );
            }
            if abi >= ABI::V6 {
                t.enforced("landlock:scope-abstract-unix");
                t.enforced("landlock:scope-signal");
            } else {
                t.missing("landlock:scope", format!("needs ABI 6, kernel has {abi_n}"));
            }
            // Not part of `full`: the worker is single-threaded when the
            // ruleset is applied, so the calling thread is every thread.
            if abi >= ABI::V8 {
                t.enforced("landlock:all-threads");
            }
        }
        Err(e) => t.missing(
            "landlock",
            format!("the kernel offers ABI {abi_n} but restricting failed: {e}"),
        ),
    }
}

fn restrict(abi: ABI) -> Result<(), ::landlock::RulesetError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?;
    if abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    if abi >= ABI::V8 {
        created = created.all_threads(true)?;
    }
    // No rules are added: nothing is granted.
    created.restrict_self()?;
    Ok(())
}
