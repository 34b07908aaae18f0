//! The PostgreSQL backend: [`Pg`], a small pool of connections (deadpool) to one database
//! that any number of portaria instances share. This file owns connecting (settings every
//! session gets, bounded waits) and the error mapping; `schema.rs` the tables and migrations,
//! then one file per consumer, mirroring the SQLite ones: `intake.rs` (the dedup barrier),
//! `group.rs` (intake's group commit: concurrent inserts in shared transactions),
//! `observe.rs` (readiness probe, queue figures), `pauses.rs` (paused routes), `queue.rs` (the worker's claims,
//! leases and attempts), `listen.rs` (LISTEN/NOTIFY wake-ups between instances, the alerts
//! lock), `alerts.rs` (the alerts task's reads and state, one instance announcing),
//! `retention.rs` (pruning under the retention lock), `restore.rs` (`archive replay`'s
//! restore), `copy.rs` (`portaria store copy` from SQLite),
//! `counters.rs` (the status page's hourly counters, folded in by a task), `dashboard.rs`
//! (what the status page and `portaria events` read and replay).
//!
//! Every session gets `synchronous_commit = on` (no 2xx before the WAL flush) and statement
//! and lock timeouts. TLS, when the URL's `sslmode` asks for it, through `tls.rs` (rustls), on
//! every connection. Nothing here ever formats the connection URL: it may hold a password;
//! an error says what the client said and the causes behind it (the TLS or OS error).

mod alerts;
mod copy;
mod counters;
mod dashboard;
mod fetches;
mod group;
mod intake;
mod listen;
mod observe;
mod pauses;
mod quarantine;
mod queue;
mod reconcile;
mod restore;
mod retention;
mod rows;
mod schema;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};

pub(super) use reconcile::ReconcileLock;
pub(super) use retention::RetentionLock;

use super::StoreError;
use super::counters::Tally;
use super::intake::{Inserted, NewEvent};
use super::observe::IntakeHealth;

/// Connections per instance: intake's committers (`group.rs`), the worker, the probe and the
/// pruner.
const POOL_SIZE: usize = 16;
/// How long a call waits for a connection (a free slot, or a new connection to be made):
/// well inside intake's 5 s deadline, so an unreachable database answers 503 in time.
const CONNECTION_WAIT: Duration = Duration::from_secs(2);
/// Every session's settings: a COMMIT returns only once it is durable (whatever the server's
/// or database's default), and no statement runs for longer than intake waits.
const SESSION_OPTIONS: &str = "-c synchronous_commit=on -c statement_timeout=4000 \
     -c lock_timeout=4000 -c idle_in_transaction_session_timeout=10000";

/// The pool of one instance.
pub(in crate::store) struct Pg {
    pool: Pool,
    /// This instance's name in `deliveries.claimed_by`: unique per process start.
    instance: String,
    /// How long a claim holds without renewal.
    lease_ms: i64,
    /// Intake's queue to the committers that group inserts into transactions (`group.rs`).
    grouper: group::Grouper,
    /// LISTEN/NOTIFY between the instances and the alerts lock (`listen.rs`).
    wakeups: listen::Wakeups,
    /// Dead deliveries handed to the alerts task, not yet marked announced (`alerts.rs`).
    noted: alerts::Noted,
    /// The status page's counts not in `hourly` yet, and what asks for the last fold at close.
    tally: Arc<Tally>,
    folding: counters::Folding,
    closing: counters::Closing,
    /// How the latest intake commits went, for `/readyz`.
    health: Arc<IntakeHealth>,
}

/// How long closing waits for the last fold of the counters.
const LAST_FOLD_WAIT: Duration = Duration::from_secs(3);

