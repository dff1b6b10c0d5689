//! The run directory: `<runs-dir>/<run-id>/` (default `.dsh/runs/` under
//! the working directory) with
//!
//! - `run.json` — what is needed to run it again: the script's path and
//!   hash, the args, the meta, the resolved limits, the sandbox policy and
//!   the provider;
//! - `script.<ext>` — a copy of the script as it ran;
//! - `journal.jsonl` — the agent calls ([`super::line`]);
//! - `result.json` — the result, once the run (or its last resume) settled;
//! - `lock` — `flock`ed by the dsh process that runs it, so a run is never
//!   resumed twice at once. The kernel drops the lock when that process
//!   dies, even by `kill -9`.
//!
//! Its files are replaced atomically (`rundir/atomic.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::JournalError;
use dsh_engine::Limits;
use dsh_engine::run::ArgsInput;

mod atomic;

use atomic::replace_file;
pub(crate) use atomic::replace_file_with;
pub use atomic::write_atomic;

/// The run's description ([`RunInfo`]) inside a run directory.
pub const RUN_FILE: &str = "run.json";
/// The journal of agent calls inside a run directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// The result, once an attempt settled, inside a run directory.
pub const RESULT_FILE: &str = "result.json";
/// The run's events, one JSON object per line (as `--events jsonl`), each
/// attempt's appended: what `dsh workflow report` reads the logs from.
pub const EVENTS_FILE: &str = "events.jsonl";
const LOCK_FILE: &str = "lock";

/// The default runs directory, relative to the working directory.
pub const DEFAULT_RUNS_DIR: &str = ".dsh/runs";

/// Which provider answered the run, so a resume can use it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum ProviderSpec {
    /// No provider: every call fails to start.
    None,
    /// A fixture file (absolute path).
    Fixture(String),
    /// `--dry-run`.
    DryRun,
    /// The configured providers: the configuration file (absolute path;
    /// `None` for the built-ins only) and the default provider.
    #[serde(rename_all = "camelCase")]
    Configured {
        /// The configuration file, absolute; `None` for the built-ins only.
        config: Option<String>,
        /// The default provider's name (`--provider`); `None` for the
        /// configuration's own default.
        provider: Option<String>,
    },
}

/// `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunInfo {
    /// The version of this format (1).
    pub version: u32,
    /// The run's id, also the run directory's name.
    pub id: String,
    /// The script's `meta.name`; empty until the run started.
    pub name: String,
    /// The script as the user named it, made absolute.
    pub script: String,
    /// The copy's file name inside the run directory.
    pub script_copy: String,
    /// Hex SHA-256 of the script source; a resume refuses a changed
    /// script unless allowed.
    pub script_hash: String,
    /// `{"json": v}`, `{"text": s}` or `null`.
    pub args: Value,
    /// Hex SHA-256 of `args` as JSON text.
    pub args_hash: String,
    /// The script's `meta` as JSON; `null` until the run started.
    pub meta: Value,
    /// The resolved limits, as [`limits_to_json`] writes them.
    pub limits: Value,
    /// The sandbox policy's name (`strict`, `best-effort`, `off`).
    pub sandbox: String,
    /// Which provider answers the calls.
    pub provider: ProviderSpec,
    /// When the run was created, in milliseconds since the Unix epoch.
    pub started_at: u64,
}

/// Hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The args as `run.json` keeps them: `{"json": v}`, `{"text": s}` or
/// `null`.
pub fn args_to_json(args: &ArgsInput) -> Value {
    match args {
        ArgsInput::None => Value::Null,
        ArgsInput::Json(v) => serde_json::json!({ "json": v }),
        ArgsInput::Text(t) => serde_json::json!({ "text": t }),
    }
}

/// The args from their `run.json` form; `None` when `v` is not one.
pub fn args_from_json(v: &Value) -> Option<ArgsInput> {
    match v {
        Value::Null => Some(ArgsInput::None),
        Value::Object(m) if m.len() == 1 => {
            if let Some(j) = m.get("json") {
                Some(ArgsInput::Json(j.clone()))
            } else {
                m.get("text")
                    .and_then(Value::as_str)
                    .map(|t| ArgsInput::Text(t.to_string()))
            }
        }
        _ => None,
    }
}

