//! What `portaria events` and the status page look at and fix: the row types of one event
//! ([`EventSummary`], [`EventDetail`], [`RouteState`], [`Attempt`]; also what pruning reads
//! for the archive and a restore puts back), the list's filters ([`ListFilter`]) and its one
//! statement for both engines ([`list_query`], spelled by a [`Dialect`]), and replay per
//! event, route or dead delivery. Each engine runs them in its `events.rs`.

use super::{Origin, Status};

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
    /// A webhook, or taken from the gateway's API by `portaria reconcile`.
    pub origin: Origin,
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
    /// What verify-by-fetching got from the gateway for it (`fetch = true`); None when it
    /// was not fetched (set by one event's detail and the archive's batches, not by lists).
    pub fetched: Option<super::Fetched>,
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

/// Filters for `events list`, `events replay` and the status page: each one given narrows
/// the list, newest (highest id) first.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub endpoint: Option<String>,
    /// Only events with a delivery to this route (with `status`, that delivery's status).
    pub route: Option<String>,
    pub status: Option<Status>,
    /// A glob on the event type: `*` any run of characters, `?` any one, the rest itself.
    pub event_type: Option<String>,
    /// Text anywhere in the dedup key (for most providers, the event's or object's id).
    pub text: Option<String>,
    /// Only events received at or after this (unix milliseconds).
    pub since: Option<i64>,
    /// Only events received before this (unix milliseconds).
    pub until: Option<i64>,
    /// Only events with a smaller id: the cursor of the next page.
    pub before: Option<i64>,
    /// 0: no limit.
    pub limit: usize,
}

/// Which deliveries a replay puts back: one event's (`id`), or those of the events `filter`
/// lists (its cursor and limit aside); to `filter.route` only, and in `filter.status` only
/// (a delivery's own status: `dead` replays the dead ones), if given. Never one being
/// delivered.
#[derive(Debug, Clone, Default)]
pub(super) struct Replay {
    pub(super) id: Option<i64>,
    pub(super) filter: ListFilter,
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
             events.object_id, events.origin"
        )
    };
}
pub(super) const SUMMARY: &str = summary_columns!();
/// How many columns [`SUMMARY`] has: the columns an engine selects after it start here.
pub(super) const SUMMARY_LEN: usize = 11;
/// How a backend spells what the list's statement needs: its placeholders (`?1` or `$1`), the
/// test for text inside text, the deliveries waiting or under way (SQLite's through its
/// partial queue index, named: `INDEXED BY` is SQLite's alone), and a glob (SQLite's `GLOB`,
/// PostgreSQL's `LIKE` with the pattern translated). The rest of the statement is the same on
/// both.
pub(super) struct Dialect {
    param: &'static str,
    contains: &'static str,
    queued: &'static str,
    glob: &'static str,
    pattern: fn(&str) -> String,
    /// The stored body's columns, for `events export` (SQLite's with its codec).
    pub(super) body: &'static str,
}

pub(super) const SQLITE: Dialect = Dialect {
    param: "?",
    contains: "instr",
    queued: "deliveries INDEXED BY deliveries_queue WHERE next_attempt_at IS NOT NULL AND",
    glob: "event_type GLOB ?",
    // `*` and `?` are GLOB's own; a `[` would open a class, `[[]` is a `[`.
    pattern: |glob| glob.replace('[', "[[]"),
    body: "payloads.body, payloads.codec",
};
pub(super) const POSTGRES: Dialect = Dialect {
    param: "$",
    contains: "strpos",
    queued: "deliveries WHERE",
    glob: "event_type LIKE ? ESCAPE '\\'",
    pattern: |glob| {
        let mut like = String::with_capacity(glob.len() + 8);
        for c in glob.chars() {
            match c {
                '*' => like.push('%'),
                '?' => like.push('_'),
                '%' | '_' | '\\' => {
                    like.push('\\');
                    like.push(c);
                }
                c => like.push(c),
            }
        }
        like
    },
    body: "payloads.body",
};

/// An argument of the list's statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

/// A statement built a condition at a time, its `?`s numbered as its arguments.
pub(super) struct Sql<'d> {
    pub(super) sql: String,
    pub(super) args: Vec<Arg>,
    dialect: &'d Dialect,
}

impl<'d> Sql<'d> {
    pub(super) fn new(sql: String, dialect: &'d Dialect) -> Self {
        Sql {
            sql,
            args: Vec::new(),
            dialect,
        }
    }

    /// ` AND condition`, each `?` of it the next of `values`.
    pub(super) fn and(&mut self, condition: &str, values: impl IntoIterator<Item = Arg>) {
        self.sql.push_str(" AND ");
        let mut values = values.into_iter();
        for part in condition.split_inclusive('?') {
            match part.strip_suffix('?').zip(values.next()) {
                Some((text, value)) => {
                    self.args.push(value);
                    self.sql.push_str(text);
                    self.sql.push_str(&self.param());
                }
                None => self.sql.push_str(part),
            }
        }
    }

    /// The placeholder of the last argument.
    pub(super) fn param(&self) -> String {
        format!("{}{}", self.dialect.param, self.args.len())
    }

