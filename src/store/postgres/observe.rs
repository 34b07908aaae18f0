//! What the admin listener asks of PostgreSQL: the write probe behind `/readyz` (a standby or
//! a database in `default_transaction_read_only`, a full disk, a statement timeout all fail
//! it) and the queue figures of `/metrics`. The free-space check of SQLite has no equivalent
//! here: the disk is the database server's, and a full one fails the probe.

use super::{Pg, error};
use crate::store::{NotReady, QueueStats, StoreError};

const PROBE: &str = "INSERT INTO meta (key, value) VALUES ('ready_probe_at', $1) \
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
/// Unfinished deliveries per endpoint, with the oldest one's received time.
const PENDING: &str = "SELECT d.endpoint, count(*), min(e.received_at) FROM deliveries d \
     JOIN events e ON e.id = d.event_id WHERE d.status IN ('pending', 'delivering') \
     GROUP BY d.endpoint";
const DEAD: &str =
    "SELECT endpoint, count(*) FROM deliveries WHERE status = 'dead' GROUP BY endpoint";

impl Pg {
    /// One durable write, committed.
    pub(in crate::store) async fn probe_write(&self, now_ms: i64) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(PROBE, &[&now_ms.to_string()])
            .await
            .map_err(error)?;
        Ok(())
    }

    /// The write probe commits: PostgreSQL's disk is its server's, and a full one fails it
    /// (`needed_free` is SQLite's question).
    pub(in crate::store) async fn readiness(
        &self,
        _needed_free: u64,
        now_ms: i64,
    ) -> Result<(), NotReady> {
        self.probe_write(now_ms).await.map_err(NotReady::Probe)
    }

    pub(in crate::store) async fn queue_stats(&self) -> Result<Vec<QueueStats>, StoreError> {
        let client = self.client().await?;
        let mut out: Vec<QueueStats> = Vec::new();
        for row in client.query(PENDING, &[]).await.map_err(error)? {
            out.push(QueueStats {
                endpoint: row.get(0),
                pending: row.get::<_, i64>(1) as u64,
                oldest_pending_ms: row.get(2),
                dead: 0,
            });
        }
        for row in client.query(DEAD, &[]).await.map_err(error)? {
            QueueStats::add_dead(&mut out, row.get(0), row.get::<_, i64>(1) as u64);
        }
        Ok(out)
    }
}
