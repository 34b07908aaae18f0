//! PostgreSQL's side of paused routes ([`crate::store::RoutePause`]): table `route_pauses`. A
//! pause or a resume ends with a `NOTIFY`, so every instance's worker looks again at once.

use super::listen::WAKE_ON_COMMIT;
use super::{Pg, error};
use crate::store::{RoutePause, StoreError};

const PAUSES: &str = "SELECT endpoint, route, paused_at, until, reason FROM route_pauses \
                      WHERE until IS NULL OR until > $1 ORDER BY endpoint, route";

impl Pg {
    pub(in crate::store) async fn pause_route(&self, p: RoutePause) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        tx.execute(
            "INSERT INTO route_pauses (endpoint, route, paused_at, until, reason) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (endpoint, route) DO UPDATE SET \
             paused_at = EXCLUDED.paused_at, until = EXCLUDED.until, reason = EXCLUDED.reason",
            &[
                &p.endpoint,
                &p.route,
                &p.paused_at_ms,
                &p.until_ms,
                &p.reason,
            ],
        )
        .await
        .map_err(error)?;
        tx.execute(WAKE_ON_COMMIT, &[]).await.map_err(error)?;
        tx.commit().await.map_err(error)
    }

    pub(in crate::store) async fn resume_route(
        &self,
        endpoint: &str,
        route: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        let held = tx
            .query(
                "DELETE FROM route_pauses WHERE endpoint = $1 AND route = $2 \
                 AND (until IS NULL OR until > $3) RETURNING 1",
                &[&endpoint, &route, &now_ms],
            )
            .await
            .map_err(error)?;
        tx.execute(
            "DELETE FROM route_pauses WHERE endpoint = $1 AND route = $2",
            &[&endpoint, &route],
        )
        .await
        .map_err(error)?;
        tx.execute(WAKE_ON_COMMIT, &[]).await.map_err(error)?;
        tx.commit().await.map_err(error)?;
        Ok(!held.is_empty())
    }

    pub(in crate::store) async fn route_pauses(
        &self,
        now_ms: i64,
    ) -> Result<Vec<RoutePause>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client.prepare_cached(PAUSES).await.map_err(error)?,
                &[&now_ms],
            )
            .await
            .map_err(error)?;
        Ok(rows
            .iter()
            .map(|r| RoutePause {
                endpoint: r.get(0),
                route: r.get(1),
                paused_at_ms: r.get(2),
                until_ms: r.get(3),
                reason: r.get(4),
            })
            .collect())
    }
}
