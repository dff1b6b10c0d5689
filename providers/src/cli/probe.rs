//! What `dsh workflow providers` says of an agent CLI without spending a
//! token: whether it is installed, its version, whether dsh was tested
//! with that version, and whether it looks logged in (the CLI's own
//! status command, which reads its local credentials).
//!
//! Each probe runs the CLI with the environment a call would give it, is
//! bounded by [`PROBE_TIMEOUT`], and is killed (its process group) when
//! it takes longer.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::config::CliKind;
use crate::command::{minimal_env, not_runnable, search_path};

/// Longest one probe (`--version`, the login status) may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// An agent CLI as found on this machine.
#[derive(Debug)]
pub struct CliStatus {
    /// Which CLI.
    pub kind: CliKind,
    /// The program, found (its path) or why not.
    pub program: Result<PathBuf, NotInstalled>,
    /// Its version (`2.1.332`), or why it is not known.
    pub version: Result<String, VersionUnknown>,
    /// Whether dsh's tests ran against this version.
    pub tested: Tested,
    /// What its status command says of its login.
    pub login: Login,
}

/// Whether a version is one dsh was tested with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tested {
    /// Tested.
    Yes,
    /// Not tested; these were.
    No(Vec<&'static str>),
    /// The version is not known.
    Unknown,
}

/// Whether the CLI looks logged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// It says so, and how (`api key from ANTHROPIC_API_KEY`).
    Yes(String),
    /// It says not; the fix.
    No(String),
    /// It could not tell (not installed, the status command failed).
    Unknown(String),
}

/// Why a program was not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    /// A path was given and is not a runnable file there.
    #[error("{} {why}", path.display())]
    NotRunnable {
        /// The path (relative ones joined to the base directory).
        path: PathBuf,
        /// What is wrong with it (`does not exist`, …).
        why: &'static str,
    },
    /// A name was given and no directory on `PATH` has it.
    #[error("{program} is not on PATH")]
    NotOnPath {
        /// The name.
        program: String,
    },
}

/// An agent CLI's program was not found; the fix is installing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{cause}; install it with `npm install -g {package}@{version}`")]
pub struct NotInstalled {
    /// Why it was not found.
    pub cause: NotFound,
    /// The npm package that installs it.
    pub package: &'static str,
    /// The version to install (the newest tested, else `latest`).
    pub version: &'static str,
}

/// Why one probe run printed nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No scratch directory for its output.
    #[error("a scratch directory: {0}")]
    Scratch(#[source] std::io::Error),
    /// No file for its output.
    #[error("{0}")]
    Output(#[source] std::io::Error),
    /// The program could not be started.
    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It did not end within [`PROBE_TIMEOUT`] and was killed.
    #[error("`{} {}` did not answer within {}s", program.display(), args.join(" "), PROBE_TIMEOUT.as_secs())]
    TimedOut {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
}

/// Why a CLI's version is not known.
#[derive(Debug, thiserror::Error)]
pub enum VersionUnknown {
    /// The program was not found.
    #[error("not installed")]
    NotInstalled,
    /// `--version` could not be run.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// `--version` printed no `N.N.N`.
    #[error("`--version` said {said:?}")]
    Unrecognized {
        /// Its stdout, trimmed.
        said: String,
    },
}

/// Finds `program` (a name on `PATH`, or a path relative to `base_dir`).
pub fn locate(program: &str, base_dir: &Path) -> Result<PathBuf, NotFound> {
    let p = Path::new(program);
    let path = if program.contains('/') {
        let p = if p.is_relative() {
            base_dir.join(p)
        } else {
            p.to_path_buf()
        };
        if let Some(why) = not_runnable(&p) {
            return Err(NotFound::NotRunnable { path: p, why });
        }
        p
    } else {
        std::env::split_paths(&search_path())
            .map(|d| d.join(program))
            .find(|c| not_runnable(c).is_none())
            .ok_or_else(|| NotFound::NotOnPath {
                program: program.to_string(),
            })?
    };
    Ok(path)
}

/// Probes `kind` at `program` with `env_names` passed through (besides
/// `PATH`, `HOME` and the kind's own variables).
pub fn probe(kind: CliKind, program: &str, base_dir: &Path, env_names: &[String]) -> CliStatus {
    let env = minimal_env(
        kind.default_env()
            .iter()
            .copied()
            .chain(env_names.iter().map(String::as_str)),
    );
    let program = locate(program, base_dir).map_err(|cause| NotInstalled {
        cause,
        package: kind.npm_package(),
        version: kind.tested_versions().last().copied().unwrap_or("latest"),
    });
    let Ok(path) = &program else {
        return CliStatus {
            kind,
            program,
            version: Err(VersionUnknown::NotInstalled),
            tested: Tested::Unknown,
            login: Login::Unknown("not installed".into()),
        };
    };
    let version = run(path, &["--version"], &env)
        .map_err(VersionUnknown::from)
        .and_then(|o| {
            version_in(&o.stdout)
                .or_else(|| version_in(&o.stderr))
                .ok_or_else(|| VersionUnknown::Unrecognized {
                    said: o.stdout.trim().to_string(),
                })
        });
    let tested = match &version {
        Ok(v) if kind.tested_versions().contains(&v.as_str()) => Tested::Yes,
        Ok(_) => Tested::No(kind.tested_versions().to_vec()),
        Err(_) => Tested::Unknown,
    };
    let login = login(kind, path, &env);
    CliStatus {
        kind,
        program,
        version,
        tested,
        login,
    }
}

/// What one probe printed.
struct Printed {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `program args` bounded by [`PROBE_TIMEOUT`], in its own process
/// group (killed whole when it overstays), stdin closed.
fn run(program: &Path, args: &[&str], env: &[(OsString, OsString)]) -> Result<Printed, ProbeError> {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().map_err(ProbeError::Scratch)?;
    let out_path = dir.path().join("out");
    let err_path = dir.path().join("err");
    let out = std::fs::File::create(&out_path).map_err(ProbeError::Output)?;
    let err = std::fs::File::create(&err_path).map_err(ProbeError::Output)?;
    // Files, not pipes: a probe that leaves a child holding a pipe open
    // cannot make this wait.
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|source| ProbeError::Spawn {
            program: program.to_path_buf(),
            source,
        })?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.wait();
                return Err(ProbeError::TimedOut {
                    program: program.to_path_buf(),
                    args: args.iter().map(|a| (*a).to_string()).collect(),
                });
            }
        }
    };
    // Whatever the probe left in its group goes with it.
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let read = |p: &Path| {
        let mut s = std::fs::read(p).unwrap_or_default();
        s.truncate(64 << 10);
        String::from_utf8_lossy(&s).into_owned()
    };
    Ok(Printed {
        ok: status.success(),
        stdout: read(&out_path),
        stderr: read(&err_path),
    })
}

