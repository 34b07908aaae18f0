//! Rejected requests kept for a while ([`crate::store::Quarantined`]): keep one, list them
//! (whole, or a page of summaries), count them per endpoint, read one, drop those past their
//! time. Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::quarantine::{QuarantineKeep, Quarantined, RejectedSummary, ToQuarantine};

impl Store {
    /// Keeps a rejected request, then trims its endpoint to the newest `keep.keep` rows and
    /// drops its rows older than `keep.for_ms` before `request.received_at_ms`. Returns the
    /// new row's id (None when `keep.keep` is 0: nothing is written). On SQLite a bookkeeping
    /// job of the writer (no fsync of its own): losing one in a crash loses a rejected
    /// request's copy, never an event.
    pub async fn quarantine(
        &self,
        request: ToQuarantine,
        keep: QuarantineKeep,
    ) -> Result<Option<i64>, StoreError> {
        if keep.keep == 0 {
            return Ok(None);
        }
        match self.engine() {
            Engine::Sqlite(db) => db.quarantine(request, keep).await.map(Some),
            Engine::Postgres(pg) => pg.quarantine(request, keep).await.map(Some),
        }
    }

    /// The kept rejected requests, newest first, of one endpoint or all, at most `limit`
    /// (and [`crate::store::quarantine::LIST_MAX`]).
    pub async fn rejected_list(
        &self,
        endpoint: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Quarantined>, StoreError> {
        let endpoint = endpoint.map(str::to_string);
        let limit = limit.min(crate::store::quarantine::LIST_MAX) as i64;
        match self.engine() {
            Engine::Sqlite(db) => db.rejected_list(endpoint, limit).await,
            Engine::Postgres(pg) => pg.rejected_list(endpoint, limit).await,
        }
    }

    /// A page of the kept rejected requests without their headers nor bodies, newest first,
    /// of one endpoint or all, with an id below `before` when given (the next page's cursor:
    /// the last id of this one), at most `limit` (and
    /// [`crate::store::quarantine::LIST_MAX`]).
    pub async fn rejected_page(
        &self,
        endpoint: Option<&str>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<RejectedSummary>, StoreError> {
        let endpoint = endpoint.map(str::to_string);
        let limit = limit.min(crate::store::quarantine::LIST_MAX) as i64;
        match self.engine() {
            Engine::Sqlite(db) => db.rejected_page(endpoint, before, limit).await,
            Engine::Postgres(pg) => pg.rejected_page(endpoint, before, limit).await,
        }
    }

    /// How many rejected requests each endpoint keeps now, by endpoint name (an endpoint
    /// keeping none is not there).
    pub async fn rejected_kept(&self) -> Result<Vec<(String, u64)>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.rejected_kept().await,
            Engine::Postgres(pg) => pg.rejected_kept().await,
        }
    }

    /// One kept rejected request, by its id.
    pub async fn rejected_get(&self, id: i64) -> Result<Option<Quarantined>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.rejected_get(id).await,
            Engine::Postgres(pg) => pg.rejected_get(id).await,
        }
    }

    /// Drops an endpoint's kept rejected requests received before `before_ms` (the prune
    /// pass: an endpoint no longer rejecting anything still loses them at `quarantine_for`);
    /// returns how many.
    pub async fn prune_rejected(&self, endpoint: &str, before_ms: i64) -> Result<u64, StoreError> {
        let endpoint = endpoint.to_string();
        match self.engine() {
            Engine::Sqlite(db) => db.prune_rejected(endpoint, before_ms).await,
            Engine::Postgres(pg) => pg.prune_rejected(endpoint, before_ms).await,
        }
    }
}
