//! The store's schema, versioned: each migration runs once, in order, in
//! one transaction under an advisory lock, so hosts that start together
//! never apply one twice; a database whose schema is newer than this dsh
//! knows is refused rather than written to.
//!
//! Hand-written (about 40 lines) rather than `refinery` or `sqlx`'s
//! migrator: those bring their own client (or a second one) and their own
//! table conventions for what is here one `SELECT max(version)` and a loop
//! (docs/dependencies.md).

use tokio_postgres::Client;

use crate::StoreError;

/// The migrations, in order: (version, name, SQL).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "runs, journal, events",
        include_str!("../migrations/0001_runs_journal_events.sql"),
    ),
    (
        2,
        "runs submitted to hosts",
        include_str!("../migrations/0002_queue.sql"),
    ),
    (
        3,
        "leases, fencing and wake-ups",
        include_str!("../migrations/0003_leases.sql"),
    ),
    (
        4,
        "agent calls answered by agent hosts",
        include_str!("../migrations/0004_calls.sql"),
    ),
];

/// The advisory lock every migrating host takes (an arbitrary constant:
/// `dsh` in ASCII).
const LOCK: i64 = 0x0064_7368;

/// The newest schema version this dsh knows.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Brings the database's schema to [`latest`]; returns the version it had.
pub async fn migrate(client: &mut Client) -> Result<i32, StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS dsh_schema (
            version integer PRIMARY KEY,
            name text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await?;
    let found: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM dsh_schema", &[])
        .await?
        .get(0);
    if found > latest() {
        return Err(StoreError::NewerSchema {
            found,
            known: latest(),
        });
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > found) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO dsh_schema (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(found)
}
