//! `[server] tls`: the webhook listener's certificate chain, private key and, for mutual TLS,
//! the CA that client certificates must chain to; and an endpoint's client-certificate rule
//! (`require_client_cert`, `client_cert_subject`).
//!
//! Paths follow the config file; `credential:NAME` is a systemd credential, as for a
//! `secret_file`. [`TlsFiles::load`] reads the PEM files and builds the rustls server
//! configuration (TLS 1.2 and 1.3, the `ring` provider; with a `client_ca_file`, rustls's
//! `WebPkiClientVerifier` allowing a connection without a certificate, since each endpoint
//! decides, [`ClientCertRule`]): validation calls it, so a bad file
//! is a config error and never half-starts, and the server calls it again when the files
//! change (`server::tls`). No error quotes a file's content: the key is a secret.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::credentials;
use super::raw::RawTls;
use super::validator::Validator;
use super::{Endpoint, Secrets};

/// The files of `[server] tls`, absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (PEM; certbot's `fullchain.pem`).
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1; certbot's `privkey.pem`).
    pub key_file: PathBuf,
    /// The CA chain client certificates are verified against; None: no client certificates.
    pub client_ca_file: Option<PathBuf>,
}

/// `[server] tls` as validated: its files, and what they held when the config was loaded.
#[derive(Debug, Clone)]
pub struct Tls {
    pub files: TlsFiles,
    /// None only for a config loaded without secrets (`Secrets::Skip`): the key is not read.
    pub loaded: Option<Arc<ServerConfig>>,
}

/// An endpoint that only takes requests over a connection with a verified client certificate
/// (`require_client_cert = true`), and optionally only one naming `subject`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertRule {
    /// `client_cert_subject`: equal (ASCII case-insensitively) to the certificate's subject
    /// CN or to one of its DNS subject alternative names. None: any certificate the CA signed.
    pub subject: Option<String>,
}

impl ClientCertRule {
    /// Whether a verified certificate with these names (its CN and DNS SANs) is admitted.
    pub fn admits<'a>(&self, mut names: impl Iterator<Item = &'a str>) -> bool {
        match &self.subject {
            None => true,
            Some(wanted) => names.any(|name| name.eq_ignore_ascii_case(wanted)),
        }
    }
}

