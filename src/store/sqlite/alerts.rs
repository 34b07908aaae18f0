//! SQLite's side of the alerts task's questions ([`crate::store::Store::dead_after`] and the
//! rest): a cursor on `attempts.id`, one on `events.id` for the event types, a range of
//! `events_endpoint` for the unrouted events, and the task's state in `meta`.

use rusqlite::{Connection, params};

use super::Sqlite;
use crate::store::{
    ALERT_KEY_PREFIX, DeadBatch, DeadEvent, StoreError, TypeSeen, TypesBatch, Unrouted,
};

impl Sqlite {
    /// Events that went dead with an attempt recorded after `cursor` (0: ever), and the new
    /// cursor (the newest attempt id now).
    pub(in crate::store) async fn dead_after(&self, cursor: i64) -> Result<DeadBatch, StoreError> {
        self.run(move |conn| dead_after(conn, cursor)).await
    }

    /// The event types stored after `cursor` (None: none, from now on), and the newest event
    /// id (the new cursor).
    pub(in crate::store) async fn event_types_after(
        &self,
        cursor: Option<i64>,
    ) -> Result<TypesBatch, StoreError> {
        self.run(move |conn| event_types_after(conn, cursor)).await
    }

    /// The events of `endpoint` received in (`after_ms`, `until_ms`] still stored only.
    pub(in crate::store) async fn unrouted_between(
        &self,
        endpoint: String,
        after_ms: i64,
        until_ms: i64,
    ) -> Result<Unrouted, StoreError> {
        self.run(move |conn| unrouted_between(conn, &endpoint, after_ms, until_ms))
            .await
    }

    /// Those of `names` that have a stored event: the ones that "usually receive events" when
    /// the server starts. One step into `events_endpoint` each, however large `events` is.
    pub(in crate::store) async fn endpoints_with_events(
        &self,
        names: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        self.run(move |conn| endpoints_with_events(conn, names))
            .await
    }

    /// The alerts task's saved state: every `meta` row under [`ALERT_KEY_PREFIX`].
    pub(in crate::store) async fn alert_state(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.run(alert_state).await
    }

    /// Saves these rows of the alerts task's state (keys under [`ALERT_KEY_PREFIX`]), all in
    /// one transaction, committed like delivery bookkeeping: without an fsync of its own when
    /// nothing else in the batch needs one.
    pub(in crate::store) async fn save_alert_state(
        &self,
        rows: Vec<(String, String)>,
    ) -> Result<(), StoreError> {
        self.run_bookkeeping(move |conn| save_alert_state(conn, &rows))
            .await
    }
}

/// The attempts after the cursor (a range of the primary key), each kept only if it is its
/// delivery's newest and that delivery is dead now (a delivery goes dead with a failed
/// attempt, which always has its row).
const DEAD_AFTER: &str = "SELECT d.event_id, d.endpoint, d.route FROM attempts AS a \
     JOIN deliveries AS d ON d.event_id = a.event_id AND d.route = a.route \
     WHERE a.id > ?1 AND d.status = 'dead' \
       AND a.id = (SELECT max(id) FROM attempts \
                   WHERE event_id = a.event_id AND route = a.route) \
     ORDER BY a.id";

/// The next cursor. If pruning ever removed the newest attempts, ids may be handed out again
/// below an old cursor: the cursor then comes down with them, so no new attempt is skipped.
const NEWEST_ATTEMPT: &str = "SELECT coalesce(max(id), 0) FROM attempts";

