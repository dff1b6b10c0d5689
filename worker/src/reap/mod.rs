//! `dsh-worker reap [--grace-ms N] -- PROGRAM [ARGS...]`: a shim between
//! dsh and an agent CLI that makes "nothing the CLI started outlives the
//! call" true, even for commands the CLI runs in a session of their own.
//!
//! dsh stops an agent CLI by signalling its process group. Claude Code
//! runs each Bash command under `setsid`, out of that group, so those
//! commands (and what they start) would survive a stopped or killed CLI.
//! The shim (Linux):
//!
//! 1. becomes a child subreaper, so every orphan beneath it is re-parented
//!    to it instead of init and stays findable as its descendant;
//! 2. re-arms its parent-death signal as SIGTERM (dsh's spawner armed
//!    SIGKILL), so a dying dsh lets it clean up;
//! 3. runs PROGRAM in its own process group (dsh signals that group),
//!    with stdio, environment and working directory inherited and a
//!    parent-death signal of SIGKILL;
//! 4. on SIGTERM, SIGINT or SIGHUP: SIGTERM to every descendant (a walk of
//!    `/proc`), up to the grace for PROGRAM to exit, then SIGKILL to every
//!    descendant;
//! 5. once PROGRAM has exited: SIGTERM to whatever is left, at most
//!    min(grace, 500 ms), SIGKILL in rounds until it has no child left,
//!    and one stderr line naming what it stopped;
//! 6. ends the way PROGRAM ended: the same exit status, or killed by the
//!    same signal (see `linux::exit_as` for why not `128+N`).
//!
//! Exit statuses of its own: 127 PROGRAM not found, 126 PROGRAM cannot be
//! run, 2 a bad command line.
//!
//! The grace should be shorter than dsh's own: once dsh's grace runs out
//! it SIGKILLs the group, the shim included, and a SIGKILLed shim cleans
//! nothing up (PROGRAM still dies, by its parent-death signal).
//!
//! Other systems have neither subreapers nor `/proc`: there the shim only
//! execs PROGRAM (so signals and the exit status are PROGRAM's own), and
//! guarantees nothing beyond what dsh's group signals reach.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod tree;

use std::io::Write as _;
use std::time::Duration;

use crate::EXIT_USAGE;

/// PROGRAM was not found (as a shell says).
pub const EXIT_NOT_FOUND: i32 = 127;
/// PROGRAM was found but could not be run, or the shim could not set up.
pub const EXIT_CANNOT_RUN: i32 = 126;
/// The grace when `--grace-ms` is not given: below dsh's default of 5 s,
/// so the shim finishes before dsh's own SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// The longest grace accepted (an hour): keeps every deadline far from
/// `Instant`'s overflow.
pub const MAX_GRACE_MS: u64 = 3_600_000;

const USAGE: &str = "usage: dsh-worker reap [--grace-ms N] -- PROGRAM [ARGS...]";

/// The parsed command line.
#[derive(Debug, PartialEq)]
pub struct Args {
    pub grace: Duration,
    pub program: String,
    pub args: Vec<String>,
}

/// What is wrong with a command line.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ArgsError {
    #[error("--grace-ms needs a number of milliseconds up to {MAX_GRACE_MS}, not {0:?}")]
    BadGrace(String),
    #[error("--grace-ms needs a value")]
    MissingGrace,
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    #[error("missing `-- PROGRAM`")]
    MissingProgram,
}

/// Parses the arguments after `reap`.
pub fn parse(args: &[String]) -> Result<Args, ArgsError> {
    let mut grace = DEFAULT_GRACE;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.as_str() {
            "--" => {
                let program = it.next().ok_or(ArgsError::MissingProgram)?.clone();
                if program.is_empty() {
                    return Err(ArgsError::MissingProgram);
                }
                return Ok(Args {
                    grace,
                    program,
                    args: it.cloned().collect(),
                });
            }
            "--grace-ms" => it.next().ok_or(ArgsError::MissingGrace)?,
            other => match other.strip_prefix("--grace-ms=") {
                Some(v) => v,
                None => return Err(ArgsError::UnknownOption(other.to_string())),
            },
        };
        let ms: u64 = value
            .parse()
            .ok()
            .filter(|ms| *ms <= MAX_GRACE_MS)
            .ok_or_else(|| ArgsError::BadGrace(value.to_string()))?;
        grace = Duration::from_millis(ms);
    }
    Err(ArgsError::MissingProgram)
}

/// Runs the shim; returns its exit status (unless it ends by re-raising
/// the signal that killed PROGRAM).
pub fn main(args: &[String]) -> i32 {
    match parse(args) {
        Ok(args) => run(&args),
        Err(e) => {
            say(&format!("dsh-worker reap: {e}\n{USAGE}"));
            EXIT_USAGE
        }
    }
}

#[cfg(target_os = "linux")]
fn run(args: &Args) -> i32 {
    linux::run(args)
}

#[cfg(not(target_os = "linux"))]
fn run(args: &Args) -> i32 {
    use std::os::unix::process::CommandExt as _;
    // exec only returns on failure.
    let e = std::process::Command::new(&args.program)
        .args(&args.args)
        .exec();
    say(&format!("dsh: cannot run {:?}: {e}", args.program));
    if e.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_RUN
    }
}

/// One line on stderr. A closed or broken stderr is no reason to fail.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[rstest]
    #[case(&["--", "prog"], 3000, "prog", &[])]
    #[case(&["--grace-ms", "250", "--", "prog", "-x", "--"], 250, "prog", &["-x", "--"])]
    #[case(&["--grace-ms=0", "--", "prog"], 0, "prog", &[])]
    fn good_command_lines(
        #[case] argv: &[&str],
        #[case] grace_ms: u64,
        #[case] program: &str,
        #[case] rest: &[&str],
    ) {
        assert_eq!(
            parse(&strings(argv)),
            Ok(Args {
                grace: Duration::from_millis(grace_ms),
                program: program.into(),
                args: strings(rest),
            })
        );
    }

    #[rstest]
    #[case(&[], ArgsError::MissingProgram)]
    #[case(&["--"], ArgsError::MissingProgram)]
    #[case(&["prog"], ArgsError::UnknownOption("prog".into()))]
    #[case(&["--grace-ms"], ArgsError::MissingGrace)]
    #[case(&["--grace-ms", "soon", "--", "p"], ArgsError::BadGrace("soon".into()))]
    #[case(&["--grace-ms", "-1", "--", "p"], ArgsError::BadGrace("-1".into()))]
    #[case(&["--grace-ms", "3600001", "--", "p"], ArgsError::BadGrace("3600001".into()))]
    fn bad_command_lines(#[case] argv: &[&str], #[case] want: ArgsError) {
        assert_eq!(parse(&strings(argv)), Err(want));
    }
}
