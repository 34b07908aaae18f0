//! `portaria store copy`: a SQLite database moved into an empty PostgreSQL one
//! ([`Store::copy_from`]; the copy itself is `postgres/copy.rs`). The one method of the store
//! that takes two engines, each of a given kind: any other pair is refused before any work
//! ([`CopyError`]).

use super::handle::Engine;
use super::{Store, StoreError};

/// What a copy brought over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyReport {
    pub events: u64,
    pub deliveries: u64,
    pub attempts: u64,
}

/// Why a copy did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CopyError {
    /// The target is a SQLite file: a copy goes into PostgreSQL (a SQLite file is copied by
    /// `portaria backup`).
    #[error("the target of a copy is a PostgreSQL database ([storage] url)")]
    IntoSqlite,
    /// The source is a PostgreSQL database: a copy comes from a SQLite file.
    #[error("the source of a copy is a SQLite file")]
    FromPostgres,
    #[error(transparent)]
    Store(#[from] StoreError),
}

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
