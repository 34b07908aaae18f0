//! Schema upgrades under the real server: a file of version 5, made with that version's own
//! DDL (`tests/fixtures/schema_v5.sql`), is upgraded when `serve` starts, and what it held
//! waiting is delivered to a real local HTTP target: the fresh delivery, and the one a crash
//! cut off (as an interrupted attempt, then delivered). New events go as well, and the finished
//! deliveries leave the queue index (the worker's batched roll-up clears them). A file of
//! version 7 (`tests/fixtures/schema_v7.sql`) gets version 8's status CHECKs in place: its
//! schema becomes a new file's, word for word, and its rows stay where they were. A file of
//! version 8 (`tests/fixtures/schema_v8.sql`) gains version 9's columns (what targets are
//! told to trust): what it held goes out marked "type not known to be signed", a new event
//! with what was signed. A file of version 10 (`tests/fixtures/schema_v10.sql`) gains version
//! 11's `event_items`: an Adyen batch stored after the upgrade makes a batch of its known
//! items a duplicate; one stored before is known by its own key only. Each also gains version
//! 12's `deliveries_head` (a strict lane's head in arrival order). A file of version 11
//! (`tests/fixtures/schema_v11.sql`) gains version 12's index, version 13's `rejected` and
//! version 14's `origin` (and 15's `fetches`) in
//! place: its tables stay on their pages, its events stay, and a forged request is kept there,
//! never an event.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

const SCHEMA_V5: &str = include_str!("../fixtures/schema_v5.sql");
const SCHEMA_V7: &str = include_str!("../fixtures/schema_v7.sql");
const SCHEMA_V8: &str = include_str!("../fixtures/schema_v8.sql");
const SCHEMA_V10: &str = include_str!("../fixtures/schema_v10.sql");
const SCHEMA_V11: &str = include_str!("../fixtures/schema_v11.sql");

/// (event id, delivery status, attempts) in the v5 file: waiting, cut off mid-attempt, done.
const ROWS: [(i64, &str, u32); 3] = [(1, "pending", 0), (2, "delivering", 1), (3, "delivered", 1)];

