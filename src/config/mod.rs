//! Configuration: where the one TOML file is found, and how its raw text becomes a validated
//! [`Config`] with decoded secrets, parsed durations and absolute paths.
//!
//! Bad configuration never half-starts: every problem is collected and reported as
//! `file: key: why` (with the line of the `[[endpoint]]` table it sits in), and nothing is
//! served until all of them are fixed.
//!
//! Lookup order (first hit wins; see [`locate`]):
//! 1. `--config FILE`, or else `$PORTARIA_CONFIG`;
//! 2. `portaria.toml` in the current directory (where `portaria init` writes by default, so
//!    that a plain `check` or `serve` in that folder uses what `init` wrote);
//! 3. `portaria.toml` in the user's config dir (`~/.config/portaria/` on Linux);
//! 4. `/etc/portaria/portaria.toml`;
//! 5. the embedded demo config (`config.example.toml`), with a loud warning.
//!
//! This file owns the validated model (`Config`, `Endpoint`, `Forward`, `Target`, ...),
//! loading (how far a load reads: every secret, none for the commands that only work on the
//! database, or one endpoint's for `send`/`verify`; and how far it looks at the machine) and
//! lookup, and the reserved label [`UNKNOWN_ENDPOINT`]. The raw file as written is in `raw`,
//! read by `keys` (every unknown key and refused value reported, the rest still read), the
//! checks that turn it into the model in `validate` (`Validator`), and the TOML error
//! messages (which never echo a secret) in `toml_error`. Each concern has its file: `route`,
//! `event_fields` (`event_type`, `object_id`), `secrets`, `public_keys`, `dedup_window`,
//! `real_ip` and `ip_range`, `memory`, `tls`, `database` and `database_tls`, `canary`,
//! `reconcile`, `alerts`, `status`, `environment`, `readiness`. A `secret_file` may name a systemd
//! credential (`credential:NAME`): `credentials`.

mod alerts;
mod canary;
mod credentials;
mod database;
mod database_tls;
mod dedup_window;
mod environment;
mod event_fields;
mod ip_range;
mod keys;
mod memory;
mod public_keys;
mod quarantine;
mod raw;
mod readiness;
mod real_ip;
mod reconcile;
mod route;
mod secrets;
mod status;
mod tls;
mod toml_error;
mod validate;
mod validator;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dedup::DedupRule;
/// A gateway's give-up rule, as the alerts task reads it from an endpoint's verifier.
pub use crate::verify::Patience;
use crate::verify::{Secret, Verifier};

pub use alerts::{Alerts, DEFAULT_ALERT_EVERY, DEFAULT_ALERT_TIMEOUT};
pub use canary::{CANARY_PATH, Canary, DEFAULT_CANARY_EVERY};
/// The variable systemd names the service's credentials directory by (`credential:NAME`).
pub use credentials::VARIABLE as CREDENTIALS_DIRECTORY;
pub use database::DatabaseUrl;
pub use database_tls::{DatabaseTls, SslMode};
pub use dedup_window::default_dedup_window;
pub use environment::EnvAtStart;
pub use event_fields::EXPORT_COLUMNS;
pub use ip_range::IpRange;
pub use memory::{Limits, Memory, MemorySource};
pub use quarantine::{DEFAULT_QUARANTINE_FOR, DEFAULT_QUARANTINE_KEEP, Quarantine};
pub use real_ip::{RealIp, RealIpHeader};
pub use reconcile::{DEFAULT_RECONCILE_WINDOW, Reconcile};
pub use route::{EventGlob, OrderBy, Route, SHORTHAND_ROUTE, headers_from_blob};
pub use tls::{ClientCertRule, Tls, TlsFiles};
pub use validate::parse_duration;
use validator::{Machine, Validator};

/// The embedded default: a loopback-only demo with example secrets, `config.example.toml`
/// without its comments (`build.rs`).
pub const EXAMPLE: &str = include_str!(concat!(env!("OUT_DIR"), "/example.toml"));

/// The system-wide config file, last before the embedded demo.
pub const SYSTEM_PATH: &str = "/etc/portaria/portaria.toml";

/// The endpoint name reserved for requests to a path no endpoint has: the label metrics give
/// them. Never the raw path: anyone can send any path, and each one would become a series. No
/// `[[endpoint]]` may take this name.
pub const UNKNOWN_ENDPOINT: &str = "-";

