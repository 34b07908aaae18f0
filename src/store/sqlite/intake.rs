//! SQLite's side of intake ([`Store::insert_event`]): the dedup barrier is one statement
//! (`INSERT_UNLESS_KNOWN`), which `retention.rs` reuses to restore archived events, then the
//! payload and the event's delivery rows, all in the writer job's savepoint: no event is
//! stored without its headers and body. Never a check in one statement and an insert in
//! another: the endpoint's `dedup_window` is a parameter of that one statement, and it runs
//! whole under the write lock. Two keys sharing a `dedup_hash` are two events (the full key
//! is compared; a test forces that collision).
//!
//! An event with items (`store/intake.rs`) first asks `items.rs` whether each item is known,
//! in the same job and so under the same write lock as its insert: every item known, it is a
//! duplicate of the latest event holding one; else it goes through the barrier as any event
//! does, and its items' rows go in with it. An event without items runs no more statements.

use std::time::Duration;

use rusqlite::{Connection, params};

use super::payload::StoredBody;
use super::{Sqlite, items};
use crate::store::{Inserted, NewEvent, Status, StoreError};

impl Sqlite {
    /// [`Store::insert_event`]: the body deflated on the caller's task, then the barrier and
    /// the event's rows as one writer job (`run_intake`).
    pub(in crate::store) async fn insert_event(
        &self,
        event: NewEvent,
        deadline: Duration,
    ) -> Result<Inserted, StoreError> {
        // The body is deflated here, on this tokio worker, not on the writer thread.
        let stored = StoredBody::encode(&event.body);
        // Two statements (the event, then its payload), standing or falling together in the
        // job's savepoint.
        let inserted = self
            .run_intake(move |conn| insert_stored(conn, &event, &stored), deadline)
            .await;
        // Given up before the writer took it: the writer never saw it, so `/readyz` hears of
        // it here (a webhook was refused for the store's sake).
        if let Err(e @ StoreError::NotTaken(_)) = &inserted {
            self.health().record(Err(e));
        }
        inserted
    }
}

/// The dedup barrier, one statement: the row goes in only if no row of the same endpoint
/// and key, received at or after the window's start (?9; [`NO_WINDOW`] when the endpoint has
/// none), exists (found through the narrow `events_dedup` index, then the full key and the
/// received time compared). A statement runs whole under SQLite's write lock, so no other
/// insert, from this process or another, can come between the check and the insert.
/// `+endpoint` keeps `endpoint` out of index choice: `events_endpoint` (endpoint, received_at)
/// would otherwise be chosen, and read every row of the endpoint's window.
///
/// The row is one `VALUES` row whose `status` is NULL when such a row exists: `status` is NOT
/// NULL, so `OR IGNORE` skips the row, and nothing else of it can be NULL or out of its CHECK.
/// (The plain `INSERT ... SELECT ... WHERE NOT EXISTS` reads the table it writes, so SQLite
/// first copied its one row into a temporary b-tree: some 15,000 instructions per event,
/// bench/PROFILE.md.)
pub(super) const INSERT_UNLESS_KNOWN: &str = "INSERT OR IGNORE INTO events (endpoint, \
     dedup_key, dedup_hash, event_type, content_type, payload_bytes, received_at, status, \
     object_id, client_cert, signed_id, event_type_signed) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
     (SELECT ?8 WHERE NOT EXISTS (SELECT 1 FROM events WHERE dedup_hash = ?3 AND \
     +endpoint = ?1 AND dedup_key = ?2 AND received_at >= ?9)), ?10, ?11, ?12, ?13)";
/// An event's origin, for one not a webhook, written after its insert in the same
/// transaction: a webhook's insert binds nothing more for it (its column stays NULL), so
/// intake's cost per webhook is what it was before the column (bench/callgrind.sh).
pub(super) const SET_ORIGIN: &str = "UPDATE events SET origin = ?2 WHERE id = ?1";
/// The window start that makes every earlier row of the key count: no window.
pub(super) const NO_WINDOW: i64 = i64::MIN;
/// The headers and body of the event just inserted, in the same savepoint; the body as
/// `payload.rs` encoded it (?4, its codec).
const INSERT_PAYLOAD: &str =
    "INSERT INTO payloads (event_id, headers, body, codec) VALUES (?1, ?2, ?3, ?4)";
/// The payload row of event `id`: its headers, and its body as `stored` encodes it.
pub(super) fn insert_payload(
    conn: &Connection,
    id: i64,
    headers: &[u8],
    body: &[u8],
    stored: &StoredBody,
) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_PAYLOAD)?.execute(params![
        id,
        headers,
        stored.column(body),
        stored.codec()
    ])?;
    Ok(())
}

