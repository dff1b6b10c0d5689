//! Runs on a store's hosts, against a real PostgreSQL and real `dsh
//! workflow host` processes (docs/scale.md): submitted runs are run once
//! each with the right value; a host killed mid-run loses nothing — its
//! runs are taken over by another and every call settles once; a cancel
//! from another process reaches the run's host; SIGTERM drains a host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../store/tests/pg/mod.rs"]
mod pg;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::DSH;
use serde_json::{Value, json};

const SCRIPT: &str = r#"export const meta = { name: "fleet", description: "runs on hosts" };
const a = await agent(`first of ${args.n}`, { label: "a" });
const b = await agent(`second of ${args.n}`, { label: "b" });
return [args.n, a, b];
"#;

/// A `dsh workflow host` process, killed (its group) if still there when
/// dropped; its stderr in a file of the test's directory.
struct Host {
    child: Child,
    stderr: PathBuf,
}

impl Host {
    /// A host of `runs` runs at once and a lease of `lease` seconds.
    fn start(dir: &Path, url: &str, runs: u32, lease: u32) -> Host {
        Host::with(
            dir,
            url,
            &["--runs", &runs.to_string(), "--lease", &lease.to_string()],
        )
    }

    /// A host started with `args` after `--store URL`.
    fn with(dir: &Path, url: &str, args: &[&str]) -> Host {
        use std::os::unix::process::CommandExt as _;
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = dir.join(format!("host-{n}.stderr"));
        let mut command = Command::new(DSH);
        command
            .current_dir(dir)
            .args(["workflow", "host", "--store", url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only asks for a signal
        // when the spawning thread ends, so a test that dies without
        // dropping its hosts (a timeout kills it) does not leave them.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().expect("spawn a host");
        Host { child, stderr }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (bounded) until the host's stderr says `what`.
    async fn says(&self, what: &str) {
        let deadline = Instant::now() + common::RUN_BOUND;
        while !self.stderr().contains(what) {
            assert!(
                Instant::now() < deadline,
                "the host never said {what:?}: {}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: our own child's process group, not yet reaped.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), sig) };
    }

    /// Waits (bounded) for the host to exit; its status code.
    fn wait(&mut self) -> Option<i32> {
        let deadline = Instant::now() + common::RUN_BOUND;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.code();
            }
            assert!(Instant::now() < deadline, "the host did not exit");
            std::thread::sleep(common::POLL);
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// The processes whose parent is `pid` (from `/proc`).
fn children_of(pid: u32) -> Vec<i32> {
    let mut kids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // After the command's closing parenthesis: state, then ppid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            kids.push(p);
        }
    }
    kids
}

/// Waits (bounded) until none of `pids` runs any more (gone, or a zombie
/// nobody has reaped yet: it holds nothing).
async fn all_gone(pids: &[i32]) {
    let running = |p: &i32| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            == Some(false)
    };
    let deadline = Instant::now() + common::RUN_BOUND;
    while pids.iter().any(running) {
        assert!(Instant::now() < deadline, "processes left behind: {pids:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `dsh workflow ARGS` in `dir`, bounded: its code, stdout and stderr.
fn dsh(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let args: Vec<&str> = std::iter::once("workflow")
        .chain(args.iter().copied())
        .collect();
    let (stdout, stderr, code) = common::dsh_in(dir, &args);
    (code, stdout, stderr)
}

fn workspace(answers: Value) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("wf.ts"), SCRIPT).expect("script");
    let fixture = dir.path().join("answers.json");
    std::fs::write(
        &fixture,
        json!({"version": 1, "answers": answers}).to_string(),
    )
    .expect("fixture");
    (dir, fixture)
}

/// A workspace whose `a` calls are answered at once and whose `b` calls
/// after 1.5 s: a run is caught between its two calls.
fn a_then_slow_b() -> tempfile::TempDir {
    workspace(json!([
        { "match": { "label": "a" }, "text": "A", "times": 1000 },
        { "match": { "label": "b" }, "text": "B", "delayMs": 1500, "times": 1000 }
    ]))
    .0
}

/// Runs `runs` runs on one host (lease 10 s), calls `disrupt` once each
/// run has a call answered, and checks that the host rode it out: every
/// run's value, every call settled once, none taken over, and the host
/// still drains on SIGTERM.
async fn rides_out<F: std::future::Future<Output = ()>>(
    url: &str,
    runs: u32,
    disrupt: impl FnOnce() -> F,
) {
    let dir = a_then_slow_b();
    let mut host = Host::start(dir.path(), url, 4, 10);
    let ids: Vec<String> = (0..runs).map(|n| submit(dir.path(), url, n)).collect();
    each_answered_once(url, ids.len()).await;
    disrupt().await;
    wait_all(dir.path(), url, &ids, "A", "B");
    assert_settled_once(url, ids.len()).await;
    let claims = pg::query(url, "SELECT max(claims) FROM dsh_runs").await;
    assert_eq!(claims[0].get::<_, i32>(0), 1, "no run was taken over");
    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(), Some(0), "{}", host.stderr());
}

fn submit(dir: &Path, url: &str, n: u32) -> String {
    let (code, stdout, stderr) = dsh(
        dir,
        &[
            "submit",
            "wf.ts",
            "--fixture",
            "answers.json",
            "--args",
            &json!({ "n": n }).to_string(),
            "--store",
            url,
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    stdout.trim().to_string()
}

/// Waits (bounded) until each of `runs` runs has had a call answered.
async fn each_answered_once(url: &str, runs: usize) {
    let deadline = Instant::now() + common::RUN_BOUND;
    loop {
        // Before the first run made the schema, there is no table yet.
        let rows = pg::try_query(
            url,
            "SELECT count(DISTINCT run_id) FROM dsh_journal WHERE line LIKE '%\"type\":\"settled\"%'",
        )
        .await;
        if rows.is_ok_and(|r| r[0].get::<_, i64>(0) == runs as i64) {
            return;
        }
        assert!(Instant::now() < deadline, "the runs were never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `wait`s for each run of `ids` (run `n` submitted with `n`): exit 0 and
/// the value `[n, a, b]`.
fn wait_all(dir: &Path, url: &str, ids: &[String], a: &str, b: &str) {
    for (n, id) in ids.iter().enumerate() {
        let (code, stdout, stderr) = dsh(dir, &["wait", id, "--store", url]);
        assert_eq!(code, Some(0), "{stderr}");
        let value: Value = serde_json::from_str(&stdout).expect("the value");
        assert_eq!(value, json!([n, a, b]));
    }
}

/// Every call of every run settled exactly once in the attempt that
/// completed it: per run, the last attempt's `settled` lines, one per call.
async fn assert_settled_once(url: &str, runs: usize) {
    let rows = pg::query(
        url,
        "SELECT run_id, line FROM dsh_journal ORDER BY run_id, seq",
    )
    .await;
    let mut per_run: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in rows {
        let line: Value = serde_json::from_str(r.get::<_, &str>(1)).expect("a line");
        per_run.entry(r.get(0)).or_default().push(line);
    }
    assert_eq!(per_run.len(), runs);
    for (id, lines) in per_run {
        let last = lines
            .iter()
            .rposition(|l| l["type"] == "attempt")
            .expect("an attempt line");
        let attempt = &lines[last..];
        let mut settled: Vec<u64> = attempt
            .iter()
            .filter(|l| l["type"] == "settled")
            .filter_map(|l| l["seq"].as_u64())
            .collect();
        let replayed = attempt
            .iter()
            .filter(|l| l["type"] == "start" && l["replayed"] == true)
            .count();
        settled.sort_unstable();
        let live = settled.len();
        assert_eq!(live + replayed, 2, "run {id}: {attempt:?}");
        settled.dedup();
        assert_eq!(
            settled.len(),
            live,
            "run {id}: a call settled twice: {attempt:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitted_runs_are_run_once_each_by_the_hosts() {
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([{ "match": {}, "text": "ok", "delayMs": 50, "times": 1000 }]));
    let hosts = [
        Host::start(dir.path(), &url, 4, 10),
        Host::start(dir.path(), &url, 4, 10),
    ];
    let ids: Vec<String> = (0..12).map(|n| submit(dir.path(), &url, n)).collect();
    wait_all(dir.path(), &url, &ids, "ok", "ok");
    assert_settled_once(&url, ids.len()).await;
    // Both hosts took work.
    let owners = pg::query(&url, "SELECT count(DISTINCT owner) FROM dsh_runs").await;
    assert_eq!(owners[0].get::<_, i64>(0), 2);
    drop(hosts);
}

/// A host dies (kill -9) with runs in flight: once its lease has passed,
/// another host takes them over from the store — the answered calls
/// replayed, the rest run — and every call settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_hosts_runs_are_taken_over() {
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = a_then_slow_b();
    let mut doomed = Host::start(dir.path(), &url, 8, 2);
    let ids: Vec<String> = (0..4).map(|n| submit(dir.path(), &url, n)).collect();
    // Wait until the doomed host runs them all, each with `a` answered.
    each_answered_once(&url, ids.len()).await;
    let workers = children_of(doomed.child.id());
    assert!(!workers.is_empty(), "the host runs its runs' workers");
    doomed.signal(libc::SIGKILL);
    doomed.wait();
    // Its workers die with it (each watches its parent), sandboxes and all.
    all_gone(&workers).await;
    let _survivor = Host::start(dir.path(), &url, 8, 2);
    wait_all(dir.path(), &url, &ids, "A", "B");
    assert_settled_once(&url, ids.len()).await;
    let claims = pg::query(&url, "SELECT min(claims), max(claims) FROM dsh_runs").await;
    assert_eq!(
        (claims[0].get::<_, i32>(0), claims[0].get::<_, i32>(1)),
        (2, 2)
    );
    let replayed = pg::query(
        &url,
        "SELECT count(*) FROM dsh_journal WHERE line LIKE '%\"replayed\":true%'",
    )
    .await;
    assert_eq!(
        replayed[0].get::<_, i64>(0),
        ids.len() as i64,
        "each run's a replayed once"
    );
}

/// A host whose connections to the store are cut mid-run (every session
/// of the database terminated, as a restart does) connects again and
/// finishes its runs under the leases it still has: no run is taken over,
/// every call settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_connections_are_cut_connects_again_and_finishes() {
    let Some(url) = pg::database().await else {
        return;
    };
    rides_out(&url, 2, || async {
        assert!(pg::terminate_sessions(&url).await > 0);
    })
    .await;
}

/// A host paused (SIGSTOP) past its lease loses its runs to another host,
/// which completes them; continued (SIGCONT), the paused host finds its
/// leases gone, stops those runs, and its late writes are refused: every
/// call settled once, each result the new host's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_paused_past_its_lease_loses_its_runs_and_its_late_writes() {
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = a_then_slow_b();
    let mut paused = Host::start(dir.path(), &url, 4, 2);
    let ids: Vec<String> = (0..2).map(|n| submit(dir.path(), &url, n)).collect();
    each_answered_once(&url, ids.len()).await;
    paused.signal(libc::SIGSTOP);
    let other = Host::start(dir.path(), &url, 4, 2);
    wait_all(dir.path(), &url, &ids, "A", "B");
    paused.signal(libc::SIGCONT);
    paused.says("lost its lease on the run").await;
    // Its runs stopped and let go, the paused host is still a host: it
    // drains and exits on SIGTERM.
    paused.signal(libc::SIGTERM);
    assert_eq!(paused.wait(), Some(0), "{}", paused.stderr());
    assert_settled_once(&url, ids.len()).await;
    let rows = pg::query(
        &url,
        "SELECT claims, result->'result'->>'stopReason' FROM dsh_runs",
    )
    .await;
    for r in rows {
        assert_eq!(r.get::<_, i32>(0), 2);
        assert_eq!(r.get::<_, Option<&str>>(1), Some("completed"));
    }
    drop(other);
}

/// A cancel from another process reaches the run's host, and `wait`
/// exits as `run` does for a cancelled run; SIGTERM then drains the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_host_and_sigterm_drains_it() {
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([
        { "match": { "label": "a" }, "text": "A", "times": 1000 },
        { "match": { "label": "b" }, "hang": true, "times": 1000 }
    ]));
    let mut host = Host::start(dir.path(), &url, 2, 10);
    let id = submit(dir.path(), &url, 7);
    let deadline = Instant::now() + common::RUN_BOUND;
    loop {
        let rows = pg::query(
            &url,
            "SELECT count(*) FROM dsh_journal WHERE line LIKE '%\"label\":\"b\"%'",
        )
        .await;
        if rows[0].get::<_, i64>(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "b never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `show` names the host that holds the running run.
    let (code, stdout, stderr) = dsh(dir.path(), &["show", &id, "--store", &url, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).expect("show --json");
    assert_eq!(shown["status"], "running", "{shown}");
    let holder = shown["heldBy"].as_str().expect("held by");
    assert!(
        holder.ends_with(&format!(":{}", host.child.id())),
        "{holder}"
    );
    let asked = Instant::now();
    let (code, _, stderr) = dsh(dir.path(), &["cancel", &id, "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = dsh(dir.path(), &["wait", &id, "--store", &url]);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("error[CANCELLED]"), "{stderr}");
    assert!(stderr.contains("dsh workflow cancel"), "{stderr}");
    // Generous: the point is that it arrives, not how fast on a loaded machine.
    assert!(asked.elapsed() < Duration::from_secs(30));

    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(), Some(0));
}

#[test]
fn without_a_store_host_says_how_to_name_one_and_wait_looks_here() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, stderr) = dsh(dir.path(), &["host"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("needs a store: pass --store"), "{stderr}");
    // `wait` and `cancel` act on this machine's run directories.
    for args in [&["wait", "run-x"][..], &["cancel", "run-x"]] {
        let (code, _, stderr) = dsh(dir.path(), args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no such run") && stderr.contains(".dsh/runs"),
            "{stderr}"
        );
    }
}

/// A run submitted (or tampered with) to run without a sandbox gets the
/// host's own floor: best-effort unless the host's `dsh.toml` says `off`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_gets_a_weaker_sandbox_than_its_host() {
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([{ "match": {}, "text": "ok", "times": 10 }]));
    let _host = Host::start(dir.path(), &url, 2, 10);
    let (code, stdout, stderr) = dsh(
        dir.path(),
        &[
            "submit",
            "wf.ts",
            "--fixture",
            "answers.json",
            "--args",
            "{\"n\":1}",
            "--sandbox",
            "off",
            "--store",
            &url,
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let id = stdout.trim().to_string();
    let (code, stdout, stderr) = dsh(
        dir.path(),
        &["wait", &id, "--store", &url, "--output", "result"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let result: Value = serde_json::from_str(&stdout).expect("the result");
    assert_ne!(result["sandbox"]["level"], "none", "{result}");
    assert!(
        result["sandbox"]["enforced"]
            .as_array()
            .is_some_and(|e| !e.is_empty()),
        "{result}"
    );
}

/// Stored rows tampered with before a host claims them: a giant script, a
/// fixture path in place of the submitted text, a provider the host's
/// configuration does not have, limits no caller may give. The host runs
/// none of them — no agent call starts — and records each as failed,
/// saying why; its waiters hear it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_run_row_is_refused_not_run() {
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([{ "match": {}, "text": "ok", "times": 100 }]));
    let cases = [
        (
            "UPDATE dsh_runs SET source = repeat('x', 17 * 1024 * 1024) WHERE id = $1",
            "its script is 17825792 bytes",
        ),
        (
            "UPDATE dsh_runs SET submission = NULL,
                 info = jsonb_set(info, '{provider}', '{\"fixture\": \"/etc/passwd\"}')
             WHERE id = $1",
            "names no provider this host can make",
        ),
        (
            "UPDATE dsh_runs SET submission = NULL,
                 info = jsonb_set(info, '{provider}',
                     '{\"configured\": {\"config\": \"/tmp/evil.toml\", \"provider\": \"evil\"}}')
             WHERE id = $1",
            "evil",
        ),
        (
            "UPDATE dsh_runs SET info = jsonb_set(info, '{limits,maxConcurrentAgents}', '0')
             WHERE id = $1",
            "maxConcurrentAgents",
        ),
    ];
    let (db, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let mut ids = Vec::new();
    for (n, (tamper, _)) in cases.iter().enumerate() {
        let id = submit(dir.path(), &url, n as u32);
        db.execute(*tamper, &[&id]).await.expect("tamper");
        ids.push(id);
    }
    // A row with a giant id, written by hand: never claimed (its notices
    // could not be sent), so it can poison no host.
    db.execute(
        "INSERT INTO dsh_runs (id, info, source, state)
         SELECT repeat('x', 300), info, source, 'queued' FROM dsh_runs LIMIT 1",
        &[],
    )
    .await
    .expect("a giant id");
    let _host = Host::start(dir.path(), &url, 4, 10);
    for (id, (_, said)) in ids.iter().zip(cases) {
        let (code, _, stderr) = dsh(dir.path(), &["wait", id, "--store", &url]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(said), "{said:?} in {stderr}");
    }
    let started = pg::query(
        &url,
        "SELECT count(*) FROM dsh_journal WHERE line LIKE '%\"type\":\"start\"%'",
    )
    .await;
    assert_eq!(started[0].get::<_, i64>(0), 0, "no call started");
    let giant = pg::query(
        &url,
        "SELECT state, claims FROM dsh_runs WHERE octet_length(id) = 300",
    )
    .await;
    assert_eq!(
        (giant[0].get::<_, &str>(0), giant[0].get::<_, i32>(1)),
        ("queued", 0)
    );
}

/// An embedding application runs a host in its own process
/// (`dsh_store::host::serve`, its own provider) and submits, waits for,
/// lists and cancels runs through the same library; draining the host
/// returns once its runs have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_runs_a_host_in_process_and_drives_it_by_the_library() {
    use std::sync::Arc;

    use dsh_orchestrator::journal::ProviderSpec;
    use dsh_orchestrator::providers::scripted::ScriptedProvider;
    use dsh_orchestrator::{ArgsInput, SandboxPolicy, StartRequest, SubagentProvider};
    use dsh_store::host::{self, Answerer, HostControl, HostEvent, HostOptions, Refused};
    use dsh_store::{Store, StoreUrl};

    struct Mine;
    impl Answerer for Mine {
        fn answering(
            &self,
            _: &str,
            _: &ProviderSpec,
            _: Option<&str>,
            _: &dsh_store::pool::Pools,
        ) -> Result<Arc<dyn SubagentProvider>, Refused> {
            let fixture = json!({"version": 1, "answers": [
                { "match": { "promptContains": "of 1" }, "hang": true, "times": 10 },
                { "match": {}, "text": "mine", "times": 10 }
            ]});
            ScriptedProvider::from_json_text("mine", &fixture.to_string())
                .map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
                .map_err(|e| Refused::usage(e.to_string()))
        }
        fn ready(&self, req: StartRequest) -> Result<StartRequest, Refused> {
            Ok(req.with_worker(dsh_orchestrator::WorkerCommand::dsh(Path::new(DSH))))
        }
    }

    let Some(url) = pg::database().await else {
        return;
    };
    let store = Arc::new(
        Store::open(&StoreUrl::parse(&url, |_| None).expect("url"))
            .await
            .expect("open"),
    );
    let control = HostControl::default();
    let (report, mut events) = tokio::sync::mpsc::unbounded_channel();
    let served = tokio::spawn(host::serve(
        store.clone(),
        Arc::new(Mine),
        HostOptions {
            name: "embedded".into(),
            runs: 2,
            pools: Vec::new(),
            lease: Duration::from_secs(10),
            sandbox_floor: SandboxPolicy::BestEffort,
        },
        control.clone(),
        report,
    ));
    let spec = ProviderSpec::Configured {
        config: None,
        provider: None,
    };
    let submit = |n: u32| {
        let req = StartRequest::new("wf.ts", SCRIPT).with_args(ArgsInput::Json(json!({ "n": n })));
        let store = store.clone();
        let spec = spec.clone();
        async move {
            host::submit(&store, &req, Path::new("wf.ts"), spec, Default::default())
                .await
                .expect("submit")
        }
    };
    let done = submit(0).await;
    let hanging = submit(1).await;
    let doc = host::wait(&store, &done).await.expect("wait");
    assert_eq!(doc["result"]["value"], json!([0, "mine", "mine"]), "{doc}");
    store
        .request_cancel(&hanging, "the embedder cancelled it")
        .await
        .expect("cancel");
    let doc = host::wait(&store, &hanging).await.expect("wait");
    assert_eq!(doc["result"]["stopReason"], "cancelled", "{doc}");
    let listed: Vec<String> = store
        .runs(10)
        .await
        .expect("runs")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert!(listed.contains(&done) && listed.contains(&hanging));
    control.drain.cancel();
    tokio::time::timeout(common::RUN_BOUND, served)
        .await
        .expect("the host returns once drained")
        .expect("the host task")
        .expect("the host");
    let mut claimed = 0;
    while let Ok(e) = events.try_recv() {
        claimed += usize::from(matches!(e, HostEvent::Claimed { claims: 1, .. }));
    }
    assert_eq!(claimed, 2);
}

/// PostgreSQL itself restarts mid-run (fast shutdown, down two seconds,
/// up again on the same port): the host's connections come back — the
/// store's, its listener's, each journal's and events' writer — and it
/// finishes its runs under the leases it kept; nothing is lost or run
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_mid_run_loses_nothing() {
    let Some(cluster) = pg::private("restart") else {
        return;
    };
    let url = pg::database_on(&cluster.url()).await;
    let cluster = std::sync::Arc::new(cluster);
    rides_out(&url, 3, || async {
        let restarting = cluster.clone();
        tokio::task::spawn_blocking(move || restarting.restart(Duration::from_secs(2)))
            .await
            .expect("restart");
        pg::until_ready(&url).await;
    })
    .await;
}

/// The issue's scale: 1,000 runs × 10 agents (a `parallel()` of ten,
/// answered from a fixture after 20 ms) over three hosts of eight runs
/// each: every run completes with the right value, every call settles
/// once, and every host took work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_runs_of_ten_agents_over_three_hosts() {
    use dsh_orchestrator::journal::ProviderSpec;
    use dsh_orchestrator::{ArgsInput, StartRequest};
    use dsh_store::host;
    use dsh_store::{Store, StoreUrl};

    const RUNS: usize = 1000;
    const TEN: &str = r#"export const meta = { name: "ten", description: "ten agents" };
const r = await parallel(Array.from({ length: 10 }, (_, i) => () => agent(`${args.n}:${i}`)));
return r.join(",");
"#;
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, fixture) = workspace(json!([
        { "match": {}, "text": "x", "delayMs": 20, "times": 1_000_000 }
    ]));
    let store = Store::open(&StoreUrl::parse(&url, |_| None).expect("url"))
        .await
        .expect("open");
    let text = std::fs::read_to_string(&fixture).expect("fixture");
    let spec = ProviderSpec::Fixture(fixture.display().to_string());
    for n in 0..RUNS {
        let req = StartRequest::new("ten.ts", TEN).with_args(ArgsInput::Json(json!({ "n": n })));
        host::submit(
            &store,
            &req,
            Path::new("ten.ts"),
            spec.clone(),
            host::Carried {
                fixture: Some(text.clone()),
                ..Default::default()
            },
        )
        .await
        .expect("submit");
    }
    let hosts: Vec<Host> = (0..3)
        .map(|_| Host::start(dir.path(), &url, 8, 10))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let settled = pg::query(
            &url,
            "SELECT count(*) FROM dsh_runs WHERE result IS NOT NULL",
        )
        .await;
        if settled[0].get::<_, i64>(0) == RUNS as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every run settled within 15 min"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wrong = pg::query(
        &url,
        "SELECT count(*) FROM dsh_runs WHERE result->'result'->>'stopReason' <> 'completed'
             OR result->'result'->>'value' <> (SELECT string_agg('x', ',') FROM generate_series(1, 10))",
    )
    .await;
    assert_eq!(
        wrong[0].get::<_, i64>(0),
        0,
        "every run completed with its value"
    );
    // Each call settled once: ten distinct settled seqs per run, no more.
    let calls = pg::query(
        &url,
        "SELECT count(*), count(DISTINCT (run_id, (line::jsonb)->>'seq')) FROM dsh_journal
         WHERE line LIKE '%\"type\":\"settled\"%'",
    )
    .await;
    let (all, distinct) = (calls[0].get::<_, i64>(0), calls[0].get::<_, i64>(1));
    assert_eq!((all, distinct), (RUNS as i64 * 10, RUNS as i64 * 10));
    let owners = pg::query(&url, "SELECT count(DISTINCT owner) FROM dsh_runs").await;
    assert_eq!(owners[0].get::<_, i64>(0), 3, "every host took work");
    drop(hosts);
}

/// A submitted run carries the saved workflows of the submitter's catalog:
/// its `workflow("child")` runs the child it was submitted with, not the
/// host's own `child`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_run_calls_the_nested_workflows_it_was_sent_with() {
    let Some(url) = pg::database().await else {
        return;
    };
    let child = |says: &str| {
        format!(
            "export const meta = {{ name: \"child\", description: \"a child\" }};\nreturn `{says} ${{args.x}}`;\n"
        )
    };
    let (submitter, _) = workspace(json!([]));
    let saved = submitter.path().join(".claude/workflows");
    std::fs::create_dir_all(&saved).expect("dir");
    std::fs::write(saved.join("child.ts"), child("sent")).expect("child");
    std::fs::write(
        submitter.path().join("parent.ts"),
        "export const meta = { name: \"parent\", description: \"calls child\" };\n\
         return await workflow(\"child\", { x: 1 });\n",
    )
    .expect("parent");
    let (host_dir, _) = workspace(json!([]));
    let theirs = host_dir.path().join(".claude/workflows");
    std::fs::create_dir_all(&theirs).expect("dir");
    std::fs::write(theirs.join("child.ts"), child("the host's")).expect("child");
    let _host = Host::start(host_dir.path(), &url, 2, 10);
    let (code, stdout, stderr) = dsh(
        submitter.path(),
        &["submit", "parent.ts", "--dry-run", "--store", &url],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = dsh(host_dir.path(), &["wait", stdout.trim(), "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "\"sent 1\"");
}

/// `dsh workflow run --store` holds its run by a lease too (`[store]
/// lease`): killed mid-run (`kill -9`), its run is continued by a host
/// once the lease has passed — the fixture it was run with carried in the
/// store — and `wait` prints the value from any directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_run_whose_process_dies_is_continued_by_a_host() {
    use std::os::unix::process::CommandExt as _;
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = a_then_slow_b();
    std::fs::write(dir.path().join("dsh.toml"), "[store]\nlease = \"2s\"\n").expect("dsh.toml");
    let mut run = Command::new(DSH)
        .current_dir(dir.path())
        .args(["workflow", "run", "wf.ts", "--fixture", "answers.json"])
        .args(["--args", "{\"n\":5}", "--store", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("dsh workflow run");
    each_answered_once(&url, 1).await;
    // SAFETY: our own child's process group, not yet reaped.
    unsafe { libc::kill(-(run.id() as libc::pid_t), libc::SIGKILL) };
    let _ = run.wait();
    let id: String = pg::query(&url, "SELECT id FROM dsh_runs").await[0].get(0);
    let _host = Host::start(dir.path(), &url, 2, 2);
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let (code, stdout, stderr) = dsh(elsewhere.path(), &["wait", &id, "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let value: Value = serde_json::from_str(&stdout).expect("the value");
    assert_eq!(value, json!([5, "A", "B"]));
    assert_settled_once(&url, 1).await;
    let claims = pg::query(&url, "SELECT claims FROM dsh_runs").await;
    assert_eq!(claims[0].get::<_, i32>(0), 2, "continued by the host");
}

/// `dsh workflow cancel` reaches a foreground `run --store` too: it
/// cancels its run and exits as for a cancelled run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_foreground_run() {
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([
        { "match": { "label": "a" }, "text": "A" },
        { "match": { "label": "b" }, "hang": true }
    ]));
    let run = Command::new(DSH)
        .current_dir(dir.path())
        .args(["workflow", "run", "wf.ts", "--fixture", "answers.json"])
        .args(["--args", "{\"n\":5}", "--store", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dsh workflow run");
    each_answered_once(&url, 1).await;
    let id: String = pg::query(&url, "SELECT id FROM dsh_runs").await[0].get(0);
    let (code, _, stderr) = dsh(dir.path(), &["cancel", &id, "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let out = tokio::task::spawn_blocking(move || run.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("dsh workflow cancel"), "{stderr}");
}

// ---------------------------------------------------------------- agent pools

/// A workspace whose runs' calls go to pool `farm`: a `command` provider
/// (`farm.sh`) that logs each call it starts (`farm.log`, with its pid in
/// `pids/`), answers `did PROMPT`, and takes `second_secs` seconds over a
/// `second` call; `[store] pools = ["farm"]` sends its calls to the
/// store's agent hosts.
fn farm(second_secs: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    std::fs::create_dir(dir.path().join("pids")).expect("pids");
    std::fs::write(dir.path().join("wf.ts"), SCRIPT).expect("script");
    std::fs::write(
        dir.path().join("farm.sh"),
        format!(
            "p=$(cat)\n\
             echo \"$p\" >> {d}/farm.log\n\
             echo $$ > {d}/pids/$$\n\
             case \"$p\" in second*) sleep {second_secs};; esac\n\
             printf 'did %s' \"$p\"\n"
        ),
    )
    .expect("farm.sh");
    std::fs::write(
        dir.path().join("dsh.toml"),
        format!(
            "[workflow]\nprovider = \"farm\"\n\n\
             [providers.farm]\nkind = \"command\"\ncommand = [\"/bin/sh\", \"{d}/farm.sh\"]\n\
             prompt = \"stdin\"\n\n\
             [store]\npools = [\"farm\"]\n"
        ),
    )
    .expect("dsh.toml");
    dir
}

/// Runs `wf.ts` answered by the pool (no fixture): run `n` with `n`.
fn submit_to_pool(dir: &Path, url: &str, n: u32) -> String {
    let args = json!({ "n": n }).to_string();
    let (code, stdout, stderr) = dsh(dir, &["submit", "wf.ts", "--args", &args, "--store", url]);
    assert_eq!(code, Some(0), "{stderr}");
    stdout.trim().to_string()
}

/// How many times `farm.sh` started each prompt.
fn farm_log(dir: &Path) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for line in std::fs::read_to_string(dir.join("farm.log"))
        .unwrap_or_default()
        .lines()
    {
        *seen.entry(line.to_string()).or_insert(0) += 1;
    }
    seen
}

/// Waits (bounded) until `sql` (one count) says `n`.
async fn until_count(url: &str, sql: &str, n: i64) {
    let deadline = Instant::now() + common::RUN_BOUND;
    loop {
        let rows = pg::try_query(url, sql).await;
        if rows.as_ref().is_ok_and(|r| r[0].get::<_, i64>(0) == n) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sql} never said {n}: {:?}",
            rows.map(|r| r[0].get::<_, i64>(0))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until `farm.sh` started `n` calls whose prompt starts
/// with `prefix`.
async fn until_started(dir: &Path, prefix: &str, n: usize) {
    let deadline = Instant::now() + common::RUN_BOUND;
    loop {
        let log = farm_log(dir);
        if log.keys().filter(|p| p.starts_with(prefix)).count() == n {
            return;
        }
        assert!(Instant::now() < deadline, "never started: {log:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `wait`s for each run of `ids` answered by the farm (run `n`
/// submitted with `n`): exit 0 and the value `[n, "did first of n", "did
/// second of n"]`.
fn wait_farm(dir: &Path, url: &str, ids: &[String]) {
    for (n, id) in ids.iter().enumerate() {
        let (code, stdout, stderr) = dsh(dir, &["wait", id, "--store", url, "--events", "none"]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(
            serde_json::from_str::<Value>(&stdout).ok(),
            Some(json!([
                n,
                format!("did first of {n}"),
                format!("did second of {n}")
            ]))
        );
    }
}

/// `farm.sh` started each of `calls` calls exactly once.
fn started_once(dir: &Path, calls: usize) {
    let log = farm_log(dir);
    assert_eq!(log.len(), calls, "{log:?}");
    assert!(
        log.values().all(|&n| n == 1),
        "a call was started twice: {log:?}"
    );
}

/// A farm (second calls of 2 s) with a run host and an agent host of
/// lease 2 s, and `runs` runs whose second calls the agent host's programs
/// are answering.
struct InFlight {
    dir: tempfile::TempDir,
    run_host: Host,
    agent_host: Host,
    ids: Vec<String>,
}

async fn in_flight(url: &str, runs: u32) -> InFlight {
    let dir = farm(2);
    let run_host = Host::with(dir.path(), url, &["--runs", "4"]);
    let agent_host = Host::with(dir.path(), url, &["--agents", "farm=4", "--lease", "2"]);
    agent_host.says("answers calls of farm=4").await;
    let ids: Vec<String> = (0..runs)
        .map(|n| submit_to_pool(dir.path(), url, n))
        .collect();
    until_started(dir.path(), "second", runs as usize).await;
    InFlight {
        dir,
        run_host,
        agent_host,
        ids,
    }
}

/// The pids `farm.sh` wrote.
fn farm_pids(dir: &Path) -> Vec<i32> {
    std::fs::read_dir(dir.join("pids"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// `kill -9` of an agent host mid-call, in a bounded loop: its calls are
/// claimed by another agent host once its lease passes and answered there
/// (started afresh, once); every run completes with its value, every call
/// settles once in the store and in its run's journal, and the dead
/// host's programs are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_agent_hosts_calls_are_answered_by_another() {
    for _round in 0..2 {
        let Some(url) = pg::database().await else {
            return;
        };
        // Each run's second call is being answered by the doomed host:
        // its program started.
        let InFlight {
            dir,
            run_host: _runs,
            agent_host: mut doomed,
            ids,
        } = in_flight(&url, 3).await;
        let programs = farm_pids(dir.path());
        doomed.signal(libc::SIGKILL);
        let _ = doomed.wait();
        all_gone(&programs).await;
        let _heir = Host::with(dir.path(), &url, &["--agents", "farm=4", "--lease", "2"]);
        wait_farm(dir.path(), &url, &ids);
        assert_settled_once(&url, ids.len()).await;
        // In the store: one row per call, settled; the second calls were
        // claimed twice (the dead host's claim, then the heir's).
        let rows = pg::query(
            &url,
            "SELECT request->>'prompt', state, claims FROM dsh_calls ORDER BY 1",
        )
        .await;
        assert_eq!(rows.len(), 6);
        for r in &rows {
            let (prompt, state, claims): (String, String, i32) = (r.get(0), r.get(1), r.get(2));
            assert_eq!(state, "settled", "{prompt}");
            let expected = if prompt.starts_with("second") { 2 } else { 1 };
            assert_eq!(claims, expected, "{prompt}");
        }
        // Started afresh once on the heir: twice in all, the first calls once.
        let log = farm_log(dir.path());
        for n in 0..3 {
            assert_eq!(log.get(&format!("first of {n}")), Some(&1), "{log:?}");
            assert_eq!(log.get(&format!("second of {n}")), Some(&2), "{log:?}");
        }
    }
}

/// `kill -9` of a run's host while its calls are at an agent host: the
/// run is taken over by another run host, which finds the calls its
/// predecessor asked for and waits for their answers — each call is
/// started once in all, and every run completes with its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_taken_over_finds_its_calls_at_the_agent_host() {
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = farm(3);
    let _agents = Host::with(dir.path(), &url, &["--agents", "farm=8"]);
    let mut doomed = Host::with(dir.path(), &url, &["--runs", "4", "--lease", "2"]);
    let ids: Vec<String> = (0..2)
        .map(|n| submit_to_pool(dir.path(), &url, n))
        .collect();
    until_count(
        &url,
        "SELECT count(*) FROM dsh_calls WHERE request->>'prompt' LIKE 'second%' AND state = 'running'",
        2,
    )
    .await;
    doomed.signal(libc::SIGKILL);
    let _ = doomed.wait();
    let _heir = Host::with(dir.path(), &url, &["--runs", "4", "--lease", "2"]);
    wait_farm(dir.path(), &url, &ids);
    let claims = pg::query(&url, "SELECT min(claims) FROM dsh_runs").await;
    assert_eq!(claims[0].get::<_, i32>(0), 2, "every run was taken over");
    started_once(dir.path(), 4);
}

/// A cancel from another process reaches the agent host answering the
/// run's call: the program is stopped, the call settles as cancelled, and
/// the run settles as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_agent_host() {
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = farm(600);
    let _runs = Host::with(dir.path(), &url, &["--runs", "2"]);
    let _agents = Host::with(dir.path(), &url, &["--agents", "farm=2"]);
    let id = submit_to_pool(dir.path(), &url, 0);
    until_started(dir.path(), "second", 1).await;
    let (code, _, stderr) = dsh(dir.path(), &["cancel", &id, "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = dsh(dir.path(), &["wait", &id, "--store", &url]);
    assert_eq!(code, Some(130), "{stderr}");
    until_count(
        &url,
        "SELECT count(*) FROM dsh_calls WHERE state = 'settled' AND outcome = '\"cancelled\"'",
        1,
    )
    .await;
    all_gone(&farm_pids(dir.path())).await;
}

/// An embedder runs a run host and an agent host in-process, on the
/// library alone: its runs' calls go to its pool (`Pools::provider`) and
/// its agent host answers them with the provider it gives for the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_answers_its_runs_calls_from_a_pool_in_process() {
    use std::sync::Arc;

    use dsh_orchestrator::journal::ProviderSpec;
    use dsh_orchestrator::providers::scripted::ScriptedProvider;
    use dsh_orchestrator::{ArgsInput, SandboxPolicy, StartRequest, SubagentProvider};
    use dsh_store::agents::Pool;
    use dsh_store::host::{self, Answerer, HostControl, HostOptions, Refused};
    use dsh_store::pool::Pools;
    use dsh_store::{Store, StoreUrl};

    struct Mine;
    impl Answerer for Mine {
        fn answering(
            &self,
            run: &str,
            _: &ProviderSpec,
            _: Option<&str>,
            pools: &Pools,
        ) -> Result<Arc<dyn SubagentProvider>, Refused> {
            Ok(pools.provider(run, "mine"))
        }
        fn ready(&self, req: StartRequest) -> Result<StartRequest, Refused> {
            Ok(req.with_worker(dsh_orchestrator::WorkerCommand::dsh(Path::new(DSH))))
        }
        fn pool(&self, name: &str) -> Result<Arc<dyn SubagentProvider>, Refused> {
            assert_eq!(name, "mine");
            let fixture = json!({"version": 1, "answers": [
                { "match": {}, "text": "pooled", "delayMs": 100, "times": 100 }
            ]});
            ScriptedProvider::from_json_text("mine", &fixture.to_string())
                .map(|p| Arc::new(p) as Arc<dyn SubagentProvider>)
                .map_err(|e| Refused::usage(e.to_string()))
        }
    }

    let Some(url) = pg::database().await else {
        return;
    };
    let store = Arc::new(
        Store::open(&StoreUrl::parse(&url, |_| None).expect("url"))
            .await
            .expect("open"),
    );
    let control = HostControl::default();
    let serve = |name: &str, runs: usize, pools: Vec<Pool>| {
        let (report, _events) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(host::serve(
            store.clone(),
            Arc::new(Mine),
            HostOptions {
                name: name.into(),
                runs,
                pools,
                lease: Duration::from_secs(10),
                sandbox_floor: SandboxPolicy::BestEffort,
            },
            control.clone(),
            report,
        ))
    };
    let runner = serve("runner", 3, Vec::new());
    let answerer = serve(
        "answerer",
        0,
        vec![Pool {
            name: "mine".into(),
            slots: 4,
        }],
    );
    let spec = ProviderSpec::Configured {
        config: None,
        provider: None,
    };
    let mut ids = Vec::new();
    for n in 0..3 {
        let req = StartRequest::new("wf.ts", SCRIPT).with_args(ArgsInput::Json(json!({ "n": n })));
        ids.push(
            host::submit(
                &store,
                &req,
                Path::new("wf.ts"),
                spec.clone(),
                Default::default(),
            )
            .await
            .expect("submit"),
        );
    }
    for (n, id) in ids.iter().enumerate() {
        let doc = host::wait(&store, id).await.expect("wait");
        assert_eq!(
            doc["result"]["value"],
            json!([n, "pooled", "pooled"]),
            "{doc}"
        );
    }
    let rows = pg::query(
        &url,
        "SELECT count(*) FILTER (WHERE state = 'settled' AND owner = 'answerer'), count(*)
         FROM dsh_calls",
    )
    .await;
    assert_eq!((rows[0].get::<_, i64>(0), rows[0].get::<_, i64>(1)), (6, 6));
    control.drain.cancel();
    for served in [runner, answerer] {
        tokio::time::timeout(common::RUN_BOUND, served)
            .await
            .expect("the host returns once drained")
            .expect("the host task")
            .expect("the host");
    }
}

/// An agent host paused (`SIGSTOP`) past its lease loses its calls to
/// another, which answers them; when it continues (`SIGCONT`) it stops
/// them or its late answers are refused — the rows are the other host's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_host_paused_past_its_lease_loses_its_calls_and_its_late_answers() {
    let Some(url) = pg::database().await else {
        return;
    };
    let InFlight {
        dir,
        run_host: _runs,
        agent_host: mut paused,
        ids,
    } = in_flight(&url, 2).await;
    paused.signal(libc::SIGSTOP);
    let heir = Host::with(dir.path(), &url, &["--agents", "farm=4", "--lease", "2"]);
    let heir_name = format!(":{}", heir.child.id());
    until_count(
        &url,
        &format!(
            "SELECT count(*) FROM dsh_calls WHERE request->>'prompt' LIKE 'second%'
             AND state = 'settled' AND owner LIKE '%{heir_name}'"
        ),
        2,
    )
    .await;
    paused.signal(libc::SIGCONT);
    // Its heartbeat finds the leases gone, or its answer is refused:
    // whichever comes first after it continues.
    let deadline = Instant::now() + common::RUN_BOUND;
    while ![
        "this host lost its lease on the call",
        "this one was not written",
    ]
    .iter()
    .any(|w| paused.stderr().contains(w))
    {
        assert!(Instant::now() < deadline, "{}", paused.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_farm(dir.path(), &url, &ids);
    let rows = pg::query(
        &url,
        &format!(
            "SELECT count(*) FROM dsh_calls WHERE request->>'prompt' LIKE 'second%'
             AND claims = 2 AND state = 'settled' AND owner LIKE '%{heir_name}'"
        ),
    )
    .await;
    assert_eq!(rows[0].get::<_, i64>(0), 2, "the heir's answers stand");
    assert_settled_once(&url, ids.len()).await;
    paused.signal(libc::SIGTERM);
    assert_eq!(paused.wait(), Some(0), "{}", paused.stderr());
}

/// Call rows tampered with in the store — a field no dsh writes (a
/// command), a giant request — are never run: the agent host answers each
/// with a fault naming what is wrong, and its program never starts. A
/// call whose hosts died five times while answering it is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_call_row_is_refused_not_run() {
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = farm(0);
    // The schema, made by a first open.
    let (code, _, stderr) = dsh(dir.path(), &["runs", "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let giant = "x".repeat(18 << 20);
    for sql in [
        "INSERT INTO dsh_runs (id, info, source, state) VALUES ('t', '{}', '', 'settled')".to_string(),
        r#"INSERT INTO dsh_calls (run_id, key, n, pool, request) VALUES
           ('t', 'k', 0, 'farm', '{"seq":1,"prompt":"p","label":"l","command":"touch /tmp/owned"}')"#
            .to_string(),
        format!(
            r#"INSERT INTO dsh_calls (run_id, key, n, pool, request) VALUES
               ('t', 'k', 1, 'farm', '{{"seq":2,"prompt":"{giant}","label":"l"}}')"#
        ),
    ] {
        pg::query(&url, &sql).await;
    }
    // A call whose hosts kept dying while answering it (it brings its
    // host down): given up, not claimed a sixth time.
    pg::query(
        &url,
        r#"INSERT INTO dsh_calls (run_id, key, n, pool, request, state, claims, owner, lease_until)
           VALUES ('t', 'k', 2, 'farm', '{"seq":3,"prompt":"p","label":"l"}', 'running', 5,
                   'gone:1', now() - interval '1 second')"#,
    )
    .await;
    let _agents = Host::with(dir.path(), &url, &["--agents", "farm=2"]);
    until_count(
        &url,
        "SELECT count(*) FROM dsh_calls WHERE state = 'settled'",
        3,
    )
    .await;
    let rows = pg::query(
        &url,
        "SELECT n, outcome->>'resultError', claims FROM dsh_calls ORDER BY n",
    )
    .await;
    let why: Vec<String> = rows.iter().map(|r| r.get::<_, String>(1)).collect();
    assert!(why[0].contains("unknown field `command`"), "{why:?}");
    assert!(why[1].contains("bytes, over the"), "{why:?}");
    assert!(why[2].contains("claimed 5 times"), "{why:?}");
    assert_eq!(rows[2].get::<_, i32>(2), 5, "not claimed again");
    assert!(farm_log(dir.path()).is_empty(), "a tampered call was run");
}

/// `wait --events jsonl` follows a hosted run from another process: the
/// run's events on stderr as they come (an answered call's `agent-end`
/// while the run still runs), `workflow/start` first and `workflow/end`
/// last, then the value on stdout as `run` prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_follows_a_hosted_runs_events_as_they_come() {
    use std::io::BufRead as _;
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([
        { "match": { "label": "a" }, "text": "A", "times": 10 },
        { "match": { "label": "b" }, "text": "B", "delayMs": 3000, "times": 10 }
    ]));
    let id = submit(dir.path(), &url, 7);
    let mut waiter = Command::new(DSH)
        .current_dir(dir.path())
        .args([
            "workflow", "wait", &id, "--store", &url, "--events", "jsonl",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wait");
    let _host = Host::start(dir.path(), &url, 2, 10);
    let stderr = waiter.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut events: Vec<Value> = Vec::new();
    let mut checked_midway = false;
    while let Ok(line) = rx.recv_timeout(common::RUN_BOUND) {
        let event: Value = serde_json::from_str(&line).expect("a JSON event line");
        let a_ended = event["type"] == "workflow/agent-end" && event["label"] == "a";
        events.push(event);
        if a_ended {
            let result = pg::query(&url, "SELECT result IS NULL FROM dsh_runs").await;
            assert!(
                result[0].get::<_, bool>(0),
                "a's end came only after the run's"
            );
            checked_midway = true;
        }
    }
    // The lines ended: the waiter exits now, or it hung and is ended.
    let deadline = Instant::now() + common::WAIT_BOUND;
    while waiter.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = waiter.kill();
            panic!("wait did not exit after its last event line");
        }
        std::thread::sleep(common::POLL);
    }
    reader.join().expect("reader");
    let out = waiter.wait_with_output().expect("wait's end");
    assert_eq!(out.status.code(), Some(0));
    let value: Value = serde_json::from_slice(&out.stdout).expect("the value");
    assert_eq!(value, json!([7, "A", "B"]));
    assert!(checked_midway, "no agent-end of a: {events:?}");
    assert_eq!(
        events.first().map(|e| &e["type"]),
        Some(&json!("workflow/start"))
    );
    assert_eq!(
        events.last().map(|e| &e["type"]),
        Some(&json!("workflow/end"))
    );
    let ends = events
        .iter()
        .filter(|e| e["type"] == "workflow/agent-end")
        .count();
    assert_eq!(ends, 2, "{events:?}");
    // By default, as `run` shows events off a terminal: readable lines.
    let (code, stdout, stderr) = dsh(dir.path(), &["wait", &id, "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).ok(),
        Some(json!([7, "A", "B"]))
    );
    let shown: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("] ").map(|(_, text)| text))
        .collect();
    assert_eq!(
        shown,
        [
            format!("start fleet — runs on hosts ({id})").as_str(),
            "agent #1 started a",
            "agent #1 completed a",
            "agent #2 started b",
            "agent #2 completed b",
            "end completed (2 agents)"
        ],
        "{stderr}"
    );
}

/// SIGTERM drains an agent host: it claims no more, finishes the calls it
/// has (their answers its own) and exits 0. A second signal hands the
/// calls it still has back to the queue, where another agent host takes
/// them at once (claims 2), without waiting for the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_an_agent_host_and_a_second_hands_its_calls_back() {
    let Some(url) = pg::database().await else {
        return;
    };
    // Drained: the calls in flight finish here.
    let dir = farm(2);
    let _runs = Host::with(dir.path(), &url, &["--runs", "4"]);
    let mut agents = Host::with(dir.path(), &url, &["--agents", "farm=4"]);
    let id = submit_to_pool(dir.path(), &url, 0);
    until_started(dir.path(), "second", 1).await;
    agents.signal(libc::SIGTERM);
    agents.says("stops claiming").await;
    assert_eq!(agents.wait(), Some(0), "{}", agents.stderr());
    let owner = format!(":{}", agents.child.id());
    until_count(
        &url,
        &format!(
            "SELECT count(*) FROM dsh_calls WHERE state = 'settled' AND claims = 1
             AND owner LIKE '%{owner}'"
        ),
        2,
    )
    .await;
    // Stopped: the call goes back to the queue and another host answers
    // it, long before the 600 s lease would have passed.
    let _heir_later;
    {
        let mut stopped = Host::with(dir.path(), &url, &["--agents", "farm=4", "--lease", "600"]);
        let _ = submit_to_pool(dir.path(), &url, 1);
        until_started(dir.path(), "second", 2).await;
        stopped.signal(libc::SIGTERM);
        stopped.says("stops claiming").await;
        stopped.signal(libc::SIGTERM);
        assert_eq!(stopped.wait(), Some(0), "{}", stopped.stderr());
        _heir_later = Host::with(dir.path(), &url, &["--agents", "farm=4"]);
    }
    let (code, stdout, stderr) = dsh(
        dir.path(),
        &["wait", &id, "--store", &url, "--events", "none"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).ok(),
        Some(json!([0, "did first of 0", "did second of 0"]))
    );
    until_count(
        &url,
        "SELECT count(*) FROM dsh_calls
         WHERE request->>'prompt' = 'second of 1' AND state = 'settled' AND claims = 2",
        1,
    )
    .await;
    all_gone(&farm_pids(dir.path())).await;
}

/// PostgreSQL restarts while calls are at an agent host: the run host's
/// asks and looks, the agent host's claims, heartbeat and answers all
/// come back; every run completes with its value and no call is started
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_with_calls_at_an_agent_host_loses_nothing() {
    let Some(cluster) = pg::private("pool-restart") else {
        return;
    };
    let url = pg::database_on(&cluster.url()).await;
    let dir = farm(3);
    let _runs = Host::with(dir.path(), &url, &["--runs", "4"]);
    let _agents = Host::with(dir.path(), &url, &["--agents", "farm=4"]);
    let ids: Vec<String> = (0..3)
        .map(|n| submit_to_pool(dir.path(), &url, n))
        .collect();
    until_started(dir.path(), "second", 3).await;
    let cluster = std::sync::Arc::new(cluster);
    let restarting = cluster.clone();
    tokio::task::spawn_blocking(move || restarting.restart(Duration::from_secs(2)))
        .await
        .expect("restart");
    pg::until_ready(&url).await;
    wait_farm(dir.path(), &url, &ids);
    assert_settled_once(&url, ids.len()).await;
    started_once(dir.path(), 6);
}

/// A resume by hand (`resume --store`) of a run whose host died while its
/// call was at an agent host asks the pool as the host did: it finds the
/// call still being answered there, and nothing is started twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_by_hand_finds_its_calls_at_the_agent_host() {
    let Some(url) = pg::database().await else {
        return;
    };
    let dir = farm(3);
    let _agents = Host::with(dir.path(), &url, &["--agents", "farm=2"]);
    let mut doomed = Host::with(dir.path(), &url, &["--runs", "2", "--lease", "2"]);
    let id = submit_to_pool(dir.path(), &url, 0);
    until_started(dir.path(), "second", 1).await;
    doomed.signal(libc::SIGKILL);
    let _ = doomed.wait();
    until_count(
        &url,
        "SELECT count(*) FROM dsh_runs WHERE lease_until < now()",
        1,
    )
    .await;
    let (code, stdout, stderr) = dsh(
        dir.path(),
        &["resume", &id, "--store", &url, "--events", "none"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).ok(),
        Some(json!([0, "did first of 0", "did second of 0"]))
    );
    started_once(dir.path(), 2);
}

/// Against a store, a run is named as a run directory is: its id,
/// `latest`, or a unique start of its id (with or without `run-`); a start
/// that names several runs is refused, naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_runs_are_named_by_latest_or_a_unique_start() {
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([{ "match": {}, "text": "ok", "times": 10 }]));
    let first = submit(dir.path(), &url, 0);
    let second = submit(dir.path(), &url, 1);
    let show = |run: &str| {
        let (code, stdout, stderr) = dsh(dir.path(), &["show", run, "--store", &url, "--json"]);
        (code, serde_json::from_str::<Value>(&stdout).ok(), stderr)
    };
    let (code, doc, stderr) = show("latest");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(doc.expect("json")["runId"], json!(second));
    // The shortest start that tells them apart, without `run-`.
    let unique = (1..first.len())
        .map(|n| &first[4..4 + n.min(first.len() - 4)])
        .find(|p| !second[4..].starts_with(p))
        .expect("a unique start");
    let (code, doc, stderr) = show(unique);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(doc.expect("json")["runId"], json!(first));
    let (code, _, stderr) = show("run-");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("more than one run's id"), "{stderr}");
    let (code, _, stderr) = show("nope");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no such run in this store"), "{stderr}");
    // `cancel` and `wait` too: the latest is cancelled while queued, and
    // a host that claims it settles it as cancelled at once.
    let (code, _, stderr) = dsh(dir.path(), &["cancel", "latest", "--store", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    let _host = Host::start(dir.path(), &url, 2, 10);
    let (code, _, stderr) = dsh(
        dir.path(),
        &["wait", unique, "--store", &url, "--events", "none"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = dsh(
        dir.path(),
        &["wait", "latest", "--store", &url, "--events", "none"],
    );
    assert_eq!(code, Some(130), "{stderr}");
}

/// `dsh workflow serve --store`: the web view of a store's runs — the
/// list, a run, its events as they come over SSE, and a cancel from the
/// page's own request that reaches the run's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_serves_a_stores_runs_and_cancels_one() {
    use std::io::{BufRead as _, Read as _, Write as _};
    let Some(url) = pg::database().await else {
        return;
    };
    let (dir, _) = workspace(json!([
        { "match": { "label": "a" }, "text": "A", "times": 10 },
        { "match": { "label": "b" }, "text": "B", "delayMs": 10000, "times": 10 }
    ]));
    let id = submit(dir.path(), &url, 3);
    let _host = Host::start(dir.path(), &url, 2, 10);
    // Ended when the test ends, passing or not.
    let mut serve = common::Ended(
        Command::new(DSH)
            .current_dir(dir.path())
            .args([
                "workflow",
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--store",
                &url,
            ])
            .env_remove("DSH_SERVE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn serve"),
    );
    let mut first = String::new();
    std::io::BufReader::new(serve.0.stderr.take().expect("stderr"))
        .read_line(&mut first)
        .expect("its address");
    let addr = first
        .trim()
        .strip_prefix("dsh: serving runs on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("no address: {first}"))
        .to_string();
    let request = |method: &str, path: &str, extra: &str| {
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(common::RUN_BOUND))
            .expect("timeout");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{extra}\r\n"
        )
        .expect("write");
        s
    };
    let whole = |method: &str, path: &str, extra: &str| {
        let mut body = String::new();
        let _ = request(method, path, extra).read_to_string(&mut body);
        body
    };
    // The list has the run; its page's API has it.
    let deadline = Instant::now() + common::RUN_BOUND;
    while !whole("GET", "/api/runs", "").contains(&id) {
        assert!(Instant::now() < deadline, "the run is not listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(whole("GET", &format!("/api/runs/{id}"), "").contains("\"runId\""));
    // Its events come as they are written: `b` starts (and waits).
    let mut stream = std::io::BufReader::new(request("GET", &format!("/api/runs/{id}/events"), ""));
    let mut seen = String::new();
    while !seen.contains("\"label\":\"b\"") {
        let mut line = String::new();
        assert!(
            stream.read_line(&mut line).expect("an event line") > 0,
            "the stream ended early: {seen}"
        );
        seen.push_str(&line);
    }
    drop(stream);
    // A cancel from the page's own request.
    let page = whole("GET", &format!("/runs/{id}"), "");
    let at = page.find("const CSRF = \"").expect("the token") + "const CSRF = \"".len();
    let csrf = &page[at..at + 32];
    let said = whole(
        "POST",
        &format!("/api/runs/{id}/cancel"),
        &format!("X-Dsh-Csrf: {csrf}\r\nOrigin: http://{addr}\r\n"),
    );
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    let (code, _, stderr) = dsh(
        dir.path(),
        &["wait", &id, "--store", &url, "--events", "none"],
    );
    assert_eq!(code, Some(130), "cancelled: {stderr}");
    // Settled: the stream sends every event, then ends.
    let all = whole("GET", &format!("/api/runs/{id}/events"), "");
    assert!(
        all.contains("workflow/end") && all.contains("event: settled"),
        "{all}"
    );
    // Resumed from the page: a process of the server's continues it, and
    // it completes with its value.
    let said = whole(
        "POST",
        &format!("/api/runs/{id}/resume"),
        &format!("X-Dsh-Csrf: {csrf}\r\nOrigin: http://{addr}\r\n"),
    );
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    let (code, stdout, stderr) = dsh(
        dir.path(),
        &["wait", &id, "--store", &url, "--events", "none"],
    );
    assert_eq!(code, Some(0), "resumed to completion: {stderr}");
    assert!(stdout.contains("\"B\""), "{stdout}");
    drop(serve);
}
