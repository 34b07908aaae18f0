//! Routes: several targets per endpoint, each filtered by event type, each with its own
//! delivery state, retries and replay. Real parts: the server, child processes for command
//! routes, a real local HTTP listener for URL routes, the real binary for the CLI and the
//! start-up warning.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// A command route's script: records `<event id> <route> <attempt>` per call in `$D/calls`,
/// then runs `then`.
fn recorder(dir: &Path, then: &str) -> PathBuf {
    record_calls(
        dir,
        "route.sh",
        "cat > /dev/null",
        EVENT_ROUTE_ATTEMPT,
        then,
    )
}

/// An `erp` command route taking `events` and an `audit` URL route taking every event.
fn two_routes(program: &Path, events: &str, erp_extra: &str, audit: &Target) -> String {
    format!(
        "[[endpoint.route]]\nname = \"erp\"\nevents = {events}\n\
         forward = {{ command = [\"{}\"], timeout_secs = 10 }}\n{erp_extra}\n\
         [[endpoint.route]]\nname = \"audit\"\nforward = {{ url = \"http://{}/audit\" }}\n",
        program.display(),
        audit.addr
    )
}

fn event_of_type(n: usize, event_type: &str) -> Vec<u8> {
    format!(r#"{{"id":"hook_{n}","type":"{event_type}","data":{{"id":"or_{n}"}}}}"#).into_bytes()
}

fn delivery_status(server_db: &rusqlite::Connection, id: i64, route: &str) -> Option<String> {
    server_db
        .query_row(
            "SELECT status FROM deliveries WHERE event_id = ?1 AND route = ?2",
            rusqlite::params![id, route],
            |r| r.get(0),
        )
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_gets_the_event_types_its_filter_takes() {
    let work = tempfile::tempdir().unwrap();
    let audit = Target::start(vec![200]).await;
    let program = recorder(work.path(), "exit 0");
    let routes = two_routes(&program, r#"["order.*"]"#, "", &audit);
    let server = TestServer::start("", &routes).await;
    for (n, kind) in [(1, "order.paid"), (2, "charge.paid"), (3, "order.created")] {
        let reply = post_pagarme(server.addr, &event_of_type(n, kind)).await;
        assert_eq!(reply.status, 200);
    }
    eventually(WAIT, "every event delivered", || {
        server.one::<i64>("SELECT count(*) FROM events WHERE status = 'delivered'") == 3
    })
    .await;
    let mut erp = route_attempts(work.path());
    erp.sort();
    assert_eq!(
        erp,
        [(1, "erp".to_string(), 1), (3, "erp".to_string(), 1)],
        "only the order.* events went to the command"
    );
    assert_eq!(audit.count(), 3, "the unfiltered route took all three");
    let seen = audit.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|r| r.headers["portaria-route"] == "audit"));
    // One delivery row per (event, matching route), each delivered once.
    assert_eq!(server.one::<i64>("SELECT count(*) FROM deliveries"), 5);
    let db = server.db();
    assert_eq!(
        delivery_status(&db, 2, "erp"),
        None,
        "charge.paid never matched erp"
    );
    assert_eq!(
        delivery_status(&db, 2, "audit").as_deref(),
        Some("delivered")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_no_route_takes_is_stored_and_counted() {
    let work = tempfile::tempdir().unwrap();
    let program = recorder(work.path(), "exit 0");
    let route = format!(
        "[[endpoint.route]]\nname = \"erp\"\nevents = [\"order.*\"]\n\
         forward = {{ command = [\"{}\"] }}\n",
        program.display()
    );
    let server = TestServer::start("", &route).await;
    let reply = post_pagarme(server.addr, &event_of_type(1, "charge.paid")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        server.one::<String>("SELECT status FROM events WHERE id = 1"),
        "stored"
    );
    assert_eq!(server.one::<i64>("SELECT count(*) FROM deliveries"), 0);
    let admin = server.admin.unwrap();
    let metrics = send(admin, "GET", "/metrics", &[], b"").await;
    let text = metrics.body;
    assert!(
        text.contains("portaria_events_unrouted_total{endpoint=\"pagarme\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "portaria_deliveries_total{endpoint=\"pagarme\",route=\"erp\",outcome=\"delivered\"} 0"
        ),
        "{text}"
    );
    assert!(route_attempts(work.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_route_holds_back_no_other_route() {
    let work = tempfile::tempdir().unwrap();
    let audit = Target::start(vec![200]).await;
    // The command always fails and waits an hour between tries; strict order (concurrency 1).
    let program = recorder(work.path(), "exit 1");
    let routes = two_routes(&program, r#"["*"]"#, "retry = [\"1h\"]", &audit);
    let server = TestServer::start("", &routes).await;
    for n in 1..=3 {
        let reply = post_pagarme(server.addr, &payment_body(n)).await;
        assert_eq!(reply.status, 200);
    }
    eventually(WAIT, "audit got every event", || audit.count() == 3).await;
    eventually(WAIT, "erp tried its first event", || {
        !route_attempts(work.path()).is_empty()
    })
    .await;
    let db = server.db();
    // A target's answer (or the command's exit) comes before the attempt is recorded: wait for
    // the records, then check them.
    eventually(WAIT, "audit recorded every delivery", || {
        (1..=3).all(|id| delivery_status(&db, id, "audit").as_deref() == Some("delivered"))
    })
    .await;
    eventually(WAIT, "erp recorded its failed first attempt", || {
        delivery_status(&db, 1, "erp").as_deref() == Some("pending")
    })
    .await;
    // erp: its head waits for its retry, the rest wait behind it; the events stay pending.
    assert_eq!(route_attempts(work.path()), [(1, "erp".to_string(), 1)]);
    assert_eq!(
        server.one::<i64>("SELECT count(*) FROM events WHERE status = 'pending'"),
        3,
        "an event is delivered only when every route it matched is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_route_is_replayed_alone_from_the_command_line() {
    let work = tempfile::tempdir().unwrap();
    let audit = Target::start(vec![200]).await;
    // The first erp attempt fails (no retries left: dead); later ones succeed.
    let program = recorder(
        work.path(),
        "if [ ! -e \"$D/fixed\" ]; then touch \"$D/fixed\"; exit 3; fi",
    );
    let db = work.path().join("p.db");
    let config = work.path().join("p.toml");
    let routes = two_routes(&program, r#"["*"]"#, "retry = []", &audit);
    std::fs::write(&config, base_config(&db, "", &routes)).unwrap();
    let server = Process::spawn(&config).await;
    for n in 1..=2 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    let conn = open_db(&db);
    eventually(WAIT, "erp's first delivery went dead", || {
        delivery_status(&conn, 1, "erp").as_deref() == Some("dead")
    })
    .await;
    eventually(WAIT, "the rest delivered", || {
        delivery_status(&conn, 2, "erp").as_deref() == Some("delivered") && audit.count() == 2
    })
    .await;
    let event_status = || -> String {
        conn.query_row("SELECT status FROM events WHERE id = 1", [], |r| r.get(0))
            .unwrap()
    };
    // The roll-up follows its deliveries within a moment (written in batches).
    eventually(WAIT, "a dead route makes its event dead", || {
        event_status() == "dead"
    })
    .await;
    let listed = ok_stdout(&run_cli(&["events", "list", "--json"], &config));
    let first: serde_json::Value = serde_json::from_str(listed.lines().last().unwrap()).unwrap();
    assert_eq!(first["id"], 1);
    assert_eq!(first["status"], "dead");
    assert_eq!(first["routes"][0]["route"], "audit");
    assert_eq!(first["routes"][0]["status"], "delivered");
    assert_eq!(first["routes"][1]["route"], "erp");
    assert_eq!(first["routes"][1]["status"], "dead");
    assert_eq!(first["routes"][1]["last_error"], "exit status 3");
    let shown = ok_stdout(&run_cli(&["events", "show", "1"], &config));
    assert!(
        shown.contains("route erp: dead, 1 attempt(s): exit status 3"),
        "{shown}"
    );
    assert!(
        shown.contains("route audit: delivered, 1 attempt(s)"),
        "{shown}"
    );

    // A route the event never went to is an error, not a silent no-op.
    let wrong = run_cli(&["events", "replay", "1", "--route", "billing"], &config);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("route `billing`"));
    let out = ok_stdout(&run_cli(
        &["events", "replay", "1", "--route", "erp"],
        &config,
    ));
    assert!(out.contains("pending again for route `erp`"), "{out}");
    eventually(WAIT, "erp delivered on replay", || {
        delivery_status(&conn, 1, "erp").as_deref() == Some("delivered")
    })
    .await;
    eventually(WAIT, "the event delivered", || {
        event_status() == "delivered"
    })
    .await;
    assert_eq!(audit.count(), 2, "audit was not sent the event again");
    let history = event_detail(&db, 1).attempts;
    let of = |route: &str| -> Vec<(u32, String)> {
        history
            .iter()
            .filter(|a| a.route == route)
            .map(|a| (a.attempt, a.outcome.clone()))
            .collect()
    };
    assert_eq!(of("audit"), [(1, "delivered".to_string())]);
    assert_eq!(
        of("erp"),
        [(1, "failed".to_string()), (1, "delivered".to_string())],
        "the dead attempt, then the replay's"
    );
    // Nothing dead is left for `--dead --route erp`.
    let none = ok_stdout(&run_cli(
        &[
            "events",
            "replay",
            "--dead",
            "--endpoint",
            "pagarme",
            "--route",
            "erp",
        ],
        &config,
    ));
    assert!(none.starts_with("0 dead event(s)"), "{none}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_of_a_removed_route_stay_visible_and_are_warned_about_at_start() {
    let work = tempfile::tempdir().unwrap();
    let audit = Target::start(vec![200]).await;
    let program = recorder(work.path(), "exit 1");
    let db = work.path().join("p.db");
    let config = work.path().join("p.toml");
    let routes = two_routes(&program, r#"["*"]"#, "retry = [\"1h\"]", &audit);
    std::fs::write(&config, base_config(&db, "", &routes)).unwrap();
    let mut first = Process::spawn(&config).await;
    assert_eq!(post_pagarme(first.addr, &payment_body(1)).await.status, 200);
    eventually(WAIT, "both routes tried", || {
        audit.count() == 1 && route_attempts(work.path()).len() == 1
    })
    .await;
    first.signal(libc::SIGTERM);
    assert!(first.wait(Duration::from_secs(20)).await.success());

    // The operator drops the erp route; its waiting delivery stays, and the start says so.
    let audit_only = format!(
        "[[endpoint.route]]\nname = \"audit\"\nforward = {{ url = \"http://{}/audit\" }}\n",
        audit.addr
    );
    std::fs::write(&config, base_config(&db, "", &audit_only)).unwrap();
    let second = Process::spawn(&config).await;
    let log = second.log.clone();
    eventually(WAIT, "the warning", || {
        log.lock().unwrap().contains("no forward target now")
    })
    .await;
    let text = log.lock().unwrap().clone();
    let line = text
        .lines()
        .find(|l| l.contains("no forward target now"))
        .unwrap();
    assert!(
        line.contains("endpoint=\"pagarme\"")
            && line.contains("route=\"erp\"")
            && line.contains("waiting=1"),
        "{line}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.contains("no forward target now") && l.contains("audit")),
        "{text}"
    );
    let listed = ok_stdout(&run_cli(
        &["events", "list", "--status", "pending"],
        &config,
    ));
    assert!(
        listed.contains("pagarme"),
        "still listed as pending: {listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_writes_the_roll_up_of_deliveries_just_finished() {
    let work = tempfile::tempdir().unwrap();
    let program = recorder(work.path(), "exit 0");
    let route = format!(
        "[[endpoint.route]]\nname = \"erp\"\nforward = {{ command = [\"{}\"] }}\n",
        program.display()
    );
    let mut server = TestServer::start("", &route).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let db = server.db();
    eventually(WAIT, "delivered", || {
        delivery_status(&db, 1, "erp").as_deref() == Some("delivered")
    })
    .await;
    // Well within the roll-up's 250 ms batch: the stop must write it, not drop it.
    server.shutdown().await;
    let status: String = db
        .query_row("SELECT status FROM events WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "delivered");
}
