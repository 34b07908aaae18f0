//! SQLite's side of the queue ([`crate::store::Store::claim_lanes`] and the rest): claims,
//! attempts, roll-ups and recovery, each one writer job.
//!
//! The queue is the partial index `deliveries_queue`: a delivery's entry is there while its
//! `next_attempt_at` is set, from intake until the batched roll-up clears it after the
//! delivery finished. Nothing a claim or a delivered attempt writes (`status`, `attempts`,
//! `finished_at`, `delivered_ms`) is in that index or its condition, so those commits rewrite
//! the delivery's leaf of `deliveries` and no index page (bench/PROFILE.md, "Disk writes per
//! extra route (schema 6)"). The index thus also holds deliveries being delivered and, for a moment,
//! finished ones: each query reads `status` from the row to skip those. Each names the index
//! (`INDEXED BY`) and states its condition, `next_attempt_at IS NOT NULL`: SQLite uses a
//! partial index only for a query that does, and without it these would walk every delivery
//! (a test below checks every plan). A strict lane's head is read through `deliveries_head`,
//! the same entries in arrival order ([`V11_TO_V12`]): no query run per claim sorts the
//! backlog, so a delivery costs the same with a thousand events waiting or a hundred thousand.

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use super::Sqlite;
use crate::store::{
    AfterAttempt, ClaimNext, Claimed, Delivery, LaneClaim, Order, Origin, Status, StoreError, Tried,
};

/// SQLite's side of [`crate::store::Store`]'s queue methods: each one job for the writer, committed as
/// bookkeeping (no fsync of its own).
impl Sqlite {
    /// At start-up: attempts that were running when the process died go back to pending, due
    /// now, and are recorded as interrupted. Returns how many deliveries.
    pub(in crate::store) async fn recover(&self, now_ms: i64) -> Result<usize, StoreError> {
        self.run_bookkeeping(move |conn| recover(conn, now_ms))
            .await
    }

