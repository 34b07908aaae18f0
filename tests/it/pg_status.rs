//! The read side on PostgreSQL, against a real PostgreSQL (`pg_cluster`): counts kept while
//! PostgreSQL is down, the status API answering the same as on SQLite for every filter (and
//! for the rejected requests kept),
//! `portaria events list/show/replay` and `portaria prune` with the real binary. What the
//! store reads and counts (the overview, the hourly counters every instance adds to, the list,
//! replay) is the store's behaviour suite's, on both engines (`store_suite::status`,
//! `store_suite::attempts`).

use std::time::{Duration, Instant};

use crate::support::pg_cluster::{self, Cluster};
use crate::support::postgres::{count, server, until_count};
use crate::support::*;

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

/// Counts taken while PostgreSQL is down are not lost: the failed fold keeps them, and the
/// first fold after it is back writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_taken_while_postgres_is_down_reach_the_table_when_it_is_back() {
    let Some(pg) = Cluster::start() else {
        return;
    };
    let db = pg.database().await;
    let s = server(&pg.url(&db), "").await;
    pg.stop();
    bad_signature(s.addr).await;
    bad_signature(s.addr).await;
    // At least one fold fails meanwhile (every 2 s).
    tokio::time::sleep(Duration::from_millis(4500)).await;
    pg.resume();
    let client = pg.connect(&db).await;
    until_count(
        &client,
        "SELECT coalesce(sum(bad_signature), 0)::bigint FROM hourly",
        2,
    )
    .await;
    s.stop().await;
}

/// Every page of `/api/events` for `query`, following `next_before`: each event's fields that
/// do not depend on the backend (ids and times do).
async fn all_pages(admin: std::net::SocketAddr, query: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let cursor = before.map(|b| format!("&before={b}")).unwrap_or_default();
        let page = json(&get(admin, &format!("/api/events?limit=2{query}{cursor}"), &[]).await);
        for e in page["events"].as_array().unwrap() {
            out.push(serde_json::json!([
                e["dedup_key"],
                e["object_id"],
                e["event_type"],
                e["status"],
                e["attempts"],
                e["endpoint"],
            ]));
        }
        match page["next_before"].as_i64() {
            Some(next) => before = Some(next),
            None => return out,
        }
        assert!(out.len() < 100, "{query}: pages without end");
    }
}

