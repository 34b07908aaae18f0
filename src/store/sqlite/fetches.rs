//! SQLite's side of verify-by-fetching's record (`store/fetches.rs`): table `fetches`, version
//! 15, one row per fetched event.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::Sqlite;
use crate::store::StoreError;
use crate::store::fetches::{CREATE, Fetched, KEEP, READ, SINCE};

/// Version 15: the table, `event_id` the rowid (a new file too).
pub(super) fn v14_to_v15(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&CREATE.replace("{id}", "INTEGER"))
}

/// The event's record, if it has one (a state this build does not know reads as none).
pub(super) fn read(conn: &Connection, event_id: i64) -> rusqlite::Result<Option<Fetched>> {
    let row: Option<(String, String)> = conn
        .prepare_cached(READ)?
        .query_row([event_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(state, detail)| Fetched::from_columns(&state, detail)))
}

impl Sqlite {
    pub(in crate::store) async fn fetched(
        &self,
        event_id: i64,
    ) -> Result<Option<Fetched>, StoreError> {
        self.run(move |c| read(c, event_id)).await
    }

    pub(in crate::store) async fn fetched_since(
        &self,
        endpoint: String,
        since_ms: i64,
    ) -> Result<HashMap<i64, Fetched>, StoreError> {
        self.run(move |c| {
            let mut stmt = c.prepare_cached(SINCE)?;
            let rows = stmt.query_map(params![endpoint, since_ms], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get(2)?))
            })?;
            let mut out = HashMap::new();
            for row in rows {
                let (id, state, detail) = row?;
                out.extend(Fetched::from_columns(&state, detail).map(|f| (id, f)));
            }
            Ok(out)
        })
        .await
    }

    pub(in crate::store) async fn keep_fetched(
        &self,
        event_id: i64,
        fetched: Fetched,
    ) -> Result<Fetched, StoreError> {
        self.run(move |c| {
            c.prepare_cached(KEEP)?.execute(params![
                event_id,
                fetched.state(),
                fetched.detail()
            ])?;
            Ok(read(c, event_id)?.unwrap_or(fetched))
        })
        .await
    }
}
