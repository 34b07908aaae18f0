//! Alerts to the owner, with real parts: the real server (in-process, or the binary where a
//! restart, a kill or a fault hook is involved), a real alert command that records its stdin,
//! a real HTTP listener for the URL sink and the contrib scripts, short durations.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

/// `[alerts]` with the recording command (put where `server_extra` goes: after `[server]`).
fn alerts_table(dir: &Path, every: &str) -> String {
    format!(
        "\n[alerts]\ncommand = [\"{}\"]\nalert_every = \"{every}\"\n",
        alert_command(dir).display()
    )
}

/// A pagarme forward to a command that always fails, with one quick retry: dead in ~50 ms.
fn dying_forward(dir: &Path) -> String {
    let fail = dir.join("fail-forward.sh");
    write_executable(&fail, "#!/bin/sh\ncat > /dev/null\nexit 1\n");
    format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 5 }}\nretry = [\"50ms\"]\n",
        fail.display()
    )
}

fn dead_ids(db: &Path) -> Vec<i64> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT id FROM events WHERE status = 'dead' ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test]
async fn a_dead_event_alerts_at_once_and_later_ones_wait_for_one_summary() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = TestServer::start(&alerts_table(w, "3s"), &dying_forward(w)).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let limit = Duration::from_secs(10);
    eventually(limit, "the first dead alert", || {
        of_kind(w, "dead").len() == 1
    })
    .await;
    let first_sent = Instant::now();
    let first = &of_kind(w, "dead")[0];
    let id1 = dead_ids(&server.db)[0];
    assert_eq!(first["endpoint"], "pagarme");
    assert_eq!(first["count"], 1);
    assert_eq!(first["first_event_id"], id1);
    assert_eq!(first["last_event_id"], id1);
    assert_eq!(
        first["route"], "default",
        "the route its delivery went dead on"
    );
    let message = first["message"].as_str().unwrap();
    assert!(message.contains("went dead"), "{message}");
    assert!(first["time"].as_str().unwrap().ends_with('Z'));

    for n in [2, 3] {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    eventually(limit, "three dead events", || {
        dead_ids(&server.db).len() == 3
    })
    .await;
    // Give the task a few ticks (750 ms each): still within the 3 s since the first alert.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(
        first_sent.elapsed() < Duration::from_millis(2900),
        "the machine is too slow"
    );
    assert_eq!(alerts(w).len(), 1, "no second alert within alert_every");

    eventually(limit, "the summary alert", || of_kind(w, "dead").len() == 2).await;
    // Seen a little after it was sent (the command ran, the file was polled): some slack.
    assert!(
        first_sent.elapsed() >= Duration::from_millis(2500),
        "not before alert_every"
    );
    let ids = dead_ids(&server.db);
    let summary = &of_kind(w, "dead")[1];
    assert_eq!(summary["count"], 2, "{summary}");
    assert_eq!(summary["first_event_id"], ids[1]);
    assert_eq!(summary["last_event_id"], ids[2]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(alerts(w).len(), 2, "nothing new, nothing sent");
    server.stop().await;
}

fn process_config(dir: &Path, alerts: &str, extra: &str) -> PathBuf {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "off"
{alerts}

[storage]
path = "{db}"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret_env = "PORTARIA_TEST_ALERT_SECRET"
{extra}
"#,
        db = dir.join("portaria.db").display()
    );
    let path = dir.join("portaria.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn serve(config: &Path, env: &[(&str, &str)]) -> Process {
    let mut command = portaria();
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("PORTARIA_TEST_ALERT_SECRET", PAGARME_SECRET);
    for (k, v) in env {
        command.env(k, v);
    }
    Process::spawn_command(command).await
}

/// The saved state of the dead alerts of pagarme (its one route) says nothing is pending.
fn dead_alert_saved(db: &Path) -> bool {
    open_db(db)
        .query_row(
            "SELECT value FROM meta WHERE key = 'alerts:dead:pagarme:default'",
            [],
            |r| r.get::<_, String>(0),
        )
        .is_ok_and(|v| v.contains("\"pending\":null"))
}

