//! The server, the one composition root: opens the store, builds the endpoint list once (for
//! intake, the worker and metrics), starts the forwarding worker, the pruner and the alerts
//! task (and, with `public_url`, the canary: its `ProbeKey` given to intake, its `PublicPath`
//! to the alerts task and the status page, the system's root certificates read then; and the
//! reconcile schedule of the endpoints with an `every`),
//! accepts connections (an accept queue of 4096; at most `max_connections` at once, the
//! longest-idle closed to make room at the cap, else a stalled head or the slowest body cut:
//! `accept`, `connections`; hyper's http1 with the header deadline and a 64 KiB read buffer),
//! hands each request to [`Intake`], and on shutdown stops accepting, lets requests in flight
//! finish, stops the worker, the pruner and the alerts task at a safe point and closes the
//! database.
//!
//! A second listener, `[server] admin_listen`, answers `/healthz`, `/readyz`, `/metrics` and
//! the status page ([`Admin`]) with the same accept loop (the `Handler` is the only
//! difference), a small connection cap of its own, and the same shutdown, drained before the
//! store closes. [`Listeners::bind`] binds both before anything is opened or started, so a
//! busy port is a clear start-up error.
//!
//! [`serve_with`] also takes reload requests ([`Options::reload`]): `reload` re-reads the
//! config file and swaps what can change while serving.
//!
//! With `[server] tls`, the webhook listener speaks HTTPS only: each connection's handshake
//! (`tls`) comes first, under the header deadline, and the client certificate it verified
//! travels with the connection's [`ConnectionInfo`]. The admin listener stays plain.

mod accept;
mod connections;
mod reload;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::admin::Admin;
use crate::alerts::Alerts;
use crate::canary::{self, Canary, ProbeKey};
use crate::config::{Config, Endpoint, EnvAtStart};
use crate::forward::Worker;
use crate::ingest::Intake;
use crate::metrics::{Metrics, Series};
use crate::notify::{self, Notifier};
use crate::outbound::Roots;
use crate::prune::Pruner;
use crate::public_path::PublicPath;
use crate::shutdown;
use crate::status::StatusPage;
use crate::store::{Store, StoreError};
use crate::watchdog::{self, Watchdog};

use accept::{ConnectionSettings, Limits, accept_loop, connection_settings};
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

/// Why [`serve`] did not start, or stopped: the store's errors, and what is not the store's.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `[server] tls` names a certificate or key that cannot be used.
    #[error("not started: server.tls: {0}")]
    Tls(String),
    /// Opening the database panicked (on its blocking thread).
    #[error("opening the database panicked: {0}")]
    OpenPanicked(String),
    /// The status page could not seed its session tokens.
    #[error("the status page has no random source: {0}")]
    NoRandom(std::io::Error),
    /// The canary (`[server] public_url`) could not make its key or its client.
    #[error("the canary cannot start: {0}")]
    Canary(String),
}

/// Serves webhooks (and the admin endpoints, given an admin listener) on already-bound
/// listeners until `shutdown` resolves, then drains and closes everything. Tests bind
/// `127.0.0.1:0` and call this directly; a bare `TcpListener` means no admin listener.
pub async fn serve(
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    serve_with(config, listeners, shutdown, Options::default()).await
}

