//! The SQLite engine: [`Sqlite`], one database file, its schema and settings (`schema.rs`),
//! and every query it runs, one file per consumer (the same consumers as `store/`'s shared
//! files: `intake.rs`, with `items.rs` for Adyen's batches, `queue.rs`, `events.rs`,
//! `dashboard.rs`, `alerts.rs`, `retention.rs`, `observe.rs`, `counters.rs`), plus what only
//! a file has: `payload.rs` (bodies deflated in the row), `backup.rs` (`portaria backup`'s
//! online copy), `writer.rs` (the group-commit thread) and `checkpoint.rs` (the WAL
//! checkpoint thread).
//!
//! This file owns how a call reaches the connection. Two ways, chosen at opening:
//! - the writer thread (the server, and a command that writes, `Store::open_for_command`):
//!   every call is a job for `writer.rs`, which commits all waiting jobs as one transaction
//!   (group commit); a caller hears back only once its transaction is durable.
//! - a read-only connection (`Store::open_read_only`, a command that only looks): no thread,
//!   each call one read transaction on the caller's task. A read never takes the write lock,
//!   so it neither waits for a running server nor holds one up; a write fails with SQLite's
//!   own "attempt to write a readonly database".
//!
//! And how an error is told: [`StoreError::on`] names the OS error behind SQLite's one "disk
//! I/O error" (a file system gone read-only, a failing card).
//!
//! The file: WAL, `synchronous=FULL`, `auto_vacuum=INCREMENTAL`, 1 KiB pages, a busy timeout
//! of 3 s, created 0600 (`schema.rs`). Tables: `events` (the dedup key and its `dedup_hash`,
//! the roll-up status of its deliveries, what its targets are told to trust), `deliveries`
//! (one row per (event, route); partial indexes `deliveries_queue`, `deliveries_dead`,
//! `deliveries_order`), `payloads` (headers and body as received, one row per event,
//! `payload.rs`), `attempts` (failed and interrupted ones: a delivered attempt is recorded on
//! its delivery's row), `event_items` (the items of Adyen's batches, `items.rs`), `rejected`
//! (rejected requests kept a while, `quarantine.rs`), `hourly` (the status page's counters)
//! and `meta` (facts about the
//! file: the readiness probe's row, the alerts task's `alerts:` keys). The version is `PRAGMA
//! user_version`, each upgrade described at its statements in `schema.rs`: only the server
//! upgrades, in one transaction at its start (an older server still running on the file
//! would fail every write after it); a command refuses an older file, and both a newer one.
//! Only the writer thread writes from the server process: it owns the server's connection
//! (the worker's reads go through it too), and the checkpoint thread has a second. A command
//! opens its own (readers never block the writer in WAL; its writes wait on the busy timeout).
//!
//! What an SD card is spared: group commit (one fsync per batch), a narrow dedup index,
//! payloads stored once apart from the event row, bodies of 1 KiB and more deflated when they
//! compress, 1 KiB pages, delivery bookkeeping without an fsync of its own
//! (`synchronous=NORMAL` when a batch holds no intake insert: a power cut may only send an
//! event once more), and rare checkpoints off the commit path (one nudge per 16 MiB cycle of
//! the log). Measured: bench/PROFILE.md, "Disk writes (SD cards)".

pub(super) mod alerts;
pub(super) mod backup;
pub(super) mod checkpoint;
pub(super) mod counters;
pub(super) mod dashboard;
pub(super) mod events;
mod fetches;
pub(super) mod intake;
pub(super) mod items;
pub(super) mod observe;
pub(super) mod pauses;
pub(super) mod payload;
pub(super) mod quarantine;
pub(super) mod queue;
mod reconcile;
pub(super) mod retention;
pub(super) mod schema;
pub(super) mod writer;

#[cfg(test)]
mod fixtures;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::counters::Tally;
use super::handover::{Claim, handover};
use super::observe::IntakeHealth;
use super::{Status, StoreError};
#[cfg(test)]
use fixtures::Db;
use writer::{Finish, Job, Message, Needs};

/// The SQLite engine of a [`Store`].
pub(in crate::store) struct Sqlite {
    exec: Exec,
    /// The database file, for the free space `/readyz` checks on its file system.
    path: PathBuf,
    /// The status page's counts not yet in `hourly`; the writer folds them in.
    tally: Arc<Tally>,
    /// How the latest intake commits went (recorded on the writer thread), for `/readyz`.
    health: Arc<IntakeHealth>,
}

/// How a call reaches the connection.
enum Exec {
    Writer {
        /// Jobs for the writer. Sending after `close` fails or is dropped with the queue, and
        /// the caller hears `Closed` either way, so the sender needs no lock of its own.
        tx: mpsc::Sender<Message>,
        thread: Mutex<Option<JoinHandle<()>>>,
    },
    /// A read-only connection (None once closed).
    ReadOnly(Mutex<Option<Connection>>),
}

