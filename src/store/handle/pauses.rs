//! Paused routes: pause, resume and list, kept in the store so every instance sees them.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::pauses::RoutePause;

impl Store {
    /// Pauses a route, replacing a pause it had. On PostgreSQL every instance is told at once;
    /// SQLite's worker sees another process's commit within its external check (2 s).
    pub async fn pause_route(&self, pause: RoutePause) -> Result<(), StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.pause_route(pause).await,
            Engine::Postgres(pg) => pg.pause_route(pause).await,
        }
    }

    /// Ends a route's pause; returns whether one was in force at `now_ms`.
    pub async fn resume_route(
        &self,
        endpoint: &str,
        route: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.resume_route(endpoint, route, now_ms).await,
            Engine::Postgres(pg) => pg.resume_route(endpoint, route, now_ms).await,
        }
    }

    /// The pauses in force at `now_ms`, by endpoint and route.
    pub async fn route_pauses(&self, now_ms: i64) -> Result<Vec<RoutePause>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.route_pauses(now_ms).await,
            Engine::Postgres(pg) => pg.route_pauses(now_ms).await,
        }
    }
}