#[tokio::test]
async fn a_restart_never_announces_a_dead_event_twice_and_announces_an_unannounced_one() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let db = w.join("portaria.db");
    let limit = Duration::from_secs(20);
    // An event goes dead while no alerts are configured.
    let config = process_config(w, "", &dying_forward(w));
    let mut first = serve(&config, &[]).await;
    assert_eq!(post_pagarme(first.addr, &payment_body(1)).await.status, 200);
    eventually(limit, "a dead event", || dead_ids(&db).len() == 1).await;
    first.signal(libc::SIGTERM);
    first.wait(limit).await;

    // Started with alerts: the dead event found at start is announced, once.
    let config = process_config(w, &alerts_table(w, "2s"), &dying_forward(w));
    let second = serve(&config, &[]).await;
    eventually(limit, "the dead found at start", || alerts(w).len() == 1).await;
    assert_eq!(alerts(w)[0]["first_event_id"], dead_ids(&db)[0]);
    eventually(limit, "the alert state saved", || dead_alert_saved(&db)).await;
    // The command ran without the secret's variable.
    let env = std::fs::read_to_string(w.join("alert-env")).unwrap();
    assert!(!env.contains("PORTARIA_TEST_ALERT_SECRET"), "{env}");
    assert!(!env.contains(PAGARME_SECRET));
    second.signal(libc::SIGKILL);
    drop(second);

    let third = serve(&config, &[]).await;
    // Several ticks (500 ms) and more than alert_every: nothing to repeat.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(alerts(w).len(), 1, "announced twice after a kill");
    // A new dead event is still announced.
    assert_eq!(post_pagarme(third.addr, &payment_body(2)).await.status, 200);
    eventually(limit, "the new dead alert", || alerts(w).len() == 2).await;
    // The alert follows the delivery's death; the event's own status is rolled up after it.
    eventually(limit, "the second event rolled up dead", || {
        dead_ids(&db).len() == 2
    })
    .await;
    let ids = dead_ids(&db);
    assert_eq!(alerts(w)[1]["first_event_id"], ids[1]);
    assert_eq!(alerts(w)[1]["count"], 1);
}

#[tokio::test]
async fn a_failing_alert_command_is_retried_and_breaks_nothing() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let limit = Duration::from_secs(20);
    std::fs::write(w.join("fail"), "").unwrap();
    let config = process_config(w, &alerts_table(w, "1s"), &dying_forward(w));
    let server = serve(&config, &[]).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let said = |p: &Process, what: &str| p.log.lock().unwrap().contains(what);
    eventually(limit, "the failure logged", || {
        said(&server, "alert not sent; trying again at the next tick")
    })
    .await;
    assert!(said(&server, "the alert service said no"), "stderr quoted");
    // Intake and delivery go on: more webhooks are accepted and die as their schedule says.
    for n in 2..5 {
        let started = Instant::now();
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let db = w.join("portaria.db");
    eventually(limit, "all four dead", || dead_ids(&db).len() == 4).await;
    assert!(alerts(w).is_empty());
    // The service is back: the next tick sends what was pending, once.
    std::fs::remove_file(w.join("fail")).unwrap();
    eventually(limit, "the retried alert", || !alerts(w).is_empty()).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let dead = of_kind(w, "dead");
    let total: u64 = dead.iter().map(|a| a["count"].as_u64().unwrap()).sum();
    assert_eq!(
        total, 4,
        "every dead event announced exactly once: {dead:?}"
    );
    assert_eq!(dead[0]["first_event_id"], dead_ids(&db)[0]);
}

#[tokio::test]
async fn a_quiet_endpoint_alerts_through_the_url_once_per_silence() {
    let target = Target::start(vec![200]).await;
    let alerts_url = format!(
        "\n[alerts]\nurl = \"http://{}/alerts\"\nalert_every = \"1s\"\n",
        target.addr
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    // pagarme and github both have quiet_after; github never receives, so it never alerts.
    let text = base_config(&db, &alerts_url, "quiet_after = \"1s\"").replace(
        &format!("secret = \"{GITHUB_SECRET}\"\n"),
        &format!("secret = \"{GITHUB_SECRET}\"\nquiet_after = \"1s\"\n"),
    );
    let server = TestServer::start_with(dir, db, &text).await;
    let quiet = |t: &Target| {
        t.seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap())
            .filter(|a| a["kind"] == "quiet")
            .collect::<Vec<_>>()
    };
    let started = Instant::now();
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let limit = Duration::from_secs(10);
    eventually(limit, "the quiet alert", || quiet(&target).len() == 1).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before quiet_after"
    );
    let alert = &quiet(&target)[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert!(
        alert["message"]
            .as_str()
            .unwrap()
            .contains("no webhook for 1s"),
        "{alert}"
    );
    let content_type = target.seen.lock().unwrap()[0].headers["content-type"].clone();
    assert_eq!(content_type, "application/json");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        quiet(&target).len(),
        1,
        "one silence, one alert; github never received"
    );
    // A webhook ends the silence; the next one is announced again.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
    eventually(limit, "the second silence", || quiet(&target).len() == 2).await;
    assert_eq!(quiet(&target)[1]["endpoint"], "pagarme");
    server.stop().await;
}

