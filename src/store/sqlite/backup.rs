//! `portaria backup`'s copy ([`crate::store::Store::backup_to`]): a consistent snapshot of the database, taken
//! while a server writes to it, written to a temporary file beside its destination, checked,
//! fsynced and only then renamed into place, so a crash never leaves a half-written backup.
//!
//! Why SQLite's online backup API, all pages in one step:
//! - The file is always in WAL mode, where a reader never blocks the writer: copying every page
//!   in one step holds up no webhook. Its one cost is that a checkpoint cannot start the WAL
//!   over while the copy's snapshot is open, so the log grows by what is committed meanwhile
//!   and shrinks again at the next checkpoint.
//! - Copying a few pages per step only helps a rollback-journal writer, which portaria never
//!   is; and a commit by another connection (the server's writer) between two steps restarts
//!   the copy from the first page, so under a steady load it might never finish.
//! - `VACUUM INTO` also writes a consistent copy in one statement, but it rebuilds every table
//!   and index (the dedup index in hash order: random writes on an SD card) to drop free pages
//!   that `auto_vacuum = INCREMENTAL` and the vacuum after each prune already give back.
//!   Measured on a 238 MiB file: 0.47 s of CPU against the backup's 0.33 s, for a copy 2 %
//!   smaller.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::{Sqlite, schema};
use crate::store::{BackupError, Copied, StoreError};

/// How often, and how long apart, a step that finds the file locked is tried again. In WAL
/// mode a read is refused only while another connection recovers or restarts the log.
const BUSY_TRIES: u32 = 100;
const BUSY_PAUSE: Duration = Duration::from_millis(50);

impl Sqlite {
    /// [`backup_to`] on the store's connection, alone (on the writer thread between two
    /// batches, or on the read-only connection of a command).
    pub(in crate::store) async fn backup_to(
        &self,
        file: PathBuf,
        replace: bool,
    ) -> Result<Copied, BackupError> {
        self.run_solo(move |conn| Ok(backup_to(conn, &file, replace)))
            .await?
    }
}

/// Writes a consistent copy of this database to `file`: every page copied in one read
/// transaction into `.NAME.PID.tmp` beside it (mode 0600: it holds every payload), switched
/// to a rollback journal so the copy is one self-contained file, fsynced, opened again and
/// checked (`integrity_check`, the schema version), then renamed over `file` and the
/// directory fsynced. An existing `file` is replaced only with `replace`.
pub(super) fn backup_to(
    conn: &Connection,
    file: &Path,
    replace: bool,
) -> Result<Copied, BackupError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error| BackupError::Io { what, path, error }
    };
    let name = file.file_name().ok_or_else(|| BackupError::Io {
        what: "cannot back up to",
        path: file.to_path_buf(),
        error: std::io::Error::other("not a file name"),
    })?;
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let dir_real = dir
        .canonicalize()
        .map_err(io("cannot use the directory", dir))?;
    refuse_own_files(conn, &dir_real.join(name), file)?;
    let exists = |path: &Path| path.symlink_metadata().is_ok();
    if !replace && exists(file) {
        return Err(BackupError::Exists(file.to_path_buf()));
    }

    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = TempFile(dir.join(tmp_name));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp.0)
        .map_err(io("cannot create", &tmp.0))?;
    copy_into(conn, &tmp.0)?;
    File::open(&tmp.0)
        .and_then(|f| f.sync_all())
        .map_err(io("cannot fsync", &tmp.0))?;
    let events = check(&tmp.0)?;

    // Checked again: the copy may have taken a while. (A file created in the instant
    // between this and the rename would still be replaced; rename has no portable
    // "unless it exists", and hard links, which do, are missing on FAT-formatted drives.)
    if !replace && exists(file) {
        return Err(BackupError::Exists(file.to_path_buf()));
    }
    std::fs::rename(&tmp.0, file).map_err(io("cannot rename the copy to", file))?;
    tmp.keep();
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("cannot fsync the directory", dir))?;
    let bytes = file
        .metadata()
        .map_err(io("cannot read the size of", file))?
        .len();
    Ok(Copied { events, bytes })
}

/// Refuses a destination that is this database or one of its side files (through any
/// symlinked or relative directory): renaming the copy over the live file would cut the
/// server off from every later write. (A symlink *named* as the destination is harmless:
/// the rename replaces the link, not what it points to.)
fn refuse_own_files(conn: &Connection, target: &Path, file: &Path) -> Result<(), BackupError> {
    let Some(source) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let Ok(source) = Path::new(source).canonicalize() else {
        return Ok(());
    };
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut own = source.clone().into_os_string();
        own.push(suffix);
        let own = PathBuf::from(own);
        if target == own {
            return Err(BackupError::IsTheDatabase(file.to_path_buf()));
        }
    }
    Ok(())
}

/// Copies every page into the empty file at `tmp` in one step (one read transaction:
/// a consistent snapshot), then leaves WAL mode so that the copy needs no `-wal` beside it.
fn copy_into(conn: &Connection, tmp: &Path) -> Result<(), BackupError> {
    let failed = |e: rusqlite::Error| StoreError::Sqlite(format!("backup failed: {e}"));
    let mut dest = Connection::open(tmp).map_err(failed)?;
    // No journal and no syncs while it is written: nobody reads the temporary file until
    // it is complete, and it is fsynced once at the end.
    dest.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        .map_err(failed)?;
    {
        let backup = Backup::new(conn, &mut dest).map_err(failed)?;
        let mut tries = 0;
        loop {
            match backup.step(-1).map_err(failed)? {
                StepResult::Done => break,
                StepResult::More => {}
                // Busy, Locked, or whatever a later rusqlite adds: try again, a while.
                _ => {
                    tries += 1;
                    if tries >= BUSY_TRIES {
                        return Err(StoreError::Sqlite(
                            "backup failed: the database stayed locked".into(),
                        )
                        .into());
                    }
                    std::thread::sleep(BUSY_PAUSE);
                }
            }
        }
    }
    // The pages carry the source's header, which says WAL.
    dest.execute_batch("PRAGMA journal_mode = DELETE")
        .map_err(failed)?;
    dest.close().map_err(|(_, e)| failed(e))?;
    Ok(())
}

