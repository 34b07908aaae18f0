//! One test body on either store engine: [`Engine::server`] starts the real server on a SQLite
//! file in a temp dir or on a new database of the shared PostgreSQL cluster (`pg_cluster`)
//! ([`Engine::config`]: the config of one, for a test that writes the rest of it), and
//! [`Reader`] reads what it stored back through the store API (what `portaria events list`
//! and `events show` read), the same calls on both engines: no SQL of either.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use portaria::config::{Config, Source};
use portaria::store::{EventDetail, EventSummary, ListFilter, RouteState, Store};

use super::config_text::{ConfigText, sqlite_config, storage_config};
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

    /// A config on this engine for a server whose files are in `dir` (a SQLite file there,
    /// or a new database of the shared cluster), with the path [`TestServer::start_with`]
    /// takes (a file nobody opens, on PostgreSQL); None where [`Engine::server`] skips.
    pub async fn config(self, dir: &Path) -> Option<(ConfigText, PathBuf)> {
        match self {
            Engine::Sqlite => {
                let db = dir.join("portaria.db");
                Some((sqlite_config(&db), db))
            }
            Engine::Postgres => {
                let pg = pg_cluster::shared()?;
                let url = pg.url(&pg.database().await);
                let text = storage_config(&format!("url = \"{url}\""));
                Some((text, dir.join("unused.db")))
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

    /// The store itself, for a call no method here wraps (a reconcile run's hold, say: the
    /// handle is then another instance's, as on a second machine).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Event `id` with its deliveries and attempts.
    pub async fn event(&self, id: i64) -> EventDetail {
        self.store
            .event_detail(id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no event {id}"))
    }

    /// Every stored event, newest first (`events list` without a filter or a limit).
    pub async fn events(&self) -> Vec<EventSummary> {
        self.store.list_events(ListFilter::default()).await.unwrap()
    }

    /// The stored events whose dedup key is `key`, whatever their endpoint.
    pub async fn with_key(&self, key: &str) -> Vec<EventSummary> {
        let filter = ListFilter {
            text: Some(key.to_string()),
            ..ListFilter::default()
        };
        let mut found = self.store.list_events(filter).await.unwrap();
        found.retain(|e| e.dedup_key == key);
        found
    }

    /// What `endpoint`'s last reconcile run kept in the store (its JSON: the next run's
    /// cursor, the status page's view).
    pub async fn reconcile_run(&self, endpoint: &str) -> serde_json::Value {
        let runs = self.store.reconcile_runs().await.unwrap();
        let (_, run) = runs
            .iter()
            .find(|(name, _)| name == endpoint)
            .unwrap_or_else(|| panic!("no run of {endpoint} kept: {runs:?}"));
        serde_json::from_str(run).unwrap()
    }

    /// Polls every 20 ms until exactly one event has the dedup key `key`; panics after
    /// `limit`, saying how many had it last.
    pub async fn until_stored_once(&self, key: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let n = self.with_key(key).await.len();
            if n == 1 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {key} stored once; {n} stored"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
