//! `portaria route pause/resume` with the real server and the real binary: a paused route
//! keeps accepting and storing, its deliveries wait (across a restart), and go out in arrival
//! order when it is resumed or when `--for` runs out. Promises: docs/forwarding.md, "Pausing
//! a route".

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A forward command that appends each event's id to `$D/calls`.
fn recorder(dir: &Path) -> String {
    let program = dir.join("on-event.sh");
    write_executable(
        &program,
        format!(
            "#!/bin/sh\ncat >/dev/null\necho \"$PORTARIA_EVENT_ID\" >> '{}/calls'\n",
            dir.display()
        ),
    );
    format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\nretry = [\"1s\"]\n",
        program.display()
    )
}

fn calls(dir: &Path) -> Vec<i64> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// Each event's `finished_at`, by id, once all `n` deliveries have one: the command writes its
/// line before it exits, and the worker records the delivery only after that.
async fn finished_all(server: &TestServer, n: usize) -> Vec<(i64, i64)> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let all = finished(server);
        let recorded: Option<Vec<(i64, i64)>> =
            all.iter().map(|&(id, at)| Some((id, at?))).collect();
        match recorded {
            Some(done) if done.len() == n => return done,
            _ => assert!(
                std::time::Instant::now() < deadline,
                "not all {n} deliveries recorded: {all:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each event's `finished_at`, by id.
fn finished(server: &TestServer) -> Vec<(i64, Option<i64>)> {
    let db = server.db();
    let mut statement = db
        .prepare("SELECT event_id, finished_at FROM deliveries ORDER BY event_id")
        .unwrap();
    statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn route(config: &Path, args: &[&str]) -> String {
    let mut all = vec!["route"];
    all.extend_from_slice(args);
    ok_stdout(&run_cli(&all, config))
}

async fn accept(server: &TestServer, n: usize) {
    assert_eq!(
        post_pagarme(server.addr, &payment_body(n)).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_route_stores_and_waits_across_a_restart_and_resumes_in_order() {
    let work = tempfile::tempdir().unwrap();
    let forward = recorder(work.path());
    let server = TestServer::start("", &forward).await;
    let config = server.config_path();
    let said = route(
        &config,
        &["pause", "--endpoint", "pagarme", "--reason", "ERP upgrade"],
    );
    assert!(said.starts_with("paused pagarme/default"), "{said}");
    accept(&server, 1).await;
    accept(&server, 2).await;
    let listed = ok_stdout(&run_cli(&["events", "list"], &config));
    assert!(
        listed.starts_with("paused: pagarme/default since ") && listed.contains("(ERP upgrade)"),
        "{listed}"
    );

    // Still paused after a restart.
    let db = server.db.clone();
    let dir = server.stop().await;
    let text = std::fs::read_to_string(dir.path().join("portaria.toml")).unwrap();
    let server = TestServer::start_with(dir, db, &text).await;
    accept(&server, 3).await;
    let config = server.config_path();
    let admin = server.admin.unwrap();
    let paused = || async move {
        let scrape = crate::support::scrape(admin).await;
        let labels = [("endpoint", "pagarme"), ("route", "default")];
        crate::support::find(&scrape, "portaria_route_paused", &labels)
    };
    // Set by the worker's round, which the accepted event started.
    let deadline = std::time::Instant::now() + WAIT;
    while paused().await != Some(1.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "/metrics never said paused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let resumed_at = now_ms();
    let said = route(&config, &["resume", "--endpoint", "pagarme"]);
    assert!(said.starts_with("resumed pagarme/default"), "{said}");
    eventually(WAIT, "all three delivered", || {
        calls(work.path()).len() == 3
    })
    .await;
    assert_eq!(calls(work.path()), [1, 2, 3], "in arrival order");
    assert_eq!(paused().await, Some(0.0), "/metrics says resumed");
    // None went out while the route was paused.
    for (id, at) in finished_all(&server, 3).await {
        assert!(
            at >= resumed_at,
            "event {id} delivered {} ms before the resume",
            resumed_at - at
        );
    }
    let said = route(&config, &["resume", "--endpoint", "pagarme"]);
    assert_eq!(said.trim(), "pagarme/default was not paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_for_a_while_runs_out_by_itself() {
    let work = tempfile::tempdir().unwrap();
    let server = TestServer::start("", &recorder(work.path())).await;
    let paused_at = now_ms();
    let said = route(
        &server.config_path(),
        &[
            "pause",
            "--endpoint",
            "pagarme",
            "--route",
            "default",
            "--for",
            "2s",
        ],
    );
    assert!(said.starts_with("paused pagarme/default until "), "{said}");
    accept(&server, 1).await;
    accept(&server, 2).await;
    eventually(WAIT, "both delivered", || calls(work.path()).len() == 2).await;
    assert_eq!(calls(work.path()), [1, 2]);
    for (id, at) in finished_all(&server, 2).await {
        assert!(
            at >= paused_at + 2_000,
            "event {id} delivered {} ms into the pause",
            at - paused_at
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_route_that_is_not_configured_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let server = TestServer::start("", &recorder(work.path())).await;
    accept(&server, 1).await;
    let out = run_cli(
        &["route", "pause", "--endpoint", "pagarme", "--route", "erp"],
        &server.config_path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no route named `erp`"), "{err}");
    let out = run_cli(
        &["route", "pause", "--endpoint", "pagarm"],
        &server.config_path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no endpoint named `pagarm`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_answering_410_pauses_its_route_until_resumed() {
    let target = Target::start(vec![410, 200]).await;
    let forward = format!(
        "forward = {{ url = \"http://{}/in\", timeout_secs = 2 }}\nretry = [\"100ms\"]\n",
        target.addr
    );
    let server = TestServer::start("", &forward).await;
    accept(&server, 1).await;
    accept(&server, 2).await;
    eventually(WAIT, "the route paused", || {
        server.one::<i64>("SELECT count(*) FROM route_pauses") == 1
    })
    .await;
    let reason: String = server.one("SELECT reason FROM route_pauses");
    assert!(reason.starts_with("HTTP 410 Gone"), "{reason}");
    eventually(WAIT, "the attempt recorded", || {
        // Claimed, the delivery has its attempt counted already; recorded, it is pending.
        server.one::<i64>(
            "SELECT count(*) FROM deliveries WHERE event_id = 1 AND attempts = 1 \
             AND status = 'pending'",
        ) == 1
    })
    .await;
    // Not dead, though the schedule's one retry is yet to come: it waits for the resume.
    let (status, error): (String, String) = server
        .db()
        .query_row(
            "SELECT status, last_error FROM deliveries WHERE event_id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "pending");
    assert!(error.contains("route paused"), "{error}");
    assert_eq!(target.count(), 1, "event 2 waits behind the pause");

    let said = route(&server.config_path(), &["resume", "--endpoint", "pagarme"]);
    assert!(said.starts_with("resumed"), "{said}");
    eventually(WAIT, "both delivered", || {
        server.one::<i64>("SELECT count(*) FROM deliveries WHERE status = 'delivered'") == 2
    })
    .await;
    assert_eq!(target.count(), 3);
}

/// On PostgreSQL too: the pause is the database's, so it holds across a restart of the
/// server, and the resume sends what waited in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_pause_holds_across_a_restart_and_resumes_in_order() {
    let Some(pg) = crate::support::pg_cluster::shared() else {
        return;
    };
    let url = pg.url(&pg.database().await);
    let work = tempfile::tempdir().unwrap();
    let forward = recorder(work.path());
    let server = crate::support::postgres::server(&url, &forward).await;
    let said = route(&server.config_path(), &["pause", "--endpoint", "pagarme"]);
    assert!(said.starts_with("paused pagarme/default"), "{said}");
    accept(&server, 1).await;
    accept(&server, 2).await;
    let (db, dir) = (server.db.clone(), server.stop().await);
    let text = std::fs::read_to_string(dir.path().join("portaria.toml")).unwrap();
    let server = TestServer::start_with(dir, db, &text).await;
    accept(&server, 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        calls(work.path()).is_empty(),
        "nothing goes out while paused"
    );
    let said = route(&server.config_path(), &["resume", "--endpoint", "pagarme"]);
    assert!(said.starts_with("resumed pagarme/default"), "{said}");
    eventually(WAIT, "all three delivered", || {
        calls(work.path()).len() == 3
    })
    .await;
    assert_eq!(calls(work.path()), [1, 2, 3], "in arrival order");
}
