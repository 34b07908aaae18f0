//! Retention on PostgreSQL with several instances on one database, against a real PostgreSQL
//! (`pg_cluster`) and the real binary: the retention lock (one instance prunes at a time, the
//! others skip that pass; `portaria prune` says so), instances pruning on a short schedule
//! (`PORTARIA_TEST_PRUNE_EVERY_MS`) while old events keep arriving, each prunable event
//! deleted once with its dedup row (and, with an archive, archived once, by the instance that
//! deleted it), nothing undelivered touched. What may be pruned, the batches and restore are
//! the store's behaviour suite's, on both engines (`store_suite::retention`); that an archive
//! which cannot be written deletes nothing is `retention.rs`'s (the pass, archive then
//! delete, is the same code on both engines).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::pg_cluster;
use crate::support::postgres::{count, seed, until_count, write_config};
use crate::support::*;

/// The retention lock's key (docs/postgres.md).
const RETENTION_LOCK: i64 = 0x706f_7274_6172_6968;

/// The real binary serving `config`, pruning every 100 ms, its debug lines logged.
async fn pruning_instance(config: &Path) -> Process {
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(config)
        .env("PORTARIA_TEST_PRUNE_EVERY_MS", "100")
        .env("RUST_LOG", "info,portaria=debug");
    Process::spawn_command(serve).await
}

/// The events an instance's log says it pruned, summed over its passes.
fn pruned_in(log: &str) -> i64 {
    log.lines()
        .filter(|l| l.contains("pruned old events"))
        .filter_map(|l| {
            l.split("removed=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<i64>()
                .ok()
        })
        .sum()
}

/// Every line of the archive files in `dir`, oldest file first.
fn archived(dir: &Path) -> Vec<portaria::archive::Line> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| portaria::archive::read(f).unwrap().map(Result::unwrap))
        .collect()
}

/// How many passes an instance's log shows, whatever they found.
fn passes_in(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("pruned old events")
                || l.contains("nothing to prune")
                || l.contains("skipping this pass")
        })
        .count()
}

/// The kept events: pending and delivering however old, young finished ones.
async fn seed_kept(client: &tokio_postgres::Client) -> i64 {
    seed(client, "pagarme", "pending-", "pending", 400, 3).await
        + seed(client, "pagarme", "delivering-", "delivering", 400, 3).await
        + seed(client, "pagarme", "dead-young-", "dead", 60, 2).await
        + seed(client, "pagarme", "young-", "delivered", 2, 2).await
}