#[tokio::test]
async fn duplicates_over_five_percent_alert() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = TestServer::start(&alerts_table(w, "1h"), "").await;
    for n in 0..20 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(of_kind(w, "duplicates").is_empty());
    // The gateway redelivers two of them: 2 of 22.
    for n in [3, 4] {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    // alert_every = 1h: the tick is the longest, 10 s.
    let limit = Duration::from_secs(20);
    eventually(limit, "the duplicates alert", || {
        of_kind(w, "duplicates").len() == 1
    })
    .await;
    let alert = &of_kind(w, "duplicates")[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["count"], 2);
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.starts_with("2 of the last 22 verified webhooks"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_burst_of_refused_signatures_alerts_as_a_secret_rotated() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = TestServer::start(&alerts_table(w, "1h"), "").await;
    // Signed with the right secret, but over another body: what a gateway sends once its
    // secret was rotated and portaria still has the old one.
    for n in 0..5 {
        let body = payment_body(n);
        let forged = pagarme_headers(b"another body");
        let reply = post(server.addr, "/webhooks/pagarme", &forged, &body).await;
        assert_eq!(reply.status, 401);
    }
    let limit = Duration::from_secs(20);
    eventually(limit, "the rejected alert", || {
        of_kind(w, "rejected").len() == 1
    })
    .await;
    let alert = &of_kind(w, "rejected")[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["count"], 5);
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("was the secret rotated")
            && message.contains("portaria events rejected --endpoint pagarme"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test]
async fn storage_errors_answered_503_alert() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let config = process_config(w, &alerts_table(w, "1s"), "");
    let server = serve(&config, &[]).await;
    // Another process holds the write lock past the busy timeout: the insert cannot begin,
    // and intake answers 503.
    let blocker = open_db(&w.join("portaria.db"));
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let reply = post_pagarme(server.addr, &payment_body(1)).await;
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(reply.status, 503);
    let limit = Duration::from_secs(30);
    eventually(limit, "the storage alert", || {
        !of_kind(w, "storage").is_empty()
    })
    .await;
    let alert = &of_kind(w, "storage")[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["count"], 1);
    assert!(alert["first_event_id"].is_null(), "no event was stored");
    assert!(
        alert["message"].as_str().unwrap().contains("503"),
        "{alert}"
    );
}

#[tokio::test]
async fn a_storage_alert_says_how_long_the_gateway_keeps_retrying() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let asaas = "\n[[endpoint]]\npath = \"/webhooks/asaas\"\nprovider = \"asaas\"\nsecret = \"tok-asaas\"\n";
    let config = process_config(w, &alerts_table(w, "1s"), asaas);
    let server = serve(&config, &[]).await;
    let blocker = open_db(&w.join("portaria.db"));
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let body = br#"{"id":"evt_1","event":"PAYMENT_RECEIVED"}"#;
    let headers = [h("asaas-access-token", "tok-asaas")];
    let reply = post(server.addr, "/webhooks/asaas", &headers, body).await;
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(reply.status, 503);
    eventually(Duration::from_secs(30), "the storage alert", || {
        !of_kind(w, "storage").is_empty()
    })
    .await;
    let alert = &of_kind(w, "storage")[0];
    assert_eq!(alert["endpoint"], "asaas");
    let message = alert["message"].as_str().unwrap();
    // One failure seen, one due on Asaas's schedule in the first seconds: 14 left.
    assert!(
        message.contains("Asaas pauses this queue after about 14 more failures (in about 12h "),
        "{message}"
    );
    assert!(
        message.contains("deleted 14 days after the pause"),
        "{message}"
    );
}

