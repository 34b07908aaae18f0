//! SQLite's side of [`crate::store::Store::never_stored`]: one look per key through the narrow
//! `events_dedup` index (the dedup hash), then the full key compared, as the barrier does.
//! And the reconcile lock: a file lock beside the database.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use rusqlite::params;

use super::Sqlite;
use crate::store::reconcile::RUN_KEY_PREFIX;
use crate::store::{StoreError, dedup_hash};

/// Version 14: where an event came from (`store::Origin`): NULL for a webhook, so intake
/// writes no byte more than one header byte (SQLite's serial type 0), `reconcile` for one a
/// reconcile run took from the gateway's API. Rows from before keep NULL: webhooks all.
pub(super) const V13_TO_V14: &str = "ALTER TABLE events ADD COLUMN origin TEXT;";

/// The runs' rows: `reconcile:<endpoint>` (`;` sorts right after `:`).
const RUNS: &str =
    "SELECT key, value FROM meta WHERE key >= 'reconcile:' AND key < 'reconcile;' ORDER BY key";
const SAVE_RUN: &str = "INSERT INTO meta (key, value) VALUES (?1, ?2) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value";

/// Through `events_endpoint` (endpoint, received_at): the endpoint's events of the window.
const SIGNED_IDS_SINCE: &str = "SELECT signed_id, max(received_at) FROM events \
     WHERE endpoint = ?1 AND received_at >= ?2 AND signed_id IS NOT NULL GROUP BY signed_id";

/// Whether a row of the endpoint has the key. `+endpoint`: as in the barrier
/// (`intake.rs`), so the dedup index is the one chosen.
const KNOWN_KEY: &str = "SELECT EXISTS (SELECT 1 FROM events WHERE dedup_hash = ?1 AND \
     +endpoint = ?2 AND dedup_key = ?3)";

impl Sqlite {
    /// The reconcile lock: an exclusive `flock` on `<database>-reconcile.lock` beside the
    /// file, held by the returned file (closing it, or the process's end, releases it): the
    /// server's schedule and a command running beside it on the same file. None: taken.
    pub(in crate::store) fn reconcile_lock(&self) -> Result<Option<File>, StoreError> {
        let mut name = self.path().as_os_str().to_owned();
        name.push("-reconcile.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&name)
            .map_err(|e| StoreError::Sqlite(format!("{}: {e}", Path::new(&name).display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(StoreError::Sqlite(format!(
                "locking {}: {e}",
                Path::new(&name).display()
            ))),
        }
    }

    pub(in crate::store) async fn never_stored(
        &self,
        endpoint: &str,
        keys: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let endpoint = endpoint.to_string();
        self.run(move |c| {
            let mut known = c.prepare_cached(KNOWN_KEY)?;
            let mut missing = Vec::new();
            for key in keys {
                let hash = dedup_hash(&endpoint, &key);
                let found: bool = known.query_row(params![hash, endpoint, key], |r| r.get(0))?;
                if !found {
                    missing.push(key);
                }
            }
            Ok(missing)
        })
        .await
    }

    pub(in crate::store) async fn signed_ids_since(
        &self,
        endpoint: &str,
        since_ms: i64,
    ) -> Result<HashMap<String, i64>, StoreError> {
        let endpoint = endpoint.to_string();
        self.run(move |c| {
            let mut rows = c.prepare_cached(SIGNED_IDS_SINCE)?;
            let found = rows
                .query_map(params![endpoint, since_ms], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<HashMap<String, i64>>>()?;
            Ok(found)
        })
        .await
    }

    pub(in crate::store) async fn reconcile_runs(
        &self,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.run(|c| {
            let mut rows = c.prepare_cached(RUNS)?;
            let runs = rows
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(runs
                .into_iter()
                .filter_map(|(key, run)| Some((key.strip_prefix(RUN_KEY_PREFIX)?.to_string(), run)))
                .collect())
        })
        .await
    }

    pub(in crate::store) async fn save_reconcile_run(
        &self,
        endpoint: &str,
        run: String,
    ) -> Result<(), StoreError> {
        let key = format!("{RUN_KEY_PREFIX}{endpoint}");
        self.run_bookkeeping(move |c| {
            c.prepare_cached(SAVE_RUN)?.execute(params![key, run])?;
            Ok(())
        })
        .await
    }
}
