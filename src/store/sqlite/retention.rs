//! SQLite's pruning and archive restore: the rule of `store/retention.rs` in SQLite's
//! placeholders (`PRUNABLE`), the batches a pruning pass deletes (or reads for the archive
//! first), the incremental vacuum and WAL checkpoint that give the space back, and restore
//! with the intake's own dedup barrier (`INSERT_UNLESS_KNOWN`).

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::events::{DETAIL, attempts, detail};
use super::intake::{INSERT_DELIVERY, INSERT_UNLESS_KNOWN, NO_WINDOW};
use super::payload::StoredBody;
use super::{Sqlite, schema, status_column};
use crate::store::events::SUMMARY;
use crate::store::retention::prunable;
use crate::store::{
    Cutoffs, EventDetail, NewDelivery, PrunableGroup, Reclaimed, Removed, Restored, Status,
    StoreError, dedup_hash,
};

/// SQLite's side of [`crate::store::Pruning`], the one way a pass reaches these.
impl Sqlite {
    /// Up to `limit` prunable events in full (with attempts), oldest first, stopping early
    /// once their headers and bodies pass `byte_budget`: what the archive writes.
    pub(in crate::store) async fn prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
        byte_budget: u64,
    ) -> Result<Vec<EventDetail>, StoreError> {
        self.run(move |conn| prunable(conn, &cutoffs, limit, byte_budget))
            .await
    }

    /// Deletes these events (attempts go with them), each only if it is still prunable: one
    /// replayed since it was read stays.
    pub(in crate::store) async fn delete_pruned(
        &self,
        cutoffs: Cutoffs,
        ids: Vec<i64>,
    ) -> Result<Vec<Removed>, StoreError> {
        self.run(move |conn| delete_pruned(conn, &cutoffs, &ids))
            .await
    }

    /// Deletes up to `limit` prunable events, oldest first, without reading them.
    pub(in crate::store) async fn delete_prunable(
        &self,
        cutoffs: Cutoffs,
        limit: usize,
    ) -> Result<Vec<Removed>, StoreError> {
        self.run(move |conn| delete_prunable(conn, &cutoffs, limit))
            .await
    }

    /// Gives up to `max_pages` free pages back to the file system (incremental auto-vacuum).
    pub(in crate::store) async fn reclaim_space(
        &self,
        max_pages: u32,
    ) -> Result<Reclaimed, StoreError> {
        self.run(move |conn| reclaim_space(conn, max_pages)).await
    }

    /// Copies the WAL into the database file and truncates the WAL, outside any transaction
    /// (SQLite refuses a checkpoint inside one).
    pub(in crate::store) async fn checkpoint(&self) -> Result<bool, StoreError> {
        self.run_solo(checkpoint).await
    }

    pub(in crate::store) async fn prunable_counts(
        &self,
        cutoffs: Cutoffs,
    ) -> Result<Vec<PrunableGroup>, StoreError> {
        self.run(move |conn| prunable_counts(conn, &cutoffs)).await
    }

    /// Restores `events`, each to the routes `plans` gives it (same order), due at
    /// `now_ms`, in one writer job.
    pub(in crate::store) async fn restore(
        &self,
        events: Vec<EventDetail>,
        plans: Vec<Vec<NewDelivery>>,
        now_ms: i64,
    ) -> Result<Restored, StoreError> {
        self.run(move |conn| restore(conn, &events, &plans, now_ms))
            .await
    }
}

/// What pruning may remove (`retention.rs`'s rule), in SQLite's placeholders.
const PRUNABLE: &str = prunable!("?");

fn removed(r: &Row<'_>) -> rusqlite::Result<Removed> {
    Ok(Removed {
        endpoint: r.get(0)?,
        status: status_column(r, 1)?,
        bytes: r.get::<_, i64>(2)? as u64,
    })
}

pub(super) fn prunable_counts(
    conn: &Connection,
    c: &Cutoffs,
) -> rusqlite::Result<Vec<PrunableGroup>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT endpoint, status, count(*), sum(payload_bytes) \
         FROM events WHERE {PRUNABLE} GROUP BY endpoint, status ORDER BY endpoint, status"
    ))?;
    stmt.query_map(params![c.finished_before_ms, c.dead_before_ms], |r| {
        let Removed {
            endpoint, status, ..
        } = removed(r)?;
        Ok(PrunableGroup {
            endpoint,
            status,
            events: r.get::<_, i64>(2)? as u64,
            bytes: r.get::<_, i64>(3)? as u64,
        })
    })?
    .collect()
}

