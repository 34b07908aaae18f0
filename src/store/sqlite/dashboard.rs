//! SQLite's side of the status page's overview ([`crate::store::Store::overview`]): the
//! figures of each endpoint and the chart's hours, read in one job. Every read here is
//! indexed: the query plans are checked below on a database of 300,000 events.

use rusqlite::{Connection, params};

use super::Sqlite;
use super::observe::queue_stats;
use crate::store::dashboard::{
    Chart, Counts, HOUR_MS, chart_sql, counted_since_sql, day_hours, shown,
};
use crate::store::{HourCounts, Overview, StoreError};

impl Sqlite {
    /// The counters not yet folded into `hourly` go in with this read's batch, so the page
    /// shows every count made before it was asked (a page load is rare; the writer's own
    /// folds are throttled).
    pub(in crate::store) async fn overview(
        &self,
        names: Vec<String>,
        hours: usize,
        now_ms: i64,
    ) -> Result<Overview, StoreError> {
        self.tally().fold_now();
        self.run(move |c| overview(c, names, hours, now_ms)).await
    }
}

/// Events of one endpoint received at or after a time: a range of `events_endpoint`.
const RECEIVED_SINCE: &str =
    "SELECT count(*) FROM events WHERE endpoint = ?1 AND received_at >= ?2";

/// The latest event of one endpoint: one step into `events_endpoint`.
const LAST_RECEIVED: &str = "SELECT max(received_at) FROM events WHERE endpoint = ?1";

/// Endpoints counted since an hour (`hourly` is small: endpoints x 8 days of hours).
const COUNTED_ENDPOINTS: &str = "SELECT DISTINCT endpoint FROM hourly WHERE hour >= ?1";

