//! The status page's hourly counters on PostgreSQL. Intake and the worker add to the same
//! in-memory [`Tally`] as on SQLite (no database work on the request path); [`counter_keeper`],
//! a task of the backend, folds it into `hourly` every [`EVERY`] in one statement, adding to
//! the rows the other instances write too (`INSERT ... ON CONFLICT DO UPDATE SET n = n +
//! excluded.n`, rows in one order so two instances never deadlock). A fold that fails (the
//! database away) puts its counts back for the next one; closing the store folds what is
//! left. A crash loses at most the last [`EVERY`] of counts; the events are in `events`.
//!
//! Folds run one at a time ([`Folding`]): the status page's own fold (`dashboard.rs`) and
//! closing wait for the keeper's fold in flight, whose counts the tally no longer holds but
//! `hourly` does not hold yet either (seen by the behaviour suite: a count made before the
//! page was asked, missing from it).

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::mpsc;

use super::error;
use crate::store::StoreError;
use crate::store::counters::{COLUMNS, KEEP_MS, Tally};

/// How often the tally is folded in: the status page lags another instance's counts by at
/// most this (its own it folds in first: `dashboard.rs`).
pub(super) const EVERY: Duration = Duration::from_secs(2);

/// Held across a fold, from taking the tally to the write's end: folds run one at a time.
pub(super) type Folding = Arc<tokio::sync::Mutex<()>>;

/// What asks the keeper for a last fold at close, and hears when it is done.
pub(super) type Closing = mpsc::Sender<std::sync::mpsc::SyncSender<()>>;

/// Rows older than the keep window, deleted once an hour by whichever instance.
const TRIM: &str = "DELETE FROM hourly WHERE hour < $1";

/// Every row of a fold in one statement: one array per column, `unnest`ed together.
fn upsert_sql() -> String {
    let names = COLUMNS.join(", ");
    let arrays: Vec<String> = (3..3 + COLUMNS.len())
        .map(|i| format!("${i}::bigint[]"))
        .collect();
    let adds: Vec<String> = COLUMNS
        .iter()
        .map(|c| format!("{c} = hourly.{c} + EXCLUDED.{c}"))
        .collect();
    format!(
        "INSERT INTO hourly (endpoint, hour, {names}) \
         SELECT * FROM unnest($1::text[], $2::bigint[], {}) \
         ON CONFLICT (endpoint, hour) DO UPDATE SET {}",
        arrays.join(", "),
        adds.join(", ")
    )
}

/// Folds the tally every [`EVERY`] until the pool closes; on a message from `closing`, folds
/// once more and says so.
pub(super) async fn counter_keeper(
    pool: Pool,
    tally: Arc<Tally>,
    folding: Folding,
    mut closing: mpsc::Receiver<std::sync::mpsc::SyncSender<()>>,
) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if pool.is_closed() {
                    return;
                }
                if let Err(e) = fold(&pool, &tally, &folding, crate::time::now_ms()).await {
                    tracing::warn!(error = %e, "cannot write the status page's counters; kept for the next try");
                }
            }
            done = closing.recv() => {
                if let Err(e) = fold(&pool, &tally, &folding, crate::time::now_ms()).await {
                    tracing::warn!(error = %e, "cannot write the status page's counters at close");
                }
                if let Some(done) = done {
                    let _ = done.send(());
                }
                return;
            }
        }
    }
}

/// The tally into `hourly` (and, once an hour, the old rows out), after any fold in flight.
pub(super) async fn fold(
    pool: &Pool,
    tally: &Tally,
    folding: &tokio::sync::Mutex<()>,
    now_ms: i64,
) -> Result<(), StoreError> {
    let _one_at_a_time = folding.lock().await;
    let (rows, trim) = tally.take(now_ms);
    if rows.is_empty() && !trim {
        return Ok(());
    }
    let client = match super::client_of(pool).await {
        Ok(client) => client,
        Err(e) => {
            tally.put_back(rows);
            return Err(e);
        }
    };
    if !rows.is_empty() {
        let endpoints: Vec<&str> = rows.iter().map(|r| r.endpoint.as_str()).collect();
        let hours: Vec<i64> = rows.iter().map(|r| r.hour).collect();
        let columns: Vec<Vec<i64>> = (0..COLUMNS.len())
            .map(|i| rows.iter().map(|r| r.counts[i]).collect())
            .collect();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&endpoints, &hours];
        params.extend(
            columns
                .iter()
                .map(|c| c as &(dyn tokio_postgres::types::ToSql + Sync)),
        );
        let written = match client.prepare_cached(&upsert_sql()).await {
            Ok(upsert) => client.execute(&upsert, &params).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tally.put_back(rows);
            return Err(error(e));
        }
    }
    // The counts are in; old rows left by a failed trim go with the next hour's.
    if trim && let Err(e) = client.execute(TRIM, &[&(now_ms - KEEP_MS)]).await {
        tracing::debug!(error = %error(e), "cannot delete old rows of the status page's counters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counters::HourRow;

    #[test]
    fn the_upsert_adds_every_column_to_the_shared_row() {
        let sql = upsert_sql();
        assert!(sql.contains("$11::bigint[]"), "{sql}");
        assert!(!sql.contains("$12"), "{sql}");
        for c in COLUMNS {
            assert!(
                sql.contains(&format!("{c} = hourly.{c} + EXCLUDED.{c}")),
                "{sql}"
            );
        }
    }

    #[test]
    fn rows_put_back_add_to_what_came_since() {
        let tally = Tally::default();
        let hour = 1_000 * 3_600_000;
        tally.put_back(vec![HourRow {
            endpoint: "a".into(),
            hour,
            counts: [2, 0, 0, 0, 0, 0, 0, 0, 1],
        }]);
        let (again, _) = tally.take(hour);
        assert_eq!(again[0].counts, [2, 0, 0, 0, 0, 0, 0, 0, 1]);
        tally.put_back(again);
        tally.put_back(vec![HourRow {
            endpoint: "a".into(),
            hour,
            counts: [1, 0, 0, 0, 0, 0, 0, 0, 0],
        }]);
        let (rows, _) = tally.take(hour);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].counts, [3, 0, 0, 0, 0, 0, 0, 0, 1]);
    }
}
