//! The single writer thread: it owns the one write connection and commits every job that is
//! waiting as one transaction (group commit), so a burst of requests costs one fsync, not one
//! each. A job's caller hears back only after its transaction is durable.
//!
//! Each job runs inside its own SAVEPOINT, so one failing job rolls back alone and the rest of
//! its batch still commits. Intake inserts are *repeatable* (their input is data), which saves
//! most savepoints (issue 17): a batch of nothing but inserts runs first with none, and if one
//! fails the transaction is rolled back and the batch runs again the usual way; there, a row
//! of inserts shares one savepoint, and if one fails the row is rolled back to it and each runs
//! again in its own. If the COMMIT itself fails (disk full, I/O error, lock timeout),
//! every job of the batch hears the error and nothing of it is kept. So it goes, too, when
//! SQLite rolls the whole transaction back by itself in the middle of the batch (it may, on
//! disk full, I/O errors and out of memory): the jobs already run hear the error, the jobs not
//! yet run are not run, and none of them is committed piecemeal.
//!
//! An intake insert is *taken* (`handover.rs`) only once its batch's `BEGIN IMMEDIATE` holds
//! the write lock; one whose request gave up at its deadline before that (the writer busy
//! with the batch in front, or waiting for another process's lock) is dropped unrun, so a
//! webhook answered 503 is never committed afterwards.
//!
//! A batch is committed with `synchronous=FULL` (an fsync before its callers hear back) when
//! any of its jobs needs that: every intake insert does. A batch of nothing but delivery
//! bookkeeping commits with `synchronous=NORMAL`: no fsync of its own, durable at the next FULL
//! commit or checkpoint. Losing such a commit to a power cut can only make an event go out once
//! more (at least once still holds), and it spares an SD card an fsync per delivery.
//!
//! SQLite refuses a few statements inside a transaction: a WAL checkpoint, for one (pruning
//! runs one to give the space back). Those go in as a *solo* job: the writer commits the batch
//! in front of it, runs it alone in autocommit mode, then goes back to batching. Queue order is
//! kept, the one connection keeps one owner, and jobs behind it wait only for its own run.
//!
//! The status page's counters (`counters.rs`) ride along: a batch folds the in-memory tally
//! into `hourly` when it is due (at most every few seconds; in a savepoint of its own, whose
//! failure drops the counts, logged), an idle writer wakes to fold it when it falls due with
//! nothing else to commit, a status page load folds it at once, and closing folds the rest.
//!
//! The writer never copies the WAL back into the database in the middle of a commit: its WAL
//! hook hands that to the checkpoint thread ([`super::checkpoint`]), and between batches it only
//! finishes what that thread started.

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::StoreError;
use super::checkpoint::Checkpointer;
use crate::store::counters::Tally;
use crate::time::now_ms;

/// Called once the batch a job ran in has committed (or failed to).
pub(super) type Finish = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// What a job needs from the batch it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Needs {
    /// An fsync before its caller hears back (`synchronous=FULL`).
    pub fsync: bool,
}

impl Needs {
    /// The safe default: durable before the answer.
    pub const ALL: Needs = Needs { fsync: true };
    /// Delivery bookkeeping: a lost commit only means one more delivery.
    pub const BOOKKEEPING: Needs = Needs { fsync: false };
}

/// A unit of work for the writer.
pub(super) trait Job: Send {
    fn needs(&self) -> Needs;
    /// Whether [`Job::attempt`] may be called, and again after its work was rolled back (an
    /// intake insert: its input is data). A row of such jobs shares one savepoint.
    fn repeatable(&self) -> bool {
        false
    }
    /// A repeatable job's run, inside the batch's transaction, its result kept for
    /// [`Job::run`]; says whether it succeeded. Each call runs the job anew.
    fn attempt(&mut self, _conn: &Connection) -> bool {
        false
    }
    /// Runs on the write connection inside the batch's transaction (a repeatable job that was
    /// attempted does not run again: its latest result stands); says whether it succeeded,
    /// and hands back what to call after COMMIT.
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish);
    /// The job will not run (its batch could not begin, or was lost before its turn): tell the
    /// caller why.
    fn abort(self: Box<Self>, err: StoreError);
    /// Called once its batch's transaction has begun, before anything runs: false if the
    /// caller gave up waiting, and the job must not run (an intake insert answered 503 is
    /// never committed afterwards: `handover.rs`). Every other job is always taken.
    fn take(&self) -> bool {
        true
    }
}

