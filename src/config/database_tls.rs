//! TLS to PostgreSQL: the URL's `sslmode` ([`SslMode`], with portaria's default when it
//! says none), the CA it trusts (`sslrootcert` in the URL or `[storage] ca_file`), read when
//! the config is validated, and the rustls client configuration each mode gets
//! ([`DatabaseTls`]: TLS 1.2 and 1.3, the `ring` provider, as on the webhook listener).
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | - |
//! | `prefer` | if the server offers it | chained to the CA if one is given, else not checked |
//! | `require` | always, never plain | the same |
//! | `verify-ca` | always | chained to the CA (needed) |
//! | `verify-full` | always | chained to the CA (needed), and valid for the host name |
//!
//! As libpq does, `prefer` and `require` without a CA encrypt but do not tell who answers;
//! with one they verify the chain (`ChainOnly`, as `verify-ca`: the chain, not the name;
//! `verify-full` is rustls's `WebPkiServerVerifier`). Without `sslmode`, a database on this machine (loopback
//! addresses, `localhost`, a Unix socket) is reached in plain, as before TLS was supported,
//! and any other is `verify-full`: safe by default, and a config error until a CA is given.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::Host;

/// The URL's `sslmode`, libpq's words (`allow` aside: not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// The mode `sslmode=WORD` names; None for a word portaria does not take.
    pub fn parse(word: &str) -> Option<SslMode> {
        Some(match word {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn word(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Without `sslmode`: plain to this machine, `verify-full` to any other.
    pub fn default_for(settings: &tokio_postgres::Config) -> SslMode {
        if on_this_machine(settings) {
            SslMode::Disable
        } else {
            SslMode::VerifyFull
        }
    }

    /// What tokio-postgres is told: whether to ask for TLS, and whether plain is acceptable.
    pub fn wire(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Wire;
        match self {
            SslMode::Disable => Wire::Disable,
            SslMode::Prefer => Wire::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Wire::Require,
        }
    }
}

/// Whether every address the client may connect to is this machine's.
pub(super) fn on_this_machine(settings: &tokio_postgres::Config) -> bool {
    let local_ip = |ip: &IpAddr| ip.is_loopback();
    let local_host = |host: &Host| match host {
        Host::Tcp(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| local_ip(&ip))
        }
        Host::Unix(_) => true,
    };
    let hosts = settings.get_hosts();
    let addrs = settings.get_hostaddrs();
    // With `hostaddr`, the host name is only for the certificate: the address is dialled.
    if !addrs.is_empty() {
        return addrs.iter().all(local_ip);
    }
    hosts.iter().all(local_host)
}

/// How the connections to PostgreSQL use TLS, as validated: the mode, the CA's
/// certificates (and where they came from), and the rustls configuration (None for
/// `disable`). Equal when the mode and the certificates are: what a reload compares.
#[derive(Clone)]
pub struct DatabaseTls {
    pub mode: SslMode,
    /// `sslrootcert` or `ca_file`, absolute; None: no CA.
    pub ca_file: Option<PathBuf>,
    roots: Vec<CertificateDer<'static>>,
    client: Option<Arc<ClientConfig>>,
}

impl PartialEq for DatabaseTls {
    fn eq(&self, other: &Self) -> bool {
        self.mode == other.mode && self.ca_file == other.ca_file && self.roots == other.roots
    }
}

impl Eq for DatabaseTls {}

impl DatabaseTls {
    /// Reads the CA (if any) and builds the client configuration `mode` calls for; the error
    /// names the key, the file and what is wrong with it, never its content.
    pub(super) fn load(mode: SslMode, ca: Option<(&str, PathBuf)>) -> Result<DatabaseTls, String> {
        if mode == SslMode::Disable {
            if let Some((key, _)) = ca {
                return Err(format!(
                    "{key}: a CA is given, but sslmode=disable never uses TLS; remove one of them"
                ));
            }
            return Ok(DatabaseTls {
                mode,
                ca_file: None,
                roots: Vec::new(),
                client: None,
            });
        }
        let roots = match ca {
            Some((key, path)) => Some((root_store(key, &path)?, path)),
            None => None,
        };
        if roots.is_none() && matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
            return Err(format!(
                "sslmode={} verifies the database server's certificate and needs the CA that \
                 signed it: set [storage] ca_file, or sslrootcert in the URL",
                mode.word()
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("cannot set the TLS versions: {e}"))?;
        let (ca_file, der) = match &roots {
            Some(((_, der), path)) => (Some(path.clone()), der.clone()),
            None => (None, Vec::new()),
        };
        let mut client = match (mode, roots) {
            (SslMode::VerifyFull, Some(((store, _), _))) => builder
                .with_root_certificates(Arc::new(store))
                .with_no_client_auth(),
            // verify-ca, or prefer/require (verify-full without a CA was refused above).
            (_, roots) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly {
                    roots: roots.map(|((store, _), _)| Arc::new(store)),
                    algorithms,
                }))
                .with_no_client_auth(),
        };
        // What libpq 17 sends; needed for `sslnegotiation=direct`, harmless otherwise.
        client.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(DatabaseTls {
            mode,
            ca_file,
            roots: der,
            client: Some(Arc::new(client)),
        })
    }

    /// The rustls configuration of the connections; None: no TLS (`disable`).
    pub fn client(&self) -> Option<Arc<ClientConfig>> {
        self.client.clone()
    }
}

/// The CA file's certificates, as a root store and as read.
fn root_store(
    key: &str,
    path: &Path,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), String> {
    let certs = super::tls::certificates(path, key)?;
    let mut store = RootCertStore::empty();
    for cert in &certs {
        store
            .add(cert.clone())
            .map_err(|e| format!("{key}: {}: not a CA certificate: {e}", path.display()))?;
    }
    Ok((store, certs))
}

/// `verify-ca`, and `prefer`/`require` with a CA: the chain up to the CA, its signatures and
/// validity dates, not the host name. Without a CA (`prefer`/`require` only) no certificate
/// check at all, as libpq: the session is encrypted, the server not authenticated. The
/// handshake's own signatures are checked either way.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::SslMode;
    use crate::config::DatabaseUrl;
    use crate::config::tests::{MINIMAL, parse, problems};
    use tokio_postgres::config::SslMode as Wire;

    fn url(lines: &str) -> DatabaseUrl {
        parse(&format!("[storage]\n{lines}\n{MINIMAL}"))
            .unwrap()
            .storage
            .postgres
            .unwrap()
    }

    fn refused(lines: &str) -> String {
        problems(&format!("[storage]\n{lines}\n{MINIMAL}"))
    }

    /// A CA certificate in PEM, written to `dir/name`; returns its path.
    fn ca_file(dir: &std::path::Path, name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let path = dir.join(name);
        std::fs::write(&path, cert.pem()).unwrap();
        path.display().to_string()
    }

    #[test]
    fn without_sslmode_this_machine_is_plain_and_any_other_host_needs_a_ca() {
        for local in [
            "url = \"postgres://portaria@127.0.0.1:5433/portaria\"",
            "url = \"postgres://portaria@localhost/portaria\"",
            "url = \"postgres://portaria@[::1]/portaria\"",
            "url = \"host=/var/run/postgresql user=portaria\"",
            "url = \"host=db.portaria.test hostaddr=127.0.0.1 user=portaria\"",
        ] {
            let url = url(local);
            assert_eq!(url.tls.mode, SslMode::Disable, "{local}");
            assert!(url.tls_client().is_none(), "{local}");
            assert_eq!(url.settings().get_ssl_mode(), Wire::Disable, "{local}");
        }
        for remote in [
            "url = \"postgres://portaria@db.lan/portaria\"",
            "url = \"postgres://portaria@127.0.0.1,db.lan/portaria\"",
            "url = \"host=localhost hostaddr=192.0.2.7 user=portaria\"",
        ] {
            let msg = refused(remote);
            assert!(
                msg.contains("storage.url: sslmode=verify-full verifies the database server's certificate and needs the CA"),
                "{remote}: {msg}"
            );
            assert!(
                msg.contains("the default for a database that is not on this machine"),
                "{msg}"
            );
        }
        // Said explicitly, the CA is needed all the same, and the default's reason is not given.
        let msg = refused("url = \"postgres://portaria@127.0.0.1/portaria?sslmode=verify-ca\"");
        assert!(msg.contains("sslmode=verify-ca verifies"), "{msg}");
        assert!(!msg.contains("the default"), "{msg}");
    }

    #[test]
    fn each_mode_tells_the_client_whether_plain_is_acceptable() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca_file(dir.path(), "ca.pem");
        for (query, mode, wire) in [
            ("sslmode=disable", SslMode::Disable, Wire::Disable),
            ("sslmode=prefer", SslMode::Prefer, Wire::Prefer),
            ("sslmode=require", SslMode::Require, Wire::Require),
            (
                &format!("sslmode=verify-ca&sslrootcert={ca}"),
                SslMode::VerifyCa,
                Wire::Require,
            ),
            (
                &format!("sslrootcert={ca}"),
                SslMode::VerifyFull,
                Wire::Require,
            ),
        ] {
            let url = url(&format!(
                "url = \"postgres://portaria@db.lan/portaria?{query}\""
            ));
            assert_eq!(url.tls.mode, mode, "{query}");
            assert_eq!(url.settings().get_ssl_mode(), wire, "{query}");
            assert_eq!(
                url.tls_client().is_some(),
                mode != SslMode::Disable,
                "{query}"
            );
        }
        let from_key = url(&format!(
            "url = \"postgres://portaria@db.lan/portaria\"\nca_file = \"{ca}\""
        ));
        assert_eq!(from_key.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            from_key.tls.ca_file.as_deref(),
            Some(std::path::Path::new(&ca))
        );
    }

    #[test]
    fn prefer_or_require_without_a_ca_to_another_host_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca_file(dir.path(), "ca.pem");
        let warnings = |lines: &str| {
            parse(&format!("[storage]\n{lines}\n{MINIMAL}"))
                .unwrap()
                .warnings
                .into_iter()
                .filter(|w| w.starts_with("storage."))
                .collect::<Vec<_>>()
        };
        for mode in ["require", "prefer"] {
            let found = warnings(&format!(
                "url = \"postgres://portaria@db.lan/portaria?sslmode={mode}\""
            ));
            assert_eq!(found.len(), 1, "{mode}: {found:?}");
            assert!(
                found[0].starts_with(&format!(
                    "storage.url: sslmode={mode} without a CA, to a database that is not on this machine"
                )),
                "{found:?}"
            );
            assert_eq!(
                found[0].contains("plain text"),
                mode == "prefer",
                "{found:?}"
            );
            assert!(
                !found[0].contains("db.lan"),
                "the URL is never quoted: {found:?}"
            );
            // Not for this machine, nor with a CA, nor when verifying.
            for quiet in [
                format!("url = \"postgres://portaria@127.0.0.1/portaria?sslmode={mode}\""),
                format!("url = \"host=/run/postgresql user=portaria sslmode={mode}\""),
                format!(
                    "url = \"postgres://portaria@db.lan/portaria?sslmode={mode}\"\nca_file = \"{ca}\""
                ),
            ] {
                assert!(warnings(&quiet).is_empty(), "{quiet}");
            }
        }
        assert!(
            warnings(&format!(
                "url = \"postgres://portaria@db.lan/portaria?sslmode=verify-full&sslrootcert={ca}\""
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_ca_that_does_not_load_is_a_config_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hunter2 is not a certificate\n").unwrap();
        let msg = refused(&format!(
            "url = \"postgres://portaria@db.lan/portaria\"\nca_file = \"{}\"",
            not_pem.display()
        ));
        assert!(msg.contains("storage.ca_file: "), "{msg}");
        assert!(msg.contains("holds no PEM certificate"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
        let msg = refused(
            "url = \"postgres://portaria@db.lan/portaria?sslrootcert=/nonexistent/ca.pem\"",
        );
        assert!(
            msg.contains("storage.url: sslrootcert: cannot read /nonexistent/ca.pem"),
            "{msg}"
        );
        let ca = ca_file(dir.path(), "ca.pem");
        let msg = refused(&format!(
            "url = \"postgres://portaria@db.lan/portaria?sslmode=disable\"\nca_file = \"{ca}\""
        ));
        assert!(
            msg.contains("storage.ca_file: a CA is given, but sslmode=disable never uses TLS"),
            "{msg}"
        );
    }

    #[test]
    fn another_ca_is_another_database_setting() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (ca_file(dir.path(), "a.pem"), ca_file(dir.path(), "b.pem"));
        let with = |ca: &str| {
            url(&format!(
                "url = \"postgres://portaria@db.lan/portaria\"\nca_file = \"{ca}\""
            ))
        };
        assert!(with(&a) == with(&a));
        assert!(with(&a) != with(&b));
        // The same file with another certificate in it.
        let before = with(&a);
        std::fs::copy(&b, &a).unwrap();
        assert!(before != with(&a));
    }
}
