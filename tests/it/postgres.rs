//! The PostgreSQL backend against a real PostgreSQL started by the tests (`pg_cluster`):
//! several portaria instances on one database (the dedup barrier across them, migrations
//! raced at start, every event forwarded once, arrival order across instances), the durable
//! ack, PostgreSQL stopped and started again under a running
//! server, the password kept out of every log and message, and `backup` pointing to `pg_dump`.

use std::time::{Duration, Instant};

use crate::support::pg_cluster::{self, Cluster};
use crate::support::postgres::{config, config_at, count, server};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_racing_through_two_instances_make_one_event() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let url = pg.url(&db);
    let (a, b) = tokio::join!(server(&url, ""), server(&url, ""));
    // 40 copies of one delivery, half through each instance, all at once; and 20 distinct
    // events alongside them.
    let mut sends = Vec::new();
    for i in 0..40 {
        let addr = if i % 2 == 0 { a.addr } else { b.addr };
        sends.push(tokio::spawn(async move {
            post_pagarme(addr, &payment_body(7)).await.status
        }));
    }
    for n in 100..120 {
        let addr = if n % 2 == 0 { a.addr } else { b.addr };
        sends.push(tokio::spawn(async move {
            post_pagarme(addr, &payment_body(n)).await.status
        }));
    }
    for send in sends {
        assert_eq!(send.await.unwrap(), 200);
    }
    let client = pg.connect(&db).await;
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 21);
    assert_eq!(count(&client, "SELECT count(*) FROM payloads").await, 21);
    assert_eq!(count(&client, "SELECT count(*) FROM dedup").await, 21);
    let body: Vec<u8> = client
        .query_one(
            "SELECT p.body FROM payloads p JOIN events e ON e.id = p.event_id \
             WHERE e.status = 'stored' ORDER BY e.id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(body.starts_with(b"{\"id\":\"hook_"));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ack_comes_after_commit_and_the_window_lets_a_later_copy_in() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let s = server(&pg.url(&db), "dedup_window = \"1s\"").await;
    let client = pg.connect(&db).await;
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    // Another session sees it the moment the 200 is in: it was committed before.
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 1);
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 1);
    // Past the window, the same key is a new event, and the barrier row points at it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 2);
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM dedup d JOIN events e ON e.id = d.event_id \
             WHERE e.id = (SELECT max(id) FROM events)"
        )
        .await,
        1
    );
    let queue = send(s.admin.unwrap(), "GET", "/metrics", &[], b"").await;
    assert_eq!(queue.status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let url = pg.url(&db);
    let (a, b, c) = tokio::join!(server(&url, ""), server(&url, ""), server(&url, ""));
    let client = pg.connect(&db).await;
    let version: String = client
        .query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "7");
    for s in [a, b, c] {
        assert_eq!(post_pagarme(s.addr, &payment_body(3)).await.status, 200);
        s.stop().await;
    }
    client
        .execute(
            "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
            &[],
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portaria.toml");
    std::fs::write(&path, config_at(&url, "")).unwrap();
    let out = run_cli(&["serve"], &path);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("schema version 99, newer than this binary"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_answers_503_then_recovers_without_a_restart() {
    let Some(pg) = Cluster::start() else {
        return;
    };
    let db = pg.database().await;
    let s = server(&pg.url(&db), "").await;
    let admin = s.admin.unwrap();
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    assert_eq!(send(admin, "GET", "/readyz", &[], b"").await.status, 200);

    pg.stop();
    let started = Instant::now();
    let reply = post_pagarme(s.addr, &payment_body(2)).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reply.headers["retry-after"], "5");
    let ready = send(admin, "GET", "/readyz", &[], b"").await;
    assert_eq!(ready.status, 503, "{}", ready.body);

    pg.resume();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = post_pagarme(s.addr, &payment_body(2)).await;
        if reply.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery: {}", reply.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The acknowledged event survived, the refused one is in now, once.
    let client = pg.connect(&db).await;
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 2);
    // The failed commit holds /readyz at 503 for a while (as on SQLite), then the probe
    // decides; a committed intake clears it at once.
    assert_eq!(send(admin, "GET", "/readyz", &[], b"").await.status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_answers_503_and_readyz_is_not_ready() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let s = server(&pg.url(&db), "").await;
    let client = pg.connect(&db).await;
    client
        .batch_execute(&format!(
            "ALTER DATABASE {db} SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    // Sessions take the setting when they start: end the server's.
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    // The probe alone says not ready, before any webhook has failed (twice: the first may
    // meet a connection just cut, the second meets a read-only session).
    for _ in 0..2 {
        let ready = send(s.admin.unwrap(), "GET", "/readyz", &[], b"").await;
        assert_eq!(ready.status, 503, "{}", ready.body);
    }
    let reply = post_pagarme(s.addr, &payment_body(1)).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.headers["retry-after"], "5");
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_reaches_no_log_and_no_message() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    const PASSWORD: &str = "Sup3r-Secret-Pw";
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portaria.toml");
    std::fs::write(&path, config("url_env = \"PORTARIA_TEST_PG_URL\"", "")).unwrap();
    let with_password = format!("postgres://portaria:{PASSWORD}@127.0.0.1:{}/{db}", pg.port);

    // A running server: its start, an event, a reload, a stop.
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&path)
        .env("PORTARIA_TEST_PG_URL", &with_password);
    let mut p = Process::spawn_command(serve).await;
    assert_eq!(post_pagarme(p.addr, &payment_body(1)).await.status, 200);
    p.signal(libc::SIGTERM);
    assert!(p.wait(Duration::from_secs(20)).await.success());
    let log = p.log.lock().unwrap().clone();
    assert!(log.contains("listening"), "{log}");
    assert!(!log.contains(PASSWORD), "{log}");

    // A database that cannot be reached: the start fails, saying why, without the password.
    let closed = ClosedPort::new();
    let port = closed.port();
    let out = portaria()
        .args(["serve", "--config"])
        .arg(&path)
        .env(
            "PORTARIA_TEST_PG_URL",
            format!("postgres://portaria:{PASSWORD}@127.0.0.1:{port}/{db}"),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    // In the config in clear, the URL is refused, and the message does not repeat it.
    std::fs::write(&path, config_at(&with_password, "")).unwrap();
    let out = run_cli(&["check"], &path);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("storage.url: holds a password"), "{said}");
    assert!(!said.contains(PASSWORD), "{said}");
}

#[test]
fn a_postgres_configuration_is_checked_and_backup_points_to_pg_dump() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portaria.toml");
    let url = "url = \"postgres://portaria@127.0.0.1:1/portaria\"";
    // An archive and per-key ordering: both supported now, so `check` takes them.
    let ordered = config(
        url,
        "[[endpoint.route]]\nname = \"erp\"\nforward = { url = \"http://127.0.0.1:1/\" }\n\
         concurrency = 4\norder_by = \"json:/id\"",
    );
    let text = ordered.replace(
        "[storage]\n",
        &format!("[storage]\narchive_dir = \"{}\"\n", dir.path().display()),
    );
    std::fs::write(&path, text).unwrap();
    let out = run_cli(&["check"], &path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("does not support"), "{stderr}");
    // Forwarding itself is fine.
    let forwarding = config(url, "forward = { url = \"http://127.0.0.1:1/\" }");
    std::fs::write(&path, forwarding).unwrap();
    let out = run_cli(&["check"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `path` and `url` together.
    std::fs::write(&path, config(&format!("{url}\npath = \"x.db\""), "")).unwrap();
    let out = run_cli(&["check"], &path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mutually exclusive"), "{stderr}");

    // `backup` is SQLite's: it points to PostgreSQL's own tools, before connecting to
    // anything, and writes no file.
    std::fs::write(&path, config(url, "")).unwrap();
    let copy = dir.path().join("x.db");
    let out = run_cli(&["backup", copy.to_str().unwrap()], &path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("storage is PostgreSQL"), "{stderr}");
    assert!(stderr.contains("pg_dump --format=custom"), "{stderr}");
    assert!(!copy.exists());
}

/// Every event forwarded exactly once when two instances work one queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_forward_every_event_exactly_once() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let target = Target::start(vec![200]).await;
    let db = pg.database().await;
    let url = pg.url(&db);
    let forward = format!(
        "forward = {{ url = \"http://{}/hook\" }}\nconcurrency = 4",
        target.addr
    );
    let (a, b) = tokio::join!(server(&url, &forward), server(&url, &forward));
    let mut sends = Vec::new();
    for n in 0..30 {
        let addr = if n % 2 == 0 { a.addr } else { b.addr };
        sends.push(tokio::spawn(async move {
            post_pagarme(addr, &payment_body(n)).await.status
        }));
    }
    for send in sends {
        assert_eq!(send.await.unwrap(), 200);
    }
    let client = pg.connect(&db).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
    )
    .await
        < 30
    {
        assert!(
            Instant::now() < deadline,
            "not all delivered: {}",
            target.count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing more arrives late, and no body came twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bodies: Vec<Vec<u8>> = target
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.to_vec())
        .collect();
    assert_eq!(bodies.len(), 30);
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 30);
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM deliveries WHERE claimed_by IS NOT NULL"
        )
        .await,
        0
    );
    a.stop().await;
    b.stop().await;
}

