//! HTTPS on the webhook listener (`[server] tls`): the TLS handshake of each accepted
//! connection, under the header deadline, with the server configuration in force; the client
//! certificate it verified, as the connection's [`ClientCert`]; and the certificate's renewal
//! on disk, picked up without a restart.
//!
//! Renewal: a SIGHUP reload re-reads the files with the config ([`Certificates::replace`]),
//! and a background task ([`Certificates::watch`]) looks at their modification times once a
//! minute (one timer; nothing else wakes it). A changed file is read again; if it does not
//! make a usable certificate (a half-written renewal, a key that does not match), that is
//! logged and the old certificate keeps serving. Each handshake takes the configuration in
//! force when it starts: new connections get the new certificate, open ones keep theirs.

use crate::der::tlv;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::client_ip::ClientCert;
use crate::config::{Tls, TlsFiles};
use crate::shutdown::Shutdown;

/// How often the files' modification times are looked at.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);

/// The certificate in force, and the files it came from.
pub struct Certificates {
    current: RwLock<Arc<ServerConfig>>,
    watched: Mutex<Watched>,
}

/// The files, and their modification times when last read (None: could not be looked at).
struct Watched {
    files: TlsFiles,
    stamps: Vec<Option<SystemTime>>,
}

impl Certificates {
    /// The certificate of a validated config (read again if the config did not read it).
    pub fn new(tls: &Tls) -> Result<Arc<Certificates>, String> {
        let stamps = stamps(&tls.files);
        let config = match &tls.loaded {
            Some(config) => config.clone(),
            None => tls.files.load()?,
        };
        Ok(Arc::new(Certificates {
            current: RwLock::new(config),
            watched: Mutex::new(Watched {
                files: tls.files.clone(),
                stamps,
            }),
        }))
    }

    /// What a reload read (validation read the files, so this one is good).
    pub fn replace(&self, tls: &Tls) {
        let stamps = stamps(&tls.files);
        if let Some(config) = &tls.loaded {
            self.set(config.clone());
        }
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        *watched = Watched {
            files: tls.files.clone(),
            stamps,
        };
        tracing::info!(cert_file = %watched.files.cert_file.display(), "TLS certificate reloaded");
    }

    fn set(&self, config: Arc<ServerConfig>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = config;
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// Reads the files again if any modification time changed since they were last read;
    /// true if a new certificate is now in force. Blocking (file reads).
    pub fn check_files(&self) -> bool {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let now = stamps(&watched.files);
        if now == watched.stamps {
            return false;
        }
        // Remembered either way: a bad file is logged once per change, not every minute.
        watched.stamps = now;
        match watched.files.load() {
            Ok(config) => {
                self.set(config);
                tracing::info!(
                    cert_file = %watched.files.cert_file.display(),
                    "TLS certificate files changed: new connections get the new certificate"
                );
                true
            }
            Err(why) => {
                tracing::error!(
                    "TLS certificate files changed but cannot be used ({why}); the previous \
                     certificate keeps serving"
                );
                false
            }
        }
    }

    /// Looks at the files every [`CHECK_EVERY`] until shutdown.
    pub async fn watch(self: Arc<Self>, mut shutdown: Shutdown) {
        let every = crate::fault::tls_check_every().unwrap_or(CHECK_EVERY);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.fired() => return,
                _ = tick.tick() => {}
            }
            let this = self.clone();
            let _ = tokio::task::spawn_blocking(move || this.check_files()).await;
        }
    }

    /// The handshake of one connection, within `deadline` (a client that opens a connection
    /// and sends no ClientHello, or plain HTTP, is closed). Returns the TLS stream and the
    /// client certificate the handshake verified, if one was presented.
    pub async fn handshake<S>(
        &self,
        stream: S,
        deadline: Duration,
    ) -> Result<(TlsStream<S>, Option<ClientCert>), String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let accepting = self.acceptor().accept(stream);
        let stream = match tokio::time::timeout(deadline, accepting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(format!("TLS handshake failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "no TLS handshake within {} s",
                    deadline.as_secs_f32()
                ));
            }
        };
        let cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(<[CertificateDer<'_>]>::first)
            .and_then(|der| client_cert(der));
        Ok((stream, cert))
    }
}

fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    files.paths().map(modified).collect()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The names of a certificate the verifier accepted: the subject CN and the DNS SANs.
fn client_cert(der: &CertificateDer<'_>) -> Option<ClientCert> {
    let cert = webpki::EndEntityCert::try_from(der).ok()?;
    Some(ClientCert {
        common_name: common_name(cert.subject()),
        dns_names: cert.valid_dns_names().map(str::to_string).collect(),
    })
}

/// The id-at-commonName OID, 2.5.4.3.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];

/// The last CN of a subject (the DER contents of its Name): SETs of SEQUENCEs of an OID and a
/// string. Strings that are not UTF-8, Printable, IA5 or Teletex text are skipped.
fn common_name(mut name: &[u8]) -> Option<String> {
    let mut found = None;
    while !name.is_empty() {
        let (tag, mut set, rest) = tlv(name)?;
        name = rest;
        if tag != 0x31 {
            return None;
        }
        while !set.is_empty() {
            let (tag, attribute, rest) = tlv(set)?;
            set = rest;
            if tag != 0x30 {
                return None;
            }
            let (oid_tag, oid, value) = tlv(attribute)?;
            let (value_tag, value, _) = tlv(value)?;
            if oid_tag == 0x06 && oid == CN_OID && matches!(value_tag, 0x0c | 0x13 | 0x14 | 0x16) {
                found = std::str::from_utf8(value).ok().map(str::to_string);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_name_is_read_from_a_subject() {
        // SET { SEQUENCE { OID 2.5.4.10 (O), UTF8 "Efi" } }, SET { SEQUENCE { CN, UTF8 "pix" } }
        let subject = [
            0x31, 0x0c, 0x30, 0x0a, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, 0x03, b'E', b'f', b'i',
            0x31, 0x0c, 0x30, 0x0a, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x03, b'p', b'i', b'x',
        ];
        assert_eq!(common_name(&subject).as_deref(), Some("pix"));
        assert_eq!(common_name(&subject[..14]), None);
        // Truncated: no panic, no name.
        assert_eq!(common_name(&subject[..20]), None);
        assert_eq!(common_name(&[]), None);
    }
}
