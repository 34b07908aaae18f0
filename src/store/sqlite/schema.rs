//! The database file: opening it with the settings every connection needs, and creating or
//! upgrading the schema (tracked in `PRAGMA user_version`).

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};

use super::StoreError;

/// How long a write waits for another process's lock (an operator's `events replay`) before
/// it gives up; below the ~5 s in which a gateway must hear 503 rather than nothing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) const SCHEMA_VERSION: i64 = 15;

/// The schema of a new file.
///
/// `events.dedup_hash` is the first 8 bytes of SHA-256 over the endpoint and the dedup key
/// ([`super::dedup_hash`]): the dedup index holds that integer instead of the key itself, so an
/// index leaf holds ~60 entries instead of ~10, and the random leaf each new event dirties is
/// found in the cache and written less often. The barrier is the one insert statement that
/// checks the index and compares the full key (two keys may share a hash; they are still two
/// events).
///
/// Headers and body live in `payloads`, written once and never rewritten: a delivery changes
/// the event's status twice, and in a row of its own that is a ~150-byte cell on one page,
/// where the same update to a row holding a 1 KiB body rewrote its overflow chain too.
const SCHEMA: &str = "
CREATE TABLE events (
    id              INTEGER PRIMARY KEY,
    endpoint        TEXT    NOT NULL,
    dedup_key       TEXT    NOT NULL,
    dedup_hash      INTEGER NOT NULL,   -- SHA-256(endpoint, 0, dedup_key), first 8 bytes
    event_type      TEXT,
    content_type    TEXT,
    payload_bytes   INTEGER NOT NULL,   -- length of headers + body, for pruning reports
    received_at     INTEGER NOT NULL,   -- unix milliseconds
    status          TEXT    NOT NULL    -- the roll-up of its deliveries (below)
        CONSTRAINT events_status CHECK (status = 'pending' OR status = 'delivering'
            OR status = 'delivered' OR status = 'dead' OR status = 'stored'),
    finished_at     INTEGER,            -- when its last delivery finished
    client_cert     TEXT                -- the verified TLS client certificate's subject
);
CREATE TABLE payloads (
    event_id        INTEGER PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    headers         BLOB    NOT NULL,   -- `name: value\\r\\n` each, as received
    body            BLOB    NOT NULL    -- the raw bytes, exactly as received
);
CREATE INDEX events_dedup ON events (dedup_hash);
CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY,
    event_id    INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,       -- delivered, failed, interrupted
    error       TEXT,
    route       TEXT    NOT NULL DEFAULT 'default'
);
CREATE INDEX attempts_event ON attempts (event_id);
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;
";

/// The delivery state, one row per (event, route) (version 4). `events.status` is their
/// roll-up: `stored` when no route took the event, `pending` while any delivery is unfinished,
/// then `delivered` when every one is, else `dead`. The dead index is partial, so `/metrics`
/// stays small however many finished rows there are; the queue indexes are version 6's
/// ([`V5_TO_V6`]). A delivered attempt has no `attempts` row: the delivery row itself records
/// it (`attempts`, `finished_at`, `delivered_ms`), one row less to write per delivered event;
/// `attempts` holds the failed and interrupted ones.
const DELIVERIES: &str = "
CREATE TABLE deliveries (
    event_id        INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    route           TEXT    NOT NULL,
    endpoint        TEXT    NOT NULL,
    status          TEXT    NOT NULL
        CONSTRAINT deliveries_status CHECK (status = 'pending' OR status = 'delivering'
            OR status = 'delivered' OR status = 'dead'),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,            -- unix milliseconds, while pending
    last_error      TEXT,
    finished_at     INTEGER,            -- when it was delivered or went dead
    delivered_ms    INTEGER,            -- the delivered attempt's duration: its only record
    order_key       TEXT,               -- the route's `order_by` value, if it has one
    PRIMARY KEY (event_id, route)
) WITHOUT ROWID;
CREATE INDEX deliveries_dead ON deliveries (endpoint, route) WHERE status = 'dead';
";

/// Version 4 moved delivery state to `deliveries`, one row per (event, route): an event's
/// state becomes the delivery of the one-route shorthand's route, `default` (a delivering one
/// stays delivering, for [`super::Store::recover`]). `events` keeps its roll-up status and
/// gains `client_cert`; each attempt names its route.
const V3_TO_V4: &str = "
INSERT INTO deliveries (event_id, route, endpoint, status, attempts, next_attempt_at,
                        last_error, finished_at)
    SELECT id, 'default', endpoint, status, attempts, next_attempt_at, last_error, finished_at
    FROM events WHERE status != 'stored';
UPDATE events SET status = 'pending' WHERE status = 'delivering';
DROP INDEX events_queue;
DROP INDEX events_dead;
ALTER TABLE events DROP COLUMN attempts;
ALTER TABLE events DROP COLUMN next_attempt_at;
ALTER TABLE events DROP COLUMN last_error;
ALTER TABLE events ADD COLUMN client_cert TEXT;
ALTER TABLE attempts ADD COLUMN route TEXT NOT NULL DEFAULT 'default';
";

/// Version 2 added what `/readyz` and `/metrics` need: `meta` holds facts about the file
/// itself (the readiness probe rewrites one row); `events_dead` keeps the dead count an
/// index-only read.
const V1_TO_V2: &str = "
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;
CREATE INDEX events_dead ON events (endpoint) WHERE status = 'dead';
";

/// Version 3 replaced `UNIQUE (endpoint, dedup_key)` with the narrow `events_dedup` index and
/// moved headers and body to `payloads`. A table constraint cannot be dropped in SQLite, so the
/// table is rebuilt (SQLite's documented procedure, with foreign keys off so `attempts` keeps
/// its rows) and the hashes are filled in by [`fill_dedup_hashes`].
const V2_TO_V3: &str = "
CREATE TABLE events_v3 (
    id              INTEGER PRIMARY KEY,
    endpoint        TEXT    NOT NULL,
    dedup_key       TEXT    NOT NULL,
    dedup_hash      INTEGER NOT NULL,
    event_type      TEXT,
    content_type    TEXT,
    payload_bytes   INTEGER NOT NULL,
    received_at     INTEGER NOT NULL,
    status          TEXT    NOT NULL
        CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    last_error      TEXT,
    finished_at     INTEGER
);
CREATE TABLE payloads (
    event_id        INTEGER PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    headers         BLOB    NOT NULL,
    body            BLOB    NOT NULL
);
INSERT INTO events_v3 (id, endpoint, dedup_key, dedup_hash, event_type, content_type,
                       payload_bytes, received_at, status, attempts, next_attempt_at, last_error,
                       finished_at)
    SELECT id, endpoint, dedup_key, 0, event_type, content_type,
           length(headers) + length(body), received_at, status, attempts, next_attempt_at,
           last_error, finished_at
    FROM events;
INSERT INTO payloads (event_id, headers, body) SELECT id, headers, body FROM events;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE INDEX events_queue ON events (endpoint, status, next_attempt_at)
    WHERE status IN ('pending', 'delivering');
CREATE INDEX events_dead ON events (endpoint) WHERE status = 'dead';
";

