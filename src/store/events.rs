//! What `portaria events` and the status page look at and fix: the row types of one event
//! ([`EventSummary`], [`EventDetail`], [`RouteState`], [`Attempt`]; also what pruning reads
//! for the archive and a restore puts back), the list's filters ([`ListFilter`]) and its one
//! statement for both engines ([`list_query`], spelled by a [`Dialect`]), and replay per
//! event, route or dead delivery. Each engine runs them in its `events.rs`.

use super::handle::Engine;
use super::{Status, Store, StoreError};

/// An event as listed: everything but the body and headers. `status` is the roll-up of its
/// deliveries (`delivering` while one of them is); `attempts` counts every route's,
/// `next_attempt_at_ms` is the soonest of its waiting deliveries, `last_error` one of theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSummary {
    pub id: i64,
    pub endpoint: String,
    pub dedup_key: String,
    pub event_type: Option<String>,
    pub received_at_ms: i64,
    pub status: Status,
    pub attempts: u32,
    pub next_attempt_at_ms: Option<i64>,
    pub last_error: Option<String>,
    /// The object it is about (the payment, the order), if its body named one.
    pub object_id: Option<String>,
}

/// One event in full, with its delivery attempts.
#[derive(Debug, Clone)]
pub struct EventDetail {
    pub summary: EventSummary,
    pub content_type: Option<String>,
    pub headers: Vec<u8>,
    pub body: Vec<u8>,
    /// Its delivery to each route it matched.
    pub routes: Vec<RouteState>,
    pub attempts: Vec<Attempt>,
    /// The id the provider signed apart from the body (Mercado Pago's query `data.id`).
    pub signed_id: Option<String>,
    /// Whether the event type came from signed bytes; None without a type, or for an event
    /// stored before this was kept.
    pub event_type_signed: Option<bool>,
}

/// One event's delivery to one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteState {
    pub route: String,
    pub status: Status,
    pub attempts: u32,
    /// When it is next due, while it is pending.
    pub next_attempt_at_ms: Option<i64>,
    pub last_error: Option<String>,
    pub finished_at_ms: Option<i64>,
    /// The route's `order_by` value for this event, if it has one.
    pub order_key: Option<String>,
}

/// One recorded delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub attempt: u32,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// `delivered`, `failed` or `interrupted`.
    pub outcome: String,
    pub error: Option<String>,
    /// The route it was for.
    pub route: String,
}

/// Filters for `events list` and the status page: each one given narrows the list, newest
/// (highest id) first.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub endpoint: Option<String>,
    pub status: Option<Status>,
    pub event_type: Option<String>,
    /// Text anywhere in the dedup key (for most providers, the event's or object's id).
    pub text: Option<String>,
    /// Only events with a smaller id: the cursor of the next page.
    pub before: Option<i64>,
    /// 0: no limit.
    pub limit: usize,
}

/// Which deliveries a replay puts back.
#[derive(Default)]
pub(super) struct Replay<'a> {
    pub(super) id: Option<i64>,
    /// Only dead deliveries.
    pub(super) dead: bool,
    pub(super) endpoint: Option<&'a str>,
    pub(super) route: Option<&'a str>,
}

/// An event's listed status: its roll-up; for a pending event, what its deliveries say now
/// (`delivering` while one of them is, and `delivered` or `dead` before the worker's batched
/// roll-up has written it), so a listing never lags the deliveries.
macro_rules! listed_status {
    () => {
        "CASE WHEN events.status != 'pending' THEN events.status \
         WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id \
           AND d.status = 'delivering') THEN 'delivering' \
         WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id \
           AND d.status = 'pending') THEN 'pending' \
         WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id \
           AND d.status = 'dead') THEN 'dead' \
         WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id) \
           THEN 'delivered' \
         ELSE 'pending' END"
    };
}

/// An event's summary columns, its deliveries rolled up (see [`EventSummary`]).
macro_rules! summary_columns {
    () => {
        concat!(
            "events.id, events.endpoint, dedup_key, event_type, received_at, ",
            listed_status!(),
            ", (SELECT coalesce(sum(d.attempts), 0) FROM deliveries d \
               WHERE d.event_id = events.id), \
             (SELECT min(d.next_attempt_at) FROM deliveries d \
               WHERE d.event_id = events.id AND d.status = 'pending'), \
             (SELECT d.last_error FROM deliveries d WHERE d.event_id = events.id \
               AND d.last_error IS NOT NULL ORDER BY d.route LIMIT 1), \
             events.object_id"
        )
    };
}
pub(super) const SUMMARY: &str = summary_columns!();
/// How a backend spells what the list's statement needs: its placeholders (`?1` or `$1`), the
/// test for text inside text, and the deliveries waiting or under way (SQLite's through its
/// partial queue index, named: `INDEXED BY` is SQLite's alone). The rest of the statement is
/// the same on both.
pub(super) struct Dialect {
    param: &'static str,
    contains: &'static str,
    queued: &'static str,
}

