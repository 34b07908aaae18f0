//! Disk full, with real parts: the real binary, its database on a small tmpfs (mounted here;
//! skipped with a message where mounting is not allowed), filled to the last byte by a file
//! written beside the database. While full: webhooks get 503 with `Retry-After`, `/readyz`
//! says 503, the worker and the pruner stay alive without spinning (CPU time measured), and
//! nothing half-written is left. Once the file system is grown, intake and readiness come back
//! by themselves, and every event accepted is delivered. Where the tmpfs cannot be mounted
//! the test is skipped, unless `PORTARIA_REQUIRE_TMPFS=1` (CI), where it fails.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::faults::{
    age_rows, assert_recovered_whole, big_body, config, cpu_time, gated_recorder, readyz,
    tmpfs_or_skip, tmpfs_or_skip_unless,
};
use crate::support::*;

/// Appends to `filler` until the file system says it is full.
fn fill(filler: &Path) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(filler)
        .unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Whatever a partial last block left.
    while matches!(file.write(&[0u8]), Ok(1)) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gets_503_and_not_ready_then_recovers_by_itself_when_space_returns() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = tmpfs_or_skip(work.path(), "4m", "disk full") else {
        return;
    };
    let db = fs.dir.join("portaria.db");
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
    assert_eq!(readyz(&process).await, 200, "ready before the disk fills");
    age_rows(&db, 20, 40);

    // Fill the file system beside the database.
    let filler = fs.dir.join("filler");
    fill(&filler);
    // Pruning is due now (a reload that shortens retention runs a pass at once).
    std::fs::write(&config_path, config(&db, &script, MAX_BODY, 29)).unwrap();
    process.signal(libc::SIGHUP);

    // While full: each webhook (a body near the limit) is refused with 503 and Retry-After.
    // The filler takes back whatever SQLite gave up meanwhile, so the disk stays full.
    let mut refused = Vec::new();
    for n in 0..6 {
        fill(&filler);
        let body = big_body(n, MAX_BODY - 1024);
        let reply = post_pagarme(process.addr, &body).await;
        assert_eq!(
            reply.status, 503,
            "webhook {n} on a full disk: {}",
            reply.body
        );
        assert_eq!(reply.headers["retry-after"], "5");
        refused.push(body);
    }
    fill(&filler);
    assert_eq!(
        readyz(&process).await,
        503,
        "/readyz must not say ready while webhooks get 503"
    );

    // Neither the worker (three events due every second) nor the pruner spins or dies.
    let (cpu_before, clock) = (cpu_time(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (cpu, wall) = (cpu_time(pid) - cpu_before, clock.elapsed());
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    eprintln!(
        "disk full: {cpu:?} of CPU in {wall:?} ({:.1} %)",
        share * 100.0
    );
    assert!(
        share < 0.25,
        "busy while the disk is full: {cpu:?} in {wall:?}"
    );
    assert!(process.child.try_wait().unwrap().is_none(), "still running");
    let still_full = post_pagarme(process.addr, &big_body(99, MAX_BODY - 1024)).await;
    assert_eq!(still_full.status, 503);

    // Space returns: the file system grows. No restart.
    fs.resize("64m");
    let back = Instant::now();
    let body = big_body(100, MAX_BODY - 1024);
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
    eprintln!(
        "disk full: intake back {:?} after the remount",
        back.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while readyz(&process).await != 200 {
        assert!(Instant::now() < deadline, "/readyz did not say ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    assert_recovered_whole(process, &flag, &out, &db, body, &refused).await;
    drop(fs);
}

/// A tmpfs that cannot be mounted (its mount point would be under a file) fails the test
/// where it is required, and skips it elsewhere.
#[test]
fn a_tmpfs_that_cannot_be_mounted_fails_where_required_and_skips_elsewhere() {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    assert!(tmpfs_or_skip_unless(false, &file, "4m", "unmountable").is_none());
    let required = std::panic::catch_unwind(|| {
        tmpfs_or_skip_unless(true, &file, "4m", "unmountable");
    });
    let message = required.expect_err("a required tmpfs that cannot be mounted fails");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("unmountable: ") && message.contains("PORTARIA_REQUIRE_TMPFS=1"),
        "{message}"
    );
}
