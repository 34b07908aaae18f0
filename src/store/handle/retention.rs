//! Retention: what pruning may remove, counted or archived, and archive restore.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::retention::{Cutoffs, PrunableGroup, Reclaimed, Restored};
use crate::store::{EventDetail, NewDelivery, StoreError};

impl Store {
    /// Gives up to `max_pages` free pages back to the file system (SQLite's incremental
    /// auto-vacuum; on PostgreSQL nothing to cut: its autovacuum reuses and returns the space).
    pub async fn reclaim_space(&self, max_pages: u32) -> Result<Reclaimed, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.reclaim_space(max_pages).await,
            Engine::Postgres(_) => Ok(Reclaimed::default()),
        }
    }

    /// Copies SQLite's WAL into the database file and truncates the WAL, so the space that
    /// [`Store::reclaim_space`] freed leaves the disk. Returns false if a reader was in the
    /// way; the next checkpoint catches up. PostgreSQL checkpoints by itself: true.
    pub async fn checkpoint(&self) -> Result<bool, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.checkpoint().await,
            Engine::Postgres(_) => Ok(true),
        }
    }

    /// What pruning would remove now, by endpoint and status (`portaria prune --dry-run`).
    pub async fn prunable_counts(
        &self,
        cutoffs: Cutoffs,
    ) -> Result<Vec<PrunableGroup>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.prunable_counts(cutoffs).await,
            Engine::Postgres(pg) => pg.prunable_counts(cutoffs).await,
        }
    }

    /// Puts archived events back in the queue, due now, keeping their endpoint, dedup key,
    /// headers, body and received time. The dedup barrier decides, with no dedup window
    /// whatever the endpoint's: no row yet means a new pending row; a finished row (delivered,
    /// dead, stored) goes back to pending with a fresh schedule, its history kept, like
    /// `events replay`; a pending or delivering row is left alone. Never a second row for one
    /// key. An event's `fetched` is kept as [`Store::keep_fetched`] keeps it (an object the
    /// row has stays) when the row is that event's, new or its own; a newer event of the key
    /// is not given the older object.
    ///
    /// An endpoint with a `dedup_window` may hold several rows of one key (one per window).
    /// Then the key's notification goes out once more, never once per row: if any of its rows
    /// is pending or delivering, all are left alone; otherwise only the newest finished one
    /// goes back to pending. These events were verified when first received; the caller
    /// checks that their endpoint still forwards.
    /// `routes` says where each event goes now (the current config's matching routes).
    ///
    /// `events` go in one transaction (on PostgreSQL every running instance is woken at its
    /// commit; a SQLite server notices within seconds, `data_version`).
    pub async fn restore(
        &self,
        events: Vec<EventDetail>,
        routes: &dyn Fn(&EventDetail) -> Vec<NewDelivery>,
        now_ms: i64,
    ) -> Result<Restored, StoreError> {
        let plans: Vec<Vec<NewDelivery>> = events.iter().map(routes).collect();
        match self.engine() {
            Engine::Sqlite(db) => db.restore(events, plans, now_ms).await,
            Engine::Postgres(pg) => pg.restore(&events, &plans, now_ms).await,
        }
    }
}