/// One delivery of the event just inserted, due at once.
pub(super) const INSERT_DELIVERY: &str = "INSERT INTO deliveries (event_id, route, endpoint, \
     status, next_attempt_at, order_key) VALUES (?1, ?2, ?3, 'pending', ?4, ?5)";
/// The row that made an insert a duplicate: with a window, a key may have several rows (one
/// per window), so the newest one received at or after the window's start (?4). `+endpoint`:
/// as in [`INSERT_UNLESS_KNOWN`].
pub(super) const KNOWN: &str = "SELECT id FROM events WHERE dedup_hash = ?3 AND +endpoint = ?1 \
     AND dedup_key = ?2 AND received_at >= ?4 ORDER BY received_at DESC, id DESC LIMIT 1";

/// [`insert_stored`] with the body encoded here: for tests, which insert on a connection of
/// their own.
#[cfg(test)]
pub(super) fn insert_event(conn: &Connection, e: &NewEvent) -> rusqlite::Result<Inserted> {
    insert_stored(conn, e, &StoredBody::encode(&e.body))
}

/// Inserts `e` unless it is a duplicate, its body stored as `stored` (encoded by the caller,
/// off the writer thread).
pub(super) fn insert_stored(
    conn: &Connection,
    e: &NewEvent,
    stored: &StoredBody,
) -> rusqlite::Result<Inserted> {
    // Runs on the writer thread: a panic here is the writer's.
    crate::fault::panic_if("panic-writer");
    let status = if e.routes.is_empty() {
        Status::Stored
    } else {
        Status::Pending
    };
    let since = e.dedup_since_ms.unwrap_or(NO_WINDOW);
    // A batch whose every item is known is a duplicate, whatever its own key.
    if !e.items.is_empty()
        && let Some(id) = items::every_item_known(conn, e, since)?
    {
        return Ok(Inserted::Duplicate(id));
    }
    let changed = conn.prepare_cached(INSERT_UNLESS_KNOWN)?.execute(params![
        e.endpoint,
        e.dedup_key,
        e.dedup_hash,
        e.event_type,
        e.content_type,
        (e.headers.len() + e.body.len()) as i64,
        e.received_at_ms,
        status.as_str(),
        since,
        e.object_id,
        e.client_cert,
        e.signed_id,
        e.event_type_signed,
    ])?;
    if changed == 1 {
        let id = conn.last_insert_rowid();
        if let Some(origin) = e.origin.column() {
            conn.prepare_cached(SET_ORIGIN)?
                .execute(params![id, origin])?;
        }
        insert_payload(conn, id, &e.headers, &e.body, stored)?;
        let mut delivery = conn.prepare_cached(INSERT_DELIVERY)?;
        for d in &e.routes {
            delivery.execute(params![
                id,
                d.route,
                e.endpoint,
                e.received_at_ms,
                d.order_key
            ])?;
        }
        items::insert(conn, id, e)?;
        return Ok(Inserted::New(id));
    }
    conn.prepare_cached(KNOWN)?
        .query_row(params![e.endpoint, e.dedup_key, e.dedup_hash, since], |r| {
            r.get(0)
        })
        .map(Inserted::Duplicate)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{NOW, ids, new_event, temp_db};
    use super::*;
    use crate::store::dedup_hash;

    #[test]
    fn keys_sharing_a_hash_are_still_two_events() {
        let (_dir, db) = temp_db();
        // Another key already holds the hash of "k" (a collision, forced).
        db.conn
            .execute(
                "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status) VALUES ('a', 'other', ?1, 0, 0, 'stored')",
                [dedup_hash("a", "k")],
            )
            .unwrap();
        let other = db.conn.last_insert_rowid();
        let first = insert_event(&db.conn, &new_event("a", "k")).unwrap();
        let Inserted::New(id) = first else {
            panic!("a different key is a new event, whatever its hash: {first:?}");
        };
        assert_eq!(
            insert_event(&db.conn, &new_event("a", "k")).unwrap(),
            Inserted::Duplicate(id)
        );
        let mut other_again = new_event("a", "other");
        other_again.dedup_hash = dedup_hash("a", "k");
        assert_eq!(
            insert_event(&db.conn, &other_again).unwrap(),
            Inserted::Duplicate(other)
        );
        // The same key on another endpoint is another event.
        assert!(matches!(
            insert_event(&db.conn, &new_event("b", "k")).unwrap(),
            Inserted::New(_)
        ));
        assert_eq!(ids(&db).len(), 3);
    }

    const MINUTE: i64 = 60_000;

    /// An event of endpoint `a` with key `k`, received `ago` before `NOW`, counting earlier
    /// ones as duplicates only within `window` (None: no window).
    fn at(ago: i64, window: Option<i64>) -> NewEvent {
        let mut event = new_event("a", "k");
        event.received_at_ms = NOW - ago;
        event.dedup_since_ms = window.map(|w| event.received_at_ms - w);
        event
    }

    #[test]
    fn the_same_key_inside_the_window_is_a_duplicate() {
        let (_dir, db) = temp_db();
        let Inserted::New(first) = insert_event(&db.conn, &at(5 * MINUTE, None)).unwrap() else {
            panic!("the first event is new");
        };
        assert_eq!(
            insert_event(&db.conn, &at(0, Some(10 * MINUTE))).unwrap(),
            Inserted::Duplicate(first)
        );
        // The window's start itself is inside it.
        assert_eq!(
            insert_event(&db.conn, &at(0, Some(5 * MINUTE))).unwrap(),
            Inserted::Duplicate(first)
        );
        assert_eq!(ids(&db), [first]);
    }

    #[test]
    fn the_same_key_after_the_window_is_a_new_event() {
        let (_dir, db) = temp_db();
        let Inserted::New(first) = insert_event(&db.conn, &at(11 * MINUTE, None)).unwrap() else {
            panic!("the first event is new");
        };
        let Inserted::New(second) = insert_event(&db.conn, &at(0, Some(10 * MINUTE))).unwrap()
        else {
            panic!("the earlier event is older than the window: a new event");
        };
        assert_ne!(first, second);
        // A copy of the second, inside the window, is its duplicate, not the first's.
        assert_eq!(
            insert_event(&db.conn, &at(0, Some(10 * MINUTE))).unwrap(),
            Inserted::Duplicate(second)
        );
        assert_eq!(ids(&db), [first, second]);
        // Another key is never held up by this one, window or not.
        let mut other = at(0, Some(10 * MINUTE));
        other.dedup_key = "k2".into();
        other.dedup_hash = dedup_hash("a", "k2");
        assert!(matches!(
            insert_event(&db.conn, &other).unwrap(),
            Inserted::New(_)
        ));
    }

    #[test]
    fn without_a_window_the_same_key_is_a_duplicate_however_old() {
        let (_dir, db) = temp_db();
        let year = 365 * 24 * 60 * MINUTE;
        let Inserted::New(first) = insert_event(&db.conn, &at(year, None)).unwrap() else {
            panic!("the first event is new");
        };
        assert_eq!(
            insert_event(&db.conn, &at(0, None)).unwrap(),
            Inserted::Duplicate(first)
        );
        assert_eq!(ids(&db), [first]);
    }

    #[test]
    fn a_duplicate_answers_the_newest_row_within_the_window() {
        let (_dir, db) = temp_db();
        let mut rows = Vec::new();
        for ago in [30, 20, 10] {
            match insert_event(&db.conn, &at(ago * MINUTE, Some(5 * MINUTE))).unwrap() {
                Inserted::New(id) => rows.push(id),
                other => panic!("{ago} min ago, 10 min apart: {other:?}"),
            }
        }
        assert_eq!(
            insert_event(&db.conn, &at(8 * MINUTE, Some(5 * MINUTE))).unwrap(),
            Inserted::Duplicate(rows[2])
        );
        // Without a window every row counts, and the newest answers.
        assert_eq!(
            insert_event(&db.conn, &at(0, None)).unwrap(),
            Inserted::Duplicate(rows[2])
        );
        assert_eq!(ids(&db), rows);
    }

    #[test]
    fn the_dedup_queries_read_the_narrow_index() {
        let (_dir, db) = temp_db();
        let none = None::<String>;
        for (query, args) in [
            (
                INSERT_UNLESS_KNOWN,
                params![
                    "a", "k", 1, none, none, 0, 0, "stored", 0, none, none, none, none
                ],
            ),
            (
                INSERT_UNLESS_KNOWN,
                params![
                    "a", "k", 1, none, none, 0, 0, "stored", NO_WINDOW, none, none, none, none
                ],
            ),
            (KNOWN, params!["a", "k", 1, 0]),
            (KNOWN, params!["a", "k", 1, NO_WINDOW]),
            (items::ITEM_KNOWN, params!["a", "k", 1, 0]),
        ] {
            let plan: Vec<String> = db
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap()
                .query_map(args, |r| r.get(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let plan = plan.join("; ");
            assert!(
                plan.contains("USING INDEX events_dedup (dedup_hash=?)"),
                "{query}: {plan}"
            );
            // An item of a batch: by its hash, then its event by id.
            if query == items::ITEM_KNOWN {
                assert!(
                    plan.contains("USING COVERING INDEX event_items_hash (item_hash=?)")
                        && plan.contains("USING INTEGER PRIMARY KEY (rowid=?)"),
                    "{query}: {plan}"
                );
            }
        }
    }
}
