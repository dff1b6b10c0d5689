//! The worker's sandbox: what a script that escaped the JavaScript engine
//! could still do is bounded by the kernel, not by our good intentions.
//!
//! It is applied once, while the worker is still single-threaded and before
//! any line of the script exists in it: [`early`] right after `Hello` (for
//! the policy the host named with `--sandbox`), [`finish`] after `Init`
//! (the run's own limits and the verdict), or both at once with [`apply`].
//! It stacks independent layers, each of which reports what it actually
//! enforced (in the spirit of rust-landlock: best effort, never pretending):
//!
//! - `rlimits`: no core dumps, no file writes, few descriptors, no new
//!   processes; after `Init`, a data-segment cap derived from
//!   `memoryBytes` and a CPU-time backstop derived from `computeMs`;
//! - `no_new_privs`;
//! - [`landlock`]: every filesystem right handled and none granted, TCP bind
//!   and connect denied (ABI ≥ 4), abstract unix sockets and signals scoped
//!   (ABI ≥ 6), all threads (ABI ≥ 8);
//! - `caps`: every capability dropped (a worker started by root keeps
//!   none of root's powers);
//! - [`seccomp`]: an allow-list of the few system calls a sandboxed
//!   worker makes (the socket, memory, clocks, exit); everything else —
//!   files, processes, sockets, namespaces, keys, SysV IPC, shared
//!   mappings — fails with `EPERM`. Installed last.
//!
//! The result is a [`SandboxReport`]: `full` when every layer is enforced,
//! `partial` when some are, `none` when nothing is. `strict` turns anything
//! short of `full` into `SANDBOX_UNAVAILABLE`. What this is and is not
//! protecting against is in docs/sandbox.md.
//!
//! [`tools`] is a different profile, for one tool call of the agent loop
//! (`dsh-worker tool`): access beneath a workspace instead of none.
//!
//! Not in here: the empty environment, the socket as stdin and `/` as the working
//! directory are set by the host when it spawns the worker.

#[cfg(target_os = "linux")]
pub(crate) mod caps;
#[cfg(target_os = "linux")]
pub mod landlock;
#[cfg(target_os = "linux")]
pub(crate) mod rlimits;
#[cfg(target_os = "linux")]
pub mod seccomp;
#[cfg(target_os = "linux")]
mod seccomp_tree;
#[cfg(target_os = "linux")]
pub mod tools;

use dsh_protocol::{SandboxLevel, SandboxPolicy, SandboxReport};

/// What the sandbox is derived from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inputs {
    /// The script heap cap (`memoryBytes`); the data rlimit adds headroom.
    pub memory_bytes: u64,
    /// The script's CPU budget (`computeMs`); the CPU rlimit is a backstop.
    pub compute_ms: Option<u64>,
    /// Testing only: behave as if the kernel's Landlock ABI were this
    /// (`0` = no Landlock). Set by `DSH_WORKER_TESTING=landlock-abi=N`,
    /// which only a test's wrapper script sets (the host clears a
    /// worker's environment).
    pub landlock_abi_override: Option<u32>,
}

/// Collects what each layer enforced and what it could not (start with
/// `Tally::default()`; a layer such as [`landlock::apply`] records into it).
#[derive(Debug, Default)]
pub struct Tally {
    enforced: Vec<String>,
    missing: Vec<String>,
    landlock_abi: Option<u32>,
}

impl Tally {
    pub(crate) fn enforced(&mut self, rule: impl Into<String>) {
        self.enforced.push(rule.into());
    }

    /// A rule that is part of `full` but could not be enforced, and why.
    pub(crate) fn missing(&mut self, rule: &str, why: impl std::fmt::Display) {
        self.missing.push(format!("{rule} ({why})"));
    }

    /// A rule recorded as enforced that a later layer found not to be: it
    /// moves to the missing list, with why.
    pub(crate) fn revoke(&mut self, rule: &str, why: impl std::fmt::Display) {
        self.enforced.retain(|r| r != rule);
        self.missing(rule, why);
    }

    pub(crate) fn set_landlock_abi(&mut self, abi: u32) {
        self.landlock_abi = Some(abi);
    }

    #[cfg(test)]
    fn enforced_rules(&self) -> &[String] {
        &self.enforced
    }

    #[cfg(test)]
    fn missing_rules(&self) -> &[String] {
        &self.missing
    }

    pub(crate) fn into_report(self) -> SandboxReport {
        let level = if self.enforced.is_empty() {
            SandboxLevel::None
        } else if self.missing.is_empty() {
            SandboxLevel::Full
        } else {
            SandboxLevel::Partial
        };
        SandboxReport {
            level,
            landlock_abi: self.landlock_abi,
            enforced: self.enforced,
            missing: self.missing,
        }
    }
}

