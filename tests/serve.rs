//! `dsh workflow serve`, the live web view: its pages in headless Chromium
//! (driven by playwright-core from the npm registry, `tests/serve/browser.mjs`)
//! while real runs go on, and its guards (the Host check, the token, the
//! CSRF check) and its event streams over raw HTTP.
//!
//! playwright-core is looked up in `$DSH_PLAYWRIGHT` (default
//! `~/.cache/dsh-playwright`) and installed there with npm when missing
//! (`.ci/run` installs it first); without npm, node or Chromium the browser
//! test says so and passes. The other tests need nothing but dsh.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::DSH;

/// The pinned playwright-core.
const PLAYWRIGHT: &str = "playwright-core@1.64.1";

const SCRIPT: &str = r#"phase("Go <script>alert(1)</script>");
log("<img src=x onerror=alert(1)>");
const r = await parallel([
  () => agent("quick", { label: "<img src=x onerror=alert(2)>" }),
  () => agent("slow one", { label: "slow" }),
]);
return r;
"#;

/// A runs directory, the script, and fixtures: `quick` answers the slow
/// call in 12 s (long enough for a browser started on a loaded machine to
/// see it running), `stuck` in a minute.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("wf.ts"), SCRIPT).unwrap();
        for (name, delay) in [("quick", 12000), ("stuck", 60000)] {
            std::fs::write(
                dir.path().join(format!("{name}.json")),
                format!(
                    r#"{{"version": 1, "answers": [
  {{"match": {{"promptContains": "slow"}}, "text": "late", "delayMs": {delay}}},
  {{"match": {{}}, "text": "<b>answer</b>", "delayMs": 300}}
]}}"#
                ),
            )
            .unwrap();
        }
        World { dir }
    }

    fn runs(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    /// `run --detach` with a fixture; the run's id.
    fn detach(&self, fixture: &str) -> String {
        let out = Command::new(DSH)
            .args(["workflow", "run", "wf.ts", "--detach", "--fixture"])
            .arg(format!("{fixture}.json"))
            .arg("--runs-dir")
            .arg(self.runs())
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .to_string()
    }

    /// `dsh workflow serve` on a free loopback port; the server and its
    /// address.
    fn serve(&self, env: &[(&str, &str)]) -> Server {
        let mut c = Command::new(DSH);
        c.args(["workflow", "serve", "--addr", "127.0.0.1:0", "--runs-dir"])
            .arg(self.runs())
            .current_dir(self.dir.path())
            .env_remove("DSH_SERVE_TOKEN")
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("dsh: serving runs on http://")
            .and_then(|a| a.strip_suffix('/'))
            .unwrap_or_else(|| panic!("no address: {line}"))
            .to_string();
        Server { child, addr }
    }

    /// Waits (bounded) until no process of this world is left.
    fn assert_no_process_left(&self) {
        let needle = self.dir.path().display().to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left: Vec<u32> = common::all_pids()
                .into_iter()
                .filter(|&pid| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    String::from_utf8_lossy(&cmd).contains(&needle)
                        && common::proc_stat(pid).is_some_and(|(s, ..)| s != 'Z')
                })
                .collect();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "processes left: {left:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the server this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request; status, headers (lower-case names), body.
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// The CSRF token a run page carries.
fn csrf(addr: &str, run: &str, headers: &[(&str, &str)]) -> String {
    let (status, _, page) = http(addr, "GET", &format!("/runs/{run}"), headers);
    assert_eq!(status, 200, "{page}");
    let at = page.find("const CSRF = \"").unwrap() + "const CSRF = \"".len();
    page[at..at + 32].to_string()
}

/// Waits (bounded) until the run has a result.
fn settled(w: &World, run: &str) -> Value {
    let path = w.runs().join(run).join("result.json");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            return v;
        }
        assert!(Instant::now() < deadline, "run {run} never settled");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// playwright-core, installing it when missing; `None` (said on stderr)
/// without node, npm or Chromium.
fn playwright() -> Option<PathBuf> {
    if !Path::new("/usr/bin/chromium").is_file() {
        eprintln!("SKIPPED: no /usr/bin/chromium (apt-get install -y chromium)");
        return None;
    }
    let dir = std::env::var_os("DSH_PLAYWRIGHT").map_or_else(
        || {
            let home =
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
            home.join(".cache/dsh-playwright")
        },
        PathBuf::from,
    );
    if dir.join("node_modules/playwright-core").is_dir() {
        return Some(dir);
    }
    let installed = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&dir)
        .arg(PLAYWRIGHT)
        .status()
        .is_ok_and(|s| s.success());
    if installed {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: {PLAYWRIGHT} could not be installed with npm into {}",
            dir.display()
        );
        None
    }
}

