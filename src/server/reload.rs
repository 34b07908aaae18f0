//! Reloading the configuration while serving (SIGHUP in the binary, a [`ReloadTrigger`] in
//! tests): the file the server started with is read and validated again, exactly as
//! `portaria check` would. A file with problems is refused, every problem is logged, and the
//! configuration in force stays. A valid one is applied whole, in this order:
//!
//! - metrics: a new endpoint's series are created, a removed one's leave (`Metrics::configure`);
//! - the worker's lanes: targets, retry schedules, concurrency (`Worker::reconfigure`, which
//!   swaps lanes in the running worker and never re-queues an attempt still running);
//! - intake's endpoint table (paths, providers, secrets, dedup rules and windows) and body
//!   limits (`max_body_bytes`, `body_timeout_secs`, `min_body_bytes_per_sec`), swapped whole:
//!   a request in flight keeps the table it started with; `body_budget_bytes` for the next
//!   bytes taken (what requests hold stays held);
//! - `header_timeout_secs`, for connections accepted from now on;
//! - the TLS certificate, key and client CA (`[server] tls`), read again: new connections
//!   get the new certificate (a file that does not make one refuses the reload);
//! - retention (`retention_days`, `dead_retention_days`, `archive_dir`): a pass runs by the
//!   new values at once if they changed;
//! - the log level (`[log] level`; `RUST_LOG`, when set, still wins).
//!
//! What is fixed at start ([`fixed_settings`]: the listen addresses, bound before anything
//! else; HTTPS or plain HTTP on the webhook listener; the connection cap, a semaphore the
//! open connections hold; the database path; the canary's `public_url`, `canary_every` and
//! `canary_ca_file`), and so do `[alerts]` and the endpoints' `quiet_after` and
//! `unrouted_after` (the alerts task takes them at start), keep their old values, and the log
//! says that they need a restart. Reloads are served in `serve`'s own task, joined with the
//! accept loops. Queued events live in the database, not in the configuration: no reload
//! changes their state, and `Store::recover` runs only at start-up.
//!
//! Secrets read from environment variables (`secret_env`, `url_env`, `token_env`) are read
//! again too, but from the environment the process started with: the binary took the ones its
//! config named out of its environment at start (`crate::hardening`) and reads them from what
//! it kept then (`config::EnvAtStart`), so rotating one of those needs a restart; a
//! `secret_file` or an inline secret is re-read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot, watch};

use crate::config::{Config, Endpoint, EnvAtStart, Secrets, Server, Source, Storage};
use crate::forward::Worker;
use crate::ingest::Intake;
use crate::metrics::{Metrics, Series};
use crate::notify::Notifier;
use crate::prune::Pruner;
use crate::shutdown::Shutdown;

/// Reload requests queued at most; more SIGHUPs while they wait change nothing, since each
/// reload reads the file as it is then.
const QUEUED: usize = 4;

/// Sets the log filter to a `[log] level` (already validated); the binary's comes from its
/// logging set-up.
pub type SetLogLevel = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// One reload request, with where to say how it went (None: nobody asks, as for SIGHUP).
type Request = Option<oneshot::Sender<Reloaded>>;

/// Asks a running server to reload its configuration.
#[derive(Debug, Clone)]
pub struct ReloadTrigger(mpsc::Sender<Request>);

/// The server's end of the reload requests: [`crate::server::Options::reload`].
#[derive(Debug)]
pub struct ReloadRequests(mpsc::Receiver<Request>);

/// A trigger and the requests it sends.
pub fn channel() -> (ReloadTrigger, ReloadRequests) {
    let (tx, rx) = mpsc::channel(QUEUED);
    (ReloadTrigger(tx), ReloadRequests(rx))
}

impl ReloadTrigger {
    /// Asks for a reload and does not wait for it (what SIGHUP does).
    pub fn request(&self) {
        // Full: reloads are queued already, and the last of them reads the file as it is now.
        let _ = self.0.try_send(None);
    }

    /// Reloads and says how it went; None if the server has stopped.
    pub async fn reload(&self) -> Option<Reloaded> {
        let (tx, rx) = oneshot::channel();
        self.0.send(Some(tx)).await.ok()?;
        rx.await.ok()
    }
}

/// How a reload went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The new configuration is in force, except the settings listed, which need a restart
    /// and kept their old values (each a sentence naming the key, the old and new value).
    Applied { restart_needed: Vec<String> },
    /// Nothing changed. Every problem, one line each, as `portaria check` prints it.
    Refused { problems: Vec<String> },
}

