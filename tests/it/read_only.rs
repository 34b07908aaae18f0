//! Read-only storage, with real parts: the real binary, its database on a FUSE passthrough
//! (`refusing_fs`) that starts refusing every change with EROFS while portaria runs, as a file
//! system forced read-only does, then takes them again. While read-only: webhooks get 503 with
//! `Retry-After`, `/readyz` says 503, the worker and the pruner stay alive without spinning,
//! and nothing half-written is left. Once writable: intake and readiness come back by
//! themselves, and every event accepted is delivered. Skipped with a message where FUSE cannot
//! be mounted, unless `PORTARIA_REQUIRE_FUSE=1` (CI).

use std::time::{Duration, Instant};

use crate::support::faults::{
    age_rows, assert_recovered_whole, config, cpu_time, gated_recorder, readyz,
};
use crate::support::refusing_fs::refusing_fs_or_skip;
use crate::support::*;

#[test]
fn the_passthrough_carries_sqlite_in_wal_mode_and_refuses_writes_while_read_only() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = refusing_fs_or_skip(work.path(), "read-only passthrough") else {
        return;
    };
    let db = fs.mountpoint.join("t.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch("PRAGMA synchronous = FULL; CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    // A second connection (another process would do the same) reads through the shared index.
    let other = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = other
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);

    fs.set_read_only(true);
    let refused = conn.execute("INSERT INTO t VALUES (2)", []).unwrap_err();
    eprintln!("read-only passthrough: SQLite says {refused}");
    assert!(fs.refused() > 0);
    assert!(std::fs::write(fs.mountpoint.join("new"), b"x").is_err());
    let n: i64 = other
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "reads go on, and the refused row is not there");

    fs.set_read_only(false);
    conn.execute("INSERT INTO t VALUES (3)", []).unwrap();
    let n: i64 = other
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    let check: String = other
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop((conn, other));
    drop(fs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_storage_gets_503_and_not_ready_then_recovers_by_itself_when_writable() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = refusing_fs_or_skip(work.path(), "read-only storage") else {
        return;
    };
    let db = fs.mountpoint.join("portaria.db");
    let (script, flag, out) = gated_recorder(work.path());
    const MAX_BODY: usize = 64 * 1024;
    let config_path = work.path().join("portaria.toml");
    std::fs::write(&config_path, config(&db, &script, MAX_BODY, 30)).unwrap();
    let mut process = Process::spawn(&config_path).await;
    let pid = process.child.id();

    // Before: accepted, queued (the target is down), ready.
    for n in 0..3 {
        assert_eq!(
            post_pagarme(process.addr, &payment_body(n)).await.status,
            200
        );
    }
    assert_eq!(
        readyz(&process).await,
        200,
        "ready before the storage turns read-only"
    );
    age_rows(&db, 20, 40);

    // The file system refuses every change from now on.
    fs.set_read_only(true);
    // Pruning is due now (a reload that shortens retention runs a pass at once).
    std::fs::write(&config_path, config(&db, &script, MAX_BODY, 29)).unwrap();
    process.signal(libc::SIGHUP);

    let mut refused = Vec::new();
    for n in 0..6 {
        let body = payment_body(1000 + n);
        let reply = post_pagarme(process.addr, &body).await;
        assert_eq!(
            reply.status, 503,
            "webhook {n} on read-only storage: {}",
            reply.body
        );
        assert_eq!(reply.headers["retry-after"], "5");
        refused.push(body);
    }
    assert_eq!(
        readyz(&process).await,
        503,
        "/readyz must not say ready while webhooks get 503"
    );

    // Neither the worker (three events due every second) nor the pruner spins or dies.
    // Each try at a write is a call the file system refuses, so they are counted too: the
    // worker tries once a second, the pruner after 5 s, then 10 s, ...
    let (cpu_before, refused_before, clock) = (cpu_time(pid), fs.refused(), Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (cpu, wall) = (cpu_time(pid) - cpu_before, clock.elapsed());
    let tries = fs.refused() - refused_before;
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    eprintln!(
        "read-only: {cpu:?} of CPU in {wall:?} ({:.1} %), {tries} writes refused",
        share * 100.0,
    );
    // A worker retrying at once instead of after 1 s: 24 % and 1600 refused writes here.
    assert!(
        share < 0.10,
        "busy while the storage is read-only: {cpu:?} in {wall:?}"
    );
    assert!(tries < 50, "{tries} writes tried in {wall:?}: a task spins");
    assert!(process.child.try_wait().unwrap().is_none(), "still running");
    let still = post_pagarme(process.addr, &payment_body(1099)).await;
    assert_eq!(still.status, 503);
    assert_eq!(readyz(&process).await, 503, "still not ready after 4 s");

    // The log says why: SQLite's "disk I/O error" alone does not tell a read-only file
    // system from a failing disk.
    let log = process.log.lock().unwrap().clone();
    assert!(
        log.contains("disk I/O error (Read-only file system (os error 30))"),
        "the log names the errno: {log}"
    );
    assert!(log.contains("not ready reason="), "/readyz logs its reason");
    // Writable again. No restart.
    fs.set_read_only(false);
    let back = Instant::now();
    let body = payment_body(2000);
    loop {
        let reply = post_pagarme(process.addr, &body).await;
        if reply.status == 200 {
            break;
        }
        assert_eq!(reply.status, 503);
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "intake did not come back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let intake_back = back.elapsed();
    let deadline = Instant::now() + Duration::from_secs(10);
    while readyz(&process).await != 200 {
        assert!(Instant::now() < deadline, "/readyz did not say ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "read-only: intake back {intake_back:?}, /readyz {:?} after writes were allowed again",
        back.elapsed()
    );

    assert_recovered_whole(process, &flag, &out, &db, body, &refused).await;
    drop(fs);
}
