//! Intake on PostgreSQL: the dedup barrier and the event's rows in one statement, so one
//! transaction (autocommit) and one round trip, whose COMMIT (with `synchronous_commit = on`)
//! comes before the caller hears anything.
//!
//! The barrier is the PRIMARY KEY of `dedup` (endpoint, dedup key), taken by the insert
//! itself: `INSERT ... ON CONFLICT DO UPDATE ... WHERE`. A unique constraint cannot say
//! "within a window", so the row holds the newest event of the key and when it came: a
//! conflicting insert takes the row over (a new event) only if that event is older than the
//! window's start, and otherwise changes nothing (a duplicate). PostgreSQL decides insert or
//! conflict atomically and locks the conflicting row, so copies racing through any number of
//! instances make exactly one event; without a window the condition is never true, which is
//! `ON CONFLICT DO NOTHING`. No check-then-insert anywhere.

use super::{Pg, error};
use crate::store::intake::{Inserted, NewEvent};
use crate::store::{Status, StoreError};

/// The barrier and the event's rows in one statement (one round trip, one COMMIT in
/// autocommit): Some(new id) if this insert took the key, no row if it is a duplicate. The
/// dedup row's key to `events` is checked at COMMIT (DEFERRABLE), the others at the end of
/// the statement, when the event's row is there.
const INSERT: &str = "WITH k AS (INSERT INTO dedup (endpoint, dedup_key, event_id, received_at) \
     VALUES ($1, $2, nextval('events_id_seq'), $3) \
     ON CONFLICT (endpoint, dedup_key) DO UPDATE \
     SET event_id = EXCLUDED.event_id, received_at = EXCLUDED.received_at \
     WHERE dedup.received_at < $4 RETURNING event_id), \
     e AS (INSERT INTO events (id, endpoint, dedup_key, event_type, content_type, \
       payload_bytes, received_at, status, client_cert, object_id) \
       SELECT event_id, $1, $2, $5, $6, $7, $3, $8, $9, $14 FROM k RETURNING id), \
     p AS (INSERT INTO payloads (event_id, headers, body) SELECT id, $10, $11 FROM e), \
     d AS (INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at, \
       order_key) SELECT e.id, r.route, $1, 'pending', $3, r.order_key \
       FROM e, unnest($12::text[], $13::text[]) AS r (route, order_key)) \
     SELECT id FROM e";
/// The event that made an insert a duplicate (the barrier's row, committed by then).
const KNOWN: &str = "SELECT event_id FROM dedup WHERE endpoint = $1 AND dedup_key = $2";

impl Pg {
    /// Stores `e` unless its (endpoint, dedup key) is known within its window; resolves after
    /// COMMIT.
    pub(in crate::store) async fn insert_event(
        &self,
        e: &NewEvent,
    ) -> Result<Inserted, StoreError> {
        let client = self.client().await?;
        let since = e.dedup_since_ms.unwrap_or(i64::MIN);
        let status = if e.routes.is_empty() {
            Status::Stored
        } else {
            Status::Pending
        };
        let bytes = (e.headers.len() + e.body.len()) as i64;
        let routes: Vec<&str> = e.routes.iter().map(|d| d.route.as_str()).collect();
        let keys: Vec<Option<&str>> = e.routes.iter().map(|d| d.order_key.as_deref()).collect();
        // Prepared once per connection: the statement is parsed and planned once, not per event.
        let insert = client.prepare_cached(INSERT).await.map_err(error)?;
        let inserted = client
            .query_opt(
                &insert,
                &[
                    &e.endpoint,
                    &e.dedup_key,
                    &e.received_at_ms,
                    &since,
                    &e.event_type,
                    &e.content_type,
                    &bytes,
                    &status.as_str(),
                    &e.client_cert,
                    &e.headers,
                    &&e.body[..],
                    &routes,
                    &keys,
                    &e.object_id,
                ],
            )
            .await
            .map_err(error)?;
        if let Some(row) = inserted {
            return Ok(Inserted::New(row.get(0)));
        }
        // READ COMMITTED: this statement sees the row the conflicting insert committed.
        let known = client.prepare_cached(KNOWN).await.map_err(error)?;
        let id: i64 = client
            .query_one(&known, &[&e.endpoint, &e.dedup_key])
            .await
            .map_err(error)?
            .get(0);
        Ok(Inserted::Duplicate(id))
    }
}
