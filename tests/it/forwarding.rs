//! The forwarding worker with real parts: child processes for command targets, a real HTTP
//! listener for URL targets, the real binary where a crash or the CLI is involved.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};

use crate::support::*;

/// A command target that records each call (`<event id> <attempt>` per line in `$D/calls`),
/// its stdin and its environment, then runs `then`.
fn recorder(dir: &Path, then: &str) -> PathBuf {
    record_calls(
        dir,
        "on-event.sh",
        "cat > \"$D/body.$PORTARIA_EVENT_ID.$PORTARIA_ATTEMPT\"\n\
         env | grep '^PORTARIA_' | sort > \"$D/env.$PORTARIA_EVENT_ID\"",
        EVENT_ATTEMPT,
        then,
    )
}

fn command_forward(program: &Path, timeout_secs: u64, retry: &str) -> String {
    format!(
        "forward = {{ command = [\"{}\"], timeout_secs = {timeout_secs} }}\nretry = {retry}\n",
        program.display()
    )
}

async fn start_with_forward(
    forward: impl FnOnce(&Path) -> String,
) -> (TestServer, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    let extra = forward(work.path());
    (TestServer::start("", &extra).await, work)
}

async fn accept(server: &TestServer, n: usize) -> Vec<u8> {
    let body = payment_body(n);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200);
    body
}