    /// Unfinished (pending or delivering) deliveries per (endpoint, route), for the start-up
    /// check that every such delivery still has a route to go to.
    pub(in crate::store) async fn unfinished_by_route(
        &self,
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        self.run_bookkeeping(|conn| {
            conn.prepare(UNFINISHED_BY_ROUTE)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .await
    }

    /// Claims the due deliveries of several lanes in one transaction (the worker loop's round:
    /// the deliveries of one event to its routes share pages, and so one commit), and says
    /// when each lane with room left is next due.
    pub(in crate::store) async fn claim_lanes(
        &self,
        lanes: Vec<LaneClaim>,
        now_ms: i64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.run_bookkeeping(move |conn| {
            lanes
                .iter()
                .map(|l| {
                    let deliveries =
                        claim_due(conn, &l.endpoint, &l.route, l.limit, l.order, now_ms)?;
                    let next_due = if deliveries.len() < l.limit {
                        next_due(conn, &l.endpoint, &l.route, l.order)?
                    } else {
                        None
                    };
                    Ok(Claimed {
                        deliveries,
                        next_due,
                    })
                })
                .collect()
        })
        .await
    }

    /// Records one attempt and moves the delivery on; with `then`, claims the lane's next due
    /// delivery in the same transaction, so a busy lane costs one commit per delivery.
    pub(in crate::store) async fn record_attempt(
        &self,
        event_id: i64,
        route: String,
        attempt: Tried,
        after: AfterAttempt,
        then: Option<ClaimNext>,
    ) -> Result<Option<Delivery>, StoreError> {
        self.run_bookkeeping(move |conn| {
            record_attempt(conn, event_id, &route, &attempt, &after)?;
            let Some(next) = then else { return Ok(None) };
            let mut claimed = claim_due(
                conn,
                &next.endpoint,
                &next.route,
                1,
                next.order,
                next.now_ms,
            )?;
            Ok(claimed.pop())
        })
        .await
    }

    /// Writes these events' roll-up status, each whose deliveries are all finished (the
    /// others are left pending), and takes their finished deliveries out of the queue index,
    /// in one transaction.
    pub(in crate::store) async fn roll_up(&self, event_ids: Vec<i64>) -> Result<(), StoreError> {
        self.run_bookkeeping(move |conn| {
            event_ids
                .into_iter()
                .try_for_each(|id| roll_up_one(conn, id))
        })
        .await
    }

    /// SQLite's `data_version`: changes when another connection (say, `portaria events
    /// replay`) commits to the file.
    pub(in crate::store) async fn data_version(&self) -> Result<i64, StoreError> {
        self.run_bookkeeping(|conn| conn.query_row("PRAGMA data_version", [], |r| r.get(0)))
            .await
    }
}

/// The delivering deliveries, at start-up.
pub(super) const INTERRUPTED: &str = "SELECT event_id, route, attempts FROM deliveries \
     INDEXED BY deliveries_queue WHERE next_attempt_at IS NOT NULL AND status = 'delivering'";
/// Version 12: a lane's queue entries in arrival order, for the head of a strict lane
/// ([`HEAD`]). Through `deliveries_queue` (due time first) the oldest unfinished delivery was
/// found by reading and sorting every unfinished delivery of the endpoint, at each claim: a
/// delivery cost a term that grew with the backlog (issue 27: 2.8 ms per event with 1,500
/// pending, 6.0 ms with 12,000). Here the head is the first entry of its lane still unfinished.
/// Same condition as the queue's, so the same writes add and clear its entries (intake adds
/// one, appended; the roll-up clears it); a claim or a delivered attempt still writes no index.
pub(super) const V11_TO_V12: &str = "
CREATE INDEX deliveries_head ON deliveries (endpoint, route, event_id)
    WHERE next_attempt_at IS NOT NULL;
";
/// The oldest unfinished delivery of a lane (the head of a strict lane).
pub(super) const HEAD: &str = "SELECT event_id, status, next_attempt_at FROM deliveries \
     INDEXED BY deliveries_head WHERE endpoint = ?1 AND route = ?2 \
     AND next_attempt_at IS NOT NULL AND status IN ('pending', 'delivering') \
     ORDER BY event_id LIMIT 1";
/// Due deliveries of a lane, soonest first.
pub(super) const DUE: &str = "SELECT event_id FROM deliveries INDEXED BY deliveries_queue \
     WHERE endpoint = ?1 AND route = ?2 AND next_attempt_at IS NOT NULL \
     AND next_attempt_at <= ?3 AND status = 'pending' ORDER BY next_attempt_at, event_id \
     LIMIT ?4";
/// A delivery with no older unfinished one of its ordering key (none: its own lane).
const KEY_HEAD: &str = "(d.order_key IS NULL OR NOT EXISTS (SELECT 1 FROM deliveries AS o \
     INDEXED BY deliveries_order WHERE o.endpoint = ?1 AND o.route = ?2 \
     AND o.next_attempt_at IS NOT NULL AND o.order_key IS NOT NULL \
     AND o.order_key = d.order_key AND o.event_id < d.event_id \
     AND o.status IN ('pending', 'delivering')))";
/// When the next pending delivery of a lane is due.
pub(super) const NEXT_DUE: &str = "SELECT next_attempt_at FROM deliveries \
     INDEXED BY deliveries_queue WHERE endpoint = ?1 AND route = ?2 \
     AND next_attempt_at IS NOT NULL AND status = 'pending' ORDER BY next_attempt_at LIMIT 1";
/// Unfinished deliveries per lane.
pub(super) const UNFINISHED_BY_ROUTE: &str = "SELECT endpoint, route, count(*) FROM deliveries \
     INDEXED BY deliveries_queue WHERE next_attempt_at IS NOT NULL \
     AND status IN ('pending', 'delivering') GROUP BY endpoint, route";
/// Claims one delivery (?1, ?2) for an attempt. Its number is read by [`ATTEMPTS`] after it,
/// not with `RETURNING`: SQLite gathers a `RETURNING` statement's rows in a temporary b-tree
/// built for each run (as the IN list of a CHECK before schema 8), where reading the row just
/// written back is one look-up in a page already in the cache.
pub(super) const CLAIM: &str = "UPDATE deliveries SET status = 'delivering', \
     attempts = attempts + 1 WHERE event_id = ?1 AND route = ?2";
/// A delivery's attempts so far.
pub(super) const ATTEMPTS: &str =
    "SELECT attempts FROM deliveries WHERE event_id = ?1 AND route = ?2";
/// A failed attempt with another to come, at ?3; only a delivery still being delivered.
pub(super) const RETRY: &str = "UPDATE deliveries SET status = 'pending', next_attempt_at = ?3, \
     last_error = ?4, finished_at = NULL, delivered_ms = NULL \
     WHERE event_id = ?1 AND route = ?2 AND status = 'delivering'";
/// The last attempt of a delivery still being delivered: its status (?3, delivered or dead).
pub(super) const FINISH: &str = "UPDATE deliveries SET status = ?3, last_error = ?4, \
     finished_at = ?5, delivered_ms = ?6 \
     WHERE event_id = ?1 AND route = ?2 AND status = 'delivering'";
/// Takes one event's finished deliveries (?1) out of the queue index, with the roll-up.
pub(super) const CLEAR_FINISHED: &str = "UPDATE deliveries SET next_attempt_at = NULL \
     WHERE event_id = ?1 AND next_attempt_at IS NOT NULL AND status IN ('delivered', 'dead')";
/// Every finished delivery still in the queue index, at start-up: what a crash left there.
pub(super) const CLEAR_ALL_FINISHED: &str = "UPDATE deliveries INDEXED BY deliveries_queue \
     SET next_attempt_at = NULL \
     WHERE next_attempt_at IS NOT NULL AND status IN ('delivered', 'dead')";

/// Due deliveries of a lane whose key lets them go, soonest first.
pub(super) fn due_by_key() -> String {
    format!(
        "SELECT d.event_id FROM deliveries AS d INDEXED BY deliveries_queue \
         WHERE d.endpoint = ?1 AND d.route = ?2 AND d.next_attempt_at IS NOT NULL \
         AND d.next_attempt_at <= ?3 AND d.status = 'pending' AND {KEY_HEAD} \
         ORDER BY d.next_attempt_at, d.event_id LIMIT ?4"
    )
}

/// When the soonest delivery of a lane whose key lets it go is due.
pub(super) fn next_due_by_key() -> String {
    format!(
        "SELECT d.next_attempt_at FROM deliveries AS d INDEXED BY deliveries_queue \
         WHERE d.endpoint = ?1 AND d.route = ?2 AND d.next_attempt_at IS NOT NULL \
         AND d.status = 'pending' AND {KEY_HEAD} ORDER BY d.next_attempt_at LIMIT 1"
    )
}

/// A pending event's status from its deliveries once the last one finished (the worker's
/// roll-up, in batches: `forward::rollup`): delivered if every one was, else dead, finished
/// when its last delivery was. While one is unfinished, the row is left as it is.
macro_rules! roll_up {
    ($which:literal) => {
        concat!(
            "UPDATE events SET \
             status = CASE WHEN EXISTS (SELECT 1 FROM deliveries AS d \
               WHERE d.event_id = events.id AND d.status = 'dead') THEN 'dead' \
               ELSE 'delivered' END, \
             finished_at = (SELECT max(d.finished_at) FROM deliveries AS d \
               WHERE d.event_id = events.id) \
             WHERE ",
            $which,
            " AND status = 'pending' \
             AND EXISTS (SELECT 1 FROM deliveries AS d WHERE d.event_id = events.id) \
             AND NOT EXISTS (SELECT 1 FROM deliveries AS d WHERE d.event_id = events.id \
               AND d.status IN ('pending', 'delivering'))"
        )
    };
}
/// One event (?1).
pub(super) const ROLL_UP: &str = roll_up!("id = ?1");
/// Every event, at start-up: the batches a crash cut off (a walk of `events`, once).
pub(super) const ROLL_UP_ALL: &str = roll_up!("1");

pub(super) fn recover(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
    let interrupted: Vec<(i64, String, u32)> = conn
        .prepare(INTERRUPTED)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut record = conn.prepare(
        "INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, outcome, \
         error) VALUES (?1, ?2, ?3, ?4, 0, 'interrupted', 'portaria stopped during this attempt')",
    )?;
    let mut requeue = conn.prepare(
        "UPDATE deliveries SET status = 'pending', next_attempt_at = ?3 \
         WHERE event_id = ?1 AND route = ?2",
    )?;
    for (id, route, attempt) in &interrupted {
        record.execute(params![id, route, attempt, now_ms])?;
        requeue.execute(params![id, route, now_ms])?;
    }
    // Roll-ups (and queue entries to clear) a stop cut off before they were written.
    conn.execute(CLEAR_ALL_FINISHED, [])?;
    conn.execute(ROLL_UP_ALL, [])?;
    Ok(interrupted.len())
}

/// Whether a pause holds for the route at `now_ms` (`store/pauses.rs`).
fn paused(conn: &Connection, endpoint: &str, route: &str, now_ms: i64) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM route_pauses WHERE endpoint = ?1 AND route = ?2 \
         AND (until IS NULL OR until > ?3))",
    )?
    .query_row(params![endpoint, route, now_ms], |r| r.get(0))
}

