//! Verify-by-fetching's record of each event ([`Fetched`]): read before a delivery asks the
//! gateway, kept once after it answered. Each method is one `match` over
//! [`Engine`](super::Engine).

use std::collections::HashMap;

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

    /// The records of `endpoint`'s events received at or after `since_ms`, by event id: one
    /// read for a window, where [`Store::fetched`] is one per event.
    pub async fn fetched_since(
        &self,
        endpoint: &str,
        since_ms: i64,
    ) -> Result<HashMap<i64, Fetched>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.fetched_since(endpoint.to_string(), since_ms).await,
            Engine::Postgres(pg) => pg.fetched_since(endpoint, since_ms).await,
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
