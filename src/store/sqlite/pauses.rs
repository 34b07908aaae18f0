//! SQLite's side of paused routes ([`crate::store::RoutePause`]): table `route_pauses` (version 10).

use rusqlite::{Connection, params};

use super::Sqlite;
use crate::store::{RoutePause, StoreError};

/// Version 10: paused routes (`portaria route pause`), one row per paused (endpoint, route),
/// read by the worker each round ([`crate::store::RoutePause`]). A pause past its `until`
/// holds nothing; `resume` deletes the row. A table of its own, not a column of
/// `deliveries`: pausing writes one row whatever the backlog, and nothing in the queue's
/// index changes. A new file gets it too.
pub(super) const V9_TO_V10: &str = "
CREATE TABLE route_pauses (
    endpoint  TEXT    NOT NULL,
    route     TEXT    NOT NULL,
    paused_at INTEGER NOT NULL,         -- unix milliseconds
    until     INTEGER,                  -- unix milliseconds; NULL: until resumed
    reason    TEXT,
    PRIMARY KEY (endpoint, route)
) WITHOUT ROWID;
";

impl Sqlite {
    pub(in crate::store) async fn pause_route(&self, p: RoutePause) -> Result<(), StoreError> {
        self.run(move |c| {
            c.execute(
                "INSERT OR REPLACE INTO route_pauses (endpoint, route, paused_at, until, reason) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![p.endpoint, p.route, p.paused_at_ms, p.until_ms, p.reason],
            )
            .map(drop)
        })
        .await
    }

    pub(in crate::store) async fn resume_route(
        &self,
        endpoint: &str,
        route: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let (endpoint, route) = (endpoint.to_string(), route.to_string());
        self.run(move |c| {
            let held = pauses(c, now_ms)?
                .iter()
                .any(|p| p.endpoint == endpoint && p.route == route);
            c.execute(
                "DELETE FROM route_pauses WHERE endpoint = ?1 AND route = ?2",
                params![endpoint, route],
            )?;
            Ok(held)
        })
        .await
    }

    /// Bookkeeping: the worker reads this every round, and it writes nothing.
    pub(in crate::store) async fn route_pauses(
        &self,
        now_ms: i64,
    ) -> Result<Vec<RoutePause>, StoreError> {
        self.run_bookkeeping(move |c| pauses(c, now_ms)).await
    }
}

fn pauses(c: &Connection, now_ms: i64) -> rusqlite::Result<Vec<RoutePause>> {
    c.prepare_cached(
        "SELECT endpoint, route, paused_at, until, reason FROM route_pauses \
         WHERE until IS NULL OR until > ?1 ORDER BY endpoint, route",
    )?
    .query_map([now_ms], |r| {
        Ok(RoutePause {
            endpoint: r.get(0)?,
            route: r.get(1)?,
            paused_at_ms: r.get(2)?,
            until_ms: r.get(3)?,
            reason: r.get(4)?,
        })
    })?
    .collect()
}
