//! SQLite's side of the admin listener's questions: the write probe and the queue figures,
//! both through the writer thread like every other query, so they see exactly what intake and
//! the worker see, and the probe needs the write lock; and the free space left on the
//! database's file system.

use std::path::Path;

use rusqlite::{Connection, params};

use super::Sqlite;
use crate::store::{NotReady, QueueStats, StoreError};

impl Sqlite {
    pub(in crate::store) async fn probe_write(&self, now_ms: i64) -> Result<(), StoreError> {
        self.run(move |conn| probe_write(conn, now_ms)).await
    }

    /// The file system has `needed_free` bytes available (one that cannot say, statvfs
    /// failing, is left to the probe), and the write probe commits.
    pub(in crate::store) async fn readiness(
        &self,
        needed_free: u64,
        now_ms: i64,
    ) -> Result<(), NotReady> {
        if let Some(free) = free_space(self.path())
            && free < needed_free
        {
            return Err(NotReady::LowSpace {
                free,
                needed: needed_free,
            });
        }
        self.probe_write(now_ms).await.map_err(NotReady::Probe)
    }

    /// Reads only the partial indexes `deliveries_queue` (with each entry's delivery row, for
    /// its status) and `deliveries_dead`, plus one event row per endpoint.
    pub(in crate::store) async fn queue_stats(&self) -> Result<Vec<QueueStats>, StoreError> {
        self.run(queue_stats).await
    }
}

/// Bytes this process may still write on the file system holding `db` (statvfs of its
/// directory): what is available to unprivileged users, or every free block for root, who may
/// use the reserved ones too. None if the file system does not say.
fn free_space(db: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let dir = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `dir` is a NUL-terminated path; `stat` is a plain struct statvfs fills in.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(dir.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    let blocks = if unsafe { libc::geteuid() } == 0 {
        stat.f_bfree
    } else {
        stat.f_bavail
    };
    Some((blocks as u64).saturating_mul(stat.f_frsize as u64))
}

fn probe_write(conn: &Connection, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES ('ready_probe_at', ?1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![now_ms])?;
    Ok(())
}

/// Unfinished deliveries per endpoint (one per event and route). The oldest is found by the
/// smallest event id (ids grow with arrival); the queue index holds every unfinished delivery
/// (and finished ones not yet cleared from it, skipped by their row's status: `queue.rs`);
/// only that one event row is read for its received time.
const PENDING: &str = "SELECT q.endpoint, q.n, e.received_at FROM \
     (SELECT endpoint, count(*) AS n, min(event_id) AS first FROM deliveries \
      INDEXED BY deliveries_queue WHERE next_attempt_at IS NOT NULL \
      AND status IN ('pending', 'delivering') GROUP BY endpoint) AS q \
     JOIN events AS e ON e.id = q.first";

const DEAD: &str =
    "SELECT endpoint, count(*) FROM deliveries WHERE status = 'dead' GROUP BY endpoint";

pub(super) fn queue_stats(conn: &Connection) -> rusqlite::Result<Vec<QueueStats>> {
    let mut out: Vec<QueueStats> = Vec::new();
    let mut pending = conn.prepare_cached(PENDING)?;
    let mut rows = pending.query([])?;
    while let Some(r) = rows.next()? {
        out.push(QueueStats {
            endpoint: r.get(0)?,
            pending: r.get::<_, i64>(1)? as u64,
            oldest_pending_ms: r.get(2)?,
            dead: 0,
        });
    }
    let mut dead = conn.prepare_cached(DEAD)?;
    let mut rows = dead.query([])?;
    while let Some(r) = rows.next()? {
        QueueStats::add_dead(&mut out, r.get(0)?, r.get::<_, i64>(1)? as u64);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("t.db")).unwrap();
        (dir, conn)
    }

    fn insert(conn: &Connection, endpoint: &str, key: &str, status: &str, received_at: i64) {
        conn.execute(
            "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
             status) VALUES (?1, ?2, ?5, 0, ?3, ?4)",
            params![
                endpoint,
                key,
                received_at,
                status,
                crate::store::dedup_hash(endpoint, key)
            ],
        )
        .unwrap();
        if status != "stored" {
            conn.execute(
                "INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at) \
                 VALUES (last_insert_rowid(), 'default', ?1, ?2, \
                 CASE WHEN ?2 IN ('pending', 'delivering') THEN ?3 END)",
                params![endpoint, status, received_at],
            )
            .unwrap();
        }
    }

    #[test]
    fn queue_stats_count_pending_and_dead_per_endpoint() {
        let (_dir, conn) = db();
        insert(&conn, "a", "1", "delivered", 100);
        insert(&conn, "a", "2", "pending", 200);
        insert(&conn, "a", "3", "delivering", 150);
        insert(&conn, "a", "4", "dead", 50);
        insert(&conn, "b", "1", "dead", 60);
        insert(&conn, "b", "2", "dead", 70);
        insert(&conn, "c", "1", "stored", 10);
        let mut stats = queue_stats(&conn).unwrap();
        stats.sort_unstable_by(|x, y| x.endpoint.cmp(&y.endpoint));
        assert_eq!(
            stats,
            vec![
                QueueStats {
                    endpoint: "a".into(),
                    pending: 2,
                    // The first to arrive (smallest id), not the smallest timestamp.
                    oldest_pending_ms: Some(200),
                    dead: 1
                },
                QueueStats {
                    endpoint: "b".into(),
                    pending: 0,
                    oldest_pending_ms: None,
                    dead: 2
                },
            ]
        );
    }

    #[test]
    fn queue_stats_read_indexes_not_the_table() {
        let (_dir, conn) = db();
        let plan = |sql: &str| -> String {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            stmt.query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let pending = plan(PENDING);
        // Not covering since version 6: each entry's status is read from its row.
        assert!(
            pending.contains("USING INDEX deliveries_queue"),
            "{pending}"
        );
        assert!(
            pending.contains("INTEGER PRIMARY KEY"),
            "one row by id: {pending}"
        );
        assert!(
            !pending.lines().any(|l| (l.starts_with("SCAN events")
                || l.starts_with("SCAN deliveries"))
                && !l.contains("INDEX")),
            "never the whole table: {pending}"
        );
        let dead = plan(DEAD);
        assert!(dead.contains("COVERING INDEX deliveries_dead"), "{dead}");
    }

    #[test]
    fn free_space_is_read_from_the_databases_directory() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_space(&dir.path().join("p.db")).unwrap();
        assert!(free > 0);
        assert!(
            free_space(Path::new("p.db")).is_some(),
            "a bare name: the current directory"
        );
        assert_eq!(free_space(Path::new("/no/such/dir/p.db")), None);
    }

    #[test]
    fn the_probe_rewrites_one_row() {
        let (_dir, conn) = db();
        probe_write(&conn, 1).unwrap();
        probe_write(&conn, 2).unwrap();
        let (n, value): (i64, i64) = conn
            .query_row("SELECT count(*), max(value) FROM meta", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((n, value), (1, 2));
    }
}
