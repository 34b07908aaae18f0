//! [`Db`], the command line's handle: one plain synchronous connection, opened by each command
//! and dropped with it. It may run while a server is up (WAL lets readers in; its writes take
//! the write lock first and wait on the busy timeout). Its methods sit beside their queries:
//! `events.rs` (list, show, replay) and `retention.rs` (dry-run counts, archive restore).

use std::path::Path;

use rusqlite::Connection;

use super::{StoreError, schema};

/// A synchronous connection for the command line.
pub struct Db {
    pub(in crate::store) conn: Connection,
}

impl Db {
    /// Opens (creating if needed) the database for a command. A file with an older schema is
    /// refused: only the server upgrades a schema, since an older server still running on the
    /// file would fail every write after the upgrade.
    pub fn open(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open_with(path, schema::Upgrade::Refused)?,
        })
    }

    /// Opens an existing database for reading only: no schema change, no write, so any user
    /// who can read the file (and its `-wal`/`-shm`) can look, not only the service's own.
    pub fn open_read_only(path: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            conn: schema::open_read_only(path)?,
        })
    }

    /// Runs `f` in one IMMEDIATE transaction (the write lock first, so it waits on the busy
    /// timeout rather than failing half-way).
    pub(in crate::store) fn write<T>(
        &mut self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }
}
