//! Configuration: where the one TOML file is found, and how its raw text becomes a validated
//! [`Config`] with decoded secrets, parsed durations and absolute paths.
//!
//! Bad configuration never half-starts: every problem is collected and reported as
//! `file: key: why` (with the line of the `[[endpoint]]` table it sits in), and nothing is
//! served until all of them are fixed.
//!
//! Lookup order (first hit wins; see [`locate`]):
//! 1. `--config FILE`, or else `$PORTARIA_CONFIG`;
//! 2. `portaria.toml` in the user's config dir (`~/.config/portaria/` on Linux);
//! 3. `/etc/portaria/portaria.toml`;
//! 4. the embedded demo config (`config.example.toml`), with a loud warning.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::dedup::DedupRule;
use crate::verify::{HmacOptions, Verifier, standard_webhooks};

/// The embedded default: a loopback-only demo with example secrets.
pub const EXAMPLE: &str = include_str!("../config.example.toml");

/// The system-wide config file, last before the embedded demo.
pub const SYSTEM_PATH: &str = "/etc/portaria/portaria.toml";

/// Where `/healthz`, `/readyz` and `/metrics` listen unless `[server] admin_listen` says
/// otherwise: loopback, on the port registered for exporters (9090 is Prometheus' own).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

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
    /// Things worth saying that do not stop the start (a secret file others can read). Logged
    /// by `serve` once logging is set up, since the level comes from this very file.
    pub warnings: Vec<String>,
    /// Every environment variable the config reads a secret from: kept out of the environment
    /// of forward commands, which have no business holding the gateways' secrets.
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

/// Stands in for every secret under [`Secrets::Skip`]; a valid `whsec_` key, so that every
/// scheme accepts it, and matches no real signature.
const PLACEHOLDER_SECRET: &str = "whsec_cG9ydGFyaWE6IHNlY3JldHMgbm90IGxvYWRlZA==";

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
    /// Connections beyond this wait in the kernel's backlog instead of costing memory.
    pub max_connections: usize,
    /// The admin listener (`/healthz`, `/readyz`, `/metrics`); None when `admin_listen = "off"`.
    /// Never the webhook address: that one is exposed through the tunnel.
    pub admin_listen: Option<SocketAddr>,
}

#[derive(Debug, Clone)]
pub struct Storage {
    /// Absolute path of the SQLite file.
    pub path: PathBuf,
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
    pub forward: Option<Forward>,
}

/// Where and how an endpoint's events are delivered.
#[derive(Debug)]
pub struct Forward {
    pub target: Target,
    pub timeout: Duration,
    /// The gaps between attempts; after the last one fails, the event is dead.
    pub retry: Vec<Duration>,
    /// Deliveries in flight at once; 1 keeps arrival order.
    pub concurrency: usize,
    /// Environment variables a command target must not inherit: every `secret_env` of the
    /// config (the command has no business holding the gateways' secrets).
    pub hide_env: Vec<String>,
}

pub enum Target {
    Command(Vec<String>),
    Url {
        url: http::Uri,
        /// Standard Webhooks signing key for the forward, decoded from `whsec_...`.
        signing_key: Option<Vec<u8>>,
    },
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Command(argv) => f.debug_tuple("Command").field(argv).finish(),
            Target::Url { url, signing_key } => f
                .debug_struct("Url")
                .field("url", url)
                .field("signed", &signing_key.is_some())
                .finish(),
        }
    }
}