#[tokio::test]
async fn a_version_5_file_is_upgraded_and_its_waiting_deliveries_are_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let v5 = rusqlite::Connection::open(&db).unwrap();
    v5.execute_batch("PRAGMA page_size = 1024; PRAGMA journal_mode = WAL;")
        .unwrap();
    v5.execute_batch(SCHEMA_V5).unwrap();
    for (id, status, attempts) in ROWS {
        let rolled = if status == "delivered" {
            "delivered"
        } else {
            "pending"
        };
        v5.execute(
            "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, \
             received_at, status) VALUES (?1, 'pagarme', ?2, ?1, 2, ?3, ?4)",
            rusqlite::params![id, format!("old-{id}"), now_secs() * 1000, rolled],
        )
        .unwrap();
        v5.execute(
            "INSERT INTO payloads (event_id, headers, body) VALUES (?1, x'', ?2)",
            rusqlite::params![id, format!("{{\"old\":{id}}}").into_bytes()],
        )
        .unwrap();
        v5.execute(
            "INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
             next_attempt_at, finished_at) VALUES (?1, 'default', 'pagarme', ?2, ?3, \
             CASE WHEN ?2 != 'delivered' THEN 0 END, CASE WHEN ?2 = 'delivered' THEN 1 END)",
            rusqlite::params![id, status, attempts],
        )
        .unwrap();
    }
    drop(v5);

    let target = Target::start(vec![200]).await;
    let forward = format!("forward = {{ url = \"http://{}/in\" }}", target.addr);
    let text = base_config(&db, "", &forward);
    let server = TestServer::start_with(dir, db, &text).await;
    let version: i64 = server.one("PRAGMA user_version");
    assert_eq!(version, 15, "upgraded to the current schema");

    eventually(WAIT, "the two waiting deliveries delivered", || {
        target.count() == 2
    })
    .await;
    let mut bodies: Vec<String> = target
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    bodies.sort();
    assert_eq!(bodies, [r#"{"old":1}"#, r#"{"old":2}"#]);
    let interrupted: i64 =
        server.one("SELECT count(*) FROM attempts WHERE event_id = 2 AND outcome = 'interrupted'");
    assert_eq!(interrupted, 1, "the cut-off attempt is explained");

    // A new event goes too.
    let reply = post_pagarme(server.addr, &payment_body(1)).await;
    assert_eq!(reply.status, 200);
    eventually(WAIT, "the new event delivered", || target.count() == 3).await;

    // Every delivery finished, each event rolled up, and the queue index emptied.
    eventually(WAIT, "the roll-up written and the queue cleared", || {
        let db = server.db();
        let waiting: i64 = db
            .query_row(
                "SELECT count(*) FROM deliveries WHERE next_attempt_at IS NOT NULL \
                 OR status != 'delivered'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let pending: i64 = db
            .query_row(
                "SELECT count(*) FROM events WHERE status != 'delivered'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        waiting == 0 && pending == 0
    })
    .await;
    assert_eq!(target.count(), 3, "each once");
    server.stop().await;
}

/// Every schema object's (type, name, text), or its root page for the text.
/// The upgraded file's tables and indexes with their root pages, but for those a later
/// version added (version 10's `route_pauses`, version 11's `event_items` and its index,
/// version 12's `deliveries_head`, version 13's `rejected` and its index, version 15's
/// `fetches`): what must stay on
/// the pages it had.
fn kept_in_place(db: &rusqlite::Connection) -> Vec<(String, String, Option<String>)> {
    let mut all = schema(db, "rootpage");
    all.retain(|(_, name, _)| {
        ![
            "route_pauses",
            "event_items",
            "event_items_hash",
            "deliveries_head",
            "rejected",
            "rejected_endpoint",
            "fetches",
        ]
        .contains(&&**name)
    });
    all
}

fn schema(db: &rusqlite::Connection, column: &str) -> Vec<(String, String, Option<String>)> {
    db.prepare(&format!(
        "SELECT type, name, CAST({column} AS TEXT) FROM sqlite_schema ORDER BY name"
    ))
    .unwrap()
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

#[tokio::test]
async fn a_version_7_file_gets_the_new_status_checks_in_place_and_delivers_what_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let v7 = rusqlite::Connection::open(&db).unwrap();
    v7.execute_batch(
        "PRAGMA page_size = 1024; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;",
    )
    .unwrap();
    v7.execute_batch(SCHEMA_V7).unwrap();
    // Waiting, delivered, stored (no route took it).
    for (id, status) in [(1, "pending"), (2, "delivered"), (3, "stored")] {
        v7.execute(
            "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, \
             received_at, status) VALUES (?1, 'pagarme', ?2, ?1, 2, ?3, ?4)",
            rusqlite::params![id, format!("old-{id}"), now_secs() * 1000, status],
        )
        .unwrap();
        v7.execute(
            "INSERT INTO payloads (event_id, headers, body, codec) VALUES (?1, x'', ?2, 0)",
            rusqlite::params![id, format!("{{\"old\":{id}}}").into_bytes()],
        )
        .unwrap();
        if status != "stored" {
            v7.execute(
                "INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
                 next_attempt_at, finished_at) VALUES (?1, 'default', 'pagarme', ?2, \
                 ?1 - 1, CASE WHEN ?2 = 'pending' THEN 0 END, \
                 CASE WHEN ?2 = 'delivered' THEN 1 END)",
                rusqlite::params![id, status],
            )
            .unwrap();
        }
    }
    let roots = schema(&v7, "rootpage");
    drop(v7);

    let target = Target::start(vec![200]).await;
    let forward = format!("forward = {{ url = \"http://{}/in\" }}", target.addr);
    let text = base_config(&db, "", &forward);
    let server = TestServer::start_with(dir, db, &text).await;
    let version: i64 = server.one("PRAGMA user_version");
    assert_eq!(version, 15);
    let check: String = server.one("PRAGMA integrity_check");
    assert_eq!(check, "ok");
    // In place: every table and index on the pages it had. And a new file's schema exactly.
    assert_eq!(kept_in_place(&server.db()), roots);
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    portaria::store::Store::open(&fresh).unwrap().close();
    assert_eq!(schema(&server.db(), "sql"), schema(&open_db(&fresh), "sql"));

    // What it held waiting goes, and a new event after it.
    eventually(WAIT, "the waiting delivery delivered", || {
        target.count() == 1
    })
    .await;
    assert_eq!(
        target.seen.lock().unwrap()[0].body,
        br#"{"old":1}"#.to_vec()
    );
    let reply = post_pagarme(server.addr, &payment_body(7)).await;
    assert_eq!(reply.status, 200);
    eventually(WAIT, "the new event delivered", || target.count() == 2).await;
    eventually(WAIT, "every event rolled up", || {
        server.one::<i64>("SELECT count(*) FROM events WHERE status IN ('pending', 'delivering')")
            == 0
    })
    .await;
    let statuses: Vec<String> = server
        .db()
        .prepare("SELECT status FROM events ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(statuses, ["delivered", "delivered", "stored", "delivered"]);

    // The constraint still holds on the upgraded file.
    let refused = server
        .db()
        .execute("UPDATE events SET status = 'sent' WHERE id = 3", [])
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("CHECK constraint failed: events_status"),
        "{refused}"
    );
    let refused = server
        .db()
        .execute("UPDATE deliveries SET status = NULL WHERE event_id = 1", [])
        .unwrap_err()
        .to_string();
    assert!(refused.contains("NOT NULL constraint failed"), "{refused}");
    assert_eq!(target.count(), 2, "each once");
    server.stop().await;
}

#[tokio::test]
async fn a_version_8_file_gains_the_signed_columns_and_its_targets_hear_what_is_known() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let v8 = rusqlite::Connection::open(&db).unwrap();
    v8.execute_batch(
        "PRAGMA page_size = 1024; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;",
    )
    .unwrap();
    v8.execute_batch(SCHEMA_V8).unwrap();
    // A Pagar.me event waiting for its delivery, its type read from the signed body, but
    // stored before portaria kept whether it was.
    v8.execute(
        "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, event_type, payload_bytes, \
         received_at, status) VALUES (1, 'pagarme', 'old-1', 1, 'charge.paid', 2, ?1, 'pending')",
        [now_secs() * 1000],
    )
    .unwrap();
    v8.execute(
        "INSERT INTO payloads (event_id, headers, body, codec) VALUES (1, x'', x'7b7d', 0)",
        [],
    )
    .unwrap();
    v8.execute(
        "INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at) \
         VALUES (1, 'default', 'pagarme', 'pending', 0)",
        [],
    )
    .unwrap();
    let roots = schema(&v8, "rootpage");
    drop(v8);

    let target = Target::start(vec![200]).await;
    let forward = format!("forward = {{ url = \"http://{}/in\" }}", target.addr);
    let text = base_config(&db, "", &forward);
    let server = TestServer::start_with(dir, db, &text).await;
    let version: i64 = server.one("PRAGMA user_version");
    assert_eq!(version, 15);
    // In place, and a new file's schema exactly.
    assert_eq!(kept_in_place(&server.db()), roots);
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    portaria::store::Store::open(&fresh).unwrap().close();
    assert_eq!(schema(&server.db(), "sql"), schema(&open_db(&fresh), "sql"));

    // The old event: its type is not known to be signed, so its target hears 0.
    eventually(WAIT, "the waiting delivery delivered", || {
        target.count() == 1
    })
    .await;
    let old = target.seen.lock().unwrap()[0].headers.clone();
    assert_eq!(old["portaria-event-type"], "charge.paid");
    assert_eq!(old["portaria-event-type-signed"], "0");
    assert_eq!(old.get("portaria-signed-id"), None);
    // A new one: Pagar.me signs the body its type comes from.
    let reply = post_pagarme(server.addr, &payment_body(9)).await;
    assert_eq!(reply.status, 200);
    eventually(WAIT, "the new event delivered", || target.count() == 2).await;
    let new = target.seen.lock().unwrap()[1].headers.clone();
    assert_eq!(new["portaria-event-type"], "charge.paid");
    assert_eq!(new["portaria-event-type-signed"], "1");
    let kept: (Option<bool>, Option<bool>) = server
        .db()
        .query_row(
            "SELECT (SELECT event_type_signed FROM events WHERE id = 1), \
             (SELECT event_type_signed FROM events WHERE id = 2)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(kept, (None, Some(true)));
    server.stop().await;
}

#[tokio::test]
async fn a_version_10_file_gains_the_items_of_batches_and_keeps_what_it_held() {
    use crate::signed_dedup::{ADYEN, adyen_body, adyen_item};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let v10 = rusqlite::Connection::open(&db).unwrap();
    v10.execute_batch(
        "PRAGMA page_size = 1024; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;",
    )
    .unwrap();
    v10.execute_batch(SCHEMA_V10).unwrap();
    v10.execute_batch("PRAGMA user_version = 10").unwrap();
    // An Adyen batch of C and D stored before the upgrade: no item rows.
    let [a, b, c, d] = ["2001", "2002", "2003", "2004"].map(|psp| adyen_item(psp, 500));
    let old_key = "2003:AUTHORISATION:true,2004:AUTHORISATION:true";
    v10.execute(
        "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
         status) VALUES (1, 'adyen', ?1, ?2, 2, ?3, 'stored')",
        rusqlite::params![
            old_key,
            portaria::store::dedup_hash("adyen", old_key),
            now_secs() * 1000
        ],
    )
    .unwrap();
    v10.execute(
        "INSERT INTO payloads (event_id, headers, body, codec) VALUES (1, x'', x'7b7d', 0)",
        [],
    )
    .unwrap();
    let roots = schema(&v10, "rootpage");
    drop(v10);

    let text = sqlite_config(&db)
        .endpoint("/webhooks/adyen", "adyen", &format!("secret = \"{ADYEN}\""))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    let version: i64 = server.one("PRAGMA user_version");
    assert_eq!(version, 15);
    // Every table and index of version 10 on the pages it had.
    let mut upgraded = schema(&server.db(), "rootpage");
    upgraded.retain(|(_, name, _)| {
        !name.starts_with("event_items")
            && name != "deliveries_head"
            && name != "fetches"
            && !name.starts_with("rejected")
    });
    assert_eq!(upgraded, roots);
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    portaria::store::Store::open(&fresh).unwrap().close();
    assert_eq!(schema(&server.db(), "sql"), schema(&open_db(&fresh), "sql"));

    let send = |items: &[&serde_json::Value]| {
        let body = adyen_body(items);
        let addr = server.addr;
        async move {
            let headers = [h("content-type", "application/json")];
            post(addr, "/webhooks/adyen", &headers, &body).await.status
        }
    };
    // The batch from before is known by its own key only.
    assert_eq!(send(&[&d, &c]).await, 200);
    assert_eq!(server.events_of("adyen"), 1, "its key, whatever the order");
    assert_eq!(send(&[&c]).await, 200);
    assert_eq!(server.events_of("adyen"), 2, "its items were never kept");
    // A batch stored after: its items are.
    assert_eq!(send(&[&a, &b]).await, 200);
    assert_eq!(send(&[&b]).await, 200);
    assert_eq!(send(&[&c, &a]).await, 200);
    assert_eq!(
        server.events_of("adyen"),
        3,
        "[B] and [C, A] are known items"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_version_11_file_gains_the_rejected_requests_kept_and_keeps_what_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let v11 = rusqlite::Connection::open(&db).unwrap();
    v11.execute_batch(
        "PRAGMA page_size = 1024; PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL;",
    )
    .unwrap();
    v11.execute_batch(SCHEMA_V11).unwrap();
    v11.execute_batch("PRAGMA user_version = 11").unwrap();
    v11.execute(
        "INSERT INTO events (id, endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
         status) VALUES (1, 'pagarme', 'old-1', 1, 2, ?1, 'stored')",
        [now_secs() * 1000],
    )
    .unwrap();
    v11.execute(
        "INSERT INTO payloads (event_id, headers, body, codec) VALUES (1, x'', x'7b7d', 0)",
        [],
    )
    .unwrap();
    let roots = schema(&v11, "rootpage");
    drop(v11);

    let text = base_config(&db, "", "");
    let server = TestServer::start_with(dir, db, &text).await;
    let version: i64 = server.one("PRAGMA user_version");
    assert_eq!(version, 15);
    // Version 14's column: what it held came as webhooks.
    let origin: Option<String> = server.one("SELECT origin FROM events WHERE id = 1");
    assert_eq!(origin, None);
    let mut upgraded = schema(&server.db(), "rootpage");
    upgraded.retain(|(_, name, _)| {
        !["deliveries_head", "fetches"].contains(&name.as_str()) && !name.starts_with("rejected")
    });
    assert_eq!(
        upgraded, roots,
        "every table and index of version 11 in place"
    );
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    portaria::store::Store::open(&fresh).unwrap().close();
    assert_eq!(schema(&server.db(), "sql"), schema(&open_db(&fresh), "sql"));
    assert_eq!(server.events_of("pagarme"), 1, "what it held stays");

    let forged = post(
        server.addr,
        "/webhooks/pagarme",
        &[
            h("content-type", "application/json"),
            h("x-hub-signature", format!("sha256={}", "0".repeat(64))),
        ],
        &payment_body(2),
    )
    .await;
    assert_eq!(forged.status, 401);
    eventually(WAIT, "the forged request kept", || {
        server.one::<i64>("SELECT count(*) FROM rejected") == 1
    })
    .await;
    assert_eq!(server.events_of("pagarme"), 1, "never an event");

    server.stop().await;
}
