//! The fork server runs share: workers forked from one
//! `dsh __worker --fork-server` are the host's own children (not the
//! server's), one per run, each in a process group of its own, with
//! nothing of the host's environment and the run's sandbox; many runs at
//! once all complete; a dead server means spawned workers, not failed
//! runs, a stalled one delays one start and is killed, and a child forked
//! by a server that died before answering is reaped; the server ends with
//! the last run.

// A test stops with a message where something it set up fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::lib::{limits, meta, result};
use common::{DSH, assert_process_gone_async, process_alive};
use dsh_orchestrator::providers::scripted::ScriptedProvider;
use dsh_orchestrator::{StartRequest, StopReason, WorkerCommand, start};
use serde_json::json;

/// A run of `worker` whose agent calls are answered `echoed` (or hang,
/// for the label `hang`).
fn request(script: &str, worker: &WorkerCommand) -> StartRequest {
    let fixture = common::fixture(json!([
        { "match": { "label": "hang" }, "hang": true },
        { "match": {}, "text": "echoed" }
    ]));
    StartRequest::new("fork.ts", script)
        .with_meta(meta())
        .with_limits(limits())
        .with_worker(worker.clone())
        .with_provider(Arc::new(
            ScriptedProvider::from_json_text("fork.json", &fixture.to_string()).expect("fixture"),
        ))
}

/// `/proc/PID/<file>` as text.
fn proc_text(pid: u32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default()
}

/// (parent pid, process group id) from `/proc/PID/stat`.
fn parent_and_group(pid: u32) -> (u32, u32) {
    let (_, ppid, pgrp) = common::proc_stat(pid).expect("the worker's stat");
    (ppid, pgrp)
}

