//! Rows for the store's unit tests: a temp database and events as they would be after their
//! life so far.

use bytes::Bytes;
use rusqlite::params;

use super::{Cutoffs, Db, NewEvent, Status, dedup_hash};

pub(super) const DAY: i64 = 86_400_000;

pub(super) const NOW: i64 = 1_796_026_524_000;

/// Inserts a row as it would be after its life so far; returns its id.
pub(super) fn row(db: &Db, endpoint: &str, key: &str, status: Status, age_days: i64) -> i64 {
    db.conn
        .execute(
            "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
             status) VALUES (?1, ?2, ?5, 2, ?3, ?4)",
            params![
                endpoint,
                key,
                NOW - age_days * DAY,
                status.as_str(),
                dedup_hash(endpoint, key)
            ],
        )
        .unwrap();
    let id = db.conn.last_insert_rowid();
    // Its one delivery, to the shorthand route, in the same state (a stored event has none).
    if status != Status::Stored {
        db.conn
            .execute(
                "INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
                 next_attempt_at) VALUES (?1, 'default', ?2, ?3, 1, ?4)",
                params![id, endpoint, status.as_str(), NOW - age_days * DAY],
            )
            .unwrap();
    }
    db.conn
        .execute(
            "INSERT INTO payloads (event_id, headers, body) VALUES (?1, x'', x'7b7d')",
            [id],
        )
        .unwrap();
    db.conn
        .execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome) \
             VALUES (?1, 1, ?2, 5, 'failed')",
            params![id, NOW - age_days * DAY],
        )
        .unwrap();
    id
}

pub(super) fn ids(db: &Db) -> Vec<i64> {
    let mut stmt = db
        .conn
        .prepare("SELECT id FROM events ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

pub(super) fn temp_db() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("p.db")).unwrap();
    (dir, db)
}

pub(super) const CUTOFFS: Cutoffs = Cutoffs {
    finished_before_ms: NOW - 30 * DAY,
    dead_before_ms: NOW - 90 * DAY,
};

pub(super) fn new_event(endpoint: &str, key: &str) -> NewEvent {
    NewEvent {
        endpoint: endpoint.into(),
        dedup_key: key.into(),
        dedup_hash: dedup_hash(endpoint, key),
        event_type: None,
        content_type: None,
        headers: b"x: y\r\n".to_vec(),
        body: Bytes::from_static(b"{}"),
        received_at_ms: NOW,
        dedup_since_ms: None,
        client_cert: None,
        object_id: None,
        routes: Vec::new(),
    }
}
