//! What the alerts task asks of the database, on PostgreSQL, with several instances on it:
//! only one of them announces a given dead delivery.
//!
//! SQLite's cursor on `attempts.id` does not carry over: ids from a sequence are handed out
//! in insert order, not commit order, so an attempt committed late below the cursor would be
//! skipped. Instead each dead delivery says on its row whether its death was announced
//! (`deliveries.alerted`: the `attempts` count it was announced at, cleared by a replay, so a
//! replayed delivery that dies again is announced again), read through the partial index
//! `deliveries_unannounced`. And one instance at a time looks: the one whose listening
//! connection holds the alerts lock (`listen.rs`, a session-level advisory lock: it passes to
//! another instance when that connection ends). Its dead events are marked announced in the
//! same transaction that saves the alerts task's state (its pending summaries with them): a
//! crash before that save leaves them unmarked, and they are found again, by this instance
//! after its restart or by the next holder of the lock (at least once, as on SQLite).
//!
//! The cursor the task passes is kept as it is (it means nothing here).
//!
//! The event types (`new_type`) do use a cursor on `events.id`, one that trails: it passes
//! only events received over [`TYPES_SETTLE_MS`] ago, since an insert of a lower id may still
//! commit meanwhile; the events after it are read again at the next look (the task knows
//! the types it has seen). The unrouted events are a range of `events_endpoint`.

use std::sync::Mutex;

use super::{Pg, error};
use crate::store::{
    ALERT_KEY_PREFIX, DeadBatch, DeadEvent, StoreError, TYPES_SETTLE_MS, TypeSeen, TypesBatch,
    Unrouted,
};

/// Dead deliveries whose death was not announced yet, in the order they went dead.
const UNANNOUNCED: &str = "SELECT event_id, endpoint, route, attempts FROM deliveries \
     WHERE status = 'dead' AND alerted IS DISTINCT FROM attempts \
     ORDER BY finished_at, event_id LIMIT 1000";
const MARK: &str = "UPDATE deliveries AS d SET alerted = n.attempts \
     FROM unnest($1::bigint[], $2::text[], $3::int[]) AS n (event_id, route, attempts) \
     WHERE d.event_id = n.event_id AND d.route = n.route";
const SETTLED: &str =
    "SELECT coalesce(max(id), $1) FROM events WHERE id > $1 AND received_at <= $2";
const TYPES_AFTER: &str = "SELECT endpoint, event_type, min(id), min(received_at) FROM events \
     WHERE id > $1 AND event_type IS NOT NULL GROUP BY endpoint, event_type ORDER BY 3";
const UNROUTED: &str = "SELECT count(*), min(id), max(id) FROM events \
     WHERE endpoint = $1 AND received_at > $2 AND received_at <= $3 AND status = 'stored'";
const HAS_EVENTS: &str = "SELECT EXISTS (SELECT 1 FROM events WHERE endpoint = $1)";
const ALERT_STATE: &str =
    "SELECT key, value FROM meta WHERE key >= 'alerts:' AND key < 'alerts;' ORDER BY key";
const SAVE: &str = "INSERT INTO meta (key, value) VALUES ($1, $2) \
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";

/// The dead deliveries handed to the alerts task and not yet marked announced: (event,
/// route, attempts).
#[derive(Default)]
pub(super) struct Noted(Mutex<Vec<(i64, String, i32)>>);

impl Noted {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(i64, String, i32)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Pg {
    /// The dead deliveries not yet announced, if this instance holds the alerts lock (none
    /// otherwise: another instance announces them), without those already handed over.
    pub(in crate::store) async fn dead_after(&self, cursor: i64) -> Result<DeadBatch, StoreError> {
        let nothing = DeadBatch {
            events: Vec::new(),
            cursor,
        };
        if !self.wakeups.leads_alerts() {
            return Ok(nothing);
        }
        let client = self.client().await?;
        let rows = client
            .query(
                &client.prepare_cached(UNANNOUNCED).await.map_err(error)?,
                &[],
            )
            .await
            .map_err(error)?;
        let mut noted = self.noted.lock();
        let mut events = Vec::new();
        for r in rows {
            let (id, endpoint, route, attempts): (i64, String, String, i32) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            if noted
                .iter()
                .any(|(e, r, a)| *e == id && *r == route && *a == attempts)
            {
                continue;
            }
            noted.push((id, route.clone(), attempts));
            events.push(DeadEvent {
                id,
                endpoint,
                route: Some(route),
            });
        }
        Ok(DeadBatch { events, cursor })
    }

