//! Runs in the background on this machine, with the file journal:
//! `run --detach` starts the run in a process of its own session (so a
//! terminal that closes takes nothing with it) and returns once it has
//! started (what its process says after that goes to the run directory's
//! `detached.log`; its events are in `events.jsonl`); `wait` and `attach` follow a run directory's events as `run`
//! shows its own and print its result when it settles; `cancel` asks the
//! process that holds the run's lock to cancel it.
//!
//! With a store the same commands go through the store (`fleet.rs`).

use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_orchestrator::events::{Event, EventKind};
use dsh_orchestrator::journal::rundir;
use dsh_orchestrator::{ErrorCode, RunResult};
use serde_json::Value;

use crate::error::{CliError, exit};
use crate::flags::{RunArgs, WaitArgs};
use crate::live::Live;
use crate::{progress, request};

/// How long `run --detach` waits for the run to start before it says so.
const START_BOUND: Duration = Duration::from_secs(60);

/// How often a followed run directory is read.
const FOLLOW: Duration = Duration::from_millis(100);

/// Where the stderr of a detached run that has not started yet is kept,
/// under the runs directory: said if it fails to start, removed once it
/// has.
const LOGS: &str = ".detached";

/// `dsh workflow run --detach`: the run in a process of its own session;
/// its id on stdout once it has started.
pub fn detach(a: &RunArgs) -> Result<i32, CliError> {
    // What `run` would refuse at once is refused here, in the foreground.
    let built = request::build(a)?;
    dsh_orchestrator::prepare(&built.req)?;
    let root = request::runs_root(a.runs_dir.as_deref());
    let id = dsh_orchestrator::run::new_run_id();
    // The same command line, without `--detach`, under the id made here.
    let argv: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--detach")
        .chain(["--run-id".into(), id.clone().into()])
        .collect();
    let started = root.join(&id).join(rundir::RUN_FILE);
    match spawn(&root, &id, argv, &|| started.is_file())? {
        Spawned::Started(_) => {
            println!("{id}");
            Ok(exit::COMPLETED)
        }
        Spawned::Ended { code, said } => {
            eprint!("{said}");
            Ok(code)
        }
    }
}

/// What became of a process [`spawn`] started.
pub(crate) enum Spawned {
    /// It got as far as `ready` said; it goes on in its own session. The
    /// caller reaps it (or exits, and init does).
    Started(std::process::Child),
    /// It ended first: its exit code and what it said on stderr.
    Ended { code: i32, said: String },
}