pub(super) enum Message {
    Job(Box<dyn Job>),
    /// Runs alone with no transaction open: for statements that SQLite refuses inside one.
    /// Its `Finish` hears `Ok(())`: each of its statements committed on its own.
    Solo(Box<dyn Job>),
    /// Finish the queue, close the connection (checkpointing the WAL) and exit.
    Close,
}

/// How long an idle writer with nothing to fold waits before looking again.
const IDLE_WAIT: Duration = Duration::from_secs(60);

/// Most jobs one transaction takes; bounds the latency a very long queue adds.
const MAX_BATCH: usize = 1024;

pub(super) fn spawn(
    conn: Connection,
    path: PathBuf,
    rx: mpsc::Receiver<Message>,
    tally: Arc<Tally>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("portaria-writer".into())
        .spawn(move || run(conn, &path, rx, &tally))
}

fn run(mut conn: Connection, path: &Path, rx: mpsc::Receiver<Message>, tally: &Tally) {
    stable_plans(&conn);
    let checkpointer = match Checkpointer::start(path, &mut conn) {
        Ok(checkpointer) => Some(checkpointer),
        Err(e) => {
            // Not fatal: SQLite's own auto-checkpoint (in the commit path) takes over.
            tracing::warn!(error = %e, "no checkpoint thread; checkpointing on commit instead");
            let _ = conn.execute_batch("PRAGMA wal_autocheckpoint = 4096");
            None
        }
    };
    // `schema::open` left the connection at FULL.
    let mut synchronous_full = true;
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(64);
    let mut solo: Option<Box<dyn Job>> = None;
    let mut closing = false;
    // Test-only (debug builds): hold every fsync'd COMMIT back this long (`crate::fault`).
    let commit_delay = crate::fault::commit_delay();
    while !closing {
        // Block for the first job, then take whatever else is already waiting, up to a solo
        // job: it runs after the batch in front of it, so the queue's order holds.
        let wait = tally
            .due_in_ms(now_ms())
            .map_or(IDLE_WAIT, |ms| Duration::from_millis(ms.unsigned_abs()));
        match rx.recv_timeout(wait) {
            Ok(Message::Job(job)) => batch.push(job),
            Ok(Message::Solo(job)) => solo = Some(job),
            Ok(Message::Close) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if tally.due_in_ms(now_ms()) == Some(0) {
                    commit_batch(&conn, &mut batch, None, tally);
                    tally.tried(now_ms());
                }
                continue;
            }
        }
        while solo.is_none() && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Message::Job(job)) => batch.push(job),
                Ok(Message::Solo(job)) => solo = Some(job),
                Ok(Message::Close) => {
                    closing = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let full = batch.iter().any(|job| job.needs().fsync);
            if full != synchronous_full {
                // Allowed outside a transaction only, which is where we are.
                let pragma = if full {
                    "PRAGMA synchronous = FULL"
                } else {
                    "PRAGMA synchronous = NORMAL"
                };
                match conn.execute_batch(pragma) {
                    Ok(()) => synchronous_full = full,
                    Err(e) => tracing::error!(error = %e, "cannot change synchronous"),
                }
            }
            commit_batch(&conn, &mut batch, commit_delay.filter(|_| full), tally);
            if let Some(checkpointer) = &checkpointer {
                checkpointer.finish_pass(&conn);
            }
        }
        if let Some(job) = solo.take() {
            let (_, finish) = job.run(&conn);
            finish(Ok(()));
        }
    }
    // Jobs sent after Close hear that the store is closed when their sender is dropped.
    drop(rx);
    tally.fold_now();
    if !tally.is_empty() {
        commit_batch(&conn, &mut batch, None, tally);
    }
    if let Some(checkpointer) = checkpointer {
        checkpointer.stop(&mut conn);
    }
    // The last connection to close checkpoints the WAL and removes it.
    if let Err((_, e)) = conn.close() {
        tracing::error!(error = %e, "closing the database failed");
    }
}

