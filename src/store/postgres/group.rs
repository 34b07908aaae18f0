//! Intake's group commit on PostgreSQL: the inserts of concurrent requests share
//! transactions, as SQLite's writer batches them, so PostgreSQL pays one COMMIT (one WAL
//! flush) per group instead of one per request. [`Grouper`] is the queue; [`COMMITTERS`]
//! tasks each take every insert waiting (up to [`GROUP_MAX`]), run them in one transaction on
//! one pooled connection, COMMIT, and only then answer each: a 2xx never comes before the
//! COMMIT of the transaction holding its row.
//!
//! Inside the transaction each event is its own statement (`intake::INSERT`, the barrier
//! itself), pipelined: a second copy of a key in the same group sees the first's row and is a
//! duplicate. The statements run in (endpoint, dedup key) order, so two transactions taking
//! the same keys (another committer, another instance) wait for each other in one order and
//! never deadlock. An event that fails for a reason of its own (bad data, a constraint, a
//! size limit: SQLSTATE classes 22, 23, 54) rolls the group back; it is then run alone
//! (today's single statement, its own answer) and the others again as a group. A deadlock
//! or serialization failure (class 40) runs each event alone; any other failure (the
//! database unreachable, read-only, out of disk, past its timeout) is every event's answer,
//! as each alone would meet it too. A group of one is the single statement in autocommit.
//!
//! A committer takes its inserts (`handover.rs`) once it holds a connection, before `BEGIN`:
//! an insert whose request gave up by then (503) is dropped unrun; one taken is answered
//! with its real outcome, the request waiting for it past its deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::error;
use super::intake::{self, INSERT, KNOWN};
use crate::store::StoreError;
use crate::store::handover::{Claim, handover};
use crate::store::intake::{Inserted, NewEvent};

/// Tasks committing groups at once: while one waits for its COMMIT's WAL flush, another
/// runs its statements. Each holds one pooled connection while it commits.
const COMMITTERS: usize = 4;
/// The most events in one transaction.
const GROUP_MAX: usize = 64;

/// An insert waiting for a group, and where its answer goes.
struct Job {
    event: NewEvent,
    reply: oneshot::Sender<Result<Inserted, StoreError>>,
    /// The committer's end of the hand-over with the waiting request.
    claim: Claim,
}

/// The queue of inserts to the committers. The committers end when it is dropped (with
/// its clones).
#[derive(Clone)]
pub(super) struct Grouper {
    queue: mpsc::UnboundedSender<Job>,
}

impl Grouper {
    /// Starts the committers on `pool`.
    pub(super) fn start(pool: Pool) -> Grouper {
        let (queue, waiting) = mpsc::unbounded_channel();
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..COMMITTERS {
            tokio::spawn(committer(pool.clone(), waiting.clone()));
        }
        Grouper { queue }
    }

    /// Stores `event` in the next group; resolves after that group's COMMIT, or, if no
    /// committer took it within `deadline`, gives it up (`handover.rs`).
    pub(super) async fn insert(
        &self,
        event: NewEvent,
        deadline: Duration,
    ) -> Result<Inserted, StoreError> {
        let (reply, answer) = oneshot::channel();
        let (claim, waiter) = handover();
        self.queue
            .send(Job {
                event,
                reply,
                claim,
            })
            .map_err(|_| StoreError::Closed)?;
        waiter.answer(answer, deadline).await
    }
}

/// Takes every insert waiting (up to [`GROUP_MAX`]) and commits them, until the queue closes.
async fn committer(pool: Pool, waiting: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    let mut jobs = Vec::with_capacity(GROUP_MAX);
    loop {
        // One committer at a time waits on the queue; it lets go once it has its group.
        if waiting.lock().await.recv_many(&mut jobs, GROUP_MAX).await == 0 {
            return;
        }
        commit(&pool, std::mem::take(&mut jobs)).await;
    }
}

