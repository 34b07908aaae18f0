//! `portaria store copy`: every event, payload, delivery and attempt of a SQLite database
//! into an empty PostgreSQL one, in one transaction, keeping ids, statuses, due times and
//! dedup keys, so that a user who outgrows one box moves without losing the dedup window.
//! The barrier rows (`dedup`) are made from the copied events: the newest event of each key;
//! a batch's item rows (`event_items`) come along, with their event's endpoint and time, and so
//! does what verify-by-fetching got (`fetches`).
//! A delivery that was `delivering` (a server stopped mid-attempt) arrives `pending`, due at
//! its old time: no instance holds its claim. Bodies arrive as received: a deflated SQLite
//! row (`payload.rs`) is decoded here, since PostgreSQL keeps raw bodies (TOAST compresses).

use super::{Pg, error};
use crate::store::fetches::KEEP;
use crate::store::sqlite::Sqlite;
use crate::store::{CopyReport, StoreError};

const EVENTS: &str = "SELECT e.id, e.endpoint, e.dedup_key, e.event_type, e.content_type, \
     e.payload_bytes, e.received_at, e.status, e.finished_at, e.client_cert, p.headers, p.body, \
     p.codec, e.object_id, e.signed_id, e.event_type_signed, e.origin FROM events e \
     JOIN payloads p ON p.event_id = e.id ORDER BY e.id";
const DELIVERIES: &str = "SELECT event_id, route, endpoint, status, attempts, next_attempt_at, \
     last_error, finished_at, delivered_ms, order_key FROM deliveries";
const ATTEMPTS: &str = "SELECT id, event_id, route, attempt, started_at, duration_ms, outcome, \
     error FROM attempts ORDER BY id";

const INSERT_EVENT: &str = "INSERT INTO events (id, endpoint, dedup_key, event_type, \
     content_type, payload_bytes, received_at, status, finished_at, client_cert, object_id, \
     signed_id, event_type_signed, origin) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
