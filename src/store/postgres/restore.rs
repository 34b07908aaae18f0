//! `portaria archive replay` on PostgreSQL: archived events put back through the store by the
//! rules of `Store::restore` (`store/retention.rs`, as SQLite's), one transaction per batch. The
//! barrier decides, with no dedup window whatever the endpoint's: a key without a `dedup` row
//! gets a new event (a new id from the sequence, the archived dedup key, headers, body and
//! received time, due now); a key whose newest event (the one its `dedup` row names) is
//! finished gets that event back, pending with the current routes' deliveries, unless one of
//! the key's events (with a dedup window, a key may have older ones) is pending or being
//! delivered, when nothing changes; never a second row for one key. A reset event keeps its
//! history: a delivered attempt (its delivery row) becomes an attempt row first, as a replay
//! from the status page does. What fetching got comes back with it (`keep_fetched`'s rule: an
//! object the event already has stays). The transaction ends with a `NOTIFY`, so every running
//! instance delivers them at once.

use tokio_postgres::types::ToSql;

use super::{Pg, error};
use crate::store::fetches::KEEP;
use crate::store::{EventDetail, NewDelivery, Restored, Status, StoreError};

/// A new event for an archived one whose (endpoint, dedup key) has no barrier row: the row
/// taken (`ON CONFLICT DO NOTHING`: no window), the event under a new id, its payload, its
/// deliveries due at $11. No row when the key is known.
const INSERT_UNLESS_KNOWN: &str = "WITH k AS (INSERT INTO dedup (endpoint, dedup_key, \
       event_id, received_at) VALUES ($1, $2, nextval('events_id_seq'), $3) \
       ON CONFLICT (endpoint, dedup_key) DO NOTHING RETURNING event_id), \
     e AS (INSERT INTO events (id, endpoint, dedup_key, event_type, content_type, \
       payload_bytes, received_at, status, object_id, signed_id, event_type_signed, origin) \
       SELECT event_id, $1, $2, $4, $5, $6, $3, $7, $8, $14, $15, $16 FROM k RETURNING id), \
     p AS (INSERT INTO payloads (event_id, headers, body) SELECT id, $9, $10 FROM e), \
     d AS (INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at, \
       order_key) SELECT e.id, r.route, $1, 'pending', $11, r.order_key \
       FROM e, unnest($12::text[], $13::text[]) AS r (route, order_key)) \
     SELECT id FROM e";

/// The known key's event to reset: the one its barrier row names (the key's newest), if
/// finished and no event of the key is pending or being delivered. Those are looked for
/// among the endpoint's unfinished deliveries (the partial index `deliveries_queue`), not
/// among all its events.
const NEWEST_FINISHED: &str = "SELECT e.id FROM dedup k JOIN events e ON e.id = k.event_id \
     WHERE k.endpoint = $1 AND k.dedup_key = $2 \
     AND e.status IN ('delivered', 'dead', 'stored') \
     AND NOT EXISTS (SELECT 1 FROM deliveries d JOIN events o ON o.id = d.event_id \
       WHERE d.endpoint = $1 AND d.status IN ('pending', 'delivering') AND o.dedup_key = $2)";

/// Its deliveries locked first (the order a replay takes its locks in: deliveries, then the
/// event), with their states: one set going meanwhile wins.
const LOCK_DELIVERIES: &str = "SELECT status FROM deliveries WHERE event_id = $1 FOR UPDATE";

/// The event back to $2 (pending, or stored without routes), a delivered attempt kept as an
/// attempt row, its old deliveries gone (the current routes' go in next, by [`DELIVER`]).
const RESET: &str = "WITH ev AS (UPDATE events SET status = $2, finished_at = NULL \
       WHERE id = $1 AND status IN ('delivered', 'dead', 'stored') RETURNING id), \
     kept AS (INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, \
       outcome) SELECT d.event_id, d.route, d.attempts, d.finished_at - d.delivered_ms, \
       d.delivered_ms, 'delivered' FROM deliveries d JOIN ev ON ev.id = d.event_id \
       WHERE d.status = 'delivered' AND d.delivered_ms IS NOT NULL), \
     gone AS (DELETE FROM deliveries d USING ev WHERE d.event_id = ev.id) \
     SELECT id FROM ev";

