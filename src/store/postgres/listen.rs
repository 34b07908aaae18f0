//! Wake-ups across instances, by PostgreSQL's `LISTEN/NOTIFY` on one channel,
//! `portaria_deliveries`: every instance's [`listener`] holds a connection of its own (outside the
//! pool) that listens, and wakes this instance's worker ([`Store::changed_elsewhere`]) when
//! any session notifies. Two things notify:
//!
//! - intake, through [`announcer`]: an accepted event with deliveries asks it
//!   ([`Pg::announce`]), and it sends one `NOTIFY` for everything accepted since its last one,
//!   in a transaction of its own. Not inside the intake transaction: PostgreSQL serializes
//!   the commits of notifying transactions (a lock held across the commit's flush), which
//!   would undo the intake's concurrent commits;
//! - a replay, by the trigger `deliveries_replayed` (`schema.rs`): a finished delivery set back
//!   to pending, by the status page or the CLI of any instance.
//!
//! A lost listening connection is made again (backoff 250 ms to 5 s), and the worker is woken
//! once it is, for what was notified meanwhile; the worker's slow check of the database
//! (`forward::EXTERNAL_CHECK`) stays as the fallback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::{Notify, watch};
use tokio_postgres::{AsyncMessage, NoTls};

use super::{Pg, error};
use crate::store::{Store, StoreError};

/// One wake-up for everything accepted since the last: no flush of its own (a lost
/// notification only means the fallback check finds the delivery).
const ANNOUNCE: &str = "BEGIN; SET LOCAL synchronous_commit = off; \
     NOTIFY portaria_deliveries; COMMIT";
const LISTEN: &str = "LISTEN portaria_deliveries";
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the instance's wake-up tasks share with [`Pg`].
pub(super) struct Wakeups {
    /// Set by the listener: something changed in another session.
    pub(super) changed: Arc<Notify>,
    /// Set by intake: something to announce.
    pub(super) accepted: Arc<Notify>,
    /// `true` once the pool closes: both tasks end.
    pub(super) stop: watch::Sender<bool>,
}

impl Wakeups {
    /// Starts the listener (on a connection of its own, made from `config`) and the
    /// announcer (on the pool).
    pub(super) fn start(config: tokio_postgres::Config, pool: Pool) -> Wakeups {
        let (stop, stopped) = watch::channel(false);
        let changed = Arc::new(Notify::new());
        let accepted = Arc::new(Notify::new());
        tokio::spawn(listener(config, changed.clone(), stopped.clone()));
        tokio::spawn(announcer(pool, accepted.clone(), stopped));
        Wakeups {
            changed,
            accepted,
            stop,
        }
    }
}

impl Pg {
    /// An event with deliveries was committed: tell the other instances (soon, coalesced).
    pub(in crate::store) fn announce(&self) {
        self.wakeups.accepted.notify_one();
    }
}

impl Store {
    /// Resolves when another session changed the queue (PostgreSQL: a notification on
    /// `portaria_deliveries`); never on SQLite, whose worker sees other processes' commits through its
    /// `data_version` check.
    pub async fn changed_elsewhere(&self) {
        match self.postgres() {
            Some(pg) => pg.wakeups.changed.notified().await,
            None => std::future::pending().await,
        }
    }
}

/// Sends one `NOTIFY` per round, for every event accepted since the last round began.
async fn announcer(pool: Pool, accepted: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = accepted.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let sent = match pool.get().await {
            Ok(client) => client.batch_execute(ANNOUNCE).await.map_err(error),
            Err(e) => Err(StoreError::Postgres(format!("no connection: {e}"))),
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "cannot notify the other instances of a new event");
        }
    }
}

/// Listens on `portaria_deliveries` until the pool closes, making the connection again when it is lost.
async fn listener(
    config: tokio_postgres::Config,
    changed: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let started = Instant::now();
        let ended = listen(&config, &changed, &mut stop).await;
        if *stop.borrow() {
            return;
        }
        if started.elapsed() > Duration::from_secs(30) {
            backoff = BACKOFF_FIRST;
        }
        match ended {
            Ok(()) => tracing::warn!(
                "the PostgreSQL connection listening for new events was closed; reconnecting"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "the PostgreSQL connection listening for new events was lost; reconnecting"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One listening session: connects, listens, wakes the worker once (what was notified while
/// no session listened), then on every notification, until the connection ends or the pool
/// closes.
async fn listen(
    config: &tokio_postgres::Config,
    changed: &Notify,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let (client, mut connection) = config.connect(NoTls).await.map_err(error)?;
    let messages = async {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => changed.notify_one(),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(error(e)),
                None => return Ok(()),
            }
        }
    };
    tokio::pin!(messages);
    tokio::select! {
        ended = &mut messages => return ended,
        listening = client.batch_execute(LISTEN) => listening.map_err(error)?,
    }
    changed.notify_one();
    tokio::select! {
        ended = &mut messages => ended,
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}
