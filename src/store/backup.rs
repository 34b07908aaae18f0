//! `portaria backup`: [`Store::backup_to`], a consistent copy of a SQLite file taken while a
//! server writes to it (`sqlite/backup.rs` says how). The one engine-specific method of the
//! store: on PostgreSQL it answers [`BackupError::OnPostgres`] before any work (the command
//! refuses PostgreSQL before it opens anything, pointing to `pg_dump`).

use std::path::PathBuf;

use super::StoreError;

/// What a finished backup holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub events: u64,
    /// The copy's size on disk.
    pub bytes: u64,
}

/// Why a backup was not written. Whatever the reason, the destination is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{} exists already", .0.display())]
    Exists(PathBuf),
    #[error("{} is the database itself (or one of its files): back up to another path", .0.display())]
    IsTheDatabase(PathBuf),
    #[error("{what} {}: {error}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("the copy failed its check, so nothing was written: {0}")]
    Check(String),
    /// The store is PostgreSQL: a copy of it is that server's tools' job (`pg_dump`).
    #[error(
        "the store is PostgreSQL, and a backup copies a SQLite file: back the database up \
         with PostgreSQL's own tools (pg_dump)"
    )]
    OnPostgres,
}
