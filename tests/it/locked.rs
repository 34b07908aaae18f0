//! The database locked by another process (`BEGIN EXCLUSIVE` held past the busy timeout) while
//! the forward worker has events due and the pruner has old events to remove: neither crashes
//! nor loses anything, both log the problem, and both finish once the lock is gone. (Intake
//! under the same lock: `receiver::a_locked_database_gets_503_within_about_5_s_and_nothing_is_kept`.)

use std::time::{Duration, Instant};

use crate::support::faults::{age_rows, assert_whole, config, delivered, gated_recorder};
use crate::support::*;

/// The longest the other process holds the lock: it lets go once both the worker and the
/// pruner have run into it (each fails after the busy timeout, 3 s, of waiting).
const HELD_AT_MOST: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_and_the_pruner_survive_a_lock_held_by_another_process_and_catch_up() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("portaria.db");
    let (script, flag, out) = gated_recorder(work.path());
    let config_path = work.path().join("portaria.toml");
    std::fs::write(&config_path, config(&db, &script, 4096, 30)).unwrap();
    let mut process = Process::spawn(&config_path).await;

    // Five events, due again every second (the target is down), and old ones to prune.
    for n in 0..5 {
        assert_eq!(
            post_pagarme(process.addr, &payment_body(n)).await.status,
            200
        );
    }
    age_rows(&db, 20, 40);

    // Another process takes the database; the target comes up and pruning becomes due
    // (a reload that shortens retention runs a pass at once) while it holds it.
    let blocker = open_db(&db);
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked_at = Instant::now();
    std::fs::write(&flag, b"").unwrap();
    std::fs::write(&config_path, config(&db, &script, 4096, 29)).unwrap();
    process.signal(libc::SIGHUP);
    assert_eq!(
        send(process.admin.unwrap(), "GET", "/readyz", &[], b"")
            .await
            .status,
        503,
        "not ready while the database is locked"
    );
    let log_has = |what: &str| process.log.lock().unwrap().contains(what);
    // The worker meets the lock either claiming (the queue) or, when a slot was mid-attempt as
    // the lock was taken, recording that attempt; both are retried, and what follows checks that
    // it catches up.
    let worker_met_lock = |log: &dyn Fn(&str) -> bool| {
        log("cannot read the delivery queue") || log("cannot record a delivery attempt")
    };
    while !(log_has("pruning failed") && worker_met_lock(&log_has)) {
        assert!(
            locked_at.elapsed() < HELD_AT_MOST,
            "the worker and the pruner log the lock: {}",
            process.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "locked: both ran into the lock within {:?}",
        locked_at.elapsed()
    );
    assert!(process.child.try_wait().unwrap().is_none(), "still running");
    assert!(
        delivered(&out).len() < 5,
        "nothing could be claimed under the lock"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    let released = Instant::now();

    eventually(Duration::from_secs(15), "every event delivered", || {
        (0..5).all(|n| delivered(&out).contains(&String::from_utf8(payment_body(n)).unwrap()))
    })
    .await;
    eprintln!(
        "locked: all delivered {:?} after the release ({} deliveries for 5 events)",
        released.elapsed(),
        delivered(&out).len()
    );
    eventually(
        Duration::from_secs(30),
        "the old events pruned by a later pass",
        || {
            count(
                &open_db(&db),
                "SELECT count(*) FROM events WHERE dedup_key LIKE 'old%'",
            ) == 0
        },
    )
    .await;
    eprintln!("locked: pruned {:?} after the release", released.elapsed());

    eventually(Duration::from_secs(5), "the pass is logged", || {
        process.log.lock().unwrap().contains("pruned old events")
    })
    .await;
    process.signal(libc::SIGTERM);
    assert!(process.wait(Duration::from_secs(20)).await.success());
    assert_whole(&db);
    let delivered_rows: i64 = open_db(&db)
        .query_row(
            "SELECT count(*) FROM events WHERE status = 'delivered' AND dedup_key NOT LIKE 'old%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(delivered_rows, 5, "every event recorded as delivered");
}
