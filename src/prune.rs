//! Retention: removes finished events past their window, archives them first when
//! `[storage] archive_dir` is set, and gives the space back to the file system.
//!
//! The server runs [`Pruner`], a background task that prunes once at start-up and then every
//! hour; `portaria prune` runs the same [`pass`] once through [`prune_once`], on a store of its
//! own. A pass:
//!
//! 0. holds the store's [`Pruning`](crate::store::Pruning) hold from start to end. On PostgreSQL that is the
//!    retention lock, so with several instances on one database one prunes at a time; an
//!    instance that finds it taken skips the pass ([`PruneError::Locked`], logged at debug;
//!    `portaria prune` says so) and tries again at its next one.
//! 1. deletes delivered and stored events received more than `retention_days` ago, and dead
//!    ones received more than `dead_retention_days` ago (their attempts go with them, by
//!    foreign key). Pending and delivering events are never touched: the store's one
//!    definition of "prunable" names finished statuses only.
//! 2. works in batches of [`BATCH`] rows, each its own writer job and so its own short group
//!    commit: intake never waits behind more than one batch.
//! 3. with an archive, reads each batch first, appends it to the day's archive file and
//!    fsyncs it, and only then deletes those rows (each only if it is still prunable). Nothing
//!    is deleted before its archive line is durably written.
//! 4. runs `PRAGMA incremental_vacuum` in rounds of [`VACUUM_PAGES`] (the file is created with
//!    `auto_vacuum = INCREMENTAL`), then a `wal_checkpoint(TRUNCATE)`, so the file shrinks and
//!    the WAL does not keep the deleted pages' size. The checkpoint is a *solo* writer job
//!    (SQLite refuses it inside a transaction) with no busy wait: a reader in the way makes it
//!    give up at once rather than hold intake up. On PostgreSQL both are the server's own.
//!
//! After each of its passes the server's pruner also drops each endpoint's rejected
//! requests kept longer than its `quarantine_for` ([`KeptFor`]; intake trims them too, but
//! only when the same endpoint refuses another request).
//!
//! Cut-offs are by `received_at`; an archive batch is also cut at [`BATCH_BYTES`], written on
//! a blocking thread. A failed pass is retried [`RETRY_FIRST`] later, doubling up to the
//! hourly pass. `portaria prune` opens a store of its own (upgrades refused, like every
//! command), so the batch loop and the queries exist once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::archive;
use crate::config::{Endpoint, Storage};
use crate::shutdown::Shutdown;
use crate::store::{Cutoffs, EventDetail, Reclaimed, Removed, Store, StoreError};
use crate::time::now_ms;

/// How often the server prunes, after the pass at start-up.
pub const EVERY: Duration = Duration::from_secs(3600);

/// After a failed pass (the database locked by another process, the disk full), the next one
/// comes this much sooner than [`EVERY`], doubling with each failure in a row up to it.
pub const RETRY_FIRST: Duration = Duration::from_secs(5);

/// Rows per delete job: small enough that a batch commits in milliseconds.
pub const BATCH: usize = 500;

/// With an archive, a batch also stops once its headers and bodies pass this, so a batch of
/// large bodies never holds hundreds of MiB in memory.
pub const BATCH_BYTES: u64 = 16 * 1024 * 1024;

/// Free pages returned to the file system per vacuum job (1 MiB with 1 KiB pages).
pub const VACUUM_PAGES: u32 = 1024;

const DAY_MS: i64 = 86_400_000;

/// Why a pass stopped. What it deleted before that stays deleted (and archived).
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another instance holds the retention lock (PostgreSQL): it is pruning now, and this
    /// pass did nothing.
    #[error(
        "another portaria instance is pruning this database now (it holds the retention \
         lock); nothing was done"
    )]
    Locked,
    /// The archive could not be written: the batch's rows were not deleted.
    #[error("archive: {0}")]
    Archive(#[from] io::Error),
}

/// What is past its window at `now_ms`, under `[storage]`'s retention.
pub fn cutoffs(storage: &Storage, now_ms: i64) -> Cutoffs {
    Cutoffs {
        finished_before_ms: now_ms - i64::from(storage.retention_days) * DAY_MS,
        dead_before_ms: now_ms - i64::from(storage.dead_retention_days) * DAY_MS,
    }
}

/// Events and bytes, for one endpoint and status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub events: u64,
    /// Stored headers and bodies.
    pub bytes: u64,
}

/// What a pass removed (or, for a dry run, would remove).
#[derive(Debug, Default)]
pub struct Report {
    /// By (endpoint, status).
    pub removed: BTreeMap<(String, &'static str), Tally>,
    /// Archive files written to.
    pub archived_to: BTreeSet<PathBuf>,
    /// How much smaller the database file got.
    pub reclaimed_bytes: u64,
}

impl Report {
    pub fn events(&self) -> u64 {
        self.removed.values().map(|t| t.events).sum()
    }

