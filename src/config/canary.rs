//! `[server] public_url`, `canary_every` and `canary_ca_file`: the canary that posts a probe
//! through the tunnel to portaria's own [`CANARY_PATH`] (`canary`, docs/tunnels.md "Canary").
//!
//! `public_url` is what the gateways call: `https://`, or `http://` to this machine only (a
//! test), since the outbound client sends plain http nowhere else. The probe runs every
//! `canary_every` (5 minutes by default; `"off"` turns it off); `canary_ca_file` is an extra
//! CA for the public URL's certificate, beside the system's roots (a tunnel with a private CA,
//! a test). No endpoint may take [`CANARY_PATH`], canary or not, so turning the canary on never
//! takes a path away.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::raw::RawServer;
use super::validate::parse_duration;
use super::validator::Validator;
use super::{Endpoint, Secrets};

/// The path portaria answers the canary's probe on itself (never an endpoint's).
pub const CANARY_PATH: &str = "/webhooks/_canary";

/// How often the probe goes out unless `canary_every` says otherwise.
pub const DEFAULT_CANARY_EVERY: Duration = Duration::from_secs(5 * 60);

/// The shortest `canary_every` (tests); under a minute is warned about.
const MIN_CANARY_EVERY: Duration = Duration::from_millis(100);

/// The canary, as validated: it runs when the config has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canary {
    /// `public_url` as written, without a trailing `/`.
    pub public_url: String,
    /// Where the probe is posted: `public_url` + [`CANARY_PATH`].
    pub probe_url: http::Uri,
    pub every: Duration,
    /// `canary_ca_file`, absolute, and its certificates (read at validation).
    pub ca_file: Option<PathBuf>,
    pub extra_roots: Vec<CertificateDer<'static>>,
}

impl Validator<'_> {
    /// The canary of `[server]`: None without `public_url`, or with `canary_every = "off"`.
    pub(super) fn canary(&mut self, raw: &mut RawServer) -> Option<Canary> {
        let (url, every, ca) = (
            raw.public_url.take(),
            raw.canary_every.take(),
            raw.canary_ca_file.take(),
        );
        let Some(url) = url else {
            for (key, set) in [
                ("canary_every", every.is_some()),
                ("canary_ca_file", ca.is_some()),
            ] {
                if set {
                    self.problem(format!(
                        "server.{key}: the canary needs server.public_url, the address the \
                         gateways call (e.g. public_url = \"https://hooks.example.com\")"
                    ));
                }
            }
            return None;
        };
        let public_url = url.trim_end_matches('/').to_string();
        let probe_url = self.public_url(&public_url)?;
        let every = match every.as_deref().map(str::trim) {
            None => DEFAULT_CANARY_EVERY,
            Some("off") => return None,
            Some(text) => match parse_duration(text) {
                Ok(d) if d >= MIN_CANARY_EVERY => {
                    if d < Duration::from_secs(60) {
                        self.warnings.push(format!(
                            "server.canary_every = \"{text}\": a probe through the tunnel that \
                             often is for tests; a few minutes is plenty"
                        ));
                    }
                    d
                }
                Ok(_) => {
                    self.problem("server.canary_every: must be at least 100ms, or \"off\"");
                    return None;
                }
                Err(why) => {
                    self.problem(format!("server.canary_every: {why}, or \"off\""));
                    return None;
                }
            },
        };
        let (ca_file, extra_roots) = match ca {
            None => (None, Vec::new()),
            Some(path) => {
                let path = self.resolve(Path::new(&path));
                let certs = match self.secrets {
                    // The commands that skip secrets never call out: no need to read it.
                    Secrets::Skip => Vec::new(),
                    Secrets::Load => match super::tls::certificates(&path, "server.canary_ca_file")
                    {
                        Ok(certs) => certs,
                        Err(why) => {
                            self.problem(why);
                            return None;
                        }
                    },
                };
                (Some(path), certs)
            }
        };
        Some(Canary {
            public_url,
            probe_url,
            every,
            ca_file,
            extra_roots,
        })
    }

    /// The probe's URL, if `url` is one the canary can call.
    fn public_url(&mut self, url: &str) -> Option<http::Uri> {
        let bad = |why: &str| {
            format!(
                "server.public_url: `{url}` {why} (the address the gateways call, like \
                 https://hooks.example.com)"
            )
        };
        let parsed = match url.parse::<http::Uri>() {
            Ok(uri) => uri,
            Err(_) => {
                self.problem(bad("is not a URL"));
                return None;
            }
        };
        let host = parsed.host().unwrap_or("");
        let why = match parsed.scheme_str() {
            _ if host.is_empty() => Some("has no host"),
            _ if parsed.authority().is_some_and(|a| a.as_str().contains('@')) => {
                Some("holds a user or password")
            }
            _ if parsed.query().is_some() || url.contains('#') => Some("has a query or fragment"),
            Some("https") => None,
            Some("http") if loopback(host) => None,
            Some("http") => Some("is plain http to another machine: use https://"),
            _ => Some("must start with https://"),
        };
        if let Some(why) = why {
            self.problem(bad(why));
            return None;
        }
        match format!("{url}{CANARY_PATH}").parse() {
            Ok(probe) => Some(probe),
            Err(_) => {
                self.problem(bad("is not a URL"));
                None
            }
        }
    }

    /// No endpoint may take the canary's path.
    pub(super) fn check_canary_path(&mut self, endpoints: &[Endpoint]) {
        for e in endpoints.iter().filter(|e| e.path == CANARY_PATH) {
            self.problem(format!(
                "endpoint {}: path `{CANARY_PATH}` is portaria's own (the canary's probe, \
                 [server] public_url); choose another path",
                e.name
            ));
        }
    }
}