/// `strict` asked for full confinement and this kernel does not give it:
/// the message of `SANDBOX_UNAVAILABLE`, and the report of what was
/// reached (its `missing` names each rule and why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sandbox policy \"{strict}\" requires full confinement, and this kernel/platform does not enforce: {}. Use --sandbox {best_effort} to run with what is available (see docs/sandbox.md)",
    reached.missing.join("; "),
    strict = SandboxPolicy::Strict,
    best_effort = SandboxPolicy::BestEffort
)]
pub struct SandboxUnavailable {
    /// What the layers reached before the refusal.
    pub reached: SandboxReport,
}

/// The layers applied before the run is known (see [`early`]).
#[derive(Debug)]
pub struct Early {
    policy: SandboxPolicy,
    tally: Tally,
}

/// Applies every layer that does not depend on the run — the fixed
/// rlimits, `no_new_privs`, Landlock, the capability drop, the
/// working-directory check and seccomp, in that order — for `policy`
/// (nothing for `off`). The worker calls it right after `Hello`, with the
/// policy its policy line named ([`dsh_protocol::policy_line`]), before it
/// builds its engine and long before `Init`: the run then only sets its
/// own limits ([`finish`]).
pub fn early(policy: SandboxPolicy, landlock_abi_override: Option<u32>) -> Early {
    let mut tally = Tally::default();
    if policy != SandboxPolicy::Off {
        apply_layers(landlock_abi_override, &mut tally);
    }
    Early { policy, tally }
}

/// After `Init`: the rlimits derived from the run's `memoryBytes` and
/// `computeMs` (seccomp lets the worker lower its own limits, nothing
/// else), for the policy [`early`] applied. Under `strict`, anything short
/// of full confinement is [`SandboxUnavailable`]; the body must then not
/// run.
pub fn finish(early: Early, inputs: &Inputs) -> Result<SandboxReport, SandboxUnavailable> {
    let Early { policy, mut tally } = early;
    if policy == SandboxPolicy::Off {
        return Ok(tally.into_report());
    }
    #[cfg(target_os = "linux")]
    rlimits::apply_run(inputs, &mut tally);
    let report = tally.into_report();
    if policy == SandboxPolicy::Strict && report.level != SandboxLevel::Full {
        return Err(SandboxUnavailable { reached: report });
    }
    Ok(report)
}

/// Applies `policy` to the calling process in one step ([`early`], then
/// [`finish`]). Under `strict`, anything short of full confinement is
/// [`SandboxUnavailable`]; the body must then not run.
pub fn apply(policy: SandboxPolicy, inputs: &Inputs) -> Result<SandboxReport, SandboxUnavailable> {
    finish(early(policy, inputs.landlock_abi_override), inputs)
}

#[cfg(target_os = "linux")]
fn apply_layers(landlock_abi_override: Option<u32>, t: &mut Tally) {
    rlimits::apply_fixed(t);
    match nix::sys::prctl::set_no_new_privs() {
        Ok(()) => t.enforced("no_new_privs"),
        Err(e) => t.missing("no_new_privs", std::io::Error::from(e)),
    }
    landlock::apply(landlock_abi_override, t);
    caps::drop_all(t);
    // Before seccomp: it checks Landlock, and the allow-list has no openat.
    check_cwd(t);
    // Last: the allow-list has neither prctl nor capset, which the layers
    // above use.
    seccomp::apply(t);
}

/// A self-check rather than a promise: the host starts the worker in `/`,
/// and with Landlock in place the worker must not be able to list it.
#[cfg(target_os = "linux")]
fn check_cwd(t: &mut Tally) {
    match std::fs::read_dir(".") {
        Err(_) => t.enforced("cwd:unreadable"),
        Ok(_) => t.missing(
            "cwd:unreadable",
            "the working directory can still be listed",
        ),
    }
}

#[cfg(not(target_os = "linux"))]
fn apply_layers(_landlock_abi_override: Option<u32>, t: &mut Tally) {
    t.missing(
        "all layers",
        "the worker sandbox is implemented for Linux only",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_enforces_nothing_and_says_so() {
        let r = apply(SandboxPolicy::Off, &Inputs::default()).expect("off never fails");
        assert_eq!(r.level, SandboxLevel::None);
        assert!(r.enforced.is_empty() && r.missing.is_empty());
    }

    #[test]
    fn levels_follow_the_tally() {
        let mut t = Tally::default();
        t.enforced("a");
        assert_eq!(t.into_report().level, SandboxLevel::Full);
        let mut t = Tally::default();
        t.enforced("a");
        t.missing("b", "why");
        let r = t.into_report();
        assert_eq!(r.level, SandboxLevel::Partial);
        assert_eq!(r.missing, vec!["b (why)".to_string()]);
        let mut t = Tally::default();
        t.missing("b", "why");
        assert_eq!(t.into_report().level, SandboxLevel::None);
    }
}
