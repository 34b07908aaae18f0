//! The server: opens the store, starts the forwarding worker, accepts connections (at most
//! `max_connections` at once, the longest-idle closed to make room at the cap, each with
//! header and body deadlines), hands each request to
//! [`Intake`], and on shutdown stops accepting, lets requests in flight finish, stops the
//! worker and the pruner at a safe point and closes the database.
//!
//! A second listener, `[server] admin_listen`, answers `/healthz`, `/readyz`, `/metrics` and
//! the status page
//! ([`Admin`]) with the same connection handling and shutdown. [`Listeners::bind`] binds both
//! before anything is opened or started, so a busy port is a clear start-up error.
//!
//! [`serve_with`] also takes reload requests ([`Options::reload`]): `reload` re-reads the
//! config file and swaps what can change while serving.

mod connections;
mod reload;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::admin::Admin;
use crate::client_ip::ConnectionInfo;
use crate::config::{Config, Endpoint, Server};
use crate::forward::Worker;
use crate::ingest::Intake;
use crate::metrics::{Metrics, Series};
use crate::notify::{self, Notifier};
use crate::prune::Pruner;
use crate::shutdown::{self, Shutdown};
use crate::status::StatusPage;
use crate::store::{Store, StoreError};
use crate::watchdog::{self, Watchdog};

use connections::{Counted, Live};

pub use reload::{ReloadRequests, ReloadTrigger, Reloaded, SetLogLevel};

/// A reload trigger and the requests it sends: the trigger to whoever decides (SIGHUP, a
/// test), the requests to [`Options::reload`].
pub fn reload_channel() -> (ReloadTrigger, ReloadRequests) {
    reload::channel()
}

/// What [`serve_with`] takes besides the config; [`serve`] passes the default (no reloads).
#[derive(Default)]
pub struct Options {
    /// Reload requests: each re-reads the config file (`config.source`) and applies it.
    pub reload: Option<ReloadRequests>,
    /// How a reload changes the log level; None leaves logging alone.
    pub set_log_level: Option<SetLogLevel>,
}

/// How long requests in flight get to finish after shutdown begins.
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Connections the admin listener serves at once; it is for a scraper and a health checker.
pub const ADMIN_MAX_CONNECTIONS: usize = 16;

/// The sockets `serve` answers on, bound before anything else happens.
#[derive(Debug)]
pub struct Listeners {
    pub webhooks: TcpListener,
    /// `/healthz`, `/readyz`, `/metrics`; None when `admin_listen = "off"`.
    pub admin: Option<TcpListener>,
}

impl Listeners {
    /// Binds `listen` and `admin_listen` (unless it is off). Either failing is a start-up error
    /// that names the address and the key.
    pub async fn bind(server: &crate::config::Server) -> Result<Listeners, BindError> {
        let bind = |addr: SocketAddr, key: &'static str| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| BindError { addr, key, source })
        };
        let webhooks = bind(server.listen, "listen").await?;
        let admin = match server.admin_listen {
            Some(addr) => Some(bind(addr, "admin_listen").await?),
            None => None,
        };
        Ok(Listeners { webhooks, admin })
    }
}

/// Webhooks only, no admin listener: what tests that do not need one pass to [`serve`].
impl From<TcpListener> for Listeners {
    fn from(webhooks: TcpListener) -> Self {
        Listeners {
            webhooks,
            admin: None,
        }
    }
}

/// A listener that could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({key}): {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    /// The config key the address came from: `listen` or `admin_listen`.
    pub key: &'static str,
    pub source: std::io::Error,
}

