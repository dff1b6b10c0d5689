//! A run's events in the store (`dsh_events`), as the run directory keeps
//! them in `events.jsonl`: the same JSON lines, in order, after an
//! earlier attempt's, within the journal's size limit — so a report of a
//! stored run has its logs.
//!
//! One task per run with a connection of its own takes every event that
//! has come since its last insert and writes them in one statement. The
//! first error stops it (the run goes on; the caller says it once), as the
//! events file's first write error does.

use dsh_engine::events::EventStream;
use dsh_engine::events_file::Written;

use crate::{StoreError, StoreUrl, connect};

/// Keeps `events` of run `id` (see the module docs).
pub(crate) async fn keep(url: &StoreUrl, id: &str, mut events: EventStream, limit: u64) -> Written {
    let mut written = Written::default();
    let fail = |e: StoreError| Some(std::io::Error::other(e.to_string()));
    let client = match connect(url).await {
        Ok(c) => c,
        Err(e) => {
            written.error = fail(e);
            return written;
        }
    };
    let (mut next, mut size) = match client
        .query_one(
            "SELECT coalesce(max(seq), 0), coalesce(sum(octet_length(event)), 0)::bigint
             FROM dsh_events WHERE run_id = $1",
            &[&id],
        )
        .await
    {
        Ok(row) => (
            row.get::<_, i64>(0) + 1,
            u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
        ),
        Err(e) => {
            written.error = fail(e.into());
            return written;
        }
    };
    while let Some(first) = events.next().await {
        let mut batch = vec![first.to_json().to_string()];
        // Whatever else has come meanwhile goes in the same statement.
        loop {
            tokio::select! {
                biased;
                Some(ev) = events.next() => batch.push(ev.to_json().to_string()),
                () = std::future::ready(()) => break,
            }
        }
        let mut lines = Vec::with_capacity(batch.len());
        for line in batch {
            let len = line.len() as u64 + 1;
            if size.saturating_add(len) > limit {
                written.capped = true;
                break;
            }
            size += len;
            lines.push(line);
        }
        if !lines.is_empty() {
            let seqs: Vec<i64> = (next..next + lines.len() as i64).collect();
            if let Err(e) = client
                .execute(
                    "INSERT INTO dsh_events (run_id, seq, event)
                     SELECT $1, s, e FROM unnest($2::bigint[], $3::text[]) AS t(s, e)",
                    &[&id, &seqs, &lines],
                )
                .await
            {
                written.error = fail(e.into());
                break;
            }
            next += lines.len() as i64;
        }
        if written.capped {
            break;
        }
    }
    written.dropped = events.dropped();
    written
}