/// Version 5 added what the status page reads (`crate::store::dashboard`): `hourly`, small
/// counters per endpoint and clock hour (received, duplicates, rejected by reason, delivery
/// attempts), which the writer adds to with the batches it commits anyway (`counters.rs`);
/// and `events_endpoint`, for the counts of an endpoint's recent events, its latest event and
/// its events listed newest first; `events.object_id`, the object the event is about (the
/// payment, the order: `data.id` and the like, as `describe` finds it), for the status page's
/// search. A new file gets the same statements after [`SCHEMA`].
const V4_TO_V5: &str = "
CREATE TABLE hourly (
    endpoint        TEXT    NOT NULL,
    hour            INTEGER NOT NULL,   -- unix milliseconds of the hour's start
    received        INTEGER NOT NULL DEFAULT 0,
    duplicate       INTEGER NOT NULL DEFAULT 0,
    bad_signature   INTEGER NOT NULL DEFAULT 0,
    stale_timestamp INTEGER NOT NULL DEFAULT 0,
    too_large       INTEGER NOT NULL DEFAULT 0,
    bad_request     INTEGER NOT NULL DEFAULT 0,
    storage_error   INTEGER NOT NULL DEFAULT 0,
    delivered       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint, hour)
) WITHOUT ROWID;
CREATE INDEX events_endpoint ON events (endpoint, received_at);
ALTER TABLE events ADD COLUMN object_id TEXT;
";

/// Version 6 took the queue indexes off the happy path: a delivery's entry in `deliveries_queue`
/// (and, with `order_by`, `deliveries_order`) is there while `next_attempt_at` is set, and
/// nothing in either index (key or condition) is a column that claiming or recording a
/// delivered attempt changes, so those commits rewrite one page, the delivery's leaf, where
/// version 5's rewrote its queue leaf too. A finished delivery keeps its entry until the
/// worker's batched roll-up clears `next_attempt_at` (a few adjacent leaves for a batch of
/// events; [`super::queue`]); until then the queue's queries skip it by its `status`, read
/// from the row. The queue index is keyed by endpoint and due time, not by route: an event's
/// deliveries to its routes (due at the same time, the received time) are neighbours, so an
/// intake batch appends to one leaf per endpoint rather than one per route, and a lane's
/// queries filter the endpoint's entries by route. A new file gets the same statements after
/// [`DELIVERIES`]. Unfinished rows without a due time (none should exist) become due at once,
/// so none falls out of the queue.
const V5_TO_V6: &str = "
DROP INDEX IF EXISTS deliveries_queue;
DROP INDEX IF EXISTS deliveries_order;
UPDATE deliveries SET next_attempt_at = 0
    WHERE status IN ('pending', 'delivering') AND next_attempt_at IS NULL;
UPDATE deliveries SET next_attempt_at = NULL
    WHERE status IN ('delivered', 'dead') AND next_attempt_at IS NOT NULL;
CREATE INDEX deliveries_queue ON deliveries (endpoint, next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
CREATE INDEX deliveries_order ON deliveries (endpoint, route, order_key)
    WHERE next_attempt_at IS NOT NULL AND order_key IS NOT NULL;
";

/// Version 7: `payloads.codec`, how `body` is stored (`crate::store::payload`): 0 as received,
/// 1 deflated. Rows from before keep 0 and are read as they are: nothing is rewritten, so the
/// upgrade is one change to the table's definition. A new file gets it too, after [`SCHEMA`].
/// (Version 6 is `deliveries`'; this step depends on nothing of it, so it applies after
/// whichever of 5 or 6 a file is at.)
const V6_TO_V7: &str = "
ALTER TABLE payloads ADD COLUMN codec INTEGER NOT NULL DEFAULT 0;
";

/// One CHECK of version 8, as versions 1-7 spelled it and as [`SCHEMA`] and [`DELIVERIES`]
/// spell it now.
struct Respelled {
    table: &'static str,
    before: &'static str,
    after: &'static str,
}

/// Version 8: the status CHECKs of `events` and `deliveries` without `IN`. SQLite evaluates
/// `status IN (a list of more than two constants)` by building a temporary b-tree of the list
/// once per statement run: some 10,700 instructions for every insert, claim and record that
/// writes a status (bench/PROFILE.md). The same values as a chain of `=` ... `OR` are a few
/// comparisons. The set is the same, and so is NULL (which only `NOT NULL` refuses, as
/// before), so no row can break the new constraint: the upgrade edits the tables' text in
/// `sqlite_schema` ([`respell_checks`]) and rewrites no row. The constraints are named, so a
/// later change can drop one with `ALTER TABLE ... DROP CONSTRAINT`.
const V7_TO_V8: [Respelled; 2] = [
    Respelled {
        table: "events",
        before: "CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored'))",
        after: "CONSTRAINT events_status CHECK (status = 'pending' OR status = 'delivering'
            OR status = 'delivered' OR status = 'dead' OR status = 'stored')",
    },
    Respelled {
        table: "deliveries",
        before: "CHECK (status IN ('pending', 'delivering', 'delivered', 'dead'))",
        after: "CONSTRAINT deliveries_status CHECK (status = 'pending' OR status = 'delivering'
            OR status = 'delivered' OR status = 'dead')",
    },
];

/// Version 9: what an event's targets are told to trust, which the forward worker hands on.
/// `signed_id`, the id the provider's signature covers apart from the body (Mercado Pago's
/// query `data.id`; NULL for a scheme that signs the whole body, or signs no id);
/// `event_type_signed`, 1 when the event type came from bytes the signature covers, 0 when
/// from an unsigned header or body (GitHub's `X-GitHub-Event`, Mercado Pago's body), NULL when
/// the event has no type or was stored before this version (targets hear 0: not known to be
/// signed). Kept per event rather than derived from the endpoint's preset at delivery: a
/// reload may change the preset and an archive may be replayed under another config, while
/// the fact is about how this one request was verified. NULL, 0 and 1 take no bytes in a row
/// beyond one header byte each (SQLite's serial types 0, 8 and 9). Rows from before keep
/// NULL: the upgrade rewrites none. A new file gets the same statements after [`SCHEMA`].
const V8_TO_V9: &str = "
ALTER TABLE events ADD COLUMN signed_id TEXT;
ALTER TABLE events ADD COLUMN event_type_signed INTEGER;
";

/// Opens the file (creating it and its directory if needed) with WAL, `synchronous=FULL`
/// and a busy timeout, and brings the schema up to date: for tests (the store opens with
/// [`open_with`]).
#[cfg(test)]
pub fn open(path: &Path) -> Result<Connection, StoreError> {
    open_with(path, Upgrade::Allowed)
}

/// Whether opening may upgrade an older schema. Only the server does: an upgrade rebuilds the
/// events table, and an older server still running on the file would fail every write after
/// it. A command (`events replay`, `prune`, `archive replay`) refuses an older file instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upgrade {
    Allowed,
    Refused,
}

/// [`open`], saying whether an older schema may be upgraded.
pub fn open_with(path: &Path, upgrade: Upgrade) -> Result<Connection, StoreError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Sqlite(format!("{what} {}: {e}", path.display()))
    };
    create_private(path).map_err(|e| fail("cannot create", &e))?;
    let conn = Connection::open(path).map_err(|e| fail("cannot open", &e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| fail("cannot configure", &e))?;
    // page_size and auto_vacuum must be chosen before the first table exists; on an existing
    // file they are no-ops. 1 KiB pages: each event dirties a page of the (random-keyed) dedup
    // index on every commit, and a smaller page is a smaller write (see ARCHITECTURE.md, Disk).
    // journal_size_limit: once a checkpoint lets the WAL start over, trim it back to 32 MiB.
    conn.execute_batch(
        "PRAGMA page_size = 1024;
         PRAGMA auto_vacuum = INCREMENTAL;
         PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA journal_size_limit = 33554432;
         PRAGMA foreign_keys = ON;",
    )
    .map_err(|e| fail("cannot configure", &e))?;
    migrate(&conn, upgrade).map_err(|e| fail("cannot create the schema in", &e))?;
    Ok(conn)
}

