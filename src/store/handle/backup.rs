//! `portaria backup`: a consistent copy of the SQLite file while the server runs; a typed
//! refusal on PostgreSQL, whose own tools back it up.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::backup::{BackupError, Copied};
use std::path::PathBuf;

impl Store {
    /// Writes a consistent copy of the SQLite database to `file`, checked and fsynced before
    /// it is renamed into place. An existing `file` is replaced only with `replace`.
    pub async fn backup_to(&self, file: PathBuf, replace: bool) -> Result<Copied, BackupError> {
        match self.engine() {
            Engine::Sqlite(db) => db.backup_to(file, replace).await,
            Engine::Postgres(_) => Err(BackupError::OnPostgres),
        }
    }
}
