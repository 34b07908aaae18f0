//! What the command line looks at and fixes: `events list`, `events show` and `events
//! replay` (per route). The row types here ([`EventSummary`], [`EventDetail`], [`RouteState`],
//! [`Attempt`]) are also what
//! pruning reads for the archive and what a restore puts back.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::payload::body_column;
use super::{Db, Status, StoreError, status_column};

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

impl Db {
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<EventSummary>, StoreError> {
        Ok(list(&self.conn, filter)?)
    }

    pub fn event(&self, id: i64) -> Result<Option<EventDetail>, StoreError> {
        Ok(event(&self.conn, id)?)
    }

    /// The names of the verified client certificate the event came with (mutual TLS), for
    /// `events show`; None without one (or no such event).
    pub fn client_cert(&self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT client_cert FROM events WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?
            .flatten())
    }

    /// An event's delivery to each route it matched (none for a stored event).
    pub fn routes(&self, id: i64) -> Result<Vec<RouteState>, StoreError> {
        Ok(routes(&self.conn, id)?)
    }

    /// Puts one event's deliveries (to `route` only, if given) back to pending with a fresh
    /// schedule. Returns false if it has no such delivery that is not being delivered right
    /// now (a stored event has none).
    pub fn replay(
        &mut self,
        id: i64,
        route: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let only = Replay {
            id: Some(id),
            route,
            ..Replay::default()
        };
        Ok(self.replay_where(&only, now_ms)? == 1)
    }

    /// Puts every dead delivery (of one endpoint and route, if given) back to pending.
    /// Returns how many events that touched.
    pub fn replay_dead(
        &mut self,
        endpoint: Option<&str>,
        route: Option<&str>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let only = Replay {
            dead: true,
            endpoint,
            route,
            ..Replay::default()
        };
        self.replay_where(&only, now_ms)
    }

    fn replay_where(&mut self, only: &Replay<'_>, now_ms: i64) -> Result<usize, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let n = replay(&tx, only, now_ms)?;
        tx.commit()?;
        Ok(n)
    }
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
/// The columns of an event's detail after [`SUMMARY`]'s (SQLite's; its payload joined).
pub(super) const DETAIL: &str = "content_type, headers, body, codec, signed_id, event_type_signed";

pub(super) fn summary(row: &Row<'_>) -> rusqlite::Result<EventSummary> {
    Ok(EventSummary {
        id: row.get(0)?,
        endpoint: row.get(1)?,
        dedup_key: row.get(2)?,
        event_type: row.get(3)?,
        received_at_ms: row.get(4)?,
        status: status_column(row, 5)?,
        attempts: row.get(6)?,
        next_attempt_at_ms: row.get(7)?,
        last_error: row.get(8)?,
        object_id: row.get(9)?,
    })
}

/// An event row selected as `{SUMMARY}, {DETAIL}` ([`DETAIL`]), without attempts; the body
/// decoded (`payload.rs`).
pub(super) fn detail(r: &Row<'_>) -> rusqlite::Result<EventDetail> {
    let summary = summary(r)?;
    Ok(EventDetail {
        content_type: r.get(10)?,
        headers: r.get(11)?,
        body: body_column(r, summary.id, 13, 12)?,
        signed_id: r.get(14)?,
        event_type_signed: r.get(15)?,
        summary,
        routes: Vec::new(),
        attempts: Vec::new(),
    })
}

pub(super) fn routes(conn: &Connection, event_id: i64) -> rusqlite::Result<Vec<RouteState>> {
    let mut stmt = conn.prepare_cached(
        "SELECT route, status, attempts, CASE WHEN status = 'pending' THEN next_attempt_at END, \
         last_error, finished_at, order_key FROM deliveries WHERE event_id = ?1 ORDER BY route",
    )?;
    stmt.query_map([event_id], |r| {
        Ok(RouteState {
            route: r.get(0)?,
            status: status_column(r, 1)?,
            attempts: r.get(2)?,
            next_attempt_at_ms: r.get(3)?,
            last_error: r.get(4)?,
            finished_at_ms: r.get(5)?,
            order_key: r.get(6)?,
        })
    })?
    .collect()
}