#[tokio::test]
async fn deliveries_that_keep_taking_over_five_seconds_alert() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let slow = w.join("slow.sh");
    write_executable(&slow, "#!/bin/sh\ncat > /dev/null\nsleep 5.3\n");
    let forward = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 20 }}\nconcurrency = 3\n",
        slow.display()
    );
    let server = TestServer::start(&alerts_table(w, "4s"), &forward).await;
    for n in 0..3 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    let limit = Duration::from_secs(20);
    eventually(limit, "the slow alert", || !of_kind(w, "slow").is_empty()).await;
    let alert = &of_kind(w, "slow")[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["count"], 3);
    server.stop().await;
}

#[tokio::test]
async fn a_reload_that_changes_the_alerts_says_they_need_a_restart() {
    use portaria::config::{Config, Source};
    use portaria::server::{Listeners, Options, Reloaded};
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let db = w.join("portaria.db");
    let path = w.join("portaria.toml");
    let text = base_config(&db, &alerts_table(w, "1h"), "");
    std::fs::write(&path, &text).unwrap();
    let config = Config::parse(&text, Source::File(path.clone())).unwrap();
    let listeners = Listeners::bind(&config.server).await.unwrap();
    let admin = listeners.admin.as_ref().unwrap().local_addr().unwrap();
    let (trigger, requests) = portaria::server::reload_channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = Options {
        reload: Some(requests),
        ..Options::default()
    };
    let task = tokio::spawn(portaria::server::serve_with(
        config,
        listeners,
        async {
            let _ = stopped.await;
        },
        options,
    ));
    eventually(Duration::from_secs(20), "the server is up", || {
        std::net::TcpStream::connect(admin).is_ok()
    })
    .await;
    let restart_needed = |reloaded: Reloaded| match reloaded {
        Reloaded::Applied { restart_needed } => restart_needed,
        other => panic!("not applied: {other:?}"),
    };
    let same = restart_needed(trigger.reload().await.unwrap());
    assert!(same.is_empty(), "{same:?}");
    std::fs::write(
        &path,
        base_config(&db, &alerts_table(w, "1h"), "quiet_after = \"1h\""),
    )
    .unwrap();
    let changed = restart_needed(trigger.reload().await.unwrap());
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].contains("[alerts] or an endpoint's quiet_after changed"));
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// Whether `pid` is gone (or a zombie waiting for its reaper).
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('Z')
    })
}

fn pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_hanging_alert_command_is_killed_with_its_group_at_its_timeout_and_at_shutdown() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let hang = w.join("hang.sh");
    // It leaves a child of its own in its process group, and never finishes.
    write_executable(
        &hang,
        format!(
            "#!/bin/sh\ncat > /dev/null\nsleep 60 &\necho $! >> '{}/sleeps'\nwait\n",
            w.display()
        ),
    );
    let alerts = format!(
        "\n[alerts]\ncommand = [\"{}\"]\nalert_every = \"1s\"\ntimeout_secs = 1\n",
        hang.display()
    );
    let server = TestServer::start(&alerts, &dying_forward(w)).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let limit = Duration::from_secs(15);
    let sleeps = w.join("sleeps");
    eventually(limit, "a second try after the first timed out", || {
        pids(&sleeps).len() >= 2
    })
    .await;
    let first = pids(&sleeps)[0];
    assert!(
        gone(first),
        "the first run's group was killed at its timeout"
    );
    // Intake is not held up by the hanging alert.
    let started = Instant::now();
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // A stop while one runs: it does not wait for it, and kills it.
    let stopping = Instant::now();
    server.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "the stop waited for the alert"
    );
    let running = pids(&sleeps);
    eventually(limit, "every run's group killed", || {
        running.iter().all(|&p| gone(p))
    })
    .await;
}