impl Config {
    /// Finds, reads and validates the configuration (see the module doc for the order).
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with(explicit, Secrets::Load)
    }

    /// [`Config::load`], choosing whether secrets are read (see [`Secrets`]).
    pub fn load_with(explicit: Option<&Path>, secrets: Secrets) -> Result<Config, ConfigError> {
        let source = locate(
            explicit,
            std::env::var_os("PORTARIA_CONFIG").map(PathBuf::from),
            user_config_path(),
            Path::new(SYSTEM_PATH),
        );
        match &source {
            Source::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                    source: source.clone(),
                    problems: vec![format!("cannot read the file: {e}")],
                })?;
                Config::parse_with(&text, source, secrets)
            }
            Source::Embedded => Config::parse_with(EXAMPLE, Source::Embedded, secrets),
        }
    }

    /// Validates configuration text. `source` says where it came from: relative storage and
    /// secret-file paths are resolved against a file's directory.
    pub fn parse(text: &str, source: Source) -> Result<Config, ConfigError> {
        Config::parse_with(text, source, Secrets::Load)
    }

    /// [`Config::parse`], choosing whether secrets are read (see [`Secrets`]).
    pub fn parse_with(text: &str, source: Source, secrets: Secrets) -> Result<Config, ConfigError> {
        let fail = |problems| ConfigError {
            source: source.clone(),
            problems,
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| fail(vec![toml_message(text, &e)]))?;
        let base_dir = match &source {
            Source::File(path) => path.parent().map(Path::to_path_buf),
            Source::Embedded => None,
        };
        let mut v = Validator {
            text,
            base_dir,
            secrets,
            problems: Vec::new(),
            warnings: Vec::new(),
            secret_variables: Vec::new(),
        };
        let server = v.server(raw.server);
        let storage = v.storage(raw.storage);
        let endpoints = v.endpoints(raw.endpoints);
        let log = v.log(raw.log);
        let mut endpoints = endpoints;
        for forward in endpoints.iter_mut().filter_map(|e| e.forward.as_mut()) {
            forward.hide_env = v.secret_variables.clone();
        }
        match (server, storage, v.problems.is_empty()) {
            (Some(server), Some(storage), true) => Ok(Config {
                source,
                server,
                storage,
                endpoints,
                log,
                warnings: v.warnings,
                secret_variables: v.secret_variables,
            }),
            _ => Err(fail(v.problems)),
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
    user_file: Option<PathBuf>,
    system_file: &Path,
) -> Source {
    if let Some(path) = explicit {
        return Source::File(path.to_path_buf());
    }
    if let Some(path) = from_env.filter(|p| !p.as_os_str().is_empty()) {
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

/// The TOML parser's message with where it happened, but never the offending line itself (the
/// parser's own `Display` quotes it): that line may be `secert = "whsec_…"`, and this message
/// goes to stderr and the journal. A string value that serde quotes in a type error
/// (`secrets = "whsec_…"`) is left out for the same reason.
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = without_quoted_strings(e.message().trim_end());
    let Some(span) = e.span() else {
        return message;
    };
    let (line, column) = (line_of(text, span.start), column_of(text, span.start));
    match key_on_line(text, span.start) {
        Some(key) => format!("line {line}, column {column} (`{key}`): {message}"),
        None => format!("line {line}, column {column}: {message}"),
    }
}

/// The key of the `key = value` line holding byte `offset`: a name is safe to show, where the
/// rest of the line may not be.
fn key_on_line(text: &str, offset: usize) -> Option<&str> {
    let end = floor_char_boundary(text, offset);
    let start = text[..end].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let key = line.split_once('=')?.0.trim();
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    (!key.is_empty() && key.chars().all(plain)).then_some(key)
}

/// Replaces each `string "…"` (serde's way of quoting an unexpected string value, with Rust
/// escapes inside) with `a string`.
fn without_quoted_strings(message: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(QUOTED) {
        out.push_str(&rest[..start]);
        out.push_str("a string");
        let mut chars = rest[start + QUOTED.len()..].char_indices();
        let mut end = rest.len() - start - QUOTED.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &rest[start + QUOTED.len() + end..];
    }
    out.push_str(rest);
    out
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = floor_char_boundary(text, offset);
    text[..end].matches('\n').count() + 1
}

/// The 1-based column (in characters) of byte `offset` in `text`.
fn column_of(text: &str, offset: usize) -> usize {
    let end = floor_char_boundary(text, offset);
    let line_start = text[..end].rfind('\n').map_or(0, |i| i + 1);
    text[line_start..end].chars().count() + 1
}

fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

// ---- The raw file, exactly as written. ----

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    storage: RawStorage,
    #[serde(default, rename = "endpoint")]
    endpoints: Vec<Spanned<RawEndpoint>>,
    #[serde(default)]
    log: RawLog,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLog {
    level: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    max_body_bytes: Option<usize>,
    header_timeout_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    admin_listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    path: Option<PathBuf>,
    retention_days: Option<u32>,
    dead_retention_days: Option<u32>,
    archive_dir: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    name: Option<String>,
    path: Option<String>,
    provider: Option<String>,
    secret: Option<String>,
    secret_env: Option<OneOrMany>,
    secret_file: Option<OneOrMany>,
    secrets: Option<Vec<String>>,
    dedup: Option<String>,
    tolerance_secs: Option<u64>,
    signature: Option<HmacOptions>,
    forward: Option<RawForward>,
    retry: Option<Vec<String>>,
    concurrency: Option<usize>,
}

/// The ways to give a secret. `secret_env` and `secret_file` may name several (rotation):
/// a list of variables, or a file with one secret per line. (Not a flattened struct: serde's
/// `flatten` would switch off `deny_unknown_fields`.)
struct RawSecret {
    secret: Option<String>,
    secret_env: Option<OneOrMany>,
    secret_file: Option<OneOrMany>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForward {
    command: Option<Vec<String>>,
    url: Option<String>,
    timeout_secs: Option<u64>,
    secret: Option<String>,
    secret_env: Option<OneOrMany>,
    secret_file: Option<OneOrMany>,
}

// ---- Validation: raw to checked, collecting every problem. ----

struct Validator<'a> {
    text: &'a str,
    base_dir: Option<PathBuf>,
    secrets: Secrets,
    problems: Vec<String>,
    warnings: Vec<String>,
    secret_variables: Vec<String>,
}

impl Validator<'_> {
    fn log(&mut self, raw: RawLog) -> Log {
        let level = raw.level.unwrap_or_else(|| "info".into());
        if let Err(e) = level.parse::<tracing_subscriber::filter::Targets>() {
            self.problem(format!("log.level: `{level}` is not a level or filter like `info` or `warn,portaria=debug`: {e}"));
        }
        Log { level }
    }

    fn problem(&mut self, msg: impl Into<String>) {
        self.problems.push(msg.into());
    }

    fn server(&mut self, raw: RawServer) -> Option<Server> {
        let listen = raw.listen.unwrap_or_else(|| "127.0.0.1:8080".into());
        let listen = match listen.parse() {
            Ok(addr) => addr,
            Err(_) => {
                self.problem(format!(
                    "server.listen: `{listen}` is not an address like 127.0.0.1:8080"
                ));
                return None;
            }
        };
        let max_body_bytes = raw.max_body_bytes.unwrap_or(1024 * 1024);
        if max_body_bytes == 0 {
            self.problem("server.max_body_bytes: must be at least 1");
        }
        let max_connections = raw.max_connections.unwrap_or(1024);
        if max_connections == 0 {
            self.problem("server.max_connections: must be at least 1");
        }
        let admin_listen = self.admin_listen(raw.admin_listen, listen);
        Some(Server {
            listen,
            admin_listen,
            max_body_bytes,
            header_timeout: self.seconds("server.header_timeout_secs", raw.header_timeout_secs, 10),
            body_timeout: self.seconds("server.body_timeout_secs", raw.body_timeout_secs, 20),
            max_connections,
        })
    }

    /// `off`, or an address that cannot be the webhook one (port 0 asks for any free port).
    fn admin_listen(&mut self, raw: Option<String>, listen: SocketAddr) -> Option<SocketAddr> {
        let text = raw.unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into());
        if text.trim() == "off" {
            return None;
        }
        let Ok(admin) = text.parse::<SocketAddr>() else {
            self.problem(format!(
                "server.admin_listen: `{text}` is not an address like {DEFAULT_ADMIN_LISTEN}, or \"off\""
            ));
            return None;
        };
        let overlaps = admin.port() == listen.port()
            && admin.port() != 0
            && (admin.ip() == listen.ip()
                || admin.ip().is_unspecified()
                || listen.ip().is_unspecified());
        if overlaps {
            self.problem(format!(
                "server.admin_listen: `{admin}` is the webhook address ({listen}); health and \
                 metrics need their own port, never the one the tunnel exposes (default {DEFAULT_ADMIN_LISTEN})"
            ));
        }
        Some(admin)
    }

    fn storage(&mut self, raw: RawStorage) -> Option<Storage> {
        let path = match raw.path {
            Some(p) if p.as_os_str().is_empty() => {
                self.problem("storage.path: is empty");
                return None;
            }
            Some(p) => self.resolve(&p),
            None => match default_db_path() {
                Some(p) => p,
                None => {
                    self.problem("storage.path: no home directory to default to; set a path");
                    return None;
                }
            },
        };
        if path.is_dir() {
            self.problem(format!(
                "storage.path: {} is a directory, not a file",
                path.display()
            ));
        }
        if let Some(parent) = path.parent()
            && parent.exists()
            && !parent.is_dir()
        {
            self.problem(format!(
                "storage.path: {} is not a directory",
                parent.display()
            ));
        }
        let retention_days = raw.retention_days.unwrap_or(30);
        if retention_days == 0 {
            self.problem("storage.retention_days: must be at least 1");
        }
        let dead_retention_days = raw.dead_retention_days.unwrap_or(90);
        if dead_retention_days == 0 {
            self.problem("storage.dead_retention_days: must be at least 1");
        }
        let archive_dir = match raw.archive_dir {
            Some(p) if p.as_os_str().is_empty() => {
                self.problem("storage.archive_dir: is empty; leave it out to keep no archive");
                None
            }
            Some(p) => {
                let dir = self.resolve(&p);
                if let Err(why) = usable_dir(&dir) {
                    self.problem(format!("storage.archive_dir: {why}"));
                }
                Some(dir)
            }
            None => None,
        };
        Some(Storage {
            path,
            retention_days,
            dead_retention_days,
            archive_dir,
        })
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        match &self.base_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// A timeout in whole seconds, `default` when absent; 0 is refused rather than quietly
    /// made 1.
    fn seconds(&mut self, key: &str, value: Option<u64>, default: u64) -> Duration {
        if value == Some(0) {
            self.problem(format!("{key}: must be at least 1"));
        }
        Duration::from_secs(value.unwrap_or(default).max(1))
    }

    fn line_of(&self, span: std::ops::Range<usize>) -> usize {
        line_of(self.text, span.start)
    }

    fn endpoints(&mut self, raw: Vec<Spanned<RawEndpoint>>) -> Vec<Endpoint> {
        if raw.is_empty() {
            self.problem("endpoint: no [[endpoint]] is configured; nothing would be received");
        }
        let mut names = HashSet::new();
        let mut paths = HashSet::new();
        let mut out = Vec::new();
        for (i, spanned) in raw.into_iter().enumerate() {
            let line = self.line_of(spanned.span());
            let at = format!("endpoint[{i}] (line {line})");
            if let Some(endpoint) = self.endpoint(&at, spanned.into_inner()) {
                if !names.insert(endpoint.name.clone()) {
                    self.problem(format!("{at}.name: `{}` is used twice", endpoint.name));
                }
                if !paths.insert(endpoint.path.clone()) {
                    self.problem(format!("{at}.path: `{}` is used twice", endpoint.path));
                }
                out.push(endpoint);
            }
        }
        out
    }

    fn endpoint(&mut self, at: &str, raw: RawEndpoint) -> Option<Endpoint> {
        let before = self.problems.len();
        let path = match raw.path {
            Some(p) if p.starts_with('/') && p.len() > 1 && !p.contains(['?', '#', ' ']) => p,
            Some(p) => {
                self.problem(format!(
                    "{at}.path: `{p}` must be a path below `/` with no `?`, `#` or spaces, \
                     like /webhooks/stripe"
                ));
                String::new()
            }
            None => {
                self.problem(format!(
                    "{at}.path: missing (e.g. path = \"/webhooks/stripe\")"
                ));
                String::new()
            }
        };
        let name = raw.name.unwrap_or_else(|| {
            path.rsplit('/')
                .find(|s| !s.is_empty())
                .unwrap_or("")
                .to_string()
        });
        if name.is_empty() && !path.is_empty() {
            self.problem(format!("{at}.name: empty"));
        } else if !name.is_empty() && !valid_name(&name) {
            self.problem(format!(
                "{at}.name: `{name}` may hold only letters, digits, `-`, `_` and `.`"
            ));
        }
        if name == crate::metrics::UNKNOWN_ENDPOINT {
            self.problem(format!(
                "{at}.name: `-` is reserved (metrics label requests to unknown paths with it)"
            ));
        }
        let Some(provider) = raw.provider else {
            self.problem(format!(
                "{at}.provider: missing (e.g. provider = \"stripe\")"
            ));
            return None;
        };
        let given = RawSecret {
            secret: raw.secret,
            secret_env: raw.secret_env,
            secret_file: raw.secret_file,
        };
        let secrets = self.secrets(at, given, raw.secrets, true);
        // With no usable secret (`secrets` has reported why, so this endpoint is refused
        // below), check the provider and its options with a stand-in, so that every problem
        // shows in one run.
        let checked_with = if secrets.is_empty() {
            vec![PLACEHOLDER_SECRET.to_string()]
        } else {
            secrets
        };
        let verifier = match Verifier::new(
            &provider,
            raw.signature.as_ref(),
            &checked_with,
            raw.tolerance_secs,
        ) {
            Ok(v) => {
                if raw.tolerance_secs.is_some() && !v.signs_timestamp() {
                    self.warnings.push(format!(
                        "{at}.tolerance_secs: provider `{provider}` signs no timestamp here, so \
                         there is no window to set; it has no effect"
                    ));
                }
                Some(v)
            }
            Err(why) => {
                self.problem(format!("{at}: {why}"));
                None
            }
        };
        let dedup = match raw.dedup.map(|d| d.parse::<DedupRule>()) {
            Some(Ok(rule)) => Some(rule),
            Some(Err(why)) => {
                self.problem(format!("{at}.dedup: {why}"));
                None
            }
            None => verifier.as_ref().map(Verifier::default_dedup),
        };
        let forward = self.forward(at, raw.forward, raw.retry, raw.concurrency);
        if self.problems.len() != before {
            return None;
        }
        Some(Endpoint {
            name,
            path,
            verifier: verifier?,
            dedup: dedup?,
            forward,
        })
    }

    /// Collects the secrets given by exactly one of the ways to give them.
    fn secrets(
        &mut self,
        at: &str,
        raw: RawSecret,
        list: Option<Vec<String>>,
        required: bool,
    ) -> Vec<String> {
        let given = [
            raw.secret.is_some(),
            list.is_some(),
            raw.secret_env.is_some(),
            raw.secret_file.is_some(),
        ];
        match given.iter().filter(|g| **g).count() {
            0 if required => {
                self.problem(format!(
                    "{at}: no secret; set exactly one of secret, secrets, secret_env, secret_file"
                ));
                return Vec::new();
            }
            0 => return Vec::new(),
            1 => {}
            _ => {
                self.problem(format!(
                    "{at}: set exactly one of secret, secrets, secret_env, secret_file"
                ));
                return Vec::new();
            }
        }
        // `secrets = []` and the like: given, yet nothing to verify (or sign) with.
        let empty =
            |many: &Option<OneOrMany>| matches!(many, Some(OneOrMany::Many(v)) if v.is_empty());
        if list.as_ref().is_some_and(Vec::is_empty)
            || empty(&raw.secret_env)
            || empty(&raw.secret_file)
        {
            self.problem(format!(
                "{at}: the list of secrets is empty; give at least one"
            ));
            return Vec::new();
        }
        let problems_before = self.problems.len();
        let env_vars = raw.secret_env.map(OneOrMany::into_vec).unwrap_or_default();
        self.secret_variables.extend(env_vars.iter().cloned());
        if self.secrets == Secrets::Skip {
            return vec![PLACEHOLDER_SECRET.to_string()];
        }
        let mut secrets = Vec::new();
        if let Some(s) = raw.secret {
            secrets.push(s);
        }
        secrets.extend(list.unwrap_or_default());
        for var in env_vars {
            match std::env::var(&var) {
                Ok(value) if !value.trim().is_empty() => secrets.push(value.trim().to_string()),
                Ok(_) => self.problem(format!(
                    "{at}.secret_env: environment variable {var} is empty"
                )),
                Err(_) => self.problem(format!(
                    "{at}.secret_env: environment variable {var} is not set"
                )),
            }
        }
        for file in raw.secret_file.map(OneOrMany::into_vec).unwrap_or_default() {
            let path = self.resolve(Path::new(&file));
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    if readable_by_others(&path) {
                        self.warnings.push(format!(
                            "{at}.secret_file: {} is readable by group or others; chmod 600 it",
                            path.display()
                        ));
                    }
                    let before = secrets.len();
                    secrets.extend(
                        text.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(String::from),
                    );
                    if secrets.len() == before {
                        self.problem(format!("{at}.secret_file: {} is empty", path.display()));
                    }
                }
                Err(e) => self.problem(format!(
                    "{at}.secret_file: cannot read {}: {e}",
                    path.display()
                )),
            }
        }
        if secrets.iter().any(|s| s.is_empty()) {
            self.problem(format!("{at}: a secret is empty"));
        }
        // Whatever the way, no secret means no endpoint: the caller's stand-in secret (used to
        // check the other options) must never end up verifying requests.
        if secrets.is_empty() && self.problems.len() == problems_before {
            self.problem(format!("{at}: no secret could be read"));
        }
        secrets
    }

    fn forward(
        &mut self,
        at: &str,
        raw: Option<RawForward>,
        retry: Option<Vec<String>>,
        concurrency: Option<usize>,
    ) -> Option<Forward> {
        let Some(raw) = raw else {
            if retry.is_some() || concurrency.is_some() {
                self.problem(format!("{at}: retry and concurrency need a forward target"));
            }
            return None;
        };
        let at = format!("{at}.forward");
        let given = RawSecret {
            secret: raw.secret,
            secret_env: raw.secret_env,
            secret_file: raw.secret_file,
        };
        let secrets = self.secrets(&at, given, None, false);
        let target = match (raw.command, raw.url) {
            (Some(argv), None) => {
                if argv.first().is_none_or(|program| program.is_empty()) {
                    self.problem(format!("{at}.command: give the program and its arguments, e.g. [\"/usr/local/bin/on-payment\"]"));
                }
                if !secrets.is_empty() {
                    self.problem(format!("{at}: a forward secret signs URL forwards only"));
                }
                Target::Command(argv)
            }
            (None, Some(url)) => {
                let parsed = match url.parse::<http::Uri>() {
                    Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => {
                        Some(uri)
                    }
                    Ok(_) => {
                        self.problem(format!("{at}.url: `{url}` must be a plain http:// URL (forwards go to a local program)"));
                        None
                    }
                    Err(e) => {
                        self.problem(format!("{at}.url: `{url}` is not a URL: {e}"));
                        None
                    }
                };
                let signing_key = match secrets.as_slice() {
                    [] => None,
                    [one] => match standard_webhooks::decode_secret(one) {
                        Ok(key) => Some(key),
                        Err(why) => {
                            self.problem(format!("{at}.secret: {why}"));
                            None
                        }
                    },
                    _ => {
                        self.problem(format!("{at}: a forward is signed with one secret"));
                        None
                    }
                };
                Target::Url {
                    url: parsed.unwrap_or_default(),
                    signing_key,
                }
            }
            _ => {
                self.problem(format!("{at}: set exactly one of command or url"));
                return None;
            }
        };
        let retry = match retry {
            Some(list) => list
                .iter()
                .filter_map(|s| match parse_duration(s) {
                    Ok(d) => Some(d),
                    Err(why) => {
                        self.problem(format!("{at}.retry: `{s}`: {why}"));
                        None
                    }
                })
                .collect(),
            None => DEFAULT_RETRY.to_vec(),
        };
        let concurrency = concurrency.unwrap_or(1);
        if concurrency == 0 || concurrency > 64 {
            self.problem(format!("{at}.concurrency: must be between 1 and 64"));
        }
        Some(Forward {
            target,
            timeout: self.seconds(&format!("{at}.timeout_secs"), raw.timeout_secs, 30),
            retry,
            concurrency,
            hide_env: Vec::new(), // filled in once every endpoint has been read
        })
    }
}

