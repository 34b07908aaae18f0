//! The PostgreSQL backend's worker side, with two (or three) portaria instances on one
//! database (a real PostgreSQL from `pg_cluster`): `order_by` under load across instances (a
//! key never delivered twice at once, in arrival order), `LISTEN/NOTIFY` wake-ups (intake, a
//! replay, a cut listening connection), and `[alerts]` (one dead event, one alert, whichever
//! instance holds the alerts lock). The takeover's `interrupted` attempt is checked in
//! `postgres::a_killed_instances_delivery_is_taken_over_after_its_lease`. The claims' order
//! (a key one at a time, a failing key holding back only itself, across two handles) is the
//! store's behaviour suite's, on both engines (`store_suite::queue`).

use std::path::Path;
use std::time::Duration;

use crate::support::pg_cluster;
use crate::support::postgres::{config_at, count, server, until_count};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// Waits until `n` events are rolled up `delivered` (the roll-up lags a delivery by ~250 ms).
async fn delivered_events(client: &tokio_postgres::Client, n: i64) {
    until_count(
        client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        n,
    )
    .await;
}

/// `order_by` under load from both instances at once: three keys of six events each, every
/// delivery slow enough to overlap; no two deliveries of one key ever run at once (the script
/// takes a per-key lock directory and says OVERLAP when it finds it taken), and each key's
/// events go out in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_by_never_runs_one_key_twice_at_once_across_instances() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let program = work.path().join("erp.sh");
    write_executable(
        &program,
        format!(
            "#!/bin/sh\nD='{}'\nbody=$(cat)\n\
             key=$(echo \"$body\" | sed 's/.*\"data\":{{\"id\":\"\\([a-z_]*\\)\".*/\\1/')\n\
             mkdir \"$D/lock_$key\" 2>/dev/null || echo OVERLAP >> \"$D/delivered\"\n\
             sleep 0.05\n\
             echo \"$key $(echo \"$body\" | sed 's/.*\"id\":\"hook_\\([0-9]*\\)\".*/\\1/')\" \
             >> \"$D/delivered\"\n\
             rmdir \"$D/lock_$key\"\n",
            work.path().display()
        ),
    );
    let route = format!(
        "[[endpoint.route]]\nname = \"erp\"\nforward = {{ command = [\"{}\"] }}\n\
         concurrency = 4\norder_by = \"json:/data/id\"\n",
        program.display()
    );
    let db = pg.database().await;
    let url = pg.url(&db);
    let (a, b) = tokio::join!(server(&url, &route), server(&url, &route));
    for n in 0..18 {
        let key = ["pay_a", "pay_b", "pay_c"][n % 3];
        let addr = if n % 2 == 0 { a.addr } else { b.addr };
        let body = payment(n, "payment.updated", Some(key));
        assert_eq!(post_pagarme(addr, &body).await.status, 200);
    }
    eventually(WAIT, "all 18 delivered", || {
        lines(work.path(), "delivered").len() >= 18
    })
    .await;
    let delivered = lines(work.path(), "delivered");
    assert!(!delivered.iter().any(|l| l == "OVERLAP"), "{delivered:?}");
    assert_eq!(delivered.len(), 18, "{delivered:?}");
    for key in ["pay_a", "pay_b", "pay_c"] {
        let got: Vec<usize> = delivered
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("{key} ")))
            .map(|n| n.parse().unwrap())
            .collect();
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(got, sorted, "{key} out of arrival order: {delivered:?}");
        assert_eq!(got.len(), 6, "{delivered:?}");
    }
    a.stop().await;
    b.stop().await;
}

/// The sessions listening for new deliveries (one per running instance).
async fn listeners(client: &tokio_postgres::Client) -> Vec<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND query = 'LISTEN portaria_deliveries'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn until_listening(client: &tokio_postgres::Client, n: usize, not: &[i32]) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let now = listeners(client).await;
        if now.len() == n && !now.iter().any(|p| not.contains(p)) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "listening: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// LISTEN/NOTIFY: with the worker's fallback check slowed to a minute, an event accepted by