impl Sqlite {
    /// Opens (creating if needed) the file through the writer thread; `upgrade` says whether
    /// an older schema may be brought up to date (only the server's may).
    pub(in crate::store) fn open(
        path: &Path,
        upgrade: schema::Upgrade,
        tally: Arc<Tally>,
        health: Arc<IntakeHealth>,
    ) -> Result<Sqlite, StoreError> {
        let conn = schema::open_with(path, upgrade)?;
        let (tx, rx) = mpsc::channel();
        let thread = writer::spawn(conn, path.to_path_buf(), rx, tally.clone())
            .map_err(|e| StoreError::Sqlite(format!("cannot start the writer thread: {e}")))?;
        Ok(Sqlite {
            exec: Exec::Writer {
                tx,
                thread: Mutex::new(Some(thread)),
            },
            path: path.to_path_buf(),
            tally,
            health,
        })
    }

    /// Opens an existing file read-only: no thread, no schema change (a file of another
    /// schema version is refused), readable by any user who can read the file.
    pub(in crate::store) fn open_read_only(
        path: &Path,
        tally: Arc<Tally>,
        health: Arc<IntakeHealth>,
    ) -> Result<Sqlite, StoreError> {
        Ok(Sqlite {
            exec: Exec::ReadOnly(Mutex::new(Some(schema::open_read_only(path)?))),
            path: path.to_path_buf(),
            tally,
            health,
        })
    }

    /// A read-only connection of its own to the file, for a long read beside the store's
    /// calls (`store copy`'s source).
    pub(in crate::store) fn reader(&self) -> Result<Connection, StoreError> {
        schema::open_read_only(&self.path)
    }

    /// The database file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn tally(&self) -> &Tally {
        &self.tally
    }

    pub(super) fn health(&self) -> &IntakeHealth {
        &self.health
    }

    /// Runs `f` inside a transaction and resolves once it has committed: on the writer
    /// thread in the current batch's (an error from `f` rolls back `f`'s work only), or, read
    /// only, in a read transaction of its own.
    pub(super) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(f, Needs::ALL, Message::Job).await
    }

    /// Like [`Sqlite::run`], for an intake insert: its outcome, COMMIT included, is recorded
    /// for `/readyz` on the writer thread. `f` only reads what it captured, so the writer may
    /// run it again after rolling its work back: a row of such jobs shares one savepoint (see
    /// [`writer`]). If the writer has not taken the job when `deadline` passes, the job is
    /// given up and never runs ([`StoreError::NotTaken`]); once taken, its answer is awaited
    /// (`handover.rs`).
    pub(super) async fn run_intake<T, F>(&self, f: F, deadline: Duration) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let tx = match &self.exec {
            Exec::Writer { tx, .. } => tx,
            Exec::ReadOnly(conn) => return in_transaction(conn, f),
        };
        let (reply, rx) = oneshot::channel();
        let (claim, waiter) = handover();
        let job = Box::new(Repeatable {
            f,
            reply,
            health: self.health.clone(),
            last: None,
            claim,
        });
        if tx.send(Message::Job(job)).is_err() {
            return Err(StoreError::Closed);
        }
        waiter.answer(rx, deadline).await
    }

    /// Like [`Sqlite::run`], for delivery bookkeeping: the batch may commit without an fsync
    /// when nothing else in it needs one (see [`writer`]).
    pub(super) async fn run_bookkeeping<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(f, Needs::BOOKKEEPING, Message::Job).await
    }

    /// Runs `f` alone, outside any transaction (on the writer thread, after the batch in front
    /// of it has committed): for what SQLite refuses inside one, a WAL checkpoint.
    pub(super) async fn run_solo<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        if let Exec::ReadOnly(conn) = &self.exec {
            let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            let conn = conn.as_ref().ok_or(StoreError::Closed)?;
            return f(conn).map_err(|e| StoreError::on(conn, e));
        }
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
        let tx = match &self.exec {
            Exec::Writer { tx, .. } => tx,
            Exec::ReadOnly(conn) => return in_transaction(conn, f),
        };
        let (reply, rx) = oneshot::channel();
        if tx.send(wrap(Box::new(Work { f, needs, reply }))).is_err() {
            return Err(StoreError::Closed);
        }
        // A job still queued when the writer stops is dropped with its reply sender.
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Lets the jobs queued so far finish, closes the database (checkpointing the WAL) and
    /// joins the writer; or closes the read-only connection. Calls after this hear `Closed`.
    pub(in crate::store) fn close(&self) {
        match &self.exec {
            Exec::Writer { tx, thread } => {
                let _ = tx.send(Message::Close);
                if let Ok(mut thread) = thread.lock()
                    && let Some(thread) = thread.take()
                {
                    let _ = thread.join();
                }
            }
            Exec::ReadOnly(conn) => {
                conn.lock().unwrap_or_else(PoisonError::into_inner).take();
            }
        }
    }
}