    /// The event types stored after `cursor`, and the cursor moved past the events received
    /// over [`TYPES_SETTLE_MS`] ago. Types only for the instance holding the alerts lock; the
    /// others' cursor moves along all the same, so that one taking the lock over reads on from
    /// about where the last holder was, not from its own start.
    pub(in crate::store) async fn event_types_after(
        &self,
        asked: Option<i64>,
    ) -> Result<TypesBatch, StoreError> {
        let cursor = asked.unwrap_or(0);
        let leads = self.wakeups.leads_alerts();
        let settled_at = crate::time::now_ms() - TYPES_SETTLE_MS;
        let client = self.client().await?;
        // The cursor first: an event committed after this read is above it, or read below.
        let settled: i64 = client
            .query_one(SETTLED, &[&cursor, &settled_at])
            .await
            .map_err(error)?
            .get(0);
        if asked.is_none() || !leads {
            return Ok(TypesBatch {
                types: Vec::new(),
                cursor: settled,
            });
        }
        let stmt = client.prepare_cached(TYPES_AFTER).await.map_err(error)?;
        let rows = client.query(&stmt, &[&cursor]).await.map_err(error)?;
        let types = rows
            .iter()
            .map(|r| TypeSeen {
                endpoint: r.get(0),
                event_type: r.get(1),
                first_id: r.get(2),
                first_ms: r.get(3),
            })
            .collect();
        Ok(TypesBatch {
            types,
            cursor: settled,
        })
    }

    /// The events of `endpoint` received in (`after_ms`, `until_ms`] still stored only, if
    /// this instance holds the alerts lock (none otherwise).
    pub(in crate::store) async fn unrouted_between(
        &self,
        endpoint: String,
        after_ms: i64,
        until_ms: i64,
    ) -> Result<Unrouted, StoreError> {
        if !self.wakeups.leads_alerts() {
            return Ok(Unrouted::default());
        }
        let client = self.client().await?;
        let stmt = client.prepare_cached(UNROUTED).await.map_err(error)?;
        let row = client
            .query_one(&stmt, &[&endpoint, &after_ms, &until_ms])
            .await
            .map_err(error)?;
        Ok(Unrouted {
            count: row.get::<_, i64>(0).unsigned_abs(),
            first_id: row.get(1),
            last_id: row.get(2),
        })
    }

    pub(in crate::store) async fn endpoints_with_events(
        &self,
        names: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(HAS_EVENTS).await.map_err(error)?;
        let mut out = Vec::new();
        for name in names {
            let has: bool = client
                .query_one(&stmt, &[&name])
                .await
                .map_err(error)?
                .get(0);
            if has {
                out.push(name);
            }
        }
        Ok(out)
    }

    pub(in crate::store) async fn alert_state(&self) -> Result<Vec<(String, String)>, StoreError> {
        let client = self.client().await?;
        let rows = client.query(ALERT_STATE, &[]).await.map_err(error)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Saves the task's rows and marks the dead deliveries handed to it announced, in one
    /// transaction.
    pub(in crate::store) async fn save_alert_state(
        &self,
        rows: Vec<(String, String)>,
    ) -> Result<(), StoreError> {
        let marked: Vec<(i64, String, i32)> = self.noted.lock().clone();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        let save = tx.prepare_cached(SAVE).await.map_err(error)?;
        for (key, value) in &rows {
            // Only the task's own keys: the readiness probe's row and the like are not its.
            if key.starts_with(ALERT_KEY_PREFIX) {
                tx.execute(&save, &[key, value]).await.map_err(error)?;
            }
        }
        if !marked.is_empty() {
            let ids: Vec<i64> = marked.iter().map(|m| m.0).collect();
            let routes: Vec<&str> = marked.iter().map(|m| m.1.as_str()).collect();
            let attempts: Vec<i32> = marked.iter().map(|m| m.2).collect();
            tx.execute(MARK, &[&ids, &routes, &attempts])
                .await
                .map_err(error)?;
        }
        tx.commit().await.map_err(error)?;
        self.noted.lock().retain(|m| !marked.contains(m));
        Ok(())
    }
}