/// Starts this dsh with `argv` (after the program name) in a session of
/// its own, stdin and stdout null, stderr to a log under `root`, and
/// waits (bounded) until `ready()` or its end. Once ready, its log moves
/// to the run directory `root/id` as `detached.log`. Shared by
/// `run --detach` and the MCP server (`mcp/`).
pub(crate) fn spawn(
    root: &Path,
    id: &str,
    argv: Vec<std::ffi::OsString>,
    ready: &dyn Fn() -> bool,
) -> Result<Spawned, CliError> {
    let logs = root.join(LOGS);
    let made = std::fs::create_dir_all(root).and_then(|()| match std::fs::create_dir(&logs) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    // Never through a symlink: a runs directory can come with a cloned
    // repository.
    let real_dir = std::fs::symlink_metadata(&logs).is_ok_and(|m| m.is_dir());
    if let Err(e) = made.and_then(|()| {
        real_dir
            .then_some(())
            .ok_or_else(|| std::io::Error::other("not a directory (a symlink?)"))
    }) {
        return Err(CliError::usage(format!(
            "--detach: cannot use {}: {e}",
            logs.display()
        )));
    }
    let log_path = logs.join(format!("{id}.{}.log", std::process::id()));
    let log = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&log_path)
            .map_err(|e| {
                CliError::usage(format!(
                    "--detach: cannot create {}: {e}",
                    log_path.display()
                ))
            })?
    };
    let exe = std::env::current_exe()
        .map_err(|e| CliError::usage(format!("--detach: cannot find this dsh: {e}")))?;
    let mut command = Command::new(exe);
    command
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: setsid is async-signal-safe; between fork and exec of our
        // own child. A session of its own: no controlling terminal, so a
        // terminal's hangup never reaches it.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command
        .spawn()
        .map_err(|e| CliError::usage(format!("--detach: cannot start the run's process: {e}")))?;
    let deadline = Instant::now() + START_BOUND;
    loop {
        if ready() {
            // What the process says from now on (a warning, its last
            // words) is kept with the run.
            if std::fs::rename(&log_path, root.join(id).join("detached.log")).is_err() {
                let _ = std::fs::remove_file(&log_path);
            }
            return Ok(Spawned::Started(child));
        }
        if let Ok(Some(status)) = child.try_wait()
            // Got ready and ended between the two looks: it did start.
            && !ready()
        {
            // It ended before it got ready: what it said is the reason.
            let said = dsh_orchestrator::files::read_text(&log_path, 1 << 20).unwrap_or_default();
            let _ = std::fs::remove_file(&log_path);
            return Ok(Spawned::Ended {
                code: status.code().unwrap_or(exit::ERROR),
                said,
            });
        }
        if Instant::now() > deadline {
            return Err(CliError::usage(format!(
                "--detach: the run's process (pid {}) did not start run {id} within {}s; \
                 what it said is in {}",
                child.id(),
                START_BOUND.as_secs(),
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The command line (after the program name) of `dsh workflow resume ID`
/// of a run directory under `root`, quiet, for [`spawn`]: the MCP server's
/// `workflow_resume` and the web view's resume button.
pub(crate) fn resume_argv(
    root: &Path,
    id: &str,
    retry_failed: bool,
    config: Option<&Path>,
    fixture: Option<&Path>,
) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec!["workflow".into(), "resume".into(), id.into()];
    argv.extend(["--runs-dir".into(), root.into()]);
    argv.extend(["--events".into(), "none".into()]);
    if retry_failed {
        argv.push("--retry-failed".into());
    }
    if let Some(c) = config {
        argv.extend(["--config".into(), c.into()]);
    }
    if let Some(f) = fixture {
        argv.extend(["--fixture".into(), f.into()]);
    }
    argv
}

/// When a resume of the run in `dir` has started, for [`spawn`]: once its
/// process holds the run, or once it has settled it again (a run whose
/// every answer is replayed can end before it is seen holding it).
pub(crate) fn resumed_ready(dir: &Path) -> impl Fn() -> bool + Send + 'static {
    let modified = |d: &Path| {
        std::fs::metadata(d.join(rundir::RESULT_FILE))
            .and_then(|m| m.modified())
            .ok()
    };
    let before = modified(dir);
    let dir = dir.to_path_buf();
    move || rundir::is_locked(&dir) || modified(&dir) != before
}

/// `wait` or `attach` of a run directory: its events as `run` shows them
/// until it settles, then its result as `run` prints it.
pub async fn wait(a: &WaitArgs) -> Result<i32, CliError> {
    let root = request::runs_root(a.runs_dir.as_deref());
    let dir = rundir::resolve(&root, &a.run).map_err(|e| CliError::usage(e.to_string()))?;
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mode, mut live) = crate::execute::display(a.events, a.color, None, None);
    let mut signals = crate::execute::Signals::install();
    let mut events = EventsFile::new(dir.join(rundir::EVENTS_FILE));
    let mut settled_at: Option<Instant> = None;
    let mut ended = false;
    let doc = loop {
        for line in events.read_new()? {
            ended = show_stored(&line, &mode, live.as_mut()).fold(ended);
        }
        if let Some(l) = live.as_mut() {
            l.tick();
        }
        // Held, the run is running again (a resume): a result is an
        // earlier attempt's.
        let result = if rundir::is_locked(&dir) {
            None
        } else {
            result_of(&dir)?
        };
        match result {
            // Its last event is out, or it never will be (events kept
            // nowhere): bounded.
            Some(doc)
                if ended || settled_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(2)) =>
            {
                break doc;
            }
            Some(_) => {
                settled_at.get_or_insert_with(Instant::now);
            }
            // No process holds it, and (looked at again after that) it
            // has no result: it was interrupted.
            None if !rundir::is_locked(&dir) && result_of(&dir)?.is_none() => {
                return Err(CliError::usage(format!(
                    "run {id} is not running and has no result: its process ended before it \
                     settled; continue it with `dsh workflow resume {id}`"
                )));
            }
            None => {}
        }
        tokio::select! {
            () = tokio::time::sleep(FOLLOW) => {}
            // Waiting is not running: an interrupt ends the wait, not the run.
            () = signals.next() => return Ok(exit::CANCELLED),
        }
    };
    if let Some(l) = live.as_mut()
        && let Some(result) = RunResult::from_json(&doc["result"])
    {
        l.finish(&result, Some(&id));
    }
    Ok(crate::fleet::print_result(&doc["result"], a.output))
}

/// Where a stored event line puts its run's last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// `workflow/start`: an attempt began (a resume appends one).
    Started,
    /// `workflow/end`: the attempt ended.
    Ended,
    Other,
}

impl Mark {
    /// Whether the last attempt has ended, after this line.
    pub(crate) fn fold(self, ended: bool) -> bool {
        match self {
            Mark::Started => false,
            Mark::Ended => true,
            Mark::Other => ended,
        }
    }
}