    fn count(&mut self, removed: Vec<Removed>) {
        for r in removed {
            let tally = self
                .removed
                .entry((r.endpoint, r.status.as_str()))
                .or_default();
            tally.events += 1;
            tally.bytes += r.bytes;
        }
    }

    /// The table `portaria prune` prints.
    pub fn write(&self, out: &mut impl Write, dry_run: bool, storage: &Storage) -> io::Result<()> {
        if self.removed.is_empty() {
            return writeln!(
                out,
                "nothing to prune (delivered and stored events are kept {} days, dead ones {})",
                storage.retention_days, storage.dead_retention_days
            );
        }
        let verb = if dry_run { "would remove" } else { "removed" };
        let note = if dry_run {
            " (dry run: nothing was changed)"
        } else {
            ""
        };
        writeln!(out, "{verb} {} event(s){note}", self.events())?;
        writeln!(
            out,
            "  {:<20}  {:<10}  {:>8}  {:>12}",
            "ENDPOINT", "STATUS", "EVENTS", "BYTES"
        )?;
        for ((endpoint, status), tally) in &self.removed {
            writeln!(
                out,
                "  {endpoint:<20}  {status:<10}  {:>8}  {:>12}",
                tally.events, tally.bytes
            )?;
        }
        if dry_run {
            if let Some(dir) = &storage.archive_dir {
                writeln!(out, "would archive them to {} first", dir.display())?;
            }
            return Ok(());
        }
        for file in &self.archived_to {
            writeln!(out, "archived to {}", file.display())?;
        }
        writeln!(
            out,
            "reclaimed {} bytes of the database file",
            self.reclaimed_bytes
        )
    }
}

/// Each endpoint's name and how long it keeps its rejected requests (`quarantine_for`).
pub type KeptFor = Vec<(String, Duration)>;

/// [`KeptFor`] of `endpoints`.
pub fn kept_for<E: std::ops::Deref<Target = Endpoint>>(endpoints: &[E]) -> KeptFor {
    endpoints
        .iter()
        .map(|e| (e.name.clone(), e.quarantine.keep_for))
        .collect()
}

/// The background task. It owns its state; [`Pruner::stop`] waits for it after the shutdown
/// signal fired (it stops between batches).
pub struct Pruner {
    task: JoinHandle<()>,
    storage: watch::Sender<Storage>,
    kept_for: watch::Sender<KeptFor>,
}

impl Pruner {
    pub fn start(storage: Storage, kept_for: KeptFor, store: Store, shutdown: Shutdown) -> Pruner {
        let (tx, rx) = watch::channel(storage);
        let (kept_tx, kept_rx) = watch::channel(kept_for);
        let task = run(rx, kept_rx, store, shutdown);
        Pruner {
            task: tokio::spawn(crate::panics::named("pruner", task)),
            storage: tx,
            kept_for: kept_tx,
        }
    }

    /// Reloaded endpoints' `quarantine_for`, for the next pass.
    pub fn set_kept_for(&self, kept_for: KeptFor) {
        self.kept_for.send_replace(kept_for);
    }

    /// Reloaded retention settings (`retention_days`, `dead_retention_days`, `archive_dir`):
    /// if they changed, a pass runs with them now (after one under way, which finishes with
    /// the old ones), and the hourly passes go on from there.
    pub fn set_storage(&self, storage: Storage) {
        self.storage.send_if_modified(|current| {
            let changed = (current.retention_days, current.dead_retention_days)
                != (storage.retention_days, storage.dead_retention_days)
                || current.archive_dir != storage.archive_dir;
            *current = storage;
            changed
        });
    }

