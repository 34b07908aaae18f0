//! What `portaria reconcile` asks of the store: which of the gateway's events portaria never
//! stored ([`Store::never_stored`]), by the dedup key a real delivery of each would have had.
//! Any row of the (endpoint, key) counts, whatever its age or status: an event stored once was
//! received, even if the window of its dedup has passed since. And, for a gateway whose
//! webhooks name an object but carry no state (Mercado Pago), when portaria last heard of each
//! object ([`Store::signed_ids_since`]). And what each endpoint's last run found, kept for the
//! next run (its cursor), the status page and the alerts task: a `meta` row per endpoint under
//! `reconcile:` holding the run's JSON, written by whoever ran it (`serve`'s schedule or the
//! command), read by any instance ([`Store::reconcile_runs`]).

use std::collections::HashMap;

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::postgres::ReconcileLock;

/// A reconcile run's hold on the store ([`Store::reconcile_hold`]): while one is held, no
/// other run reconciles with this store, in this process, another instance or a command.
/// Dropping it lets the next one in.
pub struct ReconcileHold {
    held: Held,
}

enum Held {
    /// The lock file beside the database, locked (closing it unlocks it).
    Sqlite(std::fs::File),
    Postgres(ReconcileLock),
}

impl ReconcileHold {
    /// Lets the next run in now. A hold dropped instead (a run cut off) is let go too, on
    /// PostgreSQL a moment later, when its session ends.
    pub async fn release(self) {
        match self.held {
            Held::Sqlite(file) => drop(file),
            Held::Postgres(lock) => lock.release().await,
        }
    }
}

impl Store {
    /// The hold one reconcile run needs, or None when another run holds it now (the caller
    /// skips its run rather than wait). On SQLite a lock on a file beside the database, on
    /// PostgreSQL a session-level advisory lock: both released by the holder's end however
    /// it ends.
    pub async fn reconcile_hold(&self) -> Result<Option<ReconcileHold>, StoreError> {
        let held = match self.engine() {
            Engine::Sqlite(db) => db.reconcile_lock()?.map(Held::Sqlite),
            Engine::Postgres(pg) => pg.reconcile_lock().await?.map(Held::Postgres),
        };
        Ok(held.map(|held| ReconcileHold { held }))
    }

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

    /// Every endpoint's last reconcile run: (endpoint, the run's JSON), by endpoint.
    pub async fn reconcile_runs(&self) -> Result<Vec<(String, String)>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.reconcile_runs().await,
            Engine::Postgres(pg) => pg.reconcile_runs().await,
        }
    }

    /// Keeps `run` (its JSON) as `endpoint`'s last reconcile run, replacing the one before;
    /// committed like delivery bookkeeping on SQLite (no fsync of its own).
    pub async fn save_reconcile_run(&self, endpoint: &str, run: String) -> Result<(), StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.save_reconcile_run(endpoint, run).await,
            Engine::Postgres(pg) => pg.save_reconcile_run(endpoint, run).await,
        }
    }

    /// The signed ids ([`crate::verify::Verified::signed_id`]: Mercado Pago's `data.id`) of
    /// the events of `endpoint` received at or after `since_ms`, each with the newest time one
    /// of them was received: the objects the gateway notified, and when it last did.
    pub async fn signed_ids_since(
        &self,
        endpoint: &str,
        since_ms: i64,
    ) -> Result<HashMap<String, i64>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.signed_ids_since(endpoint, since_ms).await,
            Engine::Postgres(pg) => pg.signed_ids_since(endpoint, since_ms).await,
        }
    }
}
