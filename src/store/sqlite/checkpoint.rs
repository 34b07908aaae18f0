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
//!
//! One pass per cycle, and a short tail (issue 17): the hook nudges the thread once when the
//! log passes the threshold, and again only after the log has started over (or the writer's
//! tail could not finish it), not after every commit past it: each pass ends with an fsync of
//! the database file, and passes run back to back made the writer's own tail lose the race
//! (busy) again and again while they competed with its commits' fsyncs. The thread passes
//! again while its last pass copied more than [`TAIL_PAGES`] (a busy writer commits about a
//! thousand pages during a 20 ms pass), so that the writer's tail, which every request in
//! flight waits for, copies what a short pass let through, not a long one.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::StoreError;

/// Log pages (1 KiB each) after which the checkpointer is nudged: 16 MiB of WAL.
pub const CHECKPOINT_PAGES: i32 = 16384;

/// The thread passes again while its last pass copied more log pages than this, so that the
/// writer's tail (what was committed during the thread's last pass) is short.
const TAIL_PAGES: i64 = 256;

/// Passes the thread makes for one nudge at most (a reader's snapshot can hold the copy back
/// for as long as it lasts; the writer's tail and the next nudge take over then).
const PASSES_PER_NUDGE: u32 = 4;

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
    /// The hook may nudge: set while the log is under the threshold, and again when a pass or
    /// the writer's tail could not copy it all; cleared by the nudge it sends.
    armed: AtomicBool,
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
        let progress = Arc::new(Progress {
            armed: AtomicBool::new(true),
            ..Progress::default()
        });
        let hook_progress = progress.clone();
        // Replaces SQLite's own auto-checkpoint (the two share one hook).
        writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages < CHECKPOINT_PAGES {
                // The log started over (or has not reached the threshold yet).
                hook_progress.armed.store(true, Ordering::Release);
            } else if hook_progress.armed.swap(false, Ordering::AcqRel)
                // Full means a nudge is already waiting: nothing to add.
                && hook_nudge.try_send(()).is_ok()
            {
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
            let done = pass(writer, "checkpoint tail");
            match done {
                // All copied: the next transaction starts the log over.
                Ok(Pass {
                    busy: false,
                    log,
                    copied,
                }) if log == copied => {}
                // The thread is in a pass, or a reader's snapshot holds the copy back: the
                // next commit nudges the thread again.
                Ok(_) => self.progress.armed.store(true, Ordering::Release),
                Err(e) => {
                    tracing::warn!(error = %e, "finishing a checkpoint failed");
                    self.progress.armed.store(true, Ordering::Release);
                }
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
        if copy_until_short(&conn, progress).is_some() {
            // The writer copies what was committed during the passes.
            progress.caught_up.store(true, Ordering::Release);
        }
        progress.passes.fetch_add(1, Ordering::AcqRel);
    }
    let _ = conn.close();
}

/// Passes until one copies no more than [`TAIL_PAGES`] (the one before it was short, so little
/// can have been committed meanwhile), at most [`PASSES_PER_NUDGE`]; the passes made. None
/// when a pass was busy (the writer's tail is copying) or failed: the hook is armed again
/// instead.
fn copy_until_short(conn: &Connection, progress: &Progress) -> Option<u32> {
    let mut before = 0;
    for made in 1..=PASSES_PER_NUDGE {
        match pass(conn, "checkpoint") {
            Ok(Pass {
                busy: false,
                copied,
                ..
            }) if copied - before > TAIL_PAGES => before = copied,
            Ok(Pass { busy: false, .. }) => return Some(made),
            Ok(Pass { busy: true, .. }) => {
                progress.armed.store(true, Ordering::Release);
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint failed; the next nudge tries again");
                progress.armed.store(true, Ordering::Release);
                return None;
            }
        }
    }
    Some(PASSES_PER_NUDGE)
}

/// What one `PRAGMA wal_checkpoint(PASSIVE)` did: `busy` when another connection was
/// checkpointing; `log` pages in the WAL, `copied` of them in the database file.
struct Pass {
    busy: bool,
    log: i64,
    copied: i64,
}