    pub async fn stop(self) {
        let _ = self.task.await;
    }
}

async fn run(
    mut settings: watch::Receiver<Storage>,
    kept_for: watch::Receiver<KeptFor>,
    store: Store,
    mut shutdown: Shutdown,
) {
    let every = crate::fault::prune_every().unwrap_or(EVERY);
    let mut retry = RETRY_FIRST;
    loop {
        let mut next = tokio::time::Instant::now() + every;
        let storage = settings.borrow_and_update().clone();
        crate::fault::panic_if("panic-pruner");
        let passed = pass(&storage, &store, now_ms(), &shutdown).await;
        let kept = kept_for.borrow().clone();
        prune_rejected(&store, &kept, now_ms()).await;
        if passed.is_ok() {
            retry = RETRY_FIRST;
        }
        match passed {
            Ok(report) if report.removed.is_empty() => {
                tracing::debug!(reclaimed_bytes = report.reclaimed_bytes, "nothing to prune")
            }
            Ok(report) => tracing::info!(
                removed = report.events(),
                archived = !report.archived_to.is_empty(),
                reclaimed_bytes = report.reclaimed_bytes,
                "pruned old events"
            ),
            Err(PruneError::Store(StoreError::Closed)) => return,
            // The next pass comes on schedule: the holder prunes this one's rows meanwhile.
            Err(PruneError::Locked) => {
                retry = RETRY_FIRST;
                tracing::debug!("another instance holds the retention lock; skipping this pass")
            }
            Err(e) => {
                tracing::error!(error = %e, retry_in_secs = retry.as_secs(), "pruning failed; a pass tries again soon");
                next = tokio::time::Instant::now() + retry;
                retry = (retry * 2).min(every);
            }
        }
        tokio::select! {
            _ = shutdown.fired() => return,
            _ = tokio::time::sleep_until(next) => {}
            // A reload changed the retention: prune by it now. (An error means the server is
            // stopping: the shutdown branch follows.)
            Ok(()) = settings.changed() => {}
        }
    }
}

/// One pass, through the writer thread of `store`: the server's pruner and `portaria prune`
/// both run this. It stops between two batches once `shutdown` fires; what it deleted by then
/// stays deleted (and archived).
pub async fn pass(
    storage: &Storage,
    store: &Store,
    now_ms: i64,
    shutdown: &Shutdown,
) -> Result<Report, PruneError> {
    let cutoffs = self::cutoffs(storage, now_ms);
    let mut report = Report::default();
    // Held to the end of the pass: on PostgreSQL, no other instance prunes meanwhile.
    let pruning = store.pruning().await?.ok_or(PruneError::Locked)?;
    while !shutdown.is_fired() {
        let removed = match &storage.archive_dir {
            None => pruning.delete_prunable(cutoffs, BATCH).await?,
            Some(dir) => {
                let events = pruning.prunable(cutoffs, BATCH, BATCH_BYTES).await?;
                if events.is_empty() {
                    break;
                }
                let ids = ids(&events);
                let dir = dir.clone();
                let file =
                    tokio::task::spawn_blocking(move || archive::append(&dir, &events, now_ms))
                        .await
                        .map_err(io::Error::other)??;
                report.archived_to.insert(file);
                pruning.delete_pruned(cutoffs, ids).await?
            }
        };
        let last = storage.archive_dir.is_none() && removed.len() < BATCH;
        report.count(removed);
        if last {
            break;
        }
        // Let intake's jobs reach the writer between two batches.
        tokio::task::yield_now().await;
    }
    if report.removed.is_empty() || shutdown.is_fired() {
        return Ok(report);
    }
    loop {
        let round = store.reclaim_space(VACUUM_PAGES).await?;
        report.reclaimed_bytes += round.bytes();
        if done_reclaiming(&round) || shutdown.is_fired() {
            break;
        }
        tokio::task::yield_now().await;
    }
    store.checkpoint().await?;
    Ok(report)
}

/// Drops each endpoint's rejected requests kept longer than its `quarantine_for`. A failure
/// is logged: the next pass tries again, and intake's own trim bounds them meanwhile.
async fn prune_rejected(store: &Store, kept_for: &KeptFor, now_ms: i64) {
    for (endpoint, keep_for) in kept_for {
        let before = now_ms.saturating_sub(keep_for.as_millis() as i64);
        match store.prune_rejected(endpoint, before).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(endpoint = %endpoint, removed = n, "pruned old rejected requests")
            }
            Err(StoreError::Closed) => return,
            Err(e) => {
                tracing::warn!(endpoint = %endpoint, error = %e, "cannot prune rejected requests")
            }
        }
    }
}

/// `portaria prune`: the same [`pass`], on a store the command opened for itself (a writer
/// thread on its own connection, which waits on the busy timeout while a running server holds
/// the write lock). SIGINT or SIGTERM stops it between two batches.
pub async fn prune_once(
    store: &Store,
    storage: &Storage,
    now_ms: i64,
) -> Result<Report, PruneError> {
    let (trigger, shutdown) = crate::shutdown::channel();
    let signal = tokio::spawn(async move {
        crate::shutdown::os_signal().await;
        trigger.fire();
    });
    let report = pass(storage, store, now_ms, &shutdown).await;
    signal.abort();
    report
}

/// What [`prune_once`] would remove now, changing nothing (`portaria prune --dry-run`).
pub async fn dry_run(store: &Store, storage: &Storage, now_ms: i64) -> Result<Report, PruneError> {
    Ok(would_remove(
        store.prunable_counts(cutoffs(storage, now_ms)).await?,
    ))
}

fn would_remove(groups: Vec<crate::store::PrunableGroup>) -> Report {
    let mut report = Report::default();
    for group in groups {
        report.removed.insert(
            (group.endpoint, group.status.as_str()),
            Tally {
                events: group.events,
                bytes: group.bytes,
            },
        );
    }
    report
}

fn ids(events: &[EventDetail]) -> Vec<i64> {
    events.iter().map(|e| e.summary.id).collect()
}

/// No free pages left, or none could be cut (a file without auto-vacuum reuses them instead).
fn done_reclaiming(round: &Reclaimed) -> bool {
    round.free_left == 0 || round.pages == 0
}
