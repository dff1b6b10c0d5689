//! Hearing what changed in the store (`LISTEN/NOTIFY`) instead of asking.
//!
//! The schema's trigger (migration 3) notifies `dsh_queued` when a run is
//! submitted, `dsh_cancel` when a cancel is asked for, `dsh_settled` when
//! a run has a result, each with the run's id. A [`Listener`] owns a
//! connection of its own that listens on the channels it was given and
//! passes each notice on. A notice is a wake-up, not a record: one sent
//! while the connection was down is lost, so when the connection breaks
//! the listener opens it again, listens again and passes on
//! [`Notice::Resumed`] — the caller then looks for itself, as it does
//! every so often anyway.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::{StoreError, StoreUrl};

/// How long to wait before connecting again after a connection broke.
const AGAIN: Duration = Duration::from_millis(250);

/// What a [`Listener`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A notice on `channel` about run `id`.
    Run {
        /// The channel (`dsh_queued`, `dsh_cancel`, `dsh_settled`).
        channel: String,
        /// The run's id.
        id: String,
    },
    /// The connection broke and is back: notices may have been missed.
    Resumed,
}

/// Notices from the store on some channels, as they come (see the module
/// docs). Dropping it ends its task and its connection.
pub struct Listener {
    rx: mpsc::Receiver<Notice>,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Listens on `channels` of the store at `url`; fails if the first
    /// connection cannot be made.
    pub(crate) async fn start(url: &StoreUrl, channels: &[&str]) -> Result<Listener, StoreError> {
        let sql: String = channels.iter().map(|c| format!("LISTEN {c};")).collect();
        // Bounded: a caller that stops reading loses wake-ups, not memory
        // (a full queue already says "look").
        let (tx, rx) = mpsc::channel(256);
        let first = listen_once(url, &sql, tx.clone()).await?;
        let url = url.clone();
        let task = tokio::spawn(async move {
            let mut running = first;
            loop {
                // Ends when the connection does (or the listener is gone);
                // the client lives as long as its connection is driven.
                let (_client, driving) = &mut running;
                let _ = driving.await;
                if tx.is_closed() {
                    return;
                }
                running = loop {
                    tokio::time::sleep(AGAIN).await;
                    match listen_once(&url, &sql, tx.clone()).await {
                        Ok(r) => break r,
                        Err(e) => tracing::debug!("listening again: {e}"),
                    }
                };
                if tx.send(Notice::Resumed).await.is_err() {
                    return;
                }
            }
        });
        Ok(Listener { rx, task })
    }

    /// The next notice; `None` once the listener has stopped for good.
    pub async fn next(&mut self) -> Option<Notice> {
        self.rx.recv().await
    }

    /// A notice already here, without waiting: a caller that woke for one
    /// takes those that came with it, and acts once for them all.
    pub fn ready(&mut self) -> Option<Notice> {
        self.rx.try_recv().ok()
    }
}

/// Connects, starts passing notices to `tx`, and listens (`sql`): the
/// client, and the task that drives its connection and ends with it.
async fn listen_once(
    url: &StoreUrl,
    sql: &str,
    tx: mpsc::Sender<Notice>,
) -> Result<(Client, JoinHandle<()>), StoreError> {
    let (client, mut connection) = url
        .config()
        .connect(NoTls)
        .await
        .map_err(|e| StoreError::Db(format!("cannot connect to {url}: {e}")))?;
    let task = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let notice = Notice::Run {
                        channel: n.channel().to_string(),
                        id: n.payload().to_string(),
                    };
                    // A full queue: the caller looks anyway.
                    if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(notice) {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("store listener connection ended: {e}");
                    return;
                }
            }
        }
    });
    client.batch_execute(sql).await?;
    Ok((client, task))
}