/// `concurrency = 1`: arrival order holds across instances, each taking only the lane's head.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_one_keeps_arrival_order_across_instances() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let target = Target::start(vec![200]).await;
    let db = pg.database().await;
    let url = pg.url(&db);
    let forward = format!(
        "forward = {{ url = \"http://{}/hook\" }}\nconcurrency = 1",
        target.addr
    );
    let (a, b) = tokio::join!(server(&url, &forward), server(&url, &forward));
    for n in 0..12 {
        let addr = if n % 2 == 0 { a.addr } else { b.addr };
        assert_eq!(post_pagarme(addr, &payment_body(n)).await.status, 200);
    }
    eventually(Duration::from_secs(20), "all 12 forwarded", || {
        target.count() >= 12
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got: Vec<String> = target
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    let want: Vec<String> = (0..12)
        .map(|n| String::from_utf8(payment_body(n)).unwrap())
        .collect();
    assert_eq!(got, want);
    a.stop().await;
    b.stop().await;
}

/// SIGKILL of the instance delivering an event: another instance delivers it once the dead
/// one's lease expires, with no restart of the dead one and no recovery pass, and records the
/// cut-off attempt as `interrupted` first; on a strict lane (`concurrency = 1`, the head
/// taken over) and an unordered one (`concurrency = 4`, the claim statement's own takeover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_delivery_is_taken_over_after_its_lease() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    for concurrency in [1, 4] {
        taken_over_after_its_lease(pg, concurrency).await;
    }
}

