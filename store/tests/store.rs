//! The store against a real PostgreSQL (see `pg/mod.rs` for where it comes
//! from): the schema, the runs table, and the journal as the layer uses it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use dsh_journal::{JournalStore, Line};
use dsh_store::{Store, StoreError, StoreUrl, migrate};
use serde_json::json;

async fn store() -> Option<(Store, String)> {
    let url = pg::database().await?;
    let parsed = StoreUrl::parse(&url, |_| None).expect("test URL");
    Some((Store::open(&parsed).await.expect("open the store"), url))
}

fn attempt(n: u32) -> Line {
    Line::Attempt {
        attempt: n,
        pid: 1,
        at: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_migrates_once_and_hosts_opening_together_agree() {
    let Some(url) = pg::database().await else {
        return;
    };
    let parsed = StoreUrl::parse(&url, |_| None).expect("test URL");
    // Eight hosts open a fresh store at once: one migrates, the others wait
    // for its lock and find the schema done.
    let opened = futures_join(
        (0..8)
            .map(|_| {
                let p = parsed.clone();
                tokio::spawn(async move { Store::open(&p).await.map(|_| ()) })
            })
            .collect(),
    )
    .await;
    assert!(opened.iter().all(Result::is_ok), "{opened:?}");
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let versions: Vec<i32> = client
        .query("SELECT version FROM dsh_schema ORDER BY version", &[])
        .await
        .expect("schema")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=migrate::latest()).collect::<Vec<_>>());
    // A schema newer than this dsh knows is refused, not written to.
    client
        .execute(
            "INSERT INTO dsh_schema (version, name) VALUES ($1, 'from the future')",
            &[&(migrate::latest() + 1)],
        )
        .await
        .expect("insert");
    let err = Store::open(&parsed).await.expect_err("refused");
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
    assert!(err.to_string().contains("upgrade dsh"), "{err}");
}

async fn futures_join(
    handles: Vec<tokio::task::JoinHandle<Result<(), StoreError>>>,
) -> Vec<Result<(), String>> {
    let mut out = Vec::new();
    for h in handles {
        out.push(match h.await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_its_journal_and_its_result_are_kept_in_order() {
    let Some((store, _)) = store().await else {
        return;
    };
    let info = json!({"version": 1, "id": "run-a", "name": "wf"});
    store
        .create_run("run-a", &info, "return 1")
        .await
        .expect("create");
    let journal = store.journal("run-a").await.expect("journal");
    journal.append(&attempt(1));
    assert!(journal.append_durable(&attempt(2)).await);
    // Many lines queued at once go in order, however they are batched.
    for n in 3..=200 {
        journal.append(&attempt(n));
    }
    journal.sync().await;
    let text = store.journal_text("run-a").await.expect("read");
    let expected: String = (1..=200).map(|n| attempt(n).to_text()).collect();
    assert_eq!(text, expected);
    assert_eq!(journal.bytes(), expected.len() as u64);

    // The size limit counts what is queued.
    let full = journal.append_within("x\n".into(), journal.bytes());
    assert!(full.is_err());

    // A second attempt appends after the first's lines.
    drop(journal);
    let again = store.journal("run-a").await.expect("journal");
    assert_eq!(again.bytes(), expected.len() as u64);
    assert!(again.append_durable(&attempt(201)).await);
    let text = store.journal_text("run-a").await.expect("read");
    assert!(text.ends_with(&attempt(201).to_text()), "{text}");

    store
        .set_result("run-a", 2, &json!({"result": {"stopReason": "completed"}}))
        .await
        .expect("result");
    let runs = store.runs(10).await.expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].id, "run-a");
    assert_eq!(runs[0].attempt, 2);
    assert_eq!(runs[0].info["name"], "wf");
    assert_eq!(
        runs[0]
            .result
            .as_ref()
            .map(|r| r["result"]["stopReason"].clone()),
        Some(json!("completed"))
    );
}

/// The server goes away under a journal (its connection terminated, as a
/// restart does): the writer connects again and nothing is lost or
/// written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_loses_no_line() {
    let Some((store, url)) = store().await else {
        return;
    };
    store
        .create_run("run-b", &json!({}), "")
        .await
        .expect("create");
    let journal = store.journal("run-b").await.expect("journal");
    assert!(journal.append_durable(&attempt(1)).await);
    // Every other session of this database: the journal's and the store's.
    assert!(pg::terminate_sessions(&url).await > 0);
    for n in 2..=20 {
        assert!(journal.append_durable(&attempt(n)).await, "line {n}");
    }
    let rows = pg::query(
        &url,
        "SELECT count(*) FROM dsh_journal WHERE run_id = 'run-b'",
    )
    .await;
    assert_eq!(rows[0].get::<_, i64>(0), 20);
}

/// Two writers on one run's journal (a second process resumed the run
/// while the first still ran): the one that finds its places taken stops
/// and says its lines were not kept; nothing of the other is overwritten
/// or interleaved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_on_one_journal_is_stopped_not_interleaved() {
    let Some((store, _)) = store().await else {
        return;
    };
    store
        .create_run("run-c", &json!({}), "")
        .await
        .expect("create");
    let first = store.journal("run-c").await.expect("journal");
    let second = store.journal("run-c").await.expect("journal");
    assert!(first.append_durable(&attempt(1)).await);
    // The second writer starts from the same place and finds it taken.
    assert!(!second.append_durable(&attempt(99)).await);
    assert!(
        !second.append_durable(&attempt(100)).await,
        "it stays stopped"
    );
    assert!(first.append_durable(&attempt(2)).await);
    let text = store.journal_text("run-c").await.expect("read");
    assert_eq!(
        text,
        format!("{}{}", attempt(1).to_text(), attempt(2).to_text())
    );
}

