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
//!
//! What pruning may remove is defined once, in `sql::PRUNABLE`: finished events past their
//! window. Pending and delivering events never match it.

mod checkpoint;
mod observe;
mod schema;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, Row, params};
use tokio::sync::oneshot;

use crate::verify::Verified;
pub use observe::QueueStats;
use writer::{Finish, Job, Message, Needs};

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
    /// [`dedup_hash`] of the endpoint and key, computed here on the request's task rather
    /// than on the writer thread.
    dedup_hash: i64,
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
            dedup_hash: dedup_hash(endpoint, &dedup_key),
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

/// What the dedup index holds for an (endpoint, dedup key): the first 8 bytes of SHA-256 over
/// the endpoint, a zero byte and the key, as a signed integer. Stored in every row, so it must
/// never change. Two keys may share a hash (about one chance in 10^8 among a million events);
/// the insert compares the full key, so they are still two events.
pub fn dedup_hash(endpoint: &str, dedup_key: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(endpoint.as_bytes())
        .chain_update([0u8])
        .chain_update(dedup_key.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
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

/// An event claimed for one delivery attempt (its status is now `delivering`): everything the
/// attempt hands to the target. The forwarding worker knows it as `forward::Delivery`.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub event_id: i64,
    pub endpoint: String,
    pub dedup_key: String,
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    pub received_at_ms: i64,
    /// 1-based number of this attempt.
    pub attempt: u32,
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

/// What happens to an event after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterAttempt {
    Delivered,
    RetryAt(i64),
    Dead,
}

impl AfterAttempt {
    /// The label of the attempt's outcome, in logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            AfterAttempt::Delivered => "delivered",
            AfterAttempt::RetryAt(_) => "failed",
            AfterAttempt::Dead => "dead",
        }
    }
}

/// Filters for `events list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub endpoint: Option<String>,
    pub status: Option<Status>,
    pub limit: usize,
}

/// Which events pruning may remove: delivered and stored ones received before
/// `finished_before_ms`, dead ones received before `dead_before_ms` (unix milliseconds).
/// Pending and delivering events are never removed, however old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    pub finished_before_ms: i64,
    pub dead_before_ms: i64,
}

/// One row that pruning deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub endpoint: String,
    pub status: Status,
    /// Stored headers and body.
    pub bytes: u64,
}

/// Events that pruning would remove now, for one endpoint and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunableGroup {
    pub endpoint: String,
    pub status: Status,
    pub events: u64,
    /// Stored headers and bodies.
    pub bytes: u64,
}

/// What one round of incremental vacuum gave back to the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// Pages cut from the end of the file.
    pub pages: u64,
    pub page_size: u64,
    /// Free pages still inside the file.
    pub free_left: u64,
}

impl Reclaimed {
    pub fn bytes(&self) -> u64 {
        self.pages * self.page_size
    }
}

/// What putting archived events back came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Restored {
    /// No row had the (endpoint, dedup key): a new pending row.
    pub inserted: usize,
    /// A finished row had it: back to pending with a fresh schedule.
    pub reset: usize,
    /// A pending or delivering row had it: already on its way, left alone.
    pub already_queued: usize,
}

