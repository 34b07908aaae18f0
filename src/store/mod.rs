//! The store: the only module that speaks SQL. It owns the SQLite file, its schema and
//! settings, and every query, named by intent.
//!
//! Two ways in:
//! - [`Store`], the server's async handle. Every read and write goes through one writer thread
//!   ([`writer`]) that commits all waiting jobs as one transaction (group commit). A caller's
//!   future resolves only after its transaction is durable (`synchronous=FULL`, WAL).
//! - [`Db`], a plain synchronous connection for the command line (`portaria events ...`),
//!   which may run while a server is up: WAL lets readers in, and writers wait on a busy
//!   timeout.

mod schema;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, Row, params};
use tokio::sync::oneshot;

use crate::verify::Verified;
use writer::{Finish, Job, Message};

/// Why the store could not do what was asked. Cloneable: one failed COMMIT is reported to
/// every request of its batch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(String),
    #[error("the database is closed")]
    Closed,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e.to_string())
    }
}

/// Where an event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Waiting for its first or next delivery attempt.
    Pending,
    /// An attempt is running (or was, when the process died: see [`Store::recover`]).
    Delivering,
    Delivered,
    /// Every attempt of the retry schedule failed; kept for an operator to replay.
    Dead,
    /// The endpoint has no forward target: the event only sits in the inbox.
    Stored,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Delivering,
        Status::Delivered,
        Status::Dead,
        Status::Stored,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Delivering => "delivering",
            Status::Delivered => "delivered",
            Status::Dead => "dead",
            Status::Stored => "stored",
        }
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                format!("unknown status `{s}` (pending, delivering, delivered, dead, stored)")
            })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`, so table columns (`{:<10}`) line up.
        f.pad(self.as_str())
    }
}

/// A verified webhook, ready to store. Building one takes the verifier's proof.
#[derive(Debug)]
pub struct NewEvent {
    endpoint: String,
    dedup_key: String,
    event_type: Option<String>,
    content_type: Option<String>,
    /// The request headers in HTTP/1 form, `name: value\r\n` each, exactly as received.
    headers: Vec<u8>,
    body: Bytes,
    received_at_ms: i64,
    /// Whether the endpoint forwards: decides `pending` or `stored`.
    forward: bool,
}

impl NewEvent {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        _proof: Verified,
        endpoint: &str,
        dedup_key: String,
        event_type: Option<String>,
        content_type: Option<String>,
        headers: Vec<u8>,
        body: Bytes,
        received_at_ms: i64,
        forward: bool,
    ) -> Self {
        NewEvent {
            endpoint: endpoint.to_string(),
            dedup_key,
            event_type,
            content_type,
            headers,
            body,
            received_at_ms,
            forward,
        }
    }
}

/// What inserting an event came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new row, with its id.
    New(i64),
    /// The (endpoint, dedup key) was already there: the id of the first one.
    Duplicate(i64),
}

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

/// An event claimed for one delivery attempt (its status is now `delivering`).
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub endpoint: String,
    pub dedup_key: String,
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    pub received_at_ms: i64,
    /// 1-based number of this attempt.
    pub attempt: u32,
    pub body: Bytes,
}

/// What happens to an event after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterAttempt {
    Delivered,
    RetryAt(i64),
    Dead,
}

/// Filters for `events list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub endpoint: Option<String>,
    pub status: Option<Status>,
    pub limit: usize,
}