async fn taken_over_after_its_lease(pg: &Cluster, concurrency: usize) {
    let db = pg.database().await;
    let url = pg.url(&db);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("a-is-delivering");
    let delivered = dir.path().join("b-delivered");
    // Instance A's command hangs (after saying so, with its pid); B's delivers.
    let hang = dir.path().join("hang.sh");
    write_executable(
        &hang,
        format!("#!/bin/sh\necho $$ > {}\nexec sleep 30\n", marker.display()),
    );
    let deliver = dir.path().join("deliver.sh");
    write_executable(
        &deliver,
        format!("#!/bin/sh\ncat >> {}\n", delivered.display()),
    );
    let spawn = |name: &str, command: &std::path::Path| {
        let path = dir.path().join(format!("{name}.toml"));
        let forward = format!(
            "forward = {{ command = [\"{}\"], timeout_secs = 60 }}\nconcurrency = {concurrency}",
            command.display()
        );
        std::fs::write(&path, config_at(&url, &forward)).unwrap();
        let mut serve = portaria();
        serve
            .args(["serve", "--config"])
            .arg(path)
            .env("PORTARIA_TEST_PG_LEASE_MS", "1500");
        Process::spawn_command(serve)
    };
    let a = spawn("a", &hang).await;
    assert_eq!(post_pagarme(a.addr, &payment_body(5)).await.status, 200);
    eventually(Duration::from_secs(10), "A's attempt running", || {
        std::fs::read_to_string(&marker).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    a.signal(libc::SIGKILL);
    let hung: i32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe {
        libc::kill(hung, libc::SIGKILL);
    }
    drop(a);

    let b = spawn("b", &deliver).await;
    eventually(Duration::from_secs(15), "B delivers it", || {
        std::fs::read(&delivered).is_ok_and(|body| body == payment_body(5))
    })
    .await;
    let client = pg.connect(&db).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
    )
    .await
        != 1
    {
        assert!(Instant::now() < deadline, "the event was not rolled up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Claimed twice (A's attempt, then B's), delivered once; A's cut-off attempt explains
    // the second forward, as an `interrupted` row, as SQLite's recovery records it.
    assert_eq!(
        count(&client, "SELECT attempts::bigint FROM deliveries").await,
        2
    );
    let rows: Vec<(i32, String, Option<String>)> = client
        .query(
            "SELECT attempt, outcome, error FROM attempts ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(rows.len(), 1, "concurrency {concurrency}: {rows:?}");
    assert_eq!(
        (rows[0].0, rows[0].1.as_str()),
        (1, "interrupted"),
        "{rows:?}"
    );
    assert!(
        rows[0].2.as_deref().unwrap_or("").contains("lease"),
        "{rows:?}"
    );
    drop(b);
}

/// `portaria store copy`: a SQLite database moved over keeps its events, ids, deliveries and
/// dedup window (a resend after the move is a duplicate); a non-empty target is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_copy_moves_a_sqlite_database_and_keeps_the_dedup_window() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let target = Target::start(vec![200]).await;
    let forward = format!("forward = {{ url = \"http://{}/hook\" }}", target.addr);
    let sqlite = TestServer::start("", &forward).await;
    for n in 0..3 {
        assert_eq!(
            post_pagarme(sqlite.addr, &payment_body(n)).await.status,
            200
        );
    }
    eventually(Duration::from_secs(10), "delivered on SQLite", || {
        target.count() == 3
    })
    .await;
    let dir = sqlite.stop().await;
    let file = dir.path().join("portaria.db");

    let db = pg.database().await;
    let path = dir.path().join("pg.toml");
    std::fs::write(
        &path,
        config(&format!("url = \"{}\"", pg.url(&db)), &forward),
    )
    .unwrap();
    let out = run_cli(&["store", "copy", "--from", file.to_str().unwrap()], &path);
    let stdout = ok_stdout(&out);
    assert!(stdout.contains("copied 3 events, 3 deliveries"), "{stdout}");
    let client = pg.connect(&db).await;
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM events WHERE status = 'delivered'"
        )
        .await,
        3
    );
    assert_eq!(count(&client, "SELECT count(*) FROM dedup").await, 3);
    assert_eq!(count(&client, "SELECT max(id) FROM events").await, 3);

    // On PostgreSQL now: a resend is a duplicate, a new event gets an id after the copied
    // ones (not always the next: a duplicate's insert uses up one of the sequence).
    let s = server(&pg.url(&db), &forward).await;
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    assert_eq!(post_pagarme(s.addr, &payment_body(9)).await.status, 200);
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 4);
    assert!(count(&client, "SELECT max(id) FROM events").await > 3);
    eventually(Duration::from_secs(10), "the new one forwarded", || {
        target.count() == 4
    })
    .await;
    s.stop().await;

    let out = run_cli(&["store", "copy", "--from", file.to_str().unwrap()], &path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("already has 4 events"), "{stderr}");
}

