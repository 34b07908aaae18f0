//! The forwarding worker's queue on PostgreSQL, shared by every instance on the database.
//!
//! A claim marks deliveries `delivering` with this instance's id (`claimed_by`) and a lease
//! (`lease_until`), in one statement that takes the rows `FOR UPDATE SKIP LOCKED`: two
//! instances never claim the same delivery. [`lease_keeper`] renews this instance's leases
//! while its attempts run; a delivery whose lease expired (its instance died) is due again
//! for any instance, so there is no recovery pass at start. A strict lane (`concurrency = 1`)
//! takes only its head, `FOR UPDATE` without SKIP LOCKED: an instance waits for another's
//! claim of the head to commit, then sees it delivering and takes nothing, so arrival order
//! holds across instances. An `order_by` lane takes only its keys' heads: a delivery whose key
//! has an older unfinished delivery (pending, or delivering in any instance's hands) waits,
//! so one key goes one at a time across all instances, and a keyless delivery is its own lane.
//! A delivery taken over after its lease expired gets its cut-off attempt recorded as
//! `interrupted` in the claim's own transaction, as SQLite's recovery does at start; if the
//! cut-off attempt ends delivered after all, its record moves nothing but is kept in the
//! history, as on SQLite.
//! Leases are compared with each instance's clock: keep the instances' clocks in sync (NTP).

use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::Pool;

use super::{Pg, error};
use crate::store::{
    AfterAttempt, ClaimNext, Claimed, Delivery, LaneClaim, Order, Origin, Status, StoreError, Tried,
};

const PAUSED: &str = "SELECT EXISTS (SELECT 1 FROM route_pauses WHERE endpoint = $1 \
                      AND route = $2 AND (until IS NULL OR until > $3))";

/// How long a claim holds without renewal (unless a test asks: `fault::pg_lease`); it is
/// renewed every quarter of it.
const LEASE: Duration = Duration::from_secs(60);

/// The lease in force, in milliseconds.
pub(super) fn lease_ms() -> i64 {
    crate::fault::pg_lease().unwrap_or(LEASE).as_millis() as i64
}

const UNFINISHED_BY_ROUTE: &str = "SELECT endpoint, route, count(*) FROM deliveries \
     WHERE status IN ('pending', 'delivering') GROUP BY endpoint, route";
/// Due deliveries of a lane: pending and due, or delivering under an expired lease (taken
/// over: its cut-off attempt is recorded as `interrupted` by the same statement, so every
/// forward beyond the first is explained by an attempt row). `$which` narrows the candidates
/// (`order_by`: only a key's head). The claimed come back soonest first, then by arrival, as
/// `due` picked them: an `UPDATE ... RETURNING` gives its rows in the join's order, which the
/// planner chooses (the store suite saw arrival order under load), so they are ordered again.
macro_rules! claim {
    ($($which:tt)*) => {
        concat!(
            "WITH due AS (SELECT d.event_id, d.status AS was, d.attempts AS tried \
             FROM deliveries AS d \
             WHERE d.endpoint = $1 AND d.route = $2 AND d.status IN ('pending', 'delivering') \
             AND ((d.status = 'pending' AND d.next_attempt_at <= $3) \
               OR (d.status = 'delivering' AND d.lease_until < $3)) ",
            $($which)*,
            " ORDER BY d.next_attempt_at, d.event_id LIMIT $4 FOR UPDATE SKIP LOCKED), \
             cut AS (INSERT INTO attempts (event_id, route, attempt, started_at, duration_ms, \
               outcome, error) SELECT event_id, $2, tried, $3, 0, 'interrupted', \
               'the instance delivering it stopped renewing its lease' \
               FROM due WHERE was = 'delivering'), \
             claimed AS (UPDATE deliveries AS d SET status = 'delivering', \
               attempts = d.attempts + 1, claimed_by = $5, lease_until = $3 + $6 \
               FROM due WHERE d.event_id = due.event_id AND d.route = $2 \
               RETURNING d.event_id, d.attempts, d.next_attempt_at) \
             SELECT event_id, attempts FROM claimed ORDER BY next_attempt_at, event_id"
        )
    };
}
const CLAIM_ANY: &str = claim!("");
/// A delivery with no older unfinished one of its ordering key, in any instance's hands
/// (none: a lane of its own). Read through `deliveries_order`.
macro_rules! key_head {
    () => {
        "AND (d.order_key IS NULL OR NOT EXISTS (SELECT 1 FROM deliveries AS o \
         WHERE o.endpoint = $1 AND o.route = $2 AND o.status IN ('pending', 'delivering') \
         AND o.order_key IS NOT NULL AND o.order_key = d.order_key \
         AND o.event_id < d.event_id))"
    };
}
/// `order_by`: the due deliveries that are their key's head.
const CLAIM_BY_KEY: &str = claim!(key_head!());
/// The head of a strict lane, locked (waiting for another instance's claim of it).
const HEAD: &str = "SELECT event_id, status, next_attempt_at, lease_until FROM deliveries \
     WHERE endpoint = $1 AND route = $2 AND status IN ('pending', 'delivering') \
     ORDER BY event_id LIMIT 1 FOR UPDATE";