/// Turns on SQLite's query planner stability guarantee for the write connection: a statement's
/// plan never depends on the values bound to it. Without it, SQLite (built with STAT4, as the
/// bundled one is) marks some of the intake's parameters as plan-changing and compiles the
/// statement anew at every bind: the duplicate lookup ([`super::intake::KNOWN`]) was parsed
/// and planned again for every duplicate, some 80,000 instructions each (bench/PROFILE.md).
/// The plans stay those the plan tests check: none of them rests on a bound value.
fn stable_plans(conn: &Connection) {
    use rusqlite::config::DbConfig;
    if let Err(e) = conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true) {
        // Only slower without it.
        tracing::warn!(error = %e, "cannot turn on the query planner stability guarantee");
    }
}

/// Runs `batch` in one transaction with the counters' tally, and answers each job after its
/// COMMIT (`delay`, test-only, holds the COMMIT back).
fn commit_batch(
    conn: &Connection,
    batch: &mut Vec<Box<dyn Job>>,
    delay: Option<Duration>,
    tally: &Tally,
) {
    if !begin(conn, batch) {
        return;
    }
    // Only now, with the write lock held, are the jobs taken: an intake insert whose request
    // gave up while the writer was busy (or waiting for the lock) is dropped unrun.
    batch.retain(|job| job.take());
    let finishes = match run_bare(conn, batch) {
        Bare::Ran => {
            fold_counters(conn, tally);
            if conn.is_autocommit() {
                return lose(rolled_back(), batch.drain(..));
            }
            // Each job hands back its result: none runs again.
            batch.drain(..).map(|job| job.run(conn).1).collect()
        }
        Bare::Lost(err) => return lose(err, batch.drain(..)),
        bare @ (Bare::RolledBack | Bare::NotTried) => {
            if matches!(bare, Bare::RolledBack) && !begin(conn, batch) {
                return;
            }
            match run_jobs(conn, batch, tally) {
                Some(finishes) => finishes,
                None => return,
            }
        }
    };
    if let Some(delay) = delay {
        std::thread::sleep(delay);
    }
    let result = exec(conn, "COMMIT").map_err(|e| StoreError::on(conn, e));
    if result.is_err() {
        // COMMIT failed: make sure nothing of the batch survives, then report to everyone.
        let _ = exec(conn, "ROLLBACK");
    }
    for finish in finishes {
        finish(result.clone());
    }
}

/// The batch is lost: logged once, and every job not yet run hears `err`.
fn lose(err: StoreError, jobs: impl Iterator<Item = Box<dyn Job>>) {
    tracing::error!(error = %err, "batch lost; every job in it hears the error");
    for job in jobs {
        job.abort(err.clone());
    }
}

/// Tries each repeatable job in turn inside the open transaction; false at the first failure,
/// or when the transaction is gone (the next job would run, and commit, on its own).
fn attempt_all(conn: &Connection, jobs: &mut [Box<dyn Job>]) -> bool {
    jobs.iter_mut()
        .all(|job| job.attempt(conn) && !conn.is_autocommit())
}

/// `BEGIN IMMEDIATE`; if it fails, every job of `batch` hears why.
fn begin(conn: &Connection, batch: &mut Vec<Box<dyn Job>>) -> bool {
    match exec(conn, "BEGIN IMMEDIATE") {
        Ok(()) => true,
        Err(e) => {
            let err = StoreError::on(conn, e);
            for job in batch.drain(..) {
                job.abort(err.clone());
            }
            false
        }
    }
}

