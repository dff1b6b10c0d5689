//! Appending a run's lines — its journal or its events — to their table,
//! fenced by the claim the run is held under.
//!
//! Both tables are `(run_id, seq, text)`. An [`Appender`] owns a
//! connection of its own, numbers the lines after those the table has, and
//! inserts a batch in one statement that first takes a share lock on the
//! run's row where `claims` is still this process's claim: a host that
//! claimed the run since (this one was paused or cut off past its lease)
//! has bumped `claims`, and the insert writes nothing. The lock makes the
//! check and the insert one step against a claim being taken meanwhile.
//!
//! A connection that breaks is opened again and the batch written again
//! (the primary key makes a repeat a no-op), [`TRIES`] times with a
//! doubling wait — a database restart is ridden out.

use std::time::Duration;

use tokio_postgres::Client;

use crate::{StoreError, StoreUrl, connect};

/// How often a batch is tried before the store is given up for this run,
/// and how long to wait between tries (doubling): about 8 s in all.
const TRIES: u32 = 6;
const FIRST_WAIT: Duration = Duration::from_millis(250);

/// Which of a run's line tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    /// `dsh_journal`: the call journal's lines.
    Journal,
    /// `dsh_events`: the run's events.
    Events,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Journal => "journal",
            Table::Events => "events",
        }
    }

    /// The table and its text column.
    fn table_and_column(self) -> (&'static str, &'static str) {
        match self {
            Table::Journal => ("dsh_journal", "line"),
            Table::Events => ("dsh_events", "event"),
        }
    }

    /// What the table already has for `$1`: its last seq and its bytes (a
    /// journal line keeps its newline; an event's is counted here).
    fn tail_sql(self) -> String {
        let (table, column) = self.table_and_column();
        let newline = if self == Table::Events { " + 1" } else { "" };
        format!(
            "SELECT coalesce(max(seq), 0), coalesce(sum(octet_length({column}){newline}), 0)::bigint
             FROM {table} WHERE run_id = $1"
        )
    }

    /// Inserts `$3` at seqs `$2` of run `$1` while its claim is `$4`
    /// (`NULL`: unfenced).
    fn insert_sql(self) -> String {
        let (table, column) = self.table_and_column();
        format!(
            "WITH fence AS (
                 SELECT 1 FROM dsh_runs WHERE id = $1 AND ($4::integer IS NULL OR claims = $4)
                 FOR SHARE)
             INSERT INTO {table} (run_id, seq, {column})
             SELECT $1, s, l FROM fence, unnest($2::bigint[], $3::text[]) AS t(s, l)
             ON CONFLICT (run_id, seq) DO NOTHING"
        )
    }
}

/// Appends to one run's lines in one table (see the module docs).
pub(crate) struct Appender {
    url: StoreUrl,
    client: Option<Client>,
    run_id: String,
    fence: Option<i32>,
    table: Table,
    insert: String,
    next_seq: i64,
}

impl Appender {
    /// Opens an appender after the lines run `run_id` has in `table`;
    /// also returns their size in bytes as their file would have them (a
    /// journal line keeps its newline; an event's is counted).
    pub(crate) async fn open(
        url: &StoreUrl,
        run_id: &str,
        fence: Option<i32>,
        table: Table,
    ) -> Result<(Appender, u64), StoreError> {
        let client = connect(url).await?;
        let row = client.query_one(&table.tail_sql(), &[&run_id]).await?;
        let last: i64 = row.get(0);
        let bytes = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
        Ok((
            Appender {
                url: url.clone(),
                client: Some(client),
                run_id: run_id.to_string(),
                fence,
                table,
                insert: table.insert_sql(),
                next_seq: last + 1,
            },
            bytes,
        ))
    }

    /// Writes `lines` after the ones written so far; why not, when they
    /// were not (the run was claimed by another, or the store stayed
    /// unreachable).
    pub(crate) async fn append(&mut self, lines: &[String]) -> Result<(), String> {
        if lines.is_empty() {
            return Ok(());
        }
        let count = lines.len() as i64;
        let seqs: Vec<i64> = (self.next_seq..self.next_seq + count).collect();
        let mut wait = FIRST_WAIT;
        let mut last_error = String::new();
        for try_ in 0..TRIES {
            if self.client.as_ref().is_none_or(Client::is_closed) {
                self.client = connect(&self.url).await.ok();
            }
            if let Some(client) = &self.client {
                match client
                    .execute(
                        self.insert.as_str(),
                        &[&self.run_id, &seqs, &lines, &self.fence],
                    )
                    .await
                {
                    Ok(written) if written == count as u64 => {
                        self.next_seq += count;
                        return Ok(());
                    }
                    // Fewer rows than lines: the fence held no more, or
                    // another process wrote these places (it resumed the
                    // run while this one still ran). Its lines stand. On a
                    // later try, the missing rows may be this appender's
                    // own commit whose answer was lost with the
                    // connection — when the fence still holds.
                    Ok(_) => match self.still_fenced(client).await {
                        Ok(true) if try_ > 0 => {
                            self.next_seq += count;
                            return Ok(());
                        }
                        Ok(true) => {
                            return Err(format!(
                                "another process wrote run {}'s {} at line {}",
                                self.run_id,
                                self.table.name(),
                                self.next_seq
                            ));
                        }
                        Ok(false) => {
                            return Err(format!(
                                "run {} was claimed by another host (this one was paused or cut \
                                 off past its lease); that host's writes stand",
                                self.run_id
                            ));
                        }
                        Err(e) => last_error = e.to_string(),
                    },
                    Err(e) => last_error = StoreError::from(e).to_string(),
                }
            } else {
                last_error = format!("cannot connect to {}", self.url);
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        Err(last_error)
    }

    /// Whether the run's claim is still this appender's.
    async fn still_fenced(&self, client: &Client) -> Result<bool, StoreError> {
        let Some(fence) = self.fence else {
            return Ok(true);
        };
        let claims: Option<i32> = client
            .query_opt("SELECT claims FROM dsh_runs WHERE id = $1", &[&self.run_id])
            .await?
            .map(|r| r.get(0));
        Ok(claims == Some(fence))
    }
}
