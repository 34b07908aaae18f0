//! SQLite's side of [`crate::store::Store::never_stored`]: one look per key through the narrow
//! `events_dedup` index (the dedup hash), then the full key compared, as the barrier does.

use rusqlite::params;

use super::Sqlite;
use crate::store::{StoreError, dedup_hash};

/// Whether a row of the endpoint has the key. `+endpoint`: as in the barrier
/// (`intake.rs`), so the dedup index is the one chosen.
const KNOWN_KEY: &str = "SELECT EXISTS (SELECT 1 FROM events WHERE dedup_hash = ?1 AND \
     +endpoint = ?2 AND dedup_key = ?3)";

impl Sqlite {
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
}
