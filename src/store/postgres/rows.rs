//! How a PostgreSQL row becomes one of the store's event types, for every file that reads
//! events: a summary (`events::SUMMARY`'s columns), its status, one event's detail
//! ([`DETAIL`]'s columns after the summary's) and the attempts of a set of events.

use std::collections::HashMap;

use tokio_postgres::Row;

use super::error;
use crate::store::events::{Attempt, EventDetail, EventSummary, SUMMARY_LEN};
use crate::store::{Origin, Status, StoreError};

/// A row of `events::SUMMARY`'s columns (also the first columns of the prune pass's batch rows,
/// `retention.rs`).
pub(super) fn summary(row: &Row) -> Result<EventSummary, StoreError> {
    Ok(EventSummary {
        id: row.get(0),
        endpoint: row.get(1),
        dedup_key: row.get(2),
        event_type: row.get(3),
        received_at_ms: row.get(4),
        status: status(row, 5)?,
        attempts: u32::try_from(row.get::<_, i64>(6)).unwrap_or(u32::MAX),
        next_attempt_at_ms: row.get(7),
        last_error: row.get(8),
        object_id: row.get(9),
        origin: Origin::from_column(row.get::<_, Option<&str>>(10)),
    })
}

pub(super) fn status(row: &Row, idx: usize) -> Result<Status, StoreError> {
    row.get::<_, String>(idx)
        .parse()
        .map_err(StoreError::Postgres)
}

/// The columns of an event's detail after `events::SUMMARY`'s (PostgreSQL's; its payload
/// joined), read by [`detail`].
pub(super) const DETAIL: &str = "content_type, headers, body, signed_id, event_type_signed";

/// A row of `events::SUMMARY`'s columns, then [`DETAIL`]'s (the body kept raw on
/// PostgreSQL), without routes or attempts (`retention.rs`'s prunable batch, one event's detail).
pub(super) fn detail(row: &Row) -> Result<EventDetail, StoreError> {
    Ok(EventDetail {
        summary: summary(row)?,
        content_type: row.get(SUMMARY_LEN),
        headers: row.get(SUMMARY_LEN + 1),
        body: row.get(SUMMARY_LEN + 2),
        signed_id: row.get(SUMMARY_LEN + 3),
        event_type_signed: row.get(SUMMARY_LEN + 4),
        fetched: None,
        routes: Vec::new(),
        attempts: Vec::new(),
    })
}

/// The attempts of these events: the failed and interrupted ones have rows, a delivered one
/// is its delivery row.
const ATTEMPTS_OF: &str = "SELECT event_id, attempt, started_at, duration_ms, outcome, error, \
       route, id FROM attempts WHERE event_id = ANY($1) \
     UNION ALL SELECT event_id, attempts, finished_at - delivered_ms, delivered_ms, \
       'delivered', NULL, route, NULL FROM deliveries \
     WHERE event_id = ANY($1) AND status = 'delivered' AND delivered_ms IS NOT NULL \
     ORDER BY 1, 3, 8";

/// The attempts of the events `ids`, by event, each event's in the order they started.
pub(super) async fn attempts_of(
    client: &tokio_postgres::Client,
    ids: &[i64],
) -> Result<HashMap<i64, Vec<Attempt>>, StoreError> {
    let mut attempts: HashMap<i64, Vec<Attempt>> = HashMap::new();
    for r in client.query(ATTEMPTS_OF, &[&ids]).await.map_err(error)? {
        attempts.entry(r.get(0)).or_default().push(Attempt {
            attempt: u32::try_from(r.get::<_, i32>(1)).unwrap_or(0),
            started_at_ms: r.get(2),
            duration_ms: r.get(3),
            outcome: r.get(4),
            error: r.get(5),
            route: r.get(6),
        });
    }
    Ok(attempts)
}
