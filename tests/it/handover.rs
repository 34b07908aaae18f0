//! A webhook answered 503 is never committed afterwards, and one the writer took is answered
//! with its real outcome (issue 23, `src/store/handover.rs`): the real binary, with the
//! test-only hooks that shorten intake's deadline (`PORTARIA_TEST_STORE_DEADLINE_MS`) and hold
//! the writer's COMMIT (`PORTARIA_TEST_COMMIT_DELAY_MS`), and a write lock held by the test.

use std::time::{Duration, Instant};

use crate::support::*;

/// Intake's deadline in these tests (5 s in production).
const DEADLINE: Duration = Duration::from_millis(800);

/// The binary on a fresh database, with `env` set; its config and database paths.
async fn serve(dir: &std::path::Path, env: &[(&str, String)]) -> (Process, std::path::PathBuf) {
    let db = dir.join("portaria.db");
    let config = dir.join("portaria.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    let mut command = portaria();
    command.args(["serve", "--config"]).arg(&config).env(
        "PORTARIA_TEST_STORE_DEADLINE_MS",
        DEADLINE.as_millis().to_string(),
    );
    for (k, v) in env {
        command.env(k, v);
    }
    (Process::spawn_command(command).await, db)
}

/// The rows of `body`'s event (pagarme's dedup key is the body's SHA-256).
fn rows_of(db: &std::path::Path, body: &[u8]) -> i64 {
    let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
    open_db(db)
        .query_row(
            "SELECT count(*) FROM events WHERE dedup_key = ?1",
            [key],
            |r| r.get(0),
        )
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_answered_503_is_never_stored_afterwards_and_the_retry_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let (process, db) = serve(dir.path(), &[]).await;
    assert_eq!(
        post_pagarme(process.addr, &payment_body(0)).await.status,
        200
    );

    // Another process holds the write lock: the writer waits for it (busy timeout, 3 s),
    // past the request's deadline, with the insert not yet taken.
    let blocker = open_db(&db);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = payment_body(1);
    let started = Instant::now();
    let reply = post_pagarme(process.addr, &refused).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.headers["retry-after"], "5");
    assert!(
        waited < Duration::from_secs(3),
        "answered at the deadline, not the busy timeout: {waited:?}"
    );
    // The lock goes while the writer still waits for it: it begins, and finds the insert
    // given up.
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);

    // Another webhook, queued behind it: once it is stored, the writer is past the refused one.
    assert_eq!(
        post_pagarme(process.addr, &payment_body(2)).await.status,
        200
    );
    assert_eq!(
        rows_of(&db, &refused),
        0,
        "the webhook answered 503 was committed after all"
    );

    // The gateway retries: stored now, once, as a new event (not a duplicate of a ghost).
    let reply = post_pagarme(process.addr, &refused).await;
    assert_eq!(reply.status, 200);
    assert_eq!(rows_of(&db, &refused), 1);
    eventually(Duration::from_secs(5), "the retry's log line", || {
        process
            .log
            .lock()
            .unwrap()
            .matches("duplicate=false")
            .count()
            == 3
    })
    .await;
    let log = process.log.lock().unwrap().clone();
    assert!(!log.contains("duplicate=true"), "{log}");
    assert!(log.contains("not taken for a commit within 800ms"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_the_writer_took_is_answered_with_its_real_outcome_past_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // Every fsync'd COMMIT is held back twice the deadline: the writer takes the insert at
    // once, and its COMMIT comes well after the request's deadline.
    let hold = DEADLINE * 2;
    let (process, db) = serve(
        dir.path(),
        &[(
            "PORTARIA_TEST_COMMIT_DELAY_MS",
            hold.as_millis().to_string(),
        )],
    )
    .await;
    // Start-up's own writer jobs (the first pruning pass) are delayed as well: once a webhook
    // gets its 200, the writer is idle.
    let started = Instant::now();
    while post_pagarme(process.addr, &payment_body(100)).await.status != 200 {
        assert!(started.elapsed() < Duration::from_secs(30), "never stored");
    }
    let reader = open_db(&db);
    for n in 0..2 {
        let body = payment_body(n);
        let started = Instant::now();
        let reply = post_pagarme(process.addr, &body).await;
        let waited = started.elapsed();
        assert_eq!(reply.status, 200, "event {n}: {}", reply.body);
        assert!(waited >= hold, "event {n}: answered after {waited:?}");
        let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
        let rows: i64 = reader
            .query_row(
                "SELECT count(*) FROM events WHERE dedup_key = ?1",
                [key],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 1, "event {n}: stored, as its 200 says");
    }
    // The same event again: taken, and answered as what it is, a duplicate.
    let reply = post_pagarme(process.addr, &payment_body(0)).await;
    assert_eq!(reply.status, 200);
    eventually(Duration::from_secs(5), "the duplicate's log line", || {
        process.log.lock().unwrap().contains("duplicate=true")
    })
    .await;
}

/// The same on PostgreSQL: every committer held by a lock the test takes on `dedup`, so the
/// next webhook waits in the queue, untaken, past its deadline (503), while the ones the
/// committers took wait past theirs and get their real answer (200) once the lock goes; the
/// 503 one is never stored, and its retry is, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_a_webhook_answered_503_is_never_stored_and_a_taken_one_gets_its_answer() {
    use crate::support::postgres::{config, count};
    let Some(pg) = crate::support::pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portaria.toml");
    std::fs::write(&path, config(&format!("url = \"{}\"", pg.url(&db)), "")).unwrap();
    let mut command = portaria();
    command.args(["serve", "--config"]).arg(&path).env(
        "PORTARIA_TEST_STORE_DEADLINE_MS",
        DEADLINE.as_millis().to_string(),
    );
    let process = Process::spawn_command(command).await;
    let client = pg.connect(&db).await;
    let stored = |body: Vec<u8>| {
        let client = &client;
        async move {
            client
                .query_one("SELECT count(*) FROM payloads WHERE body = $1", &[&body])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        post_pagarme(process.addr, &payment_body(0)).await.status,
        200
    );

    // Hold every committer (4): a lock on `dedup` that their inserts wait for, well inside
    // their 4 s lock timeout. One blocker at a time, each seen waiting in PostgreSQL.
    let waiting = "SELECT count(*) FROM pg_stat_activity \
         WHERE application_name = 'portaria' AND wait_event_type = 'Lock'";
    let mut locker = pg.connect(&db).await;
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE dedup IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let started = Instant::now();
    let mut blockers = Vec::new();
    for n in 1..=4 {
        let addr = process.addr;
        blockers.push(tokio::spawn(async move {
            post_pagarme(addr, &payment_body(n)).await.status
        }));
        let deadline = Instant::now() + Duration::from_secs(2);
        while count(&client, waiting).await < n as i64 {
            assert!(Instant::now() < deadline, "blocker {n} not taken");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // The next one waits in the queue, untaken, past its deadline.
    let refused = payment_body(9);
    let reply = post_pagarme(process.addr, &refused).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    lock.rollback().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "released inside the lock timeout"
    );
    for blocker in blockers {
        assert_eq!(blocker.await.unwrap(), 200, "taken: its real answer");
    }
    assert!(started.elapsed() > DEADLINE);

    // Another webhook after the 503: once it is stored, the committers are past the refused one.
    assert_eq!(
        post_pagarme(process.addr, &payment_body(10)).await.status,
        200
    );
    assert_eq!(
        stored(refused.clone()).await,
        0,
        "the webhook answered 503 was committed after all"
    );
    assert_eq!(post_pagarme(process.addr, &refused).await.status, 200);
    assert_eq!(stored(refused).await, 1);
}
