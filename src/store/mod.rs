//! The store: the only module that speaks SQL, on one of two engines that are peers, each in
//! its folder: SQLite (`sqlite/`: one file, one writer thread, the default) and PostgreSQL
//! (`postgres/`: a database many instances share, docs/postgres.md).
//!
//! Three layers, each naming only those below it. [`Store`] (`handle/`) is the one handle
//! every caller holds, the server and the commands alike. It holds an engine, chosen when it
//! is opened ([`Store::open`], [`Store::open_for_command`], [`Store::open_read_only`],
//! [`Store::open_postgres`]); its methods are named by intent and take and return plain Rust
//! types, never an engine's, one file of them per consumer. A caller's future resolves only
//! once what it wrote is durable. Under it, the engines (`sqlite/`, `postgres/`), each with a
//! file of queries per consumer. Under both, the files here: what both engines share, one per
//! consumer, the row types, the SQL both accept and the pure rules: `intake.rs` (the dedup
//! barrier; `handover.rs`, how a request that gives up at its deadline and the engine agree on
//! whether its insert runs), `queue.rs` (the forwarding worker's claims and attempts),
//! `events.rs` (what `portaria events` and the status page list, show and replay, and the
//! list's one statement), `export.rs` (`events export`'s pages), `dashboard.rs` (the status
//! page's overview, and its row shaping), `alerts.rs`, `pauses.rs` (paused routes),
//! `observe.rs` (`/readyz` and `/metrics`), `counters.rs` (the status page's hourly
//! counters), `retention.rs` (what pruning may remove, defined once; archive restore),
//! `backup.rs` and `copy.rs` (the two commands of one engine), and `json.rs` (one event as
//! JSON), `reconcile.rs` (each endpoint's last reconcile run, in `meta`). The handle's
//! `pruning.rs` is a pruning pass's hold; its `reconcile.rs`, what a reconcile run asks.
//!
//! Every public method of [`Store`] is one `match` over the engine, handing the call to the
//! engine's method of the same name: an engine that lacks a method is a compile error, not
//! an error answered in operation. An enum rather than a trait with two implementations: the
//! set of engines is closed and known here; a `match` costs nothing on intake's path (no box,
//! no vtable, no boxed future per call, where an async trait object would need one); each
//! method's doc and its two arms sit together, so where the engines differ on purpose
//! (PostgreSQL has no free space to check nor WAL to checkpoint; SQLite hears no other
//! instance) it says so at the seam; and the engines' methods can take what suits them
//! (SQLite's move into a writer job, PostgreSQL's borrow). The two commands of one engine
//! answer a typed refusal on the other ([`BackupError::OnPostgres`], [`CopyError`]); the
//! command line refuses before it opens anything.

mod alerts;
mod backup;
mod copy;
mod counters;
mod dashboard;
mod events;
mod export;
mod fetches;
mod handle;
mod handover;
mod intake;
mod json;
mod observe;
mod pauses;
mod postgres;
mod quarantine;
mod queue;
mod reconcile;
mod retention;
mod sqlite;

pub use alerts::{
    ALERT_KEY_PREFIX, DeadBatch, DeadEvent, TYPES_SETTLE_MS, TypeSeen, TypesBatch, Unrouted,
};
pub use backup::{BackupError, Copied};
pub use copy::{CopyError, CopyReport};
pub use counters::{Counted, Rejection};
pub use dashboard::{EndpointNow, HourCounts, Overview, Rejected};
pub use events::{Attempt, EventDetail, EventSummary, ListFilter, RouteState};
pub use export::{ExportCursor, Exported};
pub use fetches::Fetched;
pub use handle::Store;
pub use handle::{Pruning, ReconcileHold};
pub use intake::{Inserted, NewDelivery, NewEvent, Received, dedup_hash};
pub use json::{detail_json, header_lines, rejected_detail_json, rejected_json, summary_json};
pub use observe::{INTAKE_FAILURE_HOLD, NotReady, QueueStats};
pub use pauses::RoutePause;
pub use quarantine::{QuarantineKeep, Quarantined, RejectedSummary, ToQuarantine};
pub use queue::{AfterAttempt, ClaimNext, Claimed, Delivery, LaneClaim, Order, Tried};
pub use reconcile::LastRun;
pub use retention::{Cutoffs, PrunableGroup, Reclaimed, Removed, Restored};

/// Why the store could not do what was asked. Cloneable: one failed COMMIT is reported to
/// every request of its batch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(String),
    #[error("the database is closed")]
    Closed,
    /// A PostgreSQL error, or a connection that could not be had (never with the URL in it).
    #[error("database error: {0}")]
    Postgres(String),
    /// An intake insert the backend had not taken by the request's deadline: given up, and
    /// never run (`handover.rs`).
    #[error("not taken for a commit within {0:?} (database locked or disk stalled); not stored")]
    NotTaken(std::time::Duration),
}

/// Where an event came from. Stored as NULL for a webhook (intake writes nothing more) and as
/// its name otherwise; told to targets (`PORTARIA_ORIGIN`, `Portaria-Origin`, the pipe line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    /// A webhook the provider delivered, verified by its signature.
    #[default]
    Webhook,
    /// An event `portaria reconcile` took from the gateway's API (read over TLS with the
    /// account's key: as authoritative as a signature), because its webhook never arrived.
    Reconcile,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Webhook => "webhook",
            Origin::Reconcile => "reconcile",
        }
    }

    /// The column's value: NULL for a webhook.
    pub(crate) fn column(self) -> Option<&'static str> {
        (self != Origin::Webhook).then_some(self.as_str())
    }

    /// What the column holds, read back; a value this binary does not know (written by a
    /// newer one) reads as a webhook's.
    pub(crate) fn from_column(value: Option<&str>) -> Origin {
        match value {
            Some("reconcile") => Origin::Reconcile,
            _ => Origin::Webhook,
        }
    }
}

/// Where an event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Waiting for its first or next delivery attempt.
    Pending,
    /// An attempt is running (or was, when the process died: see [`Store::recover`]).
    Delivering,
    Delivered,
    /// Every attempt of the retry schedule failed; kept for an operator to replay.
    Dead,
    /// The endpoint has no forward target: the event only sits in the inbox.
    Stored,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Delivering,
        Status::Delivered,
        Status::Dead,
        Status::Stored,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Delivering => "delivering",
            Status::Delivered => "delivered",
            Status::Dead => "dead",
            Status::Stored => "stored",
        }
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                format!("unknown status `{s}` (pending, delivering, delivered, dead, stored)")
            })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`, so table columns (`{:<10}`) line up.
        f.pad(self.as_str())
    }
}
