//! What `portaria reconcile` asks of the store: which of the gateway's events portaria never
//! stored ([`Store::never_stored`]), by the dedup key a real delivery of each would have had.
//! Any row of the (endpoint, key) counts, whatever its age or status: an event stored once was
//! received, even if the window of its dedup has passed since.

use super::Engine;
use super::Store;
use crate::store::StoreError;

impl Store {
    /// Those of `keys` that no stored event of `endpoint` has as its dedup key, in the order
    /// given. A read: on SQLite through the reader a command opened, or the writer's job.
    pub async fn never_stored(
        &self,
        endpoint: &str,
        keys: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.never_stored(endpoint, keys).await,
            Engine::Postgres(pg) => pg.never_stored(endpoint, keys).await,
        }
    }
}
