//! SQLite's side of `portaria events` and the status page's list, detail and replay: the
//! queries of `store/events.rs`'s methods, each one job (a read through the writer, so it sees
//! exactly what intake and the worker committed, or one read transaction on a read-only
//! store).

use rusqlite::{Connection, OptionalExtension, Row};

use super::payload::body_column;
use super::{Sqlite, status_column};
use crate::store::events::{Arg, Replay, SQLITE, SUMMARY, SUMMARY_LEN, list_query, replay_where};
use crate::store::export::{ExportCursor, Exported, export_query};
use crate::store::{
    Attempt, EventDetail, EventSummary, ListFilter, Origin, RouteState, StoreError,
};

impl Sqlite {
    pub(in crate::store) async fn list_events(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<EventSummary>, StoreError> {
        let filter = filter.clone();
        self.run(move |c| list(c, &filter)).await
    }

    pub(in crate::store) async fn event_detail(
        &self,
        id: i64,
    ) -> Result<Option<EventDetail>, StoreError> {
        self.run(move |c| event(c, id)).await
    }

    pub(in crate::store) async fn event_routes(
        &self,
        id: i64,
    ) -> Result<Vec<RouteState>, StoreError> {
        self.run(move |c| routes(c, id)).await
    }

    pub(in crate::store) async fn client_cert(
        &self,
        id: i64,
    ) -> Result<Option<String>, StoreError> {
        self.run(move |c| {
            c.query_row("SELECT client_cert FROM events WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map(Option::flatten)
        })
        .await
    }

    pub(in crate::store) async fn export_page(
        &self,
        filter: &ListFilter,
        after: Option<ExportCursor>,
        limit: usize,
        bodies: bool,
    ) -> Result<Vec<Exported>, StoreError> {
        let (sql, args) = export_query(filter, after, limit, bodies, &SQLITE);
        self.run(move |c| {
            let mut stmt = c.prepare_cached(&sql)?;
            stmt.query_map(rusqlite::params_from_iter(values(args)), |r| {
                let summary = summary(r)?;
                let body = match bodies {
                    true => Some(body_column(r, summary.id, SUMMARY_LEN + 1, SUMMARY_LEN)?),
                    false => None,
                };
                Ok(Exported { summary, body })
            })?
            .collect()
        })
        .await
    }

    /// Without `now_ms`, how many events it would put back.
    pub(in crate::store) async fn replay(
        &self,
        only: Replay,
        now_ms: Option<i64>,
    ) -> Result<usize, StoreError> {
        self.run(move |c| match now_ms {
            Some(now_ms) => replay(c, &only, now_ms),
            None => {
                let (cond, args) = replay_where(&only, &SQLITE);
                let sql = format!("SELECT count(DISTINCT event_id) FROM deliveries WHERE {cond}");
                let n: i64 =
                    c.query_row(&sql, rusqlite::params_from_iter(values(args)), |r| r.get(0))?;
                Ok(usize::try_from(n).unwrap_or(0))
            }
        })
        .await
    }
}

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
        origin: Origin::from_column(row.get::<_, Option<String>>(10)?.as_deref()),
    })
}

/// An event row selected as `{SUMMARY}, {DETAIL}` ([`DETAIL`]), without attempts; the body
/// decoded (`payload.rs`).
pub(super) fn detail(r: &Row<'_>) -> rusqlite::Result<EventDetail> {
    let summary = summary(r)?;
    Ok(EventDetail {
        content_type: r.get(SUMMARY_LEN)?,
        headers: r.get(SUMMARY_LEN + 1)?,
        body: body_column(r, summary.id, SUMMARY_LEN + 3, SUMMARY_LEN + 2)?,
        signed_id: r.get(SUMMARY_LEN + 4)?,
        event_type_signed: r.get(SUMMARY_LEN + 5)?,
        fetched: None,
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
pub(super) fn replay(conn: &Connection, only: &Replay, now_ms: i64) -> rusqlite::Result<usize> {
    let (cond, args) = replay_where(only, &SQLITE);
    let args = values(args);
    // A delivered attempt lives on its delivery row, which the replay resets: it gets a row of
    // its own first, so the history keeps it.
    conn.execute(
        &format!(
            "INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, outcome) \
             SELECT event_id, route, attempts, finished_at - delivered_ms, delivered_ms, \
             'delivered' FROM deliveries WHERE status = 'delivered' \
             AND delivered_ms IS NOT NULL AND {cond}"
        ),
        rusqlite::params_from_iter(&args),
    )?;
    let now = format!("?{}", args.len() + 1);
    let events: std::collections::BTreeSet<i64> = conn
        .prepare(&format!(
            "UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = {now}, \
             last_error = NULL, finished_at = NULL, delivered_ms = NULL \
             WHERE {cond} RETURNING event_id"
        ))?
        .query_map(
            rusqlite::params_from_iter(args.iter().chain([&now_ms.into()])),
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
    (sql, values(args))
}

fn values(args: Vec<Arg>) -> Vec<rusqlite::types::Value> {
    args.into_iter()
        .map(|a| match a {
            Arg::Text(s) => s.into(),
            Arg::Int(i) => i.into(),
        })
        .collect()
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
    detail.fetched = super::fetches::read(conn, id)?;
    Ok(Some(detail))
}
