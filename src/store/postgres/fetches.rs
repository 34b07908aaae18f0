//! PostgreSQL's side of verify-by-fetching's record (`store/fetches.rs`): table `fetches`,
//! version 7, one row per fetched event.

use std::collections::HashMap;

use super::{Pg, error};
use crate::store::StoreError;
use crate::store::fetches::{CREATE, Fetched, KEEP, READ, SINCE};

/// Version 7: the table.
pub(super) fn v7() -> String {
    CREATE.replace("{id}", "BIGINT")
}

impl Pg {
    pub(in crate::store) async fn fetched(
        &self,
        event_id: i64,
    ) -> Result<Option<Fetched>, StoreError> {
        read(&*self.client().await?, event_id).await
    }

    pub(in crate::store) async fn fetched_since(
        &self,
        endpoint: &str,
        since_ms: i64,
    ) -> Result<HashMap<i64, Fetched>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(SINCE, &[&endpoint, &since_ms])
            .await
            .map_err(error)?;
        Ok(rows
            .iter()
            .filter_map(|r| Some((r.get(0), Fetched::from_columns(r.get(1), r.get(2))?)))
            .collect())
    }

    pub(in crate::store) async fn keep_fetched(
        &self,
        event_id: i64,
        fetched: Fetched,
    ) -> Result<Fetched, StoreError> {
        let client = self.client().await?;
        client
            .execute(KEEP, &[&event_id, &fetched.state(), &fetched.detail()])
            .await
            .map_err(error)?;
        Ok(read(&client, event_id).await?.unwrap_or(fetched))
    }
}

/// The event's record, if it has one (a state this build does not know reads as none).
pub(super) async fn read(
    client: &tokio_postgres::Client,
    event_id: i64,
) -> Result<Option<Fetched>, StoreError> {
    let row = client.query_opt(READ, &[&event_id]).await.map_err(error)?;
    Ok(row.and_then(|r| Fetched::from_columns(r.get(0), r.get(1))))
}