/// What a reload replaces, and the settings in force to compare the next file with.
pub(super) struct Reloader {
    /// Tells systemd `RELOADING=1`, then `READY=1`, around each reload.
    pub notifier: Arc<Notifier>,
    /// The endpoints in force, for the status line systemd shows.
    pub endpoint_count: Arc<AtomicUsize>,
    pub source: Source,
    pub server: Server,
    pub storage: Storage,
    pub log_level: String,
    pub intake: Arc<Intake>,
    /// The body limit `/readyz` sizes its free-space check by.
    pub max_body_bytes: Arc<AtomicUsize>,
    pub worker: Worker,
    pub pruner: Pruner,
    pub metrics: Arc<Metrics>,
    /// The accept loops' connection settings (the header timeout).
    pub http: watch::Sender<super::ConnectionSettings>,
    pub set_log_level: Option<SetLogLevel>,
    /// What the binary took out of its environment at start, for the secrets' variables.
    pub env_at_start: EnvAtStart,
    /// [`crate::alerts::settings_at_start`] of the config the alerts task started with.
    pub alert_settings: String,
    /// The webhook listener's certificate (`[server] tls`); None: plain HTTP.
    pub certificates: Option<Arc<super::Certificates>>,
}

impl Reloader {
    /// Serves reload requests until shutdown, then hands itself back so that the server can
    /// stop the worker and the pruner.
    pub async fn run(mut self, requests: Option<ReloadRequests>, mut shutdown: Shutdown) -> Self {
        let Some(ReloadRequests(mut requests)) = requests else {
            shutdown.fired().await;
            return self;
        };
        loop {
            let request = tokio::select! {
                _ = shutdown.fired() => return self,
                request = requests.recv() => request,
            };
            let Some(reply) = request else {
                // Every trigger is gone: no more reloads, but keep serving.
                shutdown.fired().await;
                return self;
            };
            // MONOTONIC_USEC= is what `Type=notify-reload` (systemd >= 253) wants with it.
            self.notifier.send(&format!(
                "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the configuration",
                monotonic_usec()
            ));
            let outcome = self.reload().await;
            let status = match &outcome {
                Reloaded::Applied { .. } => format!(
                    "configuration reloaded: serving {} endpoints",
                    self.endpoint_count.load(Ordering::Relaxed)
                ),
                Reloaded::Refused { problems } => format!(
                    "reload refused ({} problem(s), see the log): the previous configuration \
                     still serves",
                    problems.len()
                ),
            };
            self.notifier.ready(&status);
            if let Some(reply) = reply {
                let _ = reply.send(outcome);
            }
        }
    }

