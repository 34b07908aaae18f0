//! Storage that fails on purpose, and what the tests around it share: a tmpfs to fill
//! ([`Tmpfs`], `disk_full.rs`); the FUSE mount that turns read-only is `refusing_fs`. A
//! forward target that stays down until a flag file exists ([`gated_recorder`]), old rows for
//! the pruner, the checks that nothing half-written was left, and the CPU a process used.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::*;

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

/// Mounts a tmpfs under `dir`, or prints why this test is skipped and returns None. With
/// `PORTARIA_REQUIRE_TMPFS=1` (CI, which runs as root), not being able to is a failure.
pub fn tmpfs_or_skip(dir: &Path, size: &str, test: &str) -> Option<Tmpfs> {
    let required = std::env::var_os("PORTARIA_REQUIRE_TMPFS").is_some_and(|v| v == "1");
    tmpfs_or_skip_unless(required, dir, size, test)
}

/// [`tmpfs_or_skip`], told whether the tmpfs is required.
pub fn tmpfs_or_skip_unless(required: bool, dir: &Path, size: &str, test: &str) -> Option<Tmpfs> {
    match Tmpfs::mount(&dir.join("fs"), size) {
        Ok(fs) => Some(fs),
        Err(why) => {
            assert!(
                !required,
                "{test}: {why}, and PORTARIA_REQUIRE_TMPFS=1 says it must run"
            );
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
    sqlite_config(db)
        .server(&format!("max_body_bytes = {max_body_bytes}"))
        .storage(&format!("retention_days = {retention_days}"))
        .pagarme(&format!(
            "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\nretry = [{retry}]",
            script.display()
        ))
        .text()
}

/// A signed pagarme body of about `size` bytes, unique by `n`.
pub fn big_body(n: usize, size: usize) -> Vec<u8> {
    let pad = "x".repeat(size.saturating_sub(80));
    format!(r#"{{"id":"hook_big_{n}","type":"charge.paid","pad":"{pad}"}}"#).into_bytes()
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
        count(
            &open_db(db),
            "SELECT count(*) FROM events WHERE dedup_key LIKE 'old%'",
        ) == 0
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
