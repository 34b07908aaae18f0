//! Disk full, with real parts: the real binary, its database on a small tmpfs (mounted here;
//! skipped with a message where mounting is not allowed), filled to the last byte by a file
//! written beside the database. While full: webhooks get 503 with `Retry-After`, `/readyz`
//! says 503, the worker and the pruner stay alive without spinning (CPU time measured), and
//! nothing half-written is left. Once the file system is grown, intake and readiness come back
//! by themselves, and every event accepted is delivered.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

/// A tmpfs mounted on a directory for one test; unmounted when dropped, even on failure.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`4m`) on `dir`, or says why not (not root, no mount).
    pub fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: cannot mount a tmpfs".into());
        }
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            dir: dir.to_path_buf(),
        })
    }

    /// `mount -o remount,size=SIZE`: grows (or shrinks) the file system in place.
    pub fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "remount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut cmd = Command::new("umount");
            if lazy {
                cmd.arg("-l");
            }
            cmd.arg(&self.dir).status().is_ok_and(|s| s.success())
        };
        if !umount(false) {
            // Something still holds a file open (a child not reaped yet): detach it anyway.
            umount(true);
        }
    }
}

/// Mounts a tmpfs under `dir`, or prints why this test is skipped and returns None.
pub fn tmpfs_or_skip(dir: &Path, size: &str, test: &str) -> Option<Tmpfs> {
    match Tmpfs::mount(&dir.join("fs"), size) {
        Ok(fs) => Some(fs),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why} (run as root, as CI does, to test this)");
            None
        }
    }
}

/// User plus system CPU time of process `pid` so far, from /proc/PID/stat.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// A forward command that fails until `flag` exists, then appends each body as one line.
pub fn gated_recorder(work: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (flag, out) = (work.join("target-up"), work.join("delivered.jsonl"));
    let script = work.join("deliver.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntest -e '{}' || exit 1\ncat >> '{}'\necho >> '{}'\n",
            flag.display(),
            out.display(),
            out.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    (script, flag, out)
}

/// Bodies the gated recorder has written, one per line.
pub fn delivered(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// A config for the real binary: the database at `db`, the pagarme endpoint forwarding to
/// `script` (a retry every second for a minute), retention `days`.
pub fn config(db: &Path, script: &Path, max_body_bytes: usize, retention_days: u32) -> String {
    let retry = vec!["\"1s\""; 60].join(", ");
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
max_body_bytes = {max_body_bytes}

[storage]
path = "{db}"
retention_days = {retention_days}

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret = "{PAGARME_SECRET}"
forward = {{ command = ["{script}"], timeout_secs = 10 }}
retry = [{retry}]
"#,
        db = db.display(),
        script = script.display(),
    )
}

/// A signed pagarme body of about `size` bytes, unique by `n`.
pub fn big_body(n: usize, size: usize) -> Vec<u8> {
    let pad = "x".repeat(size.saturating_sub(80));
    format!(r#"{{"id":"hook_big_{n}","type":"charge.paid","pad":"{pad}"}}"#).into_bytes()
}

/// Appends to `filler` until the file system says it is full.
fn fill(filler: &Path) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(filler)
        .unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Whatever a partial last block left.
    while matches!(file.write(&[0u8]), Ok(1)) {}
}

/// GET on the admin listener: the status.
pub async fn readyz(process: &Process) -> u16 {
    send(process.admin.unwrap(), "GET", "/readyz", &[], b"")
        .await
        .status
}

/// Old delivered events for the pruner, written beside the running server as a CLI would.
pub fn age_rows(db: &Path, n: usize, days: i64) {
    let conn = open_db(db);
    let received = (now_secs() - days * 86_400) * 1000;
    for i in 0..n {
        let key = format!("old{i}");
        conn.execute(
            "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
             status, finished_at) VALUES ('pagarme', ?1, ?2, 2, ?3, 'delivered', ?3)",
            rusqlite::params![key, portaria::store::dedup_hash("pagarme", &key), received],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO payloads (event_id, headers, body) VALUES (last_insert_rowid(), x'', x'7b7d')",
            [],
        )
        .unwrap();
    }
}

/// The database is whole and no event lacks its payload.
pub fn assert_whole(db: &Path) {
    let conn = open_db(db);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let orphans: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE id NOT IN (SELECT event_id FROM payloads)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "an event without its payload");
}