/// What running a batch with no savepoint came to.
enum Bare {
    /// Not every job is repeatable (or there is none): not tried.
    NotTried,
    /// Every job ran and succeeded; the counters are still to fold.
    Ran,
    /// A job failed: the transaction is rolled back, to be begun again and run job by job.
    RolledBack,
    /// The database rolled the transaction back by itself (or the rollback failed).
    Lost(StoreError),
}

/// A batch of nothing but intake inserts (the usual batch under load) runs first with no
/// savepoint at all: savepoints cost two statements each and a copy of every page they touch
/// (bench/PROFILE.md, issue 17). If one insert fails, the whole transaction is rolled back and
/// the batch runs again the usual way ([`run_jobs`]), where the failing one rolls back alone.
fn run_bare(conn: &Connection, batch: &mut [Box<dyn Job>]) -> Bare {
    if batch.is_empty() || !batch.iter().all(|job| job.repeatable()) {
        return Bare::NotTried;
    }
    let all_ok = attempt_all(conn, batch);
    if conn.is_autocommit() {
        return Bare::Lost(rolled_back());
    }
    if all_ok {
        return Bare::Ran;
    }
    match exec(conn, "ROLLBACK") {
        Ok(()) => Bare::RolledBack,
        Err(e) => Bare::Lost(StoreError::on(conn, e)),
    }
}

/// The error of a transaction SQLite rolled back by itself.
fn rolled_back() -> StoreError {
    StoreError::Sqlite(
        "the transaction was rolled back by the database (disk full or I/O error?)".into(),
    )
}

/// The counters' tally first, then each job (or row of repeatable jobs) in its savepoint.
/// None: the batch was lost, and every job heard of it.
fn run_jobs(
    conn: &Connection,
    batch: &mut Vec<Box<dyn Job>>,
    tally: &Tally,
) -> Option<Vec<Finish>> {
    fold_counters(conn, tally);
    let mut finishes = Vec::with_capacity(batch.len());
    let mut jobs = batch.drain(..).peekable();
    while let Some(job) = jobs.next() {
        let step = if job.repeatable() {
            let mut row = vec![job];
            while let Some(next) = jobs.next_if(|job| job.repeatable()) {
                row.push(next);
            }
            run_row(conn, row, &mut finishes)
        } else {
            run_alone(conn, job, &mut finishes)
        };
        if let Err(err) = step {
            lose(err.clone(), jobs);
            for finish in finishes {
                finish(Err(err.clone()));
            }
            return None;
        }
    }
    Some(finishes)
}

/// Runs one job in its own savepoint, so that if it fails it rolls back alone; a repeatable
/// job is tried anew (an earlier try's work may have been rolled back since). An error: the
/// batch is lost (the job already heard of it through its `Finish`, pushed first).
fn run_alone(
    conn: &Connection,
    mut job: Box<dyn Job>,
    finishes: &mut Vec<Finish>,
) -> Result<(), StoreError> {
    // Never run a job outside its savepoint: half of it could commit without the rest.
    if let Err(e) = exec(conn, JOB.open) {
        job.abort(StoreError::from(e));
        return Ok(());
    }
    if job.repeatable() {
        job.attempt(conn);
    }
    let (ok, finish) = job.run(conn);
    finishes.push(finish);
    end_savepoint(conn, &JOB, ok)
}

/// Runs a row of repeatable jobs under one savepoint: a savepoint per job costs two
/// statements, and SQLite copies every page a job touches that an earlier job of the batch
/// dirtied into the savepoint's journal first (bench/PROFILE.md, issue 17). If one of them
/// fails, the whole row is rolled back and each job runs again in a savepoint of its own
/// ([`run_alone`]), so the failing one still rolls back alone. An error: the batch is lost
/// (every job of the row heard of it).
fn run_row(
    conn: &Connection,
    mut row: Vec<Box<dyn Job>>,
    finishes: &mut Vec<Finish>,
) -> Result<(), StoreError> {
    if row.len() == 1 {
        return row
            .pop()
            .map_or(Ok(()), |job| run_alone(conn, job, finishes));
    }
    if let Err(e) = exec(conn, ROW.open) {
        let err = StoreError::from(e);
        for job in row {
            job.abort(err.clone());
        }
        return Ok(());
    }
    let all_ok = attempt_all(conn, &mut row);
    if let Err(err) = end_savepoint(conn, &ROW, all_ok) {
        for job in row {
            job.abort(err.clone());
        }
        return Err(err);
    }
    if all_ok {
        finishes.extend(row.into_iter().map(|job| job.run(conn).1));
        return Ok(());
    }
    // Rolled back: once more, each alone.
    let mut row = row.into_iter();
    while let Some(job) = row.next() {
        if let Err(err) = run_alone(conn, job, finishes) {
            for job in row {
                job.abort(err.clone());
            }
            return Err(err);
        }
    }
    Ok(())
}

