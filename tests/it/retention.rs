//! Retention with real parts: a real SQLite file aged by writing old `received_at` values
//! straight into it, the real `portaria prune` and `portaria archive replay`, the archive read
//! back with flate2's multi-member decoder, and a running server that prunes at start-up and
//! delivers replayed events to a real command.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use rusqlite::params;

use crate::support::*;

const DAY_MS: i64 = 86_400_000;
const WAIT: Duration = Duration::from_secs(15);

fn now_ms() -> i64 {
    now_secs() * 1000
}

/// A config in `dir` with a forwarding-capable `pagarme` endpoint and a store-only `github`
/// one; the database is `dir/portaria.db` (given relative to the file).
fn write_config(dir: &Path, storage_extra: &str, pagarme_extra: &str) -> PathBuf {
    let path = dir.join("portaria.toml");
    std::fs::write(&path, config_text(storage_extra, pagarme_extra)).unwrap();
    path
}

fn config_text(storage_extra: &str, pagarme_extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[storage]
path = "portaria.db"
{storage_extra}

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret = "{PAGARME_SECRET}"
{pagarme_extra}

[[endpoint]]
path = "/webhooks/github"
provider = "github"
secret = "{GITHUB_SECRET}"
"#
    )
}

/// Creates the database with portaria's own schema, then returns a plain connection to it.
fn new_db(dir: &Path) -> rusqlite::Connection {
    let path = dir.join("portaria.db");
    portaria::store::Store::open(&path).unwrap().close();
    open_db(&path)
}

/// One event as it would be after its life so far, received `age_days` ago, with one
/// attempt row for finished forwarded events. Returns its id.
fn insert(
    conn: &rusqlite::Connection,
    endpoint: &str,
    key: &str,
    status: &str,
    age_ms: i64,
    body: &[u8],
) -> i64 {
    let received = now_ms() - age_ms;
    let headers =
        format!("content-type: application/json\r\nx-hub-signature: sha256={key}\r\n").into_bytes();
    let attempts = i64::from(matches!(status, "delivered" | "dead" | "delivering"));
    let last_error = (status == "dead").then_some("exit status 7: payment service down");
    conn.execute(
        "INSERT INTO events (endpoint, dedup_key, event_type, content_type, payload_bytes, \
         received_at, status, finished_at, dedup_hash) \
         VALUES (?1, ?2, 'charge.paid', 'application/json', ?3, ?4, ?5, ?6, ?7)",
        params![
            endpoint,
            key,
            (headers.len() + body.len()) as i64,
            received,
            // The event's roll-up: a delivery under way leaves its event pending.
            if status == "delivering" {
                "pending"
            } else {
                status
            },
            matches!(status, "delivered" | "dead").then_some(received + 1000),
            portaria::store::dedup_hash(endpoint, key),
        ],
    )
    .unwrap();
    let id = conn.last_insert_rowid();
    if status != "stored" {
        conn.execute(
            "INSERT INTO deliveries (event_id, route, endpoint, status, attempts, \
             next_attempt_at, last_error, finished_at) VALUES (?1, 'default', ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                id,
                endpoint,
                status,
                attempts,
                (status == "pending").then_some(received),
                last_error,
                matches!(status, "delivered" | "dead").then_some(received + 1000),
            ],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO payloads (event_id, headers, body) VALUES (?1, ?2, ?3)",
        params![id, headers, body],
    )
    .unwrap();
    if attempts == 1 {
        conn.execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, error) \
             VALUES (?1, 1, ?2, 12, ?3, ?4)",
            params![
                id,
                received + 500,
                if status == "dead" {
                    "failed"
                } else {
                    "delivered"
                },
                last_error
            ],
        )
        .unwrap();
    }
    id
}

fn days(n: i64) -> i64 {
    n * DAY_MS
}

fn ids(conn: &rusqlite::Connection) -> Vec<i64> {
    let mut stmt = conn.prepare("SELECT id FROM events ORDER BY id").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Runs the real binary; returns stdout, after checking the exit code.
fn run(config: &Path, args: &[&str], expect: i32) -> String {
    let out = portaria()
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(expect),
        "portaria {args:?}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The output line of one endpoint and status, split into words.
fn row_of(out: &str, endpoint: &str, status: &str) -> Option<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|w| w.len() == 4 && w[0] == endpoint && w[1] == status)
}