pub(super) fn claim_due(
    conn: &Connection,
    endpoint: &str,
    route: &str,
    limit: usize,
    order: Order,
    now_ms: i64,
) -> rusqlite::Result<Vec<Delivery>> {
    // A paused route gives nothing, checked in the claim's own transaction: the worker skips
    // paused lanes too, but its view is a round old, and a 410 pauses a route mid-round.
    if paused(conn, endpoint, route, now_ms)? {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = match order {
        // The head of the line: the oldest delivery not yet finished. If it is not due (or is
        // being delivered), nothing behind it may go first.
        Order::Strict => match waiting_head(conn, endpoint, route)? {
            Some((id, due)) if due <= now_ms => vec![id],
            _ => Vec::new(),
        },
        Order::Any => conn
            .prepare_cached(DUE)?
            .query_map(params![endpoint, route, now_ms, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?,
        Order::ByKey => conn
            .prepare_cached(&due_by_key())?
            .query_map(params![endpoint, route, now_ms, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?,
    };
    let mut claim = conn.prepare_cached(CLAIM)?;
    let mut attempts = conn.prepare_cached(ATTEMPTS)?;
    let mut event = conn.prepare_cached(
        "SELECT dedup_key, event_type, content_type, received_at, headers, body, codec, \
         signed_id, event_type_signed, origin FROM events JOIN payloads ON event_id = id \
         WHERE id = ?1",
    )?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        claim.execute(params![id, route])?;
        let attempt: u32 = attempts.query_row(params![id, route], |r| r.get(0))?;
        let (mut delivery, stored, codec) = event.query_row([id], |r| {
            let delivery = Delivery {
                event_id: id,
                endpoint: endpoint.to_string(),
                route: route.to_string(),
                dedup_key: r.get(0)?,
                event_type: r.get(1)?,
                event_type_signed: r.get::<_, Option<bool>>(8)?.unwrap_or(false),
                signed_id: r.get(7)?,
                origin: Origin::from_column(r.get::<_, Option<String>>(9)?.as_deref()),
                content_type: r.get(2)?,
                received_at_ms: r.get(3)?,
                attempt,
                headers: Bytes::from(r.get::<_, Vec<u8>>(4)?),
                body: Bytes::new(),
                fetched: None,
            };
            Ok((delivery, r.get::<_, Vec<u8>>(5)?, r.get::<_, i64>(6)?))
        })?;
        match super::payload::decode(id, codec, stored) {
            Ok(body) => {
                delivery.body = Bytes::from(body);
                out.push(delivery);
            }
            // Never another body, and no retry (the stored bytes will not mend): the delivery
            // is dead at once with the reason as its attempt's error, where `events show`,
            // the status page and the dead-event alert show it; the lane goes on.
            Err(corrupt) => {
                tracing::error!(event = id, route, "{corrupt}");
                let tried = Tried {
                    attempt,
                    started_at_ms: now_ms,
                    duration_ms: 0,
                };
                let dead = AfterAttempt::Dead {
                    error: corrupt.to_string(),
                };
                record_attempt(conn, id, route, &tried, &dead)?;
                // No slot runs it, so no slot hands it to the roll-up task: roll it up here.
                roll_up_one(conn, id)?;
            }
        }
    }
    Ok(out)
}

/// Takes the event's finished deliveries out of the queue index and writes its roll-up status.
fn roll_up_one(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(CLEAR_FINISHED)?.execute([id])?;
    conn.prepare_cached(ROLL_UP)?.execute([id])?;
    Ok(())
}

pub(super) fn next_due(
    conn: &Connection,
    endpoint: &str,
    route: &str,
    order: Order,
) -> rusqlite::Result<Option<i64>> {
    match order {
        Order::Strict => Ok(waiting_head(conn, endpoint, route)?.map(|(_, due)| due)),
        Order::Any => conn
            .prepare_cached(NEXT_DUE)?
            .query_row([endpoint, route], |r| r.get(0))
            .optional(),
        Order::ByKey => conn
            .prepare_cached(&next_due_by_key())?
            .query_row([endpoint, route], |r| r.get(0))
            .optional(),
    }
}

/// The head of a strict lane with when it is due, if it is waiting (pending) rather than
/// being delivered. Every delivery in the queue index has a due time (schema 6 gave the
/// unfinished ones without one a due time of 0); a missing one would count as due now.
fn waiting_head(
    conn: &Connection,
    endpoint: &str,
    route: &str,
) -> rusqlite::Result<Option<(i64, i64)>> {
    let mut head = conn.prepare_cached(HEAD)?;
    let row: Option<(i64, String, Option<i64>)> = head
        .query_row([endpoint, route], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(row.and_then(|(id, status, due)| (status == "pending").then_some((id, due.unwrap_or(0)))))
}

pub(super) fn record_attempt(
    conn: &Connection,
    event_id: i64,
    route: &str,
    attempt: &Tried,
    after: &AfterAttempt,
) -> rusqlite::Result<()> {
    // A delivered attempt is recorded on the delivery row itself (`delivered_ms`); only the
    // failed ones get a row of their own (and a delivered one whose row moved on meanwhile).
    let insert_row = |conn: &Connection| -> rusqlite::Result<usize> {
        conn.prepare_cached(
            "INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, outcome, \
             error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            event_id,
            route,
            attempt.attempt,
            attempt.started_at_ms,
            attempt.duration_ms,
            after.recorded_as(),
            after.error()
        ])
    };
    if *after != AfterAttempt::Delivered {
        insert_row(conn)?;
    }
    let finished = attempt.started_at_ms + attempt.duration_ms;
    // Only a delivery still marked delivering moves on: a replay that raced this attempt wins.
    // A finished delivery keeps its due time (and so its queue entry) until the roll-up
    // clears it: setting it here would rewrite a page of the queue index per delivery.
    let finish = |status: Status, delivered_ms: Option<i64>| {
        conn.prepare_cached(FINISH)?.execute(params![
            event_id,
            route,
            status.as_str(),
            after.error(),
            finished,
            delivered_ms
        ])
    };
    let moved = match after {
        AfterAttempt::RetryAt { at_ms, error } => conn
            .prepare_cached(RETRY)?
            .execute(params![event_id, route, at_ms, error])?,
        AfterAttempt::Delivered => finish(Status::Delivered, Some(attempt.duration_ms))?,
        AfterAttempt::Dead { .. } => finish(Status::Dead, None)?,
    };
    if moved == 0 && *after == AfterAttempt::Delivered {
        // A replay (or a recovery elsewhere) won the race: the row is not ours to finish, but
        // the attempt happened and its history keeps it.
        insert_row(conn)?;
    }
    // The event's roll-up status is the worker's to write, in batches (`Store::roll_up`).
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Db;
    use super::super::fixtures::{NOW, row, temp_db};
    use super::*;

    #[test]
    fn the_queue_queries_read_the_queue_index_not_the_events() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("p.db")).unwrap();
        let none: &[&dyn rusqlite::ToSql] = &[];
        let (due_by_key, next_due_by_key) = (due_by_key(), next_due_by_key());
        for (name, query, args) in [
            ("interrupted", INTERRUPTED, none),
            ("head", HEAD, params!["e", "r"]),
            ("due", DUE, params!["e", "r", 0, 1]),
            ("due by key", &due_by_key, params!["e", "r", 0, 1]),
            ("next due", NEXT_DUE, params!["e", "r"]),
            ("next due by key", &next_due_by_key, params!["e", "r"]),
            ("unfinished", UNFINISHED_BY_ROUTE, none),
            ("clear all finished", CLEAR_ALL_FINISHED, none),
        ] {
            let mut stmt = db
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap();
            let plan: Vec<String> = stmt
                .query_map(args, |r| r.get(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let plan = plan.join("; ");
            // What a claim or its next-due look runs must not sort its candidates: a sort
            // reads every unfinished delivery of the endpoint, a cost per delivery that grows
            // with the backlog (issue 27). Index order, stopped at the LIMIT, does not.
            let per_claim = !matches!(name, "interrupted" | "unfinished" | "clear all finished");
            assert!(
                !(per_claim && plan.contains("TEMP B-TREE")),
                "{name} sorts the backlog: {plan}"
            );
            let index = if name == "head" {
                "deliveries_head"
            } else {
                "deliveries_queue"
            };
            assert!(plan.contains(index), "{name}: {plan}");
            // Walking a partial index is fine (it holds only unfinished deliveries); walking
            // the table is not.
            let walks_all = plan.split("; ").any(|step| {
                step.starts_with("SCAN")
                    && !step.contains("deliveries_queue")
                    && !step.contains("deliveries_order")
            });
            assert!(!walks_all && !plan.contains("autoindex"), "{name}: {plan}");
        }
    }

    /// Pages the next commit writes: the WAL is emptied first, and each page a commit wrote
    /// is one frame in it.
    fn frames_written_by(db: &Db, commit: impl FnOnce()) -> i64 {
        let frames = |mode: &str| -> i64 {
            db.conn
                .query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))
                .unwrap()
        };
        frames("TRUNCATE");
        commit();
        frames("PASSIVE")
    }

    #[test]
    fn a_claim_and_a_delivered_attempt_write_only_the_delivery_and_the_roll_up_clears_it() {
        let (_dir, db) = temp_db();
        let ids: Vec<i64> = (0..5)
            .map(|n| row(&db, "a", &format!("k{n}"), Status::Pending, 0))
            .collect();
        let queued = |db: &Db| -> i64 {
            db.conn
                .query_row(
                    "SELECT count(*) FROM deliveries INDEXED BY deliveries_queue \
                     WHERE next_attempt_at IS NOT NULL",
                    [],
                    |r| r.get(0),
                )
                .unwrap()
        };
        let unfinished = |db: &Db| -> i64 {
            db.conn
                .query_row(UNFINISHED_BY_ROUTE, [], |r| r.get(2))
                .optional()
                .unwrap()
                .unwrap_or(0)
        };
        let mut claimed = Vec::new();
        let claim = frames_written_by(&db, || {
            claimed = claim_due(&db.conn, "a", "default", 1, Order::Any, NOW).unwrap();
        });
        assert_eq!(claimed[0].event_id, ids[0]);
        assert_eq!(
            claim, 1,
            "a claim writes the delivery's leaf and nothing else"
        );
        let tried = Tried {
            attempt: claimed[0].attempt,
            started_at_ms: NOW,
            duration_ms: 3,
        };
        let record = frames_written_by(&db, || {
            record_attempt(
                &db.conn,
                ids[0],
                "default",
                &tried,
                &AfterAttempt::Delivered,
            )
            .unwrap();
        });
        assert_eq!(record, 1, "so does a delivered attempt");
        // The finished delivery is still in the index, and nothing reads it as waiting.
        assert_eq!((queued(&db), unfinished(&db)), (5, 4));
        let next: Vec<i64> = claim_due(&db.conn, "a", "default", 10, Order::Any, NOW)
            .unwrap()
            .iter()
            .map(|d| d.event_id)
            .collect();
        assert_eq!(next, ids[1..]);
        assert!(
            claim_due(&db.conn, "a", "default", 10, Order::Strict, NOW)
                .unwrap()
                .is_empty()
        );
        // The roll-up takes it out of the index; a start's recovery, what a crash left there.
        db.conn.execute(CLEAR_FINISHED, [ids[0]]).unwrap();
        assert_eq!(queued(&db), 4);
        for id in &ids[1..3] {
            record_attempt(&db.conn, *id, "default", &tried, &AfterAttempt::Delivered).unwrap();
        }
        assert_eq!(queued(&db), 4);
        recover(&db.conn, NOW).unwrap();
        assert_eq!((queued(&db), unfinished(&db)), (2, 2));
    }

    #[test]
    fn an_attempt_moves_on_only_an_event_still_delivering() {
        let (_dir, db) = temp_db();
        let id = row(&db, "a", "k", Status::Pending, 0);
        let claimed = claim_due(&db.conn, "a", "default", 1, Order::Strict, NOW).unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(
            claimed[0].body,
            Bytes::from_static(b"{}"),
            "the body comes with it"
        );
        // Meanwhile something else put the event back in the queue (a restart's recovery
        // in another process, say): the attempt's outcome is recorded, its status is not.
        db.conn
            .execute(
                "UPDATE deliveries SET status = 'pending' WHERE event_id = ?1",
                [id],
            )
            .unwrap();
        let attempt = Tried {
            attempt: 1,
            started_at_ms: NOW,
            duration_ms: 5,
        };
        record_attempt(&db.conn, id, "default", &attempt, &AfterAttempt::Delivered).unwrap();
        let event = db.event(id).unwrap().unwrap();
        assert_eq!(event.summary.status, Status::Pending);
        assert_eq!(
            event.attempts.len(),
            2,
            "the row's own and the one just recorded"
        );
        // Still delivering: it moves on.
        let id = row(&db, "b", "k", Status::Pending, 0);
        claim_due(&db.conn, "b", "default", 1, Order::Strict, NOW).unwrap();
        record_attempt(&db.conn, id, "default", &attempt, &AfterAttempt::Delivered).unwrap();
        let delivery = &db.event(id).unwrap().unwrap().routes[0];
        assert_eq!(delivery.status, Status::Delivered);
        // The event follows with the worker's roll-up.
        db.conn.execute(ROLL_UP, [id]).unwrap();
        assert_eq!(
            db.event(id).unwrap().unwrap().summary.status,
            Status::Delivered
        );
    }

    #[test]
    fn the_roll_up_finishes_an_event_only_with_its_last_delivery() {
        let (_dir, db) = temp_db();
        let id = row(&db, "a", "k", Status::Pending, 0);
        db.conn
            .execute(
                "INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at) \
                 VALUES (?1, 'audit', 'a', 'pending', 0)",
                [id],
            )
            .unwrap();
        let status = |db: &Db| db.event(id).unwrap().unwrap().summary.status;
        let finish = |route: &str, status: &str| {
            db.conn
                .execute(
                    "UPDATE deliveries SET status = ?3, finished_at = ?4 \
                     WHERE event_id = ?1 AND route = ?2",
                    params![id, route, status, NOW],
                )
                .unwrap();
        };
        finish("default", "dead");
        db.conn.execute(ROLL_UP, [id]).unwrap();
        assert_eq!(status(&db), Status::Pending, "audit is unfinished");
        finish("audit", "delivered");
        // A roll-up lost to a crash is written at the next start, by recovery.
        recover(&db.conn, NOW).unwrap();
        assert_eq!(status(&db), Status::Dead, "one route went dead");
        let finished: Option<i64> = db
            .conn
            .query_row("SELECT finished_at FROM events WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(finished, Some(NOW));
    }

    #[test]
    fn by_key_a_key_goes_one_at_a_time_and_a_keyless_delivery_alone() {
        let (_dir, db) = temp_db();
        let keyed = |key: Option<&str>| {
            let id = row(&db, "e", &format!("k{key:?}{}", NOW), Status::Pending, 0);
            db.conn
                .execute(
                    "UPDATE deliveries SET order_key = ?2, next_attempt_at = 0 WHERE event_id = ?1",
                    params![id, key],
                )
                .unwrap();
            id
        };
        let a1 = keyed(Some("A"));
        let b1 = keyed(Some("B"));
        let a2 = keyed(Some("A"));
        let none1 = keyed(None);
        let none2 = keyed(None);
        let claim = || -> Vec<i64> {
            claim_due(&db.conn, "e", "default", 10, Order::ByKey, NOW)
                .unwrap()
                .iter()
                .map(|d| d.event_id)
                .collect()
        };
        assert_eq!(
            claim(),
            [a1, b1, none1, none2],
            "A's second waits for its first"
        );
        assert!(claim().is_empty(), "all heads are being delivered");
        // A's head fails and waits for a retry: A's second still waits.
        let tried = Tried {
            attempt: 1,
            started_at_ms: NOW,
            duration_ms: 1,
        };
        let retry = AfterAttempt::RetryAt {
            at_ms: NOW + 60_000,
            error: "x".into(),
        };
        record_attempt(&db.conn, a1, "default", &tried, &retry).unwrap();
        assert!(claim().is_empty());
        assert_eq!(
            next_due(&db.conn, "e", "default", Order::ByKey).unwrap(),
            Some(NOW + 60_000)
        );
        record_attempt(&db.conn, a1, "default", &tried, &AfterAttempt::Delivered).unwrap();
        assert!(
            claim().is_empty(),
            "a1 was pending, not delivering: the replay race rule"
        );
        db.conn
            .execute(
                "UPDATE deliveries SET status = 'delivered' WHERE event_id = ?1",
                [a1],
            )
            .unwrap();
        assert_eq!(claim(), [a2], "A's head done: its second goes");
    }
}