/// The same requests to a server on SQLite and one on PostgreSQL: the status API lists the
/// same events in the same order for every filter, page by page, and counts the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_api_answers_the_same_on_both_backends() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let on_pg = server(&pg.url(&db), "").await;
    let on_sqlite = TestServer::start("", "").await;
    for s in [&on_sqlite, &on_pg] {
        for n in 1..=7 {
            assert_eq!(post_pagarme(s.addr, &payment_body(n)).await.status, 200);
        }
        assert_eq!(post_pagarme(s.addr, &payment_body(4)).await.status, 200);
        bad_signature(s.addr).await;
    }
    let (sqlite, postgres) = (on_sqlite.admin.unwrap(), on_pg.admin.unwrap());
    for query in [
        "",
        "&endpoint=pagarme",
        "&status=stored",
        "&status=dead",
        // Through the deliveries' queue: SQLite names its partial index, PostgreSQL cannot.
        "&status=pending",
        "&status=delivering",
        "&endpoint=pagarme&status=stored",
        "&q=ch_3",
        "&q=ch_",
        "&type=charge.paid",
        "&type=refund",
    ] {
        let want = all_pages(sqlite, query).await;
        let got = all_pages(postgres, query).await;
        assert_eq!(got, want, "{query}");
    }
    assert_eq!(all_pages(postgres, "").await.len(), 7);
    // The counts (once PostgreSQL's fold is in).
    let pick = |stats: &serde_json::Value| {
        let e = stats["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["endpoint"] == "pagarme")
            .unwrap()
            .clone();
        serde_json::json!([
            e["received_last_hour"],
            e["received_last_day"],
            e["duplicates_last_day"],
            e["rejected_last_day"],
            e["pending"],
            e["dead"],
            stats["hours"][47]
        ])
    };
    let want = pick(&json(&get(sqlite, "/api/stats", &[]).await));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = pick(&json(&get(postgres, "/api/stats", &[]).await));
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "{got:#} != {want:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The rejected request (the bad signature): listed and shown the same, its id, time and
    // `Host` aside; counted on the card's `rejected_kept`.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (want, got) = loop {
        let (want, got) = (rejected(sqlite).await, rejected(postgres).await);
        if let (Some(want), Some(got)) = (want, got) {
            break (want, got);
        }
        assert!(
            Instant::now() < deadline,
            "the rejected request kept on both"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(got, want);
    assert_eq!(want[0], "bad_signature");
    for admin in [sqlite, postgres] {
        let stats = json(&get(admin, "/api/stats", &[]).await);
        let kept: Vec<_> = stats["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["endpoint"].clone(), e["rejected_kept"].clone()))
            .filter(|(_, n)| n != 0)
            .collect();
        assert_eq!(kept, [("pagarme".into(), 1.into())]);
    }
    on_sqlite.stop().await;
    on_pg.stop().await;
}

/// The one rejected request `/api/rejected` lists, as `/api/rejected/ID` shows it (None until
/// there is one): what does not depend on the backend.
async fn rejected(admin: std::net::SocketAddr) -> Option<serde_json::Value> {
    let listed = json(&get(admin, "/api/rejected", &[]).await);
    let [one] = listed["rejected"].as_array().unwrap().as_slice() else {
        return None;
    };
    let id = one["id"].as_i64().unwrap();
    let r = json(&get(admin, &format!("/api/rejected/{id}"), &[]).await);
    assert_eq!(r["explain"], format!("portaria verify --rejected {id}"));
    assert_eq!(
        (&r["reason"], &r["body_bytes"]),
        (&one["reason"], &one["body_bytes"])
    );
    let headers: Vec<_> = r["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0] != "host")
        .cloned()
        .collect();
    Some(serde_json::json!([
        r["reason"],
        r["detail"],
        r["endpoint"],
        r["body_bytes"],
        r["truncated"],
        r["body_text"],
        r["body_base64"],
        headers,
    ]))
}

/// `portaria events list/show/replay` on PostgreSQL with the real binary, next to a running
/// server (the real binary too): the same outputs as on SQLite, and a replay the server
/// notices by itself (its slow check of the database) and delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_commands_list_show_and_replay_on_postgres() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let target = Target::start(vec![500, 500, 200]).await;
    let db = pg.database().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portaria.toml");
    let text = crate::support::postgres::config(
        &format!("url = \"{}\"", pg.url(&db)),
        &forward_to(target.addr),
    );
    std::fs::write(&path, text).unwrap();
    let serve = Process::spawn(&path).await;
    assert_eq!(post_pagarme(serve.addr, &payment_body(1)).await.status, 200);
    let client = pg.connect(&db).await;
    until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'dead'",
        1,
    )
    .await;
    let id = count(&client, "SELECT id FROM events").await;
    assert_eq!(post_pagarme(serve.addr, &payment_body(2)).await.status, 200);
    until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        1,
    )
    .await;

    let table = ok_stdout(&run_cli(&["events", "list"], &path));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("     ID  RECEIVED (UTC)"), "{table}");
    assert!(lines[1].contains("delivered") && lines[1].contains("charge.paid"));
    assert!(
        lines[2].trim_start().starts_with(&format!("{id} ")) && lines[2].contains("dead"),
        "{table}"
    );
    let dead = ok_stdout(&run_cli(
        &["events", "list", "--status", "dead", "--json"],
        &path,
    ));
    let rows: Vec<serde_json::Value> = dead
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{dead}");
    assert_eq!(rows[0]["id"], id);
    assert_eq!(rows[0]["object_id"], "ch_1");
    assert_eq!(rows[0]["attempts"], 2);
    assert_eq!(rows[0]["routes"][0]["route"], "default");
    assert_eq!(rows[0]["routes"][0]["status"], "dead");

    let shown = ok_stdout(&run_cli(&["events", "show", &id.to_string()], &path));
    assert!(shown.contains(&format!("id:          {id}\n")), "{shown}");
    assert!(shown.contains("object id:   ch_1\n"), "{shown}");
    assert!(shown.contains("status:      dead\n"), "{shown}");
    assert!(
        shown.contains("route default: dead, 2 attempt(s)"),
        "{shown}"
    );
    assert_eq!(shown.matches("  attempt ").count(), 2, "{shown}");
    assert!(shown.ends_with(&format!(
        "{}\n",
        String::from_utf8(payment_body(1)).unwrap()
    )));
    let as_json: serde_json::Value = serde_json::from_str(&ok_stdout(&run_cli(
        &["events", "show", "--json", &id.to_string()],
        &path,
    )))
    .unwrap();
    assert_eq!(as_json["id"], id);
    assert_eq!(as_json["routes"][0]["status"], "dead", "{as_json:#}");
    assert_eq!(as_json["delivery_attempts"].as_array().unwrap().len(), 2);
    assert_eq!(as_json["delivery_attempts"][0]["route"], "default");
    let raw = ok_stdout(&run_cli(
        &["events", "show", "--raw", &id.to_string()],
        &path,
    ));
    assert!(
        raw.starts_with("POST /webhooks/pagarme HTTP/1.1\r\n"),
        "{raw}"
    );
    let missing = run_cli(&["events", "show", "999999"], &path);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no event 999999"));

    // The replay: pending again, then delivered by the running server without a word to it.
    let replayed = ok_stdout(&run_cli(&["events", "replay", &id.to_string()], &path));
    assert!(
        replayed.contains(&format!("event {id} is pending again")),
        "{replayed}"
    );
    // A delivered one too: its first delivery stays in its history.
    let other = count(&client, "SELECT max(id) FROM events").await;
    let replayed = ok_stdout(&run_cli(&["events", "replay", &other.to_string()], &path));
    assert!(replayed.contains("pending again"), "{replayed}");
    let started = Instant::now();
    until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        2,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(target.count(), 5);
    let shown = ok_stdout(&run_cli(&["events", "show", &id.to_string()], &path));
    assert!(
        shown.contains("route default: delivered, 1 attempt(s)"),
        "{shown}"
    );
    assert_eq!(shown.matches("  attempt ").count(), 3, "{shown}");
    let shown = ok_stdout(&run_cli(&["events", "show", &other.to_string()], &path));
    assert_eq!(shown.matches(": delivered\n").count(), 2, "{shown}");
    // Nothing dead is left; an unknown event cannot be replayed.
    let none = ok_stdout(&run_cli(&["events", "replay", "--dead"], &path));
    assert_eq!(none.trim(), "0 dead event(s) pending again");
    let unknown = run_cli(&["events", "replay", "999999"], &path);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("cannot replay event 999999"));
    drop(serve);
}