const CLAIM_ONE: &str = "UPDATE deliveries SET status = 'delivering', attempts = attempts + 1, \
     claimed_by = $3, lease_until = $4 WHERE event_id = $1 AND route = $2 RETURNING attempts";
/// A strict lane's head taken over after its lease expired: the cut-off attempt ($3).
const TAKEN_OVER: &str = "INSERT INTO attempts (event_id, route, attempt, started_at, \
     duration_ms, outcome, error) VALUES ($1, $2, $3, $4, 0, 'interrupted', \
     'the instance delivering it stopped renewing its lease')";
/// When a lane next has something to take: a pending delivery's due time, or a lease's end.
const NEXT_DUE: &str = "SELECT min(CASE WHEN status = 'pending' THEN next_attempt_at \
     ELSE lease_until END) FROM deliveries \
     WHERE endpoint = $1 AND route = $2 AND status IN ('pending', 'delivering')";
/// A strict lane: when its head can be taken (its due time, or its lease's end), whatever
/// is due behind it; NULL for an empty lane.
const NEXT_DUE_STRICT: &str = "SELECT (SELECT CASE WHEN status = 'pending' THEN next_attempt_at \
     ELSE lease_until END FROM deliveries \
     WHERE endpoint = $1 AND route = $2 AND status IN ('pending', 'delivering') \
     ORDER BY event_id LIMIT 1)";
/// `order_by`: when the soonest key head of a lane can be taken.
const NEXT_DUE_BY_KEY: &str = concat!(
    "SELECT min(CASE WHEN d.status = 'pending' THEN d.next_attempt_at \
     ELSE d.lease_until END) FROM deliveries AS d \
     WHERE d.endpoint = $1 AND d.route = $2 AND d.status IN ('pending', 'delivering') ",
    key_head!()
);
const EVENTS: &str = "SELECT e.id, e.dedup_key, e.event_type, e.content_type, e.received_at, \
     p.headers, p.body, e.signed_id, e.event_type_signed, e.origin FROM events e \
     JOIN payloads p ON p.event_id = e.id WHERE e.id = ANY($1)";
const INSERT_ATTEMPT: &str = "INSERT INTO attempts (event_id, route, attempt, started_at, \
     duration_ms, outcome, error) VALUES ($1, $2, $3, $4, $5, $6, $7)";
/// Only this instance's claim moves on: one taken over after its lease expired does not (its
/// attempt, if delivered, gets a row of its own instead).
const MOVE_ON: &str = "UPDATE deliveries SET status = $3, next_attempt_at = $4, \
     finished_at = $5, last_error = $7, delivered_ms = $8, claimed_by = NULL, \
     lease_until = NULL \
     WHERE event_id = $1 AND route = $2 AND status = 'delivering' AND claimed_by = $6";
/// An event's status from its deliveries once the last one finished (`WHERE` completed by
/// [`ROLL_UP`] and [`ROLL_UP_ALL`]).
macro_rules! roll_up {
    ($which:literal) => {
        concat!(
            "UPDATE events SET \
             status = CASE WHEN EXISTS (SELECT 1 FROM deliveries d \
               WHERE d.event_id = events.id AND d.status = 'dead') THEN 'dead' \
               ELSE 'delivered' END, \
             finished_at = (SELECT max(d.finished_at) FROM deliveries d \
               WHERE d.event_id = events.id) \
             WHERE ",
            $which,
            " AND status = 'pending' \
             AND EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id) \
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id \
               AND d.status IN ('pending', 'delivering'))"
        )
    };
}
const ROLL_UP: &str = roll_up!("id = ANY($1)");
/// At start: the roll-ups an instance's stop cut off.
const ROLL_UP_ALL: &str = roll_up!("true");
const RENEW: &str = "UPDATE deliveries SET lease_until = $2 \
     WHERE claimed_by = $1 AND status = 'delivering'";

