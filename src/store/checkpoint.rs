//! The checkpointer: a thread with a connection of its own that copies the WAL back into the
//! database file, so that the writer never does it in the middle of a commit.
//!
//! SQLite's default is to checkpoint from whichever connection commits past the threshold,
//! which would stall every request of that batch for the whole copy (tens of milliseconds with
//! an 8 MiB WAL). Instead the writer's WAL hook nudges this thread once the log holds
//! [`CHECKPOINT_PAGES`] pages, and it runs a PASSIVE checkpoint: it copies what no reader still
//! needs and never blocks the writer.
//!
//! The WAL can only start over when it is *completely* copied at the moment the writer begins
//! a transaction, and under a steady load the writer has always committed more by the time a
//! background pass ends. So after each pass the writer finishes the job between two batches:
//! its own PASSIVE checkpoint copies only what was committed during the pass (a few
//! milliseconds' worth), and its next transaction starts the log over.
//!
//! The threshold is a trade: a longer log means a page written many times (the hot pages of the
//! dedup index) is copied to the database once per checkpoint rather than once per commit,
//! which is most of what an SD card is spared.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::StoreError;

/// Log pages (1 KiB each) after which the checkpointer is nudged: 16 MiB of WAL.
pub const CHECKPOINT_PAGES: i32 = 16384;

/// The writer's end: nudges the checkpointer from the WAL hook, and stops it when dropped.
pub(super) struct Checkpointer {
    nudge: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    progress: Arc<Progress>,
}

/// What the hook, the thread and the writer share.
#[derive(Default)]
struct Progress {
    /// Set by the thread after a pass: the writer should copy the rest itself.
    caught_up: AtomicBool,
    /// Nudges the hook sent, and the passes the thread ended (one per nudge, failed or not):
    /// equal when no pass is waiting or running.
    nudges: AtomicU64,
    passes: AtomicU64,
}

