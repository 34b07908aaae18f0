//! Pruning on PostgreSQL, one instance at a time: a pass runs only under the retention lock
//! ([`RETENTION_LOCK`], a session-level advisory lock), taken with `pg_try_advisory_lock` on a
//! connection of the pass's own ([`RetentionLock`], taken out of the pool) that runs every
//! batch of the pass and is closed when the pass ends, which releases the lock however the
//! pass ends (and so does the death of the instance). An instance that finds the lock taken
//! skips that pass. Finished events past their window are deleted in batches, oldest first,
//! their payloads, deliveries, attempts and dedup rows going with them (ON DELETE CASCADE).
//! The same rule as SQLite's `PRUNABLE`: pending and delivering events never match. Space is
//! PostgreSQL's autovacuum's to reclaim.

use deadpool_postgres::{ClientWrapper, Object};

use super::{Pg, error};
use crate::store::{Cutoffs, PrunableGroup, Removed, Status, StoreError};

/// The retention lock: whoever holds it prunes (an arbitrary constant: "portaria" in ASCII
/// with its last byte changed, beside the migration and alerts locks). It shows in
/// `pg_locks` as an advisory lock with `classid` 1886351988 and `objid` 1634888040.
pub(super) const RETENTION_LOCK: i64 = 0x706f_7274_6172_6968;

/// The one definition of prunable on PostgreSQL ($1: the cut-off for delivered and stored
/// events, $2: for dead ones), as SQLite's `PRUNABLE`.
macro_rules! prunable {
    () => {
        "((status IN ('delivered', 'stored') AND received_at < $1) \
         OR (status = 'dead' AND received_at < $2))"
    };
}

/// Up to $3 prunable events deleted, oldest first. `SKIP LOCKED` leaves alone a row a replay
/// is changing right now.
const DELETE_PRUNABLE: &str = concat!(
    "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ",
    prunable!(),
    " ORDER BY received_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
     RETURNING endpoint, status, payload_bytes"
);

/// What [`DELETE_PRUNABLE`] would take, by endpoint and status (the same condition).
const PRUNABLE_COUNTS: &str = concat!(
    "SELECT endpoint, status, count(*), sum(payload_bytes)::bigint FROM events WHERE ",
    prunable!(),
    " GROUP BY endpoint, status ORDER BY endpoint, status"
);

/// The retention lock, held by this pass: the connection that took it, out of the pool.
/// Dropping it closes the connection, and PostgreSQL releases the lock with the session.
pub(in crate::store) struct RetentionLock {
    client: ClientWrapper,
}

impl Pg {
    /// The retention lock if no other session holds it (None: another instance is pruning).
    pub(in crate::store) async fn retention_lock(
        &self,
    ) -> Result<Option<RetentionLock>, StoreError> {
        let client = self.client().await?;
        let took: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RETENTION_LOCK])
            .await
            .map_err(error)?
            .get(0);
        if !took {
            // Back to the pool: this session holds nothing.
            return Ok(None);
        }
        // Out of the pool: no other call may run on the session holding the lock, and its
        // end (the drop) must release the lock.
        Ok(Some(RetentionLock {
            client: Object::take(client),
        }))
    }

    pub(in crate::store) async fn prunable_counts(
        &self,
        cutoffs: Cutoffs,
    ) -> Result<Vec<PrunableGroup>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                PRUNABLE_COUNTS,
                &[&cutoffs.finished_before_ms, &cutoffs.dead_before_ms],
            )
            .await
            .map_err(error)?;
        rows.into_iter()
            .map(|row| {
                Ok(PrunableGroup {
                    endpoint: row.get(0),
                    status: status(&row, 1)?,
                    events: row.get::<_, i64>(2) as u64,
                    bytes: row.get::<_, i64>(3) as u64,
                })
            })
            .collect()
    }
}

impl RetentionLock {
    /// Deletes up to `limit` prunable events, oldest first, without reading them.
    pub(in crate::store) async fn delete_prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
    ) -> Result<Vec<Removed>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                DELETE_PRUNABLE,
                &[&cutoffs.finished_before_ms, &cutoffs.dead_before_ms, &limit],
            )
            .await
            .map_err(error)?;
        rows.iter().map(removed).collect()
    }
}

/// A row of `endpoint, status, payload_bytes`.
fn removed(row: &tokio_postgres::Row) -> Result<Removed, StoreError> {
    Ok(Removed {
        endpoint: row.get(0),
        status: status(row, 1)?,
        bytes: row.get::<_, i64>(2) as u64,
    })
}

fn status(row: &tokio_postgres::Row, idx: usize) -> Result<Status, StoreError> {
    row.get::<_, String>(idx)
        .parse()
        .map_err(StoreError::Postgres)
}
