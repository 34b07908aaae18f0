//! Paused routes (`portaria route pause`): a paused route keeps accepting and storing, and its
//! deliveries wait, in order, until it is resumed or its pause runs out. The pause lives in
//! the store (table `route_pauses` on both engines), so it survives restarts and every
//! instance on a shared PostgreSQL database sees it; the worker reads the pauses in force each
//! round and claims nothing for a paused route (`forward/`).

use super::handle::Engine;
use super::{Store, StoreError};

/// One route's pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePause {
    pub endpoint: String,
    pub route: String,
    /// Unix milliseconds.
    pub paused_at_ms: i64,
    /// When it runs out by itself (unix milliseconds); None: until resumed.
    pub until_ms: Option<i64>,
    /// Why, as the owner (or a target answering 410 Gone) said it.
    pub reason: Option<String>,
}

impl RoutePause {
    /// Whether it still holds at `now_ms`.
    pub fn holds_at(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|until| until > now_ms)
    }
}

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
