//! What the status page reads: the overview of each endpoint now and the chart's hours.
//! Each method is one `match` over [`Engine`](super::Engine).

use super::Engine;
use super::Store;
use crate::store::StoreError;
use crate::store::dashboard::Overview;

impl Store {
    /// Each of `names` (the configured endpoints), and any other endpoint with events waiting,
    /// dead or counted in the last day; and the chart's last `hours` hours. The counters not
    /// yet folded into `hourly` are folded first, so the page shows every count made before
    /// it was asked.
    pub async fn overview(
        &self,
        names: Vec<String>,
        hours: usize,
        now_ms: i64,
    ) -> Result<Overview, StoreError> {
        match self.engine() {
            Engine::Sqlite(db) => db.overview(names, hours, now_ms).await,
            Engine::Postgres(pg) => pg.overview(names, hours, now_ms).await,
        }
    }
}