/// The server's handle on the database. Cheap to clone; all clones share one writer thread.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    tx: Mutex<Option<mpsc::Sender<Message>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Store {
    /// Opens (creating if needed) the database and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = schema::open(path)?;
        let (tx, rx) = mpsc::channel();
        let thread = writer::spawn(conn, rx)
            .map_err(|e| StoreError::Sqlite(format!("cannot start the writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// Runs `f` on the writer thread inside the current batch's transaction and resolves once
    /// that transaction has committed. An error from `f` rolls back `f`'s work only.
    async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(Work { f, reply });
        let sent = match self.inner.tx.lock() {
            Ok(guard) => guard
                .as_ref()
                .is_some_and(|tx| tx.send(Message::Job(job)).is_ok()),
            Err(_) => false,
        };
        if !sent {
            return Err(StoreError::Closed);
        }
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Stores a verified event unless its (endpoint, dedup key) is already there. The barrier is
    /// the UNIQUE constraint inside the insert, so concurrent copies cannot both get in.
    pub async fn insert_event(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        self.run(move |conn| sql::insert_event(conn, &event)).await
    }

    /// At start-up: attempts that were running when the process died go back to pending, due
    /// now, and are recorded as interrupted. Returns how many.
    pub async fn recover(&self, now_ms: i64) -> Result<usize, StoreError> {
        self.run(move |conn| sql::recover(conn, now_ms)).await
    }

    /// Claims up to `limit` due events of `endpoint` for delivery. With `in_order`, only the
    /// oldest unfinished event is a candidate, so one endpoint's events go out in arrival order.
    pub async fn claim_due(
        &self,
        endpoint: String,
        limit: usize,
        in_order: bool,
        now_ms: i64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.run(move |conn| sql::claim_due(conn, &endpoint, limit, in_order, now_ms))
            .await
    }

    /// When the next event of `endpoint` becomes due (with `in_order`, only the head of the
    /// line counts), or None if none is waiting.
    pub async fn next_due(
        &self,
        endpoint: String,
        in_order: bool,
    ) -> Result<Option<i64>, StoreError> {
        self.run(move |conn| sql::next_due(conn, &endpoint, in_order))
            .await
    }

    /// Records one attempt and moves the event on.
    pub async fn record_attempt(
        &self,
        event_id: i64,
        attempt: Attempt,
        after: AfterAttempt,
    ) -> Result<(), StoreError> {
        self.run(move |conn| sql::record_attempt(conn, event_id, &attempt, &after))
            .await
    }

    /// SQLite's `data_version`: changes when another connection (say, `portaria events
    /// replay`) commits to the file.
    pub async fn data_version(&self) -> Result<i64, StoreError> {
        self.run(|conn| conn.query_row("PRAGMA data_version", [], |r| r.get(0)))
            .await
    }

    pub async fn event(&self, id: i64) -> Result<Option<EventDetail>, StoreError> {
        self.run(move |conn| sql::event(conn, id)).await
    }

    pub async fn list(&self, filter: ListFilter) -> Result<Vec<EventSummary>, StoreError> {
        self.run(move |conn| sql::list(conn, &filter)).await
    }

    /// Lets the queue drain, closes the database (checkpointing the WAL) and joins the writer.
    pub fn close(&self) {
        if let Ok(mut tx) = self.inner.tx.lock()
            && let Some(tx) = tx.take()
        {
            let _ = tx.send(Message::Close);
        }
        if let Ok(mut thread) = self.inner.thread.lock()
            && let Some(thread) = thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// A closure and the channel its caller waits on.
struct Work<F, T> {
    f: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<F, T> Job for Work<F, T>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish) {
        let Work { f, reply } = *self;
        let result = f(conn);
        let ok = result.is_ok();
        let finish: Finish = Box::new(move |committed| {
            let answer = committed.and_then(|()| result.map_err(StoreError::from));
            let _ = reply.send(answer);
        });
        (ok, finish)
    }

    fn abort(self: Box<Self>, err: StoreError) {
        let _ = self.reply.send(Err(err));
    }
}

/// A synchronous connection for the command line.
pub struct Db {
    conn: Connection,
}

impl Db {
    pub fn open(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open(path)?,
        })
    }

    pub fn list(&self, filter: &ListFilter) -> Result<Vec<EventSummary>, StoreError> {
        Ok(sql::list(&self.conn, filter)?)
    }

    pub fn event(&self, id: i64) -> Result<Option<EventDetail>, StoreError> {
        Ok(sql::event(&self.conn, id)?)
    }

    /// Puts one event back to pending with a fresh schedule. Returns false if there is no
    /// such event or it is being delivered right now.
    pub fn replay(&mut self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let n = sql::replay(&tx, Some(id), None, None, now_ms)?;
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
        let n = sql::replay(&tx, None, Some(Status::Dead), endpoint, now_ms)?;
        tx.commit()?;
        Ok(n)
    }

    /// Counts events by status, for tests and a quick look.
    pub fn count(&self, status: Status) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT count(*) FROM events WHERE status = ?1",
                [status.as_str()],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as usize)?)
    }
}