/// Opens the copy afresh, read-only, and checks it as a restore would need it; returns its
/// event count.
fn check(path: &Path) -> Result<u64, BackupError> {
    let check = |e: rusqlite::Error| BackupError::Check(e.to_string());
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(check)?;
    let verdict: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(check)?;
    if verdict != "ok" {
        return Err(BackupError::Check(format!("integrity_check: {verdict}")));
    }
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(check)?;
    if version != schema::SCHEMA_VERSION {
        return Err(BackupError::Check(format!(
            "schema version {version}, expected {}",
            schema::SCHEMA_VERSION
        )));
    }
    let events: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .map_err(check)?;
    Ok(u64::try_from(events).unwrap_or(0))
}

/// The temporary copy, removed on every way out but a successful rename.
struct TempFile(PathBuf);

impl TempFile {
    fn keep(mut self) {
        self.0 = PathBuf::new();
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::super::Db;
    use super::super::fixtures::{row, temp_db};
    use super::*;
    use crate::store::Status;

    /// Every row of the four tables, as text, in id order.
    fn dump(conn: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        for sql in [
            "SELECT * FROM events ORDER BY id",
            "SELECT * FROM payloads ORDER BY event_id",
            "SELECT * FROM attempts ORDER BY id",
            "SELECT * FROM deliveries ORDER BY event_id, route",
        ] {
            let mut stmt = conn.prepare(sql).unwrap();
            let rows = stmt
                .query_map([], |r| {
                    let cells: Vec<String> = (0..r.as_ref().column_count())
                        .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                        .collect();
                    Ok(cells.join("|"))
                })
                .unwrap();
            out.extend(rows.map(Result::unwrap));
        }
        out
    }

    #[test]
    fn the_copy_of_a_populated_database_opens_with_the_same_rows_and_passes_its_check() {
        let (dir, db) = temp_db();
        db.conn.execute_batch("BEGIN").unwrap();
        for n in 0..300 {
            let status = Status::ALL[n % Status::ALL.len()];
            row(
                &db,
                "pagarme",
                &format!("hook_{n}"),
                status,
                (n % 40) as i64,
            );
        }
        db.conn.execute_batch("COMMIT").unwrap();
        let source = dir.path().join("p.db");
        let reader = Db::open_read_only(&source).unwrap();
        let file = dir.path().join("copy.db");
        let copied = reader.backup_to(&file, false).unwrap();
        assert_eq!(copied.events, 300);
        assert_eq!(copied.bytes, std::fs::metadata(&file).unwrap().len());

        let copy = Connection::open(&file).unwrap();
        assert_eq!(dump(&copy), dump(&db.conn));
        let ok: String = copy
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        let mode: String = copy
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete", "one self-contained file, no -wal needed");
        drop(copy);
        let perms = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(perms & 0o777, 0o600, "payloads are private");
        // Nothing but the source's files and the copy is left in the directory.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("p.db"))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["copy.db"]);
        // A portaria that opens the copy (a restore) finds its events.
        let restored = Db::open(&file).unwrap();
        assert_eq!(super::super::fixtures::ids(&restored).len(), 300);
    }

    #[test]
    fn an_existing_file_is_replaced_only_when_asked() {
        let (dir, db) = temp_db();
        row(&db, "pagarme", "k", Status::Pending, 0);
        let file = dir.path().join("copy.db");
        std::fs::write(&file, b"an older backup").unwrap();
        let err = db.backup_to(&file, false).unwrap_err();
        assert!(matches!(err, BackupError::Exists(_)), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"an older backup");
        assert_eq!(db.backup_to(&file, true).unwrap().events, 1);
    }

    #[test]
    fn the_database_and_its_side_files_are_never_a_destination() {
        let (dir, db) = temp_db();
        row(&db, "pagarme", "k", Status::Pending, 0);
        let before = std::fs::read(dir.path().join("p.db")).unwrap();
        for name in ["p.db", "p.db-wal", "p.db-shm", "./p.db"] {
            let err = db.backup_to(&dir.path().join(name), true).unwrap_err();
            assert!(
                matches!(err, BackupError::IsTheDatabase(_)),
                "{name}: {err}"
            );
        }
        let linked_dir = dir.path().join("linked");
        std::os::unix::fs::symlink(dir.path(), &linked_dir).unwrap();
        let err = db.backup_to(&linked_dir.join("p.db"), true).unwrap_err();
        assert!(matches!(err, BackupError::IsTheDatabase(_)), "{err}");
        assert_eq!(std::fs::read(dir.path().join("p.db")).unwrap(), before);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let (dir, db) = temp_db();
        let file = dir.path().join("nowhere").join("copy.db");
        let err = db.backup_to(&file, false).unwrap_err().to_string();
        assert!(err.contains("cannot use the directory"), "{err}");
        assert!(err.contains("nowhere"), "{err}");
    }
}
