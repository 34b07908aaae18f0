//! No 2xx leaves before its COMMIT returns: with the test-only hook that holds every fsync'd
//! COMMIT back (`PORTARIA_TEST_COMMIT_DELAY_MS`, debug builds only: `src/fault.rs`), the real
//! binary's 200 comes no earlier than the delay after the request, and the row is there, read
//! by a separate connection, the moment the 200 arrives.

use std::time::{Duration, Instant};

use crate::support::*;

const DELAY: Duration = Duration::from_millis(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_200_waits_for_the_commit_and_the_row_is_there_when_it_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let config = dir.path().join("portaria.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    let mut serve = portaria();
    serve
        .env(
            "PORTARIA_TEST_COMMIT_DELAY_MS",
            DELAY.as_millis().to_string(),
        )
        .args(["serve", "--config"])
        .arg(&config);
    let process = Process::spawn_command(serve).await;
    // A reader of its own, opened before the request: nothing stands between the answer and
    // the look at the table.
    let reader = open_db(&db);
    let stored = |key: &str| -> i64 {
        reader
            .query_row(
                "SELECT count(*) FROM events JOIN payloads ON event_id = id WHERE dedup_key = ?1",
                [key],
                |r| r.get(0),
            )
            .unwrap()
    };
    for n in 0..3 {
        let body = payment_body(n);
        let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
        let started = Instant::now();
        let reply = post_pagarme(process.addr, &body).await;
        let rows = stored(&key);
        let waited = started.elapsed();
        assert_eq!(reply.status, 200);
        assert_eq!(
            rows, 1,
            "event {n}: the row (and its payload) is there with the 200"
        );
        assert!(
            waited >= DELAY,
            "event {n}: answered after {waited:?}, before its COMMIT (held back {DELAY:?})"
        );
        eprintln!("commit order: event {n} answered after {waited:?}");
    }
}