/// The one archive file in `dir`.
pub(crate) fn archive_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    let today = &portaria::time::rfc3339(now_ms())[..10];
    let yesterday = &portaria::time::rfc3339(now_ms() - DAY_MS)[..10];
    assert!(
        name == format!("{today}.jsonl.gz") || name == format!("{yesterday}.jsonl.gz"),
        "{name}"
    );
    files[0].clone()
}

pub(crate) fn archived_lines(file: &Path) -> Vec<serde_json::Value> {
    let gz = flate2::read::MultiGzDecoder::new(std::fs::File::open(file).unwrap());
    BufReader::new(gz)
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect()
}

#[test]
fn prune_removes_finished_events_past_their_window_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "", "");
    let conn = new_db(dir.path());
    let old_delivered = insert(&conn, "pagarme", "a", "delivered", days(31), b"{}");
    let young_delivered = insert(&conn, "pagarme", "b", "delivered", days(29), b"{}");
    let old_stored = insert(&conn, "github", "c", "stored", days(45), b"{}");
    let recent_dead = insert(&conn, "pagarme", "d", "dead", days(31), b"{}");
    let old_dead = insert(&conn, "pagarme", "e", "dead", days(91), b"{}");
    let old_pending = insert(&conn, "pagarme", "f", "pending", days(400), b"{}");
    let old_delivering = insert(&conn, "pagarme", "g", "delivering", days(400), b"{}");
    let young_stored = insert(&conn, "github", "h", "stored", days(10), b"{}");

    let out = run(&config, &["prune"], 0);
    assert!(out.contains("removed 3 event(s)"), "{out}");
    assert_eq!(
        row_of(&out, "pagarme", "delivered").unwrap()[2],
        "1",
        "{out}"
    );
    assert_eq!(row_of(&out, "pagarme", "dead").unwrap()[2], "1", "{out}");
    assert_eq!(row_of(&out, "github", "stored").unwrap()[2], "1", "{out}");
    assert!(out.contains("reclaimed "), "{out}");

    assert_eq!(
        ids(&conn),
        [
            young_delivered,
            recent_dead,
            old_pending,
            old_delivering,
            young_stored
        ]
    );
    for gone in [old_delivered, old_stored, old_dead] {
        let attempts = conn
            .query_row(
                "SELECT count(*) FROM attempts WHERE event_id = ?1",
                [gone],
                |r| r.get::<_, i64>(0),
            )
            .unwrap();
        assert_eq!(attempts, 0, "the attempts of event {gone} went with it");
    }
    let out = run(&config, &["prune"], 0);
    assert!(out.starts_with("nothing to prune"), "{out}");
}

#[test]
fn pending_and_delivering_events_are_never_pruned_however_old() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "retention_days = 1\ndead_retention_days = 1",
        "",
    );
    let conn = new_db(dir.path());
    let mut kept = Vec::new();
    for (i, status) in ["pending", "delivering"].iter().enumerate() {
        for age in [days(2), days(3650)] {
            kept.push(insert(
                &conn,
                "pagarme",
                &format!("{status}-{age}-{i}"),
                status,
                age,
                b"{}",
            ));
        }
    }
    insert(&conn, "pagarme", "done", "delivered", days(2), b"{}");

    let out = run(&config, &["prune", "--dry-run"], 0);
    assert!(out.contains("would remove 1 event(s)"), "{out}");
    assert!(row_of(&out, "pagarme", "pending").is_none(), "{out}");
    let out = run(&config, &["prune"], 0);
    assert!(out.contains("removed 1 event(s)"), "{out}");
    assert_eq!(ids(&conn), kept);
}