pub(super) fn attempts(conn: &Connection, event_id: i64) -> rusqlite::Result<Vec<Attempt>> {
    // The failed and interrupted attempts have rows; a delivered one is its delivery row, the
    // last of its route: after the rows that started in the same millisecond (NULLS LAST, as
    // PostgreSQL sorts it by default).
    let mut stmt = conn.prepare_cached(
        "SELECT attempt, started_at, duration_ms, outcome, error, route, id FROM attempts \
         WHERE event_id = ?1 \
         UNION ALL SELECT attempts, finished_at - delivered_ms, delivered_ms, 'delivered', \
           NULL, route, NULL FROM deliveries \
         WHERE event_id = ?1 AND status = 'delivered' AND delivered_ms IS NOT NULL \
         ORDER BY 2, 7 NULLS LAST",
    )?;
    stmt.query_map([event_id], |r| {
        Ok(Attempt {
            attempt: r.get(0)?,
            started_at_ms: r.get(1)?,
            duration_ms: r.get(2)?,
            outcome: r.get(3)?,
            error: r.get(4)?,
            route: r.get(5)?,
        })
    })?
    .collect()
}

/// Puts the chosen deliveries back to pending, due now, and their events with them; returns
/// how many events.
pub(super) fn replay(conn: &Connection, only: &Replay<'_>, now_ms: i64) -> rusqlite::Result<usize> {
    let (id, route, endpoint) = (only.id, only.route, only.endpoint);
    // A delivered attempt lives on its delivery row, which the replay resets: it gets a row of
    // its own first, so the history keeps it.
    conn.execute(
        "INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, outcome) \
         SELECT event_id, route, attempts, finished_at - delivered_ms, delivered_ms, 'delivered' \
         FROM deliveries WHERE status = 'delivered' AND delivered_ms IS NOT NULL \
         AND ?1 = 0 AND (?2 IS NULL OR event_id = ?2) AND (?3 IS NULL OR endpoint = ?3) \
         AND (?4 IS NULL OR route = ?4)",
        params![only.dead, id, endpoint, route],
    )?;
    let events: std::collections::BTreeSet<i64> = conn
        .prepare(
            "UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?1, \
             last_error = NULL, finished_at = NULL, delivered_ms = NULL \
             WHERE status != 'delivering' AND (?2 IS NULL OR event_id = ?2) \
             AND (?3 = 0 OR status = 'dead') AND (?4 IS NULL OR endpoint = ?4) \
             AND (?5 IS NULL OR route = ?5) RETURNING event_id",
        )?
        .query_map(
            params![now_ms, only.id, only.dead, only.endpoint, only.route],
            |r| r.get(0),
        )?
        .collect::<rusqlite::Result<_>>()?;
    let mut reopen =
        conn.prepare("UPDATE events SET status = 'pending', finished_at = NULL WHERE id = ?1")?;
    for id in &events {
        reopen.execute([id])?;
    }
    Ok(events.len())
}

/// Only the filters given become conditions, so each query can use the index it needs
/// (query plans: `dashboard.rs`'s tests). Newest first: by id, or, for one endpoint's events
/// of any status, by received time (then id) along `events_endpoint`; the two orders differ
/// only for events put back by `archive replay`, which get new ids. One endpoint's dead or
/// waiting events come by id from their partial indexes (`deliveries_dead`, `deliveries_queue`),
/// small however large `events` grows. `before` is the id of the last row of the page before.
pub(super) fn list(conn: &Connection, f: &ListFilter) -> rusqlite::Result<Vec<EventSummary>> {
    let (sql, args) = list_sql(f);
    let mut stmt = conn.prepare_cached(&sql)?;
    stmt.query_map(rusqlite::params_from_iter(args), summary)?
        .collect()
}

/// The statement [`list`] runs for `f`, and its arguments.
pub(super) fn list_sql(f: &ListFilter) -> (String, Vec<rusqlite::types::Value>) {
    let (sql, args) = list_query(f, &SQLITE);
    let args = args
        .into_iter()
        .map(|a| match a {
            Arg::Text(s) => s.into(),
            Arg::Int(i) => i.into(),
        })
        .collect();
    (sql, args)
}

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

pub(super) fn event(conn: &Connection, id: i64) -> rusqlite::Result<Option<EventDetail>> {
    let detail = conn
        .query_row(
            &format!(
                "SELECT {SUMMARY}, {DETAIL} FROM events \
                 JOIN payloads ON event_id = id WHERE id = ?1"
            ),
            [id],
            detail,
        )
        .optional()?;
    let Some(mut detail) = detail else {
        return Ok(None);
    };
    detail.routes = routes(conn, id)?;
    detail.attempts = attempts(conn, id)?;
    Ok(Some(detail))
}
