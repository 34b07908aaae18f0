//! The admin listener: `/metrics` read back with a real Prometheus text parser, `/healthz`,
//! `/readyz` against a really locked database, `admin_listen = "off"`, and a busy admin port
//! stopping the real binary before it opens anything.

use std::process::Stdio;
use std::time::{Duration, Instant};

use prometheus_parse::{Scrape, Value};

use crate::support::*;

fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    find(scrape, metric, labels).unwrap_or_else(|| panic!("no {metric} {labels:?}"))
}

fn requests(scrape: &Scrape, endpoint: &str, outcome: &str) -> f64 {
    value(
        scrape,
        "portaria_requests_total",
        &[("endpoint", endpoint), ("outcome", outcome)],
    )
}

fn deliveries(scrape: &Scrape, endpoint: &str, outcome: &str) -> f64 {
    value(
        scrape,
        "portaria_deliveries_total",
        // The one-route shorthand's route.
        &[
            ("endpoint", endpoint),
            ("route", "default"),
            ("outcome", outcome),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_every_request_by_endpoint_and_outcome() {
    let server = TestServer::start("", "").await;
    let admin = server.admin.expect("the admin listener is on");
    let before = scrape(admin).await;
    for outcome in ["accepted", "duplicate", "bad_signature", "stale_timestamp"] {
        assert_eq!(
            requests(&before, "pagarme", outcome),
            0.0,
            "{outcome} exists at 0"
        );
    }

    // 3 new events, 2 redeliveries of them, 1 forged signature.
    for n in 1..=3 {
        let body = payment_body(n);
        let reply = post_pagarme(server.addr, &body).await;
        assert_eq!(reply.status, 200);
    }
    for n in 1..=2 {
        let body = payment_body(n);
        let reply = post_pagarme(server.addr, &body).await;
        assert_eq!(reply.status, 200);
    }
    let forged = pagarme_headers(b"another body");
    let body = payment_body(9);
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &forged, &body)
            .await
            .status,
        401
    );
    // A Stripe event signed an hour ago, a GET, and a path nobody configured.
    let old = stripe_headers(now_secs() - 3600, &body);
    assert_eq!(
        post(server.addr, "/webhooks/stripe", &old, &body)
            .await
            .status,
        401
    );
    assert_eq!(
        send(server.addr, "GET", "/webhooks/pagarme", &[], b"")
            .await
            .status,
        405
    );
    let probe = "/wp-login.php?scanner=1";
    assert_eq!(post(server.addr, probe, &[], b"x").await.status, 404);

    let after = scrape(admin).await;
    let moved = |endpoint: &str, outcome: &str| {
        requests(&after, endpoint, outcome) - requests(&before, endpoint, outcome)
    };
    assert_eq!(moved("pagarme", "accepted"), 3.0);
    assert_eq!(moved("pagarme", "duplicate"), 2.0);
    assert_eq!(moved("pagarme", "bad_signature"), 1.0);
    assert_eq!(moved("pagarme", "method_not_allowed"), 1.0);
    assert_eq!(moved("pagarme", "storage_error"), 0.0);
    assert_eq!(moved("stripe", "stale_timestamp"), 1.0);
    assert_eq!(moved("stripe", "accepted"), 0.0);
    assert_eq!(
        moved("-", "not_found"),
        1.0,
        "unknown paths count under `-`"
    );
    assert!(
        !after
            .samples
            .iter()
            .any(|s| s.labels.values().any(|v| v.contains("wp-login"))),
        "a raw path never becomes a label"
    );

    // Every answered request is one latency observation of its endpoint.
    let count = |s: &Scrape, endpoint: &str| {
        value(
            s,
            "portaria_request_duration_seconds_count",
            &[("endpoint", endpoint)],
        )
    };
    assert_eq!(count(&after, "pagarme") - count(&before, "pagarme"), 7.0);
    let histogram = after
        .samples
        .iter()
        .find(|s| {
            s.metric == "portaria_request_duration_seconds"
                && s.labels.get("endpoint") == Some("pagarme")
        })
        .expect("the latency histogram is there");
    let Value::Histogram(buckets) = &histogram.value else {
        panic!("{:?}", histogram.value)
    };
    assert_eq!(
        buckets.last().map(|b| b.count),
        Some(7.0),
        "+Inf holds them all"
    );

    assert_eq!(
        value(
            &after,
            "portaria_duplicate_ratio",
            &[("endpoint", "pagarme")]
        ),
        0.4,
        "2 duplicates of 5 verified deliveries in the window"
    );
    assert_eq!(
        value(
            &after,
            "portaria_events_pending",
            &[("endpoint", "pagarme")]
        ),
        0.0
    );
}

fn forwarding_config(db: &std::path::Path) -> String {
    let hold = github_hold(db);
    sqlite_config(db)
        .pagarme("forward = { command = [\"/bin/sh\", \"-c\", \"cat >/dev/null\"] }")
        .endpoint(
            "/webhooks/github",
            "github",
            &format!(
                "secret = \"{GITHUB_SECRET}\"\n\
                 forward = {{ command = [\"/bin/sh\", \"-c\", \"cat >/dev/null; \
                 while [ -e '{}' ]; do sleep 0.05; done; exit 3\"] }}\n\
                 retry = [\"50ms\"]",
                hold.display()
            ),
        )
        .endpoint(
            "/webhooks/stripe",
            "stripe",
            &format!(
                "secret = \"{STRIPE_SECRET}\"\n\
                 forward = {{ command = [\"/bin/sh\", \"-c\", \"cat >/dev/null; exit 3\"] }}\n\
                 retry = [\"1h\"]"
            ),
        )
        .text()
}

/// While this file exists, github's deliveries hang (then fail as before once it is gone).
fn github_hold(db: &std::path::Path) -> std::path::PathBuf {
    db.with_file_name("github-hold")
}

fn status_of(server: &TestServer, endpoint: &str) -> Option<(String, i64)> {
    server
        .db()
        .query_row(
            "SELECT status, attempts FROM deliveries WHERE endpoint = ?1",
            [endpoint],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_and_the_queue_show_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = forwarding_config(&db);
    let server = TestServer::start_with(dir, db, &text).await;
    let admin = server.admin.unwrap();

    let body = payment_body(1);
    let pagarme = pagarme_headers(&body);
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &pagarme, &body)
            .await
            .status,
        200
    );
    let github = github_headers(Some("delivery-1"), &body);
    assert_eq!(
        post(server.addr, "/webhooks/github", &github, &body)
            .await
            .status,
        200
    );
    let stripe = stripe_headers(now_secs(), &body);
    assert_eq!(
        post(server.addr, "/webhooks/stripe", &stripe, &body)
            .await
            .status,
        200
    );

    // pagarme delivers; github fails twice and is dead; stripe failed once and waits an hour.
    let settled = || {
        status_of(&server, "pagarme") == Some(("delivered".into(), 1))
            && status_of(&server, "github") == Some(("dead".into(), 2))
            && status_of(&server, "stripe") == Some(("pending".into(), 1))
    };
    eventually(Duration::from_secs(15), "deliveries settle", settled).await;

    let s = scrape(admin).await;
    assert_eq!(deliveries(&s, "pagarme", "delivered"), 1.0);
    assert_eq!(deliveries(&s, "pagarme", "failed"), 0.0);
    assert_eq!(deliveries(&s, "github", "failed"), 1.0);
    assert_eq!(deliveries(&s, "github", "dead"), 1.0);
    assert_eq!(deliveries(&s, "stripe", "failed"), 1.0);
    assert_eq!(deliveries(&s, "stripe", "dead"), 0.0);
    let attempts = |endpoint| {
        value(
            &s,
            "portaria_delivery_duration_seconds_count",
            &[("endpoint", endpoint), ("route", "default")],
        )
    };
    assert_eq!(attempts("github"), 2.0);
    assert_eq!(attempts("pagarme"), 1.0);

    let gauge = |metric, endpoint| value(&s, metric, &[("endpoint", endpoint)]);
    assert_eq!(gauge("portaria_events_dead", "github"), 1.0);
    assert_eq!(gauge("portaria_events_dead", "pagarme"), 0.0);
    assert_eq!(gauge("portaria_events_pending", "stripe"), 1.0);
    assert_eq!(gauge("portaria_events_pending", "pagarme"), 0.0);
    let age = gauge("portaria_oldest_pending_age_seconds", "stripe");
    assert!((0.0..60.0).contains(&age), "{age}");
    assert_eq!(gauge("portaria_oldest_pending_age_seconds", "pagarme"), 0.0);

    // The queue gauges come from the database: a replay by another process shows at once.
    // github's deliveries hang meanwhile, so the event stays unfinished while we look.
    std::fs::write(github_hold(&server.db), "").unwrap();
    let out = run_cli(&["events", "replay", "--dead"], &server.config_path());
    ok_stdout(&out);
    let s = scrape(admin).await;
    let dead = value(&s, "portaria_events_dead", &[("endpoint", "github")]);
    let pending = value(&s, "portaria_events_pending", &[("endpoint", "github")]);
    assert_eq!(
        (pending, dead),
        (1.0, 0.0),
        "pending (or being delivered) again"
    );
    std::fs::remove_file(github_hold(&server.db)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_another_process_holds_the_write_lock() {
    let server = TestServer::start("", "").await;
    let admin = server.admin.unwrap();
    let get = |path: &'static str| send(admin, "GET", path, &[], b"");

    let healthz = get("/healthz").await;
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok\n"));
    assert_eq!(get("/readyz").await.status, 200);
    assert_eq!(get("/nope").await.status, 404);
    assert_eq!(send(admin, "POST", "/metrics", &[], b"").await.status, 405);
    let ready_writes: i64 = server.one("SELECT count(*) FROM meta WHERE key = 'ready_probe_at'");
    assert_eq!(ready_writes, 1, "the probe really wrote");

    let blocker = server.db();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let readyz = get("/readyz").await;
    let waited = started.elapsed();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert!(
        waited < portaria::admin::READY_DEADLINE + Duration::from_secs(2),
        "answered in {waited:?}"
    );
    assert_eq!(get("/healthz").await.status, 200, "the process is still up");
    // /metrics still answers, without the queue gauges it could not read.
    let s = scrape(admin).await;
    assert!(find(&s, "portaria_events_pending", &[("endpoint", "pagarme")]).is_none());
    assert_eq!(requests(&s, "pagarme", "accepted"), 0.0);
    blocker.execute_batch("ROLLBACK").unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while get("/readyz").await.status != 200 {
        assert!(
            Instant::now() < deadline,
            "ready again once the lock is gone"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listen_off_opens_no_admin_listener() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "admin_listen = \"off\"", "")).unwrap();
    let mut server = Process::spawn(&config).await;
    assert_eq!(server.admin, None);
    let log = server.log.clone();
    eventually(Duration::from_secs(5), "the log says admin=off", || {
        log.lock().unwrap().contains("listening addr=") && log.lock().unwrap().contains("admin=off")
    })
    .await;
    let body = payment_body(1);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200, "webhooks are served as ever");
    // Ctrl-C in a terminal: the same clean stop as systemd's SIGTERM.
    server.signal(libc::SIGINT);
    assert!(server.wait(Duration::from_secs(20)).await.success());
    eventually(Duration::from_secs(5), "the SIGINT log line", || {
        log.lock().unwrap().contains("SIGINT received")
    })
    .await;

    let text = base_config(&db, "admin_listen = \"off\"", "");
    let parsed =
        portaria::config::Config::parse(&text, portaria::config::Source::Embedded).unwrap();
    let listeners = portaria::server::Listeners::bind(&parsed.server)
        .await
        .unwrap();
    assert!(listeners.admin.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_admin_endpoints_and_warns_about_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    let mut server = Process::spawn(&config).await;
    let admin = server.admin.expect("the log names the admin address");
    assert_eq!(send(admin, "GET", "/healthz", &[], b"").await.status, 200);
    assert_eq!(send(admin, "GET", "/readyz", &[], b"").await.status, 200);

    // Twenty events, then redeliveries of the first: the ratio passes 5 % (and the sample is
    // large enough to judge) at the second copy.
    for n in 0..20 {
        let body = payment_body(n);
        let reply = post_pagarme(server.addr, &body).await;
        assert_eq!(reply.status, 200);
    }
    let body = payment_body(0);
    let headers = pagarme_headers(&body);
    let copy = || post(server.addr, "/webhooks/pagarme", &headers, &body);
    assert_eq!(copy().await.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !server.log.lock().unwrap().contains("were duplicates"),
        "1 in 21 is under 5 %"
    );
    assert_eq!(copy().await.status, 200);
    let log = server.log.clone();
    eventually(Duration::from_secs(10), "the duplicate warning", || {
        log.lock().unwrap().contains("were duplicates")
    })
    .await;
    let text = log.lock().unwrap().clone();
    let warning = text
        .lines()
        .find(|l| l.contains("were duplicates"))
        .unwrap();
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("endpoint=\"pagarme\""), "{warning}");
    assert!(warning.contains("duplicates=2 received=22"), "{warning}");

    // A third copy: still above 5 %, but one warning per window.
    assert_eq!(copy().await.status, 200);
    let s = scrape(admin).await;
    assert_eq!(requests(&s, "pagarme", "duplicate"), 3.0);
    assert_eq!(requests(&s, "pagarme", "accepted"), 20.0);
    server.signal(libc::SIGTERM);
    assert!(server.wait(Duration::from_secs(20)).await.success());
    let text = server.log.lock().unwrap().clone();
    assert_eq!(text.matches("were duplicates").count(), 1, "{text}");
}

#[test]
fn a_busy_admin_port_stops_the_start_with_a_clear_message_and_exit_1() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    let server_extra = format!("admin_listen = \"127.0.0.1:{port}\"");
    std::fs::write(&config, base_config(&db, &server_extra, "")).unwrap();

    let mut child = portaria()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("portaria kept running with its admin port taken");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let expected = format!("portaria: cannot listen on 127.0.0.1:{port} (admin_listen): ");
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(stderr.to_lowercase().contains("in use"), "{stderr}");
    assert!(
        !db.exists(),
        "nothing was opened before both listeners were bound"
    );
    drop(busy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_reach_the_log_only_at_trace_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "admin_listen = \"off\"", "")).unwrap();
    for (level, shown) in [("portaria=debug", false), ("portaria=trace", true)] {
        let mut serve = portaria();
        serve
            .env("RUST_LOG", level)
            .args(["serve", "--config"])
            .arg(&config);
        let mut server = Process::spawn_command(serve).await;
        let body = format!(
            r#"{{"id":"hook_{level}","type":"charge.paid","data":{{"id":"ch_1","note":"only-in-the-body"}}}}"#
        );
        assert_eq!(post_pagarme(server.addr, body.as_bytes()).await.status, 200);
        // The body line, when there is one, is written before the webhook's own line.
        let log = server.log.clone();
        eventually(Duration::from_secs(10), "the webhook's log line", || {
            log.lock().unwrap().contains("dedup_key=")
        })
        .await;
        let text = log.lock().unwrap().clone();
        assert_eq!(text.contains("only-in-the-body"), shown, "{level}:\n{text}");
        server.signal(libc::SIGTERM);
        assert!(server.wait(Duration::from_secs(20)).await.success());
    }
}