/// Creates the database file, empty, mode 0600 whatever the umask (it holds every payload),
/// and its directory 0700, unless they exist (an existing file keeps its mode). SQLite would
/// create it 0644 less the umask; its `-wal` and `-shm` it creates with the database file's
/// mode, so they are 0600 too.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        // Exactly 0600: a umask may also have taken the owner's bits.
        Ok(file) => file.set_permissions(PermissionsExt::from_mode(0o600)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens an existing file read-only, for looking only. Refuses a file whose schema this build
/// does not know, rather than misreading it.
pub fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Sqlite(format!("{what} {}: {e}", path.display()))
    };
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| fail("cannot open", &e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| fail("cannot configure", &e))?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| fail("cannot read", &e))?;
    if version != SCHEMA_VERSION {
        return Err(fail(
            "unexpected schema in",
            &format!(
                "version {version}, this portaria reads {SCHEMA_VERSION}; let the server open it first"
            ),
        ));
    }
    Ok(conn)
}

fn migrate(conn: &Connection, upgrade: Upgrade) -> rusqlite::Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        // A newer portaria made this file: reading it as ours could misread or damage it.
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISMATCH),
            Some(format!(
                "schema version {version} is newer than this portaria knows ({SCHEMA_VERSION}); \
                 run the portaria that made it, or a newer one"
            )),
        ));
    }
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    if version >= 1 && upgrade == Upgrade::Refused {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISMATCH),
            Some(format!(
                "schema version {version} is older than this portaria's ({SCHEMA_VERSION}); \
                 `portaria serve` upgrades it when it starts: stop the running server, start \
                 this version's once, then run this command again"
            )),
        ));
    }
    let started = std::time::Instant::now();
    if version >= 6 {
        // Versions 7 to 11 change definitions; 12 reads `deliveries` once, for an index.
        tracing::info!(
            from = version,
            to = SCHEMA_VERSION,
            "upgrading the database schema"
        );
    } else if version >= 1 {
        // An upgrade rewrites the events table: say so, since it holds up the start.
        let events: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        tracing::info!(
            from = version,
            to = SCHEMA_VERSION,
            events,
            "upgrading the database schema (rewrites the events table; a large file takes a while)"
        );
    }
    // The v3 rebuild drops the old table; with foreign keys on, that would delete every
    // attempt row. The pragma is a no-op inside a transaction, so it is set around it.
    conn.execute_batch("PRAGMA foreign_keys = OFF")?;
    let migrated = migrate_in_one_transaction(conn);
    conn.execute_batch("PRAGMA foreign_keys = ON")?;
    if version >= 1 && migrated.is_ok() {
        let ms = started.elapsed().as_millis() as u64;
        tracing::info!(to = SCHEMA_VERSION, ms, "database schema upgraded");
    }
    migrated
}

fn migrate_in_one_transaction(conn: &Connection) -> rusqlite::Result<()> {
    // IMMEDIATE: take the write lock first, so two processes starting at once serialise here.
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    // Another process may have created the schema while this one waited for the lock.
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version < 1 {
        tx.execute_batch(SCHEMA)?;
        tx.execute_batch(DELIVERIES)?;
    } else {
        if version < 2 {
            tx.execute_batch(V1_TO_V2)?;
        }
        if version < 3 {
            tx.execute_batch(V2_TO_V3)?;
            fill_dedup_hashes(&tx, HASH_CHUNK)?;
            tx.execute_batch("CREATE INDEX events_dedup ON events (dedup_hash)")?;
            let broken: Option<String> = tx
                .query_row("PRAGMA foreign_key_check", [], |r| r.get(0))
                .optional()?;
            if let Some(table) = broken {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
                    Some(format!(
                        "the upgrade to schema 3 broke a foreign key in {table}"
                    )),
                ));
            }
        }
        if version < 4 {
            tx.execute_batch(DELIVERIES)?;
            tx.execute_batch(V3_TO_V4)?;
        }
    }
    // A new file too, from here on: 5 the status page's counters, 6 the queue indexes, 7 the
    // body's codec, 9, 10, 11, 12: `V8_TO_V9`, paused routes, `items.rs`, `queue.rs`'s head.
    if version < 5 {
        tx.execute_batch(V4_TO_V5)?;
    }
    if version < 6 {
        tx.execute_batch(V5_TO_V6)?;
    }
    if version < 7 {
        tx.execute_batch(V6_TO_V7)?;
    }
    if (1..8).contains(&version) {
        // A new file has them already (SCHEMA, DELIVERIES), as has a file whose `deliveries`
        // came with this build's DELIVERIES (an upgrade from before version 4).
        respell_checks(&tx)?;
    }
    if version < 9 {
        tx.execute_batch(V8_TO_V9)?;
    }
    if version < 10 {
        // A new file too: paused routes.
        tx.execute_batch(super::pauses::V9_TO_V10)?;
    }
    if version < 11 {
        tx.execute_batch(super::items::V10_TO_V11)?;
    }
    if version < 12 {
        tx.execute_batch(super::queue::V11_TO_V12)?;
    }
    if version < 13 {
        // A new file too: the rejected requests kept (`quarantine.rs`).
        tx.execute_batch(super::quarantine::V12_TO_V13)?;
    }
    if version < 14 {
        // A new file too: where an event came from (`reconcile.rs`).
        tx.execute_batch(super::reconcile::V13_TO_V14)?;
    }
    if version < 15 {
        // A new file too: what verify-by-fetching got from the gateway (`fetches.rs`).
        super::fetches::v14_to_v15(&tx)?;
    }
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
    tx.commit()
}

/// Version 8's step ([`V7_TO_V8`]): each table's CHECK replaced in its `CREATE TABLE` text,
/// by SQLite's documented procedure for a change that leaves the stored rows valid
/// (<https://www.sqlite.org/lang_altertable.html>, "Making Other Kinds Of Table Schema
/// Changes"): in the upgrade's transaction, `writable_schema` on, the text updated, the
/// schema cookie (`schema_version`) moved on so every connection to the file parses it again,
/// `writable_schema` off with the schema reloaded (`RESET`), which parses the new text here
/// before anything commits. Defensive mode would refuse the edit, so it is off for the step,
/// then as it was. A table whose text has neither spelling (not a file portaria made) keeps
/// its own constraint, with a warning: the step is for speed, not for what a row may hold.
fn respell_checks(conn: &Connection) -> rusqlite::Result<()> {
    let mut edits = Vec::new();
    for check in &V7_TO_V8 {
        let sql: String = conn.query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [check.table],
            |r| r.get(0),
        )?;
        if sql.matches(check.before).count() == 1 {
            edits.push((check.table, sql.replacen(check.before, check.after, 1)));
        } else if !sql.contains(check.after) {
            tracing::warn!(
                table = check.table,
                "the table's status CHECK is not one portaria wrote; it is kept as it is"
            );
        }
    }
    if edits.is_empty() {
        return Ok(());
    }
    use rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE;
    let defensive = conn.db_config(SQLITE_DBCONFIG_DEFENSIVE)?;
    if defensive {
        conn.set_db_config(SQLITE_DBCONFIG_DEFENSIVE, false)?;
    }
    let edited = edit_schema(conn, &edits);
    if defensive {
        conn.set_db_config(SQLITE_DBCONFIG_DEFENSIVE, true)?;
    }
    edited
}