impl TlsFiles {
    /// Every file, for the server's check of modification times.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert_file), Some(&self.key_file)]
            .into_iter()
            .chain([self.client_ca_file.as_ref()])
            .flatten()
            .map(PathBuf::as_path)
    }

    /// Reads the files and builds the server configuration: TLS 1.2 and 1.3 only, HTTP/1.1
    /// by ALPN, and with a client CA, client certificates asked for and verified against it
    /// but not required (`allow_unauthenticated`: endpoints decide, [`ClientCertRule`]). A
    /// certificate that is offered and does not verify fails the handshake.
    pub fn load(&self) -> Result<Arc<ServerConfig>, String> {
        let certs = certificates(&self.cert_file, "cert_file")?;
        let key = PrivateKeyDer::from_pem_file(&self.key_file).map_err(|e| {
            format!(
                "key_file: no private key read from {}: {}",
                self.key_file.display(),
                pem_error(&e)
            )
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("cannot set the TLS versions: {e}"))?;
        let builder = match &self.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for ca in certificates(path, "client_ca_file")? {
                    roots.add(ca).map_err(|e| {
                        format!(
                            "client_ca_file: {}: not a CA certificate: {e}",
                            path.display()
                        )
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| format!("client_ca_file: {}: {e}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            format!(
                "cert_file and key_file do not make a usable pair ({}, {}): {e}",
                self.cert_file.display(),
                self.key_file.display()
            )
        })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

pub(super) fn certificates(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = |e: rustls_pki_types::pem::Error| {
        format!("{key}: cannot read {}: {}", path.display(), pem_error(&e))
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(format!(
            "{key}: {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// A PEM error in words, never with the file's bytes.
fn pem_error(e: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::Io(io) => io.to_string(),
        Error::NoItemsFound => "no PEM section of the right kind".to_string(),
        _ => "not valid PEM".to_string(),
    }
}

impl Validator<'_> {
    /// `[server] tls`: the paths made absolute (or systemd credentials), the files read and
    /// checked unless secrets are skipped.
    pub(super) fn tls(&mut self, raw: Option<RawTls>) -> Option<Tls> {
        let raw = raw?;
        let cert_file = self.tls_path("cert_file", raw.cert_file);
        let key_file = self.tls_path("key_file", raw.key_file);
        let client_ca_file = match raw.client_ca_file {
            Some(path) => Some(self.tls_path("client_ca_file", Some(path))?),
            None => None,
        };
        let files = TlsFiles {
            cert_file: cert_file?,
            key_file: key_file?,
            client_ca_file,
        };
        let loaded = match self.secrets {
            Secrets::Skip => None,
            Secrets::Load => match files.load() {
                Ok(config) => Some(config),
                Err(why) => {
                    self.problem(format!("server.tls.{why}"));
                    return None;
                }
            },
        };
        Some(Tls { files, loaded })
    }

    fn tls_path(&mut self, key: &str, raw: Option<String>) -> Option<PathBuf> {
        let Some(raw) = raw else {
            self.problem(format!(
                "server.tls.{key}: missing (tls = {{ cert_file = \"fullchain.pem\", key_file = \"privkey.pem\" }})"
            ));
            return None;
        };
        match credentials::credential_name(&raw) {
            None => Some(self.resolve(Path::new(&raw))),
            Some(name) => {
                let dir = std::env::var_os(credentials::VARIABLE);
                match name.and_then(|n| credentials::resolve(n, dir.as_deref().map(Path::new))) {
                    Ok(path) => Some(path),
                    Err(why) => {
                        self.problem(format!("server.tls.{key}: {why}"));
                        None
                    }
                }
            }
        }
    }

    /// An endpoint's client-certificate rule; `client_cert_subject` implies the requirement.
    pub(super) fn client_cert_rule(
        &mut self,
        at: &str,
        require: Option<bool>,
        subject: Option<String>,
    ) -> Option<ClientCertRule> {
        if require == Some(false) && subject.is_some() {
            self.problem(format!(
                "{at}.client_cert_subject: set with require_client_cert = false; a subject is \
                 only checked on a required certificate"
            ));
        }
        if subject.as_deref().is_some_and(|s| s.trim().is_empty()) {
            self.problem(format!("{at}.client_cert_subject: empty"));
        }
        (require == Some(true) || subject.is_some()).then_some(ClientCertRule { subject })
    }

    /// Endpoints that require a client certificate need a listener that asks for one.
    pub(super) fn check_client_cert_rules(&mut self, tls: Option<&Tls>, endpoints: &[Endpoint]) {
        let asks = tls.is_some_and(|t| t.files.client_ca_file.is_some());
        for endpoint in endpoints.iter().filter(|e| e.client_cert.is_some()) {
            if !asks {
                self.problem(format!(
                    "endpoint `{}`: require_client_cert needs [server] tls with a \
                     client_ca_file (the CA the client certificates are verified against)",
                    endpoint.name
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Source};
    use super::*;

    /// A config in `dir` with `tls` as its `[server] tls` and `endpoint` as its one endpoint.
    fn parse(dir: &Path, tls: &str, endpoint: &str, secrets: Secrets) -> Result<Config, String> {
        let text = format!(
            "[server]\ntls = {tls}\n[storage]\npath = \"p.db\"\n[[endpoint]]\npath = \"/efi/pix\"\n\
             provider = \"efi\"\n{endpoint}\n"
        );
        Config::parse_with(&text, Source::File(dir.join("portaria.toml")), secrets)
            .map_err(|e| e.to_string())
    }

    fn write_pair(dir: &Path) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
    }

    const PAIR: &str = r#"{ cert_file = "cert.pem", key_file = "key.pem" }"#;
    const WITH_CA: &str =
        r#"{ cert_file = "cert.pem", key_file = "key.pem", client_ca_file = "ca.pem" }"#;

    #[test]
    fn the_files_follow_the_config_and_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path());
        let config = parse(dir.path(), PAIR, "secret = \"s\"", Secrets::Load).unwrap();
        let tls = config.server.tls.unwrap();
        assert_eq!(tls.files.cert_file, dir.path().join("cert.pem"));
        assert!(tls.loaded.is_some());
        // A key that is not the certificate's: a config error naming both keys.
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("key.pem"), other.serialize_pem()).unwrap();
        let err = parse(dir.path(), PAIR, "secret = \"s\"", Secrets::Load).unwrap_err();
        assert!(err.contains("server.tls.cert_file and key_file"), "{err}");
        assert!(!err.contains("PRIVATE KEY"), "{err}");
        // Not read at all when secrets are skipped (the commands that only read the database).
        std::fs::remove_file(dir.path().join("key.pem")).unwrap();
        let config = parse(dir.path(), PAIR, "secret = \"s\"", Secrets::Skip).unwrap();
        assert!(config.server.tls.unwrap().loaded.is_none());
        let err = parse(dir.path(), PAIR, "secret = \"s\"", Secrets::Load).unwrap_err();
        assert!(
            err.contains("server.tls.key_file: no private key read from"),
            "{err}"
        );
        let err = parse(
            dir.path(),
            r#"{ cert_file = "cert.pem" }"#,
            "",
            Secrets::Load,
        );
        assert!(err.unwrap_err().contains("server.tls.key_file: missing"));
    }

    #[test]
    fn a_required_client_certificate_needs_a_client_ca_and_is_efis_credential() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path());
        let load = |tls, endpoint| parse(dir.path(), tls, endpoint, Secrets::Load);
        // Efí's mTLS mode: no secret, the certificate is the credential.
        let config = load(WITH_CA, "require_client_cert = true").unwrap();
        let rule = config.endpoints[0].client_cert.clone().unwrap();
        assert_eq!(rule, ClientCertRule { subject: None });
        let err = load(PAIR, "require_client_cert = true").unwrap_err();
        assert!(
            err.contains("require_client_cert needs [server] tls with a client_ca_file"),
            "{err}"
        );
        // Without the requirement, Efí needs its `?hmac=` secret.
        let err = load(WITH_CA, "").unwrap_err();
        assert!(err.contains("no secret"), "{err}");
        let err = load(
            WITH_CA,
            "require_client_cert = false\nclient_cert_subject = \"a\"",
        );
        assert!(
            err.unwrap_err()
                .contains("client_cert_subject: set with require_client_cert = false")
        );
        // A subject implies the requirement; it matches the CN or a DNS SAN, in any case.
        let config = load(WITH_CA, "client_cert_subject = \"Pix.Example\"").unwrap();
        let rule = config.endpoints[0].client_cert.clone().unwrap();
        assert!(rule.admits(["other", "pix.example"].into_iter()));
        assert!(!rule.admits(["pix.example.evil"].into_iter()));
        assert!(!rule.admits(std::iter::empty()));
    }
}
