//! Bodies stored deflated (schema 7, `store::payload`) reach every reader exactly as received:
//! a real target, `events show --raw`, the archive and `portaria store copy`; a body that does
//! not compress is stored raw beside them; a corrupt stored body is an error that names its
//! event and kills its delivery at once, never another body, and the lane goes on.

use std::time::Duration;

use crate::support::pg_cluster;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A Pagar.me-like `charge.paid` body of about 2 KiB, `n` making it unique: JSON compresses.
fn json_body(n: usize) -> Vec<u8> {
    let items: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#"{{"id":"oi_{n}_{i}","type":"product","description":"Camiseta basica {i}","amount":{},"quantity":{},"status":"active","created_at":"2026-11-03T14:22:48Z"}}"#,
                990 + i * 113,
                1 + i % 3
            )
        })
        .collect();
    format!(
        r#"{{"id":"hook_{n}","type":"charge.paid","created_at":"2026-11-03T14:22:51.118Z","data":{{"id":"ch_{n}","amount":12990,"status":"paid","currency":"BRL","customer":{{"id":"cus_{n}","name":"Maria Souza","email":"maria.souza@example.com"}},"order":{{"id":"or_{n}","items":[{}]}}}}}}"#,
        items.join(",")
    )
    .into_bytes()
}

/// About 2 KiB that deflate cannot shrink (a SHA-256 chain).
fn noise_body(n: usize) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut out = Vec::new();
    let mut block = Sha256::digest(n.to_le_bytes());
    while out.len() < 2000 {
        out.extend_from_slice(&block);
        block = Sha256::digest(block);
    }
    out
}