const INSERT_PAYLOAD: &str = "INSERT INTO payloads (event_id, headers, body) VALUES ($1, $2, $3)";
const INSERT_DELIVERY: &str = "INSERT INTO deliveries (event_id, route, endpoint, status, \
     attempts, next_attempt_at, last_error, finished_at, delivered_ms, order_key) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const INSERT_ATTEMPT: &str = "INSERT INTO attempts (id, event_id, route, attempt, started_at, \
     duration_ms, outcome, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
/// The items of batches (SQLite's version 11), given their event's endpoint and time.
const ITEMS: &str = "SELECT i.event_id, e.endpoint, i.item_key, e.received_at \
     FROM event_items i JOIN events e ON e.id = i.event_id";
const INSERT_ITEM: &str = "INSERT INTO event_items (event_id, endpoint, item_key, received_at) \
     VALUES ($1, $2, $3, $4)";
/// Verify-by-fetching's record (SQLite's version 15), put in by `fetches::KEEP`.
const FETCHES: &str = "SELECT event_id, state, detail FROM fetches";
/// The barrier: per (endpoint, key), the newest event.
const DEDUP: &str = "INSERT INTO dedup (endpoint, dedup_key, event_id, received_at) \
     SELECT DISTINCT ON (endpoint, dedup_key) endpoint, dedup_key, id, received_at \
     FROM events ORDER BY endpoint, dedup_key, received_at DESC, id DESC";
const SEQUENCES: &str = "SELECT setval('events_id_seq', coalesce((SELECT max(id) FROM events), 0) + 1, false), \
     setval(pg_get_serial_sequence('attempts', 'id'), \
       coalesce((SELECT max(id) FROM attempts), 0) + 1, false)";

fn read(e: rusqlite::Error) -> StoreError {
    StoreError::Sqlite(format!("reading the SQLite database: {e}"))
}

impl Pg {
    /// `source`'s rows, read on a read-only connection of their own, into this database.
    pub(in crate::store) async fn copy_from(
        &self,
        source: &Sqlite,
    ) -> Result<CopyReport, StoreError> {
        let source = source.reader()?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        let present: i64 = tx
            .query_one("SELECT count(*) FROM events", &[])
            .await
            .map_err(error)?
            .get(0);
        if present > 0 {
            return Err(StoreError::Postgres(format!(
                "the PostgreSQL database already has {present} events: a copy goes only into \
                 an empty one"
            )));
        }
        let mut report = CopyReport::default();
        let (event, payload) = (
            tx.prepare(INSERT_EVENT).await.map_err(error)?,
            tx.prepare(INSERT_PAYLOAD).await.map_err(error)?,
        );
        let mut stmt = source.prepare(EVENTS).map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        while let Some(r) = rows.next().map_err(read)? {
            let id: i64 = r.get(0).map_err(read)?;
            let (endpoint, key): (String, String) =
                (r.get(1).map_err(read)?, r.get(2).map_err(read)?);
            let (event_type, content_type): (Option<String>, Option<String>) =
                (r.get(3).map_err(read)?, r.get(4).map_err(read)?);
            let (bytes, received, status): (i64, i64, String) = (
                r.get(5).map_err(read)?,
                r.get(6).map_err(read)?,
                r.get(7).map_err(read)?,
            );
            let (finished, cert): (Option<i64>, Option<String>) =
                (r.get(8).map_err(read)?, r.get(9).map_err(read)?);
            let headers: Vec<u8> = r.get(10).map_err(read)?;
            let body = crate::store::sqlite::payload::body_column(r, id, 12, 11).map_err(read)?;
            let object_id: Option<String> = r.get(13).map_err(read)?;
            let (signed_id, type_signed): (Option<String>, Option<bool>) =
                (r.get(14).map_err(read)?, r.get(15).map_err(read)?);
            let origin: Option<String> = r.get(16).map_err(read)?;
            tx.execute(
                &event,
                &[
                    &id,
                    &endpoint,
                    &key,
                    &event_type,
                    &content_type,
                    &bytes,
                    &received,
                    &status,
                    &finished,
                    &cert,
                    &object_id,
                    &signed_id,
                    &type_signed,
                    &origin,
                ],
            )
            .await
            .map_err(error)?;
            tx.execute(&payload, &[&id, &headers, &body])
                .await
                .map_err(error)?;
            report.events += 1;
        }
        let delivery = tx.prepare(INSERT_DELIVERY).await.map_err(error)?;
        let mut stmt = source.prepare(DELIVERIES).map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        while let Some(r) = rows.next().map_err(read)? {
            let (id, route, endpoint): (i64, String, String) = (
                r.get(0).map_err(read)?,
                r.get(1).map_err(read)?,
                r.get(2).map_err(read)?,
            );
            let status: String = r.get(3).map_err(read)?;
            let status = if status == "delivering" {
                "pending".to_string()
            } else {
                status
            };
            let attempts: i32 = r.get(4).map_err(read)?;
            let (next, last_error): (Option<i64>, Option<String>) =
                (r.get(5).map_err(read)?, r.get(6).map_err(read)?);
            let (finished, delivered_ms, order_key): (Option<i64>, Option<i64>, Option<String>) = (
                r.get(7).map_err(read)?,
                r.get(8).map_err(read)?,
                r.get(9).map_err(read)?,
            );
            tx.execute(
                &delivery,
                &[
                    &id,
                    &route,
                    &endpoint,
                    &status,
                    &attempts,
                    &next,
                    &last_error,
                    &finished,
                    &delivered_ms,
                    &order_key,
                ],
            )
            .await
            .map_err(error)?;
            report.deliveries += 1;
        }
        let attempt = tx.prepare(INSERT_ATTEMPT).await.map_err(error)?;
        let mut stmt = source.prepare(ATTEMPTS).map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        while let Some(r) = rows.next().map_err(read)? {
            let (id, event_id, route): (i64, i64, String) = (
                r.get(0).map_err(read)?,
                r.get(1).map_err(read)?,
                r.get(2).map_err(read)?,
            );
            let (n, started, duration): (i32, i64, i64) = (
                r.get(3).map_err(read)?,
                r.get(4).map_err(read)?,
                r.get(5).map_err(read)?,
            );
            let (outcome, err): (String, Option<String>) =
                (r.get(6).map_err(read)?, r.get(7).map_err(read)?);
            tx.execute(
                &attempt,
                &[
                    &id, &event_id, &route, &n, &started, &duration, &outcome, &err,
                ],
            )
            .await
            .map_err(error)?;
            report.attempts += 1;
        }
        let item = tx.prepare(INSERT_ITEM).await.map_err(error)?;
        let mut stmt = source.prepare(ITEMS).map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        while let Some(r) = rows.next().map_err(read)? {
            let (id, endpoint, key, received): (i64, String, String, i64) = (
                r.get(0).map_err(read)?,
                r.get(1).map_err(read)?,
                r.get(2).map_err(read)?,
                r.get(3).map_err(read)?,
            );
            tx.execute(&item, &[&id, &endpoint, &key, &received])
                .await
                .map_err(error)?;
        }
        let fetched = tx.prepare(KEEP).await.map_err(error)?;
        let mut stmt = source.prepare(FETCHES).map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        while let Some(r) = rows.next().map_err(read)? {
            let (id, state, detail): (i64, String, String) = (
                r.get(0).map_err(read)?,
                r.get(1).map_err(read)?,
                r.get(2).map_err(read)?,
            );
            tx.execute(&fetched, &[&id, &state, &detail])
                .await
                .map_err(error)?;
        }
        tx.execute(DEDUP, &[]).await.map_err(error)?;
        tx.query_one(SEQUENCES, &[]).await.map_err(error)?;
        // Dead before the move: told (or not) by the SQLite server's alerts, not again here.
        tx.execute(
            "UPDATE deliveries SET alerted = attempts WHERE status = 'dead'",
            &[],
        )
        .await
        .map_err(error)?;
        tx.commit().await.map_err(error)?;
        Ok(report)
    }
}
