//! PostgreSQL intake's group commit (`store/postgres/group.rs`) against a real PostgreSQL:
//! requests waiting together share one transaction; two copies of one key in a group make
//! one row (the second a duplicate); an event that fails on its own is answered 503 alone,
//! as the single statement answers it, and the rest of its group still commits together.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::pg_cluster;
use crate::support::postgres::{count, server};
use crate::support::*;

/// Intake's sessions waiting for a heavyweight lock (the test's lock on `dedup`).
const WAITING: &str = "SELECT count(*) FROM pg_stat_activity \
     WHERE application_name = 'portaria' AND wait_event_type = 'Lock'";

/// `portaria_requests_total` of the pagarme endpoint and `outcome`.
async fn requests(admin: SocketAddr, outcome: &str) -> f64 {
    let reply = send(admin, "GET", "/metrics", &[], b"").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let series = format!("outcome=\"{outcome}\"");
    reply
        .body
        .lines()
        .find(|l| {
            l.starts_with("portaria_requests_total{")
                && l.contains("endpoint=\"pagarme\"")
                && l.contains(&series)
        })
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

/// How many stored events have exactly this body.
async fn stored(client: &tokio_postgres::Client, body: &[u8]) -> i64 {
    client
        .query_one("SELECT count(*) FROM payloads WHERE body = $1", &[&body])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_with_two_copies_and_a_failing_event_commits_the_rest_together() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let s = server(&pg.url(&db), "").await;
    let admin = s.admin.unwrap();
    let client = pg.connect(&db).await;
    let mut locker = pg.connect(&db).await;

    // Hold every committer: a lock on `dedup` that intake's inserts wait for (well inside
    // their 4 s lock timeout). Blockers go one at a time until one is left waiting in the
    // queue, not in PostgreSQL: then every committer is busy.
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE dedup IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut blockers = Vec::new();
    for n in 0..16 {
        let addr = s.addr;
        blockers.push(tokio::spawn(async move {
            post_pagarme(addr, &payment_body(1000 + n)).await.status
        }));
        let deadline = Instant::now() + Duration::from_millis(1000);
        let mut taken = false;
        while !taken && Instant::now() < deadline {
            taken = count(&client, WAITING).await == n as i64 + 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !taken {
            break;
        }
    }
    assert!(blockers.len() >= 2, "no committer took a blocker");

    // What waits now goes into one group once the lock goes: two copies of one key, another
    // event, and one whose event type holds a NUL (PostgreSQL's text refuses it).
    let copy = payment_body(1);
    let other = payment_body(2);
    let failing = br#"{"id":"hook_nul","type":"charge.\u0000paid","data":{"id":"ch_nul"}}"#;
    let mut sends = Vec::new();
    for body in [copy.clone(), copy.clone(), other.clone(), failing.to_vec()] {
        let addr = s.addr;
        sends.push(tokio::spawn(async move { post_pagarme(addr, &body).await }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.rollback().await.unwrap();

    let mut statuses = Vec::new();
    for send in sends {
        let reply = send.await.unwrap();
        statuses.push(reply.status);
        if reply.status == 503 {
            assert_eq!(reply.headers["retry-after"], "5");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 503]);
    for blocker in blockers {
        assert_eq!(blocker.await.unwrap(), 200);
    }
    assert_eq!(stored(&client, &copy).await, 1);
    assert_eq!(stored(&client, &other).await, 1);
    assert_eq!(stored(&client, failing).await, 0);
    assert_eq!(requests(admin, "duplicate").await, 1.0);
    assert_eq!(requests(admin, "storage_error").await, 1.0);
    // The copy and the other event committed in one transaction (one xmin), after the
    // failing one was taken out of their group.
    let transactions: i64 = client
        .query_one(
            "SELECT count(DISTINCT e.xmin::text) FROM events e \
             JOIN payloads p ON p.event_id = e.id WHERE p.body IN ($1, $2)",
            &[&copy, &other],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1);
    // The single statement alone answers the failing event the same way.
    let reply = post_pagarme(s.addr, failing).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(stored(&client, failing).await, 0);
    s.stop().await;
}