#[test]
fn prune_dry_run_prints_counts_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "archive_dir = \"archive\"", "");
    let conn = new_db(dir.path());
    for i in 0..4 {
        insert(
            &conn,
            "pagarme",
            &format!("d{i}"),
            "delivered",
            days(40),
            &[b'x'; 100],
        );
    }
    insert(&conn, "github", "s", "stored", days(40), &[b'y'; 50]);
    insert(&conn, "pagarme", "young", "delivered", days(1), b"{}");
    let pages = count(&conn, "PRAGMA page_count");

    let out = run(&config, &["prune", "--dry-run"], 0);
    assert!(
        out.contains("would remove 5 event(s) (dry run: nothing was changed)"),
        "{out}"
    );
    let delivered = row_of(&out, "pagarme", "delivered").unwrap();
    assert_eq!(delivered[2], "4");
    let header_bytes = "content-type: application/json\r\nx-hub-signature: sha256=d0\r\n".len();
    assert_eq!(delivered[3], (4 * (100 + header_bytes)).to_string());
    assert_eq!(row_of(&out, "github", "stored").unwrap()[2], "1");
    assert!(out.contains("would archive them to"), "{out}");

    assert_eq!(count(&conn, "SELECT count(*) FROM events"), 6);
    assert_eq!(count(&conn, "PRAGMA page_count"), pages);
    assert!(
        !dir.path().join("archive").exists(),
        "a dry run writes no archive"
    );
}

#[test]
fn the_database_file_stops_growing_once_the_window_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "", "");
    let conn = new_db(dir.path());
    let db_file = dir.path().join("portaria.db");
    const N: usize = 2000;
    let body: Vec<u8> = (0..1024u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut next_key = 0;
    let mut insert_window = |conn: &mut rusqlite::Connection| {
        let tx = conn.transaction().unwrap();
        for _ in 0..N {
            insert(
                &tx,
                "pagarme",
                &format!("k{next_key}"),
                "delivered",
                0,
                &body,
            );
            next_key += 1;
        }
        tx.commit().unwrap();
    };
    let settle = |conn: &rusqlite::Connection| -> (i64, u64) {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        (
            count(conn, "PRAGMA page_count"),
            std::fs::metadata(&db_file).unwrap().len(),
        )
    };
    let mut conn = conn;

    // A steady load: every cycle, what was there ages past the window, a new window's worth
    // arrives, and prune runs. The database holds two windows at the peak, never more.
    insert_window(&mut conn);
    let mut peaks = Vec::new();
    for _ in 0..4 {
        conn.execute(
            "UPDATE events SET received_at = received_at - ?1",
            [days(31)],
        )
        .unwrap();
        insert_window(&mut conn);
        peaks.push(settle(&conn));
        let out = run(&config, &["prune"], 0);
        assert!(out.contains(&format!("removed {N} event(s)")), "{out}");
        let reclaimed: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("reclaimed "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            reclaimed > (N * 1024) as u64,
            "the pruned window's pages left the file: {out}"
        );
        let (pages_after, size_after) = settle(&conn);
        assert!(
            pages_after < peaks.last().unwrap().0 * 6 / 10,
            "prune shrank the file: {pages_after} pages after, {:?} before",
            peaks.last()
        );
        assert!(size_after < peaks.last().unwrap().1 * 6 / 10);
        assert_eq!(count(&conn, "SELECT count(*) FROM events") as usize, N);
    }
    let (first_pages, first_size) = peaks[0];
    for (pages, size) in &peaks[1..] {
        // Without pruning, the fourth peak would hold five windows: 2.5 times the first.
        assert!(
            *pages <= first_pages + first_pages / 20,
            "the file grew: peaks {peaks:?}"
        );
        assert!(
            *size <= first_size + first_size / 20,
            "the file grew: peaks {peaks:?}"
        );
    }
}

