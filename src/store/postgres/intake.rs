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
//!
//! An event with items (`store/intake.rs`, Adyen's batches) is never grouped: it goes alone,
//! in a transaction of its own ([`insert_batch`]) that first takes a transaction lock on each
//! of its items' hashes, in one order (sorted), then asks whether every item is known
//! ([`ITEMS_KNOWN`], READ COMMITTED: it sees what the lock's last holder committed), and only
//! then runs [`INSERT`] and writes the items' rows. Two batches sharing an item, on any
//! instances, take turns at that lock, so the second sees the first's items: the one place
//! where a check comes before the insert, and the lock is what makes it safe.

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
       event_type_signed, origin) \
       SELECT event_id, $1, $2, $5, $6, $7, $3, $8, $9, $14, $15, $16, $17 FROM k RETURNING id), \
     p AS (INSERT INTO payloads (event_id, headers, body) SELECT id, $10, $11 FROM e), \
     d AS (INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at, \
       order_key) SELECT e.id, r.route, $1, 'pending', $3, r.order_key \
       FROM e, unnest($12::text[], $13::text[]) AS r (route, order_key)) \
     SELECT id FROM e";
/// The event that made an insert a duplicate (the barrier's row: committed by then, or
/// written earlier in this transaction).
pub(super) const KNOWN: &str = "SELECT event_id FROM dedup WHERE endpoint = $1 AND dedup_key = $2";

/// The latest event (the highest id) holding one of the items `$2` of endpoint `$1`, if
/// every one of them is known since `$3` (as a dedup key, through `dedup`, or as an item,
/// through `event_items`); NULL when one is not.
pub(super) const ITEMS_KNOWN: &str = "SELECT CASE WHEN bool_and(id IS NOT NULL) THEN max(id) END \
     FROM (SELECT (SELECT max(x.id) FROM (SELECT event_id AS id FROM dedup \
       WHERE endpoint = $1 AND dedup_key = k.key AND received_at >= $3 \
       UNION ALL SELECT event_id FROM event_items \
       WHERE endpoint = $1 AND item_key = k.key AND received_at >= $3) x) AS id \
     FROM unnest($2::text[]) AS k (key)) AS items";
/// The items of the event just inserted, but the one that is its own key.
const INSERT_ITEMS: &str = "INSERT INTO event_items (event_id, endpoint, item_key, \
     received_at) SELECT $1, $2, k, $3 FROM unnest($4::text[]) AS k";

/// Stores `e` alone, in autocommit, unless its (endpoint, dedup key) is known within its
/// window; resolves after COMMIT. A group of one, and an event whose group could not commit
/// for a reason of its own (`group.rs`), go this way; an event with items always does, in a
/// transaction of its own ([`insert_batch`]).
pub(super) async fn insert_one(client: &Object, e: &NewEvent) -> Result<Inserted, StoreError> {
    if !e.items.is_empty() {
        return insert_batch(client, e).await;
    }
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
                &e.origin.column(),
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

/// [`insert_one`] for an event with items: its items' locks, the check of its items, the
/// barrier and its rows, in one transaction (see the module doc).
async fn insert_batch(client: &Object, e: &NewEvent) -> Result<Inserted, StoreError> {
    client.batch_execute("BEGIN").await.map_err(error)?;
    let inserted = locked_batch(client, e).await;
    let end = if inserted.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    match (inserted, client.batch_execute(end).await) {
        (Ok(inserted), Ok(())) => Ok(inserted),
        (Err(e), _) | (Ok(_), Err(e)) => Err(error(e)),
    }
}

async fn locked_batch(client: &Object, e: &NewEvent) -> Result<Inserted, tokio_postgres::Error> {
    // One order for every transaction, so two batches never wait for each other in a cycle.
    let mut hashes: Vec<i64> = e.items.iter().map(|(_, hash)| *hash).collect();
    hashes.sort_unstable();
    hashes.dedup();
    // The two-key form: its own key space, apart from the one-key locks of migrations,
    // retention and alerts, whatever an item's hash.
    let lock = client
        .prepare_cached("SELECT pg_advisory_xact_lock($1, $2)")
        .await?;
    for hash in &hashes {
        let (high, low) = ((hash >> 32) as i32, *hash as i32);
        client.execute(&lock, &[&high, &low]).await?;
    }
    let since = e.dedup_since_ms.unwrap_or(i64::MIN);
    let keys: Vec<&str> = e.items.iter().map(|(key, _)| key.as_str()).collect();
    let known = client.prepare_cached(ITEMS_KNOWN).await?;
    let newest: Option<i64> = client
        .query_one(&known, &[&e.endpoint, &keys, &since])
        .await?
        .get(0);
    if let Some(id) = newest {
        return Ok(Inserted::Duplicate(id));
    }
    let insert = client.prepare_cached(INSERT).await?;
    let Some(id) = try_insert(client, &insert, e).await? else {
        let known = client.prepare_cached(KNOWN).await?;
        return known_id(client, &known, e).await.map(Inserted::Duplicate);
    };
    let rows: Vec<&str> = e.item_rows().map(|(key, _)| key.as_str()).collect();
    if !rows.is_empty() {
        let items = client.prepare_cached(INSERT_ITEMS).await?;
        client
            .execute(&items, &[&id, &e.endpoint, &e.received_at_ms, &rows])
            .await?;
    }
    Ok(Inserted::New(id))
}
