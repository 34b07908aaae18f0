//! Wake-ups across instances, by PostgreSQL's `LISTEN/NOTIFY` on one channel,
//! `portaria_deliveries`: every instance's [`listener`] holds a connection of its own (outside the
//! pool) that listens, and wakes this instance's worker ([`crate::store::Store::changed_elsewhere`]) when
//! any session notifies. Two things notify:
//!
//! - intake, through [`announcer`]: an accepted event with deliveries asks it
//!   (`Pg::insert_event`), and it sends one `NOTIFY` for everything accepted since its last one,
//!   in a transaction of its own. Not inside the intake transaction: PostgreSQL serializes
//!   the commits of notifying transactions (a lock held across the commit's flush), which
//!   would undo the intake's concurrent commits;
//! - a replay, by the trigger `deliveries_replayed` (`schema.rs`): a finished delivery set back
//!   to pending, by the status page or the CLI of any instance.
//!
//! A lost listening connection is made again (backoff 250 ms to 5 s), and the worker is woken
//! once it is, for what was notified meanwhile; the worker's slow check of the database
//! (`forward::EXTERNAL_CHECK`) stays as the fallback.
//!
//! The same connection holds the alerts lock (a session-level advisory lock) for an instance
//! whose alerts task asks for it ([`Wakeups::leads_alerts`]): one instance at a time
//! announces dead deliveries (`alerts.rs`). The lock goes with the session: when the
//! connection is lost (or the instance dies), another instance that asks takes it within
//! [`LEAD_RETRY`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::{Notify, watch};
use tokio_postgres::AsyncMessage;

use super::tls::Connector;
use super::{Pg, error};
use crate::store::StoreError;

/// One wake-up for everything accepted since the last: no flush of its own (a lost
/// notification only means the fallback check finds the delivery).
const ANNOUNCE: &str = "BEGIN; SET LOCAL synchronous_commit = off; \
     NOTIFY portaria_deliveries; COMMIT";
const LISTEN: &str = "LISTEN portaria_deliveries";
/// Wakes every instance's worker when the transaction it runs in commits (for a change made
/// outside the intake and replay paths, which have their own: `archive replay`'s restore).
pub(super) const WAKE_ON_COMMIT: &str = "SELECT pg_notify('portaria_deliveries', '')";
/// The alerts lock (an arbitrary constant beside the migrations' one).
const ALERTS_LOCK: i64 = 0x706f_7274_6172_6962;
/// How often an instance that wants the alerts lock and does not hold it tries again.
const LEAD_RETRY: Duration = Duration::from_secs(2);
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
    /// The alerts lock: asked for, held.
    lead: Arc<Lead>,
}

/// The alerts lock's state, shared with the listener, which takes and holds it.
#[derive(Default)]
struct Lead {
    wanted: AtomicBool,
    held: AtomicBool,
    /// Wakes the listener to try at once when first asked.
    asked: Notify,
}

impl Wakeups {
    /// Starts the listener (on a connection of its own, made from `config` through `tls`,
    /// like the pool's) and the announcer (on the pool).
    pub(super) fn start(config: tokio_postgres::Config, tls: Connector, pool: Pool) -> Wakeups {
        let (stop, stopped) = watch::channel(false);
        let changed = Arc::new(Notify::new());
        let accepted = Arc::new(Notify::new());
        let lead = Arc::new(Lead::default());
        tokio::spawn(listener(
            config,
            tls,
            changed.clone(),
            lead.clone(),
            stopped.clone(),
        ));
        tokio::spawn(announcer(pool, accepted.clone(), stopped));
        Wakeups {
            changed,
            accepted,
            stop,
            lead,
        }
    }

    /// Whether this instance holds the alerts lock; the first call asks the listener for it.
    pub(super) fn leads_alerts(&self) -> bool {
        if !self.lead.wanted.swap(true, Ordering::SeqCst) {
            self.lead.asked.notify_one();
        }
        self.lead.held.load(Ordering::SeqCst)
    }
}

impl Pg {
    /// Resolves at a notification on `portaria_deliveries` (another instance's intake, a
    /// replay).
    pub(in crate::store) async fn changed_elsewhere(&self) {
        self.wakeups.changed.notified().await;
    }
}

/// Sends one `NOTIFY` per round, for every event accepted since the last round began.
async fn announcer(pool: Pool, accepted: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = accepted.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let sent = async {
            let client = super::client_of(&pool).await?;
            client.batch_execute(ANNOUNCE).await.map_err(error)
        }
        .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "cannot notify the other instances of a new event");
        }
    }
}

/// Listens on `portaria_deliveries` until the pool closes, making the connection again when it is lost.
async fn listener(
    config: tokio_postgres::Config,
    tls: Connector,
    changed: Arc<Notify>,
    lead: Arc<Lead>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let started = Instant::now();
        let ended = listen(&config, &tls, &changed, &lead, &mut stop).await;
        // The lock went with the session.
        lead.held.store(false, Ordering::SeqCst);
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
/// closes; meanwhile takes the alerts lock when it is wanted and free.
async fn listen(
    config: &tokio_postgres::Config,
    tls: &Connector,
    changed: &Notify,
    lead: &Lead,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let (client, mut connection) = config.connect(tls.clone()).await.map_err(error)?;
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
    let mut retry = tokio::time::interval(LEAD_RETRY);
    loop {
        tokio::select! {
            ended = &mut messages => return ended,
            _ = stop.wait_for(|s| *s) => return Ok(()),
            _ = retry.tick() => {}
            _ = lead.asked.notified() => {}
        }
        if !lead.wanted.load(Ordering::SeqCst) || lead.held.load(Ordering::SeqCst) {
            continue;
        }
        // The connection is driven by `messages`: polled while the query runs.
        let took = tokio::select! {
            ended = &mut messages => return ended,
            took = client.query_one("SELECT pg_try_advisory_lock($1)", &[&ALERTS_LOCK]) => took,
        };
        match took {
            Ok(row) => {
                let held: bool = row.get(0);
                if held {
                    tracing::info!(
                        "this instance announces dead events (it holds the alerts lock)"
                    );
                }
                lead.held.store(held, Ordering::SeqCst);
            }
            Err(e) => return Err(error(e)),
        }
    }
}