/// The queries, as plain functions of a connection, shared by [`Store`] and [`Db`].
mod sql {
    use super::*;

    const SUMMARY: &str = "id, endpoint, dedup_key, event_type, received_at, status, attempts, \
                           next_attempt_at, last_error";

    fn summary(row: &Row<'_>) -> rusqlite::Result<EventSummary> {
        let status: String = row.get(5)?;
        Ok(EventSummary {
            id: row.get(0)?,
            endpoint: row.get(1)?,
            dedup_key: row.get(2)?,
            event_type: row.get(3)?,
            received_at_ms: row.get(4)?,
            status: status.parse().map_err(|e: String| {
                rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, e.into())
            })?,
            attempts: row.get(6)?,
            next_attempt_at_ms: row.get(7)?,
            last_error: row.get(8)?,
        })
    }

    pub(super) fn insert_event(conn: &Connection, e: &NewEvent) -> rusqlite::Result<Inserted> {
        let status = if e.forward {
            Status::Pending
        } else {
            Status::Stored
        };
        let next = e.forward.then_some(e.received_at_ms);
        let mut insert = conn.prepare_cached(
            "INSERT INTO events (endpoint, dedup_key, event_type, content_type, headers, body, \
             received_at, status, next_attempt_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (endpoint, dedup_key) DO NOTHING",
        )?;
        let changed = insert.execute(params![
            e.endpoint,
            e.dedup_key,
            e.event_type,
            e.content_type,
            e.headers,
            &e.body[..],
            e.received_at_ms,
            status.as_str(),
            next,
        ])?;
        if changed == 1 {
            return Ok(Inserted::New(conn.last_insert_rowid()));
        }
        let mut existing =
            conn.prepare_cached("SELECT id FROM events WHERE endpoint = ?1 AND dedup_key = ?2")?;
        existing
            .query_row(params![e.endpoint, e.dedup_key], |r| r.get(0))
            .map(Inserted::Duplicate)
    }

    pub(super) fn recover(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
        conn.execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, error) \
             SELECT id, attempts, ?1, 0, 'interrupted', 'portaria stopped during this attempt' \
             FROM events WHERE status = 'delivering'",
            [now_ms],
        )?;
        conn.execute(
            "UPDATE events SET status = 'pending', next_attempt_at = ?1 WHERE status = 'delivering'",
            [now_ms],
        )
    }

    pub(super) fn claim_due(
        conn: &Connection,
        endpoint: &str,
        limit: usize,
        in_order: bool,
        now_ms: i64,
    ) -> rusqlite::Result<Vec<Claimed>> {
        let ids: Vec<i64> = if in_order {
            // The head of the line: the oldest event not yet finished. If it is not due (or is
            // being delivered), nothing behind it may go first.
            let mut head = conn.prepare_cached(
                "SELECT id, status, next_attempt_at FROM events \
                 WHERE endpoint = ?1 AND status IN ('pending', 'delivering') ORDER BY id LIMIT 1",
            )?;
            let row: Option<(i64, String, Option<i64>)> = head
                .query_row([endpoint], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            match row {
                Some((id, status, due)) if status == "pending" && due.unwrap_or(0) <= now_ms => {
                    vec![id]
                }
                _ => Vec::new(),
            }
        } else {
            let mut due = conn.prepare_cached(
                "SELECT id FROM events WHERE status = 'pending' AND endpoint = ?1 \
                 AND next_attempt_at <= ?2 ORDER BY next_attempt_at, id LIMIT ?3",
            )?;
            due.query_map(params![endpoint, now_ms, limit as i64], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?
        };
        let mut claim = conn.prepare_cached(
            "UPDATE events SET status = 'delivering', attempts = attempts + 1 WHERE id = ?1 \
             RETURNING id, endpoint, dedup_key, event_type, content_type, received_at, attempts, body",
        )?;
        ids.into_iter()
            .map(|id| {
                claim.query_row([id], |r| {
                    Ok(Claimed {
                        id: r.get(0)?,
                        endpoint: r.get(1)?,
                        dedup_key: r.get(2)?,
                        event_type: r.get(3)?,
                        content_type: r.get(4)?,
                        received_at_ms: r.get(5)?,
                        attempt: r.get(6)?,
                        body: Bytes::from(r.get::<_, Vec<u8>>(7)?),
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
            let mut head = conn.prepare_cached(
                "SELECT status, next_attempt_at FROM events \
                 WHERE endpoint = ?1 AND status IN ('pending', 'delivering') ORDER BY id LIMIT 1",
            )?;
            let row: Option<(String, Option<i64>)> = head
                .query_row([endpoint], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            return Ok(row.and_then(|(status, due)| if status == "pending" { due } else { None }));
        }
        let mut next = conn.prepare_cached(
            "SELECT min(next_attempt_at) FROM events WHERE status = 'pending' AND endpoint = ?1",
        )?;
        next.query_row([endpoint], |r| r.get(0))
    }

    pub(super) fn record_attempt(
        conn: &Connection,
        event_id: i64,
        attempt: &Attempt,
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
            attempt.outcome,
            attempt.error
        ])?;
        let (status, next) = match after {
            AfterAttempt::Delivered => (Status::Delivered, None),
            AfterAttempt::RetryAt(at) => (Status::Pending, Some(*at)),
            AfterAttempt::Dead => (Status::Dead, None),
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
            attempt.error,
            finished
        ])?;
        Ok(())
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

    pub(super) fn list(conn: &Connection, f: &ListFilter) -> rusqlite::Result<Vec<EventSummary>> {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {SUMMARY} FROM events WHERE (?1 IS NULL OR endpoint = ?1) \
             AND (?2 IS NULL OR status = ?2) ORDER BY id DESC LIMIT ?3"
        ))?;
        let limit = if f.limit == 0 { -1 } else { f.limit as i64 };
        stmt.query_map(
            params![f.endpoint, f.status.map(Status::as_str), limit],
            summary,
        )?
        .collect()
    }

    pub(super) fn event(conn: &Connection, id: i64) -> rusqlite::Result<Option<EventDetail>> {
        let detail = conn
            .query_row(
                &format!("SELECT {SUMMARY}, content_type, headers, body FROM events WHERE id = ?1"),
                [id],
                |r| {
                    Ok(EventDetail {
                        summary: summary(r)?,
                        content_type: r.get(9)?,
                        headers: r.get(10)?,
                        body: r.get(11)?,
                        attempts: Vec::new(),
                    })
                },
            )
            .optional()?;
        let Some(mut detail) = detail else {
            return Ok(None);
        };
        let mut stmt = conn.prepare_cached(
            "SELECT attempt, started_at, duration_ms, outcome, error FROM attempts \
             WHERE event_id = ?1 ORDER BY id",
        )?;
        detail.attempts = stmt
            .query_map([id], |r| {
                Ok(Attempt {
                    attempt: r.get(0)?,
                    started_at_ms: r.get(1)?,
                    duration_ms: r.get(2)?,
                    outcome: r.get(3)?,
                    error: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Some(detail))
    }
}
