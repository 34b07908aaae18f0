//! Retention, as its callers see it: what pruning may remove, defined once ([`prunable!`]:
//! delivered and stored events past `retention_days`, dead ones past `dead_retention_days`;
//! pending and delivering events never match it, however old), what a pass removed, the
//! space given back, and archive restore ([`Store::restore`], the one way into `events` besides
//! `insert_event`, for events verified when first received). A pass reaches the batches
//! only through its hold on the store (`handle/pruning.rs`); each engine runs them in its
//! `retention.rs` (and PostgreSQL's restore in `restore.rs`).

use super::Status;

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