/// Where `/healthz`, `/readyz` and `/metrics` listen unless `[server] admin_listen` says
/// otherwise: loopback, on the port registered for exporters (9090 is Prometheus' own).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// The slowest a body may arrive unless `[server] min_body_bytes_per_sec` says otherwise:
/// 1 KiB/s, a hundred times below a slow home line, so only a client that trickles its body
/// on purpose (to hold a connection slot) meets it.
pub const DEFAULT_MIN_BODY_BYTES_PER_SEC: u64 = 1024;

/// The retry schedule used when an endpoint names none (the gaps between attempts).
pub const DEFAULT_RETRY: [Duration; 6] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(12 * 3600),
];

/// A validated configuration. Everything in it has been checked; nothing here can fail later
/// for a reason the config file could have told us.
#[derive(Debug)]
pub struct Config {
    pub source: Source,
    pub server: Server,
    pub storage: Storage,
    pub endpoints: Vec<Endpoint>,
    pub log: Log,
    /// `[alerts]`: None when the file has no such table (no alerts are sent).
    pub alerts: Option<Alerts>,
    /// The status page on the admin listener: its token, if any (`[status]`).
    pub status: StatusPage,
    /// Things worth saying that do not stop the start (a secret file others can read). Logged
    /// by `serve` once logging is set up, since the level comes from this very file.
    pub warnings: Vec<String>,
    /// Every environment variable the config reads a secret from: kept out of the environment
    /// of forward commands, which have no business holding the gateways' secrets (the server
    /// hands this list to the worker once).
    pub secret_variables: Vec<String>,
}

/// Whether loading a config reads its secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Read and check every secret: for `serve`, `check` and `send`.
    Load,
    /// Check how secrets are given, but do not read them: for the commands that only work on
    /// the database (`events`, `prune`, `archive`), so an operator needs no gateway secret.
    /// The verifiers built then hold a placeholder that verifies nothing.
    Skip,
}

/// How much a load reads beyond the file: each public entry point of [`Config`] picks one.
#[derive(Debug, Clone, Copy)]
struct Reading<'a> {
    secrets: Secrets,
    /// The endpoint whose secrets are read although `secrets` skips the rest.
    secrets_of: Option<&'a str>,
    machine: Machine,
    /// What `serve` took out of its environment at start, for a reload (`environment`).
    env: Option<&'a EnvAtStart>,
}

impl Reading<'_> {
    const CHECK: Reading<'static> = Reading {
        secrets: Secrets::Load,
        secrets_of: None,
        machine: Machine::Require,
        env: None,
    };

    /// `serve` (secrets read) is warned of a missing program; the database commands (secrets
    /// skipped) do not look.
    fn of(secrets: Secrets) -> Reading<'static> {
        let machine = match secrets {
            Secrets::Load => Machine::Warn,
            Secrets::Skip => Machine::Ignore,
        };
        Reading {
            secrets,
            secrets_of: None,
            machine,
            env: None,
        }
    }
}

/// `[status]`: what the status page asks for. Without a token it serves only on a loopback
/// admin listener (config refuses any other address without one).
#[derive(Debug, Clone, Default)]
pub struct StatusPage {
    /// The admin token or password (`token_env`, `token_file`); `Secret` redacts in `Debug`.
    pub token: Option<Secret>,
}

/// `[log]`: the level when `RUST_LOG` is not set.
#[derive(Debug, Clone)]
pub struct Log {
    /// Directives such as `info` or `warn,portaria=debug` (a level, or `target=level` pairs).
    pub level: String,
}

