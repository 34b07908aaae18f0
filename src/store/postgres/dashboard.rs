//! What the status page and `portaria events` read and do on PostgreSQL: the overview of each
//! endpoint now and the chart's hours (from `hourly`, which every instance adds to:
//! `counters.rs`; this instance's counts not yet folded in go in first), the events list (the
//! same statement as SQLite's, `events::list_query`: same filters, cursor and order), one
//! event in full, and replay. Every instance sees every event: the database is the one they
//! share. A replay is one statement (`events::replay_where` picks its deliveries): the deliveries it puts back are locked, and one being
//! delivered (by any instance) is left alone.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::rows::{status, summary};
use super::{Pg, error};
use crate::store::dashboard::{
    Chart, Counts, HOUR_MS, chart_sql, counted_since_sql, day_hours, shown,
};
use crate::store::events::{self, Arg, EventDetail, EventSummary, ListFilter, RouteState};
use crate::store::export::{ExportCursor, Exported, export_query};
use crate::store::{HourCounts, Overview, StoreError};

const RECEIVED_SINCE: &str =
    "SELECT count(*) FROM events WHERE endpoint = $1 AND received_at >= $2";
const LAST_RECEIVED: &str = "SELECT max(received_at) FROM events WHERE endpoint = $1";
const COUNTED_ENDPOINTS: &str = "SELECT DISTINCT endpoint FROM hourly WHERE hour >= $1";
/// Its due time only while pending (as SQLite's `events::routes`): a claim leaves it set.
const ROUTES: &str = "SELECT route, status, attempts, \
     CASE WHEN status = 'pending' THEN next_attempt_at END, last_error, finished_at, \
     order_key FROM deliveries WHERE event_id = $1 ORDER BY route";
const CLIENT_CERT: &str = "SELECT client_cert FROM events WHERE id = $1";
/// The chosen deliveries (`events::replay_where`'s condition: not one being delivered)
/// locked, a delivered attempt given a row of its own (its delivery row is reset), the
/// deliveries pending again and due at `{now}` (and not announced dead: if one dies again, the
/// alerts task hears of it again), their events with them; answers each event once.
fn replay_sql(cond: &str, now: &str) -> String {
    format!(
        "WITH chosen AS (SELECT event_id, route, status, attempts, finished_at, \
           delivered_ms FROM deliveries WHERE {cond} FOR UPDATE), \
         kept AS (INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, \
           outcome) SELECT event_id, route, attempts, finished_at - delivered_ms, delivered_ms, \
           'delivered' FROM chosen WHERE status = 'delivered' AND delivered_ms IS NOT NULL), \
         reset AS (UPDATE deliveries AS d SET status = 'pending', attempts = 0, \
           next_attempt_at = {now}::bigint, last_error = NULL, finished_at = NULL, \
           delivered_ms = NULL, claimed_by = NULL, lease_until = NULL, alerted = NULL \
           FROM chosen WHERE d.event_id = chosen.event_id AND d.route = chosen.route \
           RETURNING d.event_id) \
         UPDATE events SET status = 'pending', finished_at = NULL \
         WHERE id IN (SELECT event_id FROM reset) RETURNING id"
    )
}

/// The list's or a replay's arguments, as the client takes them.
fn params(args: &[Arg]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter()
        .map(|a| match a {
            Arg::Text(s) => s as &(dyn ToSql + Sync),
            Arg::Int(i) => i as &(dyn ToSql + Sync),
        })
        .collect()
}

impl Pg {
    /// Each of `names`, and any other endpoint with events waiting, dead or counted in the
    /// last day; and the chart's last `hours` hours (as SQLite's `dashboard::overview`).
    pub(in crate::store) async fn overview(
        &self,
        names: Vec<String>,
        hours: usize,
        now_ms: i64,
    ) -> Result<Overview, StoreError> {
        // The counts not folded yet go in first, so the page shows every count made before it
        // was asked (as SQLite's `Store::overview` folds them with its read). A failed fold
        // keeps them for the keeper's next; the read says what is wrong.
        let now = crate::time::now_ms();
        let folded = super::counters::fold(&self.pool, &self.tally, &self.folding, now).await;
        if let Err(e) = folded {
            tracing::warn!(error = %e, "cannot write the status page's counters; kept for the next try");
        }
        let queue = self.queue_stats().await?;
        let client = self.client().await?;
        let (day_hour, this_hour) = day_hours(now_ms);
        let counted = client
            .query(COUNTED_ENDPOINTS, &[&day_hour])
            .await
            .map_err(error)?;
        let names = shown(names, &queue, counted.iter().map(|r| r.get::<_, String>(0)));
        let (received, last, sums) = (
            client.prepare_cached(RECEIVED_SINCE).await.map_err(error)?,
            client.prepare_cached(LAST_RECEIVED).await.map_err(error)?,
            client
                .prepare_cached(&counted_since_sql("$", "::bigint"))
                .await
                .map_err(error)?,
        );
        let mut endpoints = Vec::with_capacity(names.len());
        for endpoint in names {
            let count = |since: i64| {
                let (client, received, endpoint) = (&client, &received, &endpoint);
                async move {
                    let row = client
                        .query_one(received, &[endpoint, &since])
                        .await
                        .map_err(error)?;
                    Ok::<u64, StoreError>(n(&row, 0))
                }
            };
            let s = client
                .query_one(&sums, &[&endpoint, &day_hour])
                .await
                .map_err(error)?;
            let counts = Counts {
                received_last_hour: count(now_ms - HOUR_MS).await?,
                received_last_day: count(now_ms - 24 * HOUR_MS).await?,
                last_received_ms: client
                    .query_one(&last, &[&endpoint])
                    .await
                    .map_err(error)?
                    .get(0),
                counted: [0, 1, 2, 3, 4, 5].map(|i| n(&s, i)),
            };
            endpoints.push(counts.shape(endpoint, &queue));
        }
        let mut chart = Chart::new(this_hour, hours);
        for r in client
            .query(&chart_sql("$", "::bigint"), &[&chart.first_ms()])
            .await
            .map_err(error)?
        {
            chart.put(HourCounts {
                hour_ms: r.get(0),
                received: n(&r, 1),
                duplicate: n(&r, 2),
                rejected: n(&r, 3),
                delivered: n(&r, 4),
                failed: n(&r, 5),
            });
        }
        Ok(Overview {
            endpoints,
            hours: chart.into_hours(),
        })
    }