/// `portaria prune` on PostgreSQL: the dry run counts and changes nothing, the prune deletes
/// the finished events past their window (their dedup rows with them) and keeps the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_on_postgres_removes_only_what_is_past_its_window() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let s = server(&pg.url(&db), "").await;
    for n in 1..=3 {
        assert_eq!(post_pagarme(s.addr, &payment_body(n)).await.status, 200);
    }
    s.stop().await;
    let client = pg.connect(&db).await;
    // Two of the three stored events received 40 days ago (the window is 30).
    client
        .execute(
            "UPDATE events SET received_at = received_at - 40 * 86400000::bigint \
             WHERE object_id IN ('ch_1', 'ch_2')",
            &[],
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portaria.toml");
    let url = format!("url = \"{}\"", pg.url(&db));
    std::fs::write(&path, crate::support::postgres::config(&url, "")).unwrap();
    let dry = ok_stdout(&run_cli(&["prune", "--dry-run"], &path));
    assert!(dry.contains("would remove 2 event(s)"), "{dry}");
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 3);
    let pruned = ok_stdout(&run_cli(&["prune"], &path));
    assert!(pruned.contains("removed 2 event(s)"), "{pruned}");
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 1);
    assert_eq!(count(&client, "SELECT count(*) FROM dedup").await, 1);
    assert_eq!(count(&client, "SELECT count(*) FROM payloads").await, 1);
    let again = ok_stdout(&run_cli(&["prune"], &path));
    assert!(again.starts_with("nothing to prune"), "{again}");
}