/// A directory that exists and is writable, or could be created: its nearest existing
/// ancestor is a writable directory. Creates nothing (`portaria check` must not).
fn usable_dir(dir: &Path) -> Result<(), String> {
    let existing = dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    if !existing.is_dir() {
        return Err(if existing == dir {
            format!("{} is not a directory", dir.display())
        } else {
            format!(
                "cannot create {}: {} is not a directory",
                dir.display(),
                existing.display()
            )
        });
    }
    if !writable(existing) {
        return Err(if existing == dir {
            format!("{} is not writable", dir.display())
        } else {
            format!(
                "cannot create {}: {} is not writable",
                dir.display(),
                existing.display()
            )
        });
    }
    Ok(())
}

#[cfg(unix)]
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(not(unix))]
fn writable(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| !m.permissions().readonly())
}

fn valid_name(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parses `500ms`, `10s`, `5m`, `2h`, `1d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected a number and a unit, like 10s".to_string())?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("the unit must be ms, s, m, h or d".into()),
    };
    n.checked_mul(ms)
        .map(Duration::from_millis)
        .ok_or_else(|| "too long".to_string())
}

#[cfg(unix)]
fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o077 != 0)
}

#[cfg(not(unix))]
fn readable_by_others(_: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_source() -> Source {
        Source::File(PathBuf::from("/srv/portaria/portaria.toml"))
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, file_source())
    }

    fn problems(text: &str) -> String {
        parse(text)
            .expect_err("config should be refused")
            .to_string()
    }

    const MINIMAL: &str = r#"
[[endpoint]]
path = "/webhooks/github"
provider = "github"
secret = "s3cret"
"#;

    #[test]
    fn the_embedded_example_is_valid() {
        let config = Config::parse(EXAMPLE, Source::Embedded).expect("example config is valid");
        assert!(config.server.listen.ip().is_loopback());
        assert!(!config.endpoints.is_empty());
    }

    #[test]
    fn defaults_fill_a_minimal_file() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.server.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.server.max_body_bytes, 1_048_576);
        assert_eq!(config.storage.retention_days, 30);
        assert_eq!(config.storage.dead_retention_days, 90);
        assert_eq!(config.storage.archive_dir, None);
        let endpoint = &config.endpoints[0];
        assert_eq!(
            endpoint.name, "github",
            "name defaults to the last path segment"
        );
        assert_eq!(endpoint.dedup.to_string(), "header:x-github-delivery");
        assert!(endpoint.forward.is_none());
    }

    #[test]
    fn the_admin_listener_defaults_to_loopback_9464_and_can_be_off() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(
            config.server.admin_listen,
            Some("127.0.0.1:9464".parse().unwrap())
        );
        let off = parse(&format!("[server]\nadmin_listen = \"off\"\n{MINIMAL}")).unwrap();
        assert_eq!(off.server.admin_listen, None);
        let any = parse(&format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(
            any.server.admin_listen,
            Some("127.0.0.1:0".parse().unwrap())
        );
        assert!(
            problems(&format!("[server]\nadmin_listen = \"9464\"\n{MINIMAL}"))
                .contains("server.admin_listen: `9464` is not an address")
        );
    }

    #[test]
    fn the_admin_listener_may_not_share_the_webhook_port() {
        for (listen, admin) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("127.0.0.1:8080", "0.0.0.0:8080"),
        ] {
            let msg = problems(&format!(
                "[server]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\n{MINIMAL}"
            ));
            assert!(msg.contains("is the webhook address"), "{msg}");
        }
        let other_ip = format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\nadmin_listen = \"127.0.0.2:8080\"\n{MINIMAL}"
        );
        assert!(parse(&other_ip).is_ok());
    }

    #[test]
    fn the_endpoint_name_dash_is_reserved_for_unknown_paths() {
        let msg = problems(
            "[[endpoint]]\npath = \"/webhooks/-\"\nprovider = \"github\"\nsecret = \"x\"\n",
        );
        assert!(msg.contains("`-` is reserved"), "{msg}");
    }

    #[test]
    fn relative_storage_paths_follow_the_config_file() {
        let config = parse(&format!("[storage]\npath = \"data/p.db\"\n{MINIMAL}")).unwrap();
        assert_eq!(
            config.storage.path,
            PathBuf::from("/srv/portaria/data/p.db")
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_line_and_column() {
        let msg = problems(&format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n{MINIMAL}"
        ));
        assert!(msg.contains("/srv/portaria/portaria.toml"), "{msg}");
        assert!(msg.contains("lisen"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        let msg = problems(&format!("{MINIMAL}secert = \"x\"\n"));
        assert!(msg.contains("secert"), "{msg}");
    }

    #[test]
    fn zero_timeouts_an_empty_name_and_a_bare_slash_are_refused() {
        for (extra, expected) in [
            (
                "[server]\nheader_timeout_secs = 0\n",
                "server.header_timeout_secs: must be at least 1",
            ),
            (
                "[server]\nbody_timeout_secs = 0\n",
                "server.body_timeout_secs: must be at least 1",
            ),
        ] {
            let msg = problems(&format!("{extra}{MINIMAL}"));
            assert!(msg.contains(expected), "{msg}");
        }
        let msg = problems(&format!(
            "{MINIMAL}forward = {{ command = [\"/bin/true\"], timeout_secs = 0 }}\n"
        ));
        assert!(
            msg.contains("forward.timeout_secs: must be at least 1"),
            "{msg}"
        );
        let msg = problems(&format!("{MINIMAL}name = \"\"\n"));
        assert!(msg.contains(".name: empty"), "{msg}");
        let msg = problems("[[endpoint]]\npath = \"/\"\nprovider = \"github\"\nsecret = \"x\"\n");
        assert!(msg.contains("must be a path below `/`"), "{msg}");
    }

    #[test]
    fn tolerance_without_a_signed_timestamp_is_a_warning() {
        let config = parse(&format!("{MINIMAL}tolerance_secs = 60\n")).unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("tolerance_secs: provider `github` signs no timestamp")),
            "{:?}",
            config.warnings
        );
        let stripe = "[[endpoint]]\npath = \"/s\"\nprovider = \"stripe\"\nsecret = \"whsec_x\"\n\
                      tolerance_secs = 60\n";
        assert!(parse(stripe).unwrap().warnings.is_empty());
    }

    #[test]
    fn a_parse_error_never_echoes_a_secret() {
        let head = "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\n";
        for (line, place) in [
            // A misspelt key: the parser's own message would quote the whole line.
            (
                r#"secert = "whsec_TOPSECRET""#,
                "line 4, column 1 (`secert`)",
            ),
            // A syntax error on the secret's line.
            (
                r#"secret = "whsec_TOPSECRET" junk"#,
                "line 4, column 28 (`secret`)",
            ),
            // The right key with the wrong type: serde quotes the value (escapes and all).
            (
                r#"secrets = "whsec_TOP\"SECRET""#,
                "line 4, column 11 (`secrets`)",
            ),
        ] {
            let msg = problems(&format!("{head}{line}\n"));
            assert!(!msg.contains("whsec") && !msg.contains("TOP"), "{msg}");
            assert!(msg.contains(place), "{place}: {msg}");
        }
        assert_eq!(
            without_quoted_strings(r#"invalid type: string "a\"b", expected a sequence"#),
            "invalid type: a string, expected a sequence"
        );
    }

    #[test]
    fn duplicate_paths_and_names_are_refused() {
        let msg = problems(&format!("{MINIMAL}{MINIMAL}"));
        assert!(msg.contains("`/webhooks/github` is used twice"), "{msg}");
        assert!(msg.contains("`github` is used twice"), "{msg}");
        assert!(
            msg.contains("line 7"),
            "names the second table's line: {msg}"
        );
    }

    #[test]
    fn secrets_must_be_given_exactly_once_and_not_empty() {
        let msg = problems("[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\n");
        assert!(msg.contains("no secret"), "{msg}");
        let msg = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret = \"x\"\nsecret_env = \"Y\"\n",
        );
        assert!(msg.contains("exactly one of"), "{msg}");
        let msg = problems("[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret = \"\"\n");
        assert!(msg.contains("endpoint[0] (line 1)"), "{msg}");
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn an_empty_list_of_secrets_is_refused_never_replaced() {
        let head = "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\n";
        for given in ["secrets = []", "secret_env = []", "secret_file = []"] {
            let msg = problems(&format!("{head}{given}\n"));
            assert!(
                msg.contains("the list of secrets is empty"),
                "{given}: {msg}"
            );
        }
        // A forward target's signing secret, too.
        let msg = problems(&format!(
            "{MINIMAL}forward = {{ url = \"http://127.0.0.1:9/x\", secret_env = [] }}\n"
        ));
        assert!(
            msg.contains("forward: the list of secrets is empty"),
            "{msg}"
        );
    }

    #[test]
    fn a_missing_environment_variable_is_named() {
        let msg = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"github\"\nsecret_env = \"PORTARIA_TEST_SURELY_UNSET_VAR\"\n",
        );
        assert!(
            msg.contains("PORTARIA_TEST_SURELY_UNSET_VAR is not set"),
            "{msg}"
        );
    }

    #[test]
    fn secret_files_hold_one_secret_per_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s"), "new\n\nold\n").unwrap();
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"s\"\n";
        let config = Config::parse(text, Source::File(dir.path().join("p.toml"))).unwrap();
        let verifier = &config.endpoints[0].verifier;
        let signed = verifier.sign(b"{}", 0, "d");
        let mut headers = http::HeaderMap::new();
        for (k, v) in &signed {
            headers.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        assert_eq!(
            verifier.verify(&headers, b"{}", 0).unwrap().secret_index(),
            0
        );
        let missing = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"/nonexistent/s\"\n",
        );
        assert!(missing.contains("cannot read /nonexistent/s"), "{missing}");
    }

    #[test]
    fn a_secret_file_others_can_read_is_a_warning_not_an_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("s");
        std::fs::write(&secret, "x\n").unwrap();
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"plowf\"\nsecret_file = \"s\"\n";
        let source = Source::File(dir.path().join("p.toml"));
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let config = Config::parse(text, source.clone()).unwrap();
        assert!(
            config.warnings[0].contains("chmod 600"),
            "{:?}",
            config.warnings
        );
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Config::parse(text, source).unwrap().warnings.is_empty());
    }

    #[test]
    fn database_commands_load_without_the_secrets() {
        let text = "[[endpoint]]\npath = \"/a\"\nprovider = \"standard-webhooks\"\nsecret_env = \"PORTARIA_TEST_NEVER_SET\"\nforward = { url = \"http://127.0.0.1:1/\", secret_file = \"/nonexistent\" }\n";
        assert!(parse(text).is_err(), "serve and check read them");
        let config = Config::parse_with(text, file_source(), Secrets::Skip).unwrap();
        assert_eq!(config.secret_variables, ["PORTARIA_TEST_NEVER_SET"]);
        let forward = config.endpoints[0].forward.as_ref().unwrap();
        assert_eq!(
            forward.hide_env,
            ["PORTARIA_TEST_NEVER_SET"],
            "commands never see secrets"
        );
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
    fn the_log_level_is_validated() {
        assert_eq!(parse(MINIMAL).unwrap().log.level, "info");
        let config = parse(&format!(
            "[log]\nlevel = \"warn,portaria=debug\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(config.log.level, "warn,portaria=debug");
        assert!(problems(&format!("[log]\nlevel = \"loud=[\"\n{MINIMAL}")).contains("log.level"));
    }

    #[test]
    fn a_missing_secret_does_not_hide_a_bad_provider() {
        let msg = problems(
            "[[endpoint]]\npath = \"/a\"\nprovider = \"paypal\"\nsecret_env = \"PORTARIA_TEST_SURELY_UNSET_VAR\"\n",
        );
        assert!(
            msg.contains("PORTARIA_TEST_SURELY_UNSET_VAR is not set"),
            "{msg}"
        );
        assert!(msg.contains("paypal"), "{msg}");
    }

    #[test]
    fn unknown_providers_and_bad_dedup_rules_are_named() {
        let msg = problems("[[endpoint]]\npath = \"/a\"\nprovider = \"paypal\"\nsecret = \"x\"\n");
        assert!(msg.contains("paypal"), "{msg}");
        let msg = problems(&format!("{MINIMAL}dedup = \"uuid\"\n"));
        assert!(msg.contains("endpoint[0] (line 2).dedup"), "{msg}");
    }

    #[test]
    fn storage_path_must_be_usable() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("[storage]\npath = \"{}\"\n{MINIMAL}", dir.path().display());
        assert!(problems(&text).contains("is a directory"));
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let text = format!(
            "[storage]\npath = \"{}/db.sqlite\"\n{MINIMAL}",
            file.display()
        );
        assert!(problems(&text).contains("is not a directory"));
    }

    #[test]
    fn retention_windows_must_be_at_least_a_day() {
        let config = parse(&format!(
            "[storage]\nretention_days = 7\ndead_retention_days = 365\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(config.storage.retention_days, 7);
        assert_eq!(config.storage.dead_retention_days, 365);
        let msg = problems(&format!("[storage]\ndead_retention_days = 0\n{MINIMAL}"));
        assert!(
            msg.contains("storage.dead_retention_days: must be at least 1"),
            "{msg}"
        );
        let msg = problems(&format!("[storage]\ndead_retention_days = -1\n{MINIMAL}"));
        assert!(msg.contains("dead_retention_days"), "{msg}");
    }

    #[test]
    fn archive_dir_follows_the_config_file_and_must_be_creatable() {
        let dir = tempfile::tempdir().unwrap();
        let source = Source::File(dir.path().join("p.toml"));
        let text = format!("[storage]\narchive_dir = \"archive/pruned\"\n{MINIMAL}");
        let config = Config::parse(&text, source.clone()).unwrap();
        let archive = dir.path().join("archive/pruned");
        assert_eq!(
            config.storage.archive_dir.as_deref(),
            Some(archive.as_path())
        );
        assert!(!archive.exists(), "validation creates nothing");

        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let text = format!("[storage]\narchive_dir = \"plain\"\n{MINIMAL}");
        let msg = Config::parse(&text, source.clone())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("storage.archive_dir") && msg.contains("is not a directory"),
            "{msg}"
        );
        let text = format!("[storage]\narchive_dir = \"plain/below\"\n{MINIMAL}");
        let msg = Config::parse(&text, source.clone())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("cannot create"), "{msg}");
        let text = format!("[storage]\narchive_dir = \"\"\n{MINIMAL}");
        let msg = Config::parse(&text, source).unwrap_err().to_string();
        assert!(msg.contains("storage.archive_dir: is empty"), "{msg}");
    }

    #[test]
    fn forward_targets_are_validated() {
        let with = |forward: &str| format!("{MINIMAL}forward = {forward}\n");
        let config = parse(&with(r#"{ command = ["/bin/true"], timeout_secs = 5 }"#)).unwrap();
        let forward = config.endpoints[0].forward.as_ref().unwrap();
        assert!(matches!(&forward.target, Target::Command(argv) if argv == &["/bin/true"]));
        assert_eq!(forward.timeout, Duration::from_secs(5));
        // The default schedule, as the README and the example configs write it.
        let documented: Vec<Duration> = ["10s", "1m", "5m", "30m", "2h", "12h"]
            .iter()
            .map(|s| parse_duration(s).unwrap())
            .collect();
        assert_eq!(forward.retry, documented);
        assert_eq!(forward.concurrency, 1);

        assert!(problems(&with(r#"{ command = [] }"#)).contains("forward.command"));
        assert!(problems(&with(r#"{ url = "https://example.com/x" }"#)).contains("plain http://"));
        assert!(
            problems(&with(
                r#"{ url = "http://127.0.0.1:1/x", command = ["/bin/true"] }"#
            ))
            .contains("exactly one of command or url")
        );
        assert!(
            problems(&with(
                r#"{ url = "http://127.0.0.1:1/x", secret = "plain" }"#
            ))
            .contains("whsec_")
        );
        let signed = parse(&with(r#"{ url = "http://127.0.0.1:1/x", secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }"#)).unwrap();
        let target = &signed.endpoints[0].forward.as_ref().unwrap().target;
        assert!(matches!(
            target,
            Target::Url {
                signing_key: Some(_),
                ..
            }
        ));
        assert!(
            !format!("{target:?}").contains("MfKQ"),
            "Debug must not show the key"
        );
    }

    #[test]
    fn retry_schedules_parse_and_bad_ones_are_named() {
        let text = format!(
            "{MINIMAL}forward = {{ command = [\"/bin/true\"] }}\nretry = [\"50ms\", \"2s\", \"1h\"]\nconcurrency = 4\n"
        );
        let config = parse(&text).unwrap();
        let forward = config.endpoints[0].forward.as_ref().unwrap();
        assert_eq!(
            forward.retry,
            vec![
                Duration::from_millis(50),
                Duration::from_secs(2),
                Duration::from_secs(3600)
            ]
        );
        assert_eq!(forward.concurrency, 4);
        let text =
            format!("{MINIMAL}forward = {{ command = [\"/bin/true\"] }}\nretry = [\"soon\"]\n");
        assert!(problems(&text).contains("`soon`"));
        assert!(
            problems(&format!("{MINIMAL}retry = [\"1s\"]\n")).contains("need a forward target")
        );
    }

    #[test]
    fn lookup_order_is_flag_then_env_then_user_then_system_then_embedded() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        let system = dir.path().join("system.toml");
        let flag = PathBuf::from("/flag.toml");
        let env = PathBuf::from("/env.toml");
        std::fs::write(&user, "").unwrap();
        std::fs::write(&system, "").unwrap();

        let pick =
            |f: Option<&Path>, e: Option<PathBuf>, u: Option<PathBuf>, s: &Path| locate(f, e, u, s);
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

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 weeks").is_err());
    }
}
