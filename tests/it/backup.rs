//! `portaria backup` with real parts: the real binary serving signed webhooks from a bounded
//! loop while the real `portaria backup` copies its database, the copy opened with rusqlite and
//! checked, refusals (an existing file without `--force`, a missing or older database, the
//! database itself), and a restore as docs/operations.md tells it: stop, copy over, start.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;

/// Posters sending at once during the backup.
const POSTERS: usize = 4;
/// The bound on each poster's loop, should the backup never end.
const MAX_PER_POSTER: usize = 1500;
/// Events acknowledged before the backup starts.
const BEFORE: usize = 200;
/// Events (of 1 KB) already in the file when the server starts: enough that the copy takes a
/// while, so that webhooks land while it runs.
const HISTORY: i64 = 20_000;

/// A body whose 200 arrived, and when.
type Acked = (Vec<u8>, Instant);

/// A temp dir holding `portaria.toml` for `dir/portaria.db`.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let config = dir.path().join("portaria.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    (dir, db, config)
}

/// The raw bodies stored in the database at `path`, opened read-only.
fn bodies(path: &Path) -> HashSet<Vec<u8>> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn.prepare("SELECT body FROM payloads").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn integrity(path: &Path) -> String {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// Fills a new database with `HISTORY` delivered events of an earlier day, in one transaction.
fn fill_history(db: &Path) {
    portaria::store::Store::open(db).unwrap().close();
    let mut conn = open_db(db);
    let tx = conn.transaction().unwrap();
    let now_ms = now_secs() * 1000;
    for n in 0..HISTORY {
        let key = format!("history_{n}");
        tx.execute(
            "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
             status, finished_at) VALUES ('pagarme', ?1, ?2, 1000, ?3, 'delivered', ?3)",
            rusqlite::params![key, portaria::store::dedup_hash("pagarme", &key), now_ms],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO payloads (event_id, headers, body) \
             VALUES (last_insert_rowid(), x'', randomblob(1000))",
            [],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs the real server on `config`, posts `bodies`, and answers 200 for each.
async fn serve_and_post(config: &Path, bodies: impl IntoIterator<Item = Vec<u8>>) -> Process {
    let server = Process::spawn(config).await;
    for body in bodies {
        assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    }
    server
}

async fn stop(mut server: Process) {
    server.signal(libc::SIGTERM);
    assert_eq!(
        server.wait(Duration::from_secs(15)).await.code(),
        Some(0),
        "a clean stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_holds_every_event_acknowledged_before_it_started() {
    let (dir, db, config) = setup();
    fill_history(&db);
    let server = Process::spawn(&config).await;
    let addr = server.addr;
    // Each acknowledged body, with the moment its 200 arrived.
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let refused: Arc<Mutex<Vec<u16>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut posters = Vec::new();
    for p in 0..POSTERS {
        let (acked, refused, done) = (acked.clone(), refused.clone(), done.clone());
        posters.push(tokio::spawn(async move {
            for i in 0..MAX_PER_POSTER {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let body = payment_body(p * 100_000 + i);
                let status = post_pagarme(addr, &body).await.status;
                if status == 200 {
                    acked.lock().unwrap().push((body, Instant::now()));
                } else {
                    refused.lock().unwrap().push(status);
                }
            }
        }));
    }
    eventually(Duration::from_secs(60), "the first events", || {
        acked.lock().unwrap().len() >= BEFORE
    })
    .await;

    let file = dir.path().join("backups").join("nightly.db");
    std::fs::create_dir(file.parent().unwrap()).unwrap();
    let started = Instant::now();
    let (cfg, target) = (config.clone(), file.clone());
    let out =
        tokio::task::spawn_blocking(move || run_cli(&["backup", target.to_str().unwrap()], &cfg))
            .await
            .unwrap();
    let finished = Instant::now();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for poster in posters {
        poster.await.unwrap();
    }
    let stdout = ok_stdout(&out);

    let acked = acked.lock().unwrap().clone();
    let during = acked
        .iter()
        .filter(|(_, at)| *at > started && *at < finished)
        .count();
    assert!(
        during > 0,
        "webhooks were acknowledged while the backup ran ({} ms)",
        (finished - started).as_millis()
    );
    assert!(
        refused.lock().unwrap().is_empty(),
        "a backup makes no webhook fail: {:?}",
        refused.lock().unwrap()
    );

    assert_eq!(integrity(&file), "ok");
    let copied = bodies(&file);
    let missing = acked
        .iter()
        .filter(|(body, at)| *at < started && !copied.contains(body))
        .count();
    assert_eq!(
        missing, 0,
        "every event acknowledged before the backup is in it"
    );
    let history = "SELECT count(*) FROM events WHERE dedup_key LIKE 'history_%'";
    assert_eq!(count(&open_db(&file), history), HISTORY);
    assert!(
        stdout.starts_with(&format!("backed up {} events (", copied.len())),
        "{stdout}"
    );
    assert!(
        stdout
            .trim_end()
            .ends_with(&format!("MiB) to {}", file.display())),
        "{stdout}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["nightly.db"], "no temporary or -wal file left");

    stop(server).await;
    // The server lost nothing to the backup either.
    let stored = bodies(&db);
    assert!(acked.iter().all(|(body, _)| stored.contains(body)));
}

#[tokio::test]
async fn an_existing_file_is_kept_without_force_and_replaced_with_it() {
    let (dir, _db, config) = setup();
    let server = serve_and_post(&config, (0..3).map(payment_body)).await;
    let file = dir.path().join("copy.db");
    std::fs::write(&file, b"last night's backup").unwrap();

    let out = run_cli(&["backup", file.to_str().unwrap()], &config);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{} exists already; pass --force to replace it",
            file.display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(&file).unwrap(), b"last night's backup");

    let out = run_cli(&["backup", file.to_str().unwrap(), "--force"], &config);
    assert!(ok_stdout(&out).starts_with("backed up 3 events ("));
    assert_eq!(bodies(&file).len(), 3);
    stop(server).await;
}

#[tokio::test]
async fn the_database_itself_is_never_overwritten() {
    let (_dir, db, config) = setup();
    let server = serve_and_post(&config, (0..2).map(payment_body)).await;
    for target in [db.clone(), PathBuf::from(format!("{}-wal", db.display()))] {
        let out = run_cli(&["backup", target.to_str().unwrap(), "--force"], &config);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("is the database itself"),
            "{}",
            stderr(&out)
        );
    }
    // Still the live file: the server goes on storing into it.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(9)).await.status,
        200
    );
    stop(server).await;
    assert_eq!(bodies(&db).len(), 3);
}

#[test]
fn a_missing_database_is_refused_and_nothing_is_made() {
    let (dir, db, config) = setup();
    let file = dir.path().join("copy.db");
    let out = run_cli(&["backup", file.to_str().unwrap()], &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("no database at {}", db.display())),
        "{}",
        stderr(&out)
    );
    assert!(!db.exists(), "no empty database was created");
    assert!(!file.exists());
}

#[test]
fn an_older_database_is_refused_and_left_as_it_was() {
    let (dir, db, config) = setup();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY); PRAGMA user_version = 2;")
        .unwrap();
    let file = dir.path().join("copy.db");
    let out = run_cli(&["backup", file.to_str().unwrap()], &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("version 2"), "{}", stderr(&out));
    assert!(!file.exists());
    let version: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2, "a backup never upgrades the schema");
}

