//! The PostgreSQL schema and its migrations. Versions are counted on their own (not SQLite's
//! `user_version`): `meta.schema_version`. Every migration runs in one transaction that first
//! takes a transaction-level advisory lock, so instances starting together do not race: the
//! second waits, then finds the schema current. A database newer than this binary is refused,
//! as on SQLite.
//!
//! The dedup barrier is the table `dedup`: one row per (endpoint, dedup key), its PRIMARY KEY
//! the unique constraint an insert takes (see `intake.rs` for the window).

use tokio_postgres::Client;

use super::error;
use crate::store::StoreError;

/// The schema this binary writes.
pub(super) const VERSION: i64 = 7;
/// The advisory lock migrations hold (an arbitrary constant: "portaria" in ASCII).
const MIGRATION_LOCK: i64 = 0x706f_7274_6172_6961;

/// Version 1: events, payloads, deliveries (one row per event and route, with the claim
/// columns a multi-instance worker needs), attempts, the dedup barrier, meta.
const V1: &str = "
CREATE SEQUENCE events_id_seq;
CREATE TABLE events (
    id BIGINT PRIMARY KEY DEFAULT nextval('events_id_seq'),
    endpoint TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    event_type TEXT,
    content_type TEXT,
    payload_bytes BIGINT NOT NULL,
    received_at BIGINT NOT NULL,
    status TEXT NOT NULL,
    client_cert TEXT,
    finished_at BIGINT
);
ALTER SEQUENCE events_id_seq OWNED BY events.id;
CREATE INDEX events_endpoint ON events (endpoint, received_at);
CREATE INDEX events_finished ON events (received_at) WHERE status IN ('delivered', 'stored', 'dead');
CREATE TABLE payloads (
    event_id BIGINT PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    headers BYTEA NOT NULL,
    body BYTEA NOT NULL
);
CREATE TABLE deliveries (
    event_id BIGINT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    route TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    order_key TEXT,
    claimed_by TEXT,
    lease_until BIGINT,
    last_error TEXT,
    finished_at BIGINT,
    delivered_ms BIGINT,
    PRIMARY KEY (event_id, route)
);
CREATE INDEX deliveries_queue ON deliveries (endpoint, route, event_id)
    WHERE status IN ('pending', 'delivering');
CREATE INDEX deliveries_dead ON deliveries (endpoint) WHERE status = 'dead';
CREATE TABLE attempts (
    id BIGSERIAL PRIMARY KEY,
    event_id BIGINT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    route TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started_at BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT
);
CREATE INDEX attempts_event ON attempts (event_id);
CREATE TABLE dedup (
    endpoint TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    event_id BIGINT NOT NULL REFERENCES events (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (endpoint, dedup_key)
);
CREATE INDEX dedup_event ON dedup (event_id);
";

// ---- Version 1, the worker's part (kept apart from the tables above) ----

/// Version 1, what the forwarding worker and the alerts task add: the index an `order_by`
/// lane finds its keys' heads through; `alerted`, the `attempts` count at which a dead
/// delivery's death was announced (`alerts.rs`), with the index of those not announced; and
/// the trigger that wakes every instance's worker (`listen.rs`) when a
/// finished delivery is set back to pending (a replay, from any instance or the CLI). The
/// trigger's `WHEN` is evaluated without calling the function, so claims and attempt records
/// pay nothing for it.
const V1_WORKER: &str = "
CREATE INDEX deliveries_order ON deliveries (endpoint, route, order_key, event_id)
    WHERE status IN ('pending', 'delivering') AND order_key IS NOT NULL;
CREATE FUNCTION portaria_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('portaria_deliveries', '');
    RETURN NULL;
END
$$;
ALTER TABLE deliveries ADD COLUMN alerted INTEGER;
CREATE INDEX deliveries_unannounced ON deliveries (finished_at, event_id)
    WHERE status = 'dead' AND alerted IS DISTINCT FROM attempts;
CREATE TRIGGER deliveries_replayed AFTER UPDATE OF status ON deliveries FOR EACH ROW
    WHEN (NEW.status = 'pending' AND OLD.status IN ('delivered', 'dead'))
    EXECUTE FUNCTION portaria_wake();
";

/// Version 1, the read side's part (the status page and `portaria events`;
/// `postgres/dashboard.rs`, `postgres/counters.rs`), kept apart from the tables above:
/// `events.object_id` (what the status page's search also looks in) and `hourly` (the status
/// page's counters per endpoint and clock hour, which every instance adds to).
const V1_READ_SIDE: &str = "
ALTER TABLE events ADD COLUMN object_id TEXT;
CREATE TABLE hourly (
    endpoint TEXT NOT NULL,
    hour BIGINT NOT NULL,
    received BIGINT NOT NULL DEFAULT 0,
    duplicate BIGINT NOT NULL DEFAULT 0,
    bad_signature BIGINT NOT NULL DEFAULT 0,
    stale_timestamp BIGINT NOT NULL DEFAULT 0,
    too_large BIGINT NOT NULL DEFAULT 0,
    bad_request BIGINT NOT NULL DEFAULT 0,
    storage_error BIGINT NOT NULL DEFAULT 0,
    delivered BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint, hour)
);
";

