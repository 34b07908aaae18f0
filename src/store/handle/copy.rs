//! `portaria store copy`: a SQLite file into an empty PostgreSQL database; the other
//! directions are typed refusals.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::copy::{CopyError, CopyReport};

impl Store {
    /// Every event, payload, delivery and attempt of the SQLite store `source` into this
    /// store's PostgreSQL database, which must be empty, in one transaction, keeping ids,
    /// statuses, due times and dedup keys.
    pub async fn copy_from(&self, source: &Store) -> Result<CopyReport, CopyError> {
        match (self.engine(), source.engine()) {
            (Engine::Postgres(pg), Engine::Sqlite(file)) => Ok(pg.copy_from(file).await?),
            (Engine::Sqlite(_), _) => Err(CopyError::IntoSqlite),
            (Engine::Postgres(_), Engine::Postgres(_)) => Err(CopyError::FromPostgres),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_copy_goes_only_into_postgresql() {
        let dir = tempfile::tempdir().unwrap();
        let (from, into) = (dir.path().join("from.db"), dir.path().join("into.db"));
        Store::open(&from).unwrap().close();
        let source = Store::open_read_only(&from).unwrap();
        let target = Store::open(&into).unwrap();
        let refused = target.copy_from(&source).await.unwrap_err();
        assert!(matches!(refused, CopyError::IntoSqlite), "{refused:?}");
        target.close();
        source.close();
    }
}