#[test]
fn the_archive_holds_every_pruned_event_before_it_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "archive_dir = \"archive\"", "");
    let conn = new_db(dir.path());
    // More than one batch of 500, so the file gets several gzip members.
    let mut pruned = Vec::new();
    for i in 0..1100 {
        let body = payment_body(i);
        let id = insert(
            &conn,
            "pagarme",
            &format!("k{i}"),
            "delivered",
            days(40),
            &body,
        );
        pruned.push((id, format!("k{i}"), body));
    }
    let binary = vec![0xff, 0x00, 0xfe, 0x80, b'{'];
    let dead = insert(&conn, "github", "bin", "dead", days(100), &binary);
    let young = insert(&conn, "pagarme", "young", "delivered", days(1), b"{}");

    let out = run(&config, &["prune"], 0);
    assert!(out.contains("removed 1101 event(s)"), "{out}");
    assert!(out.contains("archived to "), "{out}");
    assert_eq!(ids(&conn), [young]);

    let file = archive_file(&dir.path().join("archive"));
    let lines = archived_lines(&file);
    assert_eq!(lines.len(), 1101);
    let members_seen_by_a_single_member_reader = BufReader::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&file).unwrap(),
    ))
    .lines()
    .count();
    assert_eq!(
        members_seen_by_a_single_member_reader, 500,
        "one gzip member per batch"
    );

    for ((id, key, body), line) in pruned.iter().zip(&lines) {
        assert_eq!(line["v"], 1);
        assert_eq!(line["id"], *id);
        assert_eq!(line["endpoint"], "pagarme");
        assert_eq!(line["dedup_key"], *key);
        assert_eq!(line["event_type"], "charge.paid");
        assert_eq!(line["content_type"], "application/json");
        assert_eq!(line["status"], "delivered");
        assert_eq!(line["attempts"], 1);
        assert_eq!(line["last_error"], serde_json::Value::Null);
        assert_eq!(line["attempt_log"][0]["outcome"], "delivered");
        assert_eq!(line["body_encoding"], "utf8");
        assert_eq!(line["body"].as_str().unwrap().as_bytes(), &body[..]);
        assert_eq!(
            line["headers"],
            format!("content-type: application/json\r\nx-hub-signature: sha256={key}\r\n")
        );
        assert!(line["received_at"].as_str().unwrap().ends_with('Z'));
        let received = line["received_at_ms"].as_i64().unwrap();
        assert!((now_ms() - days(40) - received).abs() < 60_000);
    }
    let last = &lines[1100];
    assert_eq!(last["id"], dead);
    assert_eq!(last["endpoint"], "github");
    assert_eq!(last["status"], "dead");
    assert_eq!(last["last_error"], "exit status 7: payment service down");
    assert_eq!(last["body_encoding"], "base64");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(last["body"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, binary);
}

#[test]
fn nothing_is_deleted_when_the_archive_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "archive_dir = \"archive\"", "");
    let conn = new_db(dir.path());
    for i in 0..3 {
        insert(
            &conn,
            "pagarme",
            &format!("k{i}"),
            "delivered",
            days(40),
            b"{}",
        );
    }
    // The day's archive file cannot be opened for appending: a directory holds its name.
    for at in [now_ms(), now_ms() + DAY_MS] {
        let date = &portaria::time::rfc3339(at)[..10];
        std::fs::create_dir_all(dir.path().join(format!("archive/{date}.jsonl.gz"))).unwrap();
    }
    let out = run_cli(&["prune"], &config);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot prune: archive: cannot open"), "{err}");
    assert_eq!(count(&conn, "SELECT count(*) FROM events"), 3);
}

