//! What the status page reads and does: the overview of each endpoint "now" ([`Overview`]),
//! the hours of the chart ([`HourCounts`]), and, through the writer, the same list, detail
//! and replay queries as `portaria events` (`events.rs`). On PostgreSQL each method
//! dispatches to `postgres/dashboard.rs` (same results), and `portaria events` uses them. Every read here is indexed: the
//! query plans are checked below on a database of 300,000 events.

use rusqlite::{Connection, OptionalExtension, params};

use super::counters::COLUMNS;
use super::events::{self, EventDetail, EventSummary, ListFilter, RouteState};
use super::observe::queue_stats;
use super::{Store, StoreError};

const HOUR_MS: i64 = 3_600_000;

/// Rejected requests, by reason (the counters' columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rejected {
    pub bad_signature: u64,
    pub stale_timestamp: u64,
    pub too_large: u64,
    pub bad_request: u64,
    pub storage_error: u64,
}

impl Rejected {
    pub fn total(&self) -> u64 {
        self.bad_signature
            + self.stale_timestamp
            + self.too_large
            + self.bad_request
            + self.storage_error
    }
}

/// One endpoint now.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EndpointNow {
    pub endpoint: String,
    /// Events stored in the last 60 minutes and 24 hours (from `events`: exact).
    pub received_last_hour: u64,
    pub received_last_day: u64,
    /// Duplicates and rejected requests in the last 24 clock hours (from `hourly`).
    pub duplicates_last_day: u64,
    pub rejected_last_day: Rejected,
    /// Waiting for delivery, including those being delivered.
    pub pending: u64,
    pub dead: u64,
    pub oldest_pending_ms: Option<i64>,
    pub last_received_ms: Option<i64>,
}

/// One clock hour of the chart, every endpoint together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HourCounts {
    /// The hour's start, unix milliseconds.
    pub hour_ms: i64,
    pub received: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub delivered: u64,
    pub failed: u64,
}

/// The overview page's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Overview {
    pub endpoints: Vec<EndpointNow>,
    /// The last `hours` clock hours, oldest first, the current one last; hours without a row
    /// are zeros.
    pub hours: Vec<HourCounts>,
}

impl Store {
    /// Each of `names` (the configured endpoints), and any other endpoint with events waiting,
    /// dead or counted in the last day; and the chart's last `hours` hours. The counters not
    /// yet folded into `hourly` go in with this read's batch, so the page shows every count
    /// made before it was asked (a page load is rare; the writer's own folds are throttled).
    pub async fn overview(
        &self,
        names: Vec<String>,
        hours: usize,
        now_ms: i64,
    ) -> Result<Overview, StoreError> {
        if let Some(pg) = self.postgres() {
            return pg.overview(names, hours, now_ms).await;
        }
        self.tally().fold_now();
        self.run(move |c| overview(c, names, hours, now_ms)).await
    }

    /// `events list`'s query, through the writer.
    pub async fn list_events(&self, filter: ListFilter) -> Result<Vec<EventSummary>, StoreError> {
        if let Some(pg) = self.postgres() {
            return pg.list_events(&filter).await;
        }
        self.run(move |c| events::list(c, &filter)).await
    }

    /// `events show`'s query, through the writer.
    pub async fn event_detail(&self, id: i64) -> Result<Option<EventDetail>, StoreError> {
        if let Some(pg) = self.postgres() {
            return pg.event_detail(id).await;
        }
        self.run(move |c| events::event(c, id)).await
    }

    /// An event's delivery to each route it matched (none for a stored event).
    pub async fn event_routes(&self, id: i64) -> Result<Vec<RouteState>, StoreError> {
        if let Some(pg) = self.postgres() {
            return pg.event_routes(id).await;
        }
        self.run(move |c| events::routes(c, id)).await
    }