/// Releases the savepoint `name` (`ok`) or rolls back to it. An error: the batch is lost,
/// rolled back by SQLite itself (disk full, I/O error) or, if a savepoint could not be ended,
/// by us (a failed job's half must not commit).
fn end_savepoint(conn: &Connection, savepoint: &Savepoint, ok: bool) -> Result<(), StoreError> {
    // SQLite may have rolled the whole transaction back by itself: what ran is gone, and
    // a SAVEPOINT now would open a transaction of its own and commit the next job alone.
    if conn.is_autocommit() {
        return Err(rolled_back());
    }
    let end = if ok {
        exec(conn, savepoint.release)
    } else {
        exec(conn, savepoint.rollback).and_then(|()| exec(conn, savepoint.release))
    };
    end.map_err(|e| {
        let _ = exec(conn, "ROLLBACK");
        StoreError::Sqlite(format!("ending a job's savepoint failed: {e}"))
    })
}

/// The tally into `hourly`, in a savepoint of its own: if that fails, the counts are dropped
/// (logged) and the batch's jobs go on untouched.
fn fold_counters(conn: &Connection, tally: &Tally) {
    let now_ms = now_ms();
    if tally.due_in_ms(now_ms) != Some(0) {
        return;
    }
    let folded = exec(conn, "SAVEPOINT counters").and_then(|()| match tally.flush(conn, now_ms) {
        Ok(()) => exec(conn, "RELEASE counters"),
        Err(e) => {
            exec(conn, "ROLLBACK TO counters")?;
            exec(conn, "RELEASE counters")?;
            Err(e)
        }
    });
    if let Err(e) = folded {
        tracing::warn!(error = %e, "the status page's counters could not be stored; dropped");
    }
}

/// Runs one of the writer's fixed statements through the statement cache: they run for every
/// batch or job, and parsing them anew each time showed in the profile.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// The statements of one of the writer's savepoints.
struct Savepoint {
    open: &'static str,
    release: &'static str,
    rollback: &'static str,
}

/// One job's.
const JOB: Savepoint = Savepoint {
    open: "SAVEPOINT job",
    release: "RELEASE job",
    rollback: "ROLLBACK TO job",
};

