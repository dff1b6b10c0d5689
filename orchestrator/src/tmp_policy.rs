//! TEMPORARY until dsh-protocol's SandboxPolicy has as_str/FromStr.
use dsh_protocol::SandboxPolicy;
#[allow(clippy::wrong_self_convention)]
pub(crate) trait PolicyName {
    fn as_str(self) -> &'static str;
}
impl PolicyName for SandboxPolicy {
    fn as_str(self) -> &'static str {
        match self {
            SandboxPolicy::Strict => "strict",
            SandboxPolicy::BestEffort => "best-effort",
            SandboxPolicy::Off => "off",
        }
    }
}
pub fn parse(s: &str) -> Option<SandboxPolicy> {
    match s {
        "strict" => Some(SandboxPolicy::Strict),
        "best-effort" => Some(SandboxPolicy::BestEffort),
        "off" => Some(SandboxPolicy::Off),
        _ => None,
    }
}
