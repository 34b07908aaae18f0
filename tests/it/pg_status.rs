//! The read side on PostgreSQL, against a real PostgreSQL (`pg_cluster`) and two instances on
//! one database: the object id and the hourly counters every instance adds to, the status
//! page's API (an event accepted by one instance seen and replayed through the other), and
//! `portaria events list/show/replay` with the real binary.

use std::time::{Duration, Instant};

use crate::pg_cluster;
use crate::postgres::{count, server};
use crate::support::*;

/// Polls `sql` (one bigint) until it is `want`, or panics after 15 s.
async fn until_count(client: &tokio_postgres::Client, sql: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n = count(client, sql).await;
        if n == want {
            return;
        }
        assert!(Instant::now() < deadline, "{sql}: {n}, not {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn bad_signature(addr: std::net::SocketAddr) {
    let bad = post(
        addr,
        "/webhooks/pagarme",
        &[h("x-hub-signature", "sha256=00")],
        b"{}",
    )
    .await;
    assert_eq!(bad.status, 401);
}

/// Both instances count into the one `hourly` table, adding to each other's rows; a stop
/// writes what it had not folded yet; intake stores the object id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_add_to_one_hourly_row_and_a_stop_writes_the_rest() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let url = pg.url(&db);
    let (a, b) = tokio::join!(server(&url, ""), server(&url, ""));
    for (n, s) in [(1, &a), (2, &b), (3, &a)] {
        assert_eq!(post_pagarme(s.addr, &payment_body(n)).await.status, 200);
    }
    // A duplicate through each instance, a bad signature through each.
    assert_eq!(post_pagarme(b.addr, &payment_body(1)).await.status, 200);
    assert_eq!(post_pagarme(a.addr, &payment_body(2)).await.status, 200);
    bad_signature(a.addr).await;
    bad_signature(b.addr).await;
    let client = pg.connect(&db).await;
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM events WHERE object_id IN ('ch_1', 'ch_2', 'ch_3')"
        )
        .await,
        3
    );
    // One row per endpoint and hour, whoever counted.
    until_count(
        &client,
        "SELECT coalesce(sum(received + duplicate + bad_signature), 0)::bigint FROM hourly",
        7,
    )
    .await;
    assert_eq!(count(&client, "SELECT count(*) FROM hourly").await, 1);
    assert_eq!(
        count(&client, "SELECT sum(received)::bigint FROM hourly").await,
        3
    );
    assert_eq!(
        count(&client, "SELECT sum(duplicate)::bigint FROM hourly").await,
        2
    );
    // Counted just before a stop: in the table after it, not lost with the process.
    bad_signature(a.addr).await;
    a.stop().await;
    assert_eq!(
        count(&client, "SELECT sum(bad_signature)::bigint FROM hourly").await,
        3
    );
    b.stop().await;
}
