//! The store's behaviour suite: one set of tests, written once against [`Store`]'s public
//! methods, run on both engines, SQLite (a file in a temp dir) and PostgreSQL (a database of
//! the shared test cluster, `pg_cluster`, emptied for each test; `PORTARIA_REQUIRE_POSTGRES=1`
//! makes a missing server a failure). Each test is an `async fn(&Subject)`; [`engines!`] at the foot
//! of each file makes two `#[tokio::test]`s of each, `<file>::sqlite::<name>` and
//! `<file>::postgres::<name>`, so a failure names the engine and `cargo test --test it
//! store_suite::` runs the lot.
//!
//! Why integration tests against the public API, not a `#[cfg(test)]` harness inside the
//! crate: the suite must say what every caller may rely on, whatever is behind the handle,
//! and survive the store's internals being rearranged (only renames reach it). Why store calls
//! and not a real server: every time is a parameter (`now_ms`), so retries, leases, windows
//! and hours are set, not slept for, and the whole suite stays within seconds per engine.
//!
//! The files, by concern: `intake` (the barrier and the dedup window), `queue` (claims and
//! ordering: `Any`, strict, `order_by`), `attempts` (attempts, the roll-up, the replay race),
//! `retention` (the prunable rule, batches, archive restore), `status` (the status page's
//! queries and counters), `quarantine` (the rejected requests kept), `copy` (`store copy`, SQLite into PostgreSQL), `reconcile` (what a run never stored), `upstream` (the event types and unrouted events the
//! alerts task reads), `engines` (where the
//! engines differ on purpose, each difference asserted as each engine documents it).
//!
//! Opening a store is per engine by nature ([`Subject::open`], [`Subject::another`]), and so
//! is `store copy`'s source, a SQLite file (`copy.rs`). Nothing else here knows the engine,
//! but for the differences on purpose, each named where it is asserted.

use std::path::PathBuf;

use bytes::Bytes;
use portaria::store::{
    AfterAttempt, Claimed, Delivery, EventDetail, Inserted, LaneClaim, NewDelivery, NewEvent,
    Order, Received, Restored, Store, Tried,
};
use portaria::verify::{Request, Verified, Verifier};

/// Makes two tests of each named `async fn(&Subject)` of the file: one per engine.
macro_rules! engines {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    use crate::store_suite::{Engine, Subject};
                    if let Some(s) = Subject::open(Engine::Sqlite).await {
                        super::$name(&s).await;
                        s.close().await;
                    }
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    use crate::store_suite::{Engine, Subject};
                    if let Some(s) = Subject::open(Engine::Postgres).await {
                        super::$name(&s).await;
                        s.close().await;
                    }
                }
            )*
        }
    };
}

mod attempts;
mod copy;
mod engines;
mod fetches;
mod intake;
mod pauses;
mod quarantine;
mod queue;
mod reconcile;
mod retention;
mod status;
mod upstream;
mod windows;

pub const MINUTE: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;
/// PostgreSQL's delivery lease (`postgres/queue.rs`): a claim holds this long unrenewed.
pub const LEASE: i64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// The store under test, and where its database is.
pub struct Subject {
    pub engine: Engine,
    pub store: Store,
    /// The test's clock: every call is given a time from it, never the wall clock's.
    pub now: i64,
    place: Place,
}

enum Place {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    Postgres {
        url: String,
        database: String,
    },
}

/// The suite's PostgreSQL databases not in use, emptied when taken: with a database per test
/// (40 more on the shared cluster), the cluster did not stop within the 20 s `pg_cluster`
/// gives it when the test binary exits. A test that fails keeps its database as it was.
static FREE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A database for one test: a free one, emptied (its schema kept, its ids starting over), or
/// a new one.
async fn checkout(pg: &crate::support::pg_cluster::Cluster) -> String {
    let free = FREE.lock().unwrap().pop();
    let Some(database) = free else {
        return pg.database().await;
    };
    pg.connect(&database)
        .await
        .batch_execute(
            "TRUNCATE events, payloads, deliveries, attempts, dedup, hourly, route_pauses, \
             event_items, rejected, fetches \
             RESTART IDENTITY; \
             DELETE FROM meta WHERE key <> 'schema_version'",
        )
        .await
        .unwrap();
    database
}

