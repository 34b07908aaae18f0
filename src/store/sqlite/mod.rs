//! The SQLite engine: its file, schema and settings, the writer and checkpoint threads, and
//! its queries, one file per consumer.

pub(super) mod alerts;
pub(super) mod backup;
pub(super) mod checkpoint;
pub(super) mod counters;
pub(super) mod dashboard;
pub(super) mod db;
pub(super) mod events;
pub(super) mod intake;
pub(super) mod observe;
pub(super) mod payload;
pub(super) mod queue;
pub(super) mod retention;
pub(super) mod schema;
pub(super) mod writer;

#[cfg(test)]
mod fixtures;

#[cfg(test)]
use super::{Counted, Cutoffs, EventSummary, Inserted, ListFilter, NewEvent, Rejection};
use super::{Db, Status, Store, StoreError, dedup_hash, status_column};