#[test]
fn the_run_page_updates_live_in_chromium_and_cancels() {
    let Some(pw) = playwright() else { return };
    let w = World::new();
    let server = w.serve(&[]);
    let stuck = w.detach("stuck");
    let live = w.detach("quick");
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-run.png");
    let _ = std::fs::remove_file(&shot);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/browser.mjs");
    let out = Command::new("node")
        .arg(script)
        .arg(&pw)
        .arg(format!("http://{}", server.addr))
        .arg(&live)
        .arg(&stuck)
        .arg(&shot)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap();
    // Both runs listed.
    let listed: Vec<&str> = seen["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&live.as_str()) && listed.contains(&stuck.as_str()),
        "{seen}"
    );
    // A bar ran, then both turned green, on the same page.
    assert_eq!(seen["sawRunning"], true);
    assert_eq!(seen["sameUrl"], true, "{seen}");
    assert_eq!(seen["status"], "completed");
    // Hostile strings are text: no image, no script but the page's own,
    // no dialog, no script error.
    assert_eq!(
        seen["labels"],
        serde_json::json!(["<img src=x onerror=alert(2)>", "slow"])
    );
    assert_eq!(
        seen["phases"],
        serde_json::json!(["Go <script>alert(1)</script>"])
    );
    assert_eq!(
        seen["logs"],
        serde_json::json!(["<img src=x onerror=alert(1)>"])
    );
    assert_eq!(seen["images"], 0);
    assert_eq!(seen["scripts"], 1);
    assert_eq!(seen["dialogs"], serde_json::json!([]));
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    // The cancel button cancelled the stuck run.
    assert_eq!(seen["cancelled"], "cancelled");
    assert_eq!(settled(&w, &stuck)["result"]["stopReason"], "cancelled");
    assert!(std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0) > 5_000);
    drop(server);
    w.assert_no_process_left();
}

#[test]
fn changes_need_the_pages_csrf_token_and_a_same_site_request() {
    let w = World::new();
    let server = w.serve(&[]);
    let run = w.detach("stuck");
    let a = server.addr.as_str();
    let path = format!("/api/runs/{run}/cancel");
    // No token, a wrong one, a right one from another site: refused.
    let (status, _, body) = http(a, "POST", &path, &[]);
    assert_eq!(status, 403, "{body}");
    let (status, ..) = http(
        a,
        "POST",
        &path,
        &[("X-Dsh-Csrf", "00000000000000000000000000000000")],
    );
    assert_eq!(status, 403);
    let token = csrf(a, &run, &[]);
    let (status, ..) = http(
        a,
        "POST",
        &path,
        &[("X-Dsh-Csrf", &token), ("Origin", "http://evil.example")],
    );
    assert_eq!(status, 403);
    let (status, ..) = http(
        a,
        "POST",
        &path,
        &[("X-Dsh-Csrf", &token), ("Sec-Fetch-Site", "cross-site")],
    );
    assert_eq!(status, 403);
    // Nothing was cancelled by those.
    assert!(!w.runs().join(&run).join("result.json").exists());
    // The page's own request is done.
    let origin = format!("http://{a}");
    let (status, _, body) = http(
        a,
        "POST",
        &path,
        &[
            ("X-Dsh-Csrf", &token),
            ("Origin", &origin),
            ("Sec-Fetch-Site", "same-origin"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(settled(&w, &run)["result"]["stopReason"], "cancelled");
    // A name that is not loopback is not answered (DNS rebinding).
    let (status, ..) = http(a, "GET", "/api/runs", &[("Host", "evil.example")]);
    assert_eq!(status, 421);
    // A run id that is a path is not a run.
    let (status, ..) = http(a, "GET", "/api/runs/..%2F..%2Fetc", &[]);
    assert_eq!(status, 404);
    drop(server);
    w.assert_no_process_left();
}

#[test]
fn the_event_stream_starts_after_the_last_event_the_page_has() {
    let w = World::new();
    let run = w.detach("quick");
    settled(&w, &run);
    let server = w.serve(&[]);
    let (status, head, all) = http(&server.addr, "GET", &format!("/api/runs/{run}/events"), &[]);
    assert_eq!(status, 200);
    assert!(head.contains("text/event-stream"), "{head}");
    let ids = |body: &str| -> Vec<u64> {
        body.lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let every = ids(&all);
    assert_eq!(every, (1..=every.len() as u64).collect::<Vec<_>>(), "{all}");
    assert!(all.contains("event: settled"), "{all}");
    let (_, _, rest) = http(
        &server.addr,
        "GET",
        &format!("/api/runs/{run}/events"),
        &[("Last-Event-ID", "3")],
    );
    assert_eq!(
        ids(&rest),
        (4..=every.len() as u64).collect::<Vec<_>>(),
        "{rest}"
    );
}

#[test]
fn a_token_is_asked_for_and_kept_in_a_strict_cookie() {
    let w = World::new();
    let token = "a-serve-token-long-enough";
    let server = w.serve(&[("DSH_SERVE_TOKEN", token)]);
    let a = server.addr.as_str();
    let (status, ..) = http(a, "GET", "/api/runs", &[]);
    assert_eq!(status, 401);
    let (status, head, _) = http(a, "GET", &format!("/?token={token}"), &[]);
    assert_eq!(status, 303, "{head}");
    assert!(
        head.contains(&format!(
            "set-cookie: dsh_token={token}; httponly; samesite=strict"
        )),
        "{head}"
    );
    assert!(head.contains("location: /\r\n"), "{head}");
    let cookie = format!("dsh_token={token}");
    let (status, _, body) = http(a, "GET", "/api/runs", &[("Cookie", &cookie)]);
    assert_eq!(status, 200, "{body}");
    let bearer = format!("Bearer {token}");
    let (status, ..) = http(a, "GET", "/api/runs", &[("Authorization", &bearer)]);
    assert_eq!(status, 200);
    let (status, ..) = http(a, "GET", "/api/runs", &[("Authorization", "Bearer wrong")]);
    assert_eq!(status, 401);
}

#[test]
fn an_address_off_loopback_needs_a_token() {
    let out = Command::new(DSH)
        .args(["workflow", "serve", "--addr", "0.0.0.0:0"])
        .env_remove("DSH_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("DSH_SERVE_TOKEN"),
        "{err}"
    );
}