/// A command target that records `<event id> <dedup key>` per call and keeps each body.
fn recorder(dir: &Path) -> PathBuf {
    record_calls(
        dir,
        "on-event.sh",
        "n=$(wc -l < \"$D/calls\" 2>/dev/null || echo 0)\ncat > \"$D/body.$n\"",
        "$PORTARIA_EVENT_ID $PORTARIA_DEDUP_KEY",
        "",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_events_are_delivered_again_after_archive_replay() {
    let work = tempfile::tempdir().unwrap();
    let program = recorder(work.path());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = config_text(
        "archive_dir = \"archive\"",
        &format!(
            "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\nretry = [\"1s\"]\n",
            program.display()
        ),
    );
    let server = TestServer::start_with(dir, db, &text).await;
    let config = server.config_path();

    let body = payment_body(42);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200);
    eventually(WAIT, "delivered once", || calls(work.path()).len() == 1).await;
    let conn = server.db();
    eventually(WAIT, "recorded as delivered", || {
        count(
            &conn,
            "SELECT count(*) FROM events WHERE status = 'delivered'",
        ) == 1
    })
    .await;
    // Forty days pass; a github event (its endpoint does not forward) ages out too.
    conn.execute(
        "UPDATE events SET received_at = received_at - ?1",
        [days(40)],
    )
    .unwrap();
    insert(&conn, "github", "gh-1", "stored", days(40), b"{}");

    let out = run(&config, &["prune"], 0);
    assert!(out.contains("removed 2 event(s)"), "{out}");
    assert_eq!(server.count_rows(), 0);
    let file = archive_file(&server.dir.path().join("archive"));
    let file_arg = file.to_str().unwrap();

    let out = run(&config, &["archive", "replay", file_arg], 0);
    assert!(
        out.contains("1 event(s) pending again (1 new, 0 reset)"),
        "{out}"
    );
    assert!(
        out.contains("1 skipped: endpoint `github` is not configured or does not forward"),
        "{out}"
    );
    eventually(WAIT, "delivered again after replay", || {
        calls(work.path()).len() == 2
    })
    .await;
    let key = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    let seen = calls(work.path());
    assert_eq!(
        seen[1].split_whitespace().nth(1),
        Some(key.as_str()),
        "{seen:?}"
    );
    assert_eq!(std::fs::read(work.path().join("body.1")).unwrap(), body);
    eventually(WAIT, "recorded as delivered again", || {
        count(
            &conn,
            "SELECT count(*) FROM events WHERE status = 'delivered'",
        ) == 1
    })
    .await;
    let received: i64 = conn
        .query_row("SELECT received_at FROM events", [], |r| r.get(0))
        .unwrap();
    assert!(
        received < now_ms() - days(39),
        "the original received time is kept"
    );

    // Replaying the same file again resets the existing row: delivered again, no second row.
    let out = run(&config, &["archive", "replay", file_arg], 0);
    assert!(
        out.contains("1 event(s) pending again (0 new, 1 reset)"),
        "{out}"
    );
    eventually(WAIT, "delivered a third time", || {
        calls(work.path()).len() == 3
    })
    .await;
    assert_eq!(server.count_rows(), 1);

    // --endpoint filters; an unknown endpoint is refused.
    let out = run(
        &config,
        &["archive", "replay", file_arg, "--endpoint", "github"],
        0,
    );
    assert!(out.contains("0 event(s) pending again"), "{out}");
    run(
        &config,
        &["archive", "replay", file_arg, "--endpoint", "nope"],
        1,
    );
    drop(conn);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_archives_what_it_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let conn = new_db(dir.path());
    for i in 0..3 {
        insert(
            &conn,
            "pagarme",
            &format!("old{i}"),
            "delivered",
            days(31),
            b"{\"n\":1}",
        );
    }
    let young = insert(&conn, "github", "young", "stored", days(2), b"{}");
    let archive = dir.path().join("archive");
    let db = dir.path().join("portaria.db");
    let server =
        TestServer::start_with(dir, db, &config_text("archive_dir = \"archive\"", "")).await;
    eventually(WAIT, "the old events are gone", || {
        count(&conn, "SELECT count(*) FROM events") == 1
    })
    .await;
    assert_eq!(ids(&conn), [young]);
    let lines = archived_lines(&archive_file(&archive));
    let keys: Vec<&str> = lines
        .iter()
        .map(|l| l["dedup_key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["old0", "old1", "old2"],
        "archived before they were deleted"
    );
    drop(conn);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_prunes_old_events_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let conn = new_db(dir.path());
    let tx_body = vec![b'z'; 2048];
    for i in 0..1200 {
        insert(
            &conn,
            "pagarme",
            &format!("old{i}"),
            "delivered",
            days(31),
            &tx_body,
        );
    }
    let pending = insert(&conn, "pagarme", "waiting", "pending", days(365), b"{}");
    let young = insert(&conn, "github", "young", "stored", days(2), b"{}");
    let pages_before = count(&conn, "PRAGMA page_count");

    let db = dir.path().join("portaria.db");
    let server = TestServer::start_with(dir, db, &config_text("", "")).await;
    eventually(WAIT, "the old events are gone", || {
        count(&conn, "SELECT count(*) FROM events") == 2
    })
    .await;
    assert_eq!(ids(&conn), [pending, young]);
    eventually(WAIT, "the space is given back", || {
        count(&conn, "PRAGMA page_count") < pages_before / 4
    })
    .await;
    // Intake still works while and after it prunes.
    let body = payment_body(1);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200);
    drop(conn);
    server.stop().await;
}