#[tokio::test]
async fn a_refusing_alert_url_is_tried_again_and_its_credentials_never_logged() {
    let target = Target::start(vec![500, 200]).await;
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let alerts = format!(
        "\n[alerts]\nurl = \"http://owner:hunter2@{}/alerts\"\nalert_every = \"1s\"\n",
        target.addr
    );
    let config = process_config(w, &alerts, &dying_forward(w));
    let server = serve(&config, &[]).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    let limit = Duration::from_secs(15);
    eventually(limit, "refused, then taken", || target.count() == 2).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(target.count(), 2, "taken once, not sent again");
    let second: Value = serde_json::from_slice(&target.seen.lock().unwrap()[1].body).unwrap();
    assert_eq!(second["kind"], "dead");
    assert_eq!(second["count"], 1);
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("/alerts: HTTP 500"), "{log}");
    assert!(!log.contains("hunter2"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_paused_over_a_day_with_deliveries_waiting_alerts_until_resumed() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // The target refuses: the delivery waits (pending) for its next try, an hour away.
    let closed = ClosedPort::new();
    let forward = format!(
        "forward = {{ url = \"http://{}/in\", timeout_secs = 2 }}\nretry = [\"1h\"]\n",
        closed.addr
    );
    let server = TestServer::start(&alerts_table(w, "1s"), &forward).await;
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    eventually(Duration::from_secs(10), "the first attempt failed", || {
        server.one::<i64>("SELECT count(*) FROM attempts") == 1
    })
    .await;
    let out = run_cli(
        &[
            "route",
            "pause",
            "--endpoint",
            "pagarme",
            "--route",
            "default",
        ],
        &server.config_path(),
    );
    ok_stdout(&out);
    // Paused for less than a day: several ticks (250 ms), no alert.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(of_kind(w, "paused_long").is_empty(), "{:?}", alerts(w));

    // The same pause, taken 25 hours ago.
    let day_ago = server.one::<i64>("SELECT paused_at FROM route_pauses") - 25 * 3_600_000;
    server
        .db()
        .execute("UPDATE route_pauses SET paused_at = ?1", [day_ago])
        .unwrap();
    eventually(Duration::from_secs(10), "the paused_long alert", || {
        !of_kind(w, "paused_long").is_empty()
    })
    .await;
    let alert = &of_kind(w, "paused_long")[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["route"], "default");
    assert_eq!(alert["count"], 1, "{alert}");
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("portaria route resume --endpoint pagarme --route default"),
        "{message}"
    );

    // Resumed: the reminder stops.
    let out = run_cli(
        &[
            "route",
            "resume",
            "--endpoint",
            "pagarme",
            "--route",
            "default",
        ],
        &server.config_path(),
    );
    ok_stdout(&out);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent = of_kind(w, "paused_long").len();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        of_kind(w, "paused_long").len(),
        sent,
        "no reminder once resumed"
    );
    server.stop().await;
}

/// The id of the first event of type `event_type`.
fn first_of_type(db: &Path, event_type: &str) -> i64 {
    open_db(db)
        .query_row(
            "SELECT min(id) FROM events WHERE event_type = ?1",
            [event_type],
            |r| r.get(0),
        )
        .unwrap()
}

/// The saved known event types of pagarme (`alerts:types:pagarme`), if saved.
fn known_types(db: &Path) -> Option<Value> {
    let text: String = open_db(db)
        .query_row(
            "SELECT value FROM meta WHERE key = 'alerts:types:pagarme'",
            [],
            |r| r.get(0),
        )
        .ok()?;
    serde_json::from_str(&text).ok()
}