/// A reset event's deliveries to the current routes, due at $3.
const DELIVER: &str = "INSERT INTO deliveries (event_id, route, endpoint, status, \
     next_attempt_at, order_key) SELECT $1, r.route, $2, 'pending', $3, r.order_key \
     FROM unnest($4::text[], $5::text[]) AS r (route, order_key)";

impl Pg {
    /// Restores `events`, each to the routes `plans` gives it (same order), due at `now_ms`;
    /// one transaction.
    pub(in crate::store) async fn restore(
        &self,
        events: &[EventDetail],
        plans: &[Vec<NewDelivery>],
        now_ms: i64,
    ) -> Result<Restored, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        let insert = tx
            .prepare_cached(INSERT_UNLESS_KNOWN)
            .await
            .map_err(error)?;
        let newest = tx.prepare_cached(NEWEST_FINISHED).await.map_err(error)?;
        let lock = tx.prepare_cached(LOCK_DELIVERIES).await.map_err(error)?;
        let reset = tx.prepare_cached(RESET).await.map_err(error)?;
        let deliver = tx.prepare_cached(DELIVER).await.map_err(error)?;
        let keep = tx.prepare_cached(KEEP).await.map_err(error)?;
        let mut out = Restored::default();
        for (e, plan) in events.iter().zip(plans) {
            let s = &e.summary;
            let status = if plan.is_empty() {
                Status::Stored
            } else {
                Status::Pending
            };
            let routes: Vec<&str> = plan.iter().map(|d| d.route.as_str()).collect();
            let keys: Vec<Option<&str>> = plan.iter().map(|d| d.order_key.as_deref()).collect();
            let bytes = (e.headers.len() + e.body.len()) as i64;
            let params: [&(dyn ToSql + Sync); 16] = [
                &s.endpoint,
                &s.dedup_key,
                &s.received_at_ms,
                &s.event_type,
                &e.content_type,
                &bytes,
                &status.as_str(),
                &s.object_id,
                &e.headers,
                &e.body,
                &now_ms,
                &routes,
                &keys,
                &e.signed_id,
                &e.event_type_signed,
                &s.origin.column(),
            ];
            let (id, own): (i64, bool) =
                if let Some(new) = tx.query_opt(&insert, &params).await.map_err(error)? {
                    out.inserted += 1;
                    (new.get(0), true)
                } else {
                    let Some(found) = tx
                        .query_opt(&newest, &[&s.endpoint, &s.dedup_key])
                        .await
                        .map_err(error)?
                    else {
                        out.already_queued += 1;
                        continue;
                    };
                    let id: i64 = found.get(0);
                    let on_its_way = tx
                        .query(&lock, &[&id])
                        .await
                        .map_err(error)?
                        .iter()
                        .any(|r| matches!(r.get::<_, &str>(0), "pending" | "delivering"));
                    if on_its_way
                        || tx
                            .query_opt(&reset, &[&id, &status.as_str()])
                            .await
                            .map_err(error)?
                            .is_none()
                    {
                        out.already_queued += 1;
                        continue;
                    }
                    tx.execute(&deliver, &[&id, &s.endpoint, &now_ms, &routes, &keys])
                        .await
                        .map_err(error)?;
                    out.reset += 1;
                    (id, id == s.id)
                };
            // What fetching got, kept as `keep_fetched` keeps it, when the row is this event's:
            // a newer event of the key (a thin body's repeat) is not given an older object.
            if let Some(f) = e.fetched.as_ref().filter(|_| own) {
                tx.execute(&keep, &[&id, &f.state(), &f.detail()])
                    .await
                    .map_err(error)?;
            }
        }
        if out.inserted + out.reset > 0 {
            tx.execute(super::listen::WAKE_ON_COMMIT, &[])
                .await
                .map_err(error)?;
        }
        tx.commit().await.map_err(error)?;
        Ok(out)
    }
}
