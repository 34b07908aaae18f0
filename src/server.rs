//! The server: opens the store, starts the forwarding worker, accepts connections (at most
//! `max_connections` at once, the longest-idle closed to make room at the cap, each with
//! header and body deadlines), hands each request to
//! [`Intake`], and on shutdown stops accepting, lets requests in flight finish, stops the
//! worker, the pruner and the alerts task at a safe point and closes the database.
//!
//! A second listener, `[server] admin_listen`, answers `/healthz`, `/readyz`, `/metrics` and
//! the status page
//! ([`Admin`]) with the same connection handling and shutdown. [`Listeners::bind`] binds both
//! before anything is opened or started, so a busy port is a clear start-up error.
//!
//! [`serve_with`] also takes reload requests ([`Options::reload`]): `reload` re-reads the
//! config file and swaps what can change while serving.
//!
//! With `[server] tls`, the webhook listener speaks HTTPS only: each connection's handshake
//! (`tls`) comes first, under the header deadline, and the client certificate it verified
//! travels with the connection's [`ConnectionInfo`]. The admin listener stays plain.

mod connections;
mod reload;
mod tls;

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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::admin::Admin;
use crate::alerts::Alerts;
use crate::client_ip::ConnectionInfo;
use crate::config::{Config, Endpoint, EnvAtStart, Server};
use crate::forward::Worker;
use crate::ingest::Intake;
use crate::metrics::{Metrics, Series};
use crate::notify::{self, Notifier};
use crate::prune::Pruner;
use crate::shutdown::{self, Shutdown};
use crate::status::StatusPage;
use crate::store::{Store, StoreError};
use crate::watchdog::{self, Watchdog};

use connections::{Counted, Live, Registration};
use tls::Certificates;

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
    /// The secrets' variables the binary took out of its environment at start: a reload
    /// reads them from here (`config::EnvAtStart`).
    pub env_at_start: EnvAtStart,
}

// The alerts count slow deliveries by the line the worker logs them by.
const _: () =
    assert!(crate::forward::SLOW_DELIVERY.as_millis() == crate::metrics::SLOW_DELIVERY.as_millis());

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
            listen(addr).map_err(|source| BindError { addr, key, source })
        };
        let webhooks = bind(server.listen, "listen").await?;
        let admin = match server.admin_listen {
            Some(addr) => Some(bind(addr, "admin_listen").await?),
            None => None,
        };
        Ok(Listeners { webhooks, admin })
    }
}