/// The limits with the contract's names (`syncTimeoutMs`, …).
pub fn limits_to_json(l: &Limits) -> Value {
    use dsh_engine::limits::millis;
    serde_json::json!({
        "maxConcurrentAgents": l.max_concurrent_agents,
        "maxTotalAgents": l.max_total_agents,
        "maxTotalAgentsCeiling": l.max_total_agents_ceiling,
        "maxItemsPerCall": l.max_items_per_call,
        "syncTimeoutMs": millis(l.sync_timeout),
        "maxScriptBytes": l.max_script_bytes,
        "disposeGraceMs": millis(l.dispose_grace),
        "wallTimeoutMs": l.wall_timeout.map(millis),
        "computeMs": l.compute.map(millis),
        "memoryBytes": l.memory_bytes,
        "logBytes": l.log_bytes,
        "budgetTokens": l.budget_tokens,
        "budgetUsd": l.budget_usd,
    })
}

/// The limits from [`limits_to_json`]'s form; `None` when a knob is
/// missing or out of range.
pub fn limits_from_json(v: &Value) -> Option<Limits> {
    use std::time::Duration;
    let u = |k: &str| v.get(k).and_then(Value::as_u64);
    let opt_ms = |k: &str| match v.get(k) {
        Some(Value::Null) | None => Some(None),
        Some(x) => x.as_u64().map(|n| Some(Duration::from_millis(n))),
    };
    Some(Limits {
        max_concurrent_agents: u32::try_from(u("maxConcurrentAgents")?).ok()?,
        max_total_agents: u32::try_from(u("maxTotalAgents")?).ok()?,
        max_total_agents_ceiling: u32::try_from(u("maxTotalAgentsCeiling")?).ok()?,
        max_items_per_call: u32::try_from(u("maxItemsPerCall")?).ok()?,
        sync_timeout: Duration::from_millis(u("syncTimeoutMs")?),
        max_script_bytes: usize::try_from(u("maxScriptBytes")?).ok()?,
        dispose_grace: Duration::from_millis(u("disposeGraceMs")?),
        wall_timeout: opt_ms("wallTimeoutMs")?,
        compute: opt_ms("computeMs")?,
        memory_bytes: u("memoryBytes")?,
        log_bytes: u("logBytes")?,
        budget_tokens: match v.get("budgetTokens") {
            Some(Value::Null) | None => None,
            Some(x) => Some(x.as_u64()?),
        },
        budget_usd: match v.get("budgetUsd") {
            Some(Value::Null) | None => None,
            Some(x) => Some(x.as_f64()?),
        },
    })
}

/// An open, locked run directory.
#[derive(Debug)]
pub struct RunDir {
    /// The run directory, `<runs-dir>/<run-id>/`.
    pub path: PathBuf,
    /// Its `run.json`.
    pub info: RunInfo,
    /// Held for as long as this value lives.
    _lock: std::fs::File,
}

impl RunDir {
    /// Creates `<root>/<info.id>/`, locks it, and writes `run.json` and
    /// the script copy.
    pub fn create(root: &Path, info: RunInfo, source: &str) -> Result<RunDir, JournalError> {
        let path = root.join(&info.id);
        std::fs::create_dir_all(&path).map_err(|e| JournalError::io(&path, e))?;
        let lock = lock(&path, &info.id)?;
        // Not synced: they matter only once an answer is journaled, and
        // that line's fdatasync comes later on the same file system.
        replace_file(&path.join(RUN_FILE), pretty(&info).as_bytes(), false)?;
        replace_file(&path.join(&info.script_copy), source.as_bytes(), false)?;
        Ok(RunDir {
            path,
            info,
            _lock: lock,
        })
    }

    /// Opens and locks an existing run directory.
    pub fn open(path: &Path) -> Result<RunDir, JournalError> {
        let info = read_info(path)?;
        let lock = lock(path, &info.id)?;
        Ok(RunDir {
            path: path.to_path_buf(),
            info,
            _lock: lock,
        })
    }

    /// The journal file, `journal.jsonl` in the run directory.
    pub fn journal_path(&self) -> PathBuf {
        self.path.join(JOURNAL_FILE)
    }

    /// Writes `result.json` atomically.
    pub fn write_result(&self, result: &Value) -> Result<(), JournalError> {
        let text = serde_json::to_string_pretty(result).unwrap_or_else(|_| "null".into());
        // A summary for `runs`/`show`; the answers are already durable.
        replace_file(
            &self.path.join(RESULT_FILE),
            format!("{text}\n").as_bytes(),
            false,
        )
    }
}