fn dead_after(conn: &Connection, cursor: i64) -> rusqlite::Result<DeadBatch> {
    let mut stmt = conn.prepare_cached(DEAD_AFTER)?;
    let events = stmt
        .query_map(params![cursor], |r| {
            Ok(DeadEvent {
                id: r.get(0)?,
                endpoint: r.get(1)?,
                route: Some(r.get(2)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let cursor = conn.query_row(NEWEST_ATTEMPT, [], |r| r.get(0))?;
    Ok(DeadBatch { events, cursor })
}

const NEWEST_EVENT: &str = "SELECT coalesce(max(id), 0) FROM events";

/// A range of the primary key, bounded above by the newest id read first: an event committed
/// between the two reads is left for the next look, never skipped.
const TYPES_AFTER: &str = "SELECT endpoint, event_type, min(id), min(received_at) FROM events \
     WHERE id > ?1 AND id <= ?2 AND event_type IS NOT NULL \
     GROUP BY endpoint, event_type ORDER BY 3";

fn event_types_after(conn: &Connection, cursor: Option<i64>) -> rusqlite::Result<TypesBatch> {
    let newest: i64 = conn.query_row(NEWEST_EVENT, [], |r| r.get(0))?;
    let Some(cursor) = cursor else {
        return Ok(TypesBatch {
            types: Vec::new(),
            cursor: newest,
        });
    };
    // Pruned below the cursor, ids are handed out again under it: read from the start (the
    // task knows the types already seen) and let the cursor come down.
    let from = if newest < cursor { 0 } else { cursor };
    let mut stmt = conn.prepare_cached(TYPES_AFTER)?;
    let types = stmt
        .query_map(params![from, newest], |r| {
            Ok(TypeSeen {
                endpoint: r.get(0)?,
                event_type: r.get(1)?,
                first_id: r.get(2)?,
                first_ms: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(TypesBatch {
        types,
        cursor: newest,
    })
}

const UNROUTED: &str = "SELECT count(*), min(id), max(id) FROM events \
     WHERE endpoint = ?1 AND received_at > ?2 AND received_at <= ?3 AND status = 'stored'";

fn unrouted_between(
    conn: &Connection,
    endpoint: &str,
    after_ms: i64,
    until_ms: i64,
) -> rusqlite::Result<Unrouted> {
    let mut stmt = conn.prepare_cached(UNROUTED)?;
    stmt.query_row(params![endpoint, after_ms, until_ms], |r| {
        Ok(Unrouted {
            count: r.get::<_, i64>(0)?.unsigned_abs(),
            first_id: r.get(1)?,
            last_id: r.get(2)?,
        })
    })
}

/// Whether one endpoint has any event: a search of `events_endpoint` that stops at the first.
const HAS_EVENTS: &str = "SELECT EXISTS (SELECT 1 FROM events WHERE endpoint = ?1)";

fn endpoints_with_events(conn: &Connection, names: Vec<String>) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(HAS_EVENTS)?;
    let mut out = Vec::new();
    for name in names {
        if stmt.query_row([&name], |r| r.get::<_, bool>(0))? {
            out.push(name);
        }
    }
    Ok(out)
}

/// A range of the primary key: `alerts:` up to `alerts;` (`;` follows `:`).
const ALERT_STATE: &str =
    "SELECT key, value FROM meta WHERE key >= 'alerts:' AND key < 'alerts;' ORDER BY key";

fn alert_state(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(ALERT_STATE)?;
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}

const SAVE_ALERT_STATE: &str = "INSERT INTO meta (key, value) VALUES (?1, ?2) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value";

fn save_alert_state(conn: &Connection, rows: &[(String, String)]) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(SAVE_ALERT_STATE)?;
    for (key, value) in rows {
        // Only the task's own keys: the readiness probe's row and the like are not its to touch.
        if key.starts_with(ALERT_KEY_PREFIX) {
            stmt.execute(params![key, value])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::fixtures::{row, temp_db};
    use super::*;

    fn attempt(conn: &Connection, event: i64) {
        conn.execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome) \
             VALUES (?1, 2, 0, 5, 'failed')",
            [event],
        )
        .unwrap();
    }

    #[test]
    fn dead_events_are_found_once_in_the_order_they_died() {
        let (_dir, db) = temp_db();
        let conn = &db.conn;
        let old = row(&db, "a", "old", Status::Pending, 1);
        let young = row(&db, "b", "young", Status::Dead, 0);
        row(&db, "a", "fine", Status::Delivered, 0);
        let first = dead_after(conn, 0).unwrap();
        assert_eq!(
            first.events,
            [DeadEvent {
                id: young,
                endpoint: "b".into(),
                route: Some("default".into())
            }]
        );
        assert_eq!(dead_after(conn, first.cursor).unwrap().events, []);
        // The older event dies later, with a newer attempt: found although its id is lower.
        attempt(conn, old);
        conn.execute(
            "UPDATE deliveries SET status = 'dead' WHERE event_id = ?1",
            [old],
        )
        .unwrap();
        let second = dead_after(conn, first.cursor).unwrap();
        assert_eq!(second.events.len(), 1);
        assert_eq!(second.events[0].id, old);
        // Replayed, then dead again: found again.
        attempt(conn, young);
        let third = dead_after(conn, second.cursor).unwrap();
        assert_eq!(third.events[0].id, young);
        // Pruned away to nothing: the cursor comes down, so new ids are not skipped.
        conn.execute("DELETE FROM events", []).unwrap();
        assert_eq!(dead_after(conn, third.cursor).unwrap().cursor, 0);
    }

    #[test]
    fn the_upstream_queries_walk_an_index_range() {
        let (_dir, db) = temp_db();
        let plan = |sql: &str, n: usize| -> String {
            let mut stmt = db
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap();
            let args: Vec<i64> = vec![1; n];
            let rows: Vec<String> = stmt
                .query_map(rusqlite::params_from_iter(args), |r| r.get(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            rows.join("; ")
        };
        let types = plan(TYPES_AFTER, 2);
        assert!(
            types.contains("SEARCH events USING INTEGER PRIMARY KEY"),
            "{types}"
        );
        let unrouted = plan(UNROUTED, 3);
        assert!(
            unrouted.contains(
                "USING INDEX events_endpoint (endpoint=? AND received_at>? AND received_at<?)"
            ),
            "{unrouted}"
        );
    }

    #[test]
    fn the_dead_query_walks_the_attempts_from_the_cursor() {
        let (_dir, db) = temp_db();
        let mut stmt = db
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {DEAD_AFTER}"))
            .unwrap();
        let plan: Vec<String> = stmt
            .query_map([1], |r| r.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("; ");
        assert!(
            plan.contains("SEARCH a USING INTEGER PRIMARY KEY"),
            "{plan}"
        );
        assert!(!plan.contains("SCAN d"), "{plan}");
    }

    #[test]
    fn alert_state_is_kept_apart_from_other_meta_rows() {
        let (_dir, db) = temp_db();
        let conn = &db.conn;
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('ready_probe_at', 1)",
            [],
        )
        .unwrap();
        let rows = vec![
            ("alerts:dead:a".to_string(), "{\"count\":1}".to_string()),
            ("ready_probe_at".to_string(), "2".to_string()),
        ];
        save_alert_state(conn, &rows).unwrap();
        save_alert_state(conn, &[("alerts:dead:a".into(), "{}".into())]).unwrap();
        assert_eq!(
            alert_state(conn).unwrap(),
            [("alerts:dead:a".to_string(), "{}".to_string())]
        );
        let probe: i64 = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'ready_probe_at'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(probe, 1);
        row(&db, "a", "k", Status::Stored, 0);
        row(&db, "b", "k", Status::Stored, 0);
        let asked = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(endpoints_with_events(conn, asked).unwrap(), ["a", "b"]);
        let plans: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {HAS_EVENTS}"))
            .unwrap()
            .query_map(["a"], |r| r.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plans
                .iter()
                .any(|p| p.contains("INDEX events_endpoint (endpoint=?)")),
            "{plans:?}"
        );
    }
}