/// A host on this machine: `localhost` or a loopback address.
pub(super) fn loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{MINIMAL, parse, problems};
    use super::*;

    fn server(lines: &str) -> String {
        format!("[server]\n{lines}\n{MINIMAL}")
    }

    #[test]
    fn the_canary_runs_every_five_minutes_once_a_public_url_is_set() {
        assert_eq!(parse(MINIMAL).unwrap().server.canary, None);
        let config = parse(&server("public_url = \"https://hooks.example.com/\"")).unwrap();
        let canary = config.server.canary.unwrap();
        assert_eq!(canary.public_url, "https://hooks.example.com");
        assert_eq!(
            canary.probe_url.to_string(),
            "https://hooks.example.com/webhooks/_canary"
        );
        assert_eq!(canary.every, DEFAULT_CANARY_EVERY);
        let off = server("public_url = \"https://h.example\"\ncanary_every = \"off\"");
        assert_eq!(parse(&off).unwrap().server.canary, None);
        let short = parse(&server(
            "public_url = \"http://127.0.0.1:9/x\"\ncanary_every = \"200ms\"",
        ))
        .unwrap();
        assert_eq!(
            short.server.canary.unwrap().every,
            Duration::from_millis(200)
        );
        assert!(short.warnings.iter().any(|w| w.contains("canary_every")));
    }

    #[test]
    fn a_public_url_the_canary_cannot_call_is_refused() {
        for (url, why) in [
            ("hooks.example.com", "must start with https://"),
            ("http://hooks.example.com", "plain http to another machine"),
            ("ftp://hooks.example.com", "must start with https://"),
            ("https://user:pw@hooks.example.com", "user or password"),
            ("https://hooks.example.com/?a=1", "query or fragment"),
        ] {
            let p = problems(&server(&format!("public_url = \"{url}\"")));
            assert!(p.contains(why), "{url}: {p}");
        }
        let p = problems(&server("canary_every = \"1m\""));
        assert!(
            p.contains("server.canary_every: the canary needs server.public_url"),
            "{p}"
        );
        let p = problems(&server(
            "public_url = \"https://h.example\"\ncanary_every = \"50ms\"",
        ));
        assert!(p.contains("at least 100ms"), "{p}");
        let p = problems(&server(
            "public_url = \"https://h.example\"\ncanary_ca_file = \"/nonexistent/ca.pem\"",
        ));
        assert!(
            p.contains("server.canary_ca_file: cannot read /nonexistent/ca.pem"),
            "{p}"
        );
    }

    #[test]
    fn no_endpoint_may_take_the_canary_path() {
        let text = MINIMAL.replace("/webhooks/github", CANARY_PATH);
        assert_ne!(text, MINIMAL, "MINIMAL has the path to replace");
        let p = problems(&text);
        assert!(
            p.contains("path `/webhooks/_canary` is portaria's own"),
            "{p}"
        );
    }
}