/// Reads `run.json` of a run directory.
pub fn read_info(dir: &Path) -> Result<RunInfo, JournalError> {
    let file = dir.join(RUN_FILE);
    let text =
        dsh_exec::files::read_own_text(&file, dsh_exec::files::CONFIG_LIMIT).map_err(|e| {
            JournalError::Invalid {
                path: file.display().to_string(),
                message: format!("cannot read: {e}"),
            }
        })?;
    serde_json::from_str(&text).map_err(|e| JournalError::Invalid {
        path: file.display().to_string(),
        message: format!("not a run description of this dsh version: {e}"),
    })
}

/// Finds a run by the path of its directory, by its id under `root`, as
/// `latest` (the run under `root` that started last), or by a unique
/// prefix of its id under `root` (with or without the `run-`). A prefix
/// that matches several runs is an error listing them.
pub fn resolve(root: &Path, run: &str) -> Result<PathBuf, JournalError> {
    let as_path = Path::new(run);
    if as_path.join(RUN_FILE).is_file() {
        return Ok(as_path.to_path_buf());
    }
    let under = root.join(run);
    if under.join(RUN_FILE).is_file() {
        return Ok(under);
    }
    let invalid = |message: String| JournalError::Invalid {
        path: run.to_string(),
        message,
    };
    // Only a plain name can be an id or a prefix of one.
    let plain = !run.is_empty() && !run.contains('/') && run != "." && run != "..";
    if !plain {
        return Err(invalid(format!(
            "no such run: neither a run directory nor a run id under {} (list them with `dsh workflow runs`)",
            root.display()
        )));
    }
    let ids = run_ids(root);
    if run == "latest" {
        return ids
            .iter()
            .filter_map(|id| {
                let dir = root.join(id);
                read_info(&dir).ok().map(|info| (info.started_at, id, dir))
            })
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)))
            .map(|(_, _, dir)| dir)
            .ok_or_else(|| {
                invalid(format!(
                    "no runs under {} yet (run one with `dsh workflow run`, or name the runs directory with --runs-dir)",
                    root.display()
                ))
            });
    }
    let mut matches: Vec<&String> = ids
        .iter()
        .filter(|id| {
            id.starts_with(run) || id.strip_prefix("run-").is_some_and(|s| s.starts_with(run))
        })
        .collect();
    matches.sort();
    match matches.as_slice() {
        [one] => Ok(root.join(one)),
        [] => Err(invalid(format!(
            "no such run: neither a run directory nor a run id (or the start of one) under {} (list them with `dsh workflow runs`, or say `latest`)",
            root.display()
        ))),
        many => {
            const SHOWN: usize = 10;
            let mut list: Vec<String> = many.iter().take(SHOWN).map(|id| id.to_string()).collect();
            if many.len() > SHOWN {
                list.push(format!("and {} more", many.len() - SHOWN));
            }
            Err(invalid(format!(
                "ambiguous run id: it starts {} runs under {}: {}; give more of the id",
                many.len(),
                root.display(),
                list.join(", ")
            )))
        }
    }
}

/// The ids of the runs under `root`: its directories that hold a
/// `run.json` (none when it cannot be read).
fn run_ids(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().join(RUN_FILE).is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// Whether some process holds the run's lock right now.
pub fn is_locked(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking and never through a link: `runs` reads run directories
    // a cloned repository can ship, whose `lock` may be a FIFO or a link.
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(LOCK_FILE))
    else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    // Taken for an instant and dropped with `f`.
    matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

fn lock(dir: &Path, id: &str) -> Result<std::fs::File, JournalError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    // Never through a symlink: the pid written below would land in the
    // link's target.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| JournalError::io(&path, e))?;
    // `dsh workflow runs` takes and drops the lock for an instant to see
    // whether a run is live: a few short retries keep that from refusing a
    // resume. A real holder keeps it for the whole run.
    let mut attempt = 0;
    loop {
        match f.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if attempt < 4 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                // Bounded and never through a link: the name may have been
                // swapped since it was opened.
                let pid = dsh_exec::files::read_own_text(&path, dsh_exec::files::LOCK_LIMIT)
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .map(|p| format!(" (pid {p})"))
                    .unwrap_or_default();
                return Err(JournalError::Locked {
                    id: id.to_string(),
                    pid,
                });
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(JournalError::io(&path, err)),
        }
    }
    // Emptied only when it holds an earlier holder's pid: on ext4 a file
    // truncated to zero is flushed to disk when it is closed (the
    // `auto_da_alloc` heuristic), a write the exit of every CLI run would
    // otherwise wait for.
    if f.metadata().map_or(true, |m| m.len() > 0) {
        let _ = f.set_len(0);
    }
    let _ = writeln!(f, "{}", std::process::id());
    Ok(f)
}