/// `f` in a read transaction of its own on the read-only connection: its statements see one
/// snapshot of the file.
fn in_transaction<T>(
    conn: &Mutex<Option<Connection>>,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
    let conn = conn.as_mut().ok_or(StoreError::Closed)?;
    let tx = conn.transaction()?;
    let out = f(&tx).map_err(|e| StoreError::on(&tx, e))?;
    tx.commit()?;
    Ok(out)
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
        let result = f(conn).map_err(|e| StoreError::on(conn, e));
        let ok = result.is_ok();
        (ok, finish(result, None, reply))
    }

    fn abort(self: Box<Self>, err: StoreError) {
        let _ = self.reply.send(Err(err));
    }
}

/// What answers the caller once the batch committed (or failed to): the job's own result,
/// unless the COMMIT failed; an intake insert's answer is also recorded in `health`.
fn finish<T: Send + 'static>(
    result: Result<T, StoreError>,
    health: Option<Arc<IntakeHealth>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
) -> Finish {
    Box::new(move |committed| {
        let answer = committed.and(result);
        if let Some(health) = health {
            health.record(answer.as_ref().map(drop));
        }
        let _ = reply.send(answer);
    })
}

/// An intake insert: a closure that can run again after its work was rolled back, and the
/// result of its latest run.
struct Repeatable<F, T> {
    f: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
    health: Arc<IntakeHealth>,
    last: Option<Result<T, StoreError>>,
    /// The writer's end of the hand-over with the waiting request.
    claim: Claim,
}

impl<F, T> Job for Repeatable<F, T>
where
    T: Send + 'static,
    F: Fn(&Connection) -> rusqlite::Result<T> + Send + 'static,
{
    fn needs(&self) -> Needs {
        Needs::ALL
    }

    fn repeatable(&self) -> bool {
        true
    }

    fn take(&self) -> bool {
        self.claim.take()
    }

    fn attempt(&mut self, conn: &Connection) -> bool {
        let result = (self.f)(conn).map_err(|e| StoreError::on(conn, e));
        let ok = result.is_ok();
        self.last = Some(result);
        ok
    }

    fn run(mut self: Box<Self>, conn: &Connection) -> (bool, Finish) {
        if self.last.is_none() {
            self.attempt(conn);
        }
        let Repeatable {
            reply,
            health,
            last,
            ..
        } = *self;
        let result = last.unwrap_or(Err(StoreError::Closed));
        (result.is_ok(), finish(result, Some(health), reply))
    }

    fn abort(self: Box<Self>, err: StoreError) {
        self.health.record(Err(&err));
        let _ = self.reply.send(Err(err));
    }
}

impl StoreError {
    /// `e`, just returned on `conn`, with the operating system's error behind it when SQLite
    /// reports an I/O failure: SQLite says "disk I/O error" alike for a file system gone
    /// read-only (EROFS), a failing card (EIO) and more, and only the errno tells them apart.
    pub(in crate::store) fn on(conn: &Connection, e: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode::{CannotOpen, SystemIoFailure};
        // The two codes for which SQLite records the errno (sqlite3SystemError): for another,
        // what it holds may be an older failure's.
        let io = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, SystemIoFailure | CannotOpen)
        );
        // SAFETY: the handle is valid while `conn` is borrowed, and sqlite3_system_errno only
        // reads the errno SQLite kept from its last failed system call on it.
        let errno = if io {
            unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) }
        } else {
            0
        };
        if errno == 0 {
            return e.into();
        }
        StoreError::Sqlite(format!(
            "{e} ({})",
            std::io::Error::from_raw_os_error(errno)
        ))
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e.to_string())
    }
}

/// Reads a status column: a value outside [`Status::ALL`] is a conversion error, not a panic.
fn status_column(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Status> {
    let status: String = row.get(idx)?;
    status.parse().map_err(|e: String| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, e.into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

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
    async fn a_read_only_store_reads_beside_a_held_write_lock_and_refuses_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Store::open(&path).unwrap().close();
        let mut writer = Connection::open(&path).unwrap();
        crate::store::sqlite::intake::insert_event(&writer, &fixtures::new_event("shop", "k"))
            .unwrap();
        // Another connection holds the write lock (a server's writer mid-batch).
        let held = writer
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        let store = Store::open_read_only(&path).unwrap();
        let listed = store
            .list_events(crate::store::ListFilter::default())
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert!(store.event_detail(listed[0].id).await.unwrap().is_some());
        assert!(store.queue_stats().await.unwrap().is_empty());
        drop(held);
        // A write is SQLite's own refusal, not an answer of the store's.
        let refused = store.replay_event(listed[0].id, 0).await.unwrap_err();
        assert!(refused.to_string().contains("readonly"), "{refused}");
        store.close();
        let late = store.list_events(crate::store::ListFilter::default()).await;
        assert!(matches!(late, Err(StoreError::Closed)), "{late:?}");
    }
}