/// What must be left after pruning: exactly the kept events, each with its own rows.
async fn only_the_kept_are_left(client: &tokio_postgres::Client, kept: i64) {
    until_count(client, "SELECT count(*) FROM events", kept).await;
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM events WHERE dedup_key LIKE 'w%'"
        )
        .await,
        0
    );
    for (sql, want) in [
        (
            "SELECT count(*) FROM events WHERE status IN ('pending', 'delivering')",
            6,
        ),
        ("SELECT count(*) FROM dedup", kept),
        ("SELECT count(*) FROM payloads", kept),
        ("SELECT count(*) FROM deliveries", kept),
        ("SELECT count(*) FROM attempts", 2),
        (
            "SELECT count(*) FROM dedup d JOIN events e ON e.id = d.event_id \
             AND e.dedup_key = d.dedup_key",
            kept,
        ),
    ] {
        assert_eq!(count(client, sql).await, want, "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_is_skipped_while_another_session_holds_the_retention_lock() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pg.url(&db), "", "");
    // The dry run makes the schema (and needs no lock).
    assert!(ok_stdout(&run_cli(&["prune", "--dry-run"], &config)).starts_with("nothing"));
    let client = pg.connect(&db).await;
    seed(&client, "pagarme", "old-", "delivered", 40, 5).await;
    let holder = pg.connect(&db).await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&RETENTION_LOCK])
        .await
        .unwrap();

    // `portaria prune` says another instance is pruning, and deletes nothing.
    let out = run_cli(&["prune"], &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another portaria instance is pruning this database now"),
        "{stderr}"
    );
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 5);
    let dry = ok_stdout(&run_cli(&["prune", "--dry-run"], &config));
    assert!(dry.contains("would remove 5 event(s)"), "{dry}");

    // A server skips its passes while the lock is held (logged at debug)...
    let server = pruning_instance(&config).await;
    eventually(Duration::from_secs(10), "passes skipped", || {
        server
            .log
            .lock()
            .unwrap()
            .matches("skipping this pass")
            .count()
            >= 3
    })
    .await;
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 5);
    // ...and prunes at its next pass once the lock is free,
    holder
        .execute("SELECT pg_advisory_unlock($1)", &[&RETENTION_LOCK])
        .await
        .unwrap();
    until_count(&client, "SELECT count(*) FROM events", 0).await;
    assert_eq!(count(&client, "SELECT count(*) FROM dedup").await, 0);
    // and lets it go between its passes: another session gets it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let took: bool = holder
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RETENTION_LOCK])
            .await
            .unwrap()
            .get(0);
        if took {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server keeps the lock between passes"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let skipped = server
        .log
        .lock()
        .unwrap()
        .matches("skipping this pass")
        .count();
    eventually(Duration::from_secs(10), "skipped again", || {
        server
            .log
            .lock()
            .unwrap()
            .matches("skipping this pass")
            .count()
            > skipped
    })
    .await;
    assert_eq!(pruned_in(&server.log.lock().unwrap()), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_prune_on_schedule_and_each_event_goes_once() {
    two_instances_prune(false).await;
}

/// The same with an archive on each instance: each archives what it deletes, to its own
/// directory, and no event is archived twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_archive_each_pruned_event_once_where_it_was_pruned() {
    two_instances_prune(true).await;
}

/// Two instances pruning every 100 ms while waves of old events arrive, each with its own
/// `archive_dir` if `archive`: every prunable event deleted (and archived) once, by one of
/// them, its dedup row with it; nothing else touched.
async fn two_instances_prune(archive: bool) {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let url = pg.url(&db);
    let storage = if archive {
        "archive_dir = \"archive\""
    } else {
        ""
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (config_a, config_b) = (
        write_config(dir_a.path(), &url, storage, ""),
        write_config(dir_b.path(), &url, storage, ""),
    );
    let (a, b) = tokio::join!(pruning_instance(&config_a), pruning_instance(&config_b));
    let client = pg.connect(&db).await;
    let kept = seed_kept(&client).await;
    // Old finished events keep coming, in waves, while both prune every 100 ms.
    let mut prunable = 0;
    for wave in 0..9usize {
        let (status, age) = [("delivered", 40), ("stored", 31), ("dead", 100)][wave % 3];
        prunable += seed(&client, "pagarme", &format!("w{wave}-"), status, age, 700).await;
        tokio::time::sleep(Duration::from_millis(60 + 37 * (wave as u64 % 4))).await;
    }
    only_the_kept_are_left(&client, kept).await;
    // Each event was deleted once: what the two logged adds up to what there was.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (on_a, on_b) = loop {
        let (on_a, on_b) = (
            pruned_in(&a.log.lock().unwrap()),
            pruned_in(&b.log.lock().unwrap()),
        );
        if on_a + on_b == prunable {
            break (on_a, on_b);
        }
        assert!(
            Instant::now() < deadline,
            "pruned {on_a} + {on_b}, not {prunable}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Both go on with their passes on schedule (each finds nothing left, or the lock taken).
    let passes = |p: &Process| passes_in(&p.log.lock().unwrap());
    let before = [passes(&a), passes(&b)];
    eventually(Duration::from_secs(10), "both prune on schedule", || {
        passes(&a) >= before[0] + 3 && passes(&b) >= before[1] + 3
    })
    .await;
    if !archive {
        return;
    }
    // Each instance archived what it deleted, to its own directory, and no event twice.
    let lines_a = archived(&dir_a.path().join("archive"));
    let lines_b = archived(&dir_b.path().join("archive"));
    assert_eq!((lines_a.len() as i64, lines_b.len() as i64), (on_a, on_b));
    let mut keys: Vec<&str> = lines_a
        .iter()
        .chain(&lines_b)
        .map(|l| l.dedup_key.as_str())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len() as i64, prunable);
    assert!(keys.iter().all(|k| k.starts_with('w')), "{keys:?}");
    // A line holds the event in full: headers, body, outcome and attempts.
    let all: Vec<&portaria::archive::Line> = lines_a.iter().chain(&lines_b).collect();
    let dead = all.iter().find(|l| l.status == "dead").unwrap();
    assert_eq!(dead.body, format!("{{\"key\":\"{}\"}}", dead.dedup_key));
    assert_eq!(dead.headers, format!("x-test: {}\r\n", dead.dedup_key));
    assert_eq!(dead.event_type.as_deref(), Some("charge.paid"));
    assert_eq!(dead.attempt_log.len(), 1);
    assert_eq!(dead.attempt_log[0].outcome, "failed");
    assert_eq!(dead.attempt_log[0].error.as_deref(), Some("exit status 7"));
    let delivered = all.iter().find(|l| l.status == "delivered").unwrap();
    assert_eq!(delivered.attempt_log.len(), 1);
    assert_eq!(delivered.attempt_log[0].outcome, "delivered");
    assert_eq!(delivered.attempt_log[0].duration_ms, 15);
    let stored = all.iter().find(|l| l.status == "stored").unwrap();
    assert!(stored.attempt_log.is_empty());
}