/// Where a configuration came from, for messages and for resolving relative paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Embedded,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Embedded => f.write_str("<embedded demo config>"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    /// Larger bodies get 413 before they are read in full.
    pub max_body_bytes: usize,
    /// How long a client may take to send the request head.
    pub header_timeout: Duration,
    /// How long a client may take to send the body, once the head is in.
    pub body_timeout: Duration,
    /// The slowest a body may arrive, in bytes per second, once it has had
    /// `ingest::BODY_RATE_GRACE`; 0: no minimum (`body_timeout` alone).
    pub min_body_bytes_per_sec: u64,
    /// Connections beyond this wait in the kernel's backlog instead of costing memory (by
    /// default derived from `memory`: [`Limits::derive`]).
    pub max_connections: usize,
    /// The most body bytes buffered at once across all requests; a request past it gets 503
    /// (by default derived from `memory`).
    pub body_budget_bytes: usize,
    /// The memory the defaults above were derived from (read at validation).
    pub memory: Memory,
    /// The admin listener (`/healthz`, `/readyz`, `/metrics`); None when `admin_listen = "off"`.
    /// Never the webhook address: that one is exposed through the tunnel.
    pub admin_listen: Option<SocketAddr>,
    /// Whose header names the client (`real_ip_header`, `trusted_proxies`); None: the TCP peer.
    pub real_ip: Option<RealIp>,
    /// HTTPS on the webhook listener (`[server] tls`); None: plain HTTP (behind a tunnel).
    pub tls: Option<Tls>,
    /// The canary through the tunnel (`public_url`); None: no public URL, or the canary off.
    pub canary: Option<Canary>,
}

#[derive(Debug, Clone)]
pub struct Storage {
    /// Absolute path of the SQLite file (unused, and empty, when `postgres` is set).
    pub path: PathBuf,
    /// `url`/`url_env`/`url_file`: the events live in this PostgreSQL database instead of
    /// the SQLite file (docs/postgres.md).
    pub postgres: Option<DatabaseUrl>,
    /// Delivered and stored events older than this (by received time) are pruned.
    pub retention_days: u32,
    /// Dead events are kept longer, so an operator has time to replay them.
    pub dead_retention_days: u32,
    /// Absolute path of the directory for `YYYY-MM-DD.jsonl.gz` archives of pruned events;
    /// None: pruned events are not kept anywhere. Created at the first prune if missing.
    pub archive_dir: Option<PathBuf>,
}

/// One webhook URL: how to verify it, how to dedup it, where to forward it.
#[derive(Debug)]
pub struct Endpoint {
    pub name: String,
    pub path: String,
    pub verifier: Verifier,
    pub dedup: DedupRule,
    /// For how long an event makes a later one with the same dedup key a duplicate (the
    /// `dedup_window` key, else the preset's default). None: no window, any earlier event
    /// with the key that is still stored is a duplicate; events are pruned after the
    /// retention, so that is a window of `retention_days`.
    pub dedup_window: Option<Duration>,
    /// Where its events go: the `[[endpoint.route]]` tables, or the one route
    /// [`SHORTHAND_ROUTE`] of `forward` on the endpoint itself; empty: it only stores.
    pub routes: Vec<Route>,
    /// Only clients in these ranges may deliver (403 otherwise); None: any address.
    pub allow_ips: Option<Vec<IpRange>>,
    /// Alert when no webhook came for this long (an endpoint that has received one); None: off.
    pub quiet_after: Option<Duration>,
    /// Alert when an event that matched no route is still stored only after this long.
    pub unrouted_after: Duration,
    /// Only requests on a connection with a verified client certificate (403 otherwise).
    pub client_cert: Option<ClientCertRule>,
    /// `events export`'s columns of its own (`export_fields`): each a name and a JSON pointer
    /// into the body, by name.
    pub export_fields: Vec<(String, String)>,
    /// `[endpoint.reconcile]`: the gateway's API asked for what never arrived; None: off.
    pub reconcile: Option<Reconcile>,
    /// How many of its rejected requests are kept, and for how long (`quarantine_keep`,
    /// `quarantine_for`).
    pub quarantine: Quarantine,
}

impl Endpoint {
    /// The paths it answers on: its `path`, and that path followed by what its provider
    /// appends to the URL it was given (Efí's `/pix`).
    pub fn paths(&self) -> Vec<String> {
        let appended = self.verifier.appended_path();
        let mut paths = vec![self.path.clone()];
        paths.extend(appended.map(|suffix| format!("{}{suffix}", self.path)));
        paths
    }

    /// Whether any of its events are forwarded at all.
    pub fn forwards(&self) -> bool {
        !self.routes.is_empty()
    }

