//! What `portaria events` and the status page list, show and replay.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::events::{EventDetail, EventSummary, ListFilter, Replay, RouteState};
use crate::store::{Status, StoreError};

impl Store {
    /// `events list`'s query.
    pub async fn list_events(&self, filter: ListFilter) -> Result<Vec<EventSummary>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.list_events(&filter).await,
            Engine::Postgres(pg) => pg.list_events(&filter).await,
        }
    }

    /// `events show`'s query: one event with its routes and attempts.
    pub async fn event_detail(&self, id: i64) -> Result<Option<EventDetail>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.event_detail(id).await,
            Engine::Postgres(pg) => pg.event_detail(id).await,
        }
    }

    /// An event's delivery to each route it matched (none for a stored event).
    pub async fn event_routes(&self, id: i64) -> Result<Vec<RouteState>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.event_routes(id).await,
            Engine::Postgres(pg) => pg.event_routes(id).await,
        }
    }

    /// The names of the verified client certificate the event came with (mutual TLS); None
    /// without one (or no such event).
    pub async fn client_cert(&self, id: i64) -> Result<Option<String>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.client_cert(id).await,
            Engine::Postgres(pg) => pg.client_cert(id).await,
        }
    }

    /// `events replay ID`: false if there is no such event, or it is being delivered or only
    /// stored.
    pub async fn replay_event(&self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.replay_route(id, None, now_ms).await
    }

    /// `events replay ID [--route NAME]`: one event's deliveries (to `route` only, if given)
    /// pending again with a fresh schedule; false if it has no such delivery that is not
    /// being delivered now (a stored event has none).
    pub async fn replay_route(
        &self,
        id: i64,
        route: Option<String>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let only = Replay {
            id: Some(id),
            filter: ListFilter {
                route,
                ..ListFilter::default()
            },
        };
        Ok(self.replay(&only, now_ms).await? == 1)
    }

    /// `events replay --dead --endpoint NAME`: how many went back to pending.
    pub async fn replay_dead_of(&self, endpoint: String, now_ms: i64) -> Result<usize, StoreError> {
        self.replay_dead(Some(endpoint), None, now_ms).await
    }

    /// `events replay --dead [--endpoint NAME] [--route NAME]`: every dead delivery (of one
    /// endpoint and route, if given) pending again; how many events that touched.
    pub async fn replay_dead(
        &self,
        endpoint: Option<String>,
        route: Option<String>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let filter = ListFilter {
            endpoint,
            route,
            status: Some(Status::Dead),
            ..ListFilter::default()
        };
        self.replay_matching(filter, Some(now_ms)).await
    }

    /// `events replay` by filters: the deliveries of the events `filter` lists (its cursor
    /// and limit aside) pending again, due at `now_ms`, to `filter.route` only and in
    /// `filter.status` only (a delivery's own: `dead` replays the dead ones) if given, none
    /// being delivered; how many events that touched. Without `now_ms`, nothing changes: how
    /// many it would touch now (one method for both keeps the binary small).
    pub async fn replay_matching(
        &self,
        filter: ListFilter,
        now_ms: Option<i64>,
    ) -> Result<usize, StoreError> {
        let only = Replay { id: None, filter };
        match self.engine() {
            Engine::Sqlite(db) => db.replay(only, now_ms).await,
            Engine::Postgres(pg) => pg.replay(&only, now_ms).await,
        }
    }

    /// Puts the chosen deliveries back to pending, due at `now_ms`, and their events with
    /// them, in one transaction; returns how many events.
    async fn replay(&self, only: &Replay, now_ms: i64) -> Result<usize, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.replay(only.clone(), Some(now_ms)).await,
            Engine::Postgres(pg) => pg.replay(only, Some(now_ms)).await,
        }
    }
}
