//! The single writer thread: it owns the one write connection and commits every job that is
//! waiting as one transaction (group commit), so a burst of requests costs one fsync, not one
//! each. A job's caller hears back only after its transaction is durable.
//!
//! Each job runs inside its own SAVEPOINT, so one failing job rolls back alone and the rest of
//! its batch still commits. If the COMMIT itself fails (disk full, I/O error, lock timeout),
//! every job of the batch hears the error and nothing of it is kept. So it goes, too, when
//! SQLite rolls the whole transaction back by itself in the middle of the batch (it may, on
//! disk full, I/O errors and out of memory): the jobs already run hear the error, the jobs not
//! yet run are not run, and none of them is committed piecemeal.
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
//! The writer never copies the WAL back into the database in the middle of a commit: its WAL
//! hook hands that to the checkpoint thread ([`super::checkpoint`]), and between batches it only
//! finishes what that thread started.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::StoreError;
use super::checkpoint::Checkpointer;

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
    /// Runs on the write connection inside the batch's transaction; says whether it
    /// succeeded, and hands back what to call after COMMIT.
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish);
    /// The job will not run (its batch could not begin, or was lost before its turn): tell the
    /// caller why.
    fn abort(self: Box<Self>, err: StoreError);
}

pub(super) enum Message {
    Job(Box<dyn Job>),
    /// Runs alone with no transaction open: for statements that SQLite refuses inside one.
    /// Its `Finish` hears `Ok(())`: each of its statements committed on its own.
    Solo(Box<dyn Job>),
    /// Finish the queue, close the connection (checkpointing the WAL) and exit.
    Close,
}

/// Most jobs one transaction takes; bounds the latency a very long queue adds.
const MAX_BATCH: usize = 1024;

pub(super) fn spawn(
    conn: Connection,
    path: PathBuf,
    rx: mpsc::Receiver<Message>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("portaria-writer".into())
        .spawn(move || run(conn, &path, rx))
}

fn run(mut conn: Connection, path: &Path, rx: mpsc::Receiver<Message>) {
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
    while !closing {
        // Block for the first job, then take whatever else is already waiting, up to a solo
        // job: it runs after the batch in front of it, so the queue's order holds.
        match rx.recv() {
            Ok(Message::Job(job)) => batch.push(job),
            Ok(Message::Solo(job)) => solo = Some(job),
            Ok(Message::Close) | Err(_) => break,
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
            commit_batch(&conn, &mut batch);
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
    if let Some(checkpointer) = checkpointer {
        checkpointer.stop(&mut conn);
    }
    // The last connection to close checkpoints the WAL and removes it.
    if let Err((_, e)) = conn.close() {
        tracing::error!(error = %e, "closing the database failed");
    }
}

fn commit_batch(conn: &Connection, batch: &mut Vec<Box<dyn Job>>) {
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        let err = StoreError::from(e);
        for job in batch.drain(..) {
            job.abort(err.clone());
        }
        return;
    }
    let mut finishes = Vec::with_capacity(batch.len());
    let mut jobs = batch.drain(..);
    while let Some(job) = jobs.next() {
        // Never run a job outside its savepoint: half of it could commit without the rest.
        if let Err(e) = exec(conn, "SAVEPOINT job") {
            job.abort(StoreError::from(e));
            continue;
        }
        let (ok, finish) = job.run(conn);
        finishes.push(finish);
        // SQLite may have rolled the whole transaction back by itself: what ran is gone, and
        // a SAVEPOINT now would open a transaction of its own and commit the next job alone.
        let lost = if conn.is_autocommit() {
            Some(StoreError::Sqlite(
                "the transaction was rolled back by the database (disk full or I/O error?)".into(),
            ))
        } else {
            let end = if ok {
                exec(conn, "RELEASE job")
            } else {
                rollback_to(conn)
            };
            // A failed job whose savepoint cannot be rolled back would leave half its work in
            // the batch: give up the whole batch instead.
            end.err().map(|e| {
                let _ = exec(conn, "ROLLBACK");
                StoreError::Sqlite(format!("ending a job's savepoint failed: {e}"))
            })
        };
        if let Some(err) = lost {
            tracing::error!(error = %err, "batch lost; every job in it hears the error");
            for job in jobs {
                job.abort(err.clone());
            }
            for finish in finishes {
                finish(Err(err.clone()));
            }
            return;
        }
    }
    let result = exec(conn, "COMMIT").map_err(StoreError::from);
    if result.is_err() {
        // COMMIT failed: make sure nothing of the batch survives, then report to everyone.
        let _ = exec(conn, "ROLLBACK");
    }
    for finish in finishes {
        finish(result.clone());
    }
}

/// Runs one of the writer's fixed statements through the statement cache: they run for every
/// batch or job, and parsing them anew each time showed in the profile.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

fn rollback_to(conn: &Connection) -> rusqlite::Result<()> {
    exec(conn, "ROLLBACK TO job")?;
    exec(conn, "RELEASE job")
}