/// The first `N.N.N` in `text`.
fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|w| w.split('.').filter(|p| !p.is_empty()).count() >= 3)
        .map(|w| w.trim_matches('.').to_string())
}

/// The CLI's own login status, read without a model call.
fn login(kind: CliKind, program: &Path, env: &[(OsString, OsString)]) -> Login {
    match kind {
        CliKind::ClaudeCode => match run(program, &["auth", "status"], env) {
            Ok(o) => match serde_json::from_str::<serde_json::Value>(&o.stdout) {
                Ok(v) if v["loggedIn"] == true => {
                    let method = v["authMethod"].as_str().unwrap_or("logged in");
                    Login::Yes(match v["apiKeySource"].as_str() {
                        Some(src) => format!("{method} from {src}"),
                        None => method.to_string(),
                    })
                }
                Ok(_) => Login::No(
                    "run `claude auth login`, or set ANTHROPIC_API_KEY (list it in env)".into(),
                ),
                Err(_) => Login::Unknown(first_line(&o.stdout, &o.stderr)),
            },
            Err(e) => Login::Unknown(e.to_string()),
        },
        CliKind::Codex => match run(program, &["login", "status"], env) {
            Ok(o) if o.ok => Login::Yes(first_line(&o.stderr, &o.stdout)),
            Ok(o) => Login::No(format!(
                "{}: run `codex login` (a custom model provider in config.toml needs none)",
                first_line(&o.stderr, &o.stdout)
            )),
            Err(e) => Login::Unknown(e.to_string()),
        },
        // Qwen Code has no status command: its key is in the environment
        // or its settings, an OAuth login in its home.
        CliKind::Qwen => qwen_login(env),
    }
}

fn qwen_login(env: &[(OsString, OsString)]) -> Login {
    let var = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty())
    };
    if var("OPENAI_API_KEY").is_some() {
        return Login::Yes("OPENAI_API_KEY is set".into());
    }
    let Some(home) = var("HOME") else {
        return Login::Unknown("HOME is not set".into());
    };
    let dir = Path::new(&home).join(".qwen");
    let settings: serde_json::Value = std::fs::read_to_string(dir.join("settings.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let auth = &settings["security"]["auth"];
    if auth["apiKey"].as_str().is_some_and(|k| !k.is_empty()) {
        return Login::Yes("a key in ~/.qwen/settings.json".into());
    }
    if auth["selectedType"] == "qwen-oauth" && dir.join("oauth_creds.json").is_file() {
        return Login::Yes("Qwen OAuth (~/.qwen/oauth_creds.json)".into());
    }
    Login::No(
        "set OPENAI_API_KEY (with OPENAI_BASE_URL and OPENAI_MODEL), or log in with `qwen` \
         interactively"
            .into(),
    )
}

/// The first non-empty line of `a`, else of `b`, cut short.
fn first_line(a: &str, b: &str) -> String {
    a.lines()
        .chain(b.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| super::stream::cut(l, 120))
        .unwrap_or_else(|| "(nothing)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_found_in_what_clis_print() {
        assert_eq!(
            version_in("2.1.332 (Claude Code)").as_deref(),
            Some("2.1.332")
        );
        assert_eq!(
            version_in("codex-cli 0.171.0\n").as_deref(),
            Some("0.171.0")
        );
        assert_eq!(version_in("0.24.4").as_deref(), Some("0.24.4"));
        assert_eq!(version_in("v1.2"), None);
    }

    #[test]
    fn a_missing_program_says_how_to_install_it() {
        let s = probe(
            CliKind::Codex,
            "dsh-surely-not-a-program",
            Path::new("."),
            &[],
        );
        let e = s.program.expect_err("missing");
        assert!(matches!(e.cause, NotFound::NotOnPath { .. }), "{e}");
        let e = e.to_string();
        assert!(e.contains("npm install -g @openai/codex@"), "{e}");
        assert_eq!(s.tested, Tested::Unknown);
    }

    #[test]
    fn a_program_that_prints_a_version_is_probed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("fake-claude");
        std::fs::write(
            &p,
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '9.9.9 (Claude Code)'; else echo '{\"loggedIn\":true,\"authMethod\":\"api_key\",\"apiKeySource\":\"ANTHROPIC_API_KEY\"}'; fi\n",
        )
        .expect("write");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let s = probe(CliKind::ClaudeCode, "./fake-claude", dir.path(), &[]);
        assert_eq!(s.version.as_deref().ok(), Some("9.9.9"));
        assert!(matches!(s.tested, Tested::No(_)));
        assert_eq!(s.login, Login::Yes("api_key from ANTHROPIC_API_KEY".into()));
    }
}