pub(super) const SQLITE: Dialect = Dialect {
    param: "?",
    contains: "instr",
    queued: "deliveries INDEXED BY deliveries_queue WHERE next_attempt_at IS NOT NULL AND",
};
pub(super) const POSTGRES: Dialect = Dialect {
    param: "$",
    contains: "strpos",
    queued: "deliveries WHERE",
};

/// An argument of the list's statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

/// The list's statement for `f` in `dialect`, and its arguments, on either backend: the
/// same filters, cursor and order.
pub(super) fn list_query(f: &ListFilter, dialect: &Dialect) -> (String, Vec<Arg>) {
    let mut sql = format!("SELECT {SUMMARY} FROM events WHERE true");
    let mut args: Vec<Arg> = Vec::new();
    // `condition` with its `?` numbered as the next argument.
    let mut when = |condition: &str, value: Arg| {
        args.push(value);
        let n = format!("{}{}", dialect.param, args.len());
        sql.push_str(" AND ");
        sql.push_str(&condition.replace('?', &n));
    };
    if let Some(endpoint) = &f.endpoint {
        when("endpoint = ?", Arg::Text(endpoint.clone()));
    }
    // An event's status here is its deliveries' as much as its roll-up's: one with any delivery
    // dead (or waiting, or under way) is listed under that status, found through the partial
    // indexes of `deliveries` (`deliveries_dead`, `deliveries_queue`), so an event with one
    // route dead and another still pending is among the dead an owner must look at. Delivered
    // and stored are the roll-up (`events.status`).
    match f.status {
        Some(Status::Dead) => when(
            "events.id IN (SELECT event_id FROM deliveries WHERE status = ?)",
            Arg::Text(Status::Dead.as_str().to_string()),
        ),
        Some(status @ (Status::Pending | Status::Delivering)) => when(
            &format!(
                "events.id IN (SELECT event_id FROM {} status = ?)",
                dialect.queued
            ),
            Arg::Text(status.as_str().to_string()),
        ),
        Some(status) => when("events.status = ?", Arg::Text(status.as_str().to_string())),
        None => {}
    }
    if let Some(event_type) = &f.event_type {
        when("event_type = ?", Arg::Text(event_type.clone()));
    }
    if let Some(text) = &f.text {
        let contains = dialect.contains;
        when(
            &format!(
                "({contains}(dedup_key, ?) > 0 OR {contains}(coalesce(object_id, ''), ?) > 0)"
            ),
            Arg::Text(text.clone()),
        );
    }
    let few = matches!(
        f.status,
        Some(Status::Dead | Status::Pending | Status::Delivering)
    );
    let by_endpoint = f.endpoint.is_some() && !few;
    if let Some(before) = f.before {
        if by_endpoint {
            when(
                "(received_at, id) < (SELECT received_at, id FROM events WHERE id = ?)",
                Arg::Int(before),
            );
        } else {
            when("id < ?", Arg::Int(before));
        }
    }
    let order = if by_endpoint {
        "received_at DESC, id DESC"
    } else {
        "id DESC"
    };
    sql.push_str(&format!(" ORDER BY {order}"));
    if f.limit > 0 {
        args.push(Arg::Int(i64::try_from(f.limit).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT {}{}", dialect.param, args.len()));
    }
    (sql, args)
}

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
            route: route.as_deref(),
            ..Replay::default()
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
        let only = Replay {
            dead: true,
            endpoint: endpoint.as_deref(),
            route: route.as_deref(),
            ..Replay::default()
        };
        self.replay(&only, now_ms).await
    }

    /// Puts the chosen deliveries back to pending, due at `now_ms`, and their events with
    /// them, in one transaction; returns how many events.
    async fn replay(&self, only: &Replay<'_>, now_ms: i64) -> Result<usize, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.replay(only, now_ms).await,
            Engine::Postgres(pg) => pg.replay(only, now_ms).await,
        }
    }
}