/// Once storage works again: the forward target comes up, every accepted event (the payment
/// bodies 0..3 and `last`) is delivered and none of `refused` ever is, the pruner gets its
/// pass done, and the process stops cleanly, leaving a whole database with just those four.
pub async fn assert_recovered_whole(
    mut process: Process,
    flag: &Path,
    out: &Path,
    db: &Path,
    last: Vec<u8>,
    refused: &[Vec<u8>],
) {
    std::fs::write(flag, b"").unwrap();
    eventually(
        Duration::from_secs(20),
        "all four accepted events delivered",
        || delivered(out).len() >= 4,
    )
    .await;
    let lines = delivered(out);
    for n in 0..3 {
        let body = String::from_utf8(payment_body(n)).unwrap();
        assert!(lines.contains(&body), "event {n} delivered");
    }
    assert!(lines.contains(&String::from_utf8(last).unwrap()));
    for body in refused {
        assert!(!lines.contains(&String::from_utf8(body.clone()).unwrap()));
    }
    // The pruner got its pass done once it could write again.
    eventually(Duration::from_secs(30), "the old events are pruned", || {
        open_db(db)
            .query_row(
                "SELECT count(*) FROM events WHERE dedup_key LIKE 'old%'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
            == 0
    })
    .await;

    process.signal(libc::SIGTERM);
    let status = process.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}");
    assert_whole(db);
    let stored: i64 = open_db(db)
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 4, "the refused webhooks left nothing behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gets_503_and_not_ready_then_recovers_by_itself_when_space_returns() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = tmpfs_or_skip(work.path(), "4m", "disk full") else {
        return;
    };
    let db = fs.dir.join("portaria.db");
    let (script, flag, out) = gated_recorder(work.path());
    const MAX_BODY: usize = 64 * 1024;
    let config_path = work.path().join("portaria.toml");
    std::fs::write(&config_path, config(&db, &script, MAX_BODY, 30)).unwrap();
    let mut process = Process::spawn(&config_path).await;
    let pid = process.child.id();

    // Before: accepted, queued (the target is down), ready.
    for n in 0..3 {
        assert_eq!(
            post_pagarme(process.addr, &payment_body(n)).await.status,
            200
        );
    }
    assert_eq!(readyz(&process).await, 200, "ready before the disk fills");
    age_rows(&db, 20, 40);

    // Fill the file system beside the database.
    let filler = fs.dir.join("filler");
    fill(&filler);
    // Pruning is due now (a reload that shortens retention runs a pass at once).
    std::fs::write(&config_path, config(&db, &script, MAX_BODY, 29)).unwrap();
    process.signal(libc::SIGHUP);

    // While full: each webhook (a body near the limit) is refused with 503 and Retry-After.
    // The filler takes back whatever SQLite gave up meanwhile, so the disk stays full.
    let mut refused = Vec::new();
    for n in 0..6 {
        fill(&filler);
        let body = big_body(n, MAX_BODY - 1024);
        let reply = post_pagarme(process.addr, &body).await;
        assert_eq!(
            reply.status, 503,
            "webhook {n} on a full disk: {}",
            reply.body
        );
        assert_eq!(reply.headers["retry-after"], "5");
        refused.push(body);
    }
    fill(&filler);
    assert_eq!(
        readyz(&process).await,
        503,
        "/readyz must not say ready while webhooks get 503"
    );

    // Neither the worker (three events due every second) nor the pruner spins or dies.
    let (cpu_before, clock) = (cpu_time(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (cpu, wall) = (cpu_time(pid) - cpu_before, clock.elapsed());
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    eprintln!(
        "disk full: {cpu:?} of CPU in {wall:?} ({:.1} %)",
        share * 100.0
    );
    assert!(
        share < 0.25,
        "busy while the disk is full: {cpu:?} in {wall:?}"
    );
    assert!(process.child.try_wait().unwrap().is_none(), "still running");
    let still_full = post_pagarme(process.addr, &big_body(99, MAX_BODY - 1024)).await;
    assert_eq!(still_full.status, 503);

    // Space returns: the file system grows. No restart.
    fs.resize("64m");
    let back = Instant::now();
    let body = big_body(100, MAX_BODY - 1024);
    loop {
        let reply = post_pagarme(process.addr, &body).await;
        if reply.status == 200 {
            break;
        }
        assert_eq!(reply.status, 503);
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "intake did not come back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "disk full: intake back {:?} after the remount",
        back.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while readyz(&process).await != 200 {
        assert!(Instant::now() < deadline, "/readyz did not say ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    assert_recovered_whole(process, &flag, &out, &db, body, &refused).await;
    drop(fs);
}