    async fn reload(&mut self) -> Reloaded {
        let Source::File(path) = &self.source else {
            let problem = "no config file to re-read: portaria started with the embedded demo \
                           config; restart it with --config FILE"
                .to_string();
            tracing::error!("reload refused: {problem}");
            return Reloaded::Refused {
                problems: vec![problem],
            };
        };
        tracing::info!(config = %self.source, "reloading the configuration");
        let path = path.clone();
        let env = self.env_at_start.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            Config::load_keeping(Some(&path), Secrets::Load, &env)
        })
        .await;
        let config = match loaded {
            Ok(Ok(config)) => config,
            Ok(Err(e)) => {
                let problems: Vec<String> = e.to_string().lines().map(str::to_string).collect();
                tracing::error!(
                    config = %self.source,
                    problems = problems.len(),
                    "reload refused: the configuration has problems (below); the running \
                     configuration stays in force"
                );
                for problem in &problems {
                    tracing::error!("{problem}");
                }
                return Reloaded::Refused { problems };
            }
            Err(e) => {
                let problem = format!("reading the configuration panicked: {e}");
                tracing::error!("reload refused: {problem}");
                return Reloaded::Refused {
                    problems: vec![problem],
                };
            }
        };
        for warning in &config.warnings {
            tracing::warn!("{}: {warning}", config.source);
        }
        let restart_needed = self.apply(config).await;
        for change in &restart_needed {
            tracing::warn!("{}: {change}", self.source);
        }
        Reloaded::Applied { restart_needed }
    }

    /// Puts a valid configuration in force, except its [`fixed_settings`], which keep their
    /// values; returns what those would have changed.
    async fn apply(&mut self, mut config: Config) -> Vec<String> {
        let restart_needed = fixed_settings(&self.server, &self.storage, &config);
        config.server.listen = self.server.listen;
        config.server.admin_listen = self.server.admin_listen;
        config.server.max_connections = self.server.max_connections;
        config.server.canary = self.server.canary.clone();
        config.storage.path = self.storage.path.clone();
        config.storage.postgres = self.storage.postgres.clone();
        // HTTPS or not is the listener's, fixed at start; the certificate itself is reloaded.
        match (&self.certificates, &config.server.tls) {
            (Some(certificates), Some(tls)) => certificates.replace(tls),
            _ => config.server.tls = self.server.tls.clone(),
        }

        let endpoints: Vec<Arc<Endpoint>> = config.endpoints.into_iter().map(Arc::new).collect();
        let mut restart_needed = restart_needed;
        if crate::alerts::settings_at_start(config.alerts.as_ref(), &endpoints)
            != self.alert_settings
        {
            restart_needed.push(
                "[alerts] or an endpoint's quiet_after changed (or, with [alerts], its \
                 unrouted_after or whether it forwards), which needs a restart (the alerts task \
                 takes them at start); the old ones stay in force until then"
                    .to_string(),
            );
        }
        // Series first, so the first request to a new endpoint is counted in its own.
        let routes = super::route_names(&endpoints);
        self.metrics
            .configure(endpoints.iter().zip(&routes).map(|(e, routes)| Series {
                endpoint: &e.name,
                routes,
            }));
        if let Err(e) = self
            .worker
            .reconfigure(
                &endpoints,
                &crate::forward::command::hidden_variables(&config.secret_variables),
            )
            .await
        {
            // The lanes are in place already; only the check for stranded events failed.
            tracing::warn!(error = %e, "cannot check for events waiting without a forward target");
        }
        self.intake.replace(&endpoints, &config.server);
        self.endpoint_count
            .store(endpoints.len(), Ordering::Relaxed);
        self.max_body_bytes
            .store(config.server.max_body_bytes, Ordering::Relaxed);
        self.http
            .send_replace(super::connection_settings(&config.server));
        self.pruner.set_storage(config.storage.clone());
        self.pruner.set_kept_for(crate::prune::kept_for(&endpoints));
        if config.log.level != self.log_level
            && let Some(set) = &self.set_log_level
        {
            match set(&config.log.level) {
                Ok(()) => self.log_level = config.log.level.clone(),
                Err(e) => tracing::error!(error = %e, "cannot change the log level"),
            }
        }
        self.server = config.server;
        self.storage = config.storage;
        tracing::info!(
            config = %self.source,
            endpoints = endpoints.len(),
            forwarding = endpoints.iter().filter(|e| e.forwards()).count(),
            "configuration reloaded"
        );
        restart_needed
    }
}

/// The settings of `new` that differ from those in force but cannot change while serving,
/// each as a sentence for the log.
pub fn fixed_settings(server: &Server, storage: &Storage, new: &Config) -> Vec<String> {
    let off =
        |a: Option<std::net::SocketAddr>| a.map_or_else(|| "off".to_string(), |a| a.to_string());
    let mut changed = Vec::new();
    let mut check = |key: &str, old: String, new: String, why: &str| {
        if old != new {
            changed.push(format!(
                "{key} changed from {old} to {new}, which needs a restart ({why}); \
                 {old} stays in force until then"
            ));
        }
    };
    check(
        "server.listen",
        server.listen.to_string(),
        new.server.listen.to_string(),
        "the socket is bound at start",
    );
    check(
        "server.admin_listen",
        off(server.admin_listen),
        off(new.server.admin_listen),
        "the socket is bound at start",
    );
    check(
        "server.max_connections",
        server.max_connections.to_string(),
        new.server.max_connections.to_string(),
        "open connections hold the slots",
    );
    let canary = |c: &Option<crate::config::Canary>| {
        c.as_ref().map_or_else(
            || "off".to_string(),
            |c| {
                let ca = c
                    .ca_file
                    .as_ref()
                    .map_or_else(String::new, |f| format!(" (CA {})", f.display()));
                format!("{} every {:?}{ca}", c.public_url, c.every)
            },
        )
    };
    check(
        "server.public_url (the canary)",
        canary(&server.canary),
        canary(&new.server.canary),
        "the canary's task takes it at start",
    );
    let scheme = |tls: bool| if tls { "tls" } else { "no tls" }.to_string();
    check(
        "server.tls",
        scheme(server.tls.is_some()),
        scheme(new.server.tls.is_some()),
        "the listener speaks HTTPS or HTTP from its start",
    );
    check(
        "storage.path",
        storage.path.display().to_string(),
        new.storage.path.display().to_string(),
        "the database is opened at start",
    );
    // Never the URL itself in the message: it may hold a password.
    let (was, now) = match (&storage.postgres, &new.storage.postgres) {
        (None, None) => ("none", "none"),
        (Some(a), Some(b)) if a == b => ("unchanged", "unchanged"),
        (Some(a), Some(b)) if a.tls != b.tls => {
            ("its TLS settings (sslmode, CA) at start", "other ones")
        }
        (Some(_), Some(_)) => ("the URL at start", "another URL"),
        (Some(_), None) => ("a PostgreSQL URL", "none"),
        (None, Some(_)) => ("none", "a PostgreSQL URL"),
    };
    check(
        "storage.url",
        was.to_string(),
        now.to_string(),
        "the database is opened at start",
    );
    changed
}