/// Replaces each (table, text) in `sqlite_schema` (the caller's transaction), then makes
/// SQLite parse the schema again.
fn edit_schema(conn: &Connection, edits: &[(&str, String)]) -> rusqlite::Result<()> {
    let cookie: i32 = conn.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
    conn.execute_batch("PRAGMA writable_schema = ON")?;
    let written = edits.iter().try_for_each(|(table, sql)| {
        conn.execute(
            "UPDATE sqlite_schema SET sql = ?2 WHERE type = 'table' AND name = ?1",
            rusqlite::params![table, sql],
        )
        .map(drop)
    });
    let bumped = written.and_then(|()| {
        conn.execute_batch(&format!(
            "PRAGMA schema_version = {}",
            cookie.wrapping_add(1)
        ))
    });
    // Off whatever happened, with the schema read again from the (edited) table.
    conn.execute_batch("PRAGMA writable_schema = RESET")?;
    bumped?;
    // The new text parses: a statement on each table is prepared against it.
    for (table, _) in edits {
        conn.prepare(&format!("SELECT status FROM {table} LIMIT 0"))?;
    }
    Ok(())
}

/// Computes `dedup_hash` for every row (rows of a file from before version 3).
/// Rows read per round by [`fill_dedup_hashes`].
const HASH_CHUNK: i64 = 10_000;

