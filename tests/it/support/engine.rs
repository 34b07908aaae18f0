//! One test body on either store engine: [`Engine::server`] starts the real server on a SQLite
//! file in a temp dir or on a new database of the shared PostgreSQL cluster (`pg_cluster`), and
//! [`Reader`] reads what it stored back through the store API (what `portaria events show`
//! reads), the same calls on both engines: no SQL of either.

use std::time::{Duration, Instant};

use portaria::config::{Config, Source};
use portaria::store::{EventDetail, RouteState, Store};

use super::server::TestServer;
use super::{pg_cluster, postgres};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// The server with the pagarme endpoint and `pagarme_extra` (its forward, say), on this
    /// engine; None when PostgreSQL is not installed and not required (`pg_cluster` said why:
    /// the test skips).
    pub async fn server(self, pagarme_extra: &str) -> Option<TestServer> {
        match self {
            Engine::Sqlite => Some(TestServer::start("", pagarme_extra).await),
            Engine::Postgres => {
                let pg = pg_cluster::shared()?;
                let url = pg.url(&pg.database().await);
                Some(postgres::server(&url, pagarme_extra).await)
            }
        }
    }
}

/// The store a running server's config names, opened as `portaria events` opens it (SQLite
/// read-only, beside the server's writer; PostgreSQL, a pool of its own).
pub struct Reader {
    store: Store,
}

impl Reader {
    pub async fn of(server: &TestServer) -> Reader {
        let path = server.config_path();
        let text = std::fs::read_to_string(&path).unwrap();
        let config = Config::parse(&text, Source::File(path)).expect("test config is valid");
        let store = match &config.storage.postgres {
            Some(url) => Store::open_postgres(url.settings(), url.tls_client())
                .await
                .unwrap(),
            None => Store::open_read_only(&config.storage.path).unwrap(),
        };
        Reader { store }
    }

    /// Event `id` with its deliveries and attempts.
    pub async fn event(&self, id: i64) -> EventDetail {
        self.store
            .event_detail(id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no event {id}"))
    }

    /// Event `id`'s one delivery (to its one route).
    pub async fn delivery(&self, id: i64) -> RouteState {
        let mut routes = self.event(id).await.routes;
        assert_eq!(routes.len(), 1, "event {id}: {routes:?}");
        routes.remove(0)
    }

    /// Polls event `id`'s delivery every 20 ms until `check` holds, and returns it; panics
    /// after `limit`, with the last state seen.
    pub async fn delivery_until(
        &self,
        id: i64,
        limit: Duration,
        what: &str,
        check: impl Fn(&RouteState) -> bool,
    ) -> RouteState {
        let deadline = Instant::now() + limit;
        loop {
            let delivery = self.delivery(id).await;
            if check(&delivery) {
                return delivery;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for event {id}: {what}; last seen {delivery:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.store.close();
    }
}
