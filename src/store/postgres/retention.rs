//! Pruning on PostgreSQL, one instance at a time: a pass runs only under the retention lock
//! ([`RETENTION_LOCK`], a session-level advisory lock), taken with `pg_try_advisory_lock` on a
//! connection of the pass's own ([`RetentionLock`], taken out of the pool) that runs every
//! batch of the pass and is closed when the pass ends, which releases the lock however the
//! pass ends (and so does the death of the instance). An instance that finds the lock taken
//! skips that pass. Finished events past their window are deleted in batches, in the order
//! they were stored (by id, as on SQLite), their payloads, deliveries, attempts and dedup rows
//! going with them (ON DELETE CASCADE).
//! The rule is `store/retention.rs`'s `prunable!`, as SQLite's: pending and delivering
//! events never match. With an
//! archive, a batch is read in full first ([`RetentionLock::prunable`]) and deleted by id
//! once the archive is fsynced ([`RetentionLock::delete_pruned`]), both on the lock's session:
//! no other instance reads a batch meanwhile, so none archives an event twice. Space is
//! PostgreSQL's autovacuum's to reclaim.

use deadpool_postgres::{ClientWrapper, Object};

use super::rows::{DETAIL, attempts_of, detail};
use super::{Pg, error};
use crate::store::events::{self, EventDetail, SUMMARY_LEN};
use crate::store::fetches::Fetched;
use crate::store::retention::prunable;
use crate::store::{Cutoffs, PrunableGroup, Removed, StoreError};

/// The retention lock: whoever holds it prunes (an arbitrary constant: "portaria" in ASCII
/// with its last byte changed, beside the migration and alerts locks). It shows in
/// `pg_locks` as an advisory lock with `classid` 1886351988 and `objid` 1634888040.
pub(super) const RETENTION_LOCK: i64 = 0x706f_7274_6172_6968;

/// Up to $3 prunable events deleted, in the order they were stored (by id, as SQLite's: an
/// event restored from the archive, received long ago, waits its turn). `SKIP LOCKED` leaves
/// alone a row a replay is changing right now.
const DELETE_PRUNABLE: &str = concat!(
    "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ",
    prunable!("$"),
    " ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED) \
     RETURNING endpoint, status, payload_bytes"
);

/// Up to $3 prunable events, in the order they were stored (by id), in full with what
/// fetching got, stopping once the headers and bodies before an event reach $4 (at least one
/// event): what an archive batch writes. `before` is the bytes of the events ahead of each in
/// the batch.
fn prunable_batch() -> String {
    format!(
        "WITH oldest AS (SELECT id, payload_bytes FROM events WHERE {} \
           ORDER BY id LIMIT $3), \
         batch AS (SELECT id AS pruned_id, \
           (sum(payload_bytes) OVER (ORDER BY id))::bigint - payload_bytes \
           AS before FROM oldest) \
         SELECT {}, {}, fetches.state, fetches.detail FROM batch \
         JOIN events ON events.id = batch.pruned_id \
         JOIN payloads ON payloads.event_id = batch.pruned_id \
         LEFT JOIN fetches ON fetches.event_id = batch.pruned_id \
         WHERE batch.before < $4::bigint ORDER BY batch.pruned_id",
        prunable!("$"),
        events::SUMMARY,
        DETAIL
    )
}

/// These events deleted ($3), each only if it is still prunable (a replay since it was read
/// wins).
const DELETE_PRUNED: &str = concat!(
    "DELETE FROM events WHERE id = ANY($3) AND ",
    prunable!("$"),
    " RETURNING endpoint, status, payload_bytes"
);

/// What [`DELETE_PRUNABLE`] would take, by endpoint and status (the same condition).
const PRUNABLE_COUNTS: &str = concat!(
    "SELECT endpoint, status, count(*), sum(payload_bytes)::bigint FROM events WHERE ",
    prunable!("$"),
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
                    status: super::rows::status(&row, 1)?,
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

    /// Up to `limit` prunable events in full (with attempts), oldest first, stopping once
    /// their headers and bodies pass `byte_budget` (at least one event): a batch for the
    /// archive.
    pub(in crate::store) async fn prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
        byte_budget: u64,
    ) -> Result<Vec<EventDetail>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let budget = i64::try_from(byte_budget).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                &prunable_batch(),
                &[
                    &cutoffs.finished_before_ms,
                    &cutoffs.dead_before_ms,
                    &limit,
                    &budget,
                ],
            )
            .await
            .map_err(error)?;
        let mut batch = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut event = detail(r)?;
            // What fetching got, if anything (the LEFT JOIN's last two columns).
            let row = r
                .get::<_, Option<&str>>(SUMMARY_LEN + 5)
                .zip(r.get(SUMMARY_LEN + 6));
            event.fetched = row.and_then(|(state, text)| Fetched::from_columns(state, text));
            batch.push(event);
        }
        let ids: Vec<i64> = batch.iter().map(|e| e.summary.id).collect();
        let mut attempts = attempts_of(&self.client, &ids).await?;
        for event in &mut batch {
            event.attempts = attempts.remove(&event.summary.id).unwrap_or_default();
        }
        Ok(batch)
    }

    /// Deletes these events (their rows go with them), each only if it is still prunable.
    pub(in crate::store) async fn delete_pruned(
        &self,
        cutoffs: Cutoffs,
        ids: &[i64],
    ) -> Result<Vec<Removed>, StoreError> {
        let rows = self
            .client
            .query(
                DELETE_PRUNED,
                &[&cutoffs.finished_before_ms, &cutoffs.dead_before_ms, &ids],
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
        status: super::rows::status(row, 1)?,
        bytes: row.get::<_, i64>(2) as u64,
    })
}