    /// The routes an event of this type goes to, each with the event's ordering key there.
    pub fn deliveries_for(
        &self,
        event_type: Option<&str>,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Vec<(String, Option<String>)> {
        self.routes
            .iter()
            .filter(|r| r.matches(event_type))
            .map(|r| (r.name.clone(), r.order_key(headers, body)))
            .collect()
    }
}

/// Where and how one route's events are delivered.
#[derive(Debug)]
pub struct Forward {
    pub target: Target,
    pub timeout: Duration,
    /// The gaps between attempts; after the last one fails, the event is dead.
    pub retry: Vec<Duration>,
    /// Deliveries in flight at once; 1 keeps arrival order.
    pub concurrency: usize,
}

#[derive(Debug)]
pub enum Target {
    Command(Vec<String>),
    /// A program started once and kept running, fed one JSON line per event (`forward::pipe`).
    Pipe {
        argv: Vec<String>,
    },
    Url {
        url: http::Uri,
        /// Standard Webhooks signing key for the forward, decoded from `whsec_...`.
        signing_key: Option<Secret>,
    },
}

impl Config {
    /// Finds, reads and validates the configuration (see the module doc for the order).
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with(explicit, Secrets::Load)
    }

    /// [`Config::load`], choosing whether secrets are read (see [`Secrets`]).
    pub fn load_with(explicit: Option<&Path>, secrets: Secrets) -> Result<Config, ConfigError> {
        Config::load_as(explicit, Reading::of(secrets))
    }

    /// For `portaria check`: [`Config::load`], and what `serve` will need of this machine
    /// checked as this user (the database's directory writable, each program there and
    /// executable: `readiness`), a missing one a problem, not a warning.
    pub fn load_for_check(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_as(explicit, Reading::CHECK)
    }

    /// For `send` and `verify`: the secrets of endpoint `name` only, so that the operator
    /// needs no other endpoint's secret (nor the status token, nor the database URL's).
    pub fn load_for_endpoint(explicit: Option<&Path>, name: &str) -> Result<Config, ConfigError> {
        let reading = Reading {
            secrets_of: Some(name),
            ..Reading::of(Secrets::Skip)
        };
        Config::load_as(explicit, reading)
    }

    /// [`Config::load_with`], a variable missing from the environment read from `env`: what
    /// `serve` took out of its environment at start (a reload).
    pub fn load_keeping(
        explicit: Option<&Path>,
        secrets: Secrets,
        env: &EnvAtStart,
    ) -> Result<Config, ConfigError> {
        let reading = Reading {
            env: Some(env),
            ..Reading::of(secrets)
        };
        Config::load_as(explicit, reading)
    }