/// instance A (whose own lane is full) is delivered by instance B's worker within seconds; so
/// is a replay (a finished delivery set back to pending, as the status page and the CLI do);
/// and after the listening connections are cut, they come back and wake-ups work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_accepted_by_one_instance_wakes_the_others_at_once() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let url = pg.url(&db);
    let dir = tempfile::tempdir().unwrap();
    let hung = dir.path().join("a-hung");
    let delivered = dir.path().join("b-delivered");
    let hang = dir.path().join("hang.sh");
    write_executable(
        &hang,
        format!("#!/bin/sh\necho $$ >> {}\nexec sleep 30\n", hung.display()),
    );
    let deliver = dir.path().join("deliver.sh");
    write_executable(
        &deliver,
        format!("#!/bin/sh\ncat >> {0}\necho >> {0}\n", delivered.display()),
    );
    let spawn = |name: &str, command: &Path| {
        let path = dir.path().join(format!("{name}.toml"));
        let forward = format!(
            "forward = {{ command = [\"{}\"], timeout_secs = 60 }}\nconcurrency = 2",
            command.display()
        );
        std::fs::write(&path, config_at(&url, &forward)).unwrap();
        let mut serve = portaria();
        serve
            .args(["serve", "--config"])
            .arg(path)
            .env("PORTARIA_TEST_EXTERNAL_CHECK_MS", "60000");
        Process::spawn_command(serve)
    };
    let hung_pids = || -> Vec<i32> {
        std::fs::read_to_string(&hung)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let got = || -> Vec<String> {
        std::fs::read_to_string(&delivered)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    // A's two slots hang on two events: its lane is full.
    let a = spawn("a", &hang).await;
    for n in 1..=2 {
        assert_eq!(post_pagarme(a.addr, &payment_body(n)).await.status, 200);
    }
    eventually(WAIT, "A's two attempts running", || hung_pids().len() == 2).await;
    let b = spawn("b", &deliver).await;
    let client = pg.connect(&db).await;
    until_listening(&client, 2, &[]).await;

    let quick = Duration::from_secs(4);
    let body3 = String::from_utf8(payment_body(3)).unwrap();
    assert_eq!(post_pagarme(a.addr, &payment_body(3)).await.status, 200);
    eventually(quick, "B delivers what A accepted", || {
        got() == [body3.clone()]
    })
    .await;

    // A replay, as the status page or the CLI does it: B is woken at once again.
    delivered_events(&client, 1).await;
    client
        .execute(
            "UPDATE deliveries SET status = 'pending', next_attempt_at = 0, finished_at = NULL \
             WHERE event_id = 3",
            &[],
        )
        .await
        .unwrap();
    eventually(quick, "B delivers the replay", || got().len() == 2).await;

    // The listening sessions cut: each instance listens again, and wake-ups still work.
    let cut = listeners(&client).await;
    for pid in &cut {
        client
            .execute("SELECT pg_terminate_backend($1)", &[pid])
            .await
            .unwrap();
    }
    until_listening(&client, 2, &cut).await;
    assert_eq!(post_pagarme(a.addr, &payment_body(4)).await.status, 200);
    let body4 = String::from_utf8(payment_body(4)).unwrap();
    eventually(quick, "B delivers after the reconnect", || {
        got().last() == Some(&body4)
    })
    .await;
    assert_eq!(got().len(), 3);

    a.signal(libc::SIGKILL);
    for pid in hung_pids() {
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    drop(a);
    drop(b);
}

/// The dead alerts written by the recording alert command in `dir`.
fn dead_alerts(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|a| a["kind"] == "dead")
        .collect()
}

/// `[alerts]` on PostgreSQL with several instances: one dead event, one alert (from whichever
/// instance holds the alerts lock); when that instance stops, another takes over and announces
/// the next; a fresh instance does not announce again what was announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_dead_event_makes_one_alert_across_instances() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let alert = w.join("alert.sh");
    write_executable(
        &alert,
        format!(
            "#!/bin/sh\ncat >> '{}/alerts.jsonl'\necho >> '{}/alerts.jsonl'\n",
            w.display(),
            w.display()
        ),
    );
    let fail = w.join("fail-forward.sh");
    write_executable(&fail, "#!/bin/sh\ncat > /dev/null\nexit 1\n");
    let extra = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 5 }}\nretry = [\"50ms\"]\n",
        fail.display()
    );
    let db = pg.database().await;
    let url = pg.url(&db);
    let text = config_at(&url, &extra).replace(
        "[[endpoint]]",
        &format!(
            "[alerts]\ncommand = [\"{}\"]\nalert_every = \"2s\"\n\n[[endpoint]]",
            alert.display()
        ),
    );
    let start = |text: String| async move {
        let dir = tempfile::tempdir().unwrap();
        let unused = dir.path().join("unused.db");
        TestServer::start_with(dir, unused, &text).await
    };
    let (a, b) = tokio::join!(start(text.clone()), start(text.clone()));
    let client = pg.connect(&db).await;
    let dead = "SELECT count(*) FROM deliveries WHERE status = 'dead'";

    assert_eq!(post_pagarme(b.addr, &payment_body(1)).await.status, 200);
    eventually(WAIT, "the dead alert", || dead_alerts(w).len() == 1).await;
    assert_eq!(count(&client, dead).await, 1);
    // Several ticks of both instances (500 ms each) and past alert_every: still one.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let alerts = dead_alerts(w);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["count"], 1);
    let id1: i64 = client
        .query_one("SELECT id FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(alerts[0]["first_event_id"], id1);

    // A stops (lock or not): B announces the next dead event, and only it.
    a.stop().await;
    assert_eq!(post_pagarme(b.addr, &payment_body(2)).await.status, 200);
    eventually(WAIT, "the second dead alert", || dead_alerts(w).len() == 2).await;
    let id2: i64 = client
        .query_one("SELECT max(id) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dead_alerts(w)[1]["first_event_id"], id2);
    assert_eq!(dead_alerts(w)[1]["count"], 1);

    // A fresh instance, B gone: nothing is announced twice.
    let c = start(text.clone()).await;
    b.stop().await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(dead_alerts(w).len(), 2, "{:?}", dead_alerts(w));
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM deliveries WHERE alerted IS NULL"
        )
        .await,
        0
    );
    c.stop().await;
}