fn pretty<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Limits of one millisecond (the least `Limits::validate` takes)
    /// survive `run.json` and are still valid on resume.
    #[rstest::rstest]
    #[case::sync(false, false)]
    #[case::wall(true, false)]
    #[case::compute(false, true)]
    fn one_millisecond_limits_survive_run_json(#[case] wall: bool, #[case] compute: bool) {
        use std::time::Duration;
        let ms = Duration::from_millis(1);
        let ok = dsh_engine::Limits {
            sync_timeout: ms,
            wall_timeout: wall.then_some(ms),
            compute: compute.then_some(ms),
            ..dsh_engine::Limits::default()
        };
        ok.validate().expect("1ms");
        let back = limits_from_json(&limits_to_json(&ok)).expect("readable");
        assert_eq!(back, ok);
        back.validate().expect("valid on resume");
    }

    /// The lock file holds its holder's pid and nothing else, whether it
    /// is new (not truncated: see `lock`) or left by an earlier holder
    /// with a longer pid.
    #[test]
    fn the_lock_file_holds_exactly_its_holders_pid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mine = format!("{}\n", std::process::id());
        let first = lock(dir.path(), "r").expect("lock a new file");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LOCK_FILE)).expect("read"),
            mine
        );
        drop(first);
        std::fs::write(dir.path().join(LOCK_FILE), "2147483646000\n").expect("stale pid");
        let _again = lock(dir.path(), "r").expect("lock again");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LOCK_FILE)).expect("read"),
            mine
        );
    }

    fn info(id: &str) -> RunInfo {
        RunInfo {
            version: 1,
            id: id.into(),
            name: "n".into(),
            script: "/x/wf.ts".into(),
            script_copy: "script.ts".into(),
            script_hash: sha256_hex(b"return 1;"),
            args: args_to_json(&ArgsInput::Text("t".into())),
            args_hash: String::new(),
            meta: Value::Null,
            limits: limits_to_json(&Limits::default()),
            sandbox: "best-effort".into(),
            provider: ProviderSpec::Fixture("/x/f.json".into()),
            started_at: 1,
        }
    }

    #[test]
    fn a_locked_run_cannot_be_opened_twice() {
        let root = tempfile::tempdir().expect("tempdir");
        let first = RunDir::create(root.path(), info("r1"), "return 1;").expect("create");
        assert!(is_locked(&first.path));
        let err = RunDir::open(&first.path).expect_err("locked");
        let msg = err.to_string();
        assert!(
            msg.contains("in use") && msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(first);
        let again = RunDir::open(&root.path().join("r1")).expect("unlocked after drop");
        assert_eq!(again.info, info("r1"));
    }

    #[test]
    fn limits_and_args_round_trip() {
        let l = Limits {
            wall_timeout: Some(std::time::Duration::from_secs(3)),
            budget_tokens: Some(7),
            ..Limits::default()
        };
        assert_eq!(limits_from_json(&limits_to_json(&l)), Some(l));
        for a in [
            ArgsInput::None,
            ArgsInput::Text("x".into()),
            ArgsInput::Json(serde_json::json!({"a": [1]})),
        ] {
            assert_eq!(args_from_json(&args_to_json(&a)), Some(a));
        }
    }

    #[test]
    fn resolve_by_id_or_path_and_say_how_to_list() {
        let root = tempfile::tempdir().expect("tempdir");
        let d = RunDir::create(root.path(), info("r2"), "x").expect("create");
        assert_eq!(resolve(root.path(), "r2").expect("id"), d.path);
        assert_eq!(
            resolve(root.path(), &d.path.display().to_string()).expect("path"),
            d.path
        );
        let err = resolve(root.path(), "nope")
            .expect_err("missing")
            .to_string();
        assert!(err.contains("dsh workflow runs"), "{err}");
    }
}
