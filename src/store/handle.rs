//! [`Store`], the server's handle on the database: cheap to clone, async. It holds one of two
//! backends: SQLite, where every call is a job for the one writer thread (`writer.rs`), or
//! PostgreSQL (`postgres/`), a pool of connections. This file owns the handle, the backend
//! choice and how a SQLite call becomes a job; the methods themselves sit beside their
//! queries, one file per consumer, and those that PostgreSQL implements dispatch on
//! [`Store::postgres`]. On PostgreSQL every other method answers [`StoreError::Unsupported`]
//! (through [`Store::run`]); nothing in operation calls them (`backup`, the one SQLite-only
//! command, refuses PostgreSQL before opening anything).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::StoreError;
use super::counters::Tally;
use super::handover::{Claim, handover};
use super::sqlite::schema;
use super::sqlite::writer::{self, Finish, Job, Message, Needs};

/// The server's handle on the database. Cheap to clone; all clones share one writer thread.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    /// How the latest intake commits went, for `/readyz`.
    intake: Arc<super::observe::IntakeHealth>,
}

enum Backend {
    Sqlite(Sqlite),
    Postgres(super::postgres::Pg),
}

/// The SQLite backend: its writer thread and file.
struct Sqlite {
    /// Jobs for the writer. Sending after `close` fails or is dropped with the queue, and the
    /// caller hears `Closed` either way, so the sender needs no lock of its own.
    tx: mpsc::Sender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The database file, for the free space `/readyz` checks on its file system.
    path: PathBuf,
    /// The status page's counts not yet in `hourly`; the writer folds them in.
    tally: Arc<Tally>,
}

impl Store {
    /// Opens (creating if needed) the database for the server, upgrading an older schema, and
    /// starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::start(schema::open(path)?, path)
    }

    /// Opens the database for a command that writes through the same paths as the server
    /// (`portaria prune`). Like [`super::Db::open`], it refuses an older schema: only the server
    /// upgrades, since an older server still running on the file would fail every write after.
    pub fn open_for_command(path: &Path) -> Result<Store, StoreError> {
        Store::start(schema::open_with(path, schema::Upgrade::Refused)?, path)
    }

    fn start(conn: Connection, path: &Path) -> Result<Store, StoreError> {
        let (tx, rx) = mpsc::channel();
        let tally = Arc::new(Tally::default());
        let thread = writer::spawn(conn, path.to_path_buf(), rx, tally.clone())
            .map_err(|e| StoreError::Sqlite(format!("cannot start the writer thread: {e}")))?;
        Ok(Store::with(Backend::Sqlite(Sqlite {
            tx,
            thread: Mutex::new(Some(thread)),
            path: path.to_path_buf(),
            tally,
        })))
    }

    /// Connects to the PostgreSQL database `settings` name for the server, over TLS when its
    /// `sslmode` asks for it, checking the server's certificate as `tls` says (config's
    /// `DatabaseUrl::settings` and `tls_client`), and creates or upgrades its schema (see
    /// `postgres/schema.rs`). The URL never appears in an error.
    pub async fn open_postgres(
        settings: tokio_postgres::Config,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Store, StoreError> {
        let tally = Arc::new(Tally::default());
        Ok(Store::with(Backend::Postgres(
            super::postgres::Pg::connect(settings, tls, tally).await?,
        )))
    }

    /// `portaria store copy`: every event of the SQLite database `source` into this store's
    /// PostgreSQL database, which must be empty (see `postgres/copy.rs`).
    pub async fn copy_from_sqlite(
        &self,
        source: &super::Db,
    ) -> Result<super::CopyReport, StoreError> {
        match self.postgres() {
            Some(pg) => pg.copy_from(&source.conn).await,
            None => Err(StoreError::Sqlite(
                "the target of a copy is a PostgreSQL database ([storage] url)".into(),
            )),
        }
    }

    fn with(backend: Backend) -> Store {
        Store {
            inner: Arc::new(Inner {
                backend,
                intake: Arc::default(),
            }),
        }
    }

    /// The PostgreSQL backend, when the store is on one: the methods it implements dispatch here.
    pub(super) fn postgres(&self) -> Option<&super::postgres::Pg> {
        match &self.inner.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    fn sqlite(&self) -> Result<&Sqlite, StoreError> {
        match &self.inner.backend {
            Backend::Sqlite(sqlite) => Ok(sqlite),
            Backend::Postgres(_) => Err(StoreError::Unsupported),
        }
    }

    /// The database file (empty on PostgreSQL, whose methods never ask).
    pub(super) fn path(&self) -> &Path {
        self.sqlite().map_or(Path::new(""), |s| s.path.as_path())
    }

    /// The counts not folded into `hourly` yet (by SQLite's writer, or PostgreSQL's task).
    pub(super) fn tally(&self) -> &Tally {
        match &self.inner.backend {
            Backend::Sqlite(sqlite) => &sqlite.tally,
            Backend::Postgres(pg) => pg.tally(),
        }
    }

    /// How the latest intake commits went.
    pub(super) fn intake_health(&self) -> &super::observe::IntakeHealth {
        &self.inner.intake
    }

    /// Runs `f` on the writer thread inside the current batch's transaction and resolves once
    /// that transaction has committed. An error from `f` rolls back `f`'s work only.
    pub(super) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(f, Needs::ALL, Message::Job).await
    }

    /// Like [`Store::run`], for an intake insert: its outcome, COMMIT included, is recorded
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
        let (reply, rx) = oneshot::channel();
        let (claim, waiter) = handover();
        let job = Box::new(Repeatable {
            f,
            reply,
            health: self.inner.intake.clone(),
            last: None,
            claim,
        });
        if self.sqlite()?.tx.send(Message::Job(job)).is_err() {
            return Err(StoreError::Closed);
        }
        waiter.answer(rx, deadline).await
    }

    /// Like [`Store::run`], for delivery bookkeeping: the batch may commit without an fsync
    /// when nothing else in it needs one (see [`writer`]).
    pub(super) async fn run_bookkeeping<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit(f, Needs::BOOKKEEPING, Message::Job).await
    }

    /// Runs `f` on the writer thread alone, outside any transaction (after the batch in front
    /// of it has committed): for what SQLite refuses inside one, a WAL checkpoint.
    pub(super) async fn run_solo<T, F>(&self, f: F) -> Result<T, StoreError>
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
        self.send(wrap, Box::new(Work { f, needs, reply }), rx)
            .await
    }

    /// Hands `job` to the writer and waits for its answer on `rx`.
    async fn send<T>(
        &self,
        wrap: fn(Box<dyn Job>) -> Message,
        job: Box<dyn Job>,
        rx: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.sqlite()?.tx.send(wrap(job)).is_err() {
            return Err(StoreError::Closed);
        }
        // A job still queued when the writer stops is dropped with its reply sender.
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Lets the jobs queued so far finish, closes the database (checkpointing the WAL) and
    /// joins the writer. Jobs sent after this hear `Closed`.
    pub fn close(&self) {
        let sqlite = match &self.inner.backend {
            Backend::Sqlite(sqlite) => sqlite,
            Backend::Postgres(pg) => return pg.close(),
        };
        let _ = sqlite.tx.send(Message::Close);
        if let Ok(mut thread) = sqlite.thread.lock()
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
    health: Option<Arc<super::observe::IntakeHealth>>,
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
    health: Arc<super::observe::IntakeHealth>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
