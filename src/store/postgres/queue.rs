//! The worker's start-up questions on PostgreSQL. Forwarding itself (claims with `FOR UPDATE
//! SKIP LOCKED` and a lease, attempts) is not on this backend yet, and a configuration that
//! forwards is refused at start; so no instance ever claims a delivery, and there is nothing
//! to recover. When claims come, they come with a lease (`deliveries.claimed_by`,
//! `lease_until`), and a dead instance's claims return when it expires: no recovery pass.

use super::{Pg, error};
use crate::store::StoreError;

const UNFINISHED_BY_ROUTE: &str = "SELECT endpoint, route, count(*) FROM deliveries \
     WHERE status IN ('pending', 'delivering') GROUP BY endpoint, route";

impl Pg {
    pub(in crate::store) async fn unfinished_by_route(
        &self,
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(UNFINISHED_BY_ROUTE, &[])
            .await
            .map_err(error)?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }
}