/// Commits `jobs` and answers each.
async fn commit(pool: &Pool, mut jobs: Vec<Job>) {
    let client = match super::client_of(pool).await {
        Ok(client) => client,
        Err(e) => return answer_all(jobs, &e),
    };
    // Taken only now, with a connection in hand, just before BEGIN: an insert whose request
    // gave up while it waited for a committer or a connection is dropped unrun.
    jobs.retain(|job| job.claim.take());
    // A batch with items goes alone, in a transaction of its own that locks its items
    // (`intake.rs`); every other event as before. An Adyen-only cost.
    if jobs.iter().any(|job| !job.event.items.is_empty()) {
        let batches;
        (batches, jobs) = jobs
            .into_iter()
            .partition(|job| !job.event.items.is_empty());
        alone(&client, batches).await;
    }
    if jobs.is_empty() {
        return;
    }
    // One lock order for every transaction (stable: copies of a key keep their arrival order).
    jobs.sort_by(|a, b| {
        (&a.event.endpoint, &a.event.dedup_key).cmp(&(&b.event.endpoint, &b.event.dedup_key))
    });
    loop {
        if jobs.len() == 1 {
            return alone(&client, jobs).await;
        }
        match in_one_transaction(&client, &jobs).await {
            Ok(inserted) => {
                for (job, inserted) in jobs.into_iter().zip(inserted) {
                    let _ = job.reply.send(Ok(inserted));
                }
                return;
            }
            Err(Failed::Event(at)) => {
                // Its own answer, as the single statement gives it; the others try again.
                let culprit = jobs.remove(at);
                alone(&client, vec![culprit]).await;
                if jobs.is_empty() {
                    return;
                }
            }
            Err(Failed::Conflict) => return alone(&client, jobs).await,
            Err(Failed::Database(e)) => return answer_all(jobs, &e),
        }
    }
}

/// Runs each of `jobs` as its own single statement (autocommit) and answers it.
async fn alone(client: &Object, jobs: Vec<Job>) {
    for job in jobs {
        let inserted = intake::insert_one(client, &job.event).await;
        let _ = job.reply.send(inserted);
    }
}

fn answer_all(jobs: Vec<Job>, e: &StoreError) {
    for job in jobs {
        let _ = job.reply.send(Err(e.clone()));
    }
}

/// Why a group did not commit (it was rolled back, or its connection is gone).
enum Failed {
    /// The event at this index failed for a reason of its own.
    Event(usize),
    /// A deadlock or a serialization failure: worth trying each event alone.
    Conflict,
    /// The database's state, not an event's: every event's answer.
    Database(StoreError),
}

impl Failed {
    /// `e`, met by the statement of the event at `at` (None: no event's, e.g. the COMMIT's).
    fn of(e: tokio_postgres::Error, at: Option<usize>) -> Failed {
        let class = e
            .code()
            .map(|code| code.code().get(..2).unwrap_or_default());
        match (class, at) {
            (Some("22" | "23" | "54"), Some(at)) => Failed::Event(at),
            (Some("22" | "23" | "54" | "40"), _) => Failed::Conflict,
            _ => Failed::Database(error(e)),
        }
    }
}

/// BEGIN, the events' statements (pipelined), the duplicates' known ids (pipelined), COMMIT.
async fn in_one_transaction(client: &Object, jobs: &[Job]) -> Result<Vec<Inserted>, Failed> {
    let setup = |e| Failed::Database(error(e));
    let insert = client.prepare_cached(INSERT).await.map_err(setup)?;
    let known = client.prepare_cached(KNOWN).await.map_err(setup)?;
    client.batch_execute("BEGIN").await.map_err(setup)?;
    let mut tried = pipelined(
        jobs.iter()
            .map(|job| intake::try_insert(client, &insert, &job.event)),
    )
    .await;
    // The first failure is the real one; the statements after it met an aborted transaction.
    if let Some(at) = tried.iter().position(Result::is_err)
        && let Err(e) = tried.swap_remove(at)
    {
        return Err(rolled_back(client, Failed::of(e, Some(at))).await);
    }
    let duplicates: Vec<usize> = (0..jobs.len())
        .filter(|&at| matches!(tried[at], Ok(None)))
        .collect();
    let known_ids = pipelined(
        duplicates
            .iter()
            .map(|&at| intake::known_id(client, &known, &jobs[at].event)),
    )
    .await;
    let mut inserted: Vec<Inserted> = tried
        .into_iter()
        .map(|r| Inserted::New(r.ok().flatten().unwrap_or_default()))
        .collect();
    for (&at, id) in duplicates.iter().zip(known_ids) {
        match id {
            Ok(id) => inserted[at] = Inserted::Duplicate(id),
            Err(e) => return Err(rolled_back(client, Failed::of(e, None)).await),
        }
    }
    match client.batch_execute("COMMIT").await {
        Ok(()) => Ok(inserted),
        Err(e) => Err(Failed::of(e, None)),
    }
}

/// Ends the failed transaction; a connection that cannot even do that fails the group.
async fn rolled_back(client: &Object, failed: Failed) -> Failed {
    match client.batch_execute("ROLLBACK").await {
        Ok(()) => failed,
        Err(e) => Failed::Database(error(e)),
    }
}

/// Polls `futures` together, so their requests go out on the connection back to back (each
/// is sent at its first poll, in this order); their outputs in the same order.
async fn pipelined<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(done) => *output = Some(done),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
