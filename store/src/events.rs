//! A run's events in the store (`dsh_events`), as the run directory keeps
//! them in `events.jsonl`: the same JSON lines, in order, after an
//! earlier attempt's, within the journal's size limit — so a report of a
//! stored run has its logs.
//!
//! One task per run with a connection of its own takes every event that
//! has come since its last insert and writes them in one statement, fenced
//! by the run's claim and riding out a broken connection as the journal
//! does (`lines.rs`). A write that fails for good stops it (the run goes
//! on; the caller says it once), as the events file's first write error
//! does.

use dsh_engine::events::EventStream;
use dsh_engine::events_file::Written;

use crate::StoreUrl;
use crate::lines::{Appender, Table};

/// Keeps `events` of run `id`, held under claim `fence` (see the module
/// docs).
pub(crate) async fn keep(
    url: &StoreUrl,
    id: &str,
    fence: Option<i32>,
    mut events: EventStream,
    limit: u64,
) -> Written {
    let mut written = Written::default();
    let (mut appender, mut size) = match Appender::open(url, id, fence, Table::Events).await {
        Ok(opened) => opened,
        Err(e) => {
            written.error = Some(std::io::Error::other(e.to_string()));
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
        if let Err(why) = appender.append(&lines).await {
            written.error = Some(std::io::Error::other(why));
            break;
        }
        if written.capped {
            break;
        }
    }
    written.dropped = events.dropped();
    written
}
