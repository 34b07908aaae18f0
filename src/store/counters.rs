//! The hourly counters behind the status page: per endpoint and clock hour, what came in
//! (received, duplicates, rejected by reason) and how deliveries went. Intake and the worker
//! add to an in-memory [`Tally`] (a mutex and a map: no database work on the request path);
//! the writer thread folds it into `hourly` with a batch it commits anyway, at most once per
//! [`FOLD_EVERY_MS`], or on its own when that much time has passed with nothing to commit.
//! Folding with every batch rewrote the same `hourly` page in nearly every commit, most of a
//! page per delivered event (bench/PROFILE.md). The status page is thus at most a few seconds
//! behind; a crash loses what was not yet folded, those few seconds of counts (the events
//! themselves are in `events`, never only here).
//! On PostgreSQL the same tally is folded every 2 s by a task of the backend
//! (`postgres/counters.rs`), into a table the instances share.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

pub(super) const HOUR_MS: i64 = 3_600_000;

/// At most how often the writer folds the tally into `hourly`: how far behind the status
/// page's counters may be, and what a crash may lose of them.
pub(super) const FOLD_EVERY_MS: i64 = 5_000;

/// How long `hourly` keeps a row: the chart shows 48 hours, the overview one day.
pub(super) const KEEP_MS: i64 = 8 * 24 * HOUR_MS;

/// Why intake refused a request, as the status page groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    BadSignature,
    StaleTimestamp,
    TooLarge,
    /// A request portaria could not take: no dedup key, an unreadable or slow body, a wrong
    /// method, a client outside `allow_ips`.
    BadRequest,
    /// The database did not take it (503).
    StorageError,
}

/// One thing to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Received,
    Duplicate,
    Rejected(Rejection),
    /// A delivery attempt that succeeded.
    Delivered,
    /// A delivery attempt that failed (retried later, or the event went dead).
    Failed,
}

/// The columns of `hourly`, in the order of a [`Row`]'s counts.
pub(super) const COLUMNS: [&str; 9] = [
    "received",
    "duplicate",
    "bad_signature",
    "stale_timestamp",
    "too_large",
    "bad_request",
    "storage_error",
    "delivered",
    "failed",
];

impl Counted {
    fn column(self) -> usize {
        match self {
            Counted::Received => 0,
            Counted::Duplicate => 1,
            Counted::Rejected(Rejection::BadSignature) => 2,
            Counted::Rejected(Rejection::StaleTimestamp) => 3,
            Counted::Rejected(Rejection::TooLarge) => 4,
            Counted::Rejected(Rejection::BadRequest) => 5,
            Counted::Rejected(Rejection::StorageError) => 6,
            Counted::Delivered => 7,
            Counted::Failed => 8,
        }
    }
}

type Counts = [u64; COLUMNS.len()];

/// One endpoint's counts of one hour, taken out of the tally to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HourRow {
    pub(super) endpoint: String,
    /// The hour's start, unix milliseconds.
    pub(super) hour: i64,
    /// In [`COLUMNS`]' order, each at most `i64::MAX`.
    pub(super) counts: [i64; COLUMNS.len()],
}

/// Counts not yet in the database, by endpoint and hour start.
#[derive(Default)]
pub(super) struct Tally {
    inner: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    counts: HashMap<String, HashMap<i64, Counts>>,
    /// When old rows were last deleted from `hourly`.
    trimmed_at_ms: i64,
    /// When the counts were last folded (None: never, or a fold is wanted now).
    folded_at_ms: Option<i64>,
}

impl Tally {
    pub(super) fn add(&self, endpoint: &str, what: Counted, now_ms: i64) {
        let hour = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
        let mut pending = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // The endpoint's name is copied once per flush interval, not per request.
        let hours = match pending.counts.get_mut(endpoint) {
            Some(hours) => hours,
            None => pending.counts.entry(endpoint.to_string()).or_default(),
        };
        hours.entry(hour).or_default()[what.column()] += 1;
    }

    /// Everything counted so far, sorted by (endpoint, hour) (so that instances adding to the
    /// same rows of a shared table lock them in one order), the tally left empty; and whether
    /// an hour has passed since rows past [`KEEP_MS`] were last deleted (then it counts as done).
    pub(super) fn take(&self, now_ms: i64) -> (Vec<HourRow>, bool) {
        let (counts, trim) = {
            let mut pending = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let trim = now_ms - pending.trimmed_at_ms >= HOUR_MS;
            if trim {
                pending.trimmed_at_ms = now_ms;
            }
            pending.folded_at_ms = Some(now_ms);
            (std::mem::take(&mut pending.counts), trim)
        };
        let mut rows: Vec<HourRow> = counts
            .into_iter()
            .flat_map(|(endpoint, hours)| {
                hours.into_iter().map(move |(hour, c)| HourRow {
                    endpoint: endpoint.clone(),
                    hour,
                    counts: c.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
                })
            })
            .collect();
        rows.sort_unstable_by(|a, b| (&a.endpoint, a.hour).cmp(&(&b.endpoint, b.hour)));
        (rows, trim)
    }

    /// Puts back rows [`Tally::take`] gave that could not be written (the database was
    /// away), to go with the next flush.
    pub(super) fn put_back(&self, rows: Vec<HourRow>) {
        let mut pending = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for row in rows {
            let counts = pending
                .counts
                .entry(row.endpoint)
                .or_default()
                .entry(row.hour)
                .or_default();
            for (n, add) in counts.iter_mut().zip(row.counts) {
                *n = n.saturating_add(u64::try_from(add).unwrap_or(0));
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .counts
            .is_empty()
    }

    /// How long until the counts are due to be folded (zero: now); None when there is
    /// nothing to fold.
    pub(super) fn due_in_ms(&self, now_ms: i64) -> Option<i64> {
        let pending = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.counts.is_empty() {
            return None;
        }
        Some(pending.folded_at_ms.map_or(0, |at| {
            (at + FOLD_EVERY_MS - now_ms).clamp(0, FOLD_EVERY_MS)
        }))
    }

    /// A fold was tried at `now_ms` (and may have failed, the database refusing): the next
    /// is due a full interval later, so a failing database is not asked again at once.
    pub(super) fn tried(&self, now_ms: i64) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .folded_at_ms = Some(now_ms);
    }

    /// Makes the next fold due at once (the writer is closing).
    pub(super) fn fold_now(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .folded_at_ms = None;
    }
}