impl Checkpointer {
    /// Starts the thread on its own connection to `path` (whose schema `open` already made),
    /// and installs the hook on the writer's connection.
    pub(super) fn start(path: &Path, writer: &mut Connection) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path)?;
        // A checkpoint syncs the database file only when synchronous is on.
        conn.execute_batch("PRAGMA synchronous = FULL")?;
        let (nudge, nudged) = mpsc::sync_channel::<()>(1);
        let hook_nudge = nudge.clone();
        let progress = Arc::new(Progress::default());
        let hook_progress = progress.clone();
        // Replaces SQLite's own auto-checkpoint (the two share one hook).
        writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            // Full means a nudge is already waiting: nothing to add.
            if pages >= CHECKPOINT_PAGES && hook_nudge.try_send(()).is_ok() {
                hook_progress.nudges.fetch_add(1, Ordering::AcqRel);
            }
            Ok(())
        }))?;
        let thread_progress = progress.clone();
        let thread = std::thread::Builder::new()
            .name("portaria-checkpoint".into())
            .spawn(move || run(conn, nudged, &thread_progress))
            .map_err(|e| StoreError::Sqlite(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            nudge: Some(nudge),
            thread: Some(thread),
            progress,
        })
    }

    /// Called by the writer between batches (no transaction open): after a background pass,
    /// copies what was committed during it, so that the next transaction starts the log over.
    pub(super) fn finish_pass(&self, writer: &Connection) {
        if self.progress.caught_up.swap(false, Ordering::AcqRel) {
            let done: rusqlite::Result<i64> =
                writer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(0));
            if let Err(e) = done {
                tracing::warn!(error = %e, "finishing a checkpoint failed");
            }
        }
    }

    /// Stops the thread and closes its connection, so that the writer's connection is the last
    /// one and its close checkpoints and removes the WAL.
    pub(super) fn stop(mut self, writer: &mut Connection) {
        let _ = writer.wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>);
        self.nudge.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: Connection, nudged: mpsc::Receiver<()>, progress: &Progress) {
    crate::fault::panic_if("panic-checkpoint");
    // Ends when the writer drops its sender (and the hook's clone with `wal_hook(None)`).
    while nudged.recv().is_ok() {
        let done: rusqlite::Result<(i64, i64, i64)> =
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            });
        match done {
            Ok((_, log, copied)) => {
                tracing::debug!(log, copied, "checkpoint");
                progress.caught_up.store(true, Ordering::Release);
            }
            Err(e) => tracing::warn!(error = %e, "checkpoint failed; the next nudge tries again"),
        }
        progress.passes.fetch_add(1, Ordering::AcqRel);
    }
    let _ = conn.close();
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use rusqlite::params;

    use super::super::{Store, dedup_hash, schema};
    use super::*;

    /// Inserts 100 events of 1 KB in one transaction, as a writer batch would.
    fn insert_batch(conn: &Connection, batch: u64) {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut insert = conn
            .prepare_cached(
                "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                 received_at, status) VALUES ('e', ?1, ?2, 1000, 0, 'stored')",
            )
            .unwrap();
        let mut payload = conn
            .prepare_cached(
                "INSERT INTO payloads (event_id, headers, body) \
                 VALUES (last_insert_rowid(), x'', zeroblob(1000))",
            )
            .unwrap();
        for n in 0..100 {
            let key = format!("{batch}-{n}");
            insert.execute(params![key, dedup_hash("e", &key)]).unwrap();
            payload.execute([]).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    /// Waits until every nudge sent has had its pass.
    fn wait_for_the_pass(checkpointer: &Checkpointer) {
        let progress = &checkpointer.progress;
        let deadline = Instant::now() + Duration::from_secs(30);
        while progress.passes.load(Ordering::Acquire) < progress.nudges.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "a checkpoint pass took over 30 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    // Drives the writer's side by hand, as `writer::run` does (a batch, then `finish_pass`),
    // and waits for a pass the batch nudged before the next batch: how much a writer commits
    // while the thread copies is a matter of scheduling (on a loaded machine the thread may
    // not run for a long while, and the log then grows past any bound), so it is taken out.
    // What is left is the mechanism: the hook nudges, the thread copies, the log starts over.
    #[test]
    fn the_checkpoint_thread_keeps_the_wal_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let mut conn = schema::open(&path).unwrap();
        let checkpointer = Checkpointer::start(&path, &mut conn).unwrap();
        let wal = dir.path().join("p.db-wal");
        let mut largest = 0;
        // Four times the checkpoint threshold in events of 1 KB, 100 per commit.
        let threshold = CHECKPOINT_PAGES as u64 * 1024;
        for batch in 0..(4 * threshold / 100_000) {
            insert_batch(&conn, batch);
            wait_for_the_pass(&checkpointer);
            checkpointer.finish_pass(&conn);
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        let passes = checkpointer.progress.passes.load(Ordering::Acquire);
        assert!(
            passes >= 2,
            "the test wrote enough to need checkpoints ({passes} passes)"
        );
        assert!(
            largest > threshold / 2,
            "the test wrote enough to need checkpoints"
        );
        assert!(
            largest < 3 * threshold,
            "the WAL started over: at most {largest} bytes"
        );
        checkpointer.stop(&mut conn);
        conn.close().unwrap();
        assert!(!wal.exists(), "closing checkpoints and removes the WAL");
    }

    #[tokio::test]
    async fn the_store_uses_small_pages_and_closing_it_removes_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let store = Store::open(&path).unwrap();
        let wal = dir.path().join("p.db-wal");
        store
            .run(|conn| {
                conn.execute(
                    "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, \
                     received_at, status) VALUES ('e', 'k', ?1, 0, 0, 'stored')",
                    params![dedup_hash("e", "k")],
                )
            })
            .await
            .unwrap();
        assert!(wal.exists(), "the store writes through the WAL");
        let pages: i64 = store
            .run(|c| c.query_row("PRAGMA page_size", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(pages, 1024);
        store.close();
        assert!(!wal.exists(), "closing checkpoints and removes the WAL");
    }
}
