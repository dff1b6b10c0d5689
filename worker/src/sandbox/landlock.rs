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
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictSelfAttr, RestrictionStatus,
    Ruleset, RulesetAttr, RulesetStatus, Scope,
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
        Ok(status) => record(
            t,
            abi,
            abi_n,
            &status.ruleset,
            status.no_new_privs,
            status.all_threads,
        ),
        Err(e) => t.missing(
            "landlock",
            format!("the kernel offers ABI {abi_n} but restricting failed: {e}"),
        ),
    }
}

/// Records what `restrict_self` says it enforced: the rules of `abi` only
/// when the whole ruleset is in force (the status does not say which part
/// of a partial one is), and `no_new_privs` taken back if Landlock found it
/// unset.
fn record(
    t: &mut Tally,
    abi: ABI,
    abi_n: u32,
    ruleset: &RulesetStatus,
    no_new_privs: bool,
    all_threads: bool,
) {
    match ruleset {
        RulesetStatus::FullyEnforced => {
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
            if all_threads {
                t.enforced("landlock:all-threads");
            }
        }
        RulesetStatus::PartiallyEnforced => t.missing(
            "landlock",
            format!("the kernel offers ABI {abi_n} but enforced the ruleset only partially"),
        ),
        RulesetStatus::NotEnforced => t.missing(
            "landlock",
            format!("the kernel offers ABI {abi_n} but did not enforce the ruleset"),
        ),
    }
    if !no_new_privs {
        t.revoke(
            "no_new_privs",
            "Landlock's restrict_self reports it is not set",
        );
    }
}

fn restrict(abi: ABI) -> Result<RestrictionStatus, ::landlock::RulesetError> {
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
    created.restrict_self()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(abi: i32, ruleset: RulesetStatus, nnp: bool, all_threads: bool) -> Tally {
        let mut t = Tally::default();
        t.enforced("no_new_privs");
        let abi_n = u32::try_from(abi).expect("positive");
        record(&mut t, ABI::from(abi), abi_n, &ruleset, nnp, all_threads);
        t
    }

    #[test]
    fn a_fully_enforced_ruleset_reports_the_rules_of_its_abi() {
        let t = recorded(8, RulesetStatus::FullyEnforced, true, true);
        assert_eq!(
            t.enforced_rules(),
            [
                "no_new_privs",
                "landlock:fs",
                "landlock:net-tcp",
                "landlock:scope-abstract-unix",
                "landlock:scope-signal",
                "landlock:all-threads",
            ]
        );
        assert!(t.missing_rules().is_empty());

        let t = recorded(3, RulesetStatus::FullyEnforced, true, false);
        assert_eq!(t.enforced_rules(), ["no_new_privs", "landlock:fs"]);
        assert_eq!(
            t.missing_rules(),
            [
                "landlock:net-tcp (needs ABI 4, kernel has 3)",
                "landlock:scope (needs ABI 6, kernel has 3)",
            ]
        );
    }

    #[test]
    fn a_partial_or_absent_ruleset_claims_no_landlock_rule() {
        for (status, why) in [
            (RulesetStatus::PartiallyEnforced, "only partially"),
            (RulesetStatus::NotEnforced, "did not enforce"),
        ] {
            let t = recorded(6, status, true, false);
            assert_eq!(t.enforced_rules(), ["no_new_privs"]);
            assert_eq!(t.missing_rules().len(), 1);
            assert!(t.missing_rules()[0].starts_with("landlock ("));
            assert!(
                t.missing_rules()[0].contains(why),
                "{:?}",
                t.missing_rules()
            );
        }
    }

    #[test]
    fn no_new_privs_unset_is_taken_back() {
        let t = recorded(6, RulesetStatus::FullyEnforced, false, false);
        assert!(!t.enforced_rules().iter().any(|r| r == "no_new_privs"));
        assert!(
            t.missing_rules()
                .iter()
                .any(|r| r.starts_with("no_new_privs ("))
        );
    }
}
