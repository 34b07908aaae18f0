//! `portaria archive replay` and `portaria backup` on PostgreSQL, with the real binary against
//! a real PostgreSQL (`pg_cluster`): pruned events archived by `portaria prune`, put back by
//! the replay as SQLite's rules say (a new event for a key no longer known, the key's newest
//! finished event reset otherwise, nothing while one of the key's events is on its way), and
//! delivered at once by a running instance (woken by `NOTIFY`, not by its slow check).

use std::path::PathBuf;
use std::time::Duration;

use crate::support::pg_cluster;
use crate::support::postgres::{count, until_count};
use crate::support::postgres::{seed, write_config};
use crate::support::*;

const DAY_MS: i64 = 86_400_000;

/// The one archive file in `dir`.
fn archive_file(dir: &std::path::Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

async fn id_of(client: &tokio_postgres::Client, object: &str) -> i64 {
    client
        .query_one(
            "SELECT max(id) FROM events WHERE object_id = $1",
            &[&object],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_events_come_back_through_the_store_and_are_delivered_at_once() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let target = Target::start(vec![200]).await;
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let forward = format!(
        "forward = {{ url = \"http://{}/hook\" }}\nretry = [\"1s\"]",
        target.addr
    );
    let config = write_config(
        dir.path(),
        &pg.url(&db),
        "archive_dir = \"archive\"",
        &forward,
    );
    // The running instance hears of a replay only by NOTIFY: its slow check is a minute away.
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("PORTARIA_TEST_EXTERNAL_CHECK_MS", "60000");
    let server = Process::spawn_command(serve).await;
    let client = pg.connect(&db).await;
    for n in [1, 2] {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        2,
    )
    .await;
    let first_ids = (id_of(&client, "ch_1").await, id_of(&client, "ch_2").await);
    // Forty days pass; an event of an endpoint this config does not have ages out too.
    client
        .execute(
            "UPDATE events SET received_at = received_at - $1",
            &[&(40 * DAY_MS)],
        )
        .await
        .unwrap();
    seed(&client, "github", "gh-", "stored", 40, 1).await;

    let pruned = ok_stdout(&run_cli(&["prune"], &config));
    assert!(pruned.contains("removed 3 event(s)"), "{pruned}");
    assert!(pruned.contains("archived to "), "{pruned}");
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 0);
    assert_eq!(count(&client, "SELECT count(*) FROM dedup").await, 0);
    let file = archive_file(&dir.path().join("archive"));
    let file_arg = file.to_str().unwrap();
    // The gateway sends the second one again after pruning: a new event, delivered.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
    eventually(Duration::from_secs(10), "the resend delivered", || {
        target.count() == 3
    })
    .await;
    until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        1,
    )
    .await;
    let resent = id_of(&client, "ch_2").await;

    // The first replay: a new event for the key no longer known, the resent one reset.
    let out = ok_stdout(&run_cli(&["archive", "replay", file_arg], &config));
    assert!(
        out.contains("2 event(s) pending again (1 new, 1 reset)"),
        "{out}"
    );
    assert!(
        out.contains("1 skipped: endpoint `github` is not configured or does not forward"),
        "{out}"
    );
    eventually(Duration::from_secs(10), "both delivered again", || {
        target.count() == 5
    })
    .await;
    let mut bodies: Vec<Vec<u8>> = target.seen.lock().unwrap()[3..]
        .iter()
        .map(|r| r.body.to_vec())
        .collect();
    bodies.sort();
    assert_eq!(bodies, [payment_body(1), payment_body(2)]);
    until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        2,
    )
    .await;
    // Never a second row for a key: two events, two barrier rows.
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 2);
    assert_eq!(count(&client, "SELECT count(*) FROM dedup").await, 2);
    let restored = id_of(&client, "ch_1").await;
    assert!(
        restored > first_ids.1,
        "a new id: {restored} after {first_ids:?}"
    );
    assert_eq!(
        id_of(&client, "ch_2").await,
        resent,
        "the resent event, reset"
    );
    // The restored event keeps its received time; the reset one keeps its first delivery.
    let received: i64 = client
        .query_one("SELECT received_at FROM events WHERE id = $1", &[&restored])
        .await
        .unwrap()
        .get(0);
    assert!(received < now_secs() * 1000 - 39 * DAY_MS, "{received}");
    let shown = ok_stdout(&run_cli(&["events", "show", &resent.to_string()], &config));
    assert_eq!(shown.matches(": delivered\n").count(), 2, "{shown}");

    // A key with an older event still on its way (a dedup window lets a key have several):
    // left alone. The other key's newest event is reset again.
    client
        .execute(
            "WITH e AS (INSERT INTO events (endpoint, dedup_key, payload_bytes, received_at, \
               status) SELECT endpoint, dedup_key, 0, received_at - 1000, 'pending' \
               FROM events WHERE id = $1 RETURNING id, endpoint) \
             INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at) \
             SELECT id, 'elsewhere', endpoint, 'pending', $2 FROM e",
            &[&restored, &(now_secs() * 1000 + DAY_MS)],
        )
        .await
        .unwrap();
    let out = ok_stdout(&run_cli(&["archive", "replay", file_arg], &config));
    assert!(
        out.contains("1 event(s) pending again (0 new, 1 reset)"),
        "{out}"
    );
    assert!(
        out.contains("1 already pending or being delivered: left alone"),
        "{out}"
    );
    eventually(Duration::from_secs(10), "the reset one delivered", || {
        target.count() == 6
    })
    .await;
    assert_eq!(
        target.seen.lock().unwrap()[5].body.to_vec(),
        payment_body(2)
    );
    let status: String = client
        .query_one("SELECT status FROM events WHERE id = $1", &[&restored])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "delivered", "left alone");

    // --endpoint filters; an unknown endpoint is refused.
    let out = ok_stdout(&run_cli(
        &["archive", "replay", file_arg, "--endpoint", "pagarme"],
        &config,
    ));
    assert!(out.contains("already pending or being delivered"), "{out}");
    let out = run_cli(
        &["archive", "replay", file_arg, "--endpoint", "nope"],
        &config,
    );
    assert_eq!(out.status.code(), Some(1));
    drop(server);
}