    /// What `f` says of an event's own row: its type, text, and received time.
    fn event_conditions(&mut self, f: &ListFilter) {
        if let Some(glob) = &f.event_type {
            let (condition, pattern) = (self.dialect.glob, (self.dialect.pattern)(glob));
            self.and(condition, [Arg::Text(pattern)]);
        }
        if let Some(text) = &f.text {
            let contains = self.dialect.contains;
            self.and(
                &format!(
                    "({contains}(dedup_key, ?) > 0 OR {contains}(coalesce(object_id, ''), ?) > 0)"
                ),
                [Arg::Text(text.clone()), Arg::Text(text.clone())],
            );
        }
        if let Some(since) = f.since {
            self.and("received_at >= ?", [Arg::Int(since)]);
        }
        if let Some(until) = f.until {
            self.and("received_at < ?", [Arg::Int(until)]);
        }
    }
}

fn text(s: &str) -> Arg {
    Arg::Text(s.to_string())
}

/// The list's statement for `f` in `dialect`, and its arguments, on either backend: the
/// same filters, cursor and order.
pub(super) fn list_query(f: &ListFilter, dialect: &Dialect) -> (String, Vec<Arg>) {
    let mut q = Sql::new(format!("SELECT {SUMMARY} FROM events WHERE true"), dialect);
    q.filter(f);
    let few = matches!(
        f.status,
        Some(Status::Dead | Status::Pending | Status::Delivering)
    );
    let by_endpoint = f.endpoint.is_some() && !few;
    if let Some(before) = f.before {
        if by_endpoint {
            q.and(
                "(received_at, id) < (SELECT received_at, id FROM events WHERE id = ?)",
                [Arg::Int(before)],
            );
        } else {
            q.and("id < ?", [Arg::Int(before)]);
        }
    }
    let order = if by_endpoint {
        "received_at DESC, id DESC"
    } else {
        "id DESC"
    };
    q.sql.push_str(&format!(" ORDER BY {order}"));
    q.limit(f.limit);
    (q.sql, q.args)
}

impl Sql<'_> {
    /// ` LIMIT n`, unless `n` is 0.
    pub(super) fn limit(&mut self, n: usize) {
        if n > 0 {
            self.args
                .push(Arg::Int(i64::try_from(n).unwrap_or(i64::MAX)));
            let limit = self.param();
            self.sql.push_str(&format!(" LIMIT {limit}"));
        }
    }

    /// Every condition of `f` but its cursor and limit.
    pub(super) fn filter(&mut self, f: &ListFilter) {
        let dialect = self.dialect;
        let q = self;
        if let Some(endpoint) = &f.endpoint {
            q.and("endpoint = ?", [text(endpoint)]);
        }
        // An event's status here is its deliveries' as much as its roll-up's: one with any delivery
        // dead (or waiting, or under way) is listed under that status, found through the partial
        // indexes of `deliveries` (`deliveries_dead`, `deliveries_queue`), so an event with one
        // route dead and another still pending is among the dead an owner must look at. Delivered
        // and stored are the roll-up (`events.status`). With a route, it is that delivery's.
        let route = f.route.as_deref().map(text);
        let of_route = if route.is_some() {
            " AND route = ?"
        } else {
            ""
        };
        match f.status {
            Some(s @ Status::Dead) => q.and(
                &format!(
                    "events.id IN (SELECT event_id FROM deliveries WHERE status = ?{of_route})"
                ),
                [text(s.as_str())].into_iter().chain(route),
            ),
            Some(s @ (Status::Pending | Status::Delivering)) => q.and(
                &format!(
                    "events.id IN (SELECT event_id FROM {} status = ?{of_route})",
                    dialect.queued
                ),
                [text(s.as_str())].into_iter().chain(route),
            ),
            Some(s) if route.is_none() => q.and("events.status = ?", [text(s.as_str())]),
            status => {
                if let Some(route) = route {
                    let of_status = if status.is_some() {
                        " AND d.status = ?"
                    } else {
                        ""
                    };
                    q.and(
                        &format!(
                            "EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id \
                         AND d.route = ?{of_status})"
                        ),
                        [route].into_iter().chain(status.map(|s| text(s.as_str()))),
                    );
                }
            }
        }
        q.event_conditions(f);
    }
}

/// The condition on `deliveries` that picks what `only` replays, and its arguments (from the
/// first placeholder): on the delivery's own endpoint, route, status and event, and on its
/// event's row through `events`' primary key.
pub(super) fn replay_where(only: &Replay, dialect: &Dialect) -> (String, Vec<Arg>) {
    let f = &only.filter;
    let mut q = Sql::new("status <> 'delivering'".to_string(), dialect);
    if let Some(id) = only.id {
        q.and("event_id = ?", [Arg::Int(id)]);
    }
    if let Some(endpoint) = &f.endpoint {
        q.and("endpoint = ?", [text(endpoint)]);
    }
    if let Some(route) = &f.route {
        q.and("route = ?", [text(route)]);
    }
    if let Some(status) = f.status {
        q.and("status = ?", [text(status.as_str())]);
    }
    let mut events = Sql {
        sql: String::new(),
        args: std::mem::take(&mut q.args),
        dialect,
    };
    events.event_conditions(f);
    q.args = events.args;
    if !events.sql.is_empty() {
        let of_event = format!(
            " AND event_id IN (SELECT id FROM events WHERE true{})",
            events.sql
        );
        q.sql.push_str(&of_event);
    }
    (q.sql, q.args)
}
