//! The phases before a request: which host and port a URL names, resolving the name,
//! connecting to its addresses in turn, and the TLS handshake, each within its deadline and
//! failing with its own [`Error`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::Uri;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{Error, Limits};

/// What did not happen in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Resolve,
    Connect,
    Handshake,
    Answer,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Resolve => "name resolution",
            Phase::Connect => "connection",
            Phase::Handshake => "TLS handshake",
            Phase::Answer => "answer",
        })
    }
}

/// Where a URL points.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The host as resolved and as TLS names it: no brackets around an IPv6 address.
    pub host: String,
    /// `Host` header's value: as the URL spells it, with its port if it has one.
    pub authority: String,
    port: u16,
    pub tls: bool,
}

impl Target {
    pub fn of(url: &Uri) -> Result<Target, Error> {
        let tls = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Error::Url("only https:// URLs are called".into())),
        };
        let (Some(host), Some(authority)) = (url.host(), url.authority()) else {
            return Err(Error::Url("the URL has no host".into()));
        };
        if authority.as_str().contains('@') {
            return Err(Error::Url(
                "a user or password in the URL is not sent; use a header".into(),
            ));
        }
        Ok(Target {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            authority: authority.as_str().to_string(),
            port: url.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            tls,
        })
    }

    /// Resolves the host and connects to the first address that answers. Plain http is
    /// refused unless every address is this machine's.
    pub async fn connect(&self, limits: &Limits) -> Result<TcpStream, Error> {
        let addrs = self.resolve(limits).await?;
        if !self.tls && !addrs.iter().all(|a| a.ip().is_loopback()) {
            return Err(Error::Url(format!(
                "plain http:// is only for this machine, and {} is not: use https://",
                self.host
            )));
        }
        let deadline = Instant::now() + limits.connect;
        let mut last = String::from("no address");
        for addr in addrs {
            match timeout_at(deadline, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    // Small requests; latency matters more than packet count.
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => {
                    return Err(Error::Timeout {
                        host: self.host.clone(),
                        phase: Phase::Connect,
                        limit: limits.connect,
                    });
                }
            }
        }
        Err(Error::Connect {
            host: self.host.clone(),
            why: last,
        })
    }

    async fn resolve(&self, limits: &Limits) -> Result<Vec<SocketAddr>, Error> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let found = timeout(
            limits.resolve,
            tokio::net::lookup_host((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| Error::Timeout {
            host: self.host.clone(),
            phase: Phase::Resolve,
            limit: limits.resolve,
        })?;
        let addrs: Vec<SocketAddr> = found
            .map_err(|e| Error::Dns {
                host: self.host.clone(),
                why: e.to_string(),
            })?
            .collect();
        if addrs.is_empty() {
            return Err(Error::Dns {
                host: self.host.clone(),
                why: "no address".into(),
            });
        }
        Ok(addrs)
    }

    /// The TLS handshake, the certificate checked for the host against the client's roots.
    pub async fn handshake(
        &self,
        stream: TcpStream,
        config: &Arc<ClientConfig>,
        limits: &Limits,
    ) -> Result<TlsStream<TcpStream>, Error> {
        let name = ServerName::try_from(self.host.clone()).map_err(|_| Error::Tls {
            host: self.host.clone(),
            why: "not a name a certificate can be for".into(),
        })?;
        let connector = TlsConnector::from(config.clone());
        match timeout(limits.handshake, connector.connect(name, stream)).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(e)) => Err(Error::Tls {
                host: self.host.clone(),
                // rustls's error sits inside the io::Error: "invalid peer certificate:
                // UnknownIssuer", and the like.
                why: std::error::Error::source(&e)
                    .map_or_else(|| e.to_string(), |inner| inner.to_string()),
            }),
            Err(_) => Err(Error::Timeout {
                host: self.host.clone(),
                phase: Phase::Handshake,
                limit: limits.handshake,
            }),
        }
    }
}