fn fill_dedup_hashes(conn: &Connection, chunk: i64) -> rusqlite::Result<()> {
    // In id order, a chunk at a time: a large file's keys never sit in memory all at once.
    let mut next = conn
        .prepare("SELECT id, endpoint, dedup_key FROM events WHERE id > ?1 ORDER BY id LIMIT ?2")?;
    let mut set = conn.prepare("UPDATE events SET dedup_hash = ?2 WHERE id = ?1")?;
    let mut after = i64::MIN;
    loop {
        let rows: Vec<(i64, String, String)> = next
            .query_map(rusqlite::params![after, chunk], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let Some(&(last, _, _)) = rows.last() else {
            return Ok(());
        };
        for (id, endpoint, key) in rows {
            set.execute(rusqlite::params![
                id,
                crate::store::dedup_hash(&endpoint, &key)
            ])?;
        }
        after = last;
    }
}

#[cfg(test)]
mod tests {
    use super::super::Db;
    use super::super::fixtures::{new_event, temp_db};
    use super::super::intake::insert_event;
    use super::*;
    use crate::store::{Inserted, Status};

    /// The SQLite compiled into the binary: `.cargo/config.toml` turns off what portaria never
    /// uses (full-text search, R*Trees, dbstat, SOUNDEX, extension loading).
    #[test]
    fn sqlite_is_built_without_what_portaria_does_not_use() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for off in [
            "ENABLE_FTS3",
            "ENABLE_FTS5",
            "ENABLE_RTREE",
            "ENABLE_DBSTAT_VTAB",
            "SOUNDEX",
            "ENABLE_LOAD_EXTENSION",
        ] {
            assert!(
                !options.iter().any(|o| o.starts_with(off)),
                "{off} in {options:?}"
            );
        }
        for omitted in [
            "OMIT_LOAD_EXTENSION",
            "OMIT_JSON",
            "OMIT_DEPRECATED",
            "OMIT_SHARED_CACHE",
            "OMIT_UTF16",
            "OMIT_DATETIME_FUNCS",
            "OMIT_INCRBLOB",
            // (`OMIT_TRACE` is not among what `compile_options` lists.)
            "OMIT_INTROSPECTION_PRAGMAS",
        ] {
            assert!(
                options.iter().any(|o| o == omitted),
                "{omitted}: {options:?}"
            );
        }
        assert!(
            !options.iter().any(|o| o == "ENABLE_COLUMN_METADATA"),
            "{options:?}"
        );
        // What portaria does use is still there.
        assert!(
            options.iter().any(|o| o.starts_with("THREADSAFE=1")),
            "{options:?}"
        );
    }

    /// A file of schema `from`: a command refuses it, the server upgrades it to this version,
    /// whose status writes build no temporary b-tree (schema 8).
    fn upgraded(path: &Path, from: i64) -> Db {
        let refused = Db::open(path).err().expect("refused").to_string();
        let older = format!("schema version {from} is older");
        assert!(refused.contains(&older), "{refused}");
        let db = Db {
            conn: open(path).unwrap(),
        };
        super::status_checks::assert_no_temporary_b_tree(&db.conn);
        let version: i64 = db
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        db
    }

    #[test]
    fn every_row_gets_its_hash_whatever_the_chunk_size() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, endpoint TEXT, dedup_key TEXT, \
             dedup_hash INTEGER);",
        )
        .unwrap();
        for n in 0..5 {
            conn.execute(
                "INSERT INTO events (id, endpoint, dedup_key, dedup_hash) VALUES (?1, 'e', ?2, 0)",
                rusqlite::params![n * 3 - 4, format!("k{n}")],
            )
            .unwrap();
        }
        fill_dedup_hashes(&conn, 2).unwrap();
        let wrong: i64 = conn
            .query_row(
                "SELECT count(*) FROM events WHERE dedup_hash = 0",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(wrong, 0);
        let k3: i64 = conn
            .query_row(
                "SELECT dedup_hash FROM events WHERE dedup_key = 'k3'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(k3, crate::store::dedup_hash("e", "k3"));
    }

    #[test]
    fn a_file_from_a_newer_portaria_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
            .unwrap();
        let err = Db::open(&path).err().expect("refused").to_string();
        assert!(err.contains("schema version 99 is newer"), "{err}");
        let tables: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing created in it");
    }

    /// The whole schema of version 2, as released before the narrow dedup index.
    const SCHEMA_V2: &str = "
        CREATE TABLE events (
            id INTEGER PRIMARY KEY, endpoint TEXT NOT NULL, dedup_key TEXT NOT NULL,
            event_type TEXT, content_type TEXT, headers BLOB NOT NULL, body BLOB NOT NULL,
            received_at INTEGER NOT NULL,
            status TEXT NOT NULL
                CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored')),
            attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER, last_error TEXT,
            finished_at INTEGER, UNIQUE (endpoint, dedup_key));
        CREATE INDEX events_queue ON events (endpoint, status, next_attempt_at)
            WHERE status IN ('pending', 'delivering');
        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            event_id INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL, started_at INTEGER NOT NULL,
            duration_ms INTEGER NOT NULL, outcome TEXT NOT NULL, error TEXT);
        CREATE INDEX attempts_event ON attempts (event_id);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        CREATE INDEX events_dead ON events (endpoint) WHERE status = 'dead';
        INSERT INTO events (id, endpoint, dedup_key, headers, body, received_at, status,
                            attempts, next_attempt_at)
            VALUES (7, 'a', 'k', x'', x'7b7d', 5, 'pending', 1, 9),
                   (8, 'b', 'k', x'', x'', 6, 'dead', 1, NULL);
        INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome)
            VALUES (7, 1, 6, 3, 'failed'), (8, 1, 7, 3, 'failed');
        PRAGMA user_version = 2;
    ";

    #[test]
    fn a_version_2_file_is_upgraded_in_place_keeping_events_attempts_and_the_barrier() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(SCHEMA_V2)
            .unwrap();
        let db = upgraded(&path, 2);
        // Version 4's column is there, empty for the old rows.
        assert_eq!(db.client_cert(7).unwrap(), None);
        // Version 5's counters and index came with it.
        let v4: i64 = db
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name IN ('hourly', 'events_endpoint')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v4, 2);
        let old = db.event(7).unwrap().unwrap();
        assert_eq!(
            (old.summary.status, old.body),
            (Status::Pending, b"{}".to_vec())
        );
        assert_eq!(old.attempts.len(), 1, "attempts survive the table rebuild");
        assert_eq!(db.event(8).unwrap().unwrap().attempts.len(), 1);
        // The old rows are behind the new barrier.
        assert_eq!(
            insert_event(&db.conn, &new_event("a", "k")).unwrap(),
            Inserted::Duplicate(7)
        );
        assert_eq!(
            insert_event(&db.conn, &new_event("b", "k")).unwrap(),
            Inserted::Duplicate(8)
        );
        let indexes: Vec<String> = db
            .conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        // Since version 4 the queue and dead indexes are on `deliveries`; version 5 added
        // `events_endpoint` for the status page.
        assert_eq!(indexes, ["events_dedup", "events_endpoint"]);
        // The upgrade's own copy of the table definitions must not drift from a new file's.
        let (_fresh_dir, fresh) = temp_db();
        let shape = |conn: &Connection, pragma: &str| -> Vec<String> {
            conn.prepare(pragma)
                .unwrap()
                .query_map([], |r| {
                    let cells: Vec<String> = (0..r.as_ref().column_count())
                        .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                        .collect();
                    Ok(cells.join(" "))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for pragma in [
            "PRAGMA table_info(events)",
            "PRAGMA table_info(payloads)",
            "PRAGMA table_info(attempts)",
            "PRAGMA table_info(deliveries)",
            "PRAGMA foreign_key_list(deliveries)",
            "PRAGMA foreign_key_list(payloads)",
            "PRAGMA foreign_key_list(attempts)",
            "PRAGMA index_info(events_dedup)",
        ] {
            assert_eq!(
                shape(&db.conn, pragma),
                shape(&fresh.conn, pragma),
                "{pragma}"
            );
        }
        let fk: bool = db
            .conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert!(fk, "foreign keys are back on after the upgrade");
        // A new event still cascades its attempts away on delete.
        db.conn
            .execute("DELETE FROM events WHERE id = 7", [])
            .unwrap();
        let left: i64 = db
            .conn
            .query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 1);
    }

    /// The whole schema of version 3, as released before routes.
    const SCHEMA_V3: &str = "
        CREATE TABLE events (
            id INTEGER PRIMARY KEY, endpoint TEXT NOT NULL, dedup_key TEXT NOT NULL,
            dedup_hash INTEGER NOT NULL, event_type TEXT, content_type TEXT,
            payload_bytes INTEGER NOT NULL, received_at INTEGER NOT NULL,
            status TEXT NOT NULL
                CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored')),
            attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER, last_error TEXT,
            finished_at INTEGER);
        CREATE TABLE payloads (
            event_id INTEGER PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
            headers BLOB NOT NULL, body BLOB NOT NULL);
        CREATE INDEX events_dedup ON events (dedup_hash);
        CREATE INDEX events_queue ON events (endpoint, status, next_attempt_at)
            WHERE status IN ('pending', 'delivering');
        CREATE INDEX events_dead ON events (endpoint) WHERE status = 'dead';
        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            event_id INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL, started_at INTEGER NOT NULL,
            duration_ms INTEGER NOT NULL, outcome TEXT NOT NULL, error TEXT);
        CREATE INDEX attempts_event ON attempts (event_id);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        PRAGMA user_version = 3;
    ";

    #[test]
    fn a_version_3_file_moves_each_events_delivery_state_to_the_default_route() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let v3 = Connection::open(&path).unwrap();
        v3.execute_batch(SCHEMA_V3).unwrap();
        // One event in every state, with the columns each state has.
        let states = [
            (1, "pending", 2, Some(9_000), Some("exit status 1"), None),
            (2, "delivering", 3, None, Some("exit status 2"), None),
            (3, "delivered", 1, None, None, Some(5_000)),
            (4, "dead", 6, None, Some("timed out"), Some(6_000)),
            (5, "stored", 0, None, None, None),
        ];
        for (id, status, attempts, next, error, finished) in states {
            let key = format!("k{id}");
            v3.execute(
                "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status, attempts, next_attempt_at, last_error, finished_at) \
                 VALUES (?1, 'pagarme', ?2, ?3, 2, ?1, ?4, ?5, ?6, ?7, ?8)",
                rusqlite::params![
                    id,
                    key,
                    crate::store::dedup_hash("pagarme", &key),
                    status,
                    attempts,
                    next,
                    error,
                    finished
                ],
            )
            .unwrap();
            v3.execute(
                "INSERT INTO payloads (event_id, headers, body) VALUES (?1, x'', x'7b7d')",
                [id],
            )
            .unwrap();
            for n in 1..=attempts {
                v3.execute(
                    "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome) \
                     VALUES (?1, ?2, 0, 1, 'failed')",
                    [id, n],
                )
                .unwrap();
            }
        }
        drop(v3);
        let db = upgraded(&path, 3);
        for (id, status, attempts, next, error, _) in states {
            let event = db.event(id).unwrap().unwrap();
            assert_eq!(
                event.attempts.len(),
                attempts as usize,
                "event {id}: attempts kept"
            );
            assert!(event.attempts.iter().all(|a| a.route == "default"));
            assert_eq!(event.summary.attempts, attempts as u32, "event {id}");
            if status == "stored" {
                assert!(event.routes.is_empty(), "a stored event has no delivery");
                assert_eq!(event.summary.status, Status::Stored);
                continue;
            }
            let [route] = event.routes.as_slice() else {
                panic!("event {id}: {:?}", event.routes)
            };
            assert_eq!(route.route, "default");
            assert_eq!(route.status.as_str(), status, "event {id}");
            assert_eq!(route.attempts, attempts as u32);
            assert_eq!(route.next_attempt_at_ms, next);
            assert_eq!(route.last_error.as_deref(), error);
            assert_eq!(
                event.summary.status.as_str(),
                status,
                "event {id}: listed the same"
            );
        }
        // The roll-up column itself: a delivering event is pending, its delivery delivering.
        let rolled: String = db
            .conn
            .query_row("SELECT status FROM events WHERE id = 2", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rolled, "pending");
        // The cut-off attempt is recovered per delivery, as before.
        assert_eq!(super::super::queue::recover(&db.conn, 10_000).unwrap(), 1);
        let recovered = db.event(2).unwrap().unwrap();
        assert_eq!(recovered.routes[0].status, Status::Pending);
        assert_eq!(recovered.attempts.last().unwrap().outcome, "interrupted");
        // The barrier still holds the old keys, and TLS's column is there.
        assert_eq!(
            insert_event(&db.conn, &new_event("pagarme", "k4")).unwrap(),
            Inserted::Duplicate(4)
        );
        let certs: i64 = db
            .conn
            .query_row("SELECT count(client_cert) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(certs, 0);
    }

    /// The whole schema of version 5, as released before the queue indexes left the happy path
    /// (shared with the integration test that upgrades a v5 file under the real server).
    const SCHEMA_V5: &str = include_str!("../../../tests/fixtures/schema_v5.sql");

    /// A version 5 file with a delivery in every state ([`V5_ROWS`]).
    fn version_5_file(path: &Path) {
        let v5 = Connection::open(path).unwrap();
        v5.execute_batch("PRAGMA page_size = 1024; PRAGMA journal_mode = WAL;")
            .unwrap();
        v5.execute_batch(SCHEMA_V5).unwrap();
        for (id, route, status, attempts, next, key) in V5_ROWS {
            let dedup = format!("k{id}");
            v5.execute(
                "INSERT OR IGNORE INTO events (id, endpoint, dedup_key, dedup_hash, \
                 payload_bytes, received_at, status) VALUES (?1, 'shop', ?2, ?3, 2, ?1, ?4)",
                rusqlite::params![
                    id,
                    dedup,
                    crate::store::dedup_hash("shop", &dedup),
                    if status == "delivering" {
                        "pending"
                    } else {
                        status
                    }
                ],
            )
            .unwrap();
            v5.execute(
                "INSERT OR IGNORE INTO payloads (event_id, headers, body) \
                 VALUES (?1, x'', x'7b7d')",
                [id],
            )
            .unwrap();
            v5.execute(
                "INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
                 next_attempt_at, order_key, finished_at) \
                 VALUES (?1, ?2, 'shop', ?3, ?4, ?5, ?6, \
                 CASE WHEN ?3 IN ('delivered', 'dead') THEN ?1 END)",
                rusqlite::params![id, route, status, attempts, next, key],
            )
            .unwrap();
        }
    }

    /// A delivery of the v5 file: (event id, route, status, attempts, due time, order key).
    type V5Row = (
        i64,
        &'static str,
        &'static str,
        u32,
        Option<i64>,
        Option<&'static str>,
    );

    const V5_ROWS: [V5Row; 7] = [
        (1, "default", "delivered", 1, None, None),
        (2, "default", "dead", 6, None, None),
        (3, "default", "pending", 0, Some(3), None),
        (4, "default", "pending", 2, Some(9_000_000), None),
        (5, "default", "delivering", 1, Some(5), None),
        (6, "default", "pending", 0, None, None),
        (7, "default", "pending", 0, Some(7), Some("order-1")),
    ];

    #[test]
    fn a_version_5_file_keeps_every_delivery_in_the_new_queue_index() {
        use super::super::queue::{claim_due, recover};
        use crate::store::Order;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        version_5_file(&path);
        let db = upgraded(&path, 5);
        // The same indexes as a new file's, by definition.
        let (_fresh_dir, fresh) = temp_db();
        let indexes = |conn: &Connection| -> Vec<(String, String)> {
            conn.prepare(
                "SELECT name, sql FROM sqlite_schema WHERE tbl_name = 'deliveries' \
                 AND type = 'index' AND sql IS NOT NULL ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
        };
        assert_eq!(indexes(&db.conn), indexes(&fresh.conn));
        assert!(
            indexes(&db.conn)
                .iter()
                .any(|(n, sql)| n == "deliveries_queue"
                    && sql.contains("next_attempt_at IS NOT NULL")),
            "{:?}",
            indexes(&db.conn)
        );
        // Every row is kept; the unfinished ones are all in the queue, the finished none.
        let queued: Vec<i64> = db
            .conn
            .prepare(
                "SELECT event_id FROM deliveries INDEXED BY deliveries_queue \
                 WHERE next_attempt_at IS NOT NULL ORDER BY event_id",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(queued, [3, 4, 5, 6, 7]);
        for (id, route, status, attempts, _, key) in V5_ROWS {
            let event = db.event(id).unwrap().unwrap();
            let [r] = event.routes.as_slice() else {
                panic!("event {id}: {:?}", event.routes)
            };
            assert_eq!(
                (
                    r.route.as_str(),
                    r.status.as_str(),
                    r.attempts,
                    r.order_key.as_deref()
                ),
                (route, status, attempts, key),
                "event {id}"
            );
        }
        // A pending delivery without a due time (none should exist) is due at once.
        assert_eq!(
            db.event(6).unwrap().unwrap().routes[0].next_attempt_at_ms,
            Some(0)
        );
        // The cut-off attempt is recovered as before, and the due ones are claimed, in order;
        // the one waiting for its retry is not due yet.
        assert_eq!(recover(&db.conn, 10_000).unwrap(), 1);
        let claimed: Vec<i64> = claim_due(&db.conn, "shop", "default", 10, Order::Any, 10_000)
            .unwrap()
            .iter()
            .map(|d| d.event_id)
            .collect();
        assert_eq!(claimed, [6, 3, 7, 5], "soonest due first");
        assert_eq!(
            db.event(5)
                .unwrap()
                .unwrap()
                .attempts
                .last()
                .unwrap()
                .outcome,
            "interrupted"
        );
    }

    #[test]
    fn a_file_from_before_version_7_gains_the_codec_and_keeps_its_raw_bodies_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        // The file of the version before: today's schema without version 7's column (nor
        // version 9's), marked version 6 (7's step needs nothing of 6; 8's finds its CHECKs
        // there already), holding a body that would be deflated now, stored raw as every body
        // was.
        let body = super::super::fixtures::charge_paid();
        {
            let v5 = open(&path).unwrap();
            v5.execute_batch(
                "ALTER TABLE payloads DROP COLUMN codec; ALTER TABLE events DROP COLUMN \
                 signed_id; ALTER TABLE events DROP COLUMN event_type_signed; \
                 ALTER TABLE events DROP COLUMN origin; DROP TABLE fetches; \
                 DROP TABLE route_pauses; DROP TABLE event_items; DROP INDEX deliveries_head; DROP TABLE rejected; \
                 PRAGMA user_version = 6;",
            )
            .unwrap();
            v5.execute(
                "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status) VALUES (3, 'pagarme', 'old', ?1, ?2, 1, 'stored')",
                rusqlite::params![
                    crate::store::dedup_hash("pagarme", "old"),
                    body.len() as i64
                ],
            )
            .unwrap();
            v5.execute(
                "INSERT INTO payloads (event_id, headers, body) VALUES (3, x'', ?1)",
                [&body],
            )
            .unwrap();
        }
        let db = upgraded(&path, 6);
        // The old row is raw, untouched, and reads as it was.
        let codec = |id: i64| -> (i64, i64) {
            db.conn
                .query_row(
                    "SELECT codec, length(body) FROM payloads WHERE event_id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        };
        assert_eq!(codec(3), (0, body.len() as i64));
        assert_eq!(db.event(3).unwrap().unwrap().body, body);
        // A new event with the same body is deflated beside it, and reads the same.
        let mut new = new_event("pagarme", "new");
        new.body = body.clone().into();
        let Inserted::New(id) = insert_event(&db.conn, &new).unwrap() else {
            panic!("a new key");
        };
        let (new_codec, stored) = codec(id);
        assert_eq!(new_codec, 1);
        assert!(stored < body.len() as i64 * 7 / 10, "{stored}");
        assert_eq!(db.event(id).unwrap().unwrap().body, body);
        // The upgraded table is a new file's.
        let (_fresh_dir, fresh) = temp_db();
        let columns = |conn: &Connection| -> Vec<(String, String, bool, Option<String>)> {
            conn.prepare("PRAGMA table_info(payloads)")
                .unwrap()
                .query_map([], |r| Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(columns(&db.conn), columns(&fresh.conn));
    }

    /// The whole schema of a version 8 file, as that version made it.
    const SCHEMA_V8: &str = include_str!("../../../tests/fixtures/schema_v8.sql");

    #[test]
    fn a_version_8_file_gains_the_signed_columns_in_place_its_rows_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        {
            let v8 = Connection::open(&path).unwrap();
            v8.execute_batch(
                "PRAGMA page_size = 1024; PRAGMA auto_vacuum = INCREMENTAL; \
                 PRAGMA journal_mode = WAL;",
            )
            .unwrap();
            v8.execute_batch(SCHEMA_V8).unwrap();
            v8.execute(
                "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, event_type, \
                 payload_bytes, received_at, status) VALUES (1, 'shop', 'old', ?1, 'push', 2, \
                 1, 'stored')",
                [crate::store::dedup_hash("shop", "old")],
            )
            .unwrap();
            v8.execute(
                "INSERT INTO payloads (event_id, headers, body) VALUES (1, x'', x'7b7d')",
                [],
            )
            .unwrap();
        }
        let db = upgraded(&path, 8);
        // The old row: nothing known of what was signed, which targets hear as "not signed".
        let old: (Option<String>, Option<bool>) = db
            .conn
            .query_row(
                "SELECT signed_id, event_type_signed FROM events WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(old, (None, None));
        let detail = db.event(1).unwrap().unwrap();
        assert_eq!((detail.signed_id, detail.event_type_signed), (None, None));
        // A new event keeps both, and reads them back.
        let mut new = new_event("shop", "new");
        new.event_type = Some("payment".into());
        new.signed_id = Some("123456".into());
        new.event_type_signed = Some(false);
        let Inserted::New(id) = insert_event(&db.conn, &new).unwrap() else {
            panic!("a new key");
        };
        let detail = db.event(id).unwrap().unwrap();
        assert_eq!(detail.signed_id.as_deref(), Some("123456"));
        assert_eq!(detail.event_type_signed, Some(false));
        // The schema is a new file's, word for word.
        let (_fresh_dir, fresh) = temp_db();
        let sql = |conn: &Connection| -> Vec<(String, Option<String>)> {
            conn.prepare("SELECT name, sql FROM sqlite_schema ORDER BY name")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(sql(&db.conn), sql(&fresh.conn));
    }
}

#[cfg(test)]
mod status_checks {
    //! Version 8: the status CHECKs without a temporary b-tree, on a new file and on a real
    //! version 7 file (`tests/fixtures/schema_v7.sql`) upgraded in place.

    use super::super::Db;
    use super::super::fixtures::{new_event, temp_db};
    use super::super::intake::{INSERT_DELIVERY, INSERT_UNLESS_KNOWN, NO_WINDOW, insert_event};
    use super::super::queue::{CLAIM, FINISH, RETRY, ROLL_UP};
    use super::*;
    use crate::store::Inserted;

    /// The whole schema of a version 7 file, each statement as such a file holds it.
    const SCHEMA_V7: &str = include_str!("../../../tests/fixtures/schema_v7.sql");

    /// How many temporary b-trees the program of `sql` opens.
    fn temporary_b_trees(conn: &Connection, sql: &str) -> usize {
        let mut explain = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
        let mut rows = explain.raw_query();
        let mut n = 0;
        while let Some(row) = rows.next().unwrap() {
            n += usize::from(row.get::<_, String>(1).unwrap() == "OpenEphemeral");
        }
        n
    }

    /// Every statement of intake, the claim, the record and the roll-up that writes a status.
    const STATUS_WRITES: [(&str, &str); 6] = [
        ("intake's barrier", INSERT_UNLESS_KNOWN),
        ("a delivery row", INSERT_DELIVERY),
        ("the claim", CLAIM),
        ("a retry", RETRY),
        ("the last attempt", FINISH),
        ("the roll-up", ROLL_UP),
    ];

    pub(super) fn assert_no_temporary_b_tree(conn: &Connection) {
        for (what, sql) in STATUS_WRITES {
            assert_eq!(temporary_b_trees(conn, sql), 0, "{what}: {sql}");
        }
    }

    /// Every status each table allows goes in; another, or none, does not, on insert or
    /// update. Leaves nothing behind.
    fn assert_status_checked(conn: &Connection) {
        let tx =
            rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Deferred)
                .unwrap();
        let event = |status: Option<&str>| {
            tx.execute(
                "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status) VALUES ('checked', 'k', 0, 0, 0, ?1)",
                [status],
            )
        };
        for status in ["pending", "delivering", "delivered", "dead", "stored"] {
            event(Some(status)).unwrap();
        }
        let id = tx.last_insert_rowid();
        let delivery = |route: &str, status: Option<&str>| {
            tx.execute(
                "INSERT INTO deliveries (event_id, route, endpoint, status) \
                 VALUES (?1, ?2, 'checked', ?3)",
                rusqlite::params![id, route, status],
            )
        };
        for status in ["pending", "delivering", "delivered", "dead"] {
            delivery(status, Some(status)).unwrap();
        }
        let refused = |result: rusqlite::Result<usize>, why: &str| {
            let err = result.expect_err(why).to_string();
            assert!(err.contains(why), "{err}");
        };
        let check = "CHECK constraint failed: events_status";
        refused(event(Some("sent")), check);
        refused(event(Some("")), check);
        refused(event(Some("Pending")), check);
        refused(event(None), "NOT NULL constraint failed: events.status");
        refused(
            tx.execute("UPDATE events SET status = 'sent' WHERE id = ?1", [id]),
            check,
        );
        let check = "CHECK constraint failed: deliveries_status";
        refused(delivery("x", Some("stored")), check);
        refused(delivery("x", Some("sent")), check);
        refused(
            delivery("x", None),
            "NOT NULL constraint failed: deliveries.status",
        );
        refused(
            tx.execute(
                "UPDATE deliveries SET status = 'stored' WHERE event_id = ?1",
                [id],
            ),
            check,
        );
        // The barrier's NULL is still how a known key is skipped.
        tx.execute("UPDATE events SET dedup_hash = 7 WHERE id = ?1", [id])
            .unwrap();
        let barrier = |key: &str| {
            tx.execute(
                INSERT_UNLESS_KNOWN,
                rusqlite::params![
                    "checked",
                    key,
                    7,
                    None::<String>,
                    None::<String>,
                    0,
                    1,
                    "stored",
                    NO_WINDOW,
                    None::<String>,
                    None::<String>,
                    None::<String>,
                    None::<bool>
                ],
            )
            .unwrap()
        };
        assert_eq!(barrier("k"), 0, "a known key: ignored, not refused");
        assert_eq!(barrier("other"), 1);
        tx.rollback().unwrap();
    }

    #[test]
    fn a_new_file_writes_a_status_without_a_temporary_b_tree_and_still_checks_it() {
        let (_dir, db) = temp_db();
        assert_no_temporary_b_tree(&db.conn);
        assert_status_checked(&db.conn);
    }

    /// A version 7 file at `path`, as that version made it, with an event in every status and
    /// a delivery in every status of its own.
    fn version_7_file(path: &Path) -> Connection {
        let v7 = Connection::open(path).unwrap();
        v7.execute_batch(
            "PRAGMA page_size = 1024; PRAGMA auto_vacuum = INCREMENTAL; \
             PRAGMA journal_mode = WAL;",
        )
        .unwrap();
        v7.execute_batch(SCHEMA_V7).unwrap();
        for (id, status) in [
            (1, "pending"),
            (2, "delivering"),
            (3, "delivered"),
            (4, "dead"),
            (5, "stored"),
        ] {
            let key = format!("k{id}");
            v7.execute(
                "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status) VALUES (?1, 'shop', ?2, ?3, 2, ?1, ?4)",
                rusqlite::params![id, key, crate::store::dedup_hash("shop", &key), status],
            )
            .unwrap();
            v7.execute(
                "INSERT INTO payloads (event_id, headers, body) VALUES (?1, x'', x'7b7d')",
                [id],
            )
            .unwrap();
            if status != "stored" {
                v7.execute(
                    "INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
                     next_attempt_at) VALUES (?1, 'default', 'shop', ?2, 1, ?1)",
                    rusqlite::params![id, status],
                )
                .unwrap();
            }
        }
        v7
    }

    /// Every row of `events` and `deliveries`.
    fn rows(conn: &Connection) -> Vec<String> {
        conn.prepare(
            "SELECT 'e ' || id || ' ' || status FROM events \
             UNION ALL SELECT 'd ' || event_id || ' ' || route || ' ' || status || ' ' || \
             attempts || ' ' || next_attempt_at FROM deliveries ORDER BY 1",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// (type, name, sql) of every schema object, or its root page.
    fn schema(conn: &Connection, column: &str) -> Vec<(String, String, Option<String>)> {
        conn.prepare(&format!(
            "SELECT type, name, CAST({column} AS TEXT) FROM sqlite_schema ORDER BY name"
        ))
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    fn pragma_i64(conn: &Connection, pragma: &str) -> i64 {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_version_7_file_gets_the_new_checks_in_place_with_its_rows_and_pages_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let v7 = version_7_file(&path);
        // The cost this version removes: the old CHECK's list, built per insert (the
        // barrier's statement as version 8 spelled it, before version 9's columns).
        let v8_barrier = INSERT_UNLESS_KNOWN
            .replace(", signed_id, event_type_signed", "")
            .replace(", ?12, ?13", "");
        assert!(temporary_b_trees(&v7, &v8_barrier) > 0);
        let before = rows(&v7);
        assert_eq!(before.len(), 9);
        let roots = schema(&v7, "rootpage");
        let cookie = pragma_i64(&v7, "schema_version");
        // `v7` stays open, its schema read: a process that had the file open (a command
        // refused by the upgrade, say) must not go on with the old one.
        let refused = Db::open(&path).err().expect("refused").to_string();
        assert!(refused.contains("schema version 7 is older"), "{refused}");

        let db = Db {
            conn: open(&path).unwrap(),
        };
        assert_eq!(pragma_i64(&db.conn, "user_version"), SCHEMA_VERSION);
        assert!(pragma_i64(&db.conn, "schema_version") > cookie);
        let ok: String = db
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        // Nothing rebuilt: every table and index is where it was, every row as it was (a table
        // of a later version, version 10's `route_pauses`, 11's `event_items`, 12's
        // `deliveries_head`, 13's `rejected` or 15's `fetches`, is new).
        let mut kept = schema(&db.conn, "rootpage");
        kept.retain(|(_, name, _)| {
            !["route_pauses", "deliveries_head", "fetches"].contains(&&**name)
                && !name.starts_with("event_items")
                && !name.starts_with("rejected")
        });
        assert_eq!(kept, roots);
        assert_eq!(rows(&db.conn), before);
        // The schema is a new file's, word for word.
        let (_fresh_dir, fresh) = temp_db();
        assert_eq!(schema(&db.conn, "sql"), schema(&fresh.conn, "sql"));
        assert_no_temporary_b_tree(&db.conn);
        assert_status_checked(&db.conn);
        // The connection open since before reads the new schema too: its next statement sees
        // the schema cookie moved and parses it again (EXPLAIN alone runs nothing).
        assert_eq!(rows(&v7), before);
        assert_no_temporary_b_tree(&v7);
        // And the barrier still holds the old keys.
        assert_eq!(
            insert_event(&db.conn, &new_event("shop", "k4")).unwrap(),
            Inserted::Duplicate(4)
        );
        assert!(matches!(
            insert_event(&db.conn, &new_event("shop", "k6")).unwrap(),
            Inserted::New(_)
        ));
    }

    #[test]
    fn the_upgrade_edits_the_schema_on_a_connection_in_defensive_mode_and_leaves_it_on() {
        use rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        drop(version_7_file(&path));
        let conn = Connection::open(&path).unwrap();
        conn.set_db_config(SQLITE_DBCONFIG_DEFENSIVE, true).unwrap();
        migrate(&conn, Upgrade::Allowed).unwrap();
        assert!(conn.db_config(SQLITE_DBCONFIG_DEFENSIVE).unwrap());
        assert_eq!(pragma_i64(&conn, "user_version"), SCHEMA_VERSION);
        assert_no_temporary_b_tree(&conn);
    }

    #[test]
    fn a_check_portaria_did_not_write_is_kept_and_the_rest_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        {
            // A file whose events table someone made with a CHECK of their own.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(&SCHEMA_V7.replace(
                V7_TO_V8[0].before,
                "CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored', 'x'))",
            ))
            .unwrap();
        }
        let db = Db {
            conn: open(&path).unwrap(),
        };
        assert_eq!(pragma_i64(&db.conn, "user_version"), SCHEMA_VERSION);
        let sql = |table: &str| -> String {
            db.conn
                .query_row(
                    "SELECT sql FROM sqlite_schema WHERE name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .unwrap()
        };
        assert!(
            sql("events").contains("'stored', 'x'))"),
            "{}",
            sql("events")
        );
        assert!(sql("deliveries").contains(V7_TO_V8[1].after));
        assert_eq!(temporary_b_trees(&db.conn, INSERT_DELIVERY), 0);
    }

    #[test]
    fn a_schema_edit_that_does_not_parse_is_rolled_back_and_the_file_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        drop(version_7_file(&path));
        let conn = Connection::open(&path).unwrap();
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate)
                .unwrap();
        let broken = [(
            "events",
            "CREATE TABLE events (id INTEGER PRIMARY KEY,".to_string(),
        )];
        let err = edit_schema(&tx, &broken).expect_err("refused").to_string();
        assert!(err.contains("malformed database schema"), "{err}");
        tx.rollback().unwrap();
        // Off again, and the file as it was: still version 7, and it upgrades.
        let writable: bool = conn
            .query_row("PRAGMA writable_schema", [], |r| r.get(0))
            .unwrap();
        assert!(!writable);
        assert_eq!(rows(&conn).len(), 9);
        drop(conn);
        let db = Db {
            conn: open(&path).unwrap(),
        };
        assert_eq!(pragma_i64(&db.conn, "user_version"), SCHEMA_VERSION);
        assert_eq!(rows(&db.conn).len(), 9);
    }
}