    /// The names of the verified client certificate the event came with (mutual TLS).
    pub async fn client_cert(&self, id: i64) -> Result<Option<String>, StoreError> {
        if let Some(pg) = self.postgres() {
            return pg.client_cert(id).await;
        }
        self.run(move |c| {
            c.query_row("SELECT client_cert FROM events WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map(Option::flatten)
        })
        .await
    }

    /// `events replay ID`: false if there is no such event, or it is being delivered or only
    /// stored.
    pub async fn replay_event(&self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.replay_route(id, None, now_ms).await
    }

    /// `events replay ID [--route NAME]`: one event's deliveries (to `route` only, if given)
    /// pending again; false if it has no such delivery that is not being delivered now.
    pub async fn replay_route(
        &self,
        id: i64,
        route: Option<String>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let n = self.replay(Some(id), false, None, route, now_ms).await?;
        Ok(n == 1)
    }

    /// `events replay --dead --endpoint NAME`: how many went back to pending.
    pub async fn replay_dead_of(&self, endpoint: String, now_ms: i64) -> Result<usize, StoreError> {
        self.replay(None, true, Some(endpoint), None, now_ms).await
    }

    /// `events replay --dead [--endpoint NAME] [--route NAME]`: how many events went back.
    pub async fn replay_dead(
        &self,
        endpoint: Option<String>,
        route: Option<String>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        self.replay(None, true, endpoint, route, now_ms).await
    }

    async fn replay(
        &self,
        id: Option<i64>,
        dead: bool,
        endpoint: Option<String>,
        route: Option<String>,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        if let Some(pg) = self.postgres() {
            let only = events::Replay {
                id,
                dead,
                endpoint: endpoint.as_deref(),
                route: route.as_deref(),
            };
            return pg.replay(&only, now_ms).await;
        }
        self.run(move |c| {
            let only = events::Replay {
                id,
                dead,
                endpoint: endpoint.as_deref(),
                route: route.as_deref(),
            };
            events::replay(c, &only, now_ms)
        })
        .await
    }
}

/// Events of one endpoint received at or after a time: a range of `events_endpoint`.
const RECEIVED_SINCE: &str =
    "SELECT count(*) FROM events WHERE endpoint = ?1 AND received_at >= ?2";

/// The latest event of one endpoint: one step into `events_endpoint`.
const LAST_RECEIVED: &str = "SELECT max(received_at) FROM events WHERE endpoint = ?1";

/// One endpoint's counted duplicates and rejections since an hour: its primary key's range.
const COUNTED_SINCE: &str = "SELECT sum(duplicate), sum(bad_signature), sum(stale_timestamp), \
     sum(too_large), sum(bad_request), sum(storage_error) FROM hourly \
     WHERE endpoint = ?1 AND hour >= ?2";

/// Endpoints counted since an hour (`hourly` is small: endpoints x 8 days of hours).
const COUNTED_ENDPOINTS: &str = "SELECT DISTINCT endpoint FROM hourly WHERE hour >= ?1";

/// Every endpoint's hours since an hour (the first parameter, `param` its mark: `?` or `$`),
/// summed per hour, each sum followed by `cast` (PostgreSQL's `::bigint`); the rejected are
/// [`COLUMNS`]' rejection counts together, on both backends.
pub(in crate::store) fn chart_sql(param: &str, cast: &str) -> String {
    let sum = |c: &str| format!("sum({c}){cast}");
    let rejected = sum(&COLUMNS[2..7].join(" + "));
    format!(
        "SELECT hour, {}, {}, {rejected}, {}, {} FROM hourly WHERE hour >= {param}1 \
         GROUP BY hour ORDER BY hour",
        sum("received"),
        sum("duplicate"),
        sum("delivered"),
        sum("failed")
    )
}

fn overview(
    conn: &Connection,
    mut names: Vec<String>,
    hours: usize,
    now_ms: i64,
) -> rusqlite::Result<Overview> {
    let this_hour = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let day_hour = this_hour - 23 * HOUR_MS;
    let queue = queue_stats(conn)?;
    let counted: Vec<String> = conn
        .prepare_cached(COUNTED_ENDPOINTS)?
        .query_map([day_hour], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for name in queue.iter().map(|q| &q.endpoint).chain(&counted) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let mut endpoints = Vec::with_capacity(names.len());
    for endpoint in names {
        let count = |since: i64| -> rusqlite::Result<u64> {
            conn.prepare_cached(RECEIVED_SINCE)?
                .query_row(params![endpoint, since], |r| n(r, 0))
        };
        let (received_last_hour, received_last_day) =
            (count(now_ms - HOUR_MS)?, count(now_ms - 24 * HOUR_MS)?);
        let last_received_ms = conn
            .prepare_cached(LAST_RECEIVED)?
            .query_row([&endpoint], |r| r.get(0))?;
        let sums: [u64; 6] = conn
            .prepare_cached(COUNTED_SINCE)?
            .query_row(params![endpoint, day_hour], |r| {
                Ok([n(r, 0)?, n(r, 1)?, n(r, 2)?, n(r, 3)?, n(r, 4)?, n(r, 5)?])
            })?;
        let [
            duplicates,
            bad_signature,
            stale_timestamp,
            too_large,
            bad_request,
            storage_error,
        ] = sums;
        let q = queue.iter().find(|q| q.endpoint == endpoint);
        endpoints.push(EndpointNow {
            received_last_hour,
            received_last_day,
            duplicates_last_day: duplicates,
            rejected_last_day: Rejected {
                bad_signature,
                stale_timestamp,
                too_large,
                bad_request,
                storage_error,
            },
            pending: q.map_or(0, |q| q.pending),
            dead: q.map_or(0, |q| q.dead),
            oldest_pending_ms: q.and_then(|q| q.oldest_pending_ms),
            last_received_ms,
            endpoint,
        });
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

/// The chart's last clock hours up to the current one, each empty until a row of `hourly`
/// fills it in (both backends read their rows into one).
pub(in crate::store) struct Chart {
    first_ms: i64,
    hours: Vec<HourCounts>,
}

impl Chart {
    pub(in crate::store) fn new(this_hour_ms: i64, hours: usize) -> Chart {
        let first_ms = this_hour_ms - (hours.saturating_sub(1) as i64) * HOUR_MS;
        Chart {
            first_ms,
            hours: (0..hours as i64)
                .map(|i| HourCounts {
                    hour_ms: first_ms + i * HOUR_MS,
                    ..HourCounts::default()
                })
                .collect(),
        }
    }

    /// The first hour shown: rows from it on are wanted.
    pub(in crate::store) fn first_ms(&self) -> i64 {
        self.first_ms
    }

    /// Puts an hour's row in its place (a row outside the chart is left out).
    pub(in crate::store) fn put(&mut self, row: HourCounts) {
        let slot = (row.hour_ms - self.first_ms).div_euclid(HOUR_MS);
        if let Some(hour) = usize::try_from(slot)
            .ok()
            .and_then(|i| self.hours.get_mut(i))
        {
            *hour = row;
        }
    }

    pub(in crate::store) fn into_hours(self) -> Vec<HourCounts> {
        self.hours
    }
}

/// A count column (a `sum` over no rows is NULL: zero).
fn n(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: Option<i64> = row.get(idx)?;
    Ok(v.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{NOW, row, temp_db};
    use super::super::{Counted, Rejection, Status};
    use super::*;

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
        let p = plan(c, COUNTED_SINCE, &[&"e1", &NOW]);
        assert!(p.contains("PRIMARY KEY"), "{p}");
        for sql in [
            RECEIVED_SINCE,
            LAST_RECEIVED,
            COUNTED_SINCE,
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