/// A process that lost its hold on a run and settles it late never
/// overwrites the result of the later attempt that took the run over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_settle_of_an_earlier_attempt_is_refused() {
    let Some((store, _)) = store().await else {
        return;
    };
    store
        .create_run("run-d", &json!({}), "")
        .await
        .expect("create");
    store
        .set_result("run-d", 2, &json!({"by": "the second host"}))
        .await
        .expect("the later attempt settles");
    let late = store
        .set_result("run-d", 1, &json!({"by": "the first host"}))
        .await
        .expect_err("refused");
    assert!(late.to_string().contains("a later attempt"), "{late}");
    let runs = store.runs(10).await.expect("runs");
    assert_eq!(runs[0].result, Some(json!({"by": "the second host"})));
    assert_eq!(runs[0].attempt, 2);
}

async fn open_another(url: &str) -> Store {
    let parsed = StoreUrl::parse(url, |_| None).expect("test URL");
    Store::open(&parsed).await.expect("open the store")
}

/// A host whose lease passed (paused, cut off) loses the run to the next
/// claim: its journal lines, its result and its heartbeat are refused
/// from then on, and the new holder's stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_fences_the_writes_of_the_claim_before_it() {
    let Some((first, url)) = store().await else {
        return;
    };
    let second = open_another(&url).await;
    first
        .submit("run-f", &json!({}), "", &json!({}))
        .await
        .expect("submit");
    let lease = std::time::Duration::from_millis(300);
    let one = first
        .claim("one", lease)
        .await
        .expect("claim")
        .expect("a run");
    assert_eq!((one.id.as_str(), one.claims), ("run-f", 1));
    // Held under a current lease: nobody else may claim it.
    assert!(second.claim("two", lease).await.expect("claim").is_none());
    let stale = first.journal("run-f").await.expect("journal");
    assert!(stale.append_durable(&attempt(1)).await);

    // The lease passes without a heartbeat: the run is claimable again.
    let two = loop {
        if let Some(c) = second.claim("two", lease).await.expect("claim") {
            break c;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(two.claims, 2);
    let fresh = second.journal("run-f").await.expect("journal");
    assert!(fresh.append_durable(&attempt(2)).await);

    // The first host's writes under claim 1 are refused from now on.
    assert!(!stale.append_durable(&attempt(99)).await);
    let late = first
        .set_result("run-f", 1, &json!({"by": "one"}))
        .await
        .expect_err("refused");
    assert!(
        late.to_string().contains("another host claimed it"),
        "{late}"
    );
    let renewal = first.renew("one", lease).await.expect("renew");
    assert_eq!(renewal.lost, vec!["run-f".to_string()]);
    // The second host's heartbeat keeps it, and hears of a cancel.
    second
        .request_cancel("run-f", "stop")
        .await
        .expect("cancel");
    let renewal = second.renew("two", lease).await.expect("renew");
    assert!(renewal.lost.is_empty());
    assert_eq!(renewal.cancels, vec![("run-f".into(), "stop".into())]);
    second
        .set_result("run-f", 1, &json!({"by": "two"}))
        .await
        .expect("the holder settles");
    let text = second.journal_text("run-f").await.expect("read");
    assert_eq!(
        text,
        format!("{}{}", attempt(1).to_text(), attempt(2).to_text())
    );
    assert_eq!(
        second.result("run-f").await.expect("result"),
        Some(json!({"by": "two"}))
    );
}

/// Hosts claiming together take each run once (`SKIP LOCKED`), and none
/// waits for another's claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_claiming_together_take_each_run_once() {
    let Some((store, url)) = store().await else {
        return;
    };
    for n in 0..40 {
        store
            .submit(&format!("run-{n:02}"), &json!({}), "", &json!({}))
            .await
            .expect("submit");
    }
    let mut hosts = Vec::new();
    for h in 0..4 {
        let url = url.clone();
        hosts.push(tokio::spawn(async move {
            let store = open_another(&url).await;
            let mut mine = Vec::new();
            while let Some(c) = store
                .claim(&format!("h{h}"), std::time::Duration::from_secs(60))
                .await
                .expect("claim")
            {
                mine.push(c.id);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for h in hosts {
        all.extend(h.await.expect("a host"));
    }
    all.sort();
    let expected: Vec<String> = (0..40).map(|n| format!("run-{n:02}")).collect();
    assert_eq!(all, expected);
}

/// A listener hears submits, cancels and results, and says when its
/// connection came back (notices may have been missed meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_what_changed_and_when_it_was_away() {
    use dsh_store::Notice;
    let Some((store, url)) = store().await else {
        return;
    };
    let mut listener = store
        .listen(&["dsh_queued", "dsh_cancel", "dsh_settled"])
        .await
        .expect("listen");
    let heard = |channel: &str| Notice::Run {
        channel: channel.into(),
        id: "run-l".into(),
    };
    store
        .submit("run-l", &json!({}), "", &json!({}))
        .await
        .expect("submit");
    assert_eq!(listener.next().await, Some(heard("dsh_queued")));
    store.request_cancel("run-l", "why").await.expect("cancel");
    assert_eq!(listener.next().await, Some(heard("dsh_cancel")));
    store
        .set_result("run-l", 1, &json!({}))
        .await
        .expect("result");
    assert_eq!(listener.next().await, Some(heard("dsh_settled")));

    assert!(pg::terminate_sessions(&url).await > 0);
    assert_eq!(listener.next().await, Some(Notice::Resumed));
    // The store's own connection comes back too.
    store
        .submit("run-m", &json!({}), "", &json!({}))
        .await
        .expect("submit after the cut");
    assert_eq!(
        listener.next().await,
        Some(Notice::Run {
            channel: "dsh_queued".into(),
            id: "run-m".into()
        })
    );
}
