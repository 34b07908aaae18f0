//! PostgreSQL's side of [`crate::store::Store::never_stored`]: the keys given, less those the
//! dedup barrier holds for the endpoint (table `dedup`: a row per (endpoint, key) of any stored
//! event, deleted with the key's last event), in one statement through its PRIMARY KEY
//! (`unnest ... WITH ORDINALITY` keeps the order given). And the reconcile lock: a
//! session-level advisory lock, as the retention lock (`retention.rs`).

use std::collections::HashMap;

use deadpool_postgres::{ClientWrapper, Object};

use super::{Pg, error};
use crate::store::StoreError;
use crate::store::reconcile::RUN_KEY_PREFIX;

/// The runs' rows: `reconcile:<endpoint>` (`;` sorts right after `:`).
const RUNS: &str =
    "SELECT key, value FROM meta WHERE key >= 'reconcile:' AND key < 'reconcile;' ORDER BY key";
const SAVE_RUN: &str = "INSERT INTO meta (key, value) VALUES ($1, $2) \
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";

/// Through `events_endpoint` (endpoint, received_at): the endpoint's events of the window.
const SIGNED_IDS_SINCE: &str = "SELECT signed_id, max(received_at) FROM events \
     WHERE endpoint = $1 AND received_at >= $2 AND signed_id IS NOT NULL GROUP BY signed_id";

const NEVER_STORED: &str = "SELECT k.key FROM unnest($2::text[]) WITH ORDINALITY AS k (key, n) \
     WHERE NOT EXISTS (SELECT 1 FROM dedup d WHERE d.endpoint = $1 AND d.dedup_key = k.key) \
     ORDER BY k.n";

/// The reconcile lock: whoever holds it runs reconcile (an arbitrary constant: "portaria" in
/// ASCII with its last byte changed, beside the migration, alerts and retention locks).
const RECONCILE_LOCK: i64 = 0x706f_7274_6172_6963;

/// The reconcile lock, held on a session of its own, out of the pool: dropping it closes
/// the connection, and PostgreSQL releases the lock with the session.
pub(in crate::store) struct ReconcileLock {
    client: ClientWrapper,
}

impl ReconcileLock {
    /// Lets the lock go now: the session's end, when the connection closes after the drop,
    /// comes a moment later (and still releases it if this fails).
    pub(in crate::store) async fn release(self) {
        let unlock = "SELECT pg_advisory_unlock($1)";
        let _ = self.client.query_one(unlock, &[&RECONCILE_LOCK]).await;
    }
}

impl Pg {
    /// The reconcile lock if no other session holds it (None: another instance, or a
    /// command, is reconciling).
    pub(in crate::store) async fn reconcile_lock(
        &self,
    ) -> Result<Option<ReconcileLock>, StoreError> {
        let client = self.client().await?;
        let took: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RECONCILE_LOCK])
            .await
            .map_err(error)?
            .get(0);
        Ok(took.then(|| ReconcileLock {
            client: Object::take(client),
        }))
    }

    pub(in crate::store) async fn never_stored(
        &self,
        endpoint: &str,
        keys: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(NEVER_STORED).await.map_err(error)?;
        let rows = client
            .query(&statement, &[&endpoint, &keys])
            .await
            .map_err(error)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub(in crate::store) async fn signed_ids_since(
        &self,
        endpoint: &str,
        since_ms: i64,
    ) -> Result<HashMap<String, i64>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(SIGNED_IDS_SINCE, &[&endpoint, &since_ms])
            .await
            .map_err(error)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    pub(in crate::store) async fn reconcile_runs(
        &self,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let client = self.client().await?;
        let rows = client.query(RUNS, &[]).await.map_err(error)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let key: String = r.get(0);
                Some((key.strip_prefix(RUN_KEY_PREFIX)?.to_string(), r.get(1)))
            })
            .collect())
    }

    pub(in crate::store) async fn save_reconcile_run(
        &self,
        endpoint: &str,
        run: String,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let key = format!("{RUN_KEY_PREFIX}{endpoint}");
        client
            .execute(SAVE_RUN, &[&key, &run])
            .await
            .map_err(error)?;
        Ok(())
    }
}