/// A stock worker command of the test's own that sets the worker's
/// testing `switches` (`DSH_WORKER_TESTING`): a script named `dsh-worker`
/// in `dir` that execs `dsh __worker`. Its name makes it stock, so its
/// runs share a fork server, and the script is what the server runs too.
fn own_testing_command(dir: &tempfile::TempDir, switches: &str) -> WorkerCommand {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join("dsh-worker");
    std::fs::write(
        &path,
        format!("#!/bin/sh\nDSH_WORKER_TESTING={switches} exec '{DSH}' __worker \"$@\"\n"),
    )
    .expect("the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cmd = WorkerCommand::new(path);
    assert!(cmd.is_stock());
    cmd
}

/// A run of `worker` started while another is live, so that it forks from
/// the shared server: the first run (held) and the server's pid.
async fn with_a_shared_server(worker: &WorkerCommand) -> (dsh_orchestrator::WorkflowRun, u32) {
    let first = start_held(held(worker)).await;
    let second = start_held(held(worker)).await;
    let servers = fork_servers(worker, &[first.worker_pid(), second.worker_pid()]);
    assert_eq!(servers.len(), 1, "one shared server: {servers:?}");
    end_all(&[second]).await;
    (first, servers[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_worker_is_the_hosts_own_child_and_confined() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = own_command(&dir);
    let first = start_held(held(&worker)).await;
    let run = start(request(
        "return await agent(\"x\", { label: \"hang\" });",
        &worker,
    ))
    .expect("start");
    let mut events = run.subscribe();
    common::lib::wait_for(&mut events, "agent-start", |e| {
        e["type"] == "workflow/agent-start"
    })
    .await;
    let worker_pid = run.worker_pid();
    let servers = fork_servers(&worker, &[first.worker_pid(), worker_pid]);
    assert_eq!(servers.len(), 1, "one shared server: {servers:?}");
    assert_ne!(worker_pid, servers[0]);
    assert_eq!(
        proc_text(worker_pid, "comm").trim(),
        "dsh-worker",
        "forked by the server, not spawned"
    );
    let (ppid, pgrp) = parent_and_group(worker_pid);
    assert_eq!(
        ppid,
        std::process::id(),
        "the host's child, not the server's"
    );
    assert_eq!(pgrp, worker_pid, "a process group of its own");
    let environ = std::fs::read(format!("/proc/{worker_pid}/environ")).unwrap_or_default();
    assert!(
        environ.iter().all(|b| *b == 0),
        "an empty environment: {:?}",
        String::from_utf8_lossy(&environ)
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{worker_pid}/cwd")).expect("cwd"),
        std::path::PathBuf::from("/")
    );
    let status = proc_text(worker_pid, "status");
    assert!(status.contains("NoNewPrivs:\t1"), "sandboxed: {status}");

    run.cancel("done looking");
    let r = result(&run).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    run.dispose().await;
    assert_process_gone_async(worker_pid).await;
    assert!(
        process_alive(servers[0]),
        "the server outlives the run while another is live"
    );
    end_all(&[first]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_at_once_each_get_a_fresh_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = own_command(&dir);
    let runs: Vec<_> = (0..24)
        .map(|i| {
            start(request(
                &format!("return (await agent(\"n{i}\")) + {i};"),
                &worker,
            ))
        })
        .collect::<Result<_, _>>()
        .expect("start");
    let mut pids = std::collections::BTreeSet::new();
    let mut forked = 0;
    for (i, run) in runs.iter().enumerate() {
        if proc_text(run.worker_pid(), "comm").trim() == "dsh-worker" {
            forked += 1;
        }
        let r = result(run).await;
        assert_eq!(r.value, json!(format!("echoed{i}")), "run {i}");
        pids.insert(run.worker_pid());
    }
    assert_eq!(pids.len(), runs.len(), "one worker per run: {pids:?}");
    assert!(forked > 0, "the burst forked from the shared server");
    for run in &runs {
        run.dispose().await;
    }
    for pid in pids {
        assert_process_gone_async(pid).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_means_spawned_workers_not_failed_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = own_command(&dir);
    let (first, server_pid) = with_a_shared_server(&worker).await;
    // SAFETY: plain syscall on the server this test's runs started.
    unsafe { libc::kill(server_pid.cast_signed(), libc::SIGKILL) };
    assert_process_gone_async(server_pid).await;
    let run = start(request("return await agent(\"x\");", &worker)).expect("start");
    let worker_pid = run.worker_pid();
    let r = result(&run).await;
    assert_eq!(r.value, json!("echoed"));
    assert_ne!(
        proc_text(worker_pid, "comm").trim(),
        "dsh-worker",
        "a spawned worker (its comm is the program's name)"
    );
    run.dispose().await;
    end_all(&[first]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_delays_one_start_and_is_then_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = own_command(&dir);
    let (first, server_pid) = with_a_shared_server(&worker).await;
    // SAFETY: plain syscall on the server this test's runs started.
    unsafe { libc::kill(server_pid.cast_signed(), libc::SIGSTOP) };
    // The request goes unanswered (the server's 5 s bound), then the run
    // spawns its worker; the stopped server is killed, not left behind.
    let run = start(request("return await agent(\"x\");", &worker)).expect("start");
    let r = result(&run).await;
    assert_eq!(r.value, json!("echoed"));
    run.dispose().await;
    assert_process_gone_async(server_pid).await;
    // And the next run does not ask it again: it starts at once.
    let t = std::time::Instant::now();
    let run = start(request("return await agent(\"y\");", &worker)).expect("start");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(4),
        "asked the stalled server again"
    );
    assert_eq!(result(&run).await.value, json!("echoed"));
    run.dispose().await;
    end_all(&[first]).await;
}

/// Zombie children of this process whose name is `dsh-worker` (forked
/// workers), from /proc.
fn zombie_forked_workers() -> Vec<u32> {
    let me = std::process::id();
    common::all_pids()
        .into_iter()
        .filter(|pid| {
            proc_text(*pid, "comm").trim() == "dsh-worker"
                && common::proc_stat(*pid)
                    .is_some_and(|(state, ppid, _)| state == 'Z' && ppid == me)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_forked_by_a_server_that_died_before_answering_is_reaped() {
    // The server forks, then exits without the pid: the child is this
    // process's (CLONE_PARENT), and only its Hello can name it.
    let dir = tempfile::tempdir().expect("tempdir");
    let dying = own_testing_command(&dir, "server-dies-after-fork");
    let first = start_held(held(&dying)).await;
    let run = start(request("return await agent(\"x\");", &dying)).expect("start");
    assert_eq!(
        result(&run).await.value,
        json!("echoed"),
        "a spawned worker"
    );
    assert_ne!(
        proc_text(run.worker_pid(), "comm").trim(),
        "dsh-worker",
        "spawned, not forked"
    );
    run.dispose().await;
    end_all(&[first]).await;
    // Other tests' workers are zombies for a moment too; a leaked one
    // stays one for good.
    let deadline = std::time::Instant::now() + common::WAIT_BOUND;
    while !zombie_forked_workers().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "forked workers left unreaped: {:?}",
            zombie_forked_workers()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

// ------------------------------------------------------------ the shared server

/// A stock worker command of the test's own: `dsh __worker` through a
/// symlink in `dir`. The sharing is per worker command, so the runs of
/// other tests in this binary never join this test's server.
fn own_command(dir: &tempfile::TempDir) -> WorkerCommand {
    let link = dir.path().join("dsh");
    std::os::unix::fs::symlink(DSH, &link).expect("a symlink to dsh");
    WorkerCommand::dsh(link)
}

/// A run of `worker` that brings no worker of its own: its agent hangs
/// until the run is cancelled.
fn held(worker: &WorkerCommand) -> StartRequest {
    let fixture = common::fixture(json!([{ "match": {}, "hang": true }]));
    StartRequest::new("shared.ts", "return await agent(\"x\");")
        .with_meta(meta())
        .with_limits(limits())
        .with_worker(worker.clone())
        .with_provider(Arc::new(
            ScriptedProvider::from_json_text("shared.json", &fixture.to_string()).expect("fixture"),
        ))
}

/// Starts `req` and waits until its agent call is under way (the worker
/// is up and the run is live).
async fn start_held(req: StartRequest) -> dsh_orchestrator::WorkflowRun {
    let run = start(req).expect("start");
    let mut events = run.subscribe();
    common::lib::wait_for(&mut events, "agent-start", |e| {
        e["type"] == "workflow/agent-start"
    })
    .await;
    run
}

/// This process's live children started as `worker`'s fork server, other
/// than `not` (a forked worker's command line is its server's).
fn fork_servers(worker: &WorkerCommand, not: &[u32]) -> Vec<u32> {
    common::children_of(std::process::id())
        .into_iter()
        .filter(|pid| !not.contains(pid))
        .filter(|pid| {
            let cmdline = proc_text(*pid, "cmdline");
            let argv: Vec<&str> = cmdline.split('\0').collect();
            argv.first() == Some(&worker.program.to_str().expect("a UTF-8 path"))
                && argv.contains(&"--fork-server")
        })
        .collect()
}

async fn end_all(runs: &[dsh_orchestrator::WorkflowRun]) {
    for run in runs {
        run.cancel("done looking");
    }
    for run in runs {
        assert_eq!(result(run).await.stop_reason, StopReason::Cancelled);
        run.dispose().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_runs_fork_from_one_shared_server_that_ends_with_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = own_command(&dir);
    // Alone: spawned, and no server started for it.
    let first = start_held(held(&worker)).await;
    assert_eq!(
        proc_text(first.worker_pid(), "comm").trim(),
        "dsh",
        "spawned"
    );
    assert_eq!(
        fork_servers(&worker, &[first.worker_pid()]),
        Vec::<u32>::new()
    );
    // Not alone: forked, the host's own child, from one server.
    let second = start_held(held(&worker)).await;
    let third = start_held(held(&worker)).await;
    let runs = [first, second, third];
    let pids: Vec<u32> = runs.iter().map(|r| r.worker_pid()).collect();
    for pid in &pids[1..] {
        assert_eq!(proc_text(*pid, "comm").trim(), "dsh-worker", "forked");
        let (ppid, pgrp) = parent_and_group(*pid);
        assert_eq!(ppid, std::process::id(), "the host's child");
        assert_eq!(pgrp, *pid, "a process group of its own");
    }
    let servers = fork_servers(&worker, &pids);
    assert_eq!(servers.len(), 1, "one server for both: {servers:?}");
    // Ended together, as a burst's last runs are: whichever releases last
    // ends the server, and it is gone before that run's dispose() returns.
    let ends: Vec<_> = runs
        .into_iter()
        .map(|run| {
            tokio::spawn(async move {
                run.cancel("done looking");
                assert_eq!(result(&run).await.stop_reason, StopReason::Cancelled);
                run.dispose().await;
            })
        })
        .collect();
    for end in ends {
        end.await.expect("a run ended");
    }
    for pid in pids {
        assert_process_gone_async(pid).await;
    }
    assert!(
        !process_alive(servers[0]),
        "the shared server outlived its runs"
    );
    // And the next lone run spawns again.
    let lone = start_held(held(&worker)).await;
    assert_eq!(
        proc_text(lone.worker_pid(), "comm").trim(),
        "dsh",
        "spawned"
    );
    end_all(&[lone]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_and_a_command_with_extra_arguments_spawn_every_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = own_command(&dir);
    let first = start_held(held(&worker)).await;
    let never = start_held(
        held(&worker).with_worker_source(dsh_orchestrator::WorkerSource::Spawn(worker.clone())),
    )
    .await;
    // Extra arguments: the program may not serve --fork-server.
    let custom = WorkerCommand {
        program: worker.program.clone(),
        args: vec!["__worker".into(), "--fd".into(), "0".into()],
    };
    assert!(!custom.is_stock());
    let custom_first = start_held(held(&custom)).await;
    let custom_second = start_held(held(&custom)).await;
    let runs = [first, never, custom_first, custom_second];
    let pids: Vec<u32> = runs.iter().map(|r| r.worker_pid()).collect();
    for pid in &pids {
        assert_eq!(proc_text(*pid, "comm").trim(), "dsh", "spawned");
    }
    assert_eq!(fork_servers(&worker, &pids), Vec::<u32>::new());
    end_all(&runs).await;
}
