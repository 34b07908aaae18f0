//! `events export`'s pages: one statement per page, on either engine.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::events::ListFilter;
use crate::store::export::{ExportCursor, Exported};

impl Store {
    /// Up to `limit` of the events `filter` picks (its cursor and limit aside), oldest first,
    /// after `after` (where the page before ended); with their bodies if `bodies`.
    pub async fn export_page(
        &self,
        filter: &ListFilter,
        after: Option<ExportCursor>,
        limit: usize,
        bodies: bool,
    ) -> Result<Vec<Exported>, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.export_page(filter, after, limit, bodies).await,
            Engine::Postgres(pg) => pg.export_page(filter, after, limit, bodies).await,
        }
    }
}
