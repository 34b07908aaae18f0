//! Intake on PostgreSQL: the dedup barrier and the event's rows, in one transaction whose
//! COMMIT (with `synchronous_commit = on`) comes before the caller hears anything.
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

/// The barrier: Some(new id) if this insert took the key, None if it is a duplicate.
const TAKE_KEY: &str = "INSERT INTO dedup (endpoint, dedup_key, event_id, received_at) \
     VALUES ($1, $2, nextval('events_id_seq'), $3) \
     ON CONFLICT (endpoint, dedup_key) DO UPDATE \
     SET event_id = EXCLUDED.event_id, received_at = EXCLUDED.received_at \
     WHERE dedup.received_at < $4 RETURNING event_id";
/// The event that made an insert a duplicate (the barrier's row, committed by then).
const KNOWN: &str = "SELECT event_id FROM dedup WHERE endpoint = $1 AND dedup_key = $2";
const INSERT_EVENT: &str = "INSERT INTO events (id, endpoint, dedup_key, event_type, \
     content_type, payload_bytes, received_at, status, client_cert) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const INSERT_PAYLOAD: &str = "INSERT INTO payloads (event_id, headers, body) VALUES ($1, $2, $3)";
const INSERT_DELIVERY: &str = "INSERT INTO deliveries (event_id, route, endpoint, status, \
     next_attempt_at, order_key) VALUES ($1, $2, $3, 'pending', $4, $5)";

impl Pg {
    /// Stores `e` unless its (endpoint, dedup key) is known within its window; resolves after
    /// COMMIT.
    pub(in crate::store) async fn insert_event(
        &self,
        e: &NewEvent,
    ) -> Result<Inserted, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        let since = e.dedup_since_ms.unwrap_or(i64::MIN);
        let taken = tx
            .query_opt(
                TAKE_KEY,
                &[&e.endpoint, &e.dedup_key, &e.received_at_ms, &since],
            )
            .await
            .map_err(error)?;
        let Some(row) = taken else {
            // READ COMMITTED: this statement sees the row the conflicting insert committed.
            let id: i64 = tx
                .query_one(KNOWN, &[&e.endpoint, &e.dedup_key])
                .await
                .map_err(error)?
                .get(0);
            tx.commit().await.map_err(error)?;
            return Ok(Inserted::Duplicate(id));
        };
        let id: i64 = row.get(0);
        let status = if e.routes.is_empty() {
            Status::Stored
        } else {
            Status::Pending
        };
        let bytes = (e.headers.len() + e.body.len()) as i64;
        tx.execute(
            INSERT_EVENT,
            &[
                &id,
                &e.endpoint,
                &e.dedup_key,
                &e.event_type,
                &e.content_type,
                &bytes,
                &e.received_at_ms,
                &status.as_str(),
                &e.client_cert,
            ],
        )
        .await
        .map_err(error)?;
        tx.execute(INSERT_PAYLOAD, &[&id, &e.headers, &&e.body[..]])
            .await
            .map_err(error)?;
        for d in &e.routes {
            tx.execute(
                INSERT_DELIVERY,
                &[&id, &d.route, &e.endpoint, &e.received_at_ms, &d.order_key],
            )
            .await
            .map_err(error)?;
        }
        tx.commit().await.map_err(error)?;
        Ok(Inserted::New(id))
    }
}
