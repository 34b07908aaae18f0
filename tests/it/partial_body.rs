//! No partial body, ever: portaria is SIGKILLed again and again around the moment it hands a
//! large event to a forward command, and the command (which runs on in its own process group
//! when portaria dies) must have read either the whole body or nothing.
//!
//! The command reads its stdin to the end only after a short start-up pause (as a real program
//! would, loading itself), so a kill during the hand-over is likely. It records the byte count
//! and SHA-256 of what it read; every record must be one of the bodies sent. Rounds:
//! `PORTARIA_PARTIAL_BODY_ROUNDS` (default 40).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::support::rng::Rng;
use crate::support::*;

const DEFAULT_ROUNDS: usize = 40;

/// A signed-looking JSON body of `len` bytes, unique to `round` and `seed`.
fn big_body(round: usize, seed: u64, len: usize, rng: &mut Rng) -> Vec<u8> {
    let head = format!(r#"{{"id":"big_{seed}_{round}","pad":""#);
    let mut body = head.into_bytes();
    while body.len() + 2 < len {
        body.push(b'a' + (rng.below(26) as u8));
    }
    body.extend_from_slice(b"\"}");
    body
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The forward command: note the start, pause, read all of stdin, then append
/// `<event id> <bytes> <sha256>` as one line.
fn recording_command(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("record.sh");
    write_executable(
        &path,
        format!(
            r#"#!/bin/sh
D='{dir}'
echo "$PORTARIA_EVENT_ID $PORTARIA_ATTEMPT" >> "$D/started"
sleep 0.05
tmp=$(mktemp "$D/reading.XXXXXX")
cat > "$tmp"
n=$(wc -c < "$tmp")
h=$(sha256sum < "$tmp" | cut -c1-64)
echo "$PORTARIA_EVENT_ID $n $h" >> "$D/inbox"
rm -f "$tmp"
"#,
            dir = dir.display()
        ),
    );
    path
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sees_the_whole_body_or_nothing_however_portaria_is_killed() {
    let rounds: usize = std::env::var("PORTARIA_PARTIAL_BODY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let mut rng = Rng::from_clock();
    let seed = rng.seed();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let program = recording_command(dir);
    let db = dir.join("p.db");
    let config = dir.join("p.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
max_body_bytes = 2097152

[storage]
path = "{db}"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret = "{PAGARME_SECRET}"
forward = {{ command = ["{program}"], timeout_secs = 60 }}
retry = ["1s", "1s", "1s", "1s", "1s"]
"#,
            db = db.display(),
            program = program.display()
        ),
    )
    .unwrap();

    // sha256 -> length of every body acknowledged.
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..rounds {
        let mut server = Process::spawn(&config).await;
        let len = 256 * 1024 + rng.below(768 * 1024) as usize;
        let body = big_body(round, seed, len, &mut rng);
        let reply = post_pagarme(server.addr, &body).await;
        assert_eq!(reply.status, 200, "round {round}: {}", reply.body);
        sent.insert(sha_hex(&body), body.len());
        // A random moment around the start of the delivery: often before the command has
        // read its stdin, sometimes before it started or after it finished.
        let delay = rng.below(120);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.signal(libc::SIGKILL);
        server.wait(Duration::from_secs(10)).await;
    }

    // One last life: everything interrupted goes out again and finishes.
    let last = Process::spawn(&config).await;
    let conn = open_db(&db);
    eventually(Duration::from_secs(60), "every event delivered", || {
        conn.query_row(
            "SELECT count(*) FROM events WHERE status <> 'delivered'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 0
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "every command started (orphans too) recorded what it read",
        || line_count(&dir.join("inbox")) == line_count(&dir.join("started")),
    )
    .await;
    drop(last);

    let inbox = std::fs::read_to_string(dir.join("inbox")).unwrap_or_default();
    let mut partial = Vec::new();
    let mut complete: BTreeSet<&str> = BTreeSet::new();
    let mut records = 0;
    for line in inbox.lines() {
        records += 1;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, n, hash] = fields[..] else {
            partial.push(format!("unreadable record {line:?}"));
            continue;
        };
        match sent.get(hash) {
            Some(len) if n.parse::<usize>().ok() == Some(*len) => {
                complete.insert(hash);
            }
            _ => partial.push(format!("event {id}: {n} bytes, sha256 {hash}")),
        }
    }
    let interrupted: i64 = conn
        .query_row(
            "SELECT count(*) FROM attempts WHERE outcome = 'interrupted'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    println!(
        "partial bodies: seed {seed}, {rounds} kills, {interrupted} interrupted attempts, \
         {records} records, {} partial",
        partial.len()
    );
    assert!(
        partial.is_empty(),
        "{} of {records} records are not a body that was sent (seed {seed}):\n{}",
        partial.len(),
        partial.join("\n")
    );
    assert_eq!(
        complete.len(),
        sent.len(),
        "every acknowledged body reached the command whole at least once"
    );
}