/// [`serve`], with reloads and the like ([`Options`]).
pub async fn serve_with(
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()>,
    options: Options,
) -> Result<(), ServeError> {
    let Listeners {
        webhooks: listener,
        admin: admin_listener,
    } = listeners.into();
    // Before the store opens: a certificate that cannot be used stops the start.
    let certificates = match &config.server.tls {
        Some(tls) => Some(Certificates::new(tls).map_err(|why| {
            tracing::error!("cannot serve HTTPS: {why}");
            ServeError::Tls(why.to_string())
        })?),
        None => None,
    };
    let store = match &config.storage.postgres {
        Some(url) => Store::open_postgres(url.settings(), url.tls_client()).await?,
        None => {
            let path = config.storage.path.clone();
            tokio::task::spawn_blocking(move || Store::open(&path))
                .await
                .map_err(|e| ServeError::OpenPanicked(e.to_string()))??
        }
    };

    let (trigger, signal) = shutdown::channel();
    let new_event = Arc::new(Notify::new());
    let max_connections = config.server.max_connections;
    // What clients can make portaria hold, and the memory the defaults were derived from.
    tracing::info!(
        max_connections,
        body_budget_bytes = config.server.body_budget_bytes,
        max_body_bytes = config.server.max_body_bytes,
        memory = %config.server.memory,
        "limits"
    );
    // A reload sends new settings; each connection takes the latest when it is accepted.
    let (http_settings, http) = watch::channel(connection_settings(&config.server));
    // The one list of endpoints: intake routes by it, the worker makes a lane of each that
    // forwards, metrics creates their series.
    let endpoints: Vec<Arc<Endpoint>> = config.endpoints.into_iter().map(Arc::new).collect();
    let routes = route_names(&endpoints);
    let mut metrics = Metrics::new(endpoints.iter().zip(&routes).map(|(e, routes)| Series {
        endpoint: &e.name,
        routes,
    }));
    metrics.reconcile_on(
        endpoints
            .iter()
            .filter(|e| e.reconcile.is_some())
            .map(|e| e.name.clone())
            .collect(),
    );
    // The canary: intake answers its probes with this process's key, the task sends them.
    let probes = match &config.server.canary {
        Some(settings) => {
            let key = ProbeKey::random()
                .map_err(|e| ServeError::Canary(format!("no random source for its key: {e}")))?;
            metrics.canary_on(&canary::CAUSES);
            Some((
                settings.clone(),
                Arc::new(key),
                PublicPath::new(&settings.public_url),
            ))
        }
        None => None,
    };
    let public_path = probes.as_ref().map(|(_, _, path)| path.clone());
    let metrics = Arc::new(metrics);
    let mut intake = Intake::new(
        &endpoints,
        &config.server,
        store.clone(),
        new_event.clone(),
        metrics.clone(),
    );
    if let Some((_, key, _)) = &probes {
        intake = intake.with_canary(key.clone());
    }
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
    let kept_for = crate::prune::kept_for(&endpoints);
    let pruner = Pruner::start(
        config.storage.clone(),
        kept_for,
        store.clone(),
        signal.clone(),
    );
    let alert_settings = crate::alerts::settings_at_start(config.alerts.as_ref(), &endpoints);
    let alerts = config.alerts.as_ref().map(|settings| {
        Alerts::start(
            settings,
            &endpoints,
            hidden_env.clone(),
            store.clone(),
            metrics.clone(),
            public_path.clone(),
            signal.clone(),
        )
    });
    let canary = match probes {
        Some((settings, key, path)) => Some(start_canary(&settings, key, path, &metrics, &signal)?),
        None => None,
    };
    let reconciling = crate::reconcile::Schedule::start(
        &endpoints,
        store.clone(),
        new_event.clone(),
        signal.clone(),
    );
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
            .map_err(ServeError::NoRandom)?
            .with_public_path(public_path.clone(), patience_of(&endpoints))
            .with_carries(
                endpoints
                    .iter()
                    .map(|e| (e.name.clone(), e.verifier.carries()))
                    .collect(),
            )
            .with_routes(
                endpoints
                    .iter()
                    .flat_map(|e| e.routes.iter().map(|r| (e.name.clone(), r.name.clone())))
                    .collect(),
            ),
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
    if let Some(canary) = canary {
        canary.stop().await;
    }
    if let Some(reconciling) = reconciling {
        reconciling.stop().await;
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

/// Starts the canary, trusting the system's root certificates, read now.
fn start_canary(
    settings: &crate::config::Canary,
    key: Arc<ProbeKey>,
    path: PublicPath,
    metrics: &Arc<Metrics>,
    signal: &shutdown::Shutdown,
) -> Result<Canary, ServeError> {
    let roots = Roots::system();
    for problem in &roots.problems {
        tracing::warn!(error = %problem, "canary: a system root certificate could not be read");
    }
    if roots.from_system == 0 && settings.extra_roots.is_empty() {
        tracing::warn!(
            "canary: no system root certificates found (install the ca-certificates package); \
             every probe over https will fail"
        );
    }
    tracing::info!(
        url = %settings.probe_url,
        every = ?settings.every,
        system_roots = roots.from_system,
        "canary: probing the public path"
    );
    Canary::start(settings, roots, key, path, metrics.clone(), signal.clone())
        .map_err(ServeError::Canary)
}

/// Each endpoint's gateway's give-up rule, for the status page's banner.
fn patience_of(endpoints: &[Arc<Endpoint>]) -> Vec<(String, crate::verify::Patience)> {
    endpoints
        .iter()
        .map(|e| (e.name.clone(), e.verifier.patience()))
        .collect()
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
