//! SQLite's fold of the status page's counters: the writer thread adds the [`Tally`] to
//! `hourly` inside a batch it commits anyway (`writer.rs` says when), and trims rows past
//! [`KEEP_MS`] once an hour.

use rusqlite::{Connection, params};

use crate::store::counters::{COLUMNS, KEEP_MS, Tally};

impl Tally {
    /// Folds the counts into `hourly` on the writer's connection, inside the batch's
    /// transaction (and, once an hour, deletes rows past [`KEEP_MS`]). What the batch then
    /// fails to commit is lost, like a crash would lose it.
    pub(super) fn flush(&self, conn: &Connection, now_ms: i64) -> rusqlite::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counters::{FOLD_EVERY_MS, HOUR_MS};
    use crate::store::{Counted, Rejection, Store};

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
