//! The status page's counters: intake and the worker count into the shared in-memory tally;
//! each engine folds it into `hourly` (SQLite's writer, PostgreSQL's task).
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Store;
use crate::store::counters::Counted;

impl Store {
    /// Counts one request or delivery attempt of `endpoint` for the status page: in memory
    /// now, in the database within `counters.rs`'s `FOLD_EVERY_MS`.
    pub fn count(&self, endpoint: &str, what: Counted, now_ms: i64) {
        // On PostgreSQL, a task of the backend folds the tally into the shared table
        // (`postgres/counters.rs`).
        self.tally().add(endpoint, what, now_ms);
    }
}