impl Pg {
    pub(in crate::store) async fn unfinished_by_route(
        &self,
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(UNFINISHED_BY_ROUTE, &[])
            .await
            .map_err(error)?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    pub(in crate::store) async fn claim_lanes(
        &self,
        lanes: Vec<LaneClaim>,
        now_ms: i64,
    ) -> Result<Vec<Claimed>, StoreError> {
        let mut client = self.client().await?;
        let mut out = Vec::with_capacity(lanes.len());
        for l in lanes {
            let deliveries = self
                .claim(&mut client, &l.endpoint, &l.route, l.limit, l.order, now_ms)
                .await?;
            let next_due = if deliveries.len() < l.limit {
                let sql = match l.order {
                    Order::ByKey => NEXT_DUE_BY_KEY,
                    Order::Strict => NEXT_DUE_STRICT,
                    Order::Any => NEXT_DUE,
                };
                client
                    .query_one(
                        &client.prepare_cached(sql).await.map_err(error)?,
                        &[&l.endpoint, &l.route],
                    )
                    .await
                    .map_err(error)?
                    .get(0)
            } else {
                None
            };
            out.push(Claimed {
                deliveries,
                next_due,
            });
        }
        Ok(out)
    }

    pub(in crate::store) async fn record_attempt(
        &self,
        event_id: i64,
        route: String,
        attempt: Tried,
        after: AfterAttempt,
        then: Option<ClaimNext>,
    ) -> Result<Option<Delivery>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        if after != AfterAttempt::Delivered {
            tx.execute(
                &tx.prepare_cached(INSERT_ATTEMPT).await.map_err(error)?,
                &[
                    &event_id,
                    &route,
                    &(attempt.attempt as i32),
                    &attempt.started_at_ms,
                    &attempt.duration_ms,
                    &"failed",
                    &after.error(),
                ],
            )
            .await
            .map_err(error)?;
        }
        let (status, next) = match &after {
            AfterAttempt::Delivered => (Status::Delivered, None),
            AfterAttempt::RetryAt { at_ms, .. } => (Status::Pending, Some(*at_ms)),
            AfterAttempt::Dead { .. } => (Status::Dead, None),
        };
        let finished =
            (status != Status::Pending).then_some(attempt.started_at_ms + attempt.duration_ms);
        let moved = tx
            .execute(
                &tx.prepare_cached(MOVE_ON).await.map_err(error)?,
                &[
                    &event_id,
                    &route,
                    &status.as_str(),
                    &next,
                    &finished,
                    &self.instance,
                    &after.error(),
                    &(after == AfterAttempt::Delivered).then_some(attempt.duration_ms),
                ],
            )
            .await
            .map_err(error)?;
        if moved == 0 && after == AfterAttempt::Delivered {
            // The claim is no longer ours (taken over after the lease, or a replay won the
            // race): the row is not ours to finish, but the attempt happened and the history
            // keeps it, as on SQLite (`store/queue.rs`).
            tx.execute(
                &tx.prepare_cached(INSERT_ATTEMPT).await.map_err(error)?,
                &[
                    &event_id,
                    &route,
                    &(attempt.attempt as i32),
                    &attempt.started_at_ms,
                    &attempt.duration_ms,
                    &"delivered",
                    &None::<String>,
                ],
            )
            .await
            .map_err(error)?;
        }
        tx.commit().await.map_err(error)?;
        let Some(next) = then else { return Ok(None) };
        let mut claimed = self
            .claim(
                &mut client,
                &next.endpoint,
                &next.route,
                1,
                next.order,
                next.now_ms,
            )
            .await?;
        Ok(claimed.pop())
    }

    /// At start: no delivery to recover (a claim's lease runs out instead, and another
    /// instance, or this one, takes it over: `claim_lanes`), only the roll-ups a stop cut off.
    pub(in crate::store) async fn recover(&self, _now_ms: i64) -> Result<usize, StoreError> {
        let client = self.client().await?;
        client.execute(ROLL_UP_ALL, &[]).await.map_err(error)?;
        Ok(0)
    }

