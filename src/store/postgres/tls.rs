//! TLS on the connections to PostgreSQL: [`Connector`], tokio-postgres's `MakeTlsConnect`
//! over tokio-rustls with the rustls configuration the config built from `sslmode` and the
//! CA (`config::database_tls`: which certificate checks run is decided there). The pool's
//! connections and the listening connection (`listen.rs`) both connect through it.
//!
//! Whether TLS is asked for, and whether plain is acceptable, is the client's `sslmode`
//! (disable, prefer, require). [`Stream`] gives the server's certificate's
//! `tls-server-end-point` hash for SCRAM's channel binding (RFC 5929: the certificate hashed
//! with its signature's hash, SHA-256 for MD5 and SHA-1), so a `channel_binding=require`
//! in the URL works and a man in the middle cannot relay the password exchange.

use crate::der::element;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Makes a handshake for each new connection; without a configuration (`sslmode=disable`,
/// when the client never asks for one) a handshake is an error.
#[derive(Clone)]
pub(super) struct Connector(Option<TlsConnector>);

impl Connector {
    pub(super) fn new(config: Option<Arc<ClientConfig>>) -> Connector {
        Connector(config.map(TlsConnector::from))
    }
}

impl<S> MakeTlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Handshake;
    type Error = io::Error;

    /// `host` is the URL's host name (or address), which `verify-full` checks the
    /// certificate against. Called for every connection, TLS or not (empty for a Unix
    /// socket): a host TLS cannot name is an error only if a handshake is made.
    fn make_tls_connect(&mut self, host: &str) -> io::Result<Handshake> {
        Ok(Handshake {
            connector: self.0.clone(),
            name: ServerName::try_from(host).ok().map(|n| n.to_owned()),
        })
    }
}

/// One connection's handshake, to `name`.
pub(super) struct Handshake {
    connector: Option<TlsConnector>,
    name: Option<ServerName<'static>>,
}

impl<S> TlsConnect<S> for Handshake
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, socket: S) -> Self::Future {
        Box::pin(async move {
            let connector = self
                .connector
                .ok_or_else(|| invalid("TLS is off (sslmode=disable)"))?;
            let name = self
                .name
                .ok_or_else(|| invalid("the host is not a name or address TLS can check"))?;
            Ok(Stream(connector.connect(name, socket).await?))
        })
    }
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

/// A connection over TLS.
pub(super) struct Stream<S>(TlsStream<S>);

impl<S> tokio_postgres::tls::TlsStream for Stream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.0.get_ref();
        session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| server_end_point(cert.as_ref()))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The `tls-server-end-point` value of a DER certificate: its hash by its signature's
/// algorithm (SHA-256 also for MD5 and SHA-1); None for a signature without one hash
/// (Ed25519, RSA-PSS), so no channel binding is offered.
fn server_end_point(der: &[u8]) -> Option<Vec<u8>> {
    const SHA256: &[&[u8]] = &[
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04], // md5WithRSAEncryption
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05], // sha1WithRSAEncryption
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b], // sha256WithRSAEncryption
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01],             // ecdsa-with-SHA1
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02],       // ecdsa-with-SHA256
    ];
    const SHA384: &[&[u8]] = &[
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c], // sha384WithRSAEncryption
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03],       // ecdsa-with-SHA384
    ];
    const SHA512: &[&[u8]] = &[
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d], // sha512WithRSAEncryption
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04],       // ecdsa-with-SHA512
    ];
    let oid = signature_algorithm(der)?;
    if SHA256.contains(&oid) {
        Some(crate::digest::sha256(&[der]).to_vec())
    } else if SHA384.contains(&oid) {
        Some(crate::digest::sha384(der))
    } else if SHA512.contains(&oid) {
        Some(crate::digest::sha512(der))
    } else {
        None
    }
}

/// The OID of a certificate's `signatureAlgorithm` (X.509: `SEQUENCE { tbsCertificate,
/// signatureAlgorithm SEQUENCE { OID, parameters }, signature }`).
fn signature_algorithm(der: &[u8]) -> Option<&[u8]> {
    let (certificate, _) = element(der, 0x30)?;
    let (_, rest) = element(certificate, 0x30)?;
    let (algorithm, _) = element(rest, 0x30)?;
    let (oid, _) = element(algorithm, 0x06)?;
    Some(oid)
}

#[cfg(test)]
mod tests {
    use super::*;

    use sha2::Digest;

    #[test]
    fn the_end_point_hash_follows_the_signature_algorithm() {
        for (alg, sha384) in [
            (&rcgen::PKCS_ECDSA_P256_SHA256, false),
            (&rcgen::PKCS_ECDSA_P384_SHA384, true),
        ] {
            let key = rcgen::KeyPair::generate_for(alg).unwrap();
            let cert = rcgen::CertificateParams::new(vec!["db.test".into()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let der: &[u8] = cert.der();
            let want = if sha384 {
                sha2::Sha384::digest(der).to_vec()
            } else {
                sha2::Sha256::digest(der).to_vec()
            };
            assert_eq!(server_end_point(der), Some(want));
        }
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["db.test".into()])
            .unwrap()
            .self_signed(&ed)
            .unwrap();
        assert_eq!(server_end_point(cert.der()), None);
        assert_eq!(server_end_point(b"\x30\x85"), None);
        assert_eq!(server_end_point(b""), None);
    }
}
