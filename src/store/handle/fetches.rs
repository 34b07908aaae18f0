//! Verify-by-fetching's record of each event ([`Fetched`]): read before a delivery asks the
//! gateway, kept once after it answered. Each method is one `match` over
//! [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::fetches::Fetched;

impl Store {
    /// What the gateway's API said of the object event `event_id` names, if it was asked.
    pub async fn fetched(&self, event_id: i64) -> Result<Option<Fetched>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.fetched(event_id).await,
            Engine::Postgres(pg) => pg.fetched(event_id).await,
        }
    }

    /// Keeps `fetched` as the event's answer unless it has one already; returns the one kept
    /// (the first: another route or instance may have asked before).
    pub async fn keep_fetched(
        &self,
        event_id: i64,
        fetched: Fetched,
    ) -> Result<Fetched, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.keep_fetched(event_id, fetched).await,
            Engine::Postgres(pg) => pg.keep_fetched(event_id, fetched).await,
        }
    }
}
