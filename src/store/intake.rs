//! Intake's one write: a verified event goes in unless its (endpoint, dedup key) is already
//! there. [`NewEvent`] can only be built with the verifier's proof; [`dedup_hash`] is what the
//! narrow dedup index holds; the barrier is one statement (`INSERT_UNLESS_KNOWN`), which
//! `retention.rs` reuses to restore archived events.

use bytes::Bytes;
use rusqlite::{Connection, params};

use super::{Status, Store, StoreError};
use crate::verify::Verified;

/// A verified webhook, ready to store. Building one takes the verifier's proof.
#[derive(Debug)]
pub struct NewEvent {
    pub(super) endpoint: String,
    pub(super) dedup_key: String,
    /// [`dedup_hash`] of the endpoint and key, computed here on the request's task rather
    /// than on the writer thread.
    pub(super) dedup_hash: i64,
    pub(super) event_type: Option<String>,
    pub(super) content_type: Option<String>,
    /// The request headers in HTTP/1 form, `name: value\r\n` each, exactly as received.
    pub(super) headers: Vec<u8>,
    pub(super) body: Bytes,
    pub(super) received_at_ms: i64,
    /// Whether the endpoint forwards: decides `pending` or `stored`.
    pub(super) forward: bool,
}

/// The request as received, and what it says it is: everything of an event that the store
/// keeps besides its endpoint and dedup key.
#[derive(Debug)]
pub struct Received {
    /// The provider's event type (a header or the body's `type`), if it names one.
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    /// The request headers in HTTP/1 form, `name: value\r\n` each, exactly as received.
    pub headers: Vec<u8>,
    pub body: Bytes,
    /// Unix milliseconds.
    pub at_ms: i64,
}

impl NewEvent {
    /// An event of `endpoint` with this dedup key. `forward`: whether the endpoint forwards,
    /// which decides `pending` or `stored`.
    pub fn new(
        _proof: Verified,
        endpoint: &str,
        dedup_key: String,
        received: Received,
        forward: bool,
    ) -> Self {
        NewEvent {
            endpoint: endpoint.to_string(),
            dedup_hash: dedup_hash(endpoint, &dedup_key),
            dedup_key,
            event_type: received.event_type,
            content_type: received.content_type,
            headers: received.headers,
            body: received.body,
            received_at_ms: received.at_ms,
            forward,
        }
    }
}

/// What the dedup index holds for an (endpoint, dedup key): the first 8 bytes of SHA-256 over
/// the endpoint, a zero byte and the key, as a signed integer. Stored in every row, so it must
/// never change. Two keys may share a hash (about one chance in 10^8 among a million events);
/// the insert compares the full key, so they are still two events.
pub fn dedup_hash(endpoint: &str, dedup_key: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(endpoint.as_bytes())
        .chain_update([0u8])
        .chain_update(dedup_key.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// What inserting an event came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new row, with its id.
    New(i64),
    /// The (endpoint, dedup key) was already there: the id of the first one.
    Duplicate(i64),
}

impl Store {
    /// Stores a verified event unless its (endpoint, dedup key) is already there. The barrier is
    /// the insert statement itself (`INSERT_UNLESS_KNOWN`), so concurrent copies cannot
    /// both get in.
    pub async fn insert_event(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        // Two statements (the event, then its payload), standing or falling together in the
        // job's savepoint.
        self.run(move |conn| insert_event(conn, &event)).await
    }
}

/// The dedup barrier, one statement: the row goes in only if no row of the same endpoint
/// and key exists (found through the narrow `events_dedup` index, then the full key
/// compared). A statement runs whole under SQLite's write lock, so no other insert, from
/// this process or another, can come between the check and the insert.
pub(super) const INSERT_UNLESS_KNOWN: &str = "INSERT INTO events (endpoint, dedup_key, \
     dedup_hash, event_type, content_type, payload_bytes, received_at, status, \
     next_attempt_at) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 WHERE NOT EXISTS \
     (SELECT 1 FROM events WHERE dedup_hash = ?3 AND endpoint = ?1 AND dedup_key = ?2)";
/// The headers and body of the event just inserted, in the same savepoint.
pub(super) const INSERT_PAYLOAD: &str =
    "INSERT INTO payloads (event_id, headers, body) VALUES (?1, ?2, ?3)";
/// The row an (endpoint, key) already has.
pub(super) const KNOWN: &str =
    "SELECT id FROM events WHERE dedup_hash = ?3 AND endpoint = ?1 AND dedup_key = ?2";

pub(super) fn insert_event(conn: &Connection, e: &NewEvent) -> rusqlite::Result<Inserted> {
    let status = if e.forward {
        Status::Pending
    } else {
        Status::Stored
    };
    let next = e.forward.then_some(e.received_at_ms);
    let changed = conn.prepare_cached(INSERT_UNLESS_KNOWN)?.execute(params![
        e.endpoint,
        e.dedup_key,
        e.dedup_hash,
        e.event_type,
        e.content_type,
        (e.headers.len() + e.body.len()) as i64,
        e.received_at_ms,
        status.as_str(),
        next,
    ])?;
    if changed == 1 {
        let id = conn.last_insert_rowid();
        conn.prepare_cached(INSERT_PAYLOAD)?
            .execute(params![id, e.headers, &e.body[..]])?;
        return Ok(Inserted::New(id));
    }
    conn.prepare_cached(KNOWN)?
        .query_row(params![e.endpoint, e.dedup_key, e.dedup_hash], |r| r.get(0))
        .map(Inserted::Duplicate)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{ids, new_event, temp_db};
    use super::*;

    #[test]
    fn the_dedup_hash_is_fixed_and_covers_the_endpoint() {
        // Stored in every row: a change here would let every old event in again.
        // Computed independently: SHA-256 of b"pagarme\0hook_1", first 8 bytes, big-endian.
        assert_eq!(
            dedup_hash("pagarme", "hook_1"),
            0x54d0_7625_2da8_a59c_u64 as i64
        );
        assert_eq!(dedup_hash("", ""), 0x6e34_0b9c_ffb3_7a98_u64 as i64);
        assert_ne!(dedup_hash("a", "b"), dedup_hash("b", "a"));
        assert_ne!(dedup_hash("ab", "c"), dedup_hash("a", "bc"));
    }

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

    #[test]
    fn the_dedup_queries_read_the_narrow_index() {
        let (_dir, db) = temp_db();
        let none = None::<String>;
        for (query, args) in [
            (
                INSERT_UNLESS_KNOWN,
                params!["a", "k", 1, none, none, 0, 0, "stored", 0],
            ),
            (KNOWN, params!["a", "k", 1]),
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
        }
    }
}