/// Shows one stored event line (`events.jsonl`, `dsh_events`) as `run`
/// shows its events (`mode`, or the live view); whether it began or ended
/// an attempt. A line this dsh cannot read is skipped.
pub(crate) fn show_stored(line: &str, mode: &progress::Mode, live: Option<&mut Live>) -> Mark {
    let event = serde_json::from_str(line)
        .ok()
        .and_then(|v| Event::from_json(&v));
    let ended = match event.as_ref().map(|e| &e.kind) {
        Some(EventKind::Start { .. }) => Mark::Started,
        Some(EventKind::End { .. }) => Mark::Ended,
        _ => Mark::Other,
    };
    match (event, live, mode) {
        // As stored: the line `run --events jsonl` printed.
        (_, None, progress::Mode::Jsonl) => eprintln!("{line}"),
        (Some(e), Some(l), _) => l.event(&e),
        (Some(e), None, _) => progress::show(mode, &e),
        (None, ..) => {}
    }
    ended
}

/// The run's `result.json`, once it has one.
pub(crate) fn result_of(dir: &Path) -> Result<Option<Value>, CliError> {
    let path = dir.join(rundir::RESULT_FILE);
    use dsh_orchestrator::files::{RESULT_LIMIT, ReadError, read_own_text};
    match read_own_text(&path, RESULT_LIMIT) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            CliError::usage(format!("{}: not a result dsh writes: {e}", path.display()))
        }),
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::usage(format!("{}: {e}", path.display()))),
    }
}

/// A run directory's `events.jsonl`, read as it grows: whole lines only,
/// never through a symlink, each line and the whole bounded.
pub(crate) struct EventsFile {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl EventsFile {
    pub(crate) fn new(path: PathBuf) -> Self {
        EventsFile {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The lines written since the last read.
    pub(crate) fn read_new(&mut self) -> Result<Vec<String>, CliError> {
        let fail = |e: std::io::Error| {
            CliError::usage(format!("{}: cannot read: {e}", self.path.display()))
        };
        use dsh_orchestrator::files::{ReadError, open_own};
        let mut f = match open_own(&self.path) {
            Ok(f) => f,
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Vec::new());
            }
            Err(e) => {
                return Err(CliError::usage(format!(
                    "{}: cannot read: {e}",
                    self.path.display()
                )));
            }
        };
        let limit = dsh_orchestrator::files::EVENTS_READ_LIMIT;
        f.seek(std::io::SeekFrom::Start(self.offset))
            .map_err(fail)?;
        let mut fresh = Vec::new();
        let room = limit.saturating_sub(self.offset);
        f.take(room.min(1 << 20))
            .read_to_end(&mut fresh)
            .map_err(fail)?;
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        if self.partial.len() as u64 > dsh_orchestrator::files::EVENT_LINE_LIMIT {
            return Err(CliError::usage(format!(
                "{}: a line longer than an event can be",
                self.path.display()
            )));
        }
        Ok(lines)
    }
}

/// `cancel` of a run directory: SIGTERM to the process that holds the
/// run's lock — the first SIGTERM of a `run` is its cancel — after
/// checking that it is a dsh.
pub fn cancel(run: &str, runs_dir: Option<&Path>) -> Result<i32, CliError> {
    let root = request::runs_root(runs_dir);
    if let Cancelled::Settled(id) = cancel_in(&root, run)? {
        eprintln!("dsh: run {id} has settled already");
    }
    Ok(exit::COMPLETED)
}

/// What [`cancel_in`] did.
pub(crate) enum Cancelled {
    /// The run's process was asked to cancel it (it settles as
    /// `cancelled` once its cancel path has run).
    Asked(String),
    /// The run had settled already: nothing was done.
    Settled(String),
}

/// Cancels the run `run` (an id, `latest`, a unique prefix) under `root`.
pub(crate) fn cancel_in(root: &Path, run: &str) -> Result<Cancelled, CliError> {
    let dir = rundir::resolve(root, run).map_err(|e| CliError::usage(e.to_string()))?;
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if result_of(&dir)?.is_some() && !rundir::is_locked(&dir) {
        return Ok(Cancelled::Settled(id));
    }
    if !rundir::is_locked(&dir) {
        return Err(CliError::usage(format!(
            "no process runs run {id}: it ended before it settled; continue it with \
             `dsh workflow resume {id}`"
        )));
    }
    let pid = dsh_orchestrator::files::read_own_text(
        &dir.join("lock"),
        dsh_orchestrator::files::LOCK_LIMIT,
    )
    .ok()
    .and_then(|t| t.trim().parse::<i32>().ok())
    .filter(|&p| p > 1)
    .ok_or_else(|| CliError::usage(format!("run {id}: its lock names no process")))?;
    // Only a dsh is signalled: a lock file is data, and a pid can be reused.
    let theirs = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let ours = std::env::current_exe().ok();
    if theirs.is_none() || theirs != ours {
        return Err(CliError::new(
            ErrorCode::Usage,
            format!(
                "run {id}: the process its lock names (pid {pid}) is not this dsh; nothing was \
                 signalled"
            ),
        ));
    }
    // SAFETY: kill(2) with a pid we checked is a dsh holding the run.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(CliError::usage(format!(
            "run {id}: cannot signal pid {pid}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(Cancelled::Asked(id))
}