impl Subject {
    /// A fresh store on `engine`; None on PostgreSQL without the server binaries (and not
    /// required: `pg_cluster` says so), when the test is skipped.
    pub async fn open(engine: Engine) -> Option<Subject> {
        let (store, place) = match engine {
            Engine::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("portaria.db");
                let store = Store::open(&path).unwrap();
                (store, Place::Sqlite { _dir: dir, path })
            }
            Engine::Postgres => {
                let pg = crate::support::pg_cluster::shared()?;
                let database = checkout(pg).await;
                let url = pg.url(&database);
                let store = open_postgres(&url).await;
                (store, Place::Postgres { url, database })
            }
        };
        Some(Subject {
            engine,
            store,
            now: portaria::time::now_ms(),
            place,
        })
    }

    /// Closes the store; a PostgreSQL database goes back to the suite's for the next test.
    pub async fn close(self) {
        close(self.store.clone()).await;
        if let Place::Postgres { database, .. } = self.place {
            FREE.lock().unwrap().push(database);
        }
    }

    /// Another handle on the same database, as another process would hold: on SQLite a
    /// command's (`Store::open_for_command`, its own writer thread on the file); on
    /// PostgreSQL another instance (its own pool, instance id, leases and listening
    /// connection). Close it with [`close`].
    pub async fn another(&self) -> Store {
        match &self.place {
            Place::Sqlite { path, .. } => Store::open_for_command(path).unwrap(),
            Place::Postgres { url, .. } => open_postgres(url).await,
        }
    }

    /// Puts archived events back (`archive replay`), each to `routes`.
    pub async fn restore(&self, events: &[EventDetail], routes: &[NewDelivery]) -> Restored {
        let plan = |_: &EventDetail| routes.to_vec();
        self.store
            .restore(events.to_vec(), &plan, self.now)
            .await
            .unwrap()
    }

    /// The SQLite file (SQLite only: the source of `store copy`).
    pub fn sqlite_path(&self) -> Option<&std::path::Path> {
        match &self.place {
            Place::Sqlite { path, .. } => Some(path),
            Place::Postgres { .. } => None,
        }
    }

    /// Inserts `w` with intake's deadline.
    pub async fn insert(&self, w: Webhook) -> Inserted {
        self.store
            .insert_event(w.into_event(), std::time::Duration::from_secs(5))
            .await
            .unwrap()
    }

    /// Inserts `w`, which must be a new event; its id.
    pub async fn new_event(&self, w: Webhook) -> i64 {
        match self.insert(w).await {
            Inserted::New(id) => id,
            dup => panic!("expected a new event, got {dup:?}"),
        }
    }

    /// Claims up to `limit` due deliveries of one lane at `now`.
    pub async fn claim(
        &self,
        endpoint: &str,
        route: &str,
        order: Order,
        limit: usize,
        now: i64,
    ) -> Claimed {
        let lane = LaneClaim {
            endpoint: endpoint.into(),
            route: route.into(),
            limit,
            order,
        };
        let mut claimed = self.store.claim_lanes(vec![lane], now).await.unwrap();
        assert_eq!(claimed.len(), 1, "one answer per lane");
        claimed.pop().unwrap()
    }

    /// The ids claimed of one lane at `now` (up to 10).
    pub async fn claim_ids(&self, endpoint: &str, route: &str, order: Order, now: i64) -> Vec<i64> {
        ids(&self.claim(endpoint, route, order, 10, now).await.deliveries)
    }

    /// Records an attempt of `d` that started at `at` and took 5 ms.
    pub async fn record(&self, d: &Delivery, at: i64, after: AfterAttempt) {
        self.store
            .record_attempt(d.event_id, d.route.clone(), tried(d, at), after, None)
            .await
            .unwrap();
    }

    /// The one delivery of (`endpoint`, `route`) due at `now`, claimed.
    pub async fn claim_one(&self, endpoint: &str, route: &str, now: i64) -> Delivery {
        let mut claimed = self.claim(endpoint, route, Order::Any, 1, now).await;
        assert_eq!(
            claimed.deliveries.len(),
            1,
            "{endpoint}/{route} has one due"
        );
        claimed.deliveries.pop().unwrap()
    }

    /// Claims the lane's due delivery, records `after` for it and rolls its event up: one
    /// attempt from start to end. Returns the delivery.
    pub async fn attempt(
        &self,
        endpoint: &str,
        route: &str,
        now: i64,
        after: AfterAttempt,
    ) -> Delivery {
        let d = self.claim_one(endpoint, route, now).await;
        self.record(&d, now, after).await;
        self.store.roll_up(vec![d.event_id]).await.unwrap();
        d
    }

    /// Asserts when a lane whose due deliveries are all claimed (at `claimed_at`) is next
    /// due: never on SQLite, where the slot holding a claim records it (or a restart's
    /// recovery puts it back); on PostgreSQL when the claims' lease ends, after which another
    /// instance may take them over (leases: a difference on purpose). The lease keeper may
    /// have renewed a lease meanwhile, from the wall clock: then it ends a little later.
    pub fn assert_lease_end(&self, next_due: Option<i64>, claimed_at: i64) {
        match self.engine {
            Engine::Sqlite => assert_eq!(next_due, None, "nothing waits for a claim"),
            Engine::Postgres => {
                let renewed_by_now = portaria::time::now_ms() + LEASE;
                let at = next_due.expect("due when the lease ends");
                assert!(
                    (claimed_at + LEASE..=renewed_by_now).contains(&at),
                    "due at {at}: not when the lease of a claim at {claimed_at} ends"
                );
            }
        }
    }

    pub async fn detail(&self, id: i64) -> EventDetail {
        self.store.event_detail(id).await.unwrap().unwrap()
    }
}