/// One PASSIVE checkpoint, logged at debug level as `what` with its time.
fn pass(conn: &Connection, what: &'static str) -> rusqlite::Result<Pass> {
    let started = std::time::Instant::now();
    let pass = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok(Pass {
            busy: r.get::<_, i64>(0)? != 0,
            log: r.get(1)?,
            copied: r.get(2)?,
        })
    })?;
    let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    tracing::debug!(
        log = pass.log,
        copied = pass.copied,
        busy = pass.busy,
        us,
        "{what}"
    );
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use rusqlite::params;

    use super::super::schema;
    use super::*;
    use crate::store::{Store, dedup_hash};

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

    /// Commits batches from `first` until the hook has sent `nudges` nudges in all, waits for
    /// the pass, checks that it sent no more, and returns the next batch number.
    fn fill_until_nudged(
        conn: &Connection,
        checkpointer: &Checkpointer,
        first: u64,
        nudges: u64,
    ) -> u64 {
        let sent = || checkpointer.progress.nudges.load(Ordering::Acquire);
        let mut batch = first;
        while sent() < nudges {
            insert_batch(conn, batch);
            batch += 1;
            assert!(batch - first < 1_000, "the log never passed the threshold");
        }
        wait_for_the_pass(checkpointer);
        assert_eq!(sent(), nudges);
        batch
    }

    /// Commits a batch and opens a read transaction on it from another connection: its
    /// snapshot is in the log until the returned connection commits.
    fn pin_the_log(conn: &Connection, path: &Path) -> Connection {
        insert_batch(conn, 0);
        let reader = Connection::open(path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        reader
    }

    // A long pass is followed by another (the writer committed meanwhile), a short one is not.
    #[test]
    fn a_pass_that_copied_much_is_followed_by_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let conn = schema::open(&path).unwrap();
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
        let thread = Connection::open(&path).unwrap();
        let progress = Progress::default();
        // Three batches, over 400 pages: the first pass copies more than the tail's worth, so
        // it is followed by a second (which finds nothing new here).
        for batch in 0..3 {
            insert_batch(&conn, batch);
        }
        assert_eq!(copy_until_short(&thread, &progress), Some(2));
        // A short first pass is the last.
        conn.execute_batch("INSERT INTO meta (key, value) VALUES ('k', 'v')")
            .unwrap();
        assert_eq!(copy_until_short(&thread, &progress), Some(1));
        assert!(!progress.armed.load(Ordering::Acquire));
    }

    // Each pass fsyncs the database file: commits past the threshold must not each nudge
    // another pass while the writer has not yet copied the tail and started the log over.
    #[test]
    fn the_hook_nudges_once_per_cycle_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let mut conn = schema::open(&path).unwrap();
        let checkpointer = Checkpointer::start(&path, &mut conn).unwrap();
        let progress = checkpointer.progress.clone();
        // A reader's snapshot in the log keeps it from starting over (which a commit after a
        // pass that copied everything would otherwise do by itself).
        let reader = pin_the_log(&conn, &path);
        let mut batch = fill_until_nudged(&conn, &checkpointer, 1, 1);
        // More commits past the threshold, the tail not yet finished: no new nudge.
        for _ in 0..5 {
            insert_batch(&conn, batch);
            batch += 1;
            wait_for_the_pass(&checkpointer);
        }
        assert_eq!(
            progress.nudges.load(Ordering::Acquire),
            1,
            "commits past the threshold nudged again before the log started over"
        );
        // The reader done, the writer's tail copies the rest; the next transaction starts the
        // log over, and the next crossing of the threshold nudges once more.
        reader.execute_batch("COMMIT").unwrap();
        checkpointer.finish_pass(&conn);
        insert_batch(&conn, batch);
        batch += 1;
        assert!(
            pass(&conn, "test").unwrap().log < i64::from(CHECKPOINT_PAGES) / 2,
            "the log started over"
        );
        fill_until_nudged(&conn, &checkpointer, batch, 2);
        checkpointer.stop(&mut conn);
    }

    // A reader's snapshot holds the copy back: the writer's tail cannot finish the log, so the
    // hook must be armed again, or the log would grow with no pass ever nudged again (it can
    // only start over once a pass has copied it all).
    #[test]
    fn a_tail_that_cannot_finish_arms_the_next_nudge() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let mut conn = schema::open(&path).unwrap();
        let checkpointer = Checkpointer::start(&path, &mut conn).unwrap();
        let progress = checkpointer.progress.clone();
        // Nothing committed after the reader's snapshot can be copied, and the log cannot start
        // over while it lasts.
        let reader = pin_the_log(&conn, &path);
        let batch = fill_until_nudged(&conn, &checkpointer, 1, 1);
        checkpointer.finish_pass(&conn);
        assert!(
            progress.armed.load(Ordering::Acquire),
            "an unfinished tail arms the hook again"
        );
        insert_batch(&conn, batch);
        wait_for_the_pass(&checkpointer);
        assert_eq!(
            progress.nudges.load(Ordering::Acquire),
            2,
            "the next commit past the threshold nudged the thread again"
        );
        // Once the reader is done, a pass and the tail finish the log, and it starts over.
        reader.execute_batch("COMMIT").unwrap();
        checkpointer.finish_pass(&conn);
        insert_batch(&conn, batch + 1);
        wait_for_the_pass(&checkpointer);
        checkpointer.finish_pass(&conn);
        insert_batch(&conn, batch + 2);
        let log = pass(&conn, "test").unwrap().log;
        assert!(
            log < i64::from(CHECKPOINT_PAGES) / 2,
            "the log started over once the reader was done ({log} pages)"
        );
        checkpointer.stop(&mut conn);
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
