//! PostgreSQL's side of the rejected requests kept ([`crate::store::Quarantined`]): table
//! `rejected` (schema version 5). The insert, the trim to the newest `keep` and the drop past
//! `for` are one transaction on one pooled connection, never the intake's committers: a flood
//! of forged requests waits for a connection, not behind or in front of an event's insert.
//! Two instances trimming the same endpoint at once may each keep a row the other dropped;
//! the next insert trims again, so the table stays within `keep` plus the instances' count.

use tokio_postgres::Row;

use super::{Pg, error};
use crate::store::StoreError;
use crate::store::quarantine::{
    COLUMNS, QuarantineKeep, Quarantined, RejectedSummary, ToQuarantine,
};

impl Pg {
    pub(in crate::store) async fn quarantine(
        &self,
        r: ToQuarantine,
        keep: QuarantineKeep,
    ) -> Result<i64, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(error)?;
        let id: i64 = tx
            .query_one(
                "INSERT INTO rejected (endpoint, received_at, reason, detail, content_type, \
                 headers, body, truncated) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                &[
                    &r.endpoint,
                    &r.received_at_ms,
                    &r.reason,
                    &r.detail,
                    &r.content_type,
                    &r.headers,
                    &r.body,
                    &r.truncated,
                ],
            )
            .await
            .map_err(error)?
            .get(0);
        tx.execute(
            "DELETE FROM rejected WHERE endpoint = $1 AND (id <= (SELECT id FROM rejected \
             WHERE endpoint = $1 ORDER BY id DESC LIMIT 1 OFFSET $2) OR received_at < $3)",
            &[
                &r.endpoint,
                &i64::from(keep.keep),
                &r.received_at_ms.saturating_sub(keep.for_ms),
            ],
        )
        .await
        .map_err(error)?;
        tx.commit().await.map_err(error)?;
        Ok(id)
    }

    pub(in crate::store) async fn rejected_list(
        &self,
        endpoint: Option<String>,
        limit: i64,
    ) -> Result<Vec<Quarantined>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM rejected WHERE $1::TEXT IS NULL OR endpoint = $1 \
                     ORDER BY id DESC LIMIT $2"
                ),
                &[&endpoint, &limit],
            )
            .await
            .map_err(error)?;
        Ok(rows.iter().map(row).collect())
    }

    pub(in crate::store) async fn rejected_page(
        &self,
        endpoint: Option<String>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RejectedSummary>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, endpoint, received_at, reason, detail, content_type, \
                 octet_length(body)::BIGINT, truncated FROM rejected \
                 WHERE ($1::TEXT IS NULL OR endpoint = $1) AND ($2::BIGINT IS NULL OR id < $2) \
                 ORDER BY id DESC LIMIT $3",
                &[&endpoint, &before, &limit],
            )
            .await
            .map_err(error)?;
        Ok(rows
            .iter()
            .map(|r| RejectedSummary {
                id: r.get(0),
                endpoint: r.get(1),
                received_at_ms: r.get(2),
                reason: r.get(3),
                detail: r.get(4),
                content_type: r.get(5),
                body_bytes: r.get::<_, i64>(6).max(0) as u64,
                truncated: r.get(7),
            })
            .collect())
    }

    pub(in crate::store) async fn rejected_kept(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT endpoint, count(*) FROM rejected GROUP BY endpoint ORDER BY endpoint",
                &[],
            )
            .await
            .map_err(error)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    }

    pub(in crate::store) async fn rejected_get(
        &self,
        id: i64,
    ) -> Result<Option<Quarantined>, StoreError> {
        let client = self.client().await?;
        let found = client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM rejected WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(error)?;
        Ok(found.as_ref().map(row))
    }

    pub(in crate::store) async fn prune_rejected(
        &self,
        endpoint: String,
        before_ms: i64,
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM rejected WHERE endpoint = $1 AND received_at < $2",
                &[&endpoint, &before_ms],
            )
            .await
            .map_err(error)
    }
}

fn row(r: &Row) -> Quarantined {
    Quarantined {
        id: r.get(0),
        endpoint: r.get(1),
        received_at_ms: r.get(2),
        reason: r.get(3),
        detail: r.get(4),
        content_type: r.get(5),
        headers: r.get(6),
        body: r.get(7),
        truncated: r.get(8),
    }
}