fn overview(
    conn: &Connection,
    names: Vec<String>,
    hours: usize,
    now_ms: i64,
) -> rusqlite::Result<Overview> {
    let (day_hour, this_hour) = day_hours(now_ms);
    let queue = queue_stats(conn)?;
    let counted: Vec<String> = conn
        .prepare_cached(COUNTED_ENDPOINTS)?
        .query_map([day_hour], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let names = shown(names, &queue, counted);
    // One endpoint's counted duplicates and rejections since an hour: its primary key's range.
    let counted_since = counted_since_sql("?", "");
    let mut endpoints = Vec::with_capacity(names.len());
    for endpoint in names {
        let count = |since: i64| -> rusqlite::Result<u64> {
            conn.prepare_cached(RECEIVED_SINCE)?
                .query_row(params![endpoint, since], |r| n(r, 0))
        };
        let counts = Counts {
            received_last_hour: count(now_ms - HOUR_MS)?,
            received_last_day: count(now_ms - 24 * HOUR_MS)?,
            last_received_ms: conn
                .prepare_cached(LAST_RECEIVED)?
                .query_row([&endpoint], |r| r.get(0))?,
            counted: conn
                .prepare_cached(&counted_since)?
                .query_row(params![endpoint, day_hour], |r| {
                    Ok([n(r, 0)?, n(r, 1)?, n(r, 2)?, n(r, 3)?, n(r, 4)?, n(r, 5)?])
                })?,
        };
        endpoints.push(counts.shape(endpoint, &queue));
    }
    let mut chart = Chart::new(this_hour, hours);
    let mut stmt = conn.prepare_cached(&chart_sql("?", ""))?;
    let rows = stmt.query_map([chart.first_ms()], |r| {
        Ok(HourCounts {
            hour_ms: r.get(0)?,
            received: n(r, 1)?,
            duplicate: n(r, 2)?,
            rejected: n(r, 3)?,
            delivered: n(r, 4)?,
            failed: n(r, 5)?,
        })
    })?;
    for row in rows {
        chart.put(row?);
    }
    Ok(Overview {
        endpoints,
        hours: chart.into_hours(),
    })
}

/// A count column (a `sum` over no rows is NULL: zero).
fn n(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: Option<i64> = row.get(idx)?;
    Ok(v.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::super::events;
    use super::super::fixtures::{NOW, row, temp_db};
    use super::*;
    use crate::store::{Counted, EndpointNow, ListFilter, Rejection, Status, Store};

    /// `EXPLAIN QUERY PLAN` of `sql`, one line per step.
    fn plan(conn: &Connection, sql: &str, args: &[&dyn rusqlite::ToSql]) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        stmt.query_map(args, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn never_a_full_scan(plan: &str) {
        assert!(
            !plan
                .lines()
                .any(|l| l.starts_with("SCAN events") && !l.contains("INDEX")),
            "the whole events table: {plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "a sort: {plan}");
    }

    /// 300,000 events over 30 days and 3 endpoints (a busy shop's month), then each query the
    /// status page runs is checked to use an index: no full scan of `events`, no sort.
    #[test]
    fn the_status_page_reads_from_indexes_on_300_000_events() {
        let (_dir, db) = temp_db();
        db.conn
            .execute_batch(&format!(
                "BEGIN;
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
                 INSERT INTO events (endpoint, dedup_key, dedup_hash, event_type, payload_bytes,
                                     received_at, status)
                 SELECT 'e' || (i % 3), 'key-' || i, i, 'charge.paid', 10,
                        {NOW} - (300000 - i) * 8640,
                        CASE WHEN i % 1000 = 0 THEN 'dead' WHEN i > 299990 THEN 'pending'
                             ELSE 'delivered' END
                 FROM n;
                 INSERT INTO deliveries (event_id, route, endpoint, status, attempts,
                                         next_attempt_at)
                 SELECT id, 'default', endpoint, status, 1, received_at FROM events
                 WHERE status IN ('dead', 'pending');
                 COMMIT;
                 ANALYZE;"
            ))
            .unwrap();
        let c = &db.conn;
        let p = plan(c, RECEIVED_SINCE, &[&"e1", &NOW]);
        assert!(p.contains("COVERING INDEX events_endpoint"), "{p}");
        never_a_full_scan(&p);
        let p = plan(c, LAST_RECEIVED, &[&"e1"]);
        assert!(p.contains("COVERING INDEX events_endpoint"), "{p}");
        let counted_since = counted_since_sql("?", "");
        let p = plan(c, &counted_since, &[&"e1", &NOW]);
        assert!(p.contains("PRIMARY KEY"), "{p}");
        for sql in [
            RECEIVED_SINCE,
            LAST_RECEIVED,
            &counted_since,
            COUNTED_ENDPOINTS,
        ] {
            let args: [&dyn rusqlite::ToSql; 2] = [&"e1", &NOW];
            let n = sql.matches('?').count();
            eprintln!("{sql}\n  {}", plan(c, sql, &args[..n]));
        }
        let started = std::time::Instant::now();
        let all = overview(c, vec!["e0".into(), "e1".into(), "e2".into()], 48, NOW).unwrap();
        eprintln!(
            "the overview of {} endpoints: {:?}",
            all.endpoints.len(),
            started.elapsed()
        );

        // The events list, as the page filters it: by endpoint, by dead, by both, a page on.
        let lists = [
            ListFilter::default(),
            ListFilter {
                endpoint: Some("e1".into()),
                ..ListFilter::default()
            },
            ListFilter {
                endpoint: Some("e1".into()),
                status: Some(Status::Dead),
                before: Some(200_000),
                ..ListFilter::default()
            },
            ListFilter {
                before: Some(200_000),
                text: Some("key-12".into()),
                ..ListFilter::default()
            },
            ListFilter {
                status: Some(Status::Dead),
                ..ListFilter::default()
            },
        ];
        for filter in lists {
            let mut f = filter.clone();
            f.limit = 50;
            let started = std::time::Instant::now();
            let rows = events::list(c, &f).unwrap();
            let took = started.elapsed();
            assert!(!rows.is_empty(), "{filter:?}");
            assert!(
                rows.windows(2)
                    .all(|w| (w[0].received_at_ms, w[0].id) > (w[1].received_at_ms, w[1].id)),
                "newest first"
            );
            let (sql, args) = events::list_sql(&f);
            let args: Vec<&dyn rusqlite::ToSql> =
                args.iter().map(|v| v as &dyn rusqlite::ToSql).collect();
            let p = plan(c, &sql, &args);
            eprintln!("{filter:?}: {} rows in {took:?}\n{p}", rows.len());
            // Walking the rowid backwards (`SCAN events`, no sort) stops at the page's end;
            // one endpoint's events come from its index. Only the dead (a partial index's
            // rows, however large `events` is) may be sorted.
            let sorts_only_the_dead =
                p.contains("SCAN deliveries USING COVERING INDEX deliveries_dead");
            assert!(
                !p.contains("TEMP B-TREE") || sorts_only_the_dead,
                "a sort: {p}"
            );
            if filter.endpoint.is_some() {
                assert!(
                    p.contains("INDEX events_endpoint") || p.contains("INDEX deliveries_dead"),
                    "{p}"
                );
            }
            if filter.before.is_some() && filter.endpoint.is_none() {
                assert!(p.contains("INTEGER PRIMARY KEY (rowid<?)"), "{p}");
            }
        }
        let overview = overview(c, vec!["e0".into()], 48, NOW).unwrap();
        assert_eq!(overview.endpoints.len(), 3, "e1 and e2 from the queue");
        let e0 = &overview.endpoints[0];
        assert_eq!(e0.received_last_day, 10_000 / 3 + 1);
        assert!(e0.dead > 0 && e0.last_received_ms.is_some());
        let _ = row;
    }

    #[tokio::test]
    async fn the_overview_counts_each_endpoint_and_the_chart_has_every_hour() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.db")).unwrap();
        let now = NOW;
        store
            .run(move |c| {
                for (key, age_min, status) in [
                    ("a", 5, "pending"),
                    ("b", 90, "dead"),
                    ("c", 60 * 30, "delivered"),
                ] {
                    c.execute(
                        "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                         received_at, status) VALUES ('shop', ?1, 0, 0, ?2, ?3)",
                        params![key, now - age_min * 60_000, status],
                    )?;
                    c.execute(
                        "INSERT INTO deliveries (event_id, route, endpoint, status, \
                         next_attempt_at) VALUES (last_insert_rowid(), 'default', 'shop', ?1, ?2)",
                        params![status, now - age_min * 60_000],
                    )?;
                }
                Ok(())
            })
            .await
            .unwrap();
        store.count("shop", Counted::Duplicate, now);
        store.count("shop", Counted::Rejected(Rejection::BadSignature), now);
        store.count(
            "shop",
            Counted::Rejected(Rejection::BadSignature),
            now - 2 * HOUR_MS,
        );
        store.count("shop", Counted::Received, now - 47 * HOUR_MS);
        store.count("shop", Counted::Delivered, now - 48 * HOUR_MS);
        let o = store
            .overview(vec!["shop".into(), "quiet".into()], 48, now)
            .await
            .unwrap();
        let shop = &o.endpoints[0];
        assert_eq!((shop.received_last_hour, shop.received_last_day), (1, 2));
        assert_eq!(
            (shop.pending, shop.dead, shop.duplicates_last_day),
            (1, 1, 1)
        );
        assert_eq!(shop.rejected_last_day.bad_signature, 2);
        assert_eq!(shop.oldest_pending_ms, Some(now - 5 * 60_000));
        assert_eq!(shop.last_received_ms, Some(now - 5 * 60_000));
        assert_eq!(
            o.endpoints[1],
            EndpointNow {
                endpoint: "quiet".into(),
                ..EndpointNow::default()
            }
        );
        assert_eq!(o.hours.len(), 48);
        assert_eq!(o.hours[47].hour_ms, now.div_euclid(HOUR_MS) * HOUR_MS);
        assert_eq!((o.hours[47].duplicate, o.hours[47].rejected), (1, 1));
        assert_eq!(o.hours[45].rejected, 1);
        assert_eq!(o.hours[0].received, 1, "47 hours ago is the first hour");
        assert_eq!(
            o.hours.iter().map(|h| h.delivered).sum::<u64>(),
            0,
            "48 h ago is out"
        );
        store.close();
    }
}