pub(super) fn prunable(
    conn: &Connection,
    c: &Cutoffs,
    limit: usize,
    byte_budget: u64,
) -> rusqlite::Result<Vec<EventDetail>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {SUMMARY}, {DETAIL} FROM events \
         JOIN payloads ON event_id = id WHERE {PRUNABLE} ORDER BY id LIMIT ?3"
    ))?;
    let mut rows = stmt.query(params![
        c.finished_before_ms,
        c.dead_before_ms,
        limit as i64
    ])?;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    // Bodies may be up to `max_body_bytes` each: bound the batch's memory, not only its rows.
    while bytes < byte_budget
        && let Some(row) = rows.next()?
    {
        let event = detail(row)?;
        bytes += (event.headers.len() + event.body.len()) as u64;
        out.push(event);
    }
    drop(rows);
    for event in &mut out {
        event.attempts = attempts(conn, event.summary.id)?;
        event.fetched = super::fetches::read(conn, event.summary.id)?;
    }
    Ok(out)
}

pub(super) fn delete_pruned(
    conn: &Connection,
    c: &Cutoffs,
    ids: &[i64],
) -> rusqlite::Result<Vec<Removed>> {
    let mut delete = conn.prepare_cached(&format!(
        "DELETE FROM events WHERE id = ?3 AND {PRUNABLE} \
         RETURNING endpoint, status, payload_bytes"
    ))?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(gone) = delete
            .query_row(params![c.finished_before_ms, c.dead_before_ms, id], removed)
            .optional()?
        {
            out.push(gone);
        }
    }
    Ok(out)
}

pub(super) fn delete_prunable(
    conn: &Connection,
    c: &Cutoffs,
    limit: usize,
) -> rusqlite::Result<Vec<Removed>> {
    let mut delete = conn.prepare_cached(&format!(
        "DELETE FROM events WHERE id IN \
         (SELECT id FROM events WHERE {PRUNABLE} ORDER BY id LIMIT ?3) \
         RETURNING endpoint, status, payload_bytes"
    ))?;
    delete
        .query_map(
            params![c.finished_before_ms, c.dead_before_ms, limit as i64],
            removed,
        )?
        .collect()
}

pub(super) fn reclaim_space(conn: &Connection, max_pages: u32) -> rusqlite::Result<Reclaimed> {
    let pragma = |name: &str| conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0));
    let before: i64 = pragma("freelist_count")?;
    // The pragma yields one row per page it frees: step it to the end, or only one goes.
    let mut vacuum = conn.prepare(&format!("PRAGMA incremental_vacuum({})", max_pages.max(1)))?;
    let mut rows = vacuum.query([])?;
    while rows.next()?.is_some() {}
    drop(rows);
    let after: i64 = pragma("freelist_count")?;
    let page_size: i64 = pragma("page_size")?;
    Ok(Reclaimed {
        pages: (before - after).max(0) as u64,
        page_size: page_size as u64,
        free_left: after as u64,
    })
}