    fn load_as(explicit: Option<&Path>, reading: Reading<'_>) -> Result<Config, ConfigError> {
        let source = locate(
            explicit,
            std::env::var_os("PORTARIA_CONFIG").map(PathBuf::from),
            here_config_path(),
            user_config_path(),
            Path::new(SYSTEM_PATH),
        );
        match &source {
            Source::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                    source: source.clone(),
                    problems: vec![format!("cannot read the file: {e}")],
                    warnings: Vec::new(),
                })?;
                Config::parse_as(&text, source, reading)
            }
            Source::Embedded => Config::parse_as(EXAMPLE, Source::Embedded, reading),
        }
    }

    /// Validates configuration text. `source` says where it came from: relative storage and
    /// secret-file paths are resolved against a file's directory.
    pub fn parse(text: &str, source: Source) -> Result<Config, ConfigError> {
        Config::parse_with(text, source, Secrets::Load)
    }

    /// [`Config::parse`], choosing whether secrets are read (see [`Secrets`]).
    pub fn parse_with(text: &str, source: Source, secrets: Secrets) -> Result<Config, ConfigError> {
        Config::parse_as(text, source, Reading::of(secrets))
    }

    /// [`Config::load_for_check`] for a text.
    pub fn parse_for_check(text: &str, source: Source) -> Result<Config, ConfigError> {
        Config::parse_as(text, source, Reading::CHECK)
    }

    /// [`Config::parse_with`], a variable missing from the environment read from `env`.
    pub fn parse_keeping(
        text: &str,
        source: Source,
        secrets: Secrets,
        env: &EnvAtStart,
    ) -> Result<Config, ConfigError> {
        let reading = Reading {
            env: Some(env),
            ..Reading::of(secrets)
        };
        Config::parse_as(text, source, reading)
    }

    fn parse_as(text: &str, source: Source, reading: Reading<'_>) -> Result<Config, ConfigError> {
        let fail = |problems| ConfigError {
            source: source.clone(),
            problems,
            warnings: Vec::new(),
        };
        // Unknown keys and refused values are problems like any other: the rest is still
        // validated, so one run reports them all (`keys`).
        let (raw, problems) = keys::read(text).map_err(fail)?;
        // Relative paths in the file are relative to it, made absolute here even when the
        // file was named relative to the current directory.
        let base_dir = match &source {
            Source::File(path) => path.parent().map(|dir| match std::env::current_dir() {
                Ok(cwd) if dir.is_relative() => cwd.join(dir),
                _ => dir.to_path_buf(),
            }),
            Source::Embedded => None,
        };
        let mut v = Validator {
            text,
            base_dir,
            secrets: reading.secrets,
            secrets_of: reading.secrets_of,
            machine: reading.machine,
            env_at_start: reading.env,
            problems,
            warnings: Vec::new(),
            secret_variables: Vec::new(),
            inline_secrets: false,
        };
        let server = v.server(raw.server);
        let storage = v.storage(raw.storage);
        let endpoints = v.endpoints(raw.endpoints);
        let log = v.log(raw.log);
        let alerts = v.alerts(raw.alerts);
        if alerts.is_none() && endpoints.iter().any(|e| e.quiet_after.is_some()) {
            v.warnings.push(
                "endpoint quiet_after: there is no [alerts] table to send the alert to, so it \
                 has no effect"
                    .into(),
            );
        }
        let admin = server.as_ref().and_then(|s| s.admin_listen);
        let status = v.status(raw.status, admin);
        v.warn_if_others_read(&source);
        if let Some(server) = &server {
            v.warn_allow_ips_without_real_ip(server, &endpoints);
            v.check_client_cert_rules(server.tls.as_ref(), &endpoints);
            v.warn_static_credentials_in_clear(server, &endpoints);
        }
        if let Some(storage) = storage.as_ref().filter(|s| s.postgres.is_none()) {
            v.storage_ready(&storage.path);
        }
        if let Some(argv) = alerts.as_ref().and_then(|a| a.command.as_ref()) {
            v.program_ready("alerts.command", argv);
        }
        v.check_canary_path(&endpoints);
        match (server, storage, v.problems.is_empty()) {
            (Some(server), Some(storage), true) => Ok(Config {
                source,
                server,
                storage,
                endpoints,
                log,
                alerts,
                status,
                warnings: v.warnings,
                secret_variables: v.secret_variables,
            }),
            _ => Err(ConfigError {
                source,
                problems: v.problems,
                warnings: v.warnings,
            }),
        }
    }

    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == name)
    }
}

/// Picks the config source by the documented order. Pure, so the order can be tested.
pub fn locate(
    explicit: Option<&Path>,
    from_env: Option<PathBuf>,
    here_file: Option<PathBuf>,
    user_file: Option<PathBuf>,
    system_file: &Path,
) -> Source {
    if let Some(path) = explicit {
        return Source::File(path.to_path_buf());
    }
    if let Some(path) = from_env.filter(|p| !p.as_os_str().is_empty()) {
        return Source::File(path);
    }
    if let Some(path) = here_file.filter(|p| p.is_file()) {
        return Source::File(path);
    }
    if let Some(path) = user_file.filter(|p| p.is_file()) {
        return Source::File(path);
    }
    if system_file.is_file() {
        return Source::File(system_file.to_path_buf());
    }
    Source::Embedded
}

fn project_dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("", "", "portaria")
}

/// The file name looked for in the current directory.
pub const HERE_FILE: &str = "portaria.toml";

/// `portaria.toml` in the current directory, absolute (so that messages and the paths
/// relative to it are too); None when the current directory cannot be read.
pub fn here_config_path() -> Option<PathBuf> {
    std::env::current_dir().ok().map(|dir| dir.join(HERE_FILE))
}

/// `portaria.toml` in the user's config dir, if the platform has one.
pub fn user_config_path() -> Option<PathBuf> {
    project_dirs().map(|d| d.config_dir().join("portaria.toml"))
}

/// Where the database goes when `[storage] path` is not set.
fn default_db_path() -> Option<PathBuf> {
    project_dirs().map(|d| d.data_dir().join("portaria.db"))
}

