//! The forwarding worker's side of the queue: claim due events (marking them `delivering`
//! before any attempt starts), record an attempt and move the event on, recover attempts cut
//! off by a crash, and say when the next event is due.
//!
//! Each query repeats `status IN ('pending', 'delivering')`, the WHERE of the partial index
//! `events_queue`: SQLite uses a partial index only for a query that states its condition, and
//! without it these would walk every event of the endpoint (a test below checks every plan).

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Status, Store, StoreError};

/// An event claimed for one delivery attempt (its status is now `delivering`): everything the
/// attempt hands to the target.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_id: i64,
    pub endpoint: String,
    pub dedup_key: String,
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    pub received_at_ms: i64,
    /// 1-based number of this attempt.
    pub attempt: u32,
    /// The request headers as stored (`name: value\r\n` each; credentials redacted).
    pub headers: Bytes,
    pub body: Bytes,
}

/// After recording an attempt, claim the next due event of this lane.
#[derive(Debug, Clone)]
pub struct ClaimNext {
    pub endpoint: String,
    /// Only the oldest unfinished event is a candidate (see [`Store::claim_due`]).
    pub in_order: bool,
    pub now_ms: i64,
}

/// One attempt the worker ran: which, when and for how long. What it came to is the
/// [`AfterAttempt`] recorded with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried {
    /// 1-based, as claimed.
    pub attempt: u32,
    pub started_at_ms: i64,
    pub duration_ms: i64,
}

/// What an attempt came to, and so what happens to its event: the one vocabulary of an
/// attempt's result between the worker and the database (the attempt row's `outcome` column
/// and the event's status both follow from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterAttempt {
    Delivered,
    /// Failed with this error; due again at this time (unix milliseconds).
    RetryAt {
        at_ms: i64,
        error: String,
    },
    /// Failed with this error, and it was the schedule's last try.
    Dead {
        error: String,
    },
}

impl AfterAttempt {
    /// The label of the attempt's outcome, in logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            AfterAttempt::Delivered => "delivered",
            AfterAttempt::RetryAt { .. } => "failed",
            AfterAttempt::Dead { .. } => "dead",
        }
    }

    /// Why it failed, if it did: a short text, safe to log and store.
    pub fn error(&self) -> Option<&str> {
        match self {
            AfterAttempt::Delivered => None,
            AfterAttempt::RetryAt { error, .. } | AfterAttempt::Dead { error } => Some(error),
        }
    }

    /// The attempt row's `outcome`: `delivered` or `failed` (`interrupted` is recovery's).
    fn recorded_as(&self) -> &'static str {
        match self {
            AfterAttempt::Delivered => "delivered",
            AfterAttempt::RetryAt { .. } | AfterAttempt::Dead { .. } => "failed",
        }
    }
}

impl Store {
    /// At start-up: attempts that were running when the process died go back to pending, due
    /// now, and are recorded as interrupted. Returns how many.
    pub async fn recover(&self, now_ms: i64) -> Result<usize, StoreError> {
        self.run_bookkeeping(move |conn| recover(conn, now_ms))
            .await
    }

