//! What a target is told to trust, on PostgreSQL (`pg_cluster`): a version 1 database (the
//! schema as that version made it, `tests/fixtures/pg_schema_v1.sql`) is upgraded to version
//! 2 at start (and on to version 4, whose `event_items` make a batch of an Adyen batch's
//! items a duplicate), what it held goes out marked "type not known to be signed", and a new Mercado
//! Pago event reaches its target with the id Mercado Pago signed; the id stays with it through
//! `events show`, the archive and its replay, and `store copy` brings it over from SQLite.

use std::time::Duration;

use crate::support::pg_cluster;
use crate::support::postgres::count;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const PG_SCHEMA_V1: &str = include_str!("../fixtures/pg_schema_v1.sql");

/// A config on PostgreSQL `url`, archiving to `archive/`, with a Mercado Pago endpoint that
/// forwards as `forward` says (nothing if empty).
fn config(url: &str, forward: &str) -> String {
    storage_config(&format!("url = \"{url}\"\narchive_dir = \"archive\""))
        .endpoint(
            "/webhooks/mercadopago",
            "mercadopago",
            &format!("secret = \"{MP_SECRET}\"\n{forward}"),
        )
        .endpoint(
            "/webhooks/adyen",
            "adyen",
            &format!("secret = \"{}\"", crate::signed_dedup::ADYEN),
        )
        .text()
}

async fn signed(client: &tokio_postgres::Client, id: i64) -> (Option<String>, Option<bool>) {
    let row = client
        .query_one(
            "SELECT signed_id, event_type_signed FROM events WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_upgraded_and_the_signed_id_kept_shown_and_archived() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let db = pg.database().await;
    let client = pg.connect(&db).await;
    client.batch_execute(PG_SCHEMA_V1).await.unwrap();
    // A Mercado Pago event waiting for its delivery, stored by version 1.
    let now = now_secs() * 1000;
    client
        .batch_execute(&format!(
            "INSERT INTO events (id, endpoint, dedup_key, event_type, payload_bytes, \
             received_at, status) VALUES (1, 'mercadopago', 'old-1', 'payment', 2, {now}, \
             'pending'); \
             INSERT INTO payloads (event_id, headers, body) VALUES (1, '', '{{}}'); \
             INSERT INTO deliveries (event_id, route, endpoint, status, next_attempt_at) \
             VALUES (1, 'default', 'mercadopago', 'pending', 0); \
             INSERT INTO dedup (endpoint, dedup_key, event_id, received_at) \
             VALUES ('mercadopago', 'old-1', 1, {now}); \
             SELECT setval('events_id_seq', 2, false);"
        ))
        .await
        .unwrap();

    let target = Target::start(vec![200]).await;
    let forward = format!("forward = {{ url = \"http://{}/in\" }}", target.addr);
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("unused.db");
    let text = config(&pg.url(&db), &forward);
    let server = TestServer::start_with(dir, unused, &text).await;
    let version: String = client
        .query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "7");
    // Version 4 keeps the items of an Adyen batch: a batch of its items is a duplicate.
    let [a, b] = ["3001", "3002"].map(|psp| crate::signed_dedup::adyen_item(psp, 700));
    for items in [&[&a, &b][..], &[&b]] {
        let body = crate::signed_dedup::adyen_body(items);
        let headers = [h("content-type", "application/json")];
        let reply = post(server.addr, "/webhooks/adyen", &headers, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let batches = count(
        &client,
        "SELECT count(*) FROM events WHERE endpoint = 'adyen'",
    )
    .await;
    assert_eq!(batches, 1, "[B] after [A, B]");
    // Out of the way of the counts below; its items go with it.
    client
        .execute("DELETE FROM events WHERE endpoint = 'adyen'", &[])
        .await
        .unwrap();
    assert_eq!(count(&client, "SELECT count(*) FROM event_items").await, 0);

    eventually(WAIT, "the waiting delivery delivered", || {
        target.count() == 1
    })
    .await;
    let old = target.seen.lock().unwrap()[0].headers.clone();
    assert_eq!(old["portaria-event-type"], "payment");
    assert_eq!(old["portaria-event-type-signed"], "0");
    assert_eq!(old.get("portaria-signed-id"), None);

    let (path, headers, body) = mercadopago("/webhooks/mercadopago", "555", "req-pg");
    let reply = post(server.addr, &path, &headers, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    eventually(WAIT, "the new event delivered", || target.count() == 2).await;
    let new = target.seen.lock().unwrap()[1].headers.clone();
    assert_eq!(new["portaria-signed-id"], "555");
    assert_eq!(new["portaria-event-type-signed"], "0");
    let id: i64 = client
        .query_one("SELECT max(id) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(signed(&client, 1).await, (None, None));
    assert_eq!(signed(&client, id).await, (Some("555".into()), Some(false)));
    let config = server.config_path();
    let shown = ok_stdout(&run_cli(&["events", "show", &id.to_string()], &config));
    assert!(shown.contains("\nsigned id:   555\n"), "{shown}");
    let api = send(
        server.admin.unwrap(),
        "GET",
        &format!("/api/events/{id}"),
        &[],
        b"",
    )
    .await;
    assert!(api.body.contains("\"signed_id\": \"555\""), "{}", api.body);
    crate::support::postgres::until_count(
        &client,
        "SELECT count(*) FROM events WHERE status = 'delivered'",
        2,
    )
    .await;
    let dir = server.stop().await;

    // Pruned into the archive, and back from it with its signed id.
    client
        .execute(
            "UPDATE events SET received_at = received_at - $1",
            &[&(40 * 86_400_000_i64)],
        )
        .await
        .unwrap();
    let config = dir.path().join("portaria.toml");
    let pruned = ok_stdout(&run_cli(&["prune"], &config));
    assert!(pruned.contains("removed 2 event(s)"), "{pruned}");
    let file = std::fs::read_dir(dir.path().join("archive"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let replayed = ok_stdout(&run_cli(
        &["archive", "replay", file.to_str().unwrap()],
        &config,
    ));
    assert!(replayed.contains("2 new"), "{replayed}");
    let row = client
        .query_one(
            "SELECT signed_id, event_type_signed FROM events WHERE object_id = '555'",
            &[],
        )
        .await
        .unwrap();
    let back: (Option<String>, Option<bool>) = (row.get(0), row.get(1));
    assert_eq!(back, (Some("555".into()), Some(false)));
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM events WHERE signed_id IS NULL AND event_type_signed IS NULL"
        )
        .await,
        1,
        "the old event comes back as it was"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_copy_brings_the_signed_id_over_from_sqlite() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let mut text = base_config(&db, "", "");
    text.push_str(&format!(
        "\n[[endpoint]]\npath = \"/webhooks/mercadopago\"\nprovider = \"mercadopago\"\n\
         secret = \"{MP_SECRET}\"\n"
    ));
    let sqlite = TestServer::start_with(dir, db, &text).await;
    let (path, headers, body) = mercadopago("/webhooks/mercadopago", "777", "req-copy");
    let reply = post(sqlite.addr, &path, &headers, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let dir = sqlite.stop().await;
    let file = dir.path().join("portaria.db");

    let database = pg.database().await;
    let config = dir.path().join("pg.toml");
    std::fs::write(&config, self::config(&pg.url(&database), "")).unwrap();
    let out = run_cli(
        &["store", "copy", "--from", file.to_str().unwrap()],
        &config,
    );
    let stdout = ok_stdout(&out);
    assert!(stdout.contains("copied 1 events"), "{stdout}");
    let client = pg.connect(&database).await;
    assert_eq!(signed(&client, 1).await, (Some("777".into()), Some(false)));
}
