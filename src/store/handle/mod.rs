//! [`Store`], the handle every caller holds: cheap to clone, async. It holds one [`Engine`],
//! SQLite (`sqlite/`) or PostgreSQL (`postgres/`), chosen when it is opened, and what both
//! share: the status page's [`Tally`] and intake's [`IntakeHealth`]. This file owns opening
//! and closing; the other public methods sit in a file per consumer (`intake.rs`,
//! `queue.rs`, ...), each one `match` over [`Engine`] handing the call to the engine's method
//! of the same name. This folder names the engines and the shared files; neither names it.

use std::path::Path;
use std::sync::Arc;

mod alerts;
mod backup;
mod copy;
mod counters;
mod dashboard;
mod events;
mod export;
mod fetches;
mod intake;
mod observe;
mod pauses;
mod pruning;
mod quarantine;
mod queue;
mod reconcile;
mod retention;

pub use pruning::Pruning;
pub use reconcile::ReconcileHold;

use super::StoreError;
use super::counters::Tally;
use super::observe::IntakeHealth;
use super::postgres::Pg;
use super::sqlite::{Sqlite, schema};

/// The handle on the database. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    /// The status page's counts not yet in `hourly` (the engine folds them in).
    tally: Arc<Tally>,
    /// How the latest intake commits went, for `/readyz` (the engine records them).
    intake: Arc<IntakeHealth>,
}

/// The database a store is on. Every public method of [`Store`] matches on it, so an engine
/// that lacks a method is a compile error, not an answer in operation.
pub(super) enum Engine {
    Sqlite(Sqlite),
    Postgres(Pg),
}

impl Store {
    /// Opens (creating if needed) the SQLite file for the server, upgrading an older schema,
    /// and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::sqlite(|tally, health| Sqlite::open(path, schema::Upgrade::Allowed, tally, health))
    }

    /// Opens the SQLite file for a command that writes through the same paths as the server
    /// (`portaria prune`, `events replay`, `archive replay`). It refuses an older schema: only
    /// the server upgrades, since an older server still running on the file would fail every
    /// write after.
    pub fn open_for_command(path: &Path) -> Result<Store, StoreError> {
        Store::sqlite(|tally, health| Sqlite::open(path, schema::Upgrade::Refused, tally, health))
    }

    /// Opens an existing SQLite file for a command that only reads (`events list/show`,
    /// `prune --dry-run`, `backup`, the source of `store copy`): a read-only connection and no
    /// writer thread, so it never takes the write lock next to a running server, and any user
    /// who can read the file (and its `-wal`/`-shm`) can look. A file of another schema
    /// version is refused; a write answers SQLite's read-only error.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        Store::sqlite(|tally, health| Sqlite::open_read_only(path, tally, health))
    }

    fn sqlite(
        open: impl FnOnce(Arc<Tally>, Arc<IntakeHealth>) -> Result<Sqlite, StoreError>,
    ) -> Result<Store, StoreError> {
        let (tally, intake) = (Arc::default(), Arc::default());
        let engine = Engine::Sqlite(open(Arc::clone(&tally), Arc::clone(&intake))?);
        Ok(Store::with(engine, tally, intake))
    }

    /// Connects to the PostgreSQL database `settings` name for the server, over TLS when its
    /// `sslmode` asks for it, checking the server's certificate as `tls` says (config's
    /// `DatabaseUrl::settings` and `tls_client`), and creates or upgrades its schema (see
    /// `postgres/schema.rs`). The URL never appears in an error.
    pub async fn open_postgres(
        settings: tokio_postgres::Config,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Store, StoreError> {
        let (tally, intake): (Arc<Tally>, Arc<IntakeHealth>) = (Arc::default(), Arc::default());
        let pg = Pg::connect(settings, tls, tally.clone(), intake.clone()).await?;
        Ok(Store::with(Engine::Postgres(pg), tally, intake))
    }

    fn with(engine: Engine, tally: Arc<Tally>, intake: Arc<IntakeHealth>) -> Store {
        Store {
            inner: Arc::new(Inner {
                engine,
                tally,
                intake,
            }),
        }
    }

    /// The engine, for the methods' `match`.
    pub(super) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The counts not folded into `hourly` yet.
    pub(super) fn tally(&self) -> &Tally {
        &self.inner.tally
    }

    /// How the latest intake commits went.
    pub(super) fn intake_health(&self) -> &IntakeHealth {
        &self.inner.intake
    }

    /// Lets the calls under way finish and closes the database: SQLite's writer finishes its
    /// queue, checkpoints the WAL and exits; PostgreSQL's counters are folded a last time and
    /// its pool closed. Calls after this hear `Closed`.
    pub fn close(&self) {
        match self.engine() {
            Engine::Sqlite(db) => db.close(),
            Engine::Postgres(pg) => pg.close(),
        }
    }
}
