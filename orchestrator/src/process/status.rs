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
        let name = match sig {
            libc::SIGKILL => "SIGKILL".to_string(),
            libc::SIGTERM => "SIGTERM".to_string(),
            libc::SIGINT => "SIGINT".to_string(),
            libc::SIGHUP => "SIGHUP".to_string(),
            libc::SIGPIPE => "SIGPIPE".to_string(),
            libc::SIGSEGV => "SIGSEGV".to_string(),
            libc::SIGABRT => "SIGABRT".to_string(),
            libc::SIGXCPU => "SIGXCPU".to_string(),
            libc::SIGBUS => "SIGBUS".to_string(),
            n => format!("signal {n}"),
        };
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