/// The server's handle on the database. Cheap to clone; all clones share one writer thread.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// Jobs for the writer. Sending after `close` fails or is dropped with the queue, and the
    /// caller hears `Closed` either way, so the sender needs no lock of its own.
    tx: mpsc::Sender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Store {
    /// Opens (creating if needed) the database and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = schema::open(path)?;
        let (tx, rx) = mpsc::channel();
        let thread = writer::spawn(conn, path.to_path_buf(), rx)
            .map_err(|e| StoreError::Sqlite(format!("cannot start the writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                tx,
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
        self.submit(f, Needs::ALL, Message::Job).await
    }

    /// Like [`Store::run`], for delivery bookkeeping: the batch may commit without an fsync
    /// when nothing else in it needs one (see [`writer`]).
    async fn run_bookkeeping<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(f, Needs::BOOKKEEPING, Message::Job).await
    }

    /// Runs `f` on the writer thread alone, outside any transaction (after the batch in front
    /// of it has committed): for what SQLite refuses inside one, a WAL checkpoint.
    async fn run_solo<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(f, Needs::ALL, Message::Solo).await
    }

    async fn submit<T, F>(
        &self,
        f: F,
        needs: Needs,
        wrap: fn(Box<dyn Job>) -> Message,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(Work { f, needs, reply });
        if self.inner.tx.send(wrap(job)).is_err() {
            return Err(StoreError::Closed);
        }
        // A job still queued when the writer stops is dropped with its reply sender.
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Stores a verified event unless its (endpoint, dedup key) is already there. The barrier is
    /// the insert statement itself (`sql::INSERT_UNLESS_KNOWN`), so concurrent copies cannot
    /// both get in.
    pub async fn insert_event(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        // Two statements (the event, then its payload), standing or falling together in the
        // job's savepoint.
        self.run(move |conn| sql::insert_event(conn, &event)).await
    }

    /// At start-up: attempts that were running when the process died go back to pending, due
    /// now, and are recorded as interrupted. Returns how many.
    pub async fn recover(&self, now_ms: i64) -> Result<usize, StoreError> {
        self.run_bookkeeping(move |conn| sql::recover(conn, now_ms))
            .await
    }

    /// Unfinished (pending or delivering) events per endpoint, for the start-up check that
    /// every such event still has a forward target to go to.
    pub async fn unfinished_by_endpoint(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.run_bookkeeping(|conn| {
            conn.prepare(sql::UNFINISHED_BY_ENDPOINT)?
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
    ) -> Result<Vec<Claimed>, StoreError> {
        self.run_bookkeeping(move |conn| sql::claim_due(conn, &endpoint, limit, in_order, now_ms))
            .await
    }

    /// When the next event of `endpoint` becomes due (with `in_order`, only the head of the
    /// line counts), or None if none is waiting.
    pub async fn next_due(
        &self,
        endpoint: String,
        in_order: bool,
    ) -> Result<Option<i64>, StoreError> {
        self.run_bookkeeping(move |conn| sql::next_due(conn, &endpoint, in_order))
            .await
    }

    /// Records one attempt and moves the event on; with `then`, claims the lane's next due
    /// event in the same transaction, so a busy lane costs one commit per delivery.
    pub async fn record_attempt(
        &self,
        event_id: i64,
        attempt: Attempt,
        after: AfterAttempt,
        then: Option<ClaimNext>,
    ) -> Result<Option<Claimed>, StoreError> {
        self.run_bookkeeping(move |conn| {
            sql::record_attempt(conn, event_id, &attempt, &after)?;
            let Some(next) = then else { return Ok(None) };
            let mut claimed = sql::claim_due(conn, &next.endpoint, 1, next.in_order, next.now_ms)?;
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

    /// Up to `limit` prunable events in full (with attempts), oldest first, stopping early
    /// once their headers and bodies pass `byte_budget`: what the archive writes.
    pub async fn prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
        byte_budget: u64,
    ) -> Result<Vec<EventDetail>, StoreError> {
        self.run(move |conn| sql::prunable(conn, &cutoffs, limit, byte_budget))
            .await
    }

    /// Deletes these events (attempts go with them), each only if it is still prunable: one
    /// replayed since it was read stays.
    pub async fn delete_pruned(
        &self,
        cutoffs: Cutoffs,
        ids: Vec<i64>,
    ) -> Result<Vec<Removed>, StoreError> {
        self.run(move |conn| sql::delete_pruned(conn, &cutoffs, &ids))
            .await
    }

    /// Deletes up to `limit` prunable events, oldest first, without reading them.
    pub async fn delete_prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
    ) -> Result<Vec<Removed>, StoreError> {
        self.run(move |conn| sql::delete_prunable(conn, &cutoffs, limit))
            .await
    }

    /// Gives up to `max_pages` free pages back to the file system (incremental auto-vacuum).
    pub async fn reclaim_space(&self, max_pages: u32) -> Result<Reclaimed, StoreError> {
        self.run(move |conn| sql::reclaim_space(conn, max_pages))
            .await
    }

    /// Copies the WAL into the database file and truncates the WAL, so the space that
    /// [`Store::reclaim_space`] freed leaves the disk. Runs outside any transaction (SQLite
    /// refuses a checkpoint inside one). Returns false if a reader was in the way; the next
    /// checkpoint catches up.
    pub async fn checkpoint(&self) -> Result<bool, StoreError> {
        self.run_solo(sql::checkpoint).await
    }

    /// Lets the jobs queued so far finish, closes the database (checkpointing the WAL) and
    /// joins the writer. Jobs sent after this hear `Closed`.
    pub fn close(&self) {
        let _ = self.inner.tx.send(Message::Close);
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
    needs: Needs,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<F, T> Job for Work<F, T>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
{
    fn needs(&self) -> Needs {
        self.needs
    }

    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish) {
        let Work { f, reply, .. } = *self;
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
    /// Opens (creating if needed) the database for a command. A file with an older schema is
    /// refused: only the server upgrades a schema, since an older server still running on the
    /// file would fail every write after the upgrade.
    pub fn open(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open_with(path, schema::Upgrade::Refused)?,
        })
    }

    /// Opens an existing database for reading only: no schema change, no write, so any user
    /// who can read the file (and its `-wal`/`-shm`) can look, not only the service's own.
    pub fn open_read_only(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open_read_only(path)?,
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

    /// What pruning would remove now, by endpoint and status.
    pub fn prunable_counts(&self, cutoffs: Cutoffs) -> Result<Vec<PrunableGroup>, StoreError> {
        Ok(sql::prunable_counts(&self.conn, &cutoffs)?)
    }

    /// See [`Store::prunable`].
    pub fn prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
        byte_budget: u64,
    ) -> Result<Vec<EventDetail>, StoreError> {
        Ok(sql::prunable(&self.conn, &cutoffs, limit, byte_budget)?)
    }

    /// See [`Store::delete_pruned`].
    pub fn delete_pruned(
        &mut self,
        cutoffs: Cutoffs,
        ids: &[i64],
    ) -> Result<Vec<Removed>, StoreError> {
        self.write(|conn| sql::delete_pruned(conn, &cutoffs, ids))
    }

    /// See [`Store::delete_prunable`].
    pub fn delete_prunable(
        &mut self,
        cutoffs: Cutoffs,
        limit: usize,
    ) -> Result<Vec<Removed>, StoreError> {
        self.write(|conn| sql::delete_prunable(conn, &cutoffs, limit))
    }

    /// See [`Store::reclaim_space`].
    pub fn reclaim_space(&mut self, max_pages: u32) -> Result<Reclaimed, StoreError> {
        self.write(|conn| sql::reclaim_space(conn, max_pages))
    }

    /// See [`Store::checkpoint`].
    pub fn checkpoint(&self) -> Result<bool, StoreError> {
        Ok(sql::checkpoint(&self.conn)?)
    }

    /// Puts archived events back in the queue, due now, keeping their endpoint, dedup key,
    /// headers, body and received time. The dedup barrier decides: no row yet
    /// means a new pending row; a finished row (delivered, dead, stored) goes back to pending
    /// with a fresh schedule, like `events replay`; a pending or delivering row is left alone.
    /// Never a second row for one key. These events were verified when first received; the
    /// caller checks that their endpoint still forwards.
    pub fn restore(&mut self, events: &[EventDetail], now_ms: i64) -> Result<Restored, StoreError> {
        self.write(|conn| sql::restore(conn, events, now_ms))
    }

    /// Runs `f` in one IMMEDIATE transaction (the write lock first, so it waits on the busy
    /// timeout rather than failing half-way).
    fn write<T>(
        &mut self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
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

    /// The dedup barrier, one statement: the row goes in only if no row of the same endpoint
    /// and key exists (found through the narrow `events_dedup` index, then the full key
    /// compared). A statement runs whole under SQLite's write lock, so no other insert, from
    /// this process or another, can come between the check and the insert.
    pub(super) const INSERT_UNLESS_KNOWN: &str = "INSERT INTO events (endpoint, dedup_key, \
         dedup_hash, event_type, content_type, payload_bytes, received_at, status, \
         next_attempt_at) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 WHERE NOT EXISTS \
         (SELECT 1 FROM events WHERE dedup_hash = ?3 AND endpoint = ?1 AND dedup_key = ?2)";
    /// The headers and body of the event just inserted, in the same savepoint.
    const INSERT_PAYLOAD: &str =
        "INSERT INTO payloads (event_id, headers, body) VALUES (?1, ?2, ?3)";
    /// The row an (endpoint, key) already has.
    pub(super) const KNOWN: &str =
        "SELECT id FROM events WHERE dedup_hash = ?3 AND endpoint = ?1 AND dedup_key = ?2";

    pub(super) fn insert_event(conn: &Connection, e: &NewEvent) -> rusqlite::Result<Inserted> {
        let status = if e.forward {
            Status::Pending
        } else {
            Status::Stored
        };
        let next = e.forward.then_some(e.received_at_ms);
        let changed = conn.prepare_cached(INSERT_UNLESS_KNOWN)?.execute(params![
            e.endpoint,
            e.dedup_key,
            e.dedup_hash,
            e.event_type,
            e.content_type,
            (e.headers.len() + e.body.len()) as i64,
            e.received_at_ms,
            status.as_str(),
            next,
        ])?;
        if changed == 1 {
            let id = conn.last_insert_rowid();
            conn.prepare_cached(INSERT_PAYLOAD)?
                .execute(params![id, e.headers, &e.body[..]])?;
            return Ok(Inserted::New(id));
        }
        conn.prepare_cached(KNOWN)?
            .query_row(params![e.endpoint, e.dedup_key, e.dedup_hash], |r| r.get(0))
            .map(Inserted::Duplicate)
    }

    // The queue queries. Each repeats `status IN ('pending', 'delivering')`, the WHERE of the
    // partial index `events_queue`: SQLite uses a partial index only for a query that states
    // its condition, and without it these would walk every event of the endpoint (a test
    // below checks every plan).

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
        let mut requeue = conn
            .prepare("UPDATE events SET status = 'pending', next_attempt_at = ?2 WHERE id = ?1")?;
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
    ) -> rusqlite::Result<Vec<Claimed>> {
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
        let mut body = conn.prepare_cached("SELECT body FROM payloads WHERE event_id = ?1")?;
        ids.into_iter()
            .map(|id| {
                let body = Bytes::from(body.query_row([id], |r| r.get::<_, Vec<u8>>(0))?);
                claim.query_row([id], |r| {
                    Ok(Claimed {
                        event_id: r.get(0)?,
                        endpoint: r.get(1)?,
                        dedup_key: r.get(2)?,
                        event_type: r.get(3)?,
                        content_type: r.get(4)?,
                        received_at_ms: r.get(5)?,
                        attempt: r.get(6)?,
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
        Ok(row
            .and_then(|(id, status, due)| (status == "pending").then_some((id, due.unwrap_or(0)))))
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

    /// An event row selected as `{SUMMARY}, content_type, headers, body`, without attempts.
    fn detail(r: &Row<'_>) -> rusqlite::Result<EventDetail> {
        Ok(EventDetail {
            summary: summary(r)?,
            content_type: r.get(9)?,
            headers: r.get(10)?,
            body: r.get(11)?,
            attempts: Vec::new(),
        })
    }

    fn attempts(conn: &Connection, event_id: i64) -> rusqlite::Result<Vec<Attempt>> {
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

    /// The one definition of what pruning may remove (?1: the cut-off for delivered and stored
    /// events, ?2: for dead ones). It names finished statuses only: pending and delivering
    /// events never match, however old.
    const PRUNABLE: &str = "((status IN ('delivered', 'stored') AND received_at < ?1) \
                            OR (status = 'dead' AND received_at < ?2))";

    fn removed(r: &Row<'_>) -> rusqlite::Result<Removed> {
        let status: String = r.get(1)?;
        Ok(Removed {
            endpoint: r.get(0)?,
            status: status.parse().map_err(|e: String| {
                rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, e.into())
            })?,
            bytes: r.get::<_, i64>(2)? as u64,
        })
    }

    pub(super) fn prunable_counts(
        conn: &Connection,
        c: &Cutoffs,
    ) -> rusqlite::Result<Vec<PrunableGroup>> {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT endpoint, status, count(*), sum(payload_bytes) \
             FROM events WHERE {PRUNABLE} GROUP BY endpoint, status ORDER BY endpoint, status"
        ))?;
        stmt.query_map(params![c.finished_before_ms, c.dead_before_ms], |r| {
            let Removed {
                endpoint, status, ..
            } = removed(r)?;
            Ok(PrunableGroup {
                endpoint,
                status,
                events: r.get::<_, i64>(2)? as u64,
                bytes: r.get::<_, i64>(3)? as u64,
            })
        })?
        .collect()
    }

    pub(super) fn prunable(
        conn: &Connection,
        c: &Cutoffs,
        limit: usize,
        byte_budget: u64,
    ) -> rusqlite::Result<Vec<EventDetail>> {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {SUMMARY}, content_type, headers, body FROM events \
             JOIN payloads ON event_id = id WHERE {PRUNABLE} ORDER BY id LIMIT ?3"
        ))?;
        let mut rows = stmt.query(params![
            c.finished_before_ms,
            c.dead_before_ms,
            limit as i64
        ])?;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        // Bodies may be up to `max_body_bytes` each: bound the batch's memory, not only its rows.
        while bytes < byte_budget
            && let Some(row) = rows.next()?
        {
            let event = detail(row)?;
            bytes += (event.headers.len() + event.body.len()) as u64;
            out.push(event);
        }
        drop(rows);
        for event in &mut out {
            event.attempts = attempts(conn, event.summary.id)?;
        }
        Ok(out)
    }

    pub(super) fn delete_pruned(
        conn: &Connection,
        c: &Cutoffs,
        ids: &[i64],
    ) -> rusqlite::Result<Vec<Removed>> {
        let mut delete = conn.prepare_cached(&format!(
            "DELETE FROM events WHERE id = ?3 AND {PRUNABLE} \
             RETURNING endpoint, status, payload_bytes"
        ))?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(gone) = delete
                .query_row(params![c.finished_before_ms, c.dead_before_ms, id], removed)
                .optional()?
            {
                out.push(gone);
            }
        }
        Ok(out)
    }

    pub(super) fn delete_prunable(
        conn: &Connection,
        c: &Cutoffs,
        limit: usize,
    ) -> rusqlite::Result<Vec<Removed>> {
        let mut delete = conn.prepare_cached(&format!(
            "DELETE FROM events WHERE id IN \
             (SELECT id FROM events WHERE {PRUNABLE} ORDER BY id LIMIT ?3) \
             RETURNING endpoint, status, payload_bytes"
        ))?;
        delete
            .query_map(
                params![c.finished_before_ms, c.dead_before_ms, limit as i64],
                removed,
            )?
            .collect()
    }

    pub(super) fn reclaim_space(conn: &Connection, max_pages: u32) -> rusqlite::Result<Reclaimed> {
        let pragma = |name: &str| conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0));
        let before: i64 = pragma("freelist_count")?;
        // The pragma yields one row per page it frees: step it to the end, or only one goes.
        let mut vacuum =
            conn.prepare(&format!("PRAGMA incremental_vacuum({})", max_pages.max(1)))?;
        let mut rows = vacuum.query([])?;
        while rows.next()?.is_some() {}
        drop(rows);
        let after: i64 = pragma("freelist_count")?;
        let page_size: i64 = pragma("page_size")?;
        Ok(Reclaimed {
            pages: (before - after).max(0) as u64,
            page_size: page_size as u64,
            free_left: after as u64,
        })
    }

    pub(super) fn checkpoint(conn: &Connection) -> rusqlite::Result<bool> {
        // TRUNCATE waits on the busy handler for readers (an operator's `events list`). On the
        // server, intake queues behind this job, so it must not wait: with no busy handler it
        // copies what it can, and the next checkpoint (SQLite's own, or the next prune)
        // catches up.
        conn.busy_timeout(Duration::ZERO)?;
        let result = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        });
        conn.busy_timeout(schema::BUSY_TIMEOUT)?;
        match result {
            Ok(busy) => Ok(busy == 0),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn restore(
        conn: &Connection,
        events: &[EventDetail],
        now_ms: i64,
    ) -> rusqlite::Result<Restored> {
        let mut insert = conn.prepare_cached(INSERT_UNLESS_KNOWN)?;
        let mut reset = conn.prepare_cached(
            "UPDATE events SET status = 'pending', attempts = 0, next_attempt_at = ?3, \
             last_error = NULL, finished_at = NULL \
             WHERE dedup_hash = ?4 AND endpoint = ?1 AND dedup_key = ?2 \
             AND status IN ('delivered', 'dead', 'stored')",
        )?;
        let mut out = Restored::default();
        for e in events {
            let s = &e.summary;
            let hash = dedup_hash(&s.endpoint, &s.dedup_key);
            let inserted = insert.execute(params![
                s.endpoint,
                s.dedup_key,
                hash,
                s.event_type,
                e.content_type,
                (e.headers.len() + e.body.len()) as i64,
                s.received_at_ms,
                Status::Pending.as_str(),
                now_ms,
            ])?;
            if inserted == 1 {
                let id = conn.last_insert_rowid();
                conn.prepare_cached(INSERT_PAYLOAD)?
                    .execute(params![id, e.headers, e.body])?;
                out.inserted += 1;
            } else if reset.execute(params![s.endpoint, s.dedup_key, now_ms, hash])? == 1 {
                out.reset += 1;
            } else {
                out.already_queued += 1;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PRAGMA synchronous` as a job sees it inside its batch: 1 NORMAL, 2 FULL.
    fn synchronous(conn: &Connection) -> rusqlite::Result<i64> {
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
    }

    #[test]
    fn the_queue_queries_read_the_queue_index_not_the_events() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("p.db")).unwrap();
        let none: &[&dyn rusqlite::ToSql] = &[];
        for (name, query, args) in [
            ("interrupted", sql::INTERRUPTED, none),
            ("head", sql::HEAD, params!["e"]),
            ("due", sql::DUE, params!["e", 0, 1]),
            ("next due", sql::NEXT_DUE, params!["e"]),
            ("unfinished", sql::UNFINISHED_BY_ENDPOINT, none),
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

    #[tokio::test]
    async fn the_checkpoint_thread_keeps_the_wal_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let store = Store::open(&path).unwrap();
        let wal = dir.path().join("p.db-wal");
        let mut largest = 0;
        // Four times the checkpoint threshold in events of 1 KB, 100 per commit.
        let threshold = checkpoint::CHECKPOINT_PAGES as u64 * 1024;
        for batch in 0..(4 * threshold / 100_000) {
            store
                .run(move |conn| {
                    let mut insert = conn.prepare_cached(
                        "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                         received_at, status) VALUES ('e', ?1, ?2, 1000, 0, 'stored')",
                    )?;
                    let mut payload = conn.prepare_cached(
                        "INSERT INTO payloads (event_id, headers, body) \
                         VALUES (last_insert_rowid(), x'', zeroblob(1000))",
                    )?;
                    for n in 0..100 {
                        let key = format!("{batch}-{n}");
                        insert.execute(params![key, dedup_hash("e", &key)])?;
                        payload.execute([])?;
                    }
                    Ok(())
                })
                .await
                .unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        let threshold = checkpoint::CHECKPOINT_PAGES as u64 * 1024;
        assert!(
            largest > threshold / 2,
            "the test wrote enough to need checkpoints"
        );
        assert!(
            largest < 3 * threshold,
            "the WAL started over: at most {largest} bytes"
        );
        let pages: i64 = store
            .run(|c| c.query_row("PRAGMA page_size", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(pages, 1024);
        store.close();
        assert!(!wal.exists(), "closing checkpoints and removes the WAL");
    }

    #[tokio::test]
    async fn after_close_every_job_hears_closed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        assert_eq!(
            store
                .run(|c| c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)))
                .await
                .unwrap(),
            1
        );
        store.close();
        let late = store
            .run(|c| c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)))
            .await;
        assert!(matches!(late, Err(StoreError::Closed)), "{late:?}");
        store.close(); // a second close is harmless
    }

    #[tokio::test]
    async fn bookkeeping_alone_commits_without_fsync_but_never_alongside_an_insert() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        assert_eq!(
            store.run_bookkeeping(synchronous).await.unwrap(),
            1,
            "NORMAL"
        );
        assert_eq!(store.run(synchronous).await.unwrap(), 2, "FULL by default");
        assert_eq!(store.run_bookkeeping(synchronous).await.unwrap(), 1);

        // Queued together (while the writer is busy), they share one batch, which then needs
        // the fsync.
        let busy = store.run(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            Ok(())
        });
        let queued = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tokio::join!(store.run_bookkeeping(synchronous), store.run(synchronous))
        };
        let (busy, (a, b)) = tokio::join!(busy, queued);
        busy.unwrap();
        assert_eq!((a.unwrap(), b.unwrap()), (2, 2));
        store.close();
    }

    fn put(key: &'static str) -> impl FnOnce(&Connection) -> rusqlite::Result<()> {
        move |conn| {
            conn.execute("INSERT INTO meta (key, value) VALUES (?1, 1)", [key])
                .map(drop)
        }
    }

    async fn meta_keys(store: &Store) -> Vec<String> {
        store
            .run(|conn| {
                conn.prepare("SELECT key FROM meta ORDER BY key")?
                    .query_map([], |r| r.get(0))?
                    .collect()
            })
            .await
            .unwrap()
    }

    /// Runs `jobs` as one batch: queued together while the writer is busy with another job.
    async fn one_batch<A, B, C>(store: &Store, jobs: (A, B, C)) -> [Result<(), StoreError>; 3]
    where
        A: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
        B: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
        C: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
    {
        let busy = store.run(|_| {
            std::thread::sleep(std::time::Duration::from_millis(150));
            Ok(())
        });
        let queued = async {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            tokio::join!(store.run(jobs.0), store.run(jobs.1), store.run(jobs.2))
        };
        let (busy, (a, b, c)) = tokio::join!(busy, queued);
        busy.unwrap();
        [a, b, c]
    }

    #[tokio::test]
    async fn a_failing_job_rolls_back_alone_and_the_rest_of_its_batch_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let half_then_fail = |conn: &Connection| {
            put("b")(conn)?;
            Err(rusqlite::Error::QueryReturnedNoRows)
        };
        let [a, b, c] = one_batch(&store, (put("a"), half_then_fail, put("c"))).await;
        assert!(a.is_ok() && b.is_err() && c.is_ok(), "{a:?} {b:?} {c:?}");
        assert_eq!(
            meta_keys(&store).await,
            ["a", "c"],
            "b's first statement is undone"
        );
        store.close();
    }

    #[tokio::test]
    async fn a_transaction_the_database_rolls_back_fails_the_whole_batch_and_commits_none_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        // What SQLite does by itself on disk full or an I/O error, done here by hand.
        let rolled_back = |conn: &Connection| conn.execute_batch("ROLLBACK");
        let [a, b, c] = one_batch(&store, (put("a"), rolled_back, put("c"))).await;
        assert!(a.is_err() && b.is_err() && c.is_err(), "{a:?} {b:?} {c:?}");
        assert!(
            meta_keys(&store).await.is_empty(),
            "c did not commit on its own"
        );
        // The writer goes on.
        store.run(put("d")).await.unwrap();
        assert_eq!(meta_keys(&store).await, ["d"]);
        store.close();
    }

    const DAY: i64 = 86_400_000;
    const NOW: i64 = 1_796_026_524_000;

    /// Inserts a row as it would be after its life so far; returns its id.
    fn row(db: &Db, endpoint: &str, key: &str, status: Status, age_days: i64) -> i64 {
        db.conn
            .execute(
                "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
                 status, next_attempt_at) VALUES (?1, ?2, ?5, 2, ?3, ?4, ?3)",
                params![
                    endpoint,
                    key,
                    NOW - age_days * DAY,
                    status.as_str(),
                    dedup_hash(endpoint, key)
                ],
            )
            .unwrap();
        let id = db.conn.last_insert_rowid();
        db.conn
            .execute(
                "INSERT INTO payloads (event_id, headers, body) VALUES (?1, x'', x'7b7d')",
                [id],
            )
            .unwrap();
        db.conn
            .execute(
                "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome) \
                 VALUES (?1, 1, ?2, 5, 'failed')",
                params![id, NOW - age_days * DAY],
            )
            .unwrap();
        id
    }

    fn ids(db: &Db) -> Vec<i64> {
        let mut stmt = db
            .conn
            .prepare("SELECT id FROM events ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn temp_db() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("p.db")).unwrap();
        (dir, db)
    }

    const CUTOFFS: Cutoffs = Cutoffs {
        finished_before_ms: NOW - 30 * DAY,
        dead_before_ms: NOW - 90 * DAY,
    };

    #[test]
    fn only_finished_events_past_their_window_are_prunable() {
        let (_dir, mut db) = temp_db();
        let mut keep = Vec::new();
        let mut gone = Vec::new();
        for (i, status) in Status::ALL.into_iter().enumerate() {
            let young = row(&db, "a", &format!("young-{i}"), status, 29);
            let old = row(&db, "a", &format!("old-{i}"), status, 31);
            let ancient = row(&db, "a", &format!("ancient-{i}"), status, 91);
            keep.push(young);
            match status {
                Status::Delivered | Status::Stored => gone.extend([old, ancient]),
                Status::Dead => {
                    keep.push(old);
                    gone.push(ancient);
                }
                Status::Pending | Status::Delivering => keep.extend([old, ancient]),
            }
        }
        let counts = db.prunable_counts(CUTOFFS).unwrap();
        let summary: Vec<(Status, u64)> = counts.iter().map(|g| (g.status, g.events)).collect();
        assert_eq!(
            summary,
            [
                (Status::Dead, 1),
                (Status::Delivered, 2),
                (Status::Stored, 2)
            ]
        );
        let removed = db.delete_prunable(CUTOFFS, 500).unwrap();
        assert_eq!(removed.len(), gone.len());
        keep.sort();
        assert_eq!(ids(&db), keep);
        let orphans: i64 = db
            .conn
            .query_row(
                "SELECT count(*) FROM attempts WHERE event_id NOT IN (SELECT id FROM events)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0, "attempts go with their event");
    }

    #[test]
    fn deleting_an_archived_batch_spares_an_event_replayed_since_it_was_read() {
        let (_dir, mut db) = temp_db();
        let a = row(&db, "a", "k1", Status::Delivered, 40);
        let b = row(&db, "a", "k2", Status::Dead, 100);
        let batch = db.prunable(CUTOFFS, 500, u64::MAX).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[1].attempts.len(), 1, "read with its attempts");
        assert!(db.replay(b, NOW).unwrap());
        let removed = db.delete_pruned(CUTOFFS, &[a, b]).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(ids(&db), [b]);
    }

    #[test]
    fn a_batch_stops_at_its_byte_budget_but_takes_at_least_one_event() {
        let (_dir, db) = temp_db();
        for i in 0..5 {
            row(&db, "a", &format!("k{i}"), Status::Delivered, 40);
        }
        // Each row holds a 2-byte body and no headers.
        assert_eq!(db.prunable(CUTOFFS, 500, 1).unwrap().len(), 1);
        assert_eq!(db.prunable(CUTOFFS, 500, 5).unwrap().len(), 3);
        assert_eq!(db.prunable(CUTOFFS, 2, u64::MAX).unwrap().len(), 2);
    }

    #[test]
    fn an_attempt_moves_on_only_an_event_still_delivering() {
        let (_dir, db) = temp_db();
        let id = row(&db, "a", "k", Status::Pending, 0);
        let claimed = sql::claim_due(&db.conn, "a", 1, true, NOW).unwrap();
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
        let attempt = Attempt {
            attempt: 1,
            started_at_ms: NOW,
            duration_ms: 5,
            outcome: "delivered".into(),
            error: None,
        };
        sql::record_attempt(&db.conn, id, &attempt, &AfterAttempt::Delivered).unwrap();
        let event = db.event(id).unwrap().unwrap();
        assert_eq!(event.summary.status, Status::Pending);
        assert_eq!(
            event.attempts.len(),
            2,
            "the row's own and the one just recorded"
        );
        // Still delivering: it moves on.
        let id = row(&db, "b", "k", Status::Pending, 0);
        sql::claim_due(&db.conn, "b", 1, true, NOW).unwrap();
        sql::record_attempt(&db.conn, id, &attempt, &AfterAttempt::Delivered).unwrap();
        assert_eq!(
            db.event(id).unwrap().unwrap().summary.status,
            Status::Delivered
        );
    }

    #[test]
    fn restoring_never_makes_a_second_row_for_one_key() {
        let (_dir, mut db) = temp_db();
        let delivered = row(&db, "a", "delivered", Status::Delivered, 1);
        let pending = row(&db, "a", "pending", Status::Pending, 1);
        let archived = |key: &str| EventDetail {
            summary: EventSummary {
                id: 999,
                endpoint: "a".into(),
                dedup_key: key.into(),
                event_type: Some("t".into()),
                received_at_ms: NOW - 200 * DAY,
                status: Status::Delivered,
                attempts: 1,
                next_attempt_at_ms: None,
                last_error: None,
            },
            content_type: None,
            headers: b"x: y\r\n".to_vec(),
            body: b"{}".to_vec(),
            attempts: Vec::new(),
        };
        let events = [archived("gone"), archived("delivered"), archived("pending")];
        let restored = db.restore(&events, NOW).unwrap();
        assert_eq!(
            restored,
            Restored {
                inserted: 1,
                reset: 1,
                already_queued: 1
            }
        );
        let again = db.restore(&events, NOW).unwrap();
        assert_eq!(again.already_queued, 3, "all pending now: left alone");
        assert_eq!(ids(&db).len(), 3);
        let new = db
            .list(&ListFilter::default())
            .unwrap()
            .into_iter()
            .find(|e| e.dedup_key == "gone")
            .unwrap();
        assert_eq!(new.status, Status::Pending);
        assert_eq!(
            new.received_at_ms,
            NOW - 200 * DAY,
            "keeps its received time"
        );
        assert_eq!(new.next_attempt_at_ms, Some(NOW), "due now");
        let restored = db.event(new.id).unwrap().expect("with its payload");
        assert_eq!(
            (restored.headers, restored.body),
            (b"x: y\r\n".to_vec(), b"{}".to_vec()),
            "headers and body come back as archived"
        );
        for id in [delivered, pending] {
            assert_eq!(
                db.event(id).unwrap().unwrap().summary.status,
                Status::Pending
            );
        }
    }

    fn new_event(endpoint: &str, key: &str) -> NewEvent {
        NewEvent {
            endpoint: endpoint.into(),
            dedup_key: key.into(),
            dedup_hash: dedup_hash(endpoint, key),
            event_type: None,
            content_type: None,
            headers: b"x: y\r\n".to_vec(),
            body: Bytes::from_static(b"{}"),
            received_at_ms: NOW,
            forward: false,
        }
    }

    #[test]
    fn the_dedup_hash_is_fixed_and_covers_the_endpoint() {
        // Stored in every row: a change here would let every old event in again.
        // Computed independently: SHA-256 of b"pagarme\0hook_1", first 8 bytes, big-endian.
        assert_eq!(
            dedup_hash("pagarme", "hook_1"),
            0x54d0_7625_2da8_a59c_u64 as i64
        );
        assert_eq!(dedup_hash("", ""), 0x6e34_0b9c_ffb3_7a98_u64 as i64);
        assert_ne!(dedup_hash("a", "b"), dedup_hash("b", "a"));
        assert_ne!(dedup_hash("ab", "c"), dedup_hash("a", "bc"));
    }

    #[test]
    fn keys_sharing_a_hash_are_still_two_events() {
        let (_dir, db) = temp_db();
        // Another key already holds the hash of "k" (a collision, forced).
        db.conn
            .execute(
                "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status) VALUES ('a', 'other', ?1, 0, 0, 'stored')",
                [dedup_hash("a", "k")],
            )
            .unwrap();
        let other = db.conn.last_insert_rowid();
        let first = sql::insert_event(&db.conn, &new_event("a", "k")).unwrap();
        let Inserted::New(id) = first else {
            panic!("a different key is a new event, whatever its hash: {first:?}");
        };
        assert_eq!(
            sql::insert_event(&db.conn, &new_event("a", "k")).unwrap(),
            Inserted::Duplicate(id)
        );
        let mut other_again = new_event("a", "other");
        other_again.dedup_hash = dedup_hash("a", "k");
        assert_eq!(
            sql::insert_event(&db.conn, &other_again).unwrap(),
            Inserted::Duplicate(other)
        );
        // The same key on another endpoint is another event.
        assert!(matches!(
            sql::insert_event(&db.conn, &new_event("b", "k")).unwrap(),
            Inserted::New(_)
        ));
        assert_eq!(ids(&db).len(), 3);
    }

    #[test]
    fn the_dedup_queries_read_the_narrow_index() {
        let (_dir, db) = temp_db();
        let none = None::<String>;
        for (query, args) in [
            (
                sql::INSERT_UNLESS_KNOWN,
                params!["a", "k", 1, none, none, 0, 0, "stored", 0],
            ),
            (sql::KNOWN, params!["a", "k", 1]),
        ] {
            let plan: Vec<String> = db
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap()
                .query_map(args, |r| r.get(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let plan = plan.join("; ");
            assert!(
                plan.contains("USING INDEX events_dedup (dedup_hash=?)"),
                "{query}: {plan}"
            );
        }
    }

    #[test]
    fn a_file_from_a_newer_portaria_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
            .unwrap();
        let err = Db::open(&path).err().expect("refused").to_string();
        assert!(err.contains("schema version 99 is newer"), "{err}");
        let tables: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing created in it");
    }

    /// The whole schema of version 2, as released before the narrow dedup index.
    const SCHEMA_V2: &str = "
        CREATE TABLE events (
            id INTEGER PRIMARY KEY, endpoint TEXT NOT NULL, dedup_key TEXT NOT NULL,
            event_type TEXT, content_type TEXT, headers BLOB NOT NULL, body BLOB NOT NULL,
            received_at INTEGER NOT NULL,
            status TEXT NOT NULL
                CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored')),
            attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER, last_error TEXT,
            finished_at INTEGER, UNIQUE (endpoint, dedup_key));
        CREATE INDEX events_queue ON events (endpoint, status, next_attempt_at)
            WHERE status IN ('pending', 'delivering');
        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            event_id INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL, started_at INTEGER NOT NULL,
            duration_ms INTEGER NOT NULL, outcome TEXT NOT NULL, error TEXT);
        CREATE INDEX attempts_event ON attempts (event_id);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        CREATE INDEX events_dead ON events (endpoint) WHERE status = 'dead';
        INSERT INTO events (id, endpoint, dedup_key, headers, body, received_at, status,
                            attempts, next_attempt_at)
            VALUES (7, 'a', 'k', x'', x'7b7d', 5, 'pending', 1, 9),
                   (8, 'b', 'k', x'', x'', 6, 'dead', 1, NULL);
        INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome)
            VALUES (7, 1, 6, 3, 'failed'), (8, 1, 7, 3, 'failed');
        PRAGMA user_version = 2;
    ";

    #[test]
    fn a_version_2_file_is_upgraded_in_place_keeping_events_attempts_and_the_barrier() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(SCHEMA_V2)
            .unwrap();
        // A command refuses to upgrade it.
        let refused = Db::open(&path).err().expect("refused").to_string();
        assert!(refused.contains("schema version 2 is older"), "{refused}");
        // The server upgrades it.
        let db = Db {
            conn: schema::open(&path).unwrap(),
        };
        let version: i64 = db
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 3);
        let old = db.event(7).unwrap().unwrap();
        assert_eq!(
            (old.summary.status, old.body),
            (Status::Pending, b"{}".to_vec())
        );
        assert_eq!(old.attempts.len(), 1, "attempts survive the table rebuild");
        assert_eq!(db.event(8).unwrap().unwrap().attempts.len(), 1);
        // The old rows are behind the new barrier.
        assert_eq!(
            sql::insert_event(&db.conn, &new_event("a", "k")).unwrap(),
            Inserted::Duplicate(7)
        );
        assert_eq!(
            sql::insert_event(&db.conn, &new_event("b", "k")).unwrap(),
            Inserted::Duplicate(8)
        );
        let indexes: Vec<String> = db
            .conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(indexes, ["events_dead", "events_dedup", "events_queue"]);
        // The upgrade's own copy of the table definitions must not drift from a new file's.
        let (_fresh_dir, fresh) = temp_db();
        let shape = |conn: &Connection, pragma: &str| -> Vec<String> {
            conn.prepare(pragma)
                .unwrap()
                .query_map([], |r| {
                    let cells: Vec<String> = (0..r.as_ref().column_count())
                        .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                        .collect();
                    Ok(cells.join(" "))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for pragma in [
            "PRAGMA table_info(events)",
            "PRAGMA table_info(payloads)",
            "PRAGMA foreign_key_list(payloads)",
            "PRAGMA foreign_key_list(attempts)",
            "PRAGMA index_info(events_dedup)",
        ] {
            assert_eq!(
                shape(&db.conn, pragma),
                shape(&fresh.conn, pragma),
                "{pragma}"
            );
        }
        let fk: bool = db
            .conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert!(fk, "foreign keys are back on after the upgrade");
        // A new event still cascades its attempts away on delete.
        db.conn
            .execute("DELETE FROM events WHERE id = 7", [])
            .unwrap();
        let left: i64 = db
            .conn
            .query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 1);
    }

    #[test]
    fn reclaiming_frees_every_page_it_is_asked_for() {
        let (_dir, mut db) = temp_db();
        let body = vec![b'x'; 3000];
        for i in 0..200 {
            db.conn
                .execute(
                    "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                     received_at, status) VALUES ('a', ?1, ?2, 3000, 0, 'delivered')",
                    params![i, dedup_hash("a", &i.to_string())],
                )
                .unwrap();
            db.conn
                .execute(
                    "INSERT INTO payloads (event_id, headers, body) \
                     VALUES (last_insert_rowid(), x'', ?1)",
                    [&body],
                )
                .unwrap();
        }
        db.delete_prunable(CUTOFFS, 500).unwrap();
        let free: i64 = db
            .conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))
            .unwrap();
        assert!(free > 150, "{free}");
        let round = db.reclaim_space(100).unwrap();
        assert_eq!(round.pages, 100, "more than one page per call");
        assert_eq!(round.free_left, free as u64 - 100);
        let round = db.reclaim_space(10_000).unwrap();
        assert_eq!(round.free_left, 0);
        assert!(round.bytes() > 0);
    }

    #[tokio::test]
    async fn a_solo_job_runs_outside_any_transaction_and_in_queue_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        assert!(!store.run(|c| Ok(c.is_autocommit())).await.unwrap());
        assert!(store.run_solo(|c| Ok(c.is_autocommit())).await.unwrap());
        // A batch, a solo job and another batch, all queued at once: the solo job sees the
        // first batch committed and not the second.
        let first = store.run(|c| c.execute("PRAGMA user_version = 7", []));
        let solo =
            store.run_solo(|c| c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)));
        let second = store.run(|c| c.execute("PRAGMA user_version = 8", []));
        let (_, seen, _) = tokio::join!(first, solo, second);
        assert_eq!(seen.unwrap(), 7);
        assert!(store.checkpoint().await.unwrap());
        store.close();
    }
}
