//! Intake on PostgreSQL: the dedup barrier and the event's rows in one statement, run for one
//! event alone (autocommit: one transaction, one round trip) or for each event of a group
//! inside the group's one transaction (`group.rs`); either way its COMMIT (with
//! `synchronous_commit = on`) comes before the caller hears anything.
//!
//! The barrier is the PRIMARY KEY of `dedup` (endpoint, dedup key), taken by the insert
//! itself: `INSERT ... ON CONFLICT DO UPDATE ... WHERE`. A unique constraint cannot say
//! "within a window", so the row holds the newest event of the key and when it came: a
//! conflicting insert takes the row over (a new event) only if that event is older than the
//! window's start, and otherwise changes nothing (a duplicate). PostgreSQL decides insert or
//! conflict atomically and locks the conflicting row, so copies racing through any number of
//! instances make exactly one event; without a window the condition is never true, which is
//! `ON CONFLICT DO NOTHING`. No check-then-insert anywhere. Two copies of one key in one
//! group are two statements: the second sees the first's row (same transaction), a duplicate.

use deadpool_postgres::Object;
use tokio_postgres::{Client, Statement};

use super::error;
use crate::store::intake::{Inserted, NewEvent};
use crate::store::{Status, StoreError};

/// The barrier and the event's rows in one statement (one round trip, one COMMIT in
/// autocommit): Some(new id) if this insert took the key, no row if it is a duplicate. The
/// dedup row's key to `events` is checked at COMMIT (DEFERRABLE), the others at the end of
/// the statement, when the event's row is there.
pub(super) const INSERT: &str = "WITH k AS (INSERT INTO dedup (endpoint, dedup_key, event_id, received_at) \
     VALUES ($1, $2, nextval('events_id_seq'), $3) \
     ON CONFLICT (endpoint, dedup_key) DO UPDATE \
     SET event_id = EXCLUDED.event_id, received_at = EXCLUDED.received_at \
     WHERE dedup.received_at < $4 RETURNING event_id), \
     e AS (INSERT INTO events (id, endpoint, dedup_key, event_type, content_type, \
       payload_bytes, received_at, status, client_cert, object_id, signed_id, \
       event_type_signed) \
       SELECT event_id, $1, $2, $5, $6, $7, $3, $8, $9, $14, $15, $16 FROM k RETURNING id), \
     p AS (INSERT INTO payloads (event_id, headers, body) SELECT id, $10, $11 FROM e), \
     d AS (INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at, \
       order_key) SELECT e.id, r.route, $1, 'pending', $3, r.order_key \
       FROM e, unnest($12::text[], $13::text[]) AS r (route, order_key)) \
     SELECT id FROM e";
/// The event that made an insert a duplicate (the barrier's row: committed by then, or
/// written earlier in this transaction).
pub(super) const KNOWN: &str = "SELECT event_id FROM dedup WHERE endpoint = $1 AND dedup_key = $2";

/// Stores `e` alone, in autocommit, unless its (endpoint, dedup key) is known within its
/// window; resolves after COMMIT. A group of one, and an event whose group could not commit
/// for a reason of its own (`group.rs`), go this way.
pub(super) async fn insert_one(client: &Object, e: &NewEvent) -> Result<Inserted, StoreError> {
    // Prepared once per connection: the statement is parsed and planned once, not per event.
    let insert = client.prepare_cached(INSERT).await.map_err(error)?;
    if let Some(id) = try_insert(client, &insert, e).await.map_err(error)? {
        return Ok(Inserted::New(id));
    }
    // READ COMMITTED: this statement sees the row the conflicting insert committed.
    let known = client.prepare_cached(KNOWN).await.map_err(error)?;
    known_id(client, &known, e)
        .await
        .map(Inserted::Duplicate)
        .map_err(error)
}

/// Runs [`INSERT`] (prepared: `insert`) for `e`: Some(its new id), or None if it is a
/// duplicate. The request is sent at the first poll, so several of these polled together
/// are pipelined on one connection, in the order first polled.
pub(super) async fn try_insert(
    client: &Client,
    insert: &Statement,
    e: &NewEvent,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let since = e.dedup_since_ms.unwrap_or(i64::MIN);
    let status = if e.routes.is_empty() {
        Status::Stored
    } else {
        Status::Pending
    };
    let bytes = (e.headers.len() + e.body.len()) as i64;
    let routes: Vec<&str> = e.routes.iter().map(|d| d.route.as_str()).collect();
    let keys: Vec<Option<&str>> = e.routes.iter().map(|d| d.order_key.as_deref()).collect();
    let row = client
        .query_opt(
            insert,
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
                &e.signed_id,
                &e.event_type_signed,
            ],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Runs [`KNOWN`] (prepared: `known`): the event `e` is a duplicate of.
pub(super) async fn known_id(
    client: &Client,
    known: &Statement,
    e: &NewEvent,
) -> Result<i64, tokio_postgres::Error> {
    let row = client
        .query_one(known, &[&e.endpoint, &e.dedup_key])
        .await?;
    Ok(row.get(0))
}
