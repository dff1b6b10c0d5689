//! The sandbox on the wire: the policy the host asks for and the report of
//! what the worker reached.

use serde::{Deserialize, Serialize};

/// Which sandbox the worker must apply (issue: sandbox and budgets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxPolicy {
    /// Full confinement or the run fails with `SANDBOX_UNAVAILABLE`.
    Strict,
    /// Every layer the kernel offers; the report names what is missing.
    BestEffort,
    /// No sandbox.
    Off,
}

impl SandboxPolicy {
    /// Every policy, in the order users see them listed.
    pub const ALL: [SandboxPolicy; 3] = [
        SandboxPolicy::Strict,
        SandboxPolicy::BestEffort,
        SandboxPolicy::Off,
    ];

    /// The policy's name as users spell it (`--sandbox`, `dsh.toml`):
    /// `strict`, `best-effort` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxPolicy::Strict => "strict",
            SandboxPolicy::BestEffort => "best-effort",
            SandboxPolicy::Off => "off",
        }
    }
}

impl std::fmt::Display for SandboxPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`SandboxPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sandbox policy {name:?}: expected one of {}",
    SandboxPolicy::ALL.map(SandboxPolicy::as_str).join(", ")
)]
pub struct UnknownSandboxPolicy {
    /// The name as given.
    pub name: String,
}

impl std::str::FromStr for SandboxPolicy {
    type Err = UnknownSandboxPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxPolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownSandboxPolicy { name: s.into() })
    }
}

/// The sandbox the worker actually reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// How much of the sandbox is in force.
    pub level: SandboxLevel,
    /// The Landlock ABI the sandbox was built for (`Some(0)`: no Landlock);
    /// `None` when no Landlock layer was attempted.
    pub landlock_abi: Option<u32>,
    /// Names of the rules that were enforced (docs/sandbox.md lists them).
    pub enforced: Vec<String>,
    /// Rules that are part of `Full` but were not enforced, each with why.
    pub missing: Vec<String>,
}

/// How much of the sandbox a worker reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxLevel {
    /// Every rule is enforced.
    Full,
    /// Some rules are enforced; the report's `missing` names the others.
    Partial,
    /// Nothing is enforced.
    None,
}

impl SandboxLevel {
    /// `full`, `partial` or `none`, as reports and `--verbose` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxLevel::Full => "full",
            SandboxLevel::Partial => "partial",
            SandboxLevel::None => "none",
        }
    }
}
