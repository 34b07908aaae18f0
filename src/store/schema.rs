//! The database file: opening it with the settings every connection needs, and creating or
//! upgrading the schema (tracked in `PRAGMA user_version`).

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use super::StoreError;

/// How long a write waits for another process's lock (an operator's `events replay`) before
/// it gives up; below the ~5 s in which a gateway must hear 503 rather than nothing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(3);

const SCHEMA_VERSION: i64 = 2;

const SCHEMA_V1: &str = "
CREATE TABLE events (
    id              INTEGER PRIMARY KEY,
    endpoint        TEXT    NOT NULL,
    dedup_key       TEXT    NOT NULL,
    event_type      TEXT,
    content_type    TEXT,
    headers         BLOB    NOT NULL,   -- `name: value\\r\\n` each, as received
    body            BLOB    NOT NULL,   -- the raw bytes, exactly as received
    received_at     INTEGER NOT NULL,   -- unix milliseconds
    status          TEXT    NOT NULL
        CHECK (status IN ('pending', 'delivering', 'delivered', 'dead', 'stored')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,            -- unix milliseconds, while pending
    last_error      TEXT,
    finished_at     INTEGER,            -- when it was delivered or went dead
    UNIQUE (endpoint, dedup_key)        -- the dedup barrier
);
CREATE INDEX events_queue ON events (endpoint, status, next_attempt_at)
    WHERE status IN ('pending', 'delivering');
CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY,
    event_id    INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,       -- delivered, failed, interrupted
    error       TEXT
);
CREATE INDEX attempts_event ON attempts (event_id);
";

/// Version 2: what `/readyz` and `/metrics` need. `meta` holds facts about the file itself (the
/// readiness probe rewrites one row); `events_dead` keeps the dead count an index-only read.
const SCHEMA_V2: &str = "
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;
CREATE INDEX events_dead ON events (endpoint) WHERE status = 'dead';
";

/// Opens the file (creating it and its directory if needed) with WAL, `synchronous=FULL`
/// and a busy timeout, and brings the schema up to date.
pub fn open(path: &Path) -> Result<Connection, StoreError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::Sqlite(format!("{what} {}: {e}", path.display()))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| fail("cannot create the directory of", &e))?;
    }
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
    migrate(&conn).map_err(|e| fail("cannot create the schema in", &e))?;
    Ok(conn)
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

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    // IMMEDIATE: take the write lock first, so two processes starting at once serialise here.
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    // Another process may have created the schema while this one waited for the lock.
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version < 1 {
        tx.execute_batch(SCHEMA_V1)?;
    }
    if version < 2 {
        tx.execute_batch(SCHEMA_V2)?;
    }
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
    tx.commit()
}