    pub(in crate::store) async fn roll_up(&self, event_ids: Vec<i64>) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(ROLL_UP, &[&event_ids])
            .await
            .map_err(error)?;
        Ok(())
    }

    /// Changes whenever anything was written to the database (by any instance): the worker's
    /// slow check for deliveries another instance accepted.
    pub(in crate::store) async fn data_version(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])
            .await
            .map_err(error)?;
        Ok(row.get(0))
    }

    /// Claims up to `limit` due deliveries of one lane, in one transaction, with their events.
    async fn claim(
        &self,
        client: &mut deadpool_postgres::Object,
        endpoint: &str,
        route: &str,
        limit: usize,
        order: Order,
        now_ms: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        let lease_until = now_ms + self.lease_ms;
        let tx = client.transaction().await.map_err(error)?;
        // A paused route gives nothing, checked in the claim's own transaction: the worker
        // skips paused lanes too, but its view is a round old, and a 410 pauses a route
        // mid-round (`store/pauses.rs`).
        let paused: bool = tx
            .query_one(
                &tx.prepare_cached(PAUSED).await.map_err(error)?,
                &[&endpoint, &route, &now_ms],
            )
            .await
            .map_err(error)?
            .get(0);
        if paused {
            return Ok(Vec::new());
        }
        let claimed: Vec<(i64, i32)> = match order {
            Order::Any | Order::ByKey => {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let sql = match order {
                    Order::ByKey => CLAIM_BY_KEY,
                    _ => CLAIM_ANY,
                };
                tx.query(
                    &tx.prepare_cached(sql).await.map_err(error)?,
                    &[
                        &endpoint,
                        &route,
                        &now_ms,
                        &limit,
                        &self.instance,
                        &self.lease_ms,
                    ],
                )
                .await
                .map_err(error)?
                .into_iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
            }
            Order::Strict => {
                let head = tx
                    .query_opt(
                        &tx.prepare_cached(HEAD).await.map_err(error)?,
                        &[&endpoint, &route],
                    )
                    .await
                    .map_err(error)?;
                let takeable = head.and_then(|r| {
                    let (id, status): (i64, String) = (r.get(0), r.get(1));
                    let due: Option<i64> = r.get(2);
                    let lease: Option<i64> = r.get(3);
                    let pending = status == "pending";
                    let free = match pending {
                        true => due.unwrap_or(0) <= now_ms,
                        false => lease.unwrap_or(0) < now_ms,
                    };
                    free.then_some((id, !pending))
                });
                match takeable {
                    None => Vec::new(),
                    Some((id, taken_over)) => {
                        let attempts: i32 = tx
                            .query_one(
                                &tx.prepare_cached(CLAIM_ONE).await.map_err(error)?,
                                &[&id, &route, &self.instance, &lease_until],
                            )
                            .await
                            .map_err(error)?
                            .get(0);
                        if taken_over {
                            tx.execute(
                                &tx.prepare_cached(TAKEN_OVER).await.map_err(error)?,
                                &[&id, &route, &(attempts - 1), &now_ms],
                            )
                            .await
                            .map_err(error)?;
                        }
                        vec![(id, attempts)]
                    }
                }
            }
        };
        let ids: Vec<i64> = claimed.iter().map(|(id, _)| *id).collect();
        let rows = if ids.is_empty() {
            Vec::new()
        } else {
            tx.query(&tx.prepare_cached(EVENTS).await.map_err(error)?, &[&ids])
                .await
                .map_err(error)?
        };
        tx.commit().await.map_err(error)?;
        let mut out = Vec::with_capacity(claimed.len());
        for (id, attempt) in claimed {
            let Some(r) = rows.iter().find(|r| r.get::<_, i64>(0) == id) else {
                continue;
            };
            out.push(Delivery {
                event_id: id,
                endpoint: endpoint.to_string(),
                route: route.to_string(),
                dedup_key: r.get(1),
                event_type: r.get(2),
                event_type_signed: r.get::<_, Option<bool>>(8).unwrap_or(false),
                signed_id: r.get(7),
                origin: Origin::from_column(r.get::<_, Option<&str>>(9)),
                content_type: r.get(3),
                received_at_ms: r.get(4),
                attempt: u32::try_from(attempt).unwrap_or(0),
                headers: Bytes::from(r.get::<_, Vec<u8>>(5)),
                body: Bytes::from(r.get::<_, Vec<u8>>(6)),
                fetched: None,
            });
        }
        Ok(out)
    }
}

/// Renews this instance's leases every quarter lease until the pool closes. A failed round
/// (the database away) is retried at the next; a lease that expires meanwhile lets another
/// instance take the delivery over, and this one's record of it is then not applied.
pub(super) async fn lease_keeper(pool: Pool, instance: String, lease_ms: i64) {
    let every = Duration::from_millis((lease_ms / 4).max(25) as u64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        let Ok(client) = pool.get().await else {
            continue;
        };
        let until = crate::time::now_ms() + lease_ms;
        if let Err(e) = client.execute(RENEW, &[&instance, &until]).await {
            tracing::warn!(error = %error(e), "cannot renew the delivery leases");
        }
    }
}
