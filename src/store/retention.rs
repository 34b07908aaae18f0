//! Retention, as its callers see it: what pruning may remove, defined once ([`prunable!`]:
//! delivered and stored events past `retention_days`, dead ones past `dead_retention_days`;
//! pending and delivering events never match it, however old), what a pass removed, the
//! space given back, and archive restore ([`Store::restore`], the one way into `events` besides
//! `insert_event`, for events verified when first received). A pass reaches the batches
//! only through its hold on the store (`pruning.rs`); each engine runs them in its
//! `retention.rs` (and PostgreSQL's restore in `restore.rs`).

use super::handle::Engine;
use super::{EventDetail, NewDelivery, Status, Store, StoreError};

/// The one definition of what pruning may remove, in SQL both engines accept: `$mark` is the
/// engine's placeholder mark (`"?"` or `"$"`); the first parameter is the cut-off for
/// delivered and stored events, the second for dead ones ([`Cutoffs`]). It names finished
/// statuses only: pending and delivering events never match, however old.
macro_rules! prunable {
    ($mark:literal) => {
        concat!(
            "((status IN ('delivered', 'stored') AND received_at < ",
            $mark,
            "1) OR (status = 'dead' AND received_at < ",
            $mark,
            "2))"
        )
    };
}
pub(super) use prunable;

/// Which events pruning may remove: delivered and stored ones received before
/// `finished_before_ms`, dead ones received before `dead_before_ms` (unix milliseconds).
/// Pending and delivering events are never removed, however old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    pub finished_before_ms: i64,
    pub dead_before_ms: i64,
}

/// One row that pruning deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub endpoint: String,
    pub status: Status,
    /// Stored headers and body.
    pub bytes: u64,
}

/// Events that pruning would remove now, for one endpoint and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunableGroup {
    pub endpoint: String,
    pub status: Status,
    pub events: u64,
    /// Stored headers and bodies.
    pub bytes: u64,
}

/// What one round of incremental vacuum gave back to the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// Pages cut from the end of the file.
    pub pages: u64,
    pub page_size: u64,
    /// Free pages still inside the file.
    pub free_left: u64,
}

impl Reclaimed {
    pub fn bytes(&self) -> u64 {
        self.pages * self.page_size
    }
}

/// What putting archived events back came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Restored {
    /// No row had the (endpoint, dedup key): a new pending row.
    pub inserted: usize,
    /// A finished row had it: back to pending with a fresh schedule.
    pub reset: usize,
    /// A pending or delivering row had it: already on its way, left alone.
    pub already_queued: usize,
}

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
    /// key.
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
