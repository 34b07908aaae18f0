//! The alerts task's calls: its saved state (`meta` rows under `alerts:`) and the events gone
//! dead since its cursor.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::alerts::{DeadBatch, TypesBatch, Unrouted};

impl Store {
    /// Events that went dead with an attempt recorded after `cursor` (0: ever), and the new
    /// cursor (the newest attempt id now).
    pub async fn dead_after(&self, cursor: i64) -> Result<DeadBatch, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.dead_after(cursor).await,
            Engine::Postgres(pg) => pg.dead_after(cursor).await,
        }
    }

    /// The event types stored after `cursor` (0: ever), each with its first event there, and
    /// the new cursor (`store::alerts`: on PostgreSQL it trails the newest event a minute).
    /// None: from now on (no types, the cursor at the newest event), without reading the past.
    /// On PostgreSQL, none unless this instance announces alerts.
    pub async fn event_types_after(&self, cursor: Option<i64>) -> Result<TypesBatch, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.event_types_after(cursor).await,
            Engine::Postgres(pg) => pg.event_types_after(cursor).await,
        }
    }

    /// The events of `endpoint` received after `after_ms` and up to `until_ms` that no route
    /// took and are still stored only: a range of `events_endpoint`. On PostgreSQL, none
    /// unless this instance announces alerts.
    pub async fn unrouted_between(
        &self,
        endpoint: String,
        after_ms: i64,
        until_ms: i64,
    ) -> Result<Unrouted, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.unrouted_between(endpoint, after_ms, until_ms).await,
            Engine::Postgres(pg) => pg.unrouted_between(endpoint, after_ms, until_ms).await,
        }
    }

    /// Those of `names` that have a stored event: the ones that "usually receive events" when
    /// the server starts. One step into `events_endpoint` each, however large `events` is.
    pub async fn endpoints_with_events(
        &self,
        names: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.endpoints_with_events(names).await,
            Engine::Postgres(pg) => pg.endpoints_with_events(names).await,
        }
    }

    /// The alerts task's saved state: every `meta` row under [`ALERT_KEY_PREFIX`](crate::store::ALERT_KEY_PREFIX).
    pub async fn alert_state(&self) -> Result<Vec<(String, String)>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.alert_state().await,
            Engine::Postgres(pg) => pg.alert_state().await,
        }
    }

    /// Saves these rows of the alerts task's state (keys under [`ALERT_KEY_PREFIX`](crate::store::ALERT_KEY_PREFIX)), all in
    /// one transaction, committed like delivery bookkeeping: without an fsync of its own when
    /// nothing else in the batch needs one.
    pub async fn save_alert_state(&self, rows: Vec<(String, String)>) -> Result<(), StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.save_alert_state(rows).await,
            Engine::Postgres(pg) => pg.save_alert_state(rows).await,
        }
    }
}