    /// Unfinished (pending or delivering) events per endpoint, for the start-up check that
    /// every such event still has a forward target to go to.
    pub async fn unfinished_by_endpoint(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.run_bookkeeping(|conn| {
            conn.prepare(UNFINISHED_BY_ENDPOINT)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .await
    }

    /// Claims up to `limit` due events of `endpoint` for delivery. With `in_order`, only the
    /// oldest unfinished event is a candidate, so one endpoint's events go out in arrival order.
    pub async fn claim_due(
        &self,
        endpoint: String,
        limit: usize,
        in_order: bool,
        now_ms: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.run_bookkeeping(move |conn| claim_due(conn, &endpoint, limit, in_order, now_ms))
            .await
    }

    /// When the next event of `endpoint` becomes due (with `in_order`, only the head of the
    /// line counts), or None if none is waiting.
    pub async fn next_due(
        &self,
        endpoint: String,
        in_order: bool,
    ) -> Result<Option<i64>, StoreError> {
        self.run_bookkeeping(move |conn| next_due(conn, &endpoint, in_order))
            .await
    }

    /// Records one attempt and moves the event on; with `then`, claims the lane's next due
    /// event in the same transaction, so a busy lane costs one commit per delivery.
    pub async fn record_attempt(
        &self,
        event_id: i64,
        attempt: Tried,
        after: AfterAttempt,
        then: Option<ClaimNext>,
    ) -> Result<Option<Delivery>, StoreError> {
        self.run_bookkeeping(move |conn| {
            record_attempt(conn, event_id, &attempt, &after)?;
            let Some(next) = then else { return Ok(None) };
            let mut claimed = claim_due(conn, &next.endpoint, 1, next.in_order, next.now_ms)?;
            Ok(claimed.pop())
        })
        .await
    }

    /// SQLite's `data_version`: changes when another connection (say, `portaria events
    /// replay`) commits to the file.
    pub async fn data_version(&self) -> Result<i64, StoreError> {
        self.run_bookkeeping(|conn| conn.query_row("PRAGMA data_version", [], |r| r.get(0)))
            .await
    }
}

/// The delivering events, at start-up.
pub(super) const INTERRUPTED: &str = "SELECT id, attempts FROM events \
     WHERE status IN ('pending', 'delivering') AND status = 'delivering'";
/// The oldest unfinished event of an endpoint (the head of an in-order lane).
pub(super) const HEAD: &str = "SELECT id, status, next_attempt_at FROM events \
     WHERE endpoint = ?1 AND status IN ('pending', 'delivering') ORDER BY id LIMIT 1";
/// Due events of an endpoint, soonest first.
pub(super) const DUE: &str = "SELECT id FROM events \
     WHERE endpoint = ?1 AND status IN ('pending', 'delivering') AND status = 'pending' \
     AND next_attempt_at <= ?2 ORDER BY next_attempt_at, id LIMIT ?3";
/// Unfinished events per endpoint.
pub(super) const UNFINISHED_BY_ENDPOINT: &str = "SELECT endpoint, count(*) FROM events \
     WHERE status IN ('pending', 'delivering') GROUP BY endpoint";
/// When the next pending event of an endpoint is due.
pub(super) const NEXT_DUE: &str = "SELECT min(next_attempt_at) FROM events \
     WHERE endpoint = ?1 AND status IN ('pending', 'delivering') AND status = 'pending'";

pub(super) fn recover(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
    let interrupted: Vec<(i64, u32)> = conn
        .prepare(INTERRUPTED)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut record = conn.prepare(
        "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, error) \
         VALUES (?1, ?2, ?3, 0, 'interrupted', 'portaria stopped during this attempt')",
    )?;
    let mut requeue =
        conn.prepare("UPDATE events SET status = 'pending', next_attempt_at = ?2 WHERE id = ?1")?;
    for (id, attempt) in &interrupted {
        record.execute(params![id, attempt, now_ms])?;
        requeue.execute(params![id, now_ms])?;
    }
    Ok(interrupted.len())
}

pub(super) fn claim_due(
    conn: &Connection,
    endpoint: &str,
    limit: usize,
    in_order: bool,
    now_ms: i64,
) -> rusqlite::Result<Vec<Delivery>> {
    let ids: Vec<i64> = if in_order {
        // The head of the line: the oldest event not yet finished. If it is not due (or is
        // being delivered), nothing behind it may go first.
        match waiting_head(conn, endpoint)? {
            Some((id, due)) if due <= now_ms => vec![id],
            _ => Vec::new(),
        }
    } else {
        let mut due = conn.prepare_cached(DUE)?;
        due.query_map(params![endpoint, now_ms, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut claim = conn.prepare_cached(
        "UPDATE events SET status = 'delivering', attempts = attempts + 1 WHERE id = ?1 \
         RETURNING id, endpoint, dedup_key, event_type, content_type, received_at, attempts",
    )?;
    let mut payload =
        conn.prepare_cached("SELECT headers, body FROM payloads WHERE event_id = ?1")?;
    ids.into_iter()
        .map(|id| {
            let (headers, body) = payload.query_row([id], |r| {
                Ok((
                    Bytes::from(r.get::<_, Vec<u8>>(0)?),
                    Bytes::from(r.get::<_, Vec<u8>>(1)?),
                ))
            })?;
            claim.query_row([id], |r| {
                Ok(Delivery {
                    event_id: r.get(0)?,
                    endpoint: r.get(1)?,
                    dedup_key: r.get(2)?,
                    event_type: r.get(3)?,
                    content_type: r.get(4)?,
                    received_at_ms: r.get(5)?,
                    attempt: r.get(6)?,
                    headers,
                    body,
                })
            })
        })
        .collect()
}

pub(super) fn next_due(
    conn: &Connection,
    endpoint: &str,
    in_order: bool,
) -> rusqlite::Result<Option<i64>> {
    if in_order {
        return Ok(waiting_head(conn, endpoint)?.map(|(_, due)| due));
    }
    let mut next = conn.prepare_cached(NEXT_DUE)?;
    next.query_row([endpoint], |r| r.get(0))
}

/// The head of an in-order lane with when it is due, if it is waiting (pending) rather than
/// being delivered. A pending event without a due time (none should exist) counts as due
/// now, so it can never stall its lane.
fn waiting_head(conn: &Connection, endpoint: &str) -> rusqlite::Result<Option<(i64, i64)>> {
    let mut head = conn.prepare_cached(HEAD)?;
    let row: Option<(i64, String, Option<i64>)> = head
        .query_row([endpoint], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(row.and_then(|(id, status, due)| (status == "pending").then_some((id, due.unwrap_or(0)))))
}

pub(super) fn record_attempt(
    conn: &Connection,
    event_id: i64,
    attempt: &Tried,
    after: &AfterAttempt,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, error) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        event_id,
        attempt.attempt,
        attempt.started_at_ms,
        attempt.duration_ms,
        after.recorded_as(),
        after.error()
    ])?;
    let (status, next) = match after {
        AfterAttempt::Delivered => (Status::Delivered, None),
        AfterAttempt::RetryAt { at_ms, .. } => (Status::Pending, Some(*at_ms)),
        AfterAttempt::Dead { .. } => (Status::Dead, None),
    };
    let finished = attempt.started_at_ms + attempt.duration_ms;
    // Only an event still marked delivering moves on: a replay that raced this attempt wins.
    conn.prepare_cached(
        "UPDATE events SET status = ?2, next_attempt_at = ?3, last_error = ?4, \
         finished_at = CASE WHEN ?2 IN ('delivered', 'dead') THEN ?5 END \
         WHERE id = ?1 AND status = 'delivering'",
    )?
    .execute(params![
        event_id,
        status.as_str(),
        next,
        after.error(),
        finished
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Db;
    use super::super::fixtures::{NOW, row, temp_db};
    use super::*;

    #[test]
    fn the_queue_queries_read_the_queue_index_not_the_events() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("p.db")).unwrap();
        let none: &[&dyn rusqlite::ToSql] = &[];
        for (name, query, args) in [
            ("interrupted", INTERRUPTED, none),
            ("head", HEAD, params!["e"]),
            ("due", DUE, params!["e", 0, 1]),
            ("next due", NEXT_DUE, params!["e"]),
            ("unfinished", UNFINISHED_BY_ENDPOINT, none),
        ] {
            let mut stmt = db
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap();
            let plan: Vec<String> = stmt
                .query_map(args, |r| r.get(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let plan = plan.join("; ");
            assert!(plan.contains("events_queue"), "{name}: {plan}");
            // Walking the partial index is fine (it holds only unfinished events); walking the
            // table or the dedup index is not.
            let walks_all = plan
                .split("; ")
                .any(|step| step.starts_with("SCAN events") && !step.contains("events_queue"));
            assert!(!walks_all && !plan.contains("autoindex"), "{name}: {plan}");
        }
    }

    #[test]
    fn an_attempt_moves_on_only_an_event_still_delivering() {
        let (_dir, db) = temp_db();
        let id = row(&db, "a", "k", Status::Pending, 0);
        let claimed = claim_due(&db.conn, "a", 1, true, NOW).unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(
            claimed[0].body,
            Bytes::from_static(b"{}"),
            "the body comes with it"
        );
        // Meanwhile something else put the event back in the queue (a restart's recovery
        // in another process, say): the attempt's outcome is recorded, its status is not.
        db.conn
            .execute("UPDATE events SET status = 'pending' WHERE id = ?1", [id])
            .unwrap();
        let attempt = Tried {
            attempt: 1,
            started_at_ms: NOW,
            duration_ms: 5,
        };
        record_attempt(&db.conn, id, &attempt, &AfterAttempt::Delivered).unwrap();
        let event = db.event(id).unwrap().unwrap();
        assert_eq!(event.summary.status, Status::Pending);
        assert_eq!(
            event.attempts.len(),
            2,
            "the row's own and the one just recorded"
        );
        // Still delivering: it moves on.
        let id = row(&db, "b", "k", Status::Pending, 0);
        claim_due(&db.conn, "b", 1, true, NOW).unwrap();
        record_attempt(&db.conn, id, &attempt, &AfterAttempt::Delivered).unwrap();
        assert_eq!(
            db.event(id).unwrap().unwrap().summary.status,
            Status::Delivered
        );
    }
}