impl Pg {
    /// Connects with `config` (its `sslmode` says whether TLS is asked for and plain
    /// accepted; `tls`, how the server's certificate is checked) and brings the schema to
    /// this binary's version (or refuses a newer one).
    pub(in crate::store) async fn connect(
        mut config: tokio_postgres::Config,
        tls: Option<Arc<rustls::ClientConfig>>,
        tally: Arc<Tally>,
        health: Arc<IntakeHealth>,
    ) -> Result<Pg, StoreError> {
        let options = match config.get_options() {
            Some(own) => format!("{own} {SESSION_OPTIONS}"),
            None => SESSION_OPTIONS.to_string(),
        };
        config.options(&options);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECTION_WAIT);
        }
        if config.get_application_name().is_none() {
            config.application_name("portaria");
        }
        let listening = config.clone();
        let connector = tls::Connector::new(tls);
        let manager = Manager::from_config(
            config,
            connector.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECTION_WAIT))
            .create_timeout(Some(CONNECTION_WAIT))
            .recycle_timeout(Some(CONNECTION_WAIT))
            .build()
            .map_err(|e| StoreError::Postgres(format!("cannot build the connection pool: {e}")))?;
        let (closing, close_rx) = tokio::sync::mpsc::channel(1);
        let pg = Pg {
            wakeups: listen::Wakeups::start(listening, connector, pool.clone()),
            grouper: group::Grouper::start(pool.clone()),
            pool,
            instance: instance_id(),
            lease_ms: queue::lease_ms(),
            noted: alerts::Noted::default(),
            tally,
            folding: counters::Folding::default(),
            closing,
            health,
        };
        schema::migrate(&mut *pg.client().await?).await?;
        tokio::spawn(queue::lease_keeper(
            pg.pool.clone(),
            pg.instance.clone(),
            pg.lease_ms,
        ));
        tokio::spawn(counters::counter_keeper(
            pg.pool.clone(),
            pg.tally.clone(),
            pg.folding.clone(),
            close_rx,
        ));
        Ok(pg)
    }

    /// A connection from the pool, within [`CONNECTION_WAIT`].
    pub(super) async fn client(&self) -> Result<Object, StoreError> {
        client_of(&self.pool).await
    }

    /// Stores `e` unless its (endpoint, dedup key) is known within its window, in the next
    /// group's transaction (`group.rs`); resolves after its COMMIT, or gives it up if no
    /// committer took it within `deadline` (`handover.rs`). A new event with routes is
    /// announced to the other instances.
    pub(in crate::store) async fn insert_event(
        &self,
        e: NewEvent,
        deadline: Duration,
    ) -> Result<Inserted, StoreError> {
        // A task of its own, so its outcome (COMMIT included) is recorded for `/readyz` even
        // when the caller stopped waiting, as the writer thread does on SQLite.
        let (grouper, health) = (self.grouper.clone(), self.health.clone());
        let accepted = self.wakeups.accepted.clone();
        let task = tokio::spawn(async move {
            let routed = !e.routes.is_empty();
            let inserted = grouper.insert(e, deadline).await;
            health.record(inserted.as_ref().map(drop));
            if matches!(inserted, Ok(Inserted::New(_))) && routed {
                // Coalesced with the other commits of this round (`listen.rs`).
                accepted.notify_one();
            }
            inserted
        });
        task.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Folds the counters a last time (waiting up to [`LAST_FOLD_WAIT`] for the task, which
    /// needs the runtime running: the server closes from a blocking thread), then closes the
    /// pool: idle connections go now, busy ones when their call returns.
    pub(in crate::store) fn close(&self) {
        self.wakeups.stop.send_replace(true);
        // Asked even with the tally empty: a fold in flight has taken the counts and not
        // written them yet; the keeper answers once it has.
        let (done, folded) = std::sync::mpsc::sync_channel(1);
        if self.closing.try_send(done).is_ok() {
            let _ = folded.recv_timeout(LAST_FOLD_WAIT);
        }
        self.pool.close();
    }
}

/// A PostgreSQL error as the store reports it: the server's own message (code and text), or
/// the client's (a closed connection, a timeout). Neither holds the URL or the password.
pub(super) fn error(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => StoreError::Postgres(format!("{} ({})", db.message(), db.code().code())),
        None => StoreError::Postgres(with_causes(&e)),
    }
}

/// A connection from `pool`, or an error that names what is behind a failed connection (the
/// TLS or OS error): for [`Pg::client`] and the tasks that hold the pool alone.
pub(super) async fn client_of(pool: &Pool) -> Result<Object, StoreError> {
    pool.get().await.map_err(|e| {
        let why = match e {
            deadpool_postgres::PoolError::Backend(e) => with_causes(&e),
            other => other.to_string(),
        };
        StoreError::Postgres(format!("cannot get a connection to PostgreSQL: {why}"))
    })
}

/// The client's message and the errors behind it (what a TLS handshake found wrong with
/// the certificate, an OS error): the client's own message names only the kind.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The host name, the process id and the start time: no two running instances share it.
fn instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{host}:{}:{started:x}", std::process::id())
}
