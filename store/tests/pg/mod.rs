//! A PostgreSQL database of its own for each test.
//!
//! In CI, `.ci/run` starts a private cluster and names it in
//! `DSH_TEST_PG_URL` (a superuser's URL). Without it, the first test that
//! asks starts a private cluster for its test binary when `initdb` and
//! `postgres` are on the PATH: a data directory under `target/pg-tests/`,
//! a free loopback port, run as `nobody` when the tests run as root
//! (PostgreSQL refuses root), shut down (`SIGQUIT`: immediate, its
//! backends with it) when the test binary exits — its parent-death signal;
//! the spawning thread lives as long as the process — and its data removed
//! by the next test binary that starts one. Without either, [`database`] says so and returns `None`, and
//! the test passes without checking anything — the README's test command
//! must pass on a machine with nothing installed.

#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The admin URL of the cluster the tests use, once known.
static CLUSTER: OnceLock<Option<String>> = OnceLock::new();
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty database's URL (`postgres://…/dsh_t_PID_N`), or `None`
/// (said on stderr) when no PostgreSQL can be had here.
pub async fn database() -> Option<String> {
    let admin = CLUSTER.get_or_init(cluster).clone()?;
    Some(database_on(&admin).await)
}

/// A fresh, empty database's URL on the cluster whose admin URL is `admin`.
pub async fn database_on(admin: &str) -> String {
    let name = format!(
        "dsh_t_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    // A cluster just started may still refuse ("starting up").
    let deadline = Instant::now() + Duration::from_secs(60);
    let (client, conn) = loop {
        match tokio_postgres::connect(admin, tokio_postgres::NoTls).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("connect to the test cluster {admin}: {e}"),
        }
    };
    tokio::spawn(conn);
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        client
            .batch_execute(&sql)
            .await
            .expect("create the test database");
    }
    with_database(admin, &name)
}

/// Waits (bounded) until the server at `url` takes connections: one that
/// has just started listens before it is ready ("starting up").
pub async fn until_ready(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        assert!(
            Instant::now() < deadline,
            "{url} never took connections: {e}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Terminates every other session of the database at `url`, as a restart
/// of the server does to its clients; how many.
pub async fn terminate_sessions(url: &str) -> usize {
    let (_, db) = url.rsplit_once('/').expect("a URL with a database");
    let (admin, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .await
        .expect("terminate")
        .len()
}

/// The rows of `sql` in the database at `url`, or why not (the schema may
/// not be there yet).
pub async fn try_query(
    url: &str,
    sql: &str,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client.query(sql, &[]).await
}

/// The rows of `sql` in the database at `url` (a connection of its own).
pub async fn query(url: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client.query(sql, &[]).await.expect("query")
}

/// `url` naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a URL with a database");
    format!("{base}/{name}")
}

fn cluster() -> Option<String> {
    if let Ok(url) = std::env::var("DSH_TEST_PG_URL")
        && !url.is_empty()
    {
        return Some(url);
    }
    match start_private() {
        Ok(url) => Some(url),
        Err(why) => {
            eprintln!(
                "no PostgreSQL for this test ({why}); set DSH_TEST_PG_URL or install PostgreSQL (initdb, postgres) to run it"
            );
            None
        }
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Starts the test binary's shared private cluster; its admin URL.
fn start_private() -> Result<String, String> {
    let cluster = Private::start("shared")?;
    let url = cluster.url();
    // It lives as long as the test binary (its parent-death signal).
    std::mem::forget(cluster);
    Ok(url)
}

/// A cluster of the test's own, to restart (`None`, said on stderr, when
/// no PostgreSQL can be had here). Shut down when dropped.
pub fn private(name: &str) -> Option<Private> {
    match Private::start(name) {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("no private PostgreSQL cluster for this test ({why}); it checks nothing");
            None
        }
    }
}

/// A private PostgreSQL cluster: a data directory under
/// `target/pg-tests/PID/NAME`, a free loopback port, run as `nobody` when
/// the tests run as root.
pub struct Private {
    root: std::path::PathBuf,
    port: u16,
    pid: std::sync::Mutex<Option<i32>>,
}

impl Drop for Private {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `program` as the cluster's user, dying with the thread that spawns it.
fn as_user(program: &str) -> Command {
    // SAFETY: geteuid has no preconditions.
    let root_user = unsafe { libc::geteuid() } == 0;
    let mut c = Command::new("setpriv");
    if root_user {
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]);
    }
    c.arg("--pdeathsig=QUIT").arg(program).stdin(Stdio::null());
    c
}

impl Private {
    fn start(name: &str) -> Result<Private, String> {
        if !on_path("initdb") || !on_path("postgres") || !on_path("setpriv") {
            return Err("initdb, postgres or setpriv is not on the PATH".into());
        }
        let all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pg-tests");
        // The clusters of test binaries that have exited: their data goes.
        for entry in std::fs::read_dir(&all).into_iter().flatten().flatten() {
            let pid = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok());
            // SAFETY: kill with signal 0 only checks that the pid exists.
            if pid.is_some_and(|p| unsafe { libc::kill(p, 0) } != 0) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let root = all.join(std::process::id().to_string()).join(name);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let ok = Command::new("chown")
                .args(["nobody:nogroup"])
                .arg(&root)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(format!("cannot give {} to nobody", root.display()));
            }
        }
        let out = as_user("initdb")
            .arg("-D")
            .arg(root.join("data"))
            .args([
                "-U",
                "dsh",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let cluster = Private {
            root,
            port,
            pid: std::sync::Mutex::new(None),
        };
        cluster.serve()?;
        Ok(cluster)
    }

    /// The admin URL (database `postgres`).
    pub fn url(&self) -> String {
        format!("postgres://dsh@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it listens.
    fn serve(&self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = as_user("postgres");
        cmd.arg("-D")
            .arg(self.root.join("data"))
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-p",
                &self.port.to_string(),
            ])
            .arg("-k")
            .arg(&self.root)
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(log);
        // The thread that spawns it waits for it: the parent-death signal
        // fires when the spawning thread ends, and it ends only after the
        // server has.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = tx.send(Ok(child.id() as i32));
                let _ = child.wait();
            }
            Err(e) => {
                let _ = tx.send(Err(format!("postgres: {e}")));
            }
        });
        let pid = rx.recv().map_err(|e| e.to_string())??;
        *self.pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres did not listen within 60 s; see {}",
                    self.root.join("log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Shuts the server down (fast: its sessions ended, what they
    /// committed kept) and waits until it has exited.
    fn stop(&self) {
        let pid = self.pid.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(pid) = pid {
            // SAFETY: the server this cluster started, not yet reaped by
            // its thread while kill(pid, 0) succeeds.
            unsafe { libc::kill(pid, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(60);
            // SAFETY: signal 0 only checks that the pid exists.
            while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Restarts the server: down, `down` long, up again on the same port.
    pub fn restart(&self, down: Duration) {
        self.stop();
        std::thread::sleep(down);
        self.serve().expect("the cluster starts again");
    }
}
