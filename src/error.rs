//! The one error type every command exits through: it knows its
//! `error[CODE]` and its exit code.

use std::io::Write;

use dsh_orchestrator::config::ConfigError;
use dsh_orchestrator::{ErrorCode, StartError};

/// Exit codes (contract §12).
pub mod exit {
    pub const COMPLETED: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const NOT_STARTED: i32 = 2;
    pub const TIMEOUT: i32 = 124;
    pub const CANCELLED: i32 = 130;
}

/// A failure before a run exists: `error[CODE]: message` on stderr, an
/// empty stdout, exit 2.
#[derive(Debug)]
pub struct CliError {
    pub code: ErrorCode,
    pub message: String,
}

impl CliError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }

    /// `USAGE`: a flag, a file named on the command line, a run id.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::new(ErrorCode::Usage, message)
    }

    /// Prints the error and returns the exit code.
    pub fn exit(self) -> i32 {
        print_error(self.code, &self.message);
        exit::NOT_STARTED
    }
}

impl From<StartError> for CliError {
    fn from(e: StartError) -> Self {
        CliError::new(e.code(), e.to_string())
    }
}

impl From<ConfigError> for CliError {
    /// A `--config` file that is not there is a usage error; a file that
    /// is there but wrong is `CONFIG_INVALID`.
    fn from(e: ConfigError) -> Self {
        let code = match e {
            ConfigError::MissingFile { .. } => ErrorCode::Usage,
            _ => ErrorCode::ConfigInvalid,
        };
        CliError::new(code, e.to_string())
    }
}

impl From<dsh_orchestrator::WorkerMissing> for CliError {
    fn from(e: dsh_orchestrator::WorkerMissing) -> Self {
        CliError::usage(e.to_string())
    }
}

/// `error[CODE]: message` on stderr.
pub fn print_error(code: ErrorCode, message: &str) {
    let message = crate::terminal::text(message);
    let _ = writeln!(std::io::stderr().lock(), "error[{code}]: {message}");
}

/// `dsh: message` on stderr: something the user should know; the command
/// goes on.
pub fn warn(message: &str) {
    let message = crate::terminal::text(message);
    let _ = writeln!(std::io::stderr().lock(), "dsh: {message}");
}
