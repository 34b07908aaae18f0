//! Intake's one call: the dedup barrier, an insert that answers `New` or `Duplicate` only once
//! it is durable.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::intake::{Inserted, NewEvent};
use std::time::Duration;

impl Store {
    /// Stores a verified event unless its (endpoint, dedup key) is already there (since the
    /// window's start, if the endpoint has a window). The barrier is one statement of the
    /// engine's, so concurrent copies cannot both get in.
    ///
    /// `deadline`: how long the request waits for the engine to take the insert for a
    /// transaction. Not taken by then, it is given up and never runs
    /// ([`StoreError::NotTaken`]: the caller answers 503 knowing that nothing will be
    /// stored); taken, its real answer is awaited however long that takes (`handover.rs`
    /// says what bounds it). Either way the outcome is recorded for `/readyz`.
    pub async fn insert_event(
        &self,
        event: NewEvent,
        deadline: Duration,
    ) -> Result<Inserted, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.insert_event(event, deadline).await,
            Engine::Postgres(pg) => pg.insert_event(event, deadline).await,
        }
    }
}
