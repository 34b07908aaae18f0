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

use rusqlite::{Connection, params};

use super::Store;

const HOUR_MS: i64 = 3_600_000;

/// At most how often the writer folds the tally into `hourly`: how far behind the status
/// page's counters may be, and what a crash may lose of them.
pub(in crate::store) const FOLD_EVERY_MS: i64 = 5_000;

/// How long `hourly` keeps a row: the chart shows 48 hours, the overview one day.
pub(in crate::store) const KEEP_MS: i64 = 8 * 24 * HOUR_MS;

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
pub(in crate::store) const COLUMNS: [&str; 9] = [
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
pub(in crate::store) struct HourRow {
    pub(in crate::store) endpoint: String,
    /// The hour's start, unix milliseconds.
    pub(in crate::store) hour: i64,
    /// In [`COLUMNS`]' order, each at most `i64::MAX`.
    pub(in crate::store) counts: [i64; COLUMNS.len()],
}

/// Counts not yet in the database, by endpoint and hour start.
#[derive(Default)]
pub(in crate::store) struct Tally {
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
    fn add(&self, endpoint: &str, what: Counted, now_ms: i64) {
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
    pub(in crate::store) fn take(&self, now_ms: i64) -> (Vec<HourRow>, bool) {
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
        rows.sort_by(|a, b| (&a.endpoint, a.hour).cmp(&(&b.endpoint, b.hour)));
        (rows, trim)
    }

    /// Puts back rows [`Tally::take`] gave that could not be written (the database was
    /// away), to go with the next flush.
    pub(in crate::store) fn put_back(&self, rows: Vec<HourRow>) {
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

    pub(in crate::store) fn is_empty(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .counts
            .is_empty()
    }

    /// How long until the counts are due to be folded (zero: now); None when there is
    /// nothing to fold.
    pub(in crate::store) fn due_in_ms(&self, now_ms: i64) -> Option<i64> {
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
    pub(in crate::store) fn tried(&self, now_ms: i64) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .folded_at_ms = Some(now_ms);
    }

    /// Makes the next fold due at once (the writer is closing).
    pub(in crate::store) fn fold_now(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .folded_at_ms = None;
    }

    /// Folds the counts into `hourly` on the writer's connection, inside the batch's
    /// transaction (and, once an hour, deletes rows past [`KEEP_MS`]). What the batch then
    /// fails to commit is lost, like a crash would lose it.
    pub(in crate::store) fn flush(&self, conn: &Connection, now_ms: i64) -> rusqlite::Result<()> {
        let (rows, trim) = self.take(now_ms);
        if !rows.is_empty() {
            let mut upsert = conn.prepare_cached(&upsert_sql())?;
            for row in rows {
                let c = row.counts;
                upsert.execute(params![
                    row.endpoint,
                    row.hour,
                    c[0],
                    c[1],
                    c[2],
                    c[3],
                    c[4],
                    c[5],
                    c[6],
                    c[7],
                    c[8]
                ])?;
            }
        }
        if trim {
            conn.prepare_cached("DELETE FROM hourly WHERE hour < ?1")?
                .execute([now_ms - KEEP_MS])?;
        }
        Ok(())
    }
}

/// `INSERT ... ON CONFLICT DO UPDATE` adding each count to the hour's row.
fn upsert_sql() -> String {
    let names = COLUMNS.join(", ");
    let values: Vec<String> = (3..3 + COLUMNS.len()).map(|i| format!("?{i}")).collect();
    let adds: Vec<String> = COLUMNS
        .iter()
        .map(|c| format!("{c} = {c} + excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO hourly (endpoint, hour, {names}) VALUES (?1, ?2, {}) \
         ON CONFLICT (endpoint, hour) DO UPDATE SET {}",
        values.join(", "),
        adds.join(", ")
    )
}

impl Store {
    /// Counts one request or delivery attempt of `endpoint` for the status page: in memory
    /// now, in the database within [`FOLD_EVERY_MS`].
    pub fn count(&self, endpoint: &str, what: Counted, now_ms: i64) {
        // On PostgreSQL, a task of the backend folds the tally into the shared table
        // (`postgres/counters.rs`).
        self.tally().add(endpoint, what, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(conn: &Connection, endpoint: &str, hour: i64) -> Vec<i64> {
        let sql = format!(
            "SELECT {} FROM hourly WHERE endpoint = ?1 AND hour = ?2",
            COLUMNS.join(", ")
        );
        conn.query_row(&sql, params![endpoint, hour], |r| {
            (0..COLUMNS.len()).map(|i| r.get(i)).collect()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn counts_reach_the_table_with_the_next_batch_and_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let now = crate::time::now_ms();
        let h = now.div_euclid(HOUR_MS) - 2;
        let t = h * HOUR_MS + 5;
        store.count("a", Counted::Received, t);
        store.count("a", Counted::Received, t + 1);
        store.count("a", Counted::Rejected(Rejection::StaleTimestamp), t);
        store.count("a", Counted::Failed, t + HOUR_MS);
        store.count("b", Counted::Duplicate, t);
        // Any job is a batch: the tally goes in with it.
        store.run(|_| Ok(())).await.unwrap();
        assert!(store.tally().is_empty());
        store.count("a", Counted::Received, t + 2);
        // The next batch comes too soon after that fold to make another.
        let a10 = store
            .run(move |c| Ok(row(c, "a", h * HOUR_MS)))
            .await
            .unwrap();
        assert_eq!(a10, [2, 0, 0, 1, 0, 0, 0, 0, 0], "folded again at once");
        assert!(!store.tally().is_empty());
        store.tally().fold_now();
        let (a10, a11, b10) = store
            .run(move |c| {
                Ok((
                    row(c, "a", h * HOUR_MS),
                    row(c, "a", (h + 1) * HOUR_MS),
                    row(c, "b", h * HOUR_MS),
                ))
            })
            .await
            .unwrap();
        assert_eq!(a10, [3, 0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(a11, [0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(b10, [0, 1, 0, 0, 0, 0, 0, 0, 0]);
        store.close();
    }

    #[tokio::test]
    async fn an_idle_writer_folds_counts_once_they_are_due() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let store = Store::open(&path).unwrap();
        let now = crate::time::now_ms();
        let hour = now.div_euclid(HOUR_MS) * HOUR_MS;
        // A batch folds (the first fold is due at once); then a count and its batch come
        // too soon for another fold, and the writer has nothing more to do.
        store.count("a", Counted::Received, now);
        store.run(|_| Ok(())).await.unwrap();
        store.count("a", Counted::Received, now);
        store.run(|_| Ok(())).await.unwrap();
        let reader = rusqlite::Connection::open(&path).unwrap();
        let received = || -> i64 {
            reader
                .query_row(
                    "SELECT received FROM hourly WHERE endpoint = 'a' AND hour = ?1",
                    [hour],
                    |r| r.get(0),
                )
                .unwrap()
        };
        assert_eq!(
            received(),
            1,
            "the second batch folded too soon after the first"
        );
        let start = std::time::Instant::now();
        let limit = std::time::Duration::from_millis(FOLD_EVERY_MS as u64 + 2_000);
        while received() != 2 {
            assert!(
                start.elapsed() < limit,
                "the idle writer never folded the count"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(store.tally().is_empty());
        store.close();
    }

    #[test]
    fn rows_past_the_keep_window_are_trimmed_once_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("p.db")).unwrap();
        let tally = Tally::default();
        let now = 1_000 * HOUR_MS;
        let count = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM hourly", [], |r| r.get(0))
                .unwrap()
        };
        tally.add("a", Counted::Received, now - KEEP_MS - HOUR_MS);
        tally.add("a", Counted::Received, now);
        tally.flush(&conn, now).unwrap();
        assert_eq!(count(&conn), 1, "the old row went with the first flush");
        tally.add("a", Counted::Received, now - KEEP_MS - HOUR_MS);
        tally.flush(&conn, now + 1).unwrap();
        assert_eq!(count(&conn), 2, "no second trim within the hour");
        tally.flush(&conn, now + HOUR_MS).unwrap();
        assert_eq!(count(&conn), 1);
    }
}
