//! What `/readyz` and `/metrics` ask: readiness (the write probe, the latest intake commits)
//! and the queue's figures.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::observe::{INTAKE_FAILURE_HOLD, NotReady, QueueStats};

impl Store {
    /// Rewrites one row of `meta` and waits for the COMMIT: proof that the database takes a
    /// durable write now (the write lock is free, the disk has room, the file is writable).
    pub async fn probe_write(&self, now_ms: i64) -> Result<(), StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.probe_write(now_ms).await,
            Engine::Postgres(pg) => pg.probe_write(now_ms).await,
        }
    }

    /// Whether a webhook arriving now would be stored: the latest intake commit did not fail
    /// recently (or one succeeded since), and the engine's own checks pass (SQLite: the file
    /// system has `needed_free` bytes available; both: the write probe commits).
    pub async fn readiness(&self, needed_free: u64, now_ms: i64) -> Result<(), NotReady> {
        if let Some((ago, error)) = self.intake_health().recent_failure(INTAKE_FAILURE_HOLD) {
            return Err(NotReady::IntakeFailed {
                ago_ms: ago.as_millis() as u64,
                error,
            });
        }
        match self.engine() {
            Engine::Sqlite(db) => db.readiness(needed_free, now_ms).await,
            Engine::Postgres(pg) => pg.readiness(needed_free, now_ms).await,
        }
    }

    /// Pending and dead counts and the oldest pending event, per endpoint that has any.
    pub async fn queue_stats(&self) -> Result<Vec<QueueStats>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.queue_stats().await,
            Engine::Postgres(pg) => pg.queue_stats().await,
        }
    }
}
