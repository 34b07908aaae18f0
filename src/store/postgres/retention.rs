//! Pruning on PostgreSQL, without an archive (`storage.archive_dir` is refused at start on
//! this backend): finished events past their window deleted in batches, oldest first, their
//! payloads, deliveries, attempts and dedup rows going with them (ON DELETE CASCADE). The
//! same rule as SQLite's `PRUNABLE`: pending and delivering events never match. Several
//! instances may prune at once: `SKIP LOCKED` keeps them off each other's rows, and a delete
//! is the same whoever runs it. Space is PostgreSQL's autovacuum's to reclaim.

use super::{Pg, error};
use crate::store::{Cutoffs, PrunableGroup, Removed, Status, StoreError};

const DELETE_PRUNABLE: &str = "DELETE FROM events WHERE id IN (SELECT id FROM events \
     WHERE (status IN ('delivered', 'stored') AND received_at < $1) \
     OR (status = 'dead' AND received_at < $2) \
     ORDER BY received_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
     RETURNING endpoint, status, payload_bytes";

/// What [`DELETE_PRUNABLE`] would take, by endpoint and status (the same condition).
const PRUNABLE_COUNTS: &str = "SELECT endpoint, status, count(*), sum(payload_bytes)::bigint \
     FROM events WHERE (status IN ('delivered', 'stored') AND received_at < $1) \
     OR (status = 'dead' AND received_at < $2) \
     GROUP BY endpoint, status ORDER BY endpoint, status";

impl Pg {
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
                let status: String = row.get(1);
                Ok(PrunableGroup {
                    endpoint: row.get(0),
                    status: status.parse::<Status>().map_err(StoreError::Postgres)?,
                    events: row.get::<_, i64>(2) as u64,
                    bytes: row.get::<_, i64>(3) as u64,
                })
            })
            .collect()
    }

    pub(in crate::store) async fn delete_prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
    ) -> Result<Vec<Removed>, StoreError> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                DELETE_PRUNABLE,
                &[&cutoffs.finished_before_ms, &cutoffs.dead_before_ms, &limit],
            )
            .await
            .map_err(error)?;
        rows.into_iter()
            .map(|row| {
                let status: String = row.get(1);
                Ok(Removed {
                    endpoint: row.get(0),
                    status: status.parse::<Status>().map_err(StoreError::Postgres)?,
                    bytes: row.get::<_, i64>(2) as u64,
                })
            })
            .collect()
    }
}