pub(super) fn checkpoint(conn: &Connection) -> rusqlite::Result<bool> {
    // TRUNCATE waits on the busy handler for readers (an operator's `events list`). On the
    // server, intake queues behind this job, so it must not wait: with no busy handler it
    // copies what it can, and the next checkpoint (SQLite's own, or the next prune)
    // catches up.
    conn.busy_timeout(Duration::ZERO)?;
    let result = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    });
    conn.busy_timeout(schema::BUSY_TIMEOUT)?;
    match result {
        Ok(busy) => Ok(busy == 0),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Restore's reset of a key already stored (?1 endpoint, ?2 key, ?3 now, ?4 hash): at most
/// one row, the key's newest finished one, unless another of its rows (with a dedup window, a
/// key may have several) is already on its way. With one row per key: that row, if finished.
/// `+status` keeps `status` out of index choice, so both lookups go through `events_dedup`
/// (with the ORDER BY, SQLite 3.40 would otherwise read every finished row of the endpoint
/// through `events_queue`); `+endpoint` likewise keeps `events_endpoint` out.
const RESET_FINISHED: &str = "UPDATE events SET status = ?3, finished_at = NULL \
     WHERE id = (SELECT id FROM events \
       WHERE dedup_hash = ?4 AND +endpoint = ?1 AND dedup_key = ?2 \
       AND +status IN ('delivered', 'dead', 'stored') \
       AND NOT EXISTS (SELECT 1 FROM events WHERE dedup_hash = ?4 AND +endpoint = ?1 \
         AND dedup_key = ?2 AND +status IN ('pending', 'delivering')) \
       ORDER BY received_at DESC, id DESC LIMIT 1) RETURNING id";

pub(super) fn restore(
    conn: &Connection,
    events: &[EventDetail],
    plans: &[Vec<NewDelivery>],
    now_ms: i64,
) -> rusqlite::Result<Restored> {
    let mut insert = conn.prepare_cached(INSERT_UNLESS_KNOWN)?;
    let mut reset = conn.prepare_cached(RESET_FINISHED)?;
    // A delivered attempt lives on its delivery row, which the reset deletes: it gets a row
    // of its own first, so the history keeps it (as `events replay` does).
    let mut keep = conn.prepare_cached(
        "INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, outcome) \
         SELECT event_id, route, attempts, finished_at - delivered_ms, delivered_ms, \
         'delivered' FROM deliveries \
         WHERE event_id = ?1 AND status = 'delivered' AND delivered_ms IS NOT NULL",
    )?;
    let mut forget = conn.prepare_cached("DELETE FROM deliveries WHERE event_id = ?1")?;
    let mut deliver = conn.prepare_cached(INSERT_DELIVERY)?;
    let mut fetched = conn.prepare_cached(crate::store::fetches::KEEP)?;
    let mut out = Restored::default();
    for (e, routes) in events.iter().zip(plans) {
        let s = &e.summary;
        let hash = dedup_hash(&s.endpoint, &s.dedup_key);
        let status = if routes.is_empty() {
            Status::Stored
        } else {
            Status::Pending
        };
        // Its deliveries, and what fetching got (kept as `keep_fetched` keeps it) when the
        // row is this event's: a newer event of the key (a thin body's repeat) is not given
        // an older object.
        let mut deliver_to = |id: i64, own: bool| -> rusqlite::Result<()> {
            for d in routes {
                deliver.execute(params![id, d.route, s.endpoint, now_ms, d.order_key])?;
            }
            if let Some(f) = e.fetched.as_ref().filter(|_| own) {
                fetched.execute(params![id, f.state(), f.detail()])?;
            }
            Ok(())
        };
        let inserted = insert.execute(params![
            s.endpoint,
            s.dedup_key,
            hash,
            s.event_type,
            e.content_type,
            (e.headers.len() + e.body.len()) as i64,
            s.received_at_ms,
            status.as_str(),
            NO_WINDOW,
            s.object_id,
            None::<String>,
            e.signed_id,
            e.event_type_signed,
        ])?;
        if inserted == 1 {
            let id = conn.last_insert_rowid();
            if let Some(origin) = s.origin.column() {
                conn.prepare_cached(super::intake::SET_ORIGIN)?
                    .execute(params![id, origin])?;
            }
            super::intake::insert_payload(
                conn,
                id,
                &e.headers,
                &e.body,
                &StoredBody::encode(&e.body),
            )?;
            deliver_to(id, true)?;
            out.inserted += 1;
        } else if let Some(id) = reset
            .query_row(
                params![s.endpoint, s.dedup_key, status.as_str(), hash],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
        {
            // Its old deliveries (finished, all of them) give way to the current routes'.
            keep.execute([id])?;
            forget.execute([id])?;
            deliver_to(id, id == s.id)?;
            out.reset += 1;
        } else {
            out.already_queued += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::Db;
    use super::super::fixtures::{CUTOFFS, DAY, NOW, ids, row, temp_db};
    use super::*;
    use crate::store::{EventSummary, ListFilter};

    #[test]
    fn only_finished_events_past_their_window_are_prunable() {
        let (_dir, db) = temp_db();
        let mut keep = Vec::new();
        let mut gone = Vec::new();
        for (i, status) in Status::ALL.into_iter().enumerate() {
            let young = row(&db, "a", &format!("young-{i}"), status, 29);
            let old = row(&db, "a", &format!("old-{i}"), status, 31);
            let ancient = row(&db, "a", &format!("ancient-{i}"), status, 91);
            keep.push(young);
            match status {
                Status::Delivered | Status::Stored => gone.extend([old, ancient]),
                Status::Dead => {
                    keep.push(old);
                    gone.push(ancient);
                }
                Status::Pending | Status::Delivering => keep.extend([old, ancient]),
            }
        }
        let counts = db.prunable_counts(CUTOFFS).unwrap();
        let summary: Vec<(Status, u64)> = counts.iter().map(|g| (g.status, g.events)).collect();
        assert_eq!(
            summary,
            [
                (Status::Dead, 1),
                (Status::Delivered, 2),
                (Status::Stored, 2)
            ]
        );
        let removed = delete_prunable(&db.conn, &CUTOFFS, 500).unwrap();
        assert_eq!(removed.len(), gone.len());
        keep.sort();
        assert_eq!(ids(&db), keep);
        let orphans: i64 = db
            .conn
            .query_row(
                "SELECT count(*) FROM attempts WHERE event_id NOT IN (SELECT id FROM events)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0, "attempts go with their event");
    }

    #[test]
    fn deleting_an_archived_batch_spares_an_event_replayed_since_it_was_read() {
        let (_dir, mut db) = temp_db();
        let a = row(&db, "a", "k1", Status::Delivered, 40);
        let b = row(&db, "a", "k2", Status::Dead, 100);
        let batch = prunable(&db.conn, &CUTOFFS, 500, u64::MAX).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[1].attempts.len(), 1, "read with its attempts");
        assert!(db.replay(b, None, NOW).unwrap());
        let removed = delete_pruned(&db.conn, &CUTOFFS, &[a, b]).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(ids(&db), [b]);
    }

    #[test]
    fn a_batch_stops_at_its_byte_budget_but_takes_at_least_one_event() {
        let (_dir, db) = temp_db();
        for i in 0..5 {
            row(&db, "a", &format!("k{i}"), Status::Delivered, 40);
        }
        // Each row holds a 2-byte body and no headers.
        assert_eq!(prunable(&db.conn, &CUTOFFS, 500, 1).unwrap().len(), 1);
        assert_eq!(prunable(&db.conn, &CUTOFFS, 500, 5).unwrap().len(), 3);
        assert_eq!(prunable(&db.conn, &CUTOFFS, 2, u64::MAX).unwrap().len(), 2);
    }

    /// Where a restored event goes in these tests: the shorthand route.
    fn to_default(_: &EventDetail) -> Vec<NewDelivery> {
        vec![NewDelivery {
            route: "default".into(),
            order_key: None,
        }]
    }

    #[test]
    fn restoring_never_makes_a_second_row_for_one_key() {
        let (_dir, mut db) = temp_db();
        let delivered = row(&db, "a", "delivered", Status::Delivered, 1);
        let pending = row(&db, "a", "pending", Status::Pending, 1);
        let archived = |key: &str| EventDetail {
            summary: EventSummary {
                origin: crate::store::Origin::Webhook,
                id: 999,
                endpoint: "a".into(),
                dedup_key: key.into(),
                event_type: Some("t".into()),
                received_at_ms: NOW - 200 * DAY,
                status: Status::Delivered,
                attempts: 1,
                next_attempt_at_ms: None,
                last_error: None,
                object_id: None,
            },
            content_type: None,
            headers: b"x: y\r\n".to_vec(),
            body: b"{}".to_vec(),
            routes: Vec::new(),
            signed_id: None,
            event_type_signed: None,
            fetched: None,
            attempts: Vec::new(),
        };
        let events = [archived("gone"), archived("delivered"), archived("pending")];
        let restored = db.restore(&events, &to_default, NOW).unwrap();
        assert_eq!(
            restored,
            Restored {
                inserted: 1,
                reset: 1,
                already_queued: 1
            }
        );
        let again = db.restore(&events, &to_default, NOW).unwrap();
        assert_eq!(again.already_queued, 3, "all pending now: left alone");
        assert_eq!(ids(&db).len(), 3);
        let new = db
            .list(&ListFilter::default())
            .unwrap()
            .into_iter()
            .find(|e| e.dedup_key == "gone")
            .unwrap();
        assert_eq!(new.status, Status::Pending);
        assert_eq!(
            new.received_at_ms,
            NOW - 200 * DAY,
            "keeps its received time"
        );
        assert_eq!(new.next_attempt_at_ms, Some(NOW), "due now");
        let restored = db.event(new.id).unwrap().expect("with its payload");
        assert_eq!(
            (restored.headers, restored.body),
            (b"x: y\r\n".to_vec(), b"{}".to_vec()),
            "headers and body come back as archived"
        );
        for id in [delivered, pending] {
            assert_eq!(
                db.event(id).unwrap().unwrap().summary.status,
                Status::Pending
            );
        }
    }

    #[test]
    fn restoring_a_key_with_several_rows_sends_it_once_more() {
        // With a dedup window, one key may have a row per window.
        let (_dir, mut db) = temp_db();
        let older = row(&db, "a", "k", Status::Delivered, 3);
        let newer = row(&db, "a", "k", Status::Dead, 2);
        let archived = EventDetail {
            summary: EventSummary {
                origin: crate::store::Origin::Webhook,
                id: 999,
                endpoint: "a".into(),
                dedup_key: "k".into(),
                event_type: None,
                received_at_ms: NOW - 40 * DAY,
                status: Status::Delivered,
                attempts: 1,
                next_attempt_at_ms: None,
                last_error: None,
                object_id: None,
            },
            content_type: None,
            headers: Vec::new(),
            body: b"{}".to_vec(),
            routes: Vec::new(),
            signed_id: None,
            event_type_signed: None,
            fetched: None,
            attempts: Vec::new(),
        };
        let events = std::slice::from_ref(&archived);
        let status = |db: &Db, id| db.event(id).unwrap().unwrap().summary.status;
        let restored = db.restore(events, &to_default, NOW).unwrap();
        assert_eq!(
            restored,
            Restored {
                reset: 1,
                ..Restored::default()
            }
        );
        assert_eq!(status(&db, newer), Status::Pending, "the newest row");
        assert_eq!(status(&db, older), Status::Delivered, "only one row");
        // One of its rows is on its way: none is reset again, and no row is added.
        assert_eq!(
            db.restore(events, &to_default, NOW).unwrap().already_queued,
            1
        );
        assert_eq!(status(&db, older), Status::Delivered);
        assert_eq!(ids(&db), [older, newer]);
    }

    #[test]
    fn restores_reset_reads_the_narrow_index() {
        let (_dir, db) = temp_db();
        let plan: Vec<String> = db
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {RESET_FINISHED}"))
            .unwrap()
            .query_map(params!["a", "k", 0, 1], |r| r.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("; ");
        assert_eq!(
            plan.matches("USING INDEX events_dedup (dedup_hash=?)")
                .count(),
            2,
            "{plan}"
        );
        assert!(!plan.contains("SCAN events"), "{plan}");
    }

    #[test]
    fn reclaiming_frees_every_page_it_is_asked_for() {
        let (_dir, db) = temp_db();
        let body = vec![b'x'; 3000];
        for i in 0..200 {
            db.conn
                .execute(
                    "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                     received_at, status) VALUES ('a', ?1, ?2, 3000, 0, 'delivered')",
                    params![i, dedup_hash("a", &i.to_string())],
                )
                .unwrap();
            db.conn
                .execute(
                    "INSERT INTO payloads (event_id, headers, body) \
                     VALUES (last_insert_rowid(), x'', ?1)",
                    [&body],
                )
                .unwrap();
        }
        delete_prunable(&db.conn, &CUTOFFS, 500).unwrap();
        let free: i64 = db
            .conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))
            .unwrap();
        assert!(free > 150, "{free}");
        let round = reclaim_space(&db.conn, 100).unwrap();
        assert_eq!(round.pages, 100, "more than one page per call");
        assert_eq!(round.free_left, free as u64 - 100);
        let round = reclaim_space(&db.conn, 10_000).unwrap();
        assert_eq!(round.free_left, 0);
        assert!(round.bytes() > 0);
    }
}