/// A failing target on PostgreSQL: the attempt is recorded, the retry comes on schedule, and
/// once the schedule is spent the event is dead (and `/metrics` counts it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_retried_then_dead_on_postgres() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let target = Target::start(vec![500]).await;
    let db = pg.database().await;
    let forward = format!(
        "forward = {{ url = \"http://{}/hook\" }}\nretry = [\"1s\"]",
        target.addr
    );
    let s = server(&pg.url(&db), &forward).await;
    assert_eq!(post_pagarme(s.addr, &payment_body(1)).await.status, 200);
    let client = pg.connect(&db).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while count(&client, "SELECT count(*) FROM events WHERE status = 'dead'").await != 1 {
        assert!(
            Instant::now() < deadline,
            "not dead: {} tries",
            target.count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(target.count(), 2);
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM attempts WHERE outcome = 'failed'"
        )
        .await,
        2
    );
    let gaps = client
        .query_one(
            "SELECT max(started_at) - min(started_at) FROM attempts",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert!(gaps >= 900, "retried after {gaps} ms");
    let metrics = send(s.admin.unwrap(), "GET", "/metrics", &[], b"").await;
    assert!(
        metrics.body.contains("portaria_events_dead"),
        "{}",
        metrics.body
    );
    s.stop().await;
}

/// The store's two commands of one engine answer a typed refusal on PostgreSQL (the command
/// line refuses before it opens anything; a library caller hears this): `backup_to` copies a
/// SQLite file, and a copy goes only from SQLite into PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_only_store_methods_refuse_postgres_by_type() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let url = pg.url(&pg.database().await);
    let settings: tokio_postgres::Config = url.parse().unwrap();
    let store = portaria::store::Store::open_postgres(settings.clone(), None)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let refused = store
        .backup_to(dir.path().join("copy.db"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, portaria::store::BackupError::OnPostgres),
        "{refused:?}"
    );
    assert!(!dir.path().join("copy.db").exists());
    let other = portaria::store::Store::open_postgres(settings, None)
        .await
        .unwrap();
    let refused = store.copy_from(&other).await.unwrap_err();
    assert!(
        matches!(refused, portaria::store::CopyError::FromPostgres),
        "{refused:?}"
    );
    let sqlite = dir.path().join("p.db");
    portaria::store::Store::open(&sqlite).unwrap().close();
    let file = portaria::store::Store::open_read_only(&sqlite).unwrap();
    let refused = file.copy_from(&store).await.unwrap_err();
    assert!(
        matches!(refused, portaria::store::CopyError::IntoSqlite),
        "{refused:?}"
    );
    other.close();
    store.close();
}