fn status_of(server: &TestServer, id: i64) -> (String, u32) {
    server
        .db()
        .query_row(
            "SELECT status, attempts FROM deliveries WHERE event_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// An event's attempts as `events show` lists them: the failed ones have rows of their own,
/// the delivered one is recorded on its delivery row (schema 4).
fn attempt_outcomes(server: &TestServer, id: i64) -> Vec<(String, Option<String>)> {
    event_detail(&server.db, id)
        .attempts
        .into_iter()
        .map(|a| (a.outcome, a.error))
        .collect()
}

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_each_event_once_with_the_raw_body_and_metadata() {
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, "exit 0"), 10, "[\"1s\"]")).await;
    let first = accept(&server, 1).await;
    let second = accept(&server, 2).await;
    eventually(WAIT, "both delivered", || {
        event_attempts(work.path()).len() == 2
    })
    .await;
    eventually(WAIT, "recorded as delivered", || {
        status_of(&server, 2).0 == "delivered"
    })
    .await;
    assert_eq!(event_attempts(work.path()), vec![(1, 1), (2, 1)]);
    assert_eq!(std::fs::read(work.path().join("body.1.1")).unwrap(), first);
    assert_eq!(std::fs::read(work.path().join("body.2.1")).unwrap(), second);

    let env = std::fs::read_to_string(work.path().join("env.1")).unwrap();
    let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&first));
    for expected in [
        "PORTARIA_EVENT_ID=1".to_string(),
        "PORTARIA_ENDPOINT=pagarme".to_string(),
        "PORTARIA_ROUTE=default".to_string(),
        format!("PORTARIA_DEDUP_KEY={key}"),
        "PORTARIA_EVENT_TYPE=charge.paid".to_string(),
        "PORTARIA_ATTEMPT=1".to_string(),
        "PORTARIA_CONTENT_TYPE=application/json".to_string(),
    ] {
        assert!(
            env.lines().any(|l| l == expected),
            "missing {expected} in\n{env}"
        );
    }
    assert!(
        env.lines()
            .any(|l| l.starts_with("PORTARIA_RECEIVED_AT=20") && l.ends_with('Z')),
        "{env}"
    );
    assert_eq!(status_of(&server, 1), ("delivered".to_string(), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_event_is_picked_up_at_once_not_at_the_next_tick() {
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, "exit 0"), 10, "[\"1s\"]")).await;
    // Let the worker settle into its sleep (its external-change tick is every 2 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    accept(&server, 1).await;
    let acknowledged = Instant::now();
    eventually(WAIT, "delivered", || event_attempts(work.path()).len() == 1).await;
    let waited = acknowledged.elapsed();
    assert!(
        waited < portaria::forward::EXTERNAL_CHECK / 2,
        "the 200 woke the worker: delivery started {waited:?} after it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_duplicates_are_not_forwarded_again() {
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, "exit 0"), 10, "[\"1s\"]")).await;
    for _ in 0..3 {
        accept(&server, 9).await;
    }
    eventually(WAIT, "delivered", || status_of(&server, 1).0 == "delivered").await;
    accept(&server, 9).await; // and once more after delivery
    // A new event after it: the lane delivers in order, so a duplicate put back in the queue
    // would go out before this one.
    accept(&server, 10).await;
    eventually(WAIT, "the next event delivered", || {
        event_attempts(work.path()).len() == 2
    })
    .await;
    assert_eq!(event_attempts(work.path()), vec![(1, 1), (2, 1)]);
    assert_eq!(server.count_rows(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_target_gets_the_headers_and_a_verifiable_standard_webhooks_signature() {
    let target = Target::start(vec![200]).await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let extra = format!(
        "forward = {{ url = \"http://{}/payments\", timeout_secs = 5, secret = \"{secret}\" }}\n",
        target.addr
    );
    let server = TestServer::start("", &extra).await;
    let body = accept(&server, 3).await;
    eventually(WAIT, "the target got it", || target.count() == 1).await;
    let got = target.seen.lock().unwrap()[0].clone();
    assert_eq!(got.body, body);
    let header = |name: &str| {
        got.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    assert_eq!(header("idempotency-key"), Some(key));
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(header("portaria-event-id").as_deref(), Some("1"));
    assert_eq!(header("portaria-endpoint").as_deref(), Some("pagarme"));
    assert_eq!(header("portaria-route").as_deref(), Some("default"));
    assert_eq!(
        header("portaria-event-type").as_deref(),
        Some("charge.paid")
    );
    assert_eq!(header("portaria-attempt").as_deref(), Some("1"));

    // Verify as a Standard Webhooks library does, computed here from the spec.
    let id = header("webhook-id").unwrap();
    let ts: i64 = header("webhook-timestamp").unwrap().parse().unwrap();
    assert!((now_secs() - ts).abs() < 60);
    let key = base64::engine::general_purpose::STANDARD
        .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        .unwrap();
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&body);
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    let signatures = header("webhook-signature").unwrap();
    assert!(
        signatures.split(' ').any(|s| s == expected),
        "{signatures} vs {expected}"
    );
    eventually(WAIT, "recorded", || status_of(&server, 1).0 == "delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_fails_twice_then_succeeds_gets_three_attempts() {
    let target = Target::start(vec![500, 503, 200]).await;
    let extra = format!(
        "forward = {{ url = \"http://{}/x\", timeout_secs = 5 }}\nretry = [\"100ms\", \"100ms\", \"100ms\"]\n",
        target.addr
    );
    let server = TestServer::start("", &extra).await;
    accept(&server, 4).await;
    eventually(WAIT, "delivered", || status_of(&server, 1).0 == "delivered").await;
    assert_eq!(status_of(&server, 1), ("delivered".to_string(), 3));
    assert_eq!(target.count(), 3);
    let attempts = attempt_outcomes(&server, 1);
    assert_eq!(
        attempts.iter().map(|a| a.0.as_str()).collect::<Vec<_>>(),
        ["failed", "failed", "delivered"]
    );
    assert!(
        attempts[0].1.as_deref().unwrap().contains("500"),
        "{attempts:?}"
    );
    let attempts_seen: Vec<String> = target
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.headers["portaria-attempt"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(attempts_seen, ["1", "2", "3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_always_fails_ends_dead_after_the_schedule_and_can_be_replayed() {
    let (server, work) = start_with_forward(|d| {
        command_forward(
            &recorder(d, "echo 'payment service down' >&2; exit 7"),
            10,
            "[\"50ms\", \"50ms\"]",
        )
    })
    .await;
    accept(&server, 5).await;
    eventually(WAIT, "dead", || status_of(&server, 1).0 == "dead").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        event_attempts(work.path()).len(),
        3,
        "one attempt plus one per retry gap, then no more"
    );
    let attempts = attempt_outcomes(&server, 1);
    assert_eq!(attempts.len(), 3);
    let error = attempts[2].1.clone().unwrap();
    assert!(
        error.contains("exit status 7") && error.contains("payment service down"),
        "{error}"
    );

    // The operator sees it, fixes the target, and replays the dead events from the CLI.
    let config = server.config_path();
    let out = run_cli(&["events", "list", "--status", "dead", "--json"], &config);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains("\"status\":\"dead\""));
    let out = run_cli(&["events", "show", "1"], &config);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("attempt 3") && shown.contains("payment service down"),
        "{shown}"
    );

    recorder(work.path(), "exit 0");
    let started = Instant::now();
    let out = run_cli(
        &["events", "replay", "--dead", "--endpoint", "pagarme"],
        &config,
    );
    ok_stdout(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 dead event"));
    eventually(WAIT, "delivered after replay", || {
        status_of(&server, 1).0 == "delivered"
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the running server noticed within seconds"
    );
    assert_eq!(status_of(&server, 1).1, 1, "attempt counting starts again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_event_can_be_replayed_by_id() {
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, "exit 0"), 10, "[\"1s\"]")).await;
    accept(&server, 6).await;
    eventually(WAIT, "delivered", || status_of(&server, 1).0 == "delivered").await;
    let out = run_cli(&["events", "replay", "1"], &server.config_path());
    ok_stdout(&out);
    eventually(WAIT, "delivered again", || {
        event_attempts(work.path()).len() == 2
    })
    .await;
    let out = run_cli(&["events", "replay", "77"], &server.config_path());
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_hangs_is_killed_at_its_timeout() {
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, "sleep 30; exit 0"), 1, "[\"10m\"]"))
            .await;
    accept(&server, 7).await;
    eventually(WAIT, "the attempt was cut off", || {
        !attempt_outcomes(&server, 1).is_empty()
    })
    .await;
    let attempts = attempt_outcomes(&server, 1);
    assert_eq!(attempts[0].0, "failed");
    assert!(
        attempts[0].1.as_deref().unwrap().contains("timed out"),
        "{attempts:?}"
    );
    let (status, tries) = status_of(&server, 1);
    assert_eq!(
        (status.as_str(), tries),
        ("pending", 1),
        "waits for its retry"
    );
    assert_eq!(event_attempts(work.path()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_one_delivers_in_arrival_order() {
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, "sleep 0.05; exit 0"), 10, "[\"1s\"]"))
            .await;
    for n in 0..6 {
        accept(&server, n).await;
    }
    eventually(WAIT, "all delivered", || {
        event_attempts(work.path()).len() == 6
    })
    .await;
    let order: Vec<i64> = event_attempts(work.path())
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(order, [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_one_holds_the_line_while_the_head_waits_for_its_retry() {
    // Event 1's first attempt fails; 2 and 3 must wait for its retry, not overtake it.
    let fail_first = "[ \"$PORTARIA_EVENT_ID $PORTARIA_ATTEMPT\" = \"1 1\" ] && exit 3; exit 0";
    let (server, work) =
        start_with_forward(|d| command_forward(&recorder(d, fail_first), 10, "[\"1s\"]")).await;
    for n in 0..3 {
        accept(&server, n).await;
    }
    eventually(WAIT, "all delivered", || {
        event_attempts(work.path()).len() == 4
    })
    .await;
    assert_eq!(
        event_attempts(work.path()),
        [(1, 1), (1, 2), (2, 1), (3, 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_two_runs_two_deliveries_at_once() {
    // Each delivery succeeds only if it sees another one running beside it within 10 s.
    let wait_for_a_sibling = "touch \"$D/in.$PORTARIA_EVENT_ID\"\n\
         for _ in $(seq 100); do\n\
           [ \"$(ls \"$D\" | grep -c '^in\\.')\" -ge 2 ] && exit 0\n\
           sleep 0.1\n\
         done\n\
         exit 1";
    let extra = |d: &Path| {
        format!(
            "{}concurrency = 2\n",
            command_forward(&recorder(d, wait_for_a_sibling), 30, "[\"1h\"]")
        )
    };
    let (server, work) = start_with_forward(extra).await;
    for n in 0..2 {
        accept(&server, n).await;
    }
    eventually(WAIT, "both attempted", || {
        event_attempts(work.path()).len() == 2
    })
    .await;
    eventually(WAIT, "both finished", || {
        status_of(&server, 1).0 != "delivering" && status_of(&server, 2).0 != "delivering"
    })
    .await;
    assert_eq!(status_of(&server, 1), ("delivered".to_string(), 1));
    assert_eq!(status_of(&server, 2), ("delivered".to_string(), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_target_does_not_slow_intake() {
    let extra = |d: &Path| {
        format!(
            "{}concurrency = 2\n",
            command_forward(&recorder(d, "sleep 3; exit 0"), 10, "[\"1s\"]")
        )
    };
    let (server, _work) = start_with_forward(extra).await;
    for n in 0..10 {
        let started = Instant::now();
        accept(&server, n).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "intake waited on delivery: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_lets_the_delivery_in_flight_finish() {
    let (mut server, work) = start_with_forward(|d| {
        command_forward(
            &recorder(d, "sleep 1; echo done >> \"$D/finished\"; exit 0"),
            10,
            "[\"1s\"]",
        )
    })
    .await;
    accept(&server, 8).await;
    eventually(WAIT, "delivery started", || {
        event_attempts(work.path()).len() == 1
    })
    .await;
    let db = server.db.clone();
    server.shutdown().await;
    assert!(
        work.path().join("finished").exists(),
        "the command ran to its end"
    );
    let status: String = open_db(&db)
        .query_row("SELECT status FROM events WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigkill_a_restart_delivers_every_pending_and_interrupted_event() {
    let work = tempfile::tempdir().unwrap();
    // Until the gate file exists, the target hangs (and its orphan exits without a trace).
    let program = recorder(
        work.path(),
        "if [ ! -e \"$D/gate\" ]; then sleep 5; exit 1; fi\necho \"$PORTARIA_EVENT_ID\" >> \"$D/delivered\"",
    );
    let db = work.path().join("p.db");
    let config = work.path().join("p.toml");
    std::fs::write(
        &config,
        base_config(&db, "", &command_forward(&program, 60, "[\"1s\"]")),
    )
    .unwrap();

    let mut first = Process::spawn(&config).await;
    for n in 0..4 {
        let body = payment_body(n);
        assert_eq!(post_pagarme(first.addr, &body).await.status, 200);
    }
    eventually(WAIT, "the first delivery is under way", || {
        event_attempts(work.path()).len() == 1
    })
    .await;
    first.signal(libc::SIGKILL);
    first.wait(Duration::from_secs(10)).await;
    let statuses: Vec<String> = {
        let conn = open_db(&db);
        let mut stmt = conn
            .prepare("SELECT status FROM deliveries ORDER BY event_id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(statuses, ["delivering", "pending", "pending", "pending"]);

    std::fs::write(work.path().join("gate"), "").unwrap();
    let second = Process::spawn(&config).await;
    let delivered = || {
        let mut ids: Vec<i64> = std::fs::read_to_string(work.path().join("delivered"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    eventually(WAIT, "all four delivered after restart", || {
        delivered() == [1, 2, 3, 4]
    })
    .await;
    let conn = open_db(&db);
    eventually(WAIT, "all recorded delivered", || {
        conn.query_row(
            "SELECT count(*) FROM events WHERE status = 'delivered'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 4
    })
    .await;
    let interrupted: i64 = conn
        .query_row(
            "SELECT count(*) FROM attempts WHERE outcome = 'interrupted'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(interrupted, 1);
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_left_waiting_by_a_removed_forward_are_reported_at_start_up() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("p.db");
    let config = work.path().join("p.toml");
    let failing = recorder(work.path(), "exit 1");
    std::fs::write(
        &config,
        base_config(&db, "", &command_forward(&failing, 10, "[\"10m\"]")),
    )
    .unwrap();
    let mut first = Process::spawn(&config).await;
    let body = payment_body(1);
    assert_eq!(post_pagarme(first.addr, &body).await.status, 200);
    eventually(WAIT, "the first attempt failed", || {
        event_attempts(work.path()).len() == 1
    })
    .await;
    first.signal(libc::SIGTERM);
    // Each attempt has its log line.
    let log = first.log.clone();
    eventually(WAIT, "the attempt's log line", || {
        log.lock()
            .unwrap()
            .contains("delivery event_id=1 endpoint=\"pagarme\" attempt=1")
    })
    .await;
    assert!(log.lock().unwrap().contains("outcome=\"failed\""));
    assert!(first.wait(Duration::from_secs(20)).await.success());

    // The operator removes the forward; the event is still pending, and the start says so.
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
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
        line.contains("endpoint=\"pagarme\"") && line.contains("waiting=1"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_never_sees_the_variables_the_config_reads_secrets_from() {
    let work = tempfile::tempdir().unwrap();
    let program = shell_script(
        work.path(),
        "dump-env.sh",
        "cat > /dev/null\nenv > \"$D/env.tmp\" && mv \"$D/env.tmp\" \"$D/env\"",
    );
    let db = work.path().join("p.db");
    let config = work.path().join("p.toml");
    // The github endpoint reads its secret from the environment; pagarme forwards.
    let text = base_config(&db, "", &command_forward(&program, 10, "[\"1s\"]")).replace(
        &format!("secret = \"{GITHUB_SECRET}\""),
        "secret_env = \"PORTARIA_IT_GITHUB_SECRET\"",
    );
    std::fs::write(&config, text).unwrap();
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("PORTARIA_IT_GITHUB_SECRET", GITHUB_SECRET)
        .env("PORTARIA_IT_HARMLESS", "inherited");
    let server = Process::spawn_command(serve).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let env_file = work.path().join("env");
    eventually(WAIT, "the command ran", || env_file.exists()).await;
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(
        env.lines().any(|l| l == "PORTARIA_IT_HARMLESS=inherited"),
        "other variables are inherited: {env}"
    );
    assert!(
        !env.contains("PORTARIA_IT_GITHUB_SECRET") && !env.contains(GITHUB_SECRET),
        "the secret's variable is hidden: {env}"
    );
    drop(server);
}