#[tokio::test]
async fn a_backup_copied_over_the_database_brings_its_events_back() {
    let (dir, db, config) = setup();
    let server = serve_and_post(&config, (0..5).map(payment_body)).await;
    let file = dir.path().join("portaria-2026-11-30.db");
    ok_stdout(&run_cli(&["backup", file.to_str().unwrap()], &config));
    // Received after the backup: a restore goes back to before them.
    for n in 5..7 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    stop(server).await;

    // docs/operations.md: stop, remove the side files, copy the backup over, start.
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", db.display()));
    }
    std::fs::copy(&file, &db).unwrap();
    let server = Process::spawn(&config).await;
    let listed = ok_stdout(&run_cli(&["events", "list", "--json"], &config));
    let keys: HashSet<String> = listed
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            event["dedup_key"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(keys.len(), 5, "{listed}");
    assert_eq!(bodies(&db), (0..5).map(payment_body).collect());
    // The dedup barrier came back with them: a redelivery is a duplicate, not a second row.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(0)).await.status,
        200
    );
    assert_eq!(bodies(&db).len(), 5);
    // And the restored file takes new events.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(7)).await.status,
        200
    );
    assert_eq!(bodies(&db).len(), 6);
    stop(server).await;
}

/// The lines that matter in a unit file: no comments, no blank lines.
fn unit_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim_end)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

#[test]
fn the_units_shown_in_docs_operations_are_the_ones_shipped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let shown: Vec<&str> = doc
        .split("```ini\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap())
        .collect();
    assert_eq!(
        shown.len(),
        2,
        "docs/operations.md shows the service and the timer"
    );
    for (block, file) in shown
        .iter()
        .zip(["portaria-backup.service", "portaria-backup.timer"])
    {
        let shipped = std::fs::read_to_string(root.join("packaging").join(file)).unwrap();
        assert_eq!(unit_lines(block), unit_lines(&shipped), "{file}");
    }
}
