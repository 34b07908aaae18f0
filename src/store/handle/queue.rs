//! The forwarding worker's calls: recovery at start, claims per lane, attempts and their
//! outcome, and what is due next.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::queue::{AfterAttempt, ClaimNext, Claimed, Delivery, LaneClaim, Tried};

impl Store {
    /// At start-up: attempts that were running when the process died go back to pending, due
    /// now, and are recorded as interrupted; roll-ups a stop cut off are written. Returns how
    /// many deliveries went back (on PostgreSQL none: a lease runs out instead).
    pub async fn recover(&self, now_ms: i64) -> Result<usize, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.recover(now_ms).await,
            Engine::Postgres(pg) => pg.recover(now_ms).await,
        }
    }

    /// Unfinished (pending or delivering) deliveries per (endpoint, route), for the start-up
    /// check that every such delivery still has a route to go to.
    pub async fn unfinished_by_route(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.unfinished_by_route().await,
            Engine::Postgres(pg) => pg.unfinished_by_route().await,
        }
    }

    /// Claims the due deliveries of several lanes in one transaction (the worker loop's round:
    /// the deliveries of one event to its routes share pages, and so one commit), and says
    /// when each lane with room left is next due.
    pub async fn claim_lanes(
        &self,
        lanes: Vec<LaneClaim>,
        now_ms: i64,
    ) -> Result<Vec<Claimed>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.claim_lanes(lanes, now_ms).await,
            Engine::Postgres(pg) => pg.claim_lanes(lanes, now_ms).await,
        }
    }

    /// Records one attempt and moves the delivery on; with `then`, claims the lane's next due
    /// delivery in the same transaction, so a busy lane costs one commit per delivery.
    pub async fn record_attempt(
        &self,
        event_id: i64,
        route: String,
        attempt: Tried,
        after: AfterAttempt,
        then: Option<ClaimNext>,
    ) -> Result<Option<Delivery>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => {
                db.record_attempt(event_id, route, attempt, after, then)
                    .await
            }
            Engine::Postgres(pg) => {
                pg.record_attempt(event_id, route, attempt, after, then)
                    .await
            }
        }
    }

    /// Writes these events' roll-up status, each whose deliveries are all finished (the
    /// others are left pending), and takes their finished deliveries out of the queue, in one
    /// transaction.
    pub async fn roll_up(&self, event_ids: Vec<i64>) -> Result<(), StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.roll_up(event_ids).await,
            Engine::Postgres(pg) => pg.roll_up(event_ids).await,
        }
    }

    /// Resolves when another session changed the queue: on PostgreSQL, a notification from
    /// another instance's intake or a replay; never on SQLite, whose worker sees other
    /// processes' commits through [`Store::data_version`].
    pub async fn changed_elsewhere(&self) {
        match self.engine() {
            Engine::Sqlite(_) => std::future::pending().await,
            Engine::Postgres(pg) => pg.changed_elsewhere().await,
        }
    }

    /// A number that changes when another connection (`portaria events replay`, another
    /// instance) commits: SQLite's `data_version`, PostgreSQL's WAL position.
    pub async fn data_version(&self) -> Result<i64, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.data_version().await,
            Engine::Postgres(pg) => pg.data_version().await,
        }
    }
}
