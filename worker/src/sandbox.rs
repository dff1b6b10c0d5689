//! The worker's sandbox. This version applies no confinement yet: it reports
//! honestly that nothing is enforced (level `none`), and a `strict` policy
//! fails closed with `SANDBOX_UNAVAILABLE` so that nobody gets a weaker
//! boundary than they asked for. Landlock, rlimits and `no_new_privs` are
//! the sandbox issue's work (see docs/sandbox.md once it lands).

use dsh_protocol::{SandboxLevel, SandboxPolicy, SandboxReport};

/// Applies `policy` to the calling process; `Err` carries the message for
/// `SANDBOX_UNAVAILABLE`.
pub fn apply(policy: SandboxPolicy) -> Result<SandboxReport, String> {
    let report = SandboxReport {
        level: SandboxLevel::None,
        landlock_abi: None,
        enforced: Vec::new(),
    };
    match policy {
        SandboxPolicy::Strict => Err(
            "sandbox policy \"strict\" requires full confinement, and this build of dsh-worker \
             enforces none yet; use --sandbox best-effort or off"
                .into(),
        ),
        SandboxPolicy::BestEffort | SandboxPolicy::Off => Ok(report),
    }
}