/// Every problem found in one configuration, reported together.
#[derive(Debug)]
pub struct ConfigError {
    pub source: Source,
    pub problems: Vec<String>,
    /// What would have been a warning, found on the way (`check` shows them with the
    /// problems; `Display` leaves them out).
    pub warnings: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}: {problem}", self.source)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_source() -> Source {
        Source::File(PathBuf::from("/srv/portaria/portaria.toml"))
    }

    // Shared with the tests in `validate` and `toml_error`.
    pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, file_source())
    }

    pub(super) fn problems(text: &str) -> String {
        parse(text)
            .expect_err("config should be refused")
            .to_string()
    }

    pub(super) const MINIMAL: &str = r#"
[[endpoint]]
path = "/webhooks/github"
provider = "github"
secret = "s3cret-s3cret-s3cret"
"#;

    #[test]
    fn the_embedded_example_is_the_shipped_file_without_its_comments() {
        let shipped: toml::Table =
            toml::from_str(include_str!("../../config.example.toml")).unwrap();
        let embedded: toml::Table = toml::from_str(EXAMPLE).unwrap();
        assert_eq!(embedded, shipped);
        assert!(!EXAMPLE.lines().any(|l| l.trim_start().starts_with('#')));
        assert!(EXAMPLE.len() < include_str!("../../config.example.toml").len() / 4);
    }

    #[test]
    fn the_embedded_example_is_valid() {
        let config = Config::parse(EXAMPLE, Source::Embedded).expect("example config is valid");
        assert!(config.server.listen.ip().is_loopback());
        assert!(!config.endpoints.is_empty());
    }

    #[test]
    fn database_commands_load_without_the_secrets() {
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"standard-webhooks\"\nsecret_env = \"PORTARIA_TEST_NEVER_SET\"\nforward = { url = \"http://127.0.0.1:1/\", secret_file = \"/nonexistent\" }\n";
        assert!(parse(text).is_err(), "serve and check read them");
        let config = Config::parse_with(text, file_source(), Secrets::Skip).unwrap();
        assert_eq!(config.secret_variables, ["PORTARIA_TEST_NEVER_SET"]);
        let body = b"{}";
        let headers: http::HeaderMap = [
            ("webhook-id", "m"),
            ("webhook-timestamp", "0"),
            ("webhook-signature", "v1,AAAA"),
        ]
        .into_iter()
        .map(|(k, v)| {
            (
                http::HeaderName::from_static(k),
                http::HeaderValue::from_static(v),
            )
        })
        .collect();
        assert!(
            config.endpoints[0]
                .verifier
                .verify(&headers, body, 0)
                .is_err()
        );
        // How secrets are given is still checked.
        let both = "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret = \"x\"\nsecret_env = \"Y\"\n";
        assert!(Config::parse_with(both, file_source(), Secrets::Skip).is_err());
    }

    #[test]
    fn lookup_order_is_flag_then_env_then_here_then_user_then_system_then_embedded() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().join("here.toml");
        let user = dir.path().join("user.toml");
        let system = dir.path().join("system.toml");
        let flag = PathBuf::from("/flag.toml");
        let env = PathBuf::from("/env.toml");
        std::fs::write(&here, "").unwrap();
        std::fs::write(&user, "").unwrap();
        std::fs::write(&system, "").unwrap();
        assert_eq!(
            locate(None, Some(env.clone()), Some(here.clone()), None, &system),
            Source::File(env.clone())
        );
        assert_eq!(
            locate(None, None, Some(here.clone()), Some(user.clone()), &system),
            Source::File(here)
        );

        let absent_here = Some(dir.path().join("absent-here.toml"));
        let pick = |f: Option<&Path>, e: Option<PathBuf>, u: Option<PathBuf>, s: &Path| {
            locate(f, e, absent_here.clone(), u, s)
        };
        assert_eq!(
            pick(Some(&flag), Some(env.clone()), Some(user.clone()), &system),
            Source::File(flag.clone())
        );
        assert_eq!(
            pick(None, Some(env.clone()), Some(user.clone()), &system),
            Source::File(env)
        );
        assert_eq!(
            pick(None, Some(PathBuf::new()), Some(user.clone()), &system),
            Source::File(user.clone())
        );
        assert_eq!(
            pick(None, None, Some(user.clone()), &system),
            Source::File(user)
        );
        let absent = dir.path().join("absent.toml");
        assert_eq!(
            pick(None, None, Some(absent.clone()), &system),
            Source::File(system)
        );
        assert_eq!(
            pick(None, None, Some(absent.clone()), &absent),
            Source::Embedded
        );
    }
}