/// A row of repeatable jobs'.
const ROW: Savepoint = Savepoint {
    open: "SAVEPOINT jobs",
    release: "RELEASE jobs",
    rollback: "ROLLBACK TO jobs",
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// `PRAGMA synchronous` as a job sees it inside its batch: 1 NORMAL, 2 FULL.
    fn synchronous(conn: &Connection) -> rusqlite::Result<i64> {
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
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

    #[tokio::test]
    async fn the_write_connection_plans_statements_without_looking_at_their_values() {
        // Off, the duplicate lookup was compiled anew at every bind (bench/PROFILE.md).
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let qpsg = store
            .run(|conn| conn.db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG))
            .await
            .unwrap();
        assert!(qpsg, "the query planner stability guarantee is on");
        store.close();
    }

    /// A deadline no test job comes near: the job is always taken.
    const PATIENT: Duration = Duration::from_secs(60);

    fn put(key: &'static str) -> impl Fn(&Connection) -> rusqlite::Result<()> + Send + 'static {
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

    /// Runs `queued` 30 ms into a 150 ms job, so that every job it sends waits behind that one
    /// and the writer takes them as one batch.
    async fn behind_a_busy_writer<T>(store: &Store, queued: impl Future<Output = T>) -> T {
        let busy = store.run(|_| {
            std::thread::sleep(std::time::Duration::from_millis(150));
            Ok(())
        });
        let queued = async {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            queued.await
        };
        let (busy, out) = tokio::join!(busy, queued);
        busy.unwrap();
        out
    }

    /// Runs `jobs` as one batch: queued together while the writer is busy with another job.
    async fn one_batch<A, B, C>(store: &Store, jobs: (A, B, C)) -> [Result<(), StoreError>; 3]
    where
        A: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
        B: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
        C: FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
    {
        let (a, b, c) = behind_a_busy_writer(store, async {
            tokio::join!(store.run(jobs.0), store.run(jobs.1), store.run(jobs.2))
        })
        .await;
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

    /// Intake jobs (repeatable: they may run again after a rollback) `a`, `b`, `c`, with a
    /// plain job `x` in front of them, queued as one batch.
    async fn intake_batch<A, B, C>(store: &Store, jobs: (A, B, C)) -> [Result<(), StoreError>; 4]
    where
        A: Fn(&Connection) -> rusqlite::Result<()> + Send + 'static,
        B: Fn(&Connection) -> rusqlite::Result<()> + Send + 'static,
        C: Fn(&Connection) -> rusqlite::Result<()> + Send + 'static,
    {
        let (x, a, b, c) = behind_a_busy_writer(store, async {
            tokio::join!(
                store.run(put("x")),
                store.run_intake(jobs.0, PATIENT),
                store.run_intake(jobs.1, PATIENT),
                store.run_intake(jobs.2, PATIENT)
            )
        })
        .await;
        [x, a, b, c]
    }

    #[tokio::test]
    async fn a_failing_intake_job_in_a_row_rolls_back_alone_and_the_others_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let half_then_fail = |conn: &Connection| {
            put("b")(conn)?;
            Err(rusqlite::Error::QueryReturnedNoRows)
        };
        let [x, a, b, c] = intake_batch(&store, (put("a"), half_then_fail, put("c"))).await;
        assert!(
            x.is_ok() && a.is_ok() && b.is_err() && c.is_ok(),
            "{a:?} {b:?} {c:?}"
        );
        assert_eq!(
            meta_keys(&store).await,
            ["a", "c", "x"],
            "a ran again after the row's rollback; b's first statement is undone"
        );
        // A row that does not fail commits whole.
        let [x, d, e, f] = intake_batch(&store, (put("d"), put("e"), put("f"))).await;
        assert!(x.is_err(), "x is there already: {x:?}");
        assert!(d.is_ok() && e.is_ok() && f.is_ok(), "{d:?} {e:?} {f:?}");
        assert_eq!(meta_keys(&store).await, ["a", "c", "d", "e", "f", "x"]);
        store.close();
    }

    #[tokio::test]
    async fn a_transaction_rolled_back_in_a_row_of_intake_jobs_fails_the_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let rolled_back = |conn: &Connection| conn.execute_batch("ROLLBACK");
        let [x, a, b, c] = intake_batch(&store, (put("a"), rolled_back, put("c"))).await;
        assert!(
            x.is_err() && a.is_err() && b.is_err() && c.is_err(),
            "{x:?} {a:?} {b:?} {c:?}"
        );
        assert!(
            meta_keys(&store).await.is_empty(),
            "c did not commit on its own"
        );
        store.run_intake(put("d"), PATIENT).await.unwrap();
        assert_eq!(meta_keys(&store).await, ["d"]);
        store.close();
    }

    /// Intake jobs `a`, `b`, `c` alone in one batch: it runs with no savepoint first. One
    /// webhook is counted for hour `hour` just before, for that batch to fold.
    async fn bare_batch<A, B, C>(
        store: &Store,
        jobs: (A, B, C),
        hour: i64,
    ) -> [Result<(), StoreError>; 3]
    where
        A: Fn(&Connection) -> rusqlite::Result<()> + Send + 'static,
        B: Fn(&Connection) -> rusqlite::Result<()> + Send + 'static,
        C: Fn(&Connection) -> rusqlite::Result<()> + Send + 'static,
    {
        let (a, b, c) = behind_a_busy_writer(store, async {
            store.count("e", crate::store::Counted::Received, hour * 3_600_000);
            tokio::join!(
                store.run_intake(jobs.0, PATIENT),
                store.run_intake(jobs.1, PATIENT),
                store.run_intake(jobs.2, PATIENT)
            )
        })
        .await;
        [a, b, c]
    }

    #[tokio::test]
    async fn a_failing_insert_in_a_batch_run_bare_fails_alone_and_the_counters_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let half_then_fail = |conn: &Connection| {
            put("b")(conn)?;
            Err(rusqlite::Error::QueryReturnedNoRows)
        };
        let hours = |conn: &Connection| {
            conn.query_row("SELECT count(*) FROM hourly", [], |r| r.get::<_, i64>(0))
        };
        let now = now_ms() / 3_600_000;
        let [a, b, c] = bare_batch(&store, (put("a"), half_then_fail, put("c")), now).await;
        assert!(a.is_ok() && b.is_err() && c.is_ok(), "{a:?} {b:?} {c:?}");
        assert!(store.tally().is_empty(), "the batch folded the tally");
        assert_eq!(
            meta_keys(&store).await,
            ["a", "c"],
            "b's first statement is undone"
        );
        assert_eq!(store.run(hours).await.unwrap(), 1, "the tally was folded");
        // One that does not fail commits whole, the counters with it (once due: the first
        // batch folded them just now).
        store.tally().fold_now();
        let [d, e, f] = bare_batch(&store, (put("d"), put("e"), put("f")), now - 1).await;
        assert!(d.is_ok() && e.is_ok() && f.is_ok(), "{d:?} {e:?} {f:?}");
        assert!(store.tally().is_empty(), "the bare batch folded the tally");
        assert_eq!(meta_keys(&store).await, ["a", "c", "d", "e", "f"]);
        assert_eq!(store.run(hours).await.unwrap(), 2, "the tally was folded");
        store.close();
    }

    #[tokio::test]
    async fn a_transaction_rolled_back_in_a_batch_run_bare_fails_the_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let rolled_back = |conn: &Connection| conn.execute_batch("ROLLBACK");
        let now = now_ms() / 3_600_000;
        let [a, b, c] = bare_batch(&store, (put("a"), rolled_back, put("c")), now).await;
        assert!(a.is_err() && b.is_err() && c.is_err(), "{a:?} {b:?} {c:?}");
        assert!(
            meta_keys(&store).await.is_empty(),
            "c did not commit on its own"
        );
        store.run_intake(put("d"), PATIENT).await.unwrap();
        assert_eq!(meta_keys(&store).await, ["d"]);
        store.close();
    }

    #[tokio::test]
    async fn an_intake_job_given_up_while_the_writer_was_busy_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let (gave_up, kept) = behind_a_busy_writer(&store, async {
            tokio::join!(
                store.run_intake(put("gave-up"), Duration::from_millis(20)),
                store.run_intake(put("kept"), PATIENT)
            )
        })
        .await;
        assert!(
            matches!(gave_up, Err(StoreError::NotTaken(_))),
            "{gave_up:?}"
        );
        kept.unwrap();
        // The writer has run the batch both were in: the one given up is not in it.
        assert_eq!(meta_keys(&store).await, ["kept"]);
        store.close();
    }

    #[tokio::test]
    async fn an_intake_job_taken_before_its_deadline_is_answered_with_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        // Taken at once (the writer is idle), then 150 ms of work: past the 20 ms deadline.
        let slow = |conn: &Connection| {
            std::thread::sleep(Duration::from_millis(150));
            put("slow")(conn)
        };
        store
            .run_intake(slow, Duration::from_millis(20))
            .await
            .unwrap();
        assert_eq!(meta_keys(&store).await, ["slow"]);
        store.close();
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