async fn open_postgres(url: &str) -> Store {
    let settings: tokio_postgres::Config = url.parse().unwrap();
    Store::open_postgres(settings, None).await.unwrap()
}

/// Closes `store` off the runtime's threads: PostgreSQL's close waits for a last fold of the
/// counters by a task of the runtime.
pub async fn close(store: Store) {
    tokio::task::spawn_blocking(move || store.close())
        .await
        .unwrap();
}

pub fn ids(deliveries: &[Delivery]) -> Vec<i64> {
    deliveries.iter().map(|d| d.event_id).collect()
}

/// An attempt of `d` that started at `at` and took 5 ms.
pub fn tried(d: &Delivery, at: i64) -> Tried {
    Tried {
        attempt: d.attempt,
        started_at_ms: at,
        duration_ms: 5,
    }
}

pub fn retry_at(at_ms: i64) -> AfterAttempt {
    AfterAttempt::RetryAt {
        at_ms,
        error: "HTTP 500".into(),
    }
}

pub fn dead() -> AfterAttempt {
    AfterAttempt::Dead {
        error: "HTTP 500, the last try".into(),
    }
}

/// A verified webhook, as intake hands it to the store: endpoint, dedup key, when it came and
/// what it carries; built by steps from [`Webhook::new`].
#[derive(Debug, Clone)]
pub struct Webhook {
    pub endpoint: String,
    pub key: String,
    pub at_ms: i64,
    /// The dedup window (None: none).
    pub window_ms: Option<i64>,
    pub routes: Vec<NewDelivery>,
    pub event_type: Option<String>,
    pub object_id: Option<String>,
    pub content_type: Option<String>,
    pub headers: Vec<u8>,
    pub body: Vec<u8>,
    pub client_cert: Option<String>,
    /// The id a provider signed apart from the body (Mercado Pago's query `data.id`).
    pub signed_id: Option<String>,
    /// Its items' own keys, for a batch of items signed one by one (Adyen's).
    pub items: Vec<String>,
    /// Taken from the gateway's API by a reconcile run, not delivered ([`Webhook::reconciled`]).
    pub reconciled: bool,
}

