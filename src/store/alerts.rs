//! What the alerts task asks of the database: the deliveries that went dead since it last looked,
//! the endpoints that have received anything, and its own state, kept in `meta` under keys
//! starting with `alerts:` (no table of its own: the schema is not changed for it).
//!
//! "Since it last looked" is a cursor on `attempts.id`, not on `events.id`: an event goes dead
//! with its last attempt, and attempt ids grow in the order attempts are recorded, whatever the
//! order events arrived in (an old event with a long schedule dies after a young one) and also
//! when a replayed event dies a second time.
//! Each engine answers in its `alerts.rs`: SQLite with that cursor, PostgreSQL (several
//! instances, one announcing) by marking the deliveries it has told of.

use super::handle::Engine;
use super::{Store, StoreError};

/// An event whose last attempt, recorded after the cursor, left it dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadEvent {
    pub id: i64,
    pub endpoint: String,
    /// The route whose delivery went dead.
    pub route: Option<String>,
}

/// The dead events after a cursor, and the cursor to ask with next time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadBatch {
    /// In the order they went dead.
    pub events: Vec<DeadEvent>,
    pub cursor: i64,
}

/// The prefix of every `meta` key the alerts task owns.
pub const ALERT_KEY_PREFIX: &str = "alerts:";

impl Store {
    /// Events that went dead with an attempt recorded after `cursor` (0: ever), and the new
    /// cursor (the newest attempt id now).
    pub async fn dead_after(&self, cursor: i64) -> Result<DeadBatch, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.dead_after(cursor).await,
            Engine::Postgres(pg) => pg.dead_after(cursor).await,
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

    /// The alerts task's saved state: every `meta` row under [`ALERT_KEY_PREFIX`].
    pub async fn alert_state(&self) -> Result<Vec<(String, String)>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.alert_state().await,
            Engine::Postgres(pg) => pg.alert_state().await,
        }
    }

    /// Saves these rows of the alerts task's state (keys under [`ALERT_KEY_PREFIX`]), all in
    /// one transaction, committed like delivery bookkeeping: without an fsync of its own when
    /// nothing else in the batch needs one.
    pub async fn save_alert_state(&self, rows: Vec<(String, String)>) -> Result<(), StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.save_alert_state(rows).await,
            Engine::Postgres(pg) => pg.save_alert_state(rows).await,
        }
    }
}
