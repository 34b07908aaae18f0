//! The store: the only module that speaks SQL. It owns the SQLite file, its schema and
//! settings, and every query, named by intent. Each query lives, private, in the file whose
//! methods run it.
//!
//! Two handles:
//! - [`Store`] (`handle.rs`), the server's async handle. Every read and write goes through one
//!   writer thread (`writer.rs`) that commits all waiting jobs as one transaction (group
//!   commit). A caller's future resolves only after its transaction is durable
//!   (`synchronous=FULL`, WAL). Its methods take and return plain Rust types, never SQLite's.
//! - [`Db`] (`db.rs`), a plain synchronous connection for the command line (`portaria events
//!   ...`, `archive replay`), which may run while a server is up: WAL lets readers in, and
//!   writers wait on a busy timeout.
//!
//! By consumer: `intake.rs` (the dedup barrier; `handover.rs`, how a request that gives up at
//! its deadline and the backend agree on whether its insert runs), `queue.rs` (the forwarding worker's claims and
//! attempts), `events.rs` (what the CLI lists, shows and replays), `retention.rs` (pruning and
//! archive restore), `pruning.rs` (a pruning pass's hold on the store: on PostgreSQL, the
//! retention lock), `observe.rs` (the admin listener's probe and figures), `backup.rs`
//! (`portaria backup`'s consistent copy), `alerts.rs` (dead deliveries since a cursor, the
//! alerts task's state in `meta`), `counters.rs` (the hourly counters the writer folds in with
//! its batches) and `dashboard.rs` (what the status page reads and replays).
//!
//! A second backend, PostgreSQL (`postgres/`), sits behind the same [`Store`] methods: the
//! handle holds one or the other, and the methods PostgreSQL implements dispatch there (see
//! `handle.rs`). [`Db`] is SQLite's only.
//!
//! What pruning may remove is defined once, in `retention.rs` (`PRUNABLE`): finished events past
//! their window. Pending and delivering events never match it.

mod alerts;
mod backup;
mod copy;
mod counters;
mod dashboard;
mod events;
mod handle;
mod handover;
mod intake;
mod json;
mod observe;
mod postgres;
mod pruning;
mod queue;
mod retention;
mod sqlite;

pub use alerts::{ALERT_KEY_PREFIX, DeadBatch, DeadEvent};
pub use backup::{BackupError, Copied};
pub use copy::{CopyError, CopyReport};
pub use counters::{Counted, Rejection};
pub use dashboard::{EndpointNow, HourCounts, Overview, Rejected};
pub use events::{Attempt, EventDetail, EventSummary, ListFilter, RouteState};
pub use handle::Store;
pub use intake::{Inserted, NewDelivery, NewEvent, Received, dedup_hash};
pub use json::{detail_json, header_lines, summary_json};
pub use observe::{INTAKE_FAILURE_HOLD, NotReady, QueueStats};
pub use pruning::Pruning;
pub use queue::{AfterAttempt, ClaimNext, Claimed, Delivery, LaneClaim, Order, Tried};
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