#[tokio::test]
async fn an_event_type_never_stored_alerts_once_by_name_after_the_learning_day() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let limit = Duration::from_secs(20);
    let server = TestServer::start(&alerts_table(w, "1s"), "").await;
    let (db, text) = (
        server.db.clone(),
        std::fs::read_to_string(server.config_path()).unwrap(),
    );
    // The task's first look starts from the newest event: let it look before the first one.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let kind = |n: usize, t: &str| payment(n, t, Some("pay_1"));
    let sent = |n| async move { post_pagarme(server.addr, &kind(n, "charge.paid")).await };
    assert_eq!(sent(1).await.status, 200);
    // The endpoint's first day: its types are learned, not announced.
    eventually(limit, "charge.paid learned", || {
        known_types(&db).is_some_and(|k| k["types"] == serde_json::json!(["charge.paid"]))
    })
    .await;
    let refunded = post_pagarme(server.addr, &kind(2, "charge.refunded")).await;
    assert_eq!(refunded.status, 200);
    eventually(limit, "charge.refunded learned", || {
        known_types(&db).is_some_and(|k| k["types"].as_array().unwrap().len() == 2)
    })
    .await;
    assert!(of_kind(w, "new_type").is_empty(), "{:?}", alerts(w));
    let dir = server.stop().await;

    // A day later (the endpoint's first event, as the task saved it, 25 hours ago).
    let mut known = known_types(&db).unwrap();
    known["since_ms"] = (known["since_ms"].as_i64().unwrap() - 25 * 3_600_000).into();
    open_db(&db)
        .execute(
            "UPDATE meta SET value = ?1 WHERE key = 'alerts:types:pagarme'",
            [known.to_string()],
        )
        .unwrap();
    let server = TestServer::start_with(dir, db.clone(), &text).await;
    for (n, t) in [(3, "charge.paid"), (4, "subscription.renewed")] {
        assert_eq!(post_pagarme(server.addr, &kind(n, t)).await.status, 200);
    }
    eventually(limit, "the new_type alert", || {
        !of_kind(w, "new_type").is_empty()
    })
    .await;
    let alert = &of_kind(w, "new_type")[0];
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["count"], 1);
    assert_eq!(
        alert["event_types"],
        serde_json::json!(["subscription.renewed"])
    );
    assert_eq!(
        alert["first_event_id"],
        first_of_type(&db, "subscription.renewed")
    );
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("never stored: `subscription.renewed`")
            && message.contains("--type subscription.renewed"),
        "{message}"
    );
    // Once: the same type again, and known ones, say nothing more (several ticks, past
    // alert_every).
    for (n, t) in [(5, "subscription.renewed"), (6, "charge.refunded")] {
        assert_eq!(post_pagarme(server.addr, &kind(n, t)).await.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(of_kind(w, "new_type").len(), 1, "{:?}", alerts(w));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_type_never_stored_alerts_on_postgres_too() {
    let Some(pg) = crate::support::pg_cluster::shared() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let database = pg.database().await;
    let text = storage_config(&format!("url = \"{}\"", pg.url(&database)))
        .pagarme("")
        .then(&alerts_table(w, "1s"))
        .text();
    let start = || async {
        let dir = tempfile::tempdir().unwrap();
        let unused = dir.path().join("unused.db");
        TestServer::start_with(dir, unused, &text).await
    };
    let client = pg.connect(&database).await;
    const KNOWN: &str = "SELECT value FROM meta WHERE key = 'alerts:types:pagarme'";
    let server = start().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let kind = |n: usize, t: &str| payment(n, t, None);
    assert_eq!(
        post_pagarme(server.addr, &kind(1, "charge.paid"))
            .await
            .status,
        200
    );
    // Learned by the instance holding the alerts lock, not announced (its first day).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut known: Value = loop {
        if let Ok(row) = client.query_one(KNOWN, &[]).await {
            break serde_json::from_str(row.get::<_, &str>(0)).unwrap();
        }
        assert!(Instant::now() < deadline, "charge.paid never learned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(known["types"], serde_json::json!(["charge.paid"]));
    server.stop().await;
    assert!(of_kind(w, "new_type").is_empty());

    known["since_ms"] = (known["since_ms"].as_i64().unwrap() - 25 * 3_600_000).into();
    client
        .execute(
            "UPDATE meta SET value = $1 WHERE key = 'alerts:types:pagarme'",
            &[&known.to_string()],
        )
        .await
        .unwrap();
    let server = start().await;
    let renewed = post_pagarme(server.addr, &kind(2, "subscription.renewed")).await;
    assert_eq!(renewed.status, 200);
    eventually(Duration::from_secs(20), "the new_type alert", || {
        !of_kind(w, "new_type").is_empty()
    })
    .await;
    let alert = &of_kind(w, "new_type")[0];
    assert_eq!(
        alert["event_types"],
        serde_json::json!(["subscription.renewed"])
    );
    let id: i64 = client
        .query_one("SELECT max(id) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(alert["first_event_id"], id);
    server.stop().await;
}

/// pagarme's keys for the unrouted tests: one route taking `charge.*` only, `unrouted_after`
/// of 1 s.
fn charges_only(w: &Path) -> String {
    let target = w.join("target.sh");
    write_executable(&target, "#!/bin/sh\ncat > /dev/null\n");
    format!(
        "unrouted_after = \"1s\"\n[[endpoint.route]]\nname = \"erp\"\n\
         events = [\"charge.*\"]\nforward = {{ command = [\"{}\"] }}\n",
        target.display()
    )
}

/// Posts a routed event and two no route takes, waits for the alert, checks what it says and
/// that it is sent once; returns it (its ids are checked by the caller, engine by engine).
async fn unrouted_alert(server: &TestServer, w: &Path) -> Value {
    // Let the task take its first look (it starts the spans).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let body = |n: usize, t: &str| payment(n, t, None);
    for (n, t) in [(1, "charge.paid"), (2, "order.created"), (3, "order.paid")] {
        assert_eq!(post_pagarme(server.addr, &body(n, t)).await.status, 200);
    }
    eventually(Duration::from_secs(20), "the unrouted alert", || {
        !of_kind(w, "unrouted").is_empty()
    })
    .await;
    let alert = of_kind(w, "unrouted")[0].clone();
    assert_eq!(alert["endpoint"], "pagarme");
    assert_eq!(alert["count"], 2, "{alert}");
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("matched no route and are still stored only after 1s")
            && message.contains("portaria events list --endpoint pagarme --status stored"),
        "{message}"
    );
    // Announced once: the next ticks find nothing new.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(of_kind(w, "unrouted").len(), 1);
    alert
}

#[tokio::test]
async fn events_no_route_took_alert_once_unrouted_after_has_passed() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = TestServer::start(&alerts_table(w, "1h"), &charges_only(w)).await;
    let alert = unrouted_alert(&server, w).await;
    let of = |t| first_of_type(&server.db, t);
    assert_eq!(alert["first_event_id"], of("order.created"));
    assert_eq!(alert["last_event_id"], of("order.paid"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_no_route_took_alert_on_postgres_too() {
    let Some(pg) = crate::support::pg_cluster::shared() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let database = pg.database().await;
    let text = storage_config(&format!("url = \"{}\"", pg.url(&database)))
        .pagarme(&charges_only(w))
        .then(&alerts_table(w, "1h"))
        .text();
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("unused.db");
    let server = TestServer::start_with(dir, unused, &text).await;
    let alert = unrouted_alert(&server, w).await;
    let client = pg.connect(&database).await;
    for (field, t) in [
        ("first_event_id", "order.created"),
        ("last_event_id", "order.paid"),
    ] {
        let sql = format!("SELECT min(id) FROM events WHERE event_type = '{t}'");
        let id: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
        assert_eq!(alert[field], id, "{alert}");
    }
    server.stop().await;
}

#[tokio::test]
async fn an_event_lacking_a_field_its_provider_always_sends_is_kept_flagged_and_alerts_drift() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = TestServer::start(&alerts_table(w, "1h"), "").await;
    let stripe = |t: &str, data: &str| {
        format!(r#"{{"id":"evt_{t}","type":"{t}","data":{data}}}"#).into_bytes()
    };
    let post_stripe = |body: Vec<u8>| async move {
        let headers = stripe_headers(now_secs(), &body);
        post(server.addr, "/webhooks/stripe", &headers, &body).await
    };
    let fine = post_stripe(stripe("charge.succeeded", r#"{"object":{"id":"ch_1"}}"#)).await;
    assert_eq!(fine.status, 200);
    // Never refused: stored like any other.
    let drifted = post_stripe(stripe("charge.failed", r#"{"obj":{"id":"ch_2"}}"#)).await;
    assert_eq!(drifted.status, 200, "{}", drifted.body);
    let id = first_of_type(&server.db, "charge.failed");
    eventually(Duration::from_secs(20), "the drift alert", || {
        !of_kind(w, "drift").is_empty()
    })
    .await;
    let alert = &of_kind(w, "drift")[0];
    assert_eq!(alert["endpoint"], "stripe");
    assert_eq!(alert["count"], 1);
    assert_eq!(alert["last_event_id"], id);
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("lacked a field") && message.contains("always carry `data.object`"),
        "{message}"
    );
    // The status page flags it, and only it.
    let admin = server.admin.unwrap();
    let page = get(admin, &format!("/events/{id}"), &[]).await;
    assert!(page.body.contains("Drift: "), "{}", page.body);
    assert!(page.body.contains("<code>data.object</code>"));
    let api = json(&get(admin, &format!("/api/events/{id}"), &[]).await);
    assert_eq!(api["missing_fields"], serde_json::json!(["data.object"]));
    let ok_id = first_of_type(&server.db, "charge.succeeded");
    let page = get(admin, &format!("/events/{ok_id}"), &[]).await;
    assert!(!page.body.contains("Drift: "));
    let api = json(&get(admin, &format!("/api/events/{ok_id}"), &[]).await);
    assert!(api.get("missing_fields").is_none(), "{api:#}");
    server.stop().await;
}