/// (codec, stored length) of event `id`'s body.
fn stored(db: &rusqlite::Connection, id: i64) -> (i64, usize) {
    db.query_row(
        "SELECT codec, length(body) FROM payloads WHERE event_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressible_and_incompressible_bodies_reach_the_target_and_the_cli_exactly() {
    let target = Target::start(vec![200]).await;
    let forward = format!("forward = {{ url = \"http://{}/hook\" }}", target.addr);
    let server = TestServer::start("", &forward).await;
    let bodies = [json_body(1), noise_body(2), json_body(3)];
    for body in &bodies {
        assert_eq!(post_pagarme(server.addr, body).await.status, 200);
    }
    eventually(WAIT, "all three forwarded", || target.count() == 3).await;
    let mut got: Vec<Vec<u8>> = target
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.to_vec())
        .collect();
    got.sort();
    let mut sent = bodies.to_vec();
    sent.sort();
    assert_eq!(got, sent, "every body as received, byte for byte");

    // As stored: JSON deflated to well under its size, the noise raw.
    let db = server.db();
    let (codec, len) = stored(&db, 1);
    assert_eq!(codec, 1);
    assert!(len * 2 < bodies[0].len(), "{len} of {}", bodies[0].len());
    assert_eq!(stored(&db, 2), (0, bodies[1].len()));
    assert_eq!(stored(&db, 3).0, 1);
    // `payload_bytes` reports what was received, not what is stored.
    let reported: i64 = server.one("SELECT payload_bytes - length(headers) FROM events JOIN payloads ON event_id = id WHERE id = 1");
    assert_eq!(reported, bodies[0].len() as i64);

    // The CLI reads the same file: `events show --raw` ends with the exact body.
    let config = server.config_path();
    let raw = run_cli(&["events", "show", "--raw", "1"], &config);
    assert!(raw.status.success(), "{raw:?}");
    assert!(raw.stdout.ends_with(&bodies[0]), "{raw:?}");
    let raw = run_cli(&["events", "show", "--raw", "2"], &config);
    assert!(raw.stdout.ends_with(&bodies[1]), "{raw:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_stored_body_kills_its_delivery_with_the_reason_and_the_lane_goes_on() {
    // The target fails the first attempt; the retry is an hour away, time to spoil the row.
    let target = Target::start(vec![500, 200]).await;
    let forward = format!(
        "forward = {{ url = \"http://{}/hook\" }}\nretry = [\"1h\"]",
        target.addr
    );
    let server = TestServer::start("", &forward).await;
    let body = json_body(7);
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    eventually(WAIT, "the first attempt", || target.count() == 1).await;
    eventually(WAIT, "the retry scheduled", || {
        server.one::<String>("SELECT status FROM deliveries WHERE event_id = 1") == "pending"
    })
    .await;
    let dir = server.stop().await;
    let path = dir.path().join("portaria.db");

    // One bit of the deflated stream flipped, and the retry made due now.
    let db = open_db(&path);
    assert_eq!(stored(&db, 1).0, 1, "stored deflated");
    let mut spoiled: Vec<u8> = db
        .query_row("SELECT body FROM payloads WHERE event_id = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    let middle = spoiled.len() / 2;
    spoiled[middle] ^= 0x10;
    db.execute(
        "UPDATE payloads SET body = ?1 WHERE event_id = 1",
        [&spoiled],
    )
    .unwrap();
    db.execute("UPDATE deliveries SET next_attempt_at = 0", [])
        .unwrap();
    drop(db);

    // The CLI refuses to show it, naming the event.
    let config = dir.path().join("portaria.toml");
    let shown = run_cli(&["events", "show", "1"], &config);
    let stderr = String::from_utf8_lossy(&shown.stderr);
    assert!(!shown.status.success(), "{shown:?}");
    assert!(
        stderr.contains("stored body of event 1 is corrupt"),
        "{stderr}"
    );

    // The server: the delivery goes dead with the reason, nothing reaches the target, and
    // the next event on the lane is delivered.
    let text = std::fs::read_to_string(&config).unwrap();
    let server = TestServer::start_with(dir, path, &text).await;
    eventually(WAIT, "the corrupt delivery dead", || {
        server.one::<String>("SELECT status FROM deliveries WHERE event_id = 1") == "dead"
    })
    .await;
    let error: String = server.one("SELECT last_error FROM deliveries WHERE event_id = 1");
    assert!(
        error.contains("stored body of event 1 is corrupt"),
        "{error}"
    );
    let attempt: String =
        server.one("SELECT outcome FROM attempts WHERE event_id = 1 ORDER BY id DESC LIMIT 1");
    assert_eq!(attempt, "failed");
    eventually(WAIT, "rolled up", || {
        server.one::<String>("SELECT status FROM events WHERE id = 1") == "dead"
    })
    .await;
    // And out of the queue index, as a delivery the roll-up task finished is.
    let queued: i64 = server
        .one("SELECT count(*) FROM deliveries WHERE event_id = 1 AND next_attempt_at IS NOT NULL");
    assert_eq!(queued, 0, "the dead delivery left the queue index");
    let next = json_body(8);
    assert_eq!(post_pagarme(server.addr, &next).await.status, 200);
    eventually(WAIT, "the next event delivered", || target.count() == 2).await;
    assert_eq!(target.seen.lock().unwrap()[1].body, next);
    assert_eq!(target.count(), 2, "the corrupt body never went out");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_holds_the_bodies_as_received() {
    let storage = "retention_days = 30\narchive_dir = \"archive\"\n";
    let server = TestServer::start("", "").await;
    let text = std::fs::read_to_string(server.config_path())
        .unwrap()
        .replace("[storage]\n", &format!("[storage]\n{storage}"))
        // `archive replay` restores only into an endpoint that forwards; nothing runs here.
        .replace(
            "provider = \"pagarme\"\n",
            "provider = \"pagarme\"\nforward = { url = \"http://127.0.0.1:9/hook\" }\n",
        );
    let bodies = [json_body(1), noise_body(2)];
    for body in &bodies {
        assert_eq!(post_pagarme(server.addr, body).await.status, 200);
    }
    let dir = server.stop().await;
    let config = dir.path().join("portaria.toml");
    std::fs::write(&config, text).unwrap();
    let db = open_db(&dir.path().join("portaria.db"));
    assert_eq!((stored(&db, 1).0, stored(&db, 2).0), (1, 0));
    // Both past the window: stored events, 40 days old.
    db.execute(
        "UPDATE events SET received_at = received_at - 40 * 86400000",
        [],
    )
    .unwrap();
    drop(db);

    let out = run_cli(&["prune"], &config);
    let stdout = ok_stdout(&out);
    assert!(stdout.contains("removed 2 event(s)"), "{stdout}");
    let archive = dir.path().join("archive");
    let file = std::fs::read_dir(&archive)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let gz = flate2::read::MultiGzDecoder::new(std::fs::File::open(file).unwrap());
    let lines: Vec<serde_json::Value> = std::io::BufRead::lines(std::io::BufReader::new(gz))
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["body_encoding"], "utf8");
    assert_eq!(
        lines[0]["body"].as_str().unwrap().as_bytes(),
        &bodies[0][..]
    );
    assert_eq!(lines[1]["body_encoding"], "base64");
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(lines[1]["body"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, bodies[1]);

    // Replayed from the archive, the body goes back in (deflated again) and reads the same.
    let archived = std::fs::read_dir(&archive)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let out = run_cli(&["archive", "replay", archived.to_str().unwrap()], &config);
    let stdout = ok_stdout(&out);
    assert!(
        stdout.contains("2 event(s) pending again (2 new"),
        "{stdout}"
    );
    let db = open_db(&dir.path().join("portaria.db"));
    let (id, codec): (i64, i64) = db
        .query_row(
            "SELECT event_id, codec FROM payloads ORDER BY event_id LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(codec, 1);
    let raw = run_cli(&["events", "show", "--raw", &id.to_string()], &config);
    assert!(raw.stdout.ends_with(&bodies[0]), "{raw:?}");
}

/// `portaria store copy` decodes: PostgreSQL gets the bodies as received (it keeps raw ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_copy_moves_deflated_bodies_as_received() {
    let Some(pg) = pg_cluster::shared() else {
        return;
    };
    let sqlite = TestServer::start("", "").await;
    let bodies = [json_body(1), noise_body(2)];
    for body in &bodies {
        assert_eq!(post_pagarme(sqlite.addr, body).await.status, 200);
    }
    assert_eq!(stored(&sqlite.db(), 1).0, 1);
    let dir = sqlite.stop().await;
    let file = dir.path().join("portaria.db");
    let db = pg.database().await;
    let path = dir.path().join("pg.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[storage]\nurl = \"{}\"\n\n[[endpoint]]\n\
             path = \"/webhooks/pagarme\"\nprovider = \"pagarme\"\nsecret = \"{PAGARME_SECRET}\"\n",
            pg.url(&db)
        ),
    )
    .unwrap();
    let out = run_cli(&["store", "copy", "--from", file.to_str().unwrap()], &path);
    let stdout = ok_stdout(&out);
    assert!(stdout.contains("copied 2 events"), "{stdout}");
    let client = pg.connect(&db).await;
    for (id, body) in [(1i64, &bodies[0]), (2, &bodies[1])] {
        let row = client
            .query_one("SELECT body FROM payloads WHERE event_id = $1", &[&id])
            .await
            .unwrap();
        let got: Vec<u8> = row.get(0);
        assert_eq!(&got, body, "event {id}");
    }
}
