//! The items of a batch signed item by item (Adyen; `store/intake.rs` says why): the table
//! `event_items` (schema version 11), whether every item of a new batch is already known,
//! and its items' rows. Intake calls these only for an event with items, in its own writer
//! job, so under the same write lock as the barrier; every other event never reaches here.

use rusqlite::{Connection, params};

use crate::store::NewEvent;

/// Version 11: one row per item key of a batch but the event's own key (a batch of one item
/// is keyed by it already). `item_hash` is [`crate::store::dedup_hash`] of the endpoint and
/// the item key, as `events.dedup_hash` is of the event's key, so an item is looked up by one
/// integer in either table. The primary key leads with `event_id`: pruning's cascade finds
/// an event's items without a scan. Only such batches write here; a new file gets it too.
pub(super) const V10_TO_V11: &str = "
CREATE TABLE event_items (
    event_id  INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    item_hash INTEGER NOT NULL,         -- SHA-256(endpoint, 0, item key), first 8 bytes
    item_key  TEXT    NOT NULL,
    PRIMARY KEY (event_id, item_key)
) WITHOUT ROWID;
CREATE INDEX event_items_hash ON event_items (item_hash);
";

/// The latest event (the highest id) holding an item (?2, its hash ?3) of endpoint ?1
/// received at or after ?4, NULL when none: as its own dedup key (a batch of that item alone,
/// through `events_dedup`) or as an item of a batch (through `event_items_hash`, then the
/// event by its id; `+` keeps `events_endpoint` out of the choice, as in the barrier).
pub(super) const ITEM_KNOWN: &str = "SELECT max(id) FROM (SELECT id FROM events \
     WHERE dedup_hash = ?3 AND +endpoint = ?1 AND dedup_key = ?2 AND received_at >= ?4 \
     UNION ALL SELECT e.id FROM event_items i JOIN events e ON e.id = i.event_id \
     WHERE i.item_hash = ?3 AND i.item_key = ?2 AND +e.endpoint = ?1 \
     AND +e.received_at >= ?4)";
/// One item of the event just inserted.
const INSERT_ITEM: &str =
    "INSERT INTO event_items (event_id, item_hash, item_key) VALUES (?1, ?2, ?3)";

/// The latest event holding an item of `e`, if every one of them is known since `since`
/// (None when one is not, or `e` has no items).
pub(super) fn every_item_known(
    conn: &Connection,
    e: &NewEvent,
    since: i64,
) -> rusqlite::Result<Option<i64>> {
    let mut known = conn.prepare_cached(ITEM_KNOWN)?;
    let mut latest = None;
    for (key, hash) in &e.items {
        let found: Option<i64> =
            known.query_row(params![e.endpoint, key, hash, since], |r| r.get(0))?;
        if found.is_none() {
            return Ok(None);
        }
        latest = latest.max(found);
    }
    Ok(latest)
}

/// The item rows of `e`, just inserted as event `id`.
pub(super) fn insert(conn: &Connection, id: i64, e: &NewEvent) -> rusqlite::Result<()> {
    for (key, hash) in e.item_rows() {
        conn.prepare_cached(INSERT_ITEM)?
            .execute(params![id, hash, key])?;
    }
    Ok(())
}
