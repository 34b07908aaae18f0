//! SQLite's side of the rejected requests kept ([`crate::store::Quarantined`]): table
//! `rejected` (schema version 13). A kept request is a bookkeeping job of the writer: it
//! shares a batch with whatever the writer commits next and asks for no fsync of its own, so
//! a flood of forged requests adds rows to batches, not commits (intake bounds how many wait:
//! `ingest/quarantine.rs`). The insert, the trim to the newest `keep` and the drop past `for`
//! are one job, so the endpoint's rows never pass `keep` between them.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::Sqlite;
use crate::store::StoreError;
use crate::store::quarantine::{
    COLUMNS, QuarantineKeep, Quarantined, RejectedSummary, ToQuarantine,
};

/// Version 12: the rejected requests kept, newest `quarantine_keep` per endpoint. The index
/// serves the trim (an endpoint's rows by id), the list of one endpoint and the age drop.
pub(super) const V12_TO_V13: &str = "
CREATE TABLE rejected (
    id           INTEGER PRIMARY KEY,
    endpoint     TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,      -- unix milliseconds
    reason       TEXT    NOT NULL,      -- bad_signature, stale_timestamp, bad_request, too_large
    detail       TEXT    NOT NULL,      -- what verification said; never a secret
    content_type TEXT,
    headers      BLOB    NOT NULL,      -- `name: value\\r\\n` each, credentials redacted
    body         BLOB    NOT NULL,      -- at most the endpoint's max_body_bytes
    truncated    INTEGER NOT NULL       -- 1: the body was cut (too large)
);
CREATE INDEX rejected_endpoint ON rejected (endpoint, id);
";

impl Sqlite {
    pub(in crate::store) async fn quarantine(
        &self,
        r: ToQuarantine,
        keep: QuarantineKeep,
    ) -> Result<i64, StoreError> {
        self.run_bookkeeping(move |c| {
            c.prepare_cached(
                "INSERT INTO rejected (endpoint, received_at, reason, detail, content_type, \
                 headers, body, truncated) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                r.endpoint,
                r.received_at_ms,
                r.reason,
                r.detail,
                r.content_type,
                r.headers,
                r.body,
                r.truncated
            ])?;
            let id = c.last_insert_rowid();
            // Everything of the endpoint below its `keep`-th newest id, and what is too old.
            c.prepare_cached(
                "DELETE FROM rejected WHERE endpoint = ?1 AND (id <= (SELECT id FROM rejected \
                 WHERE endpoint = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2) OR received_at < ?3)",
            )?
            .execute(params![
                r.endpoint,
                i64::from(keep.keep),
                r.received_at_ms.saturating_sub(keep.for_ms)
            ])?;
            Ok(id)
        })
        .await
    }

    pub(in crate::store) async fn rejected_list(
        &self,
        endpoint: Option<String>,
        limit: i64,
    ) -> Result<Vec<Quarantined>, StoreError> {
        self.run_bookkeeping(move |c| list(c, endpoint.as_deref(), limit))
            .await
    }

    /// The table holds at most `keep` rows per endpoint, so a page walks few rows whatever
    /// the filters.
    pub(in crate::store) async fn rejected_page(
        &self,
        endpoint: Option<String>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RejectedSummary>, StoreError> {
        self.run_bookkeeping(move |c| {
            c.prepare_cached(
                "SELECT id, endpoint, received_at, reason, detail, content_type, length(body), \
                 truncated FROM rejected WHERE (?1 IS NULL OR endpoint = ?1) \
                 AND (?2 IS NULL OR id < ?2) ORDER BY id DESC LIMIT ?3",
            )?
            .query_map(params![endpoint, before, limit], |r| {
                Ok(RejectedSummary {
                    id: r.get(0)?,
                    endpoint: r.get(1)?,
                    received_at_ms: r.get(2)?,
                    reason: r.get(3)?,
                    detail: r.get(4)?,
                    content_type: r.get(5)?,
                    body_bytes: r.get::<_, i64>(6)?.max(0) as u64,
                    truncated: r.get(7)?,
                })
            })?
            .collect()
        })
        .await
    }

    pub(in crate::store) async fn rejected_kept(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.run_bookkeeping(|c| {
            c.prepare_cached(
                "SELECT endpoint, count(*) FROM rejected GROUP BY endpoint ORDER BY endpoint",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?
            .collect()
        })
        .await
    }

    pub(in crate::store) async fn rejected_get(
        &self,
        id: i64,
    ) -> Result<Option<Quarantined>, StoreError> {
        self.run_bookkeeping(move |c| {
            c.prepare_cached(&format!("SELECT {COLUMNS} FROM rejected WHERE id = ?1"))?
                .query_row([id], row)
                .optional()
        })
        .await
    }

    pub(in crate::store) async fn prune_rejected(
        &self,
        endpoint: String,
        before_ms: i64,
    ) -> Result<u64, StoreError> {
        self.run_bookkeeping(move |c| {
            c.prepare_cached("DELETE FROM rejected WHERE endpoint = ?1 AND received_at < ?2")?
                .execute(params![endpoint, before_ms])
                .map(|n| n as u64)
        })
        .await
    }
}

fn list(c: &Connection, endpoint: Option<&str>, limit: i64) -> rusqlite::Result<Vec<Quarantined>> {
    match endpoint {
        Some(endpoint) => c
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM rejected WHERE endpoint = ?1 ORDER BY id DESC LIMIT ?2"
            ))?
            .query_map(params![endpoint, limit], row)?
            .collect(),
        None => c
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM rejected ORDER BY id DESC LIMIT ?1"
            ))?
            .query_map([limit], row)?
            .collect(),
    }
}

fn row(r: &Row) -> rusqlite::Result<Quarantined> {
    Ok(Quarantined {
        id: r.get(0)?,
        endpoint: r.get(1)?,
        received_at_ms: r.get(2)?,
        reason: r.get(3)?,
        detail: r.get(4)?,
        content_type: r.get(5)?,
        headers: r.get(6)?,
        body: r.get(7)?,
        truncated: r.get(8)?,
    })
}
