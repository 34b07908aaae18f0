//! Validation: the raw file to the checked model, collecting every problem instead of stopping
//! at the first, plus the warnings that do not stop a start.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::raw::{RawEndpoint, RawForward, RawLog, RawSecret, RawServer, RawStorage};
use super::toml_error::line_of;
use super::validator::Validator;
use super::{
    DEFAULT_ADMIN_LISTEN, DEFAULT_MIN_BODY_BYTES_PER_SEC, DEFAULT_RETRY, Endpoint, Forward, Limits,
    Log, Memory, Secrets, Server, Storage, Target, UNKNOWN_ENDPOINT, default_db_path,
};
use crate::dedup::DedupRule;
use crate::verify::{Secret, Settings, Verifier, efi, standard_webhooks, takes_secret};

impl Validator<'_> {
    pub(super) fn log(&mut self, raw: RawLog) -> Log {
        let level = raw.level.unwrap_or_else(|| "info".into());
        if let Err(e) = level.parse::<tracing_subscriber::filter::Targets>() {
            self.problem(format!("log.level: `{level}` is not a level or filter like `info` or `warn,portaria=debug`: {e}"));
        }
        Log { level }
    }

    pub(super) fn server(&mut self, mut raw: RawServer) -> Option<Server> {
        let canary = self.canary(&mut raw);
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
        if raw.max_connections == Some(0) {
            self.problem("server.max_connections: must be at least 1");
        }
        // Unset, the connection cap and the body budget fit the memory portaria may use.
        let memory = Memory::probe();
        let derived = Limits::derive(memory.bytes, max_body_bytes, raw.max_connections);
        let body_budget_bytes = raw.body_budget_bytes.unwrap_or(derived.body_budget_bytes);
        if body_budget_bytes < max_body_bytes {
            self.problem(format!(
                "server.body_budget_bytes: {body_budget_bytes} is less than max_body_bytes \
                 ({max_body_bytes}): no body of the largest size could ever be taken"
            ));
        }
        let admin_listen = self.admin_listen(raw.admin_listen, listen);
        let real_ip = self.real_ip(raw.real_ip_header, raw.trusted_proxies);
        let tls = self.tls(raw.tls);
        Some(Server {
            listen,
            admin_listen,
            max_body_bytes,
            header_timeout: self.seconds("server.header_timeout_secs", raw.header_timeout_secs, 10),
            body_timeout: self.seconds("server.body_timeout_secs", raw.body_timeout_secs, 20),
            min_body_bytes_per_sec: raw
                .min_body_bytes_per_sec
                .unwrap_or(DEFAULT_MIN_BODY_BYTES_PER_SEC),
            max_connections: derived.max_connections,
            body_budget_bytes,
            memory,
            real_ip,
            tls,
            canary,
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

    pub(super) fn storage(&mut self, raw: RawStorage) -> Option<Storage> {
        let postgres = self.database_url(&raw);
        let path = match raw.path {
            _ if postgres.is_some() => PathBuf::new(),
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
        if postgres.is_none() && path.is_dir() {
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
            postgres,
            retention_days,
            dead_retention_days,
            archive_dir,
        })
    }

    pub(super) fn resolve(&self, path: &Path) -> PathBuf {
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

    pub(super) fn line_of(&self, span: std::ops::Range<usize>) -> usize {
        line_of(self.text, span.start)
    }

    pub(super) fn endpoints(&mut self, raw: Vec<Spanned<RawEndpoint>>) -> Vec<Endpoint> {
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
                for path in endpoint.paths() {
                    if !paths.insert(path.clone()) {
                        let efi = efi::path_note(&path);
                        self.problem(format!("{at}.path: `{path}` is used twice{efi}"));
                    }
                }
                out.push(endpoint);
            }
        }
        out
    }

    fn endpoint(&mut self, at: &str, raw: RawEndpoint) -> Option<Endpoint> {
        let before = self.problems.len();
        let path = match raw.path {
            Some(p) if plain_path(&p) => p,
            Some(p) => {
                self.problem(format!(
                    "{at}.path: `{p}` must be a path below `/` with no `?`, `#`, `%`, spaces \
                     or `.`/`..` segments, like /webhooks/stripe"
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
        if name == UNKNOWN_ENDPOINT {
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
        let client_cert =
            self.client_cert_rule(at, raw.require_client_cert, raw.client_cert_subject);
        // Efí's mTLS mode: the client certificate is the credential, no `?hmac=` secret.
        let by_certificate = provider == "efi"
            && client_cert.is_some()
            && [
                given.secret.is_none(),
                given.secret_env.is_none(),
                given.secret_file.is_none(),
            ]
            .into_iter()
            .all(|none| none)
            && raw.secrets.is_none();
        let takes_secret = takes_secret(&provider) && !by_certificate;
        // `send` and `verify` read this one endpoint's secrets, and no other.
        let skipping = self.secrets;
        if self.secrets_of == Some(name.as_str()) {
            self.secrets = Secrets::Load;
        }
        let secrets = self.secrets(at, given, raw.secrets, takes_secret);
        // With no usable secret (`secrets` has reported why, so this endpoint is refused
        // below), or none loaded (`Secrets::Skip`), check the provider and its options with a
        // stand-in key of whatever form the provider needs, so that every problem shows in one
        // run. A provider that verifies with a public key takes no secret at all.
        let stand_in = takes_secret && (secrets.is_empty() || self.secrets == Secrets::Skip);
        self.secrets = skipping;
        let (jwks, pem) = self.key_files(at, raw.jwks_file, raw.jwks_url, raw.public_key_file);
        let settings = Settings {
            hmac: raw.signature.as_ref(),
            public_url: raw.public_url.as_deref(),
            credential_headers: raw.credential_headers.as_deref(),
            query_param: raw.query_param.as_deref(),
            public_key: raw.public_key.as_deref(),
            jwks: jwks.as_deref(),
            public_key_pem: pem.as_deref(),
        };
        let built = if by_certificate {
            Verifier::by_client_certificate(&provider, &settings)
        } else if stand_in {
            Verifier::without_secrets(&provider, &settings, raw.tolerance_secs)
        } else {
            Verifier::with_settings(&provider, &settings, &secrets, raw.tolerance_secs)
        };
        let verifier = match built {
            Ok(v) => {
                if raw.public_url.is_some() && !v.signs_public_url() {
                    let why = format!("{at}.public_url: provider `{provider}` does not sign it");
                    self.warnings.push(format!("{why}, so it has no effect"));
                }
                if raw.tolerance_secs.is_some() && !v.signs_timestamp() {
                    self.warnings.push(format!(
                        "{at}.tolerance_secs: provider `{provider}` signs no timestamp here, so \
                         there is no window to set; it has no effect"
                    ));
                }
                Some(v)
            }
            Err(why) => {
                let known = crate::verify::PROVIDERS;
                let hint = match known.contains(&provider.as_str()) {
                    true => String::new(),
                    false => crate::suggest::hint(&provider, known.iter().copied()),
                };
                self.problem(format!("{at}: {why}{hint}"));
                None
            }
        };
        let verifier = self.event_fields(at, verifier, raw.event_type, raw.object_id);
        let export_fields = self.export_fields(at, raw.export_fields);
        let routes = self.routes(at, raw.forward, raw.retry, raw.concurrency, raw.route);
        if let Some(v) = &verifier {
            self.unsigned_event_type(at, &name, v, &routes);
        }
        let (configured, unsigned_ok) = (raw.dedup.is_some(), raw.dedup_unsigned == Some(true));
        let dedup = match raw.dedup.map(|d| DedupRule::parse_list(&d.into_vec())) {
            Some(Ok(rule)) => Some(rule),
            Some(Err(why)) => {
                self.problem(format!("{at}.dedup: {why}"));
                None
            }
            None => verifier.as_ref().map(Verifier::default_dedup),
        };
        // A credential header is redacted before the headers are stored: a dedup key read from
        // it would store the credential itself.
        if let (Some(rule), Some(v)) = (&dedup, &verifier)
            && let Err(why) = rule.refuse_credential_headers(v.credential_headers())
        {
            self.problem(format!("{at}.dedup: {why}"));
        }
        // A key read from what the signature does not cover (issue 23): only when asked for.
        if let (Some(rule), Some(v), true) = (&dedup, &verifier, configured && !unsigned_ok)
            && let Err(why) = v.refuse_unsigned_dedup(rule)
        {
            self.problem(format!("{at}.dedup: {why}"));
        }
        if unsigned_ok && !configured {
            let why = "there is no `dedup` rule: the provider's default reads signed parts only";
            self.warnings
                .push(format!("{at}.dedup_unsigned: {why}, so it has no effect"));
        }
        let reconcile = self.reconcile(at, &provider, dedup.as_ref(), raw.reconcile);
        let provider = verifier.as_ref().map(Verifier::provider);
        let dedup_window = self.dedup_window(at, raw.dedup_window.as_deref(), provider);
        let allow_ips = self.allow_ips(at, raw.allow_ips, verifier.as_ref());
        let quiet_after = self.quiet_after(at, raw.quiet_after.as_deref());
        let unrouted_after = self.unrouted_after(at, raw.unrouted_after.as_deref(), &routes);
        let quarantine = self.quarantine(at, raw.quarantine_keep, raw.quarantine_for.as_deref());
        if self.problems.len() != before {
            return None;
        }
        Some(Endpoint {
            name,
            path,
            verifier: verifier?,
            dedup: dedup?,
            dedup_window,
            routes,
            allow_ips,
            quiet_after,
            unrouted_after,
            client_cert,
            export_fields,
            reconcile,
            quarantine,
        })
    }

    pub(super) fn forward(
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
        let target = match (raw.command, raw.pipe, raw.url) {
            (Some(argv), None, None) => {
                if argv.first().is_none_or(|program| program.is_empty()) {
                    self.problem(format!("{at}.command: give the program and its arguments, e.g. [\"/usr/local/bin/on-payment\"]"));
                }
                self.program_ready(&format!("{at}.command"), &argv);
                if !secrets.is_empty() {
                    self.problem(format!("{at}: a forward secret signs URL forwards only"));
                }
                Target::Command(argv)
            }
            (None, Some(argv), None) => {
                if argv.first().is_none_or(|program| program.is_empty()) {
                    self.problem(format!("{at}.pipe: give the program and its arguments, e.g. [\"python3\", \"/srv/handler.py\"]"));
                }
                self.program_ready(&format!("{at}.pipe"), &argv);
                if !secrets.is_empty() {
                    self.problem(format!("{at}: a forward secret signs URL forwards only"));
                }
                Target::Pipe { argv }
            }
            (None, None, Some(url)) => {
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
                        Ok(key) => Some(Secret::new(key)),
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
                self.problem(format!("{at}: set exactly one of command, pipe or url"));
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
        })
    }
}

/// A directory that exists and is writable, or could be created: its nearest existing
/// ancestor is a writable directory. Creates nothing (`portaria check` must not).
pub(super) fn usable_dir(dir: &Path) -> Result<(), String> {
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
pub(super) fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(not(unix))]
pub(super) fn writable(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| !m.permissions().readonly())
}

pub(super) fn valid_name(name: &str) -> bool {
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

/// An endpoint path as routing matches it: the request's raw path, byte for byte. So no query
/// or fragment, and nothing a client would normalise or decode first (`%`, `.` and `..`
/// segments): such a path could never be matched as written.
fn plain_path(p: &str) -> bool {
    p.starts_with('/')
        && p.len() > 1
        && !p.contains(['?', '#', ' ', '%'])
        && !p
            .split('/')
            .any(|segment| segment == "." || segment == "..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{MINIMAL, parse, problems};
    use crate::config::{Config, Source};

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
        assert_eq!(endpoint.dedup.to_string(), "body-sha256");
        assert!(endpoint.routes.is_empty());
    }

    #[test]
    fn the_connection_cap_and_the_body_budget_follow_the_memory_unless_set() {
        let config = parse(MINIMAL).unwrap();
        let server = &config.server;
        let derived = Limits::derive(server.memory.bytes, server.max_body_bytes, None);
        assert_eq!(server.max_connections, derived.max_connections);
        assert_eq!(server.body_budget_bytes, derived.body_budget_bytes);
        assert_eq!(server.min_body_bytes_per_sec, 1024);
        let set = parse(&format!(
            "[server]\nmax_body_bytes = 1000\nmax_connections = 7\nbody_budget_bytes = 5000\n\
             min_body_bytes_per_sec = 0\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(set.server.max_connections, 7);
        assert_eq!(set.server.body_budget_bytes, 5000);
        assert_eq!(set.server.min_body_bytes_per_sec, 0);
        // A cap set alone bounds the derived budget.
        let capped = parse(&format!("[server]\nmax_connections = 3\n{MINIMAL}")).unwrap();
        assert!(capped.server.body_budget_bytes <= 3 * 1_048_576);
        let msg = problems(&format!(
            "[server]\nmax_body_bytes = 1000\nbody_budget_bytes = 999\n{MINIMAL}"
        ));
        assert!(
            msg.contains("server.body_budget_bytes: 999 is less than max_body_bytes (1000)"),
            "{msg}"
        );
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
        for path in [
            "/webhooks/%70agarme",
            "/webhooks/../x",
            "/a/./b",
            "/a/..",
            "/a b",
        ] {
            let msg = problems(&format!(
                "[[endpoint]]\npath = \"{path}\"\nprovider = \"github\"\nsecret = \"x\"\n"
            ));
            assert!(msg.contains("must be a path below `/`"), "{path}: {msg}");
        }
        assert!(plain_path("/webhooks/v1.2/stripe..x"));
    }

    #[test]
    fn a_public_url_the_provider_does_not_sign_is_a_warning() {
        let config = parse(&format!("{MINIMAL}public_url = \"https://x.example/a\"\n")).unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("public_url: provider `github` does not sign it")),
            "{:?}",
            config.warnings
        );
        let twilio = "[[endpoint]]\npath = \"/webhooks/twilio\"\nprovider = \"twilio\"\n\
                      secret = \"twilio-auth-token-0123\"\npublic_url = \"https://x.example/webhooks/twilio\"\n";
        assert!(parse(twilio).unwrap().warnings.is_empty());
        let msg = problems("[[endpoint]]\npath = \"/t\"\nprovider = \"twilio\"\nsecret = \"t\"\n");
        assert!(msg.contains("needs `public_url"), "{msg}");
        let msg = problems(&twilio.replace("/webhooks/twilio\"\n", "/webhooks/twilio?a=1\"\n"));
        assert!(msg.contains("must not have a query string"), "{msg}");
    }

    #[test]
    fn dedup_may_be_an_ordered_list() {
        let config = parse(&format!(
            "{MINIMAL}dedup_unsigned = true\ndedup = [\"header:X-Event-Id\", \"body-sha256\"]\n"
        ))
        .unwrap();
        assert_eq!(
            config.endpoints[0].dedup.to_string(),
            r#"["header:x-event-id", "body-sha256"]"#
        );
        let one = parse(&format!("{MINIMAL}dedup = [\"json:/id\"]\n")).unwrap();
        assert_eq!(one.endpoints[0].dedup.to_string(), "json:/id");
        let msg = problems(&format!("{MINIMAL}dedup = []\n"));
        assert!(msg.contains(".dedup: the dedup list is empty"), "{msg}");
        let msg = problems(&format!("{MINIMAL}dedup = [\"json:/id\", \"uuid\"]\n"));
        assert!(msg.contains(".dedup: unknown dedup rule `uuid`"), "{msg}");
        // A credential header is refused inside a list too.
        let msg = problems(&format!(
            "{MINIMAL}dedup = [\"json:/id\", \"header:Authorization\"]\n"
        ));
        assert!(msg.contains("carries this provider's credential"), "{msg}");
    }

    #[test]
    fn a_dedup_rule_reading_what_is_not_signed_needs_dedup_unsigned() {
        // GitHub signs the body, no header: its delivery header is anyone's to change.
        let msg = problems(&format!("{MINIMAL}dedup = \"header:X-GitHub-Delivery\"\n"));
        assert!(
            msg.contains(
                ".dedup: `header:x-github-delivery` reads the header `x-github-delivery`, which \
                 the github signature does not cover"
            ) && msg.contains("set `dedup_unsigned = true`"),
            "{msg}"
        );
        // Inside a list too, wherever it stands.
        let msg = problems(&format!(
            "{MINIMAL}dedup = [\"json:/id\", \"header:X-GitHub-Delivery\"]\n"
        ));
        assert!(msg.contains("the header `x-github-delivery`"), "{msg}");
        let accepted = "dedup_unsigned = true\ndedup = \"header:X-GitHub-Delivery\"\n";
        let config = parse(&format!("{MINIMAL}{accepted}")).unwrap();
        assert_eq!(
            config.endpoints[0].dedup.to_string(),
            "header:x-github-delivery"
        );
        // What is signed needs nothing: the body here, a signed header or the body elsewhere.
        for rule in ["body-sha256", "json:/id"] {
            parse(&format!("{MINIMAL}dedup = \"{rule}\"\n")).unwrap();
        }
        let relya = "[[endpoint]]\npath = \"/r\"\nprovider = \"relya\"\nsecret = \"s\"\n";
        parse(&format!("{relya}dedup = \"header:x-relya-delivery-id\"\n")).unwrap();
        let svix = "[[endpoint]]\npath = \"/s\"\nprovider = \"svix\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
        parse(&format!("{svix}dedup = \"header:webhook-id\"\n")).unwrap();
        let msg = problems(&format!("{svix}dedup = \"header:svix-id\"\n"));
        assert!(msg.contains("the header `svix-id`"), "{msg}");
        // Mercado Pago signs no body; Asaas signs nothing, its token admits any request alike.
        let mp = "[[endpoint]]\npath = \"/m\"\nprovider = \"mercadopago\"\nsecret = \"s\"\n";
        let msg = problems(&format!("{mp}dedup = \"json:/id\"\n"));
        assert!(
            msg.contains("reads the body, which the mercadopago signature"),
            "{msg}"
        );
        parse(&format!("{mp}dedup = \"header:x-request-id\"\n")).unwrap();
        let asaas = "[[endpoint]]\npath = \"/a\"\nprovider = \"asaas\"\nsecret = \"s\"\n";
        parse(&format!("{asaas}dedup = \"header:x-anything\"\n")).unwrap();
        // A generic scheme signs the headers its template names.
        let hmac = "[[endpoint]]\npath = \"/h\"\nprovider = \"hmac\"\nsecret = \"s\"\n\
                    signature = { header = \"X-Sig\", template = \"{header:x-id}.{body}\" }\n";
        parse(&format!("{hmac}dedup = \"header:x-id\"\n")).unwrap();
        assert!(problems(&format!("{hmac}dedup = \"header:x-other\"\n")).contains("x-other"));
        // Set without a rule: a warning that it does nothing.
        let config = parse(&format!("{MINIMAL}dedup_unsigned = true\n")).unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("dedup_unsigned") && w.contains("no effect")),
            "{:?}",
            config.warnings
        );
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
        let stripe = "[[endpoint]]\npath = \"/s\"\nprovider = \"stripe\"\nsecret = \"whsec_0123456789abcdef\"\n\
                      tolerance_secs = 60\n";
        assert!(parse(stripe).unwrap().warnings.is_empty());
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
    fn an_efi_endpoint_answers_on_its_path_plus_pix_and_takes_both() {
        let efi = "[[endpoint]]\npath = \"/webhooks/efi\"\nprovider = \"efi\"\nsecret = \"e\"\n";
        let config = parse(efi).unwrap();
        assert_eq!(
            config.endpoints[0].paths(),
            ["/webhooks/efi", "/webhooks/efi/pix"]
        );
        assert_eq!(
            parse(MINIMAL).unwrap().endpoints[0].paths(),
            ["/webhooks/github"]
        );
        // Another endpoint at the appended path: refused, saying why.
        let other =
            "[[endpoint]]\npath = \"/webhooks/efi/pix\"\nprovider = \"github\"\nsecret = \"g\"\n";
        for text in [format!("{efi}{other}"), format!("{other}{efi}")] {
            let msg = problems(&text);
            assert!(
                msg.contains("`/webhooks/efi/pix` is used twice (an `efi` endpoint answers"),
                "{msg}"
            );
        }
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
        let forward = &config.endpoints[0].routes[0].forward;
        assert!(matches!(&forward.target, Target::Command(argv) if argv == &["/bin/true"]));
        assert_eq!(forward.timeout, Duration::from_secs(5));
        // The default schedule, as docs/forwarding.md and the example configs write it.
        let documented: Vec<Duration> = ["10s", "1m", "5m", "30m", "2h", "12h"]
            .iter()
            .map(|s| parse_duration(s).unwrap())
            .collect();
        assert_eq!(forward.retry, documented);
        assert_eq!(forward.concurrency, 1);

        assert!(problems(&with(r#"{ command = [] }"#)).contains("forward.command"));
        let piped = parse(&with(
            r#"{ pipe = ["python3", "/srv/handler.py"], timeout_secs = 7 }"#,
        ))
        .unwrap();
        let forward = &piped.endpoints[0].routes[0].forward;
        assert!(
            matches!(&forward.target, Target::Pipe { argv } if argv == &["python3", "/srv/handler.py"])
        );
        assert_eq!(forward.timeout, Duration::from_secs(7));
        assert!(problems(&with(r#"{ pipe = [] }"#)).contains("forward.pipe"));
        assert!(problems(&with(r#"{ pipe = [""] }"#)).contains("forward.pipe"));
        assert!(
            problems(&with(r#"{ pipe = ["/bin/cat"], command = ["/bin/true"] }"#))
                .contains("exactly one of command, pipe or url")
        );
        assert!(
            problems(&with(
                r#"{ pipe = ["/bin/cat"], secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }"#
            ))
            .contains("signs URL forwards only")
        );
        assert!(problems(&with(r#"{ url = "https://example.com/x" }"#)).contains("plain http://"));
        assert!(
            problems(&with(
                r#"{ url = "http://127.0.0.1:1/x", command = ["/bin/true"] }"#
            ))
            .contains("exactly one of command, pipe or url")
        );
        assert!(
            problems(&with(
                r#"{ url = "http://127.0.0.1:1/x", secret = "plain" }"#
            ))
            .contains("whsec_")
        );
        let signed = parse(&with(r#"{ url = "http://127.0.0.1:1/x", secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }"#)).unwrap();
        let target = &signed.endpoints[0].routes[0].forward.target;
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
        let forward = &config.endpoints[0].routes[0].forward;
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
    fn durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn credential_headers_and_query_param_belong_to_their_providers() {
        let cielo = "[[endpoint]]\npath = \"/c\"\nprovider = \"cielo\"\n\
                     credential_headers = [\"X-Shop-Key\", \"X-Shop-Id\"]\n\
                     secrets = [\"k\", \"i\"]\n";
        let config = parse(cielo).unwrap();
        let verifier = &config.endpoints[0].verifier;
        assert_eq!(verifier.credential_headers(), ["x-shop-key", "x-shop-id"]);
        let msg = problems(&cielo.replace("[\"k\", \"i\"]", "[\"k\"]"));
        assert!(msg.contains("give 2 secret(s), one per header"), "{msg}");
        let msg = problems(&format!("{MINIMAL}credential_headers = [\"X-Key\"]\n"));
        assert!(
            msg.contains(
                "`credential_headers` is only allowed with providers `cielo` and `picpay`"
            ),
            "{msg}"
        );
        let msg = problems(&format!("{MINIMAL}query_param = \"token\"\n"));
        assert!(msg.contains("`query_param` is only allowed"), "{msg}");
        let vindi = "[[endpoint]]\npath = \"/v\"\nprovider = \"vindi\"\nsecret = \"t\"\n\
                     query_param = \"chave\"\n";
        let signed = parse(vindi).unwrap().endpoints[0]
            .verifier
            .sign_request(b"{}", 0, "")
            .unwrap();
        assert_eq!(signed.query.as_deref(), Some("chave=t"));
        // iugu: its token in the query too, and never without `allow_ips`.
        let iugu = "[[endpoint]]\npath = \"/i\"\nprovider = \"iugu\"\nsecret = \"t\"\n";
        let msg = problems(iugu);
        assert!(
            msg.contains("(line 1).allow_ips: missing: iugu signs nothing")
                && msg.contains("fetching the invoice")
                && msg.contains("98.82.243.132/32"),
            "{msg}"
        );
        let allowed = format!("{iugu}allow_ips = [\"98.82.243.132/32\"]\nquery_param = \"k\"\n");
        let config = parse(&allowed).unwrap();
        assert_eq!(config.endpoints[0].verifier.provider(), "iugu");
        assert_eq!(
            config.endpoints[0].dedup.to_string(),
            "iugu-event-id-status"
        );
        // Without its secrets (the database commands), a config with a hex key and a header set
        // still loads, and verifies nothing.
        let text = format!(
            "{cielo}[[endpoint]]\npath = \"/a\"\nprovider = \"adyen\"\n\
             secret_env = \"PORTARIA_TEST_SURELY_UNSET_VAR\"\n"
        );
        let source = Source::File(std::path::PathBuf::from("/srv/portaria/portaria.toml"));
        let config = Config::parse_with(&text, source, Secrets::Skip);
        let config = config.unwrap();
        let cielo_verifier = &config.endpoints[0].verifier;
        let h: http::HeaderMap = [("x-shop-key", "k"), ("x-shop-id", "i")]
            .into_iter()
            .map(|(n, v)| (http::HeaderName::from_static(n), v.parse().unwrap()))
            .collect();
        assert!(cielo_verifier.verify(&h, b"{}", 0).is_err());
        assert_eq!(config.endpoints[1].verifier.provider(), "adyen");
        // The credential header cannot be the dedup key: it is not stored.
        let msg = problems(&format!("{cielo}dedup = \"header:x-shop-id\"\n"));
        assert!(msg.contains("carries this provider's credential"), "{msg}");
    }
}
