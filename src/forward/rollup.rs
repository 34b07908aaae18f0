//! The events' roll-up status (`delivered` when every delivery of an event is, else `dead`),
//! written in batches: a task that owns the ids of events whose last delivery just finished
//! and rolls them up together a moment later, in one commit.
//!
//! Written one by one, each roll-up was a page of `events` in the WAL per delivered event,
//! about a third of delivering's disk writes; a batch of events received close together
//! shares its pages (bench/PROFILE.md, "Disk writes per delivered event"). The roll-up is
//! derived data: the deliveries rows are the record, so a batch lost to a crash only leaves
//! events `pending` whose deliveries are all finished, and [`crate::store::Store::recover`]
//! rolls those up at the next start. A stop flushes what is left.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::store::{Store, StoreError};

/// How long an event's roll-up may wait for others to share its commit.
pub const ROLL_UP_AFTER: Duration = Duration::from_millis(250);

/// The running roll-up task; [`RollUp::stop`] flushes and ends it.
pub struct RollUp {
    tx: mpsc::UnboundedSender<i64>,
    task: JoinHandle<()>,
}

impl RollUp {
    pub fn start(store: Store) -> RollUp {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(crate::panics::named("roll-up", run(store, rx)));
        RollUp { tx, task }
    }

    /// A handle for the delivery slots: they send each event whose delivery finished.
    pub fn sender(&self) -> mpsc::UnboundedSender<i64> {
        self.tx.clone()
    }

    /// Ends once every sender is gone (the worker's slots have ended), after the last flush.
    pub async fn stop(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

async fn run(store: Store, mut rx: mpsc::UnboundedReceiver<i64>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let gather = tokio::time::sleep(ROLL_UP_AFTER);
        tokio::pin!(gather);
        let mut closed = false;
        loop {
            tokio::select! {
                _ = &mut gather => break,
                more = rx.recv() => match more {
                    Some(id) => batch.push(id),
                    None => {
                        closed = true;
                        break;
                    }
                },
            }
        }
        flush(&store, batch).await;
        if closed {
            return;
        }
    }
}

/// Rolls the batch up; a failure (the database locked by another process) is retried a few
/// times, and if it still fails the next start's recovery rolls these events up.
async fn flush(store: &Store, mut batch: Vec<i64>) {
    batch.sort_unstable();
    batch.dedup();
    let mut backoff = Duration::from_millis(200);
    for _ in 0..5 {
        match store.roll_up(batch.clone()).await {
            Ok(()) | Err(StoreError::Closed) => return,
            Err(e) => {
                tracing::warn!(events = batch.len(), error = %e, "cannot write the events' roll-up status; retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
    }
    tracing::error!(
        events = batch.len(),
        "the events' roll-up status is not written; the next start writes it"
    );
}
