//! Rows for the store's unit tests: a temp database and events as they would be after their
//! life so far, and [`Db`], a test's own connection with the engine's queries on it.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Sqlite, events, retention, schema};
use crate::store::Store;
use crate::store::handle::Engine;
use crate::store::{
    Cutoffs, EventDetail, NewDelivery, NewEvent, PrunableGroup, Restored, Status, StoreError,
    dedup_hash,
};

/// A test's own connection to a database file, and the engine's queries run on it as the
/// store runs them (each in a transaction where the store's job would be one).
pub(super) struct Db {
    pub(super) conn: Connection,
}

impl Db {
    /// Opens (creating if needed) the file as a command would: an older schema is refused.
    pub(super) fn open(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open_with(path, schema::Upgrade::Refused)?,
        })
    }

    pub(super) fn open_read_only(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open_read_only(path)?,
        })
    }

    pub(super) fn event(&self, id: i64) -> Result<Option<EventDetail>, StoreError> {
        Ok(events::event(&self.conn, id)?)
    }

    pub(super) fn list(
        &self,
        filter: &crate::store::ListFilter,
    ) -> Result<Vec<crate::store::EventSummary>, StoreError> {
        Ok(events::list(&self.conn, filter)?)
    }

    pub(super) fn client_cert(&self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT client_cert FROM events WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?
            .flatten())
    }

    pub(super) fn prunable_counts(&self, c: Cutoffs) -> Result<Vec<PrunableGroup>, StoreError> {
        Ok(retention::prunable_counts(&self.conn, &c)?)
    }

    /// One event's deliveries (to `route` only) pending again: true if it had such.
    pub(super) fn replay(
        &mut self,
        id: i64,
        route: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let only = crate::store::events::Replay {
            id: Some(id),
            filter: crate::store::ListFilter {
                route: route.map(str::to_string),
                ..Default::default()
            },
        };
        Ok(self.write(|c| events::replay(c, &only, now_ms))? == 1)
    }

    /// `events` restored, each to the routes `routes` gives it.
    pub(super) fn restore(
        &mut self,
        events: &[EventDetail],
        routes: &dyn Fn(&EventDetail) -> Vec<NewDelivery>,
        now_ms: i64,
    ) -> Result<Restored, StoreError> {
        let plans: Vec<Vec<NewDelivery>> = events.iter().map(routes).collect();
        self.write(|c| retention::restore(c, events, &plans, now_ms))
    }

    pub(super) fn backup_to(
        &self,
        file: &Path,
        replace: bool,
    ) -> Result<crate::store::Copied, crate::store::BackupError> {
        super::backup::backup_to(&self.conn, file, replace)
    }

    fn write<T>(
        &mut self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }
}

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
        origin: crate::store::Origin::Webhook,
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
        signed_id: None,
        event_type_signed: None,
        routes: Vec::new(),
        items: Vec::new(),
    }
}

/// A Pagar.me-like `charge.paid` body of about 1 KiB, as gateways send them.
pub(super) fn charge_paid() -> Vec<u8> {
    let mut body = String::from(
        r#"{"id":"hook_RGm8wYkQdA3pXnB2","account":{"id":"acc_Qm2x8RkL0aWvT5jN","name":"Loja Exemplo"},"type":"charge.paid","created_at":"2026-11-03T14:22:51.118Z","data":{"id":"ch_9Kd2LmQx7RtV4bNw","code":"X7K2M9QW1P","amount":12990,"paid_amount":12990,"status":"paid","currency":"BRL","payment_method":"credit_card","paid_at":"2026-11-03T14:22:50Z","created_at":"2026-11-03T14:22:48Z","updated_at":"2026-11-03T14:22:50Z","customer":{"id":"cus_3Jx8QwL2mN5vR7tK","name":"Maria Souza","email":"maria.souza88@example.com","document":"12345678909","type":"individual","delinquent":false,"phones":{}},"order":{"id":"or_Lw3Qx9Rm2Kd7Vn5B","code":"X7K2M9QW1P","amount":12990,"currency":"BRL","closed":true,"items":[{"id":"oi_8Xn2Qw5Lm3Rk7Vd9","description":"Camiseta basica","amount":6495,"quantity":2,"status":"active"}],"status":"paid"},"last_transaction":{"id":"tran_5Rk8Lw2Qx9Mn3Vd7","transaction_type":"credit_card","gateway_id":"4d1f2a9b","amount":12990,"status":"captured","success":true,"installments":3,"acquirer_name":"simulator","acquirer_tid":"482915736402","acquirer_nsu":"48291","acquirer_auth_code":"203841","operation_type":"auth_and_capture","card":{"id":"card_2Lm9Qx5Rk8Wn3Vd7","last_four_digits":"4444","brand":"Mastercard","holder_name":"MARIA SOUZA","exp_month":8,"exp_year":2030,"status":"active","type":"credit"}}}}"#,
    );
    body.push('\n');
    body.into_bytes()
}

/// The SQLite engine's ways to the connection, on the handle: for the tests, which run
/// queries of their own.
impl Store {
    fn sqlite_engine(&self) -> Result<&Sqlite, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => Ok(db),
            Engine::Postgres(_) => Err(StoreError::Postgres("a SQLite test's store".into())),
        }
    }

    pub(super) async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.sqlite_engine()?.run(f).await
    }

    pub(super) async fn run_bookkeeping<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.sqlite_engine()?.run_bookkeeping(f).await
    }

    pub(super) async fn run_solo<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.sqlite_engine()?.run_solo(f).await
    }

    pub(super) async fn run_intake<T, F>(&self, f: F, deadline: Duration) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.sqlite_engine()?.run_intake(f, deadline).await
    }
}
