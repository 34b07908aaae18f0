//! [`Pruning`]: a pruning pass's hold on the store, the only way to delete prunable events.
//! On PostgreSQL it is the retention lock (`postgres/retention.rs`): one instance prunes at a
//! time, and every batch of its pass runs on the session that holds the lock, so two
//! instances never archive or delete the same batch. On SQLite it is the engine itself (one
//! file, one writer: its batches are writer jobs, serialized by the file's write lock).

use super::Engine;
use super::Store;
use crate::store::postgres::RetentionLock;
use crate::store::sqlite::Sqlite;
use crate::store::{Cutoffs, EventDetail, Removed, StoreError};

/// The pass's hold on the store: its batches go through here. Dropping it ends the hold.
pub struct Pruning<'a> {
    hold: Hold<'a>,
}

/// What a pass holds, per engine.
enum Hold<'a> {
    Sqlite(&'a Sqlite),
    /// The retention lock and the session that holds it.
    Postgres(RetentionLock),
}

impl Store {
    /// The hold a pruning pass needs, or None when another instance holds it now (on
    /// PostgreSQL: the retention lock is taken; that pass is skipped, not waited for).
    pub async fn pruning(&self) -> Result<Option<Pruning<'_>>, StoreError> {
        let hold = match self.engine() {
            Engine::Sqlite(db) => Hold::Sqlite(db),
            Engine::Postgres(pg) => match pg.retention_lock().await? {
                Some(lock) => Hold::Postgres(lock),
                None => return Ok(None),
            },
        };
        Ok(Some(Pruning { hold }))
    }
}

impl Pruning<'_> {
    /// Deletes up to `limit` prunable events, in the order they were stored (by id), without
    /// reading them.
    pub async fn delete_prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
    ) -> Result<Vec<Removed>, StoreError> {
        match &self.hold {
            Hold::Sqlite(db) => db.delete_prunable(cutoffs, limit).await,
            Hold::Postgres(lock) => lock.delete_prunable(cutoffs, limit).await,
        }
    }

    /// Up to `limit` prunable events in full (with attempts), in the order they were stored
    /// (by id), stopping early once their headers and bodies pass `byte_budget`: what the
    /// archive writes.
    pub async fn prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
        byte_budget: u64,
    ) -> Result<Vec<EventDetail>, StoreError> {
        match &self.hold {
            Hold::Sqlite(db) => db.prunable(cutoffs, limit, byte_budget).await,
            Hold::Postgres(lock) => lock.prunable(cutoffs, limit, byte_budget).await,
        }
    }

    /// Deletes these events (attempts go with them), each only if it is still prunable: one
    /// replayed since it was read stays.
    pub async fn delete_pruned(
        &self,
        cutoffs: Cutoffs,
        ids: Vec<i64>,
    ) -> Result<Vec<Removed>, StoreError> {
        match &self.hold {
            Hold::Sqlite(db) => db.delete_pruned(cutoffs, ids).await,
            Hold::Postgres(lock) => lock.delete_pruned(cutoffs, &ids).await,
        }
    }
}
