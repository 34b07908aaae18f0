//! What the command line looks at and fixes: `events list`, `events show` and `events
//! replay`. The row types here ([`EventSummary`], [`EventDetail`], [`Attempt`]) are also what
//! pruning reads for the archive and what a restore puts back.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Db, Status, StoreError, status_column};

/// An event as listed: everything but the body and headers.
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
}

/// One event in full, with its delivery attempts.
#[derive(Debug, Clone)]
pub struct EventDetail {
    pub summary: EventSummary,
    pub content_type: Option<String>,
    pub headers: Vec<u8>,
    pub body: Vec<u8>,
    pub attempts: Vec<Attempt>,
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

    /// Puts one event back to pending with a fresh schedule. Returns false if there is no
    /// such event or it is being delivered right now.
    pub fn replay(&mut self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let n = replay(&tx, Some(id), None, None, now_ms)?;
        tx.commit()?;
        Ok(n == 1)
    }

    /// Puts every dead event (of one endpoint, if given) back to pending.
    pub fn replay_dead(
        &mut self,
        endpoint: Option<&str>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let n = replay(&tx, None, Some(Status::Dead), endpoint, now_ms)?;
        tx.commit()?;
        Ok(n)
    }
}

pub(super) const SUMMARY: &str = "id, endpoint, dedup_key, event_type, received_at, status, attempts, \
                       next_attempt_at, last_error";

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
    })
}

/// An event row selected as `{SUMMARY}, content_type, headers, body`, without attempts.
pub(super) fn detail(r: &Row<'_>) -> rusqlite::Result<EventDetail> {
    Ok(EventDetail {
        summary: summary(r)?,
        content_type: r.get(9)?,
        headers: r.get(10)?,
        body: r.get(11)?,
        attempts: Vec::new(),
    })
}

pub(super) fn attempts(conn: &Connection, event_id: i64) -> rusqlite::Result<Vec<Attempt>> {
    let mut stmt = conn.prepare_cached(
        "SELECT attempt, started_at, duration_ms, outcome, error FROM attempts \
         WHERE event_id = ?1 ORDER BY id",
    )?;
    stmt.query_map([event_id], |r| {
        Ok(Attempt {
            attempt: r.get(0)?,
            started_at_ms: r.get(1)?,
            duration_ms: r.get(2)?,
            outcome: r.get(3)?,
            error: r.get(4)?,
        })
    })?
    .collect()
}

pub(super) fn replay(
    conn: &Connection,
    id: Option<i64>,
    status: Option<Status>,
    endpoint: Option<&str>,
    now_ms: i64,
) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE events SET status = 'pending', attempts = 0, next_attempt_at = ?1, \
         last_error = NULL, finished_at = NULL \
         WHERE status != 'delivering' AND status != 'stored' \
         AND (?2 IS NULL OR id = ?2) AND (?3 IS NULL OR status = ?3) \
         AND (?4 IS NULL OR endpoint = ?4)",
        params![now_ms, id, status.map(Status::as_str), endpoint],
    )
}

/// Only the filters given become conditions, so each query can use the index it needs
/// (query plans: `dashboard.rs`'s tests). Newest first: by id, or, for one endpoint's events
/// of any status, by received time (then id) along `events_endpoint`; the two orders differ
/// only for events put back by `archive replay`, which get new ids. One endpoint's dead or
/// waiting events come by id from their partial indexes (`events_dead`, `events_queue`),
/// small however large `events` grows. `before` is the id of the last row of the page before.
pub(super) fn list(conn: &Connection, f: &ListFilter) -> rusqlite::Result<Vec<EventSummary>> {
    let (sql, args) = list_sql(f);
    let mut stmt = conn.prepare_cached(&sql)?;
    stmt.query_map(rusqlite::params_from_iter(args), summary)?
        .collect()
}

/// The statement [`list`] runs for `f`, and its arguments.
pub(super) fn list_sql(f: &ListFilter) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = format!("SELECT {SUMMARY} FROM events WHERE 1");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    // `condition` with its `?` numbered as the next argument.
    let mut when = |condition: &str, value: rusqlite::types::Value| {
        args.push(value);
        let n = format!("?{}", args.len());
        sql.push_str(" AND ");
        sql.push_str(&condition.replace('?', &n));
    };
    if let Some(endpoint) = &f.endpoint {
        when("endpoint = ?", endpoint.clone().into());
    }
    if let Some(status) = f.status {
        when("status = ?", status.as_str().to_string().into());
    }
    if let Some(event_type) = &f.event_type {
        when("event_type = ?", event_type.clone().into());
    }
    if let Some(text) = &f.text {
        when("instr(dedup_key, ?) > 0", text.clone().into());
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
                before.into(),
            );
        } else {
            when("id < ?", before.into());
        }
    }
    let limit = if f.limit == 0 { -1 } else { f.limit as i64 };
    args.push(limit.into());
    let order = if by_endpoint {
        "received_at DESC, id DESC"
    } else {
        "id DESC"
    };
    sql.push_str(&format!(" ORDER BY {order} LIMIT ?{}", args.len()));
    (sql, args)
}

pub(super) fn event(conn: &Connection, id: i64) -> rusqlite::Result<Option<EventDetail>> {
    let detail = conn
        .query_row(
            &format!(
                "SELECT {SUMMARY}, content_type, headers, body FROM events \
                 JOIN payloads ON event_id = id WHERE id = ?1"
            ),
            [id],
            detail,
        )
        .optional()?;
    let Some(mut detail) = detail else {
        return Ok(None);
    };
    detail.attempts = attempts(conn, id)?;
    Ok(Some(detail))
}