/// CLOCK_MONOTONIC in microseconds, as systemd reads `MONOTONIC_USEC=`.
fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let done = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if done != 0 {
        return 0;
    }
    (now.tv_sec as u64) * 1_000_000 + (now.tv_nsec as u64) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        let source = Source::File("/srv/portaria/portaria.toml".into());
        Config::parse(text, source).expect("valid")
    }

    const BASE: &str = "[server]\nlisten = \"127.0.0.1:8080\"\nadmin_listen = \"127.0.0.1:9464\"\n\
                        max_connections = 10\nmax_body_bytes = 100\n[storage]\npath = \"a.db\"\n\
                        [[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret = \"s\"\n";

    #[test]
    fn only_what_is_fixed_at_start_needs_a_restart() {
        let old = parse(BASE);
        let same = parse(&BASE.replace("max_body_bytes = 100", "max_body_bytes = 200"));
        assert!(fixed_settings(&old.server, &old.storage, &same).is_empty());

        let moved = parse(
            &BASE
                .replace("127.0.0.1:8080", "127.0.0.1:8081")
                .replace("\"127.0.0.1:9464\"", "\"off\"")
                .replace("max_connections = 10", "max_connections = 20")
                .replace("a.db", "b.db"),
        );
        let changed = fixed_settings(&old.server, &old.storage, &moved);
        assert_eq!(changed.len(), 4, "{changed:#?}");
        assert!(changed[0].starts_with(
            "server.listen changed from 127.0.0.1:8080 to 127.0.0.1:8081, which needs a restart"
        ));
        assert!(
            changed[1].contains("from 127.0.0.1:9464 to off"),
            "{}",
            changed[1]
        );
        assert!(changed[2].contains("from 10 to 20"), "{}", changed[2]);
        assert!(changed[3].contains("/srv/portaria/b.db"), "{}", changed[3]);
        assert!(changed.iter().all(|c| c.contains("stays in force")));
    }

    #[test]
    fn another_database_ca_needs_a_restart_and_no_message_quotes_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let ca = |name: &str| {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let cert = params
                .self_signed(&rcgen::KeyPair::generate().unwrap())
                .unwrap();
            let path = dir.path().join(name);
            std::fs::write(&path, cert.pem()).unwrap();
            path.display().to_string()
        };
        let (a, b) = (ca("a.pem"), ca("b.pem"));
        let on = |ca: &str, mode: &str| {
            parse(&BASE.replace(
                "path = \"a.db\"",
                &format!("url = \"postgres://u@db.lan/d?sslmode={mode}\"\nca_file = \"{ca}\""),
            ))
        };
        let old = on(&a, "verify-full");
        assert!(fixed_settings(&old.server, &old.storage, &on(&a, "verify-full")).is_empty());
        for new in [on(&b, "verify-full"), on(&a, "verify-ca")] {
            let changed = fixed_settings(&old.server, &old.storage, &new);
            assert_eq!(changed.len(), 1, "{changed:#?}");
            assert!(
                changed[0].starts_with("storage.url changed from its TLS settings"),
                "{}",
                changed[0]
            );
            assert!(!changed[0].contains("db.lan"), "{}", changed[0]);
        }
    }
}
