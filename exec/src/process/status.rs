//! Exit statuses in words.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Renders an exit status for messages: `exited with status 3`, `was killed
/// by SIGKILL` (worker deaths, and command-provider children).
pub fn describe_status(st: ExitStatus) -> String {
    if let Some(code) = st.code() {
        return format!("exited with status {code}");
    }
    if let Some(sig) = st.signal() {
        let name = nix::sys::signal::Signal::try_from(sig)
            .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string());
        return format!("was killed by {name}");
    }
    "ended".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_in_words() {
        assert_eq!(
            describe_status(ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(libc::SIGKILL)),
            "was killed by SIGKILL"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(40)),
            "was killed by signal 40"
        );
    }
}