impl Webhook {
    /// An event of `endpoint` keyed `key` at `at_ms`, for the route `default`, no window.
    pub fn new(endpoint: &str, key: &str, at_ms: i64) -> Webhook {
        Webhook {
            endpoint: endpoint.into(),
            key: key.into(),
            at_ms,
            window_ms: None,
            routes: vec![route("default", None)],
            event_type: Some("charge.paid".into()),
            object_id: None,
            content_type: Some("application/json".into()),
            headers: format!("x-hook: {key}\r\n").into_bytes(),
            body: format!("{{\"id\":\"{key}\"}}").into_bytes(),
            client_cert: None,
            signed_id: None,
            items: Vec::new(),
            reconciled: false,
        }
    }

    /// Taken from the gateway's API by a reconcile run (`NewEvent::reconciled`).
    pub fn reconciled(mut self) -> Webhook {
        self.reconciled = true;
        self
    }

    /// A batch of these items, each known by its own key.
    pub fn items(mut self, keys: &[&str]) -> Webhook {
        self.items = keys.iter().map(|k| k.to_string()).collect();
        self
    }

    /// To these routes (none: stored only).
    pub fn to(mut self, routes: &[(&str, Option<&str>)]) -> Webhook {
        self.routes = routes.iter().map(|(r, k)| route(r, *k)).collect();
        self
    }

    pub fn window(mut self, ms: i64) -> Webhook {
        self.window_ms = Some(ms);
        self
    }

    /// Of this event type (None: untyped).
    pub fn typed(mut self, event_type: Option<&str>) -> Webhook {
        self.event_type = event_type.map(str::to_string);
        self
    }

    pub fn object(mut self, id: &str) -> Webhook {
        self.object_id = Some(id.into());
        self
    }

    pub fn into_event(self) -> NewEvent {
        let received = Received {
            event_type: self.event_type,
            content_type: self.content_type,
            headers: self.headers,
            body: Bytes::from(self.body),
            at_ms: self.at_ms,
            dedup_since_ms: self.window_ms.map(|w| self.at_ms - w),
            client_cert: self.client_cert,
            object_id: self.object_id,
            event_type_signed: true,
        };
        if self.reconciled {
            return NewEvent::reconciled(
                &self.endpoint,
                self.key,
                received,
                self.routes,
                self.signed_id,
            );
        }
        NewEvent::new(
            proof(self.signed_id.as_deref()),
            &self.endpoint,
            self.key,
            received,
            self.routes,
        )
        .with_items(self.items)
    }
}

pub fn route(name: &str, order_key: Option<&str>) -> NewDelivery {
    NewDelivery {
        route: name.into(),
        order_key: order_key.map(str::to_string),
    }
}

/// A verifier's proof, as only `verify` can make one: a request signed and verified here.
/// With `signed_id`, Mercado Pago's (which signs the query's `data.id` apart from the body).
fn proof(signed_id: Option<&str>) -> Verified {
    let (provider, body) = match signed_id {
        Some(id) => ("mercadopago", format!("{{\"data\":{{\"id\":\"{id}\"}}}}")),
        None => ("pagarme", "{}".to_string()),
    };
    let verifier = Verifier::new(provider, None, &["suite-secret".to_string()], None).unwrap();
    let now = portaria::time::now_ms() / 1000;
    let signed = verifier
        .sign_request(body.as_bytes(), now, "suite")
        .unwrap();
    let mut headers = http::HeaderMap::new();
    for (name, value) in &signed.headers {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    let request = Request::new(&headers, body.as_bytes()).with_query(signed.query.as_deref());
    let proof = verifier.verify_request(&request, now).unwrap();
    assert_eq!(proof.signed_id(), signed_id);
    proof
}
