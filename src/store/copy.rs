//! `portaria store copy`: a SQLite database moved into an empty PostgreSQL one
//! ([`Store::copy_from`]; the copy itself is `postgres/copy.rs`). The one method of the store
//! that takes two engines, each of a given kind: any other pair is refused before any work
//! ([`CopyError`]).

use super::StoreError;

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