    pub(in crate::store) async fn list_events(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<EventSummary>, StoreError> {
        let (sql, args) = events::list_query(filter, &events::POSTGRES);
        let params = params(&args);
        let client = self.client().await?;
        let stmt = client.prepare_cached(&sql).await.map_err(error)?;
        client
            .query(&stmt, &params)
            .await
            .map_err(error)?
            .iter()
            .map(summary)
            .collect()
    }

    pub(in crate::store) async fn event_detail(
        &self,
        id: i64,
    ) -> Result<Option<EventDetail>, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {}, {} FROM events JOIN payloads ON event_id = id WHERE id = $1",
            events::SUMMARY,
            super::rows::DETAIL
        );
        let Some(row) = client.query_opt(&sql, &[&id]).await.map_err(error)? else {
            return Ok(None);
        };
        let mut detail = super::rows::detail(&row)?;
        detail.attempts = super::rows::attempts_of(&client, &[id])
            .await?
            .remove(&id)
            .unwrap_or_default();
        detail.fetched = super::fetches::read(&client, id).await?;
        detail.routes = self.event_routes(id).await?;
        Ok(Some(detail))
    }

    pub(in crate::store) async fn event_routes(
        &self,
        id: i64,
    ) -> Result<Vec<RouteState>, StoreError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(ROUTES).await.map_err(error)?;
        client
            .query(&stmt, &[&id])
            .await
            .map_err(error)?
            .iter()
            .map(|r| {
                Ok(RouteState {
                    route: r.get(0),
                    status: status(r, 1)?,
                    attempts: count_u32(r.get::<_, i32>(2)),
                    next_attempt_at_ms: r.get(3),
                    last_error: r.get(4),
                    finished_at_ms: r.get(5),
                    order_key: r.get(6),
                })
            })
            .collect()
    }

    pub(in crate::store) async fn client_cert(
        &self,
        id: i64,
    ) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query_opt(CLIENT_CERT, &[&id])
            .await
            .map_err(error)?
            .and_then(|r| r.get(0)))
    }

    /// Puts the chosen deliveries back to pending, due at `now_ms`; returns how many events.
    /// Without `now_ms`, how many it would put back.
    pub(in crate::store) async fn replay(
        &self,
        only: &events::Replay,
        now_ms: Option<i64>,
    ) -> Result<usize, StoreError> {
        let (cond, mut args) = events::replay_where(only, &events::POSTGRES);
        let client = self.client().await?;
        let Some(now_ms) = now_ms else {
            let sql = format!("SELECT count(DISTINCT event_id) FROM deliveries WHERE {cond}");
            let row = client
                .query_one(&sql, &params(&args))
                .await
                .map_err(error)?;
            return Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0));
        };
        args.push(Arg::Int(now_ms));
        let sql = replay_sql(&cond, &format!("${}", args.len()));
        let rows = client.query(&sql, &params(&args)).await.map_err(error)?;
        Ok(rows.len())
    }

    pub(in crate::store) async fn export_page(
        &self,
        filter: &ListFilter,
        after: Option<ExportCursor>,
        limit: usize,
        bodies: bool,
    ) -> Result<Vec<Exported>, StoreError> {
        let (sql, args) = export_query(filter, after, limit, bodies, &events::POSTGRES);
        let client = self.client().await?;
        let stmt = client.prepare_cached(&sql).await.map_err(error)?;
        let rows = client.query(&stmt, &params(&args)).await.map_err(error)?;
        rows.iter()
            .map(|r| {
                Ok(Exported {
                    summary: summary(r)?,
                    body: bodies.then(|| r.get(events::SUMMARY_LEN)),
                })
            })
            .collect()
    }
}

fn count_u32(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// A count column (a `sum` over no rows is NULL: zero).
fn n(row: &Row, idx: usize) -> u64 {
    row.get::<_, Option<i64>>(idx)
        .map_or(0, |v| u64::try_from(v).unwrap_or(0))
}
