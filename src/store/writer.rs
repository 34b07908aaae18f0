//! The single writer thread: it owns the one write connection and commits every job that is
//! waiting as one transaction (group commit), so a burst of requests costs one fsync, not one
//! each. A job's caller hears back only after its transaction is durable.
//!
//! Each job runs inside its own SAVEPOINT, so one failing job rolls back alone and the rest of
//! its batch still commits. If the COMMIT itself fails (disk full, I/O error, lock timeout),
//! every job of the batch hears the error and nothing of it is kept.
//!
//! SQLite refuses a few statements inside a transaction: a WAL checkpoint, for one (pruning
//! runs one to give the space back). Those go in as a *solo* job: the writer commits the batch
//! in front of it, runs it alone in autocommit mode, then goes back to batching. Queue order is
//! kept, the one connection keeps one owner, and jobs behind it wait only for its own run.

use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::StoreError;

/// Called once the batch a job ran in has committed (or failed to).
pub(super) type Finish = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// A unit of work for the writer.
pub(super) trait Job: Send {
    /// Runs on the write connection inside the batch's transaction; says whether it
    /// succeeded, and hands back what to call after COMMIT.
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish);
    /// The batch could not even start (BEGIN failed): tell the caller why.
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
    rx: mpsc::Receiver<Message>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("portaria-writer".into())
        .spawn(move || run(conn, rx))
}

fn run(conn: Connection, rx: mpsc::Receiver<Message>) {
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
            commit_batch(&conn, &mut batch);
        }
        if let Some(job) = solo.take() {
            let (_, finish) = job.run(&conn);
            finish(Ok(()));
        }
    }
    // Jobs sent after Close hear that the store is closed when their sender is dropped.
    drop(rx);
    if let Err((_, e)) = conn.close() {
        tracing::error!(error = %e, "closing the database failed");
    }
}

fn commit_batch(conn: &Connection, batch: &mut Vec<Box<dyn Job>>) {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let err = StoreError::from(e);
        for job in batch.drain(..) {
            job.abort(err.clone());
        }
        return;
    }
    let mut finishes = Vec::with_capacity(batch.len());
    for job in batch.drain(..) {
        let in_savepoint = conn.execute_batch("SAVEPOINT job").is_ok();
        let (ok, finish) = job.run(conn);
        if in_savepoint {
            let end = if ok {
                "RELEASE job"
            } else {
                "ROLLBACK TO job; RELEASE job"
            };
            if let Err(e) = conn.execute_batch(end) {
                tracing::error!(error = %e, "ending a savepoint failed");
            }
        }
        finishes.push(finish);
    }
    let result = conn.execute_batch("COMMIT").map_err(StoreError::from);
    if result.is_err() {
        // COMMIT failed: make sure nothing of the batch survives, then report to everyone.
        let _ = conn.execute_batch("ROLLBACK");
    }
    for finish in finishes {
        finish(result.clone());
    }
}