/// Version 2: what an event's targets are told to trust, as SQLite's version 9 keeps it
/// (`store/schema.rs`): `signed_id`, the id the provider signed apart from the body, and
/// `event_type_signed`, whether the event type came from signed bytes (NULL without a type,
/// and for events from before). Nullable columns without a default: adding them rewrites no
/// row.
const V2: &str = "
ALTER TABLE events ADD COLUMN signed_id TEXT;
ALTER TABLE events ADD COLUMN event_type_signed BOOLEAN;
";

/// Version 3: paused routes, as SQLite's version 10 keeps them (`store/sqlite/schema.rs`).
const V3: &str = "
CREATE TABLE route_pauses (
    endpoint  TEXT   NOT NULL,
    route     TEXT   NOT NULL,
    paused_at BIGINT NOT NULL,
    until     BIGINT,
    reason    TEXT,
    PRIMARY KEY (endpoint, route)
);
";

/// Version 4: the items of a batch signed item by item (Adyen), as SQLite's version 11 keeps
/// them (`store/intake.rs`): one row per item key but the event's own, with the event's
/// endpoint and time, so the check of an item is one index lookup here and one on `dedup`.
/// The primary key leads with `event_id`: pruning's cascade finds an event's items by it.
const V4: &str = "
CREATE TABLE event_items (
    event_id    BIGINT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint    TEXT   NOT NULL,
    item_key    TEXT   NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (event_id, item_key)
);
CREATE INDEX event_items_key ON event_items (endpoint, item_key, received_at);
";

/// Version 5: the rejected requests kept, as SQLite's version 12 keeps them
/// (`store/quarantine.rs`): the newest `quarantine_keep` per endpoint, for `quarantine_for`.
const V5: &str = "
CREATE TABLE rejected (
    id           BIGSERIAL PRIMARY KEY,
    endpoint     TEXT    NOT NULL,
    received_at  BIGINT  NOT NULL,
    reason       TEXT    NOT NULL,
    detail       TEXT    NOT NULL,
    content_type TEXT,
    headers      BYTEA   NOT NULL,
    body         BYTEA   NOT NULL,
    truncated    BOOLEAN NOT NULL
);
CREATE INDEX rejected_endpoint ON rejected (endpoint, id);
";

/// Version 6: where an event came from (`store::Origin`), as SQLite's version 14 keeps it:
/// NULL for a webhook, `reconcile` for one a reconcile run took from the gateway's API.
const V6: &str = "ALTER TABLE events ADD COLUMN origin TEXT;";

/// Brings the database to [`VERSION`], or refuses one newer than this binary.
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(error)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        .await
        .map_err(error)?;
    let found: Option<String> = tx
        .query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .await
        .map_err(error)?
        .map(|row| row.get(0));
    let found: i64 = match found.map(|v| v.parse()) {
        None => 0,
        Some(Ok(v)) => v,
        Some(Err(_)) => {
            return Err(StoreError::Postgres(
                "meta.schema_version is not a number".into(),
            ));
        }
    };
    if found > VERSION {
        return Err(StoreError::Postgres(format!(
            "the database has schema version {found}, newer than this binary's {VERSION}: \
             upgrade portaria"
        )));
    }
    if found == VERSION {
        return tx.commit().await.map_err(error);
    }
    if found < 1 {
        tx.batch_execute(V1).await.map_err(error)?;
        tx.batch_execute(V1_WORKER).await.map_err(error)?;
        tx.batch_execute(V1_READ_SIDE).await.map_err(error)?;
    }
    if found > 0 {
        tracing::info!(
            from = found,
            to = VERSION,
            "upgrading the PostgreSQL schema"
        );
    }
    // Each later version's step, from `found` up; a new database takes them all.
    if found < 2 {
        tx.batch_execute(V2).await.map_err(error)?;
    }
    if found < 3 {
        tx.batch_execute(V3).await.map_err(error)?;
    }
    if found < 4 {
        tx.batch_execute(V4).await.map_err(error)?;
    }
    if found < 5 {
        tx.batch_execute(V5).await.map_err(error)?;
    }
    if found < 6 {
        tx.batch_execute(V6).await.map_err(error)?;
    }
    if found < 7 {
        // What verify-by-fetching got from the gateway (`fetches.rs`).
        tx.batch_execute(&super::fetches::v7())
            .await
            .map_err(error)?;
    }
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', $1) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&VERSION.to_string()],
    )
    .await
    .map_err(error)?;
    tx.commit().await.map_err(error)
}