/// Connections the kernel may hold for `accept` (capped by `net.core.somaxconn`). Past the
/// queue, a client's SYN is dropped and its connect waits a second for the retry: with std's
/// 128, a burst of a few hundred connections (idle ones at the cap included) held webhooks up
/// by seconds.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` as std does (`SO_REUSEADDR`), with a deeper accept queue.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
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
    // Before the store opens: a certificate that cannot be used stops the start.
    let certificates = match &config.server.tls {
        Some(tls) => Some(Certificates::new(tls).map_err(|why| {
            tracing::error!("cannot serve HTTPS: {why}");
            StoreError::Sqlite(format!("not started: server.tls: {why}"))
        })?),
        None => None,
    };
    let store = match &config.storage.postgres {
        Some(url) => Store::open_postgres(url.settings(), url.tls_client()).await?,
        None => {
            let path = config.storage.path.clone();
            tokio::task::spawn_blocking(move || Store::open(&path))
                .await
                .map_err(|e| StoreError::Sqlite(format!("opening the database panicked: {e}")))??
        }
    };

    let (trigger, signal) = shutdown::channel();
    let new_event = Arc::new(Notify::new());
    let max_connections = config.server.max_connections;
    // A reload sends new settings; each connection takes the latest when it is accepted.
    let (http_settings, http) = watch::channel(connection_settings(&config.server));
    // The one list of endpoints: intake routes by it, the worker makes a lane of each that
    // forwards, metrics creates their series.
    let endpoints: Vec<Arc<Endpoint>> = config.endpoints.into_iter().map(Arc::new).collect();
    let routes = route_names(&endpoints);
    let metrics = Arc::new(Metrics::new(endpoints.iter().zip(&routes).map(
        |(e, routes)| Series {
            endpoint: &e.name,
            routes,
        },
    )));
    let intake = Intake::new(
        &endpoints,
        &config.server,
        store.clone(),
        new_event.clone(),
        metrics.clone(),
    );
    let hidden_env = crate::forward::command::hidden_variables(&config.secret_variables);
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
    let alert_settings = crate::alerts::settings_at_start(config.alerts.as_ref(), &endpoints);
    let alerts = config.alerts.as_ref().map(|settings| {
        Alerts::start(
            settings,
            &endpoints,
            hidden_env.clone(),
            store.clone(),
            metrics.clone(),
            signal.clone(),
        )
    });
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
        env_at_start: options.env_at_start,
        alert_settings,
        certificates: certificates.clone(),
    };
    let watching = certificates
        .clone()
        .map(|c| tokio::spawn(c.watch(signal.clone())));

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
            let (mut stop, mut log_stop) = (signal.clone(), signal.clone());
            let stop = async move { stop.fired().await };
            let limits = Limits {
                max_connections: ADMIN_MAX_CONNECTIONS,
                tls: None,
            };
            let accepting = accept_loop(&listener, http, admin.clone(), limits, signal, stop);
            // The status page's wrong-token summaries, beside the connections, to the end.
            let logging = admin.log_wrong_tokens(async move { log_stop.fired().await });
            let (connections, ()) = tokio::join!(accepting, logging);
            drop(listener);
            drain(connections).await;
        })
    });

    if let Ok(addr) = listener.local_addr() {
        // One line with both addresses; tests read `addr=` from it.
        let admin = admin_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
        let scheme = if certificates.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(%addr, %admin, scheme, "listening");
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
        let limits = Limits {
            max_connections,
            tls: certificates,
        };
        let connections = accept_loop(&listener, http, intake, limits, signal.clone(), stop).await;
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
    if let Some(alerts) = alerts {
        alerts.stop().await;
    }
    if let Some(watching) = watching {
        let _ = watching.await;
    }
    tokio::task::spawn_blocking(move || store.close())
        .await
        .ok();
    watchdog.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// What each new connection is served with; a reload sends new ones.
#[derive(Clone)]
struct ConnectionSettings {
    http: http1::Builder,
    /// The TLS handshake's deadline: the header timeout, so a client that opens a connection
    /// and says nothing holds its slot no longer on HTTPS than on HTTP.
    handshake: Duration,
}

fn connection_settings(server: &Server) -> ConnectionSettings {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(server.header_timeout)
        .keep_alive(true);
    ConnectionSettings {
        http,
        handshake: server.header_timeout,
    }
}

/// How one listener's connections are bounded and wrapped.
struct Limits {
    max_connections: usize,
    /// HTTPS: the handshake comes first. None: plain HTTP.
    tls: Option<Arc<Certificates>>,
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
/// nothing yet; idle for at least [`connections::IDLE_GRACE`]) is asked to close
/// ([`connections`]), and the new one is served as soon as it has. With none idle, the connection whose request head has been arriving the longest, past
/// [`connections::SLOW_HEAD`], is cut instead. A request that reached the handler is never
/// closed for room; if every connection is busy so, or with a young head, the new one waits
/// for a slot (and those behind it in the kernel's queue).
async fn accept_loop(
    listener: &TcpListener,
    settings: watch::Receiver<ConnectionSettings>,
    handler: Arc<impl Handler>,
    limits: Limits,
    signal: Shutdown,
    stop: impl Future<Output = ()>,
) -> JoinSet<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let live = Arc::new(Live::new(connections::IDLE_GRACE, connections::SLOW_HEAD));
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
        let settings = settings.borrow().clone();
        let handler = handler.clone();
        let signal = signal.clone();
        let tls = limits.tls.clone();
        let registration = live.register(origin);
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let _permit = permit;
            let tracked = registration.tracked.clone();
            let stream = Counted {
                inner: stream,
                tracked: tracked.clone(),
            };
            let Some(certificates) = tls else {
                let conn = ConnectionInfo::plain(peer);
                serve_connection(stream, conn, &settings, handler, &registration, signal).await;
                return;
            };
            // The handshake, unless the connection is asked to make room first (it has sent
            // nothing yet, or has been closed for room after a handshake that never came).
            let handshake = certificates.handshake(stream, settings.handshake);
            let close = registration.tracked.close.notified();
            let (stream, client_cert) = tokio::select! {
                done = handshake => match done {
                    Ok(done) => done,
                    Err(why) => {
                        tracing::debug!(%peer, "{why}");
                        return;
                    }
                },
                _ = close => return,
            };
            tracked.settled();
            let conn = ConnectionInfo {
                peer,
                client_cert: client_cert.map(Arc::new),
            };
            serve_connection(stream, conn, &settings, handler, &registration, signal).await;
        });
    }
    connections
}

/// Serves the requests of one connection (after its TLS handshake, on HTTPS) until it
/// closes, shutdown drains it, or it is asked to make room while idle. `stream` counts its
/// reads into `registration` (wrapped in [`Counted`], under TLS if any).
async fn serve_connection<S>(
    stream: S,
    conn: ConnectionInfo,
    settings: &ConnectionSettings,
    handler: Arc<impl Handler>,
    registration: &Registration,
    mut signal: Shutdown,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = conn.peer;
    let tracked = registration.tracked.clone();
    let in_service = tracked.clone();
    let service = service_fn(move |req| {
        let handler = handler.clone();
        let tracked = in_service.clone();
        let conn = conn.clone();
        async move {
            tracked.begin();
            let response = handler.handle(req, conn).await;
            tracked.end();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let conn = settings
        .http
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => log_connection_end(result),
        _ = signal.fired() => {
            // Finish the request in flight, then close instead of keeping alive.
            conn.as_mut().graceful_shutdown();
            log_connection_end(conn.await);
        }
        _ = tracked.close.notified() => {
            if tracked.is_to_be_cut() {
                // A head arriving for over SLOW_HEAD: dropped (hyper would wait for it).
                tracing::debug!(%peer, "cutting a stalled request head to make room");
            } else {
                tracing::debug!(%peer, "closing the longest-idle connection to make room");
                // Idle: closed at once; a request that began meanwhile is answered first.
                conn.as_mut().graceful_shutdown();
                log_connection_end(conn.await);
            }
        }
    }
}

/// At the cap: asks idle connections to close, longest-idle first, until a slot is free.
/// None only if the semaphore is closed (it never is).
async fn make_room(permits: &Arc<Semaphore>, live: &Live) -> Option<OwnedSemaphorePermit> {
    loop {
        live.close_one();
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

/// Each endpoint's route names, in order, for its metrics series.
fn route_names(endpoints: &[Arc<Endpoint>]) -> Vec<Vec<&str>> {
    endpoints
        .iter()
        .map(|e| e.routes.iter().map(|r| r.name.as_str()).collect())
        .collect()
}