/// Serves webhooks (and the admin endpoints, given an admin listener) on already-bound
/// listeners until `shutdown` resolves, then drains and closes everything. Tests bind
/// `127.0.0.1:0` and call this directly; a bare `TcpListener` means no admin listener.
pub async fn serve(
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StoreError> {
    serve_with(config, listeners, shutdown, Options::default()).await
}

/// [`serve`], with reloads and the like ([`Options`]).
pub async fn serve_with(
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()>,
    options: Options,
) -> Result<(), StoreError> {
    let Listeners {
        webhooks: listener,
        admin: admin_listener,
    } = listeners.into();
    let path = config.storage.path.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&path))
        .await
        .map_err(|e| StoreError::Sqlite(format!("opening the database panicked: {e}")))??;

    let (trigger, signal) = shutdown::channel();
    let new_event = Arc::new(Notify::new());
    let max_connections = config.server.max_connections;
    // A reload sends new settings; each connection takes the latest when it is accepted.
    let (http_settings, http) = watch::channel(connection_settings(&config.server));
    // The one list of endpoints: intake routes by it, the worker makes a lane of each that
    // forwards, metrics creates their series.
    let endpoints: Vec<Arc<Endpoint>> = config.endpoints.into_iter().map(Arc::new).collect();
    let metrics = Arc::new(Metrics::new(endpoints.iter().map(|e| Series {
        endpoint: &e.name,
        forwards: e.forward.is_some(),
    })));
    let intake = Intake::new(
        &endpoints,
        &config.server,
        store.clone(),
        new_event.clone(),
        metrics.clone(),
    );
    // Forward commands see neither the secrets' variables nor systemd's notify socket.
    let mut hidden_env = config.secret_variables.clone();
    hidden_env.extend(notify::VARIABLES.map(String::from));
    let worker = Worker::start(
        &endpoints,
        &hidden_env,
        store.clone(),
        new_event.clone(),
        metrics.clone(),
        signal.clone(),
    )
    .await?;
    let pruner = Pruner::start(config.storage.clone(), store.clone(), signal.clone());
    let intake = Arc::new(intake);
    // `/readyz` asks for room for one body of the limit in force; a reload changes it.
    let max_body_bytes = Arc::new(AtomicUsize::new(config.server.max_body_bytes));
    // The status line systemd shows counts the endpoints in force; a reload changes it.
    let endpoint_count = Arc::new(AtomicUsize::new(endpoints.len()));
    let notifier = Arc::new(Notifier::from_env());
    let reloader = reload::Reloader {
        notifier: notifier.clone(),
        endpoint_count: endpoint_count.clone(),
        source: config.source,
        server: config.server,
        storage: config.storage,
        log_level: config.log.level,
        intake: intake.clone(),
        max_body_bytes: max_body_bytes.clone(),
        worker,
        pruner,
        metrics: metrics.clone(),
        http: http_settings,
        set_log_level: options.set_log_level,
    };

    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    let status = match &admin_listener {
        Some(_) => Some(
            StatusPage::new(
                store.clone(),
                new_event.clone(),
                endpoints.iter().map(|e| e.name.clone()).collect(),
                config.status.token.clone(),
                admin_addr,
            )
            .map_err(|e| {
                StoreError::Sqlite(format!("the status page has no random source: {e}"))
            })?,
        ),
        None => None,
    };
    let admin = admin_listener.zip(status).map(|(listener, status)| {
        let admin = Arc::new(Admin::new(store.clone(), metrics, max_body_bytes, status));
        let (http, signal) = (http.clone(), signal.clone());
        tokio::spawn(async move {
            let mut stop = signal.clone();
            let stop = async move { stop.fired().await };
            let connections =
                accept_loop(&listener, http, admin, ADMIN_MAX_CONNECTIONS, signal, stop).await;
            drop(listener);
            drain(connections).await;
        })
    });

    if let Ok(addr) = listener.local_addr() {
        // One line with both addresses; tests read `addr=` from it.
        let admin = admin_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
        tracing::info!(%addr, %admin, "listening");
    }
    if let Some(addr) = admin_addr.filter(|a| !a.ip().is_loopback()) {
        tracing::warn!(
            %addr,
            "the admin listener is not on loopback: /metrics and /readyz are open to that network \
             (the status page asks for its token); keep admin_listen on 127.0.0.1 unless a \
             firewall guards it"
        );
    }
    // READY=1 now: the listeners are bound, the database open and upgraded, the worker runs.
    let (pulse, heartbeat) = watchdog::heartbeat();
    let watchdog = Watchdog::start(
        notifier,
        store.clone(),
        endpoint_count,
        notify::watchdog_from_env(),
        pulse,
        signal.clone(),
    )
    .await;
    let stop = heartbeat.answering(shutdown);
    let accepting = async {
        let connections = accept_loop(
            &listener,
            http,
            intake,
            max_connections,
            signal.clone(),
            stop,
        )
        .await;
        drop(listener);
        trigger.fire();
        connections
    };
    let reloading = reloader.run(options.reload, signal.clone());
    let (connections, reloader) = tokio::join!(accepting, reloading);
    let admin_stopped = async {
        if let Some(admin) = admin {
            let _ = admin.await;
        }
    };
    tokio::join!(drain(connections), admin_stopped);
    reloader.worker.stop().await;
    reloader.pruner.stop().await;
    tokio::task::spawn_blocking(move || store.close())
        .await
        .ok();
    watchdog.stop().await;
    tracing::info!("stopped");
    Ok(())
}

fn connection_settings(server: &Server) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(server.header_timeout)
        .keep_alive(true);
    http
}

/// What answers the requests of one listener: the webhook [`Intake`] or the [`Admin`] endpoints.
/// `conn` is the connection the request came on (its peer address).
trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        req: Request<Incoming>,
        conn: ConnectionInfo,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send;
}

impl Handler for Intake {
    fn handle(
        &self,
        req: Request<Incoming>,
        conn: ConnectionInfo,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send {
        Intake::handle(self, req, conn)
    }
}

impl Handler for Admin {
    fn handle(
        &self,
        req: Request<Incoming>,
        _conn: ConnectionInfo,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send {
        Admin::handle(self, req)
    }
}

/// How long the accept loop waits for a slot after asking an idle connection to close, before
/// it asks the next one (the first may have begun a request and be finishing it).
const ROOM_RETRY: Duration = Duration::from_millis(50);

/// Accepts until `stop` resolves; returns the connection tasks still running.
///
/// At most `max_connections` are served at once. A connection arriving at the cap makes room:
/// the longest-idle connection (a kept-alive one between requests, or one that has sent
/// nothing yet) is asked to close ([`connections`]), and the new one is served as soon as it
/// has. A connection with a request under way is never closed for room; if every connection
/// is busy, the new one waits for a slot (and those behind it in the kernel's queue).
async fn accept_loop(
    listener: &TcpListener,
    http: watch::Receiver<http1::Builder>,
    handler: Arc<impl Handler>,
    max_connections: usize,
    signal: Shutdown,
    stop: impl Future<Output = ()>,
) -> JoinSet<()> {
    let permits = Arc::new(Semaphore::new(max_connections));
    let live = Arc::new(Live::default());
    let origin = Instant::now();
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::select! {
                _ = &mut stop => break,
                permit = make_room(&permits, &live) => match permit {
                    Some(permit) => permit,
                    None => break,
                },
            },
        };
        let _ = stream.set_nodelay(true);
        let http = http.borrow().clone();
        let handler = handler.clone();
        let mut signal = signal.clone();
        let registration = live.register(origin);
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let _permit = permit;
            let tracked = registration.tracked.clone();
            let conn = ConnectionInfo { peer };
            let in_service = tracked.clone();
            let service = service_fn(move |req| {
                let handler = handler.clone();
                let tracked = in_service.clone();
                async move {
                    tracked.begin();
                    let response = handler.handle(req, conn).await;
                    tracked.end();
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let io = Counted {
                inner: stream,
                tracked: tracked.clone(),
            };
            let conn = http.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => log_connection_end(result),
                _ = signal.fired() => {
                    // Finish the request in flight, then close instead of keeping alive.
                    conn.as_mut().graceful_shutdown();
                    log_connection_end(conn.await);
                }
                _ = tracked.close.notified() => {
                    tracing::debug!(%peer, "closing the longest-idle connection to make room");
                    // Idle: closed at once; a request that began meanwhile is answered first.
                    conn.as_mut().graceful_shutdown();
                    log_connection_end(conn.await);
                }
            }
            drop(registration);
        });
    }
    connections
}

/// At the cap: asks idle connections to close, longest-idle first, until a slot is free.
/// None only if the semaphore is closed (it never is).
async fn make_room(permits: &Arc<Semaphore>, live: &Live) -> Option<OwnedSemaphorePermit> {
    loop {
        live.close_longest_idle();
        match tokio::time::timeout(ROOM_RETRY, permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => return Some(permit),
            Ok(Err(_)) => return None,
            Err(_) => continue,
        }
    }
}

fn log_connection_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

async fn drain(mut connections: JoinSet<()>) {
    let all_done = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_GRACE, all_done).await.is_err() {
        tracing::warn!("requests still in flight after the grace period; closing them");
        connections.abort_all();
    }
}
