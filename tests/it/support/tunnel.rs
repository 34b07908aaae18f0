//! Fixtures for outbound HTTPS on loopback: a test CA (rcgen), an HTTPS server answering with
//! a closure, and [`Tunnel`], a TLS-terminating proxy in front of portaria as a tunnel would
//! be (cloudflared, a reverse proxy): stopped, it refuses connections; in `BadGateway` mode it
//! answers every request with its own 502 page, as a tunnel whose backend is gone does.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub type Ca = CertifiedIssuer<'static, KeyPair>;

pub fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// Writes `ca`'s certificate to `dir/name` (what `ca_file` points at).
pub fn write_ca(ca: &Ca, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, ca.pem()).unwrap();
    path
}

/// A server configuration with a certificate for `localhost` and 127.0.0.1 signed by `ca`.
pub fn server_tls(ca: &Ca) -> Arc<ServerConfig> {
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// What one request got: method, path and query, headers, body.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

type Answer = http::Response<Full<Bytes>>;

/// An HTTPS server on 127.0.0.1 answering every request with `answer`; the requests it got
/// are kept. Dropped, it stops.
pub struct HttpsServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl HttpsServer {
    /// The request targets (path and query) it has been asked, in order.
    pub fn targets(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter().map(|s| s.target.clone()).collect()
    }

    pub async fn start(
        tls: Arc<ServerConfig>,
        answer: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
    ) -> HttpsServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(answer);
        let kept = seen.clone();
        let task = tokio::spawn(async move {
            let acceptor = TlsAcceptor::from(tls);
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, answer, kept) = (acceptor.clone(), answer.clone(), kept.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |req: http::Request<Incoming>| {
                        let (answer, kept) = (answer.clone(), kept.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let seen = Seen {
                                method: parts.method.to_string(),
                                target: parts.uri.to_string(),
                                headers: parts.headers,
                                body,
                            };
                            let reply = answer(&seen);
                            kept.lock().unwrap().push(seen);
                            Ok::<_, std::convert::Infallible>(reply)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        HttpsServer { addr, seen, task }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the tunnel does with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pipes the decrypted bytes to portaria and back.
    Forward,
    /// Answers its own 502 page, as a tunnel whose backend is unreachable.
    BadGateway,
}

/// A TLS-terminating proxy on a fixed loopback port, in front of `backend` (set once portaria
/// listens).
pub struct Tunnel {
    pub addr: SocketAddr,
    pub backend: Arc<Mutex<Option<SocketAddr>>>,
    pub mode: Arc<Mutex<Mode>>,
    tls: Arc<ServerConfig>,
    task: Option<JoinHandle<()>>,
}

impl Tunnel {
    pub async fn start(ca: &Ca) -> Tunnel {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut tunnel = Tunnel {
            addr: listener.local_addr().unwrap(),
            backend: Arc::default(),
            mode: Arc::new(Mutex::new(Mode::Forward)),
            tls: server_tls(ca),
            task: None,
        };
        tunnel.serve(listener);
        tunnel
    }

    /// `https://localhost:PORT`: what the gateways would call.
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Closes the listening socket: connections are refused.
    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Listens again on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        // The aborted task's socket closes as its future is dropped, on the runtime.
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e) if tries < 250 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.addr),
            }
        };
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        let acceptor = TlsAcceptor::from(self.tls.clone());
        let (backend, mode) = (self.backend.clone(), self.mode.clone());
        self.task = Some(tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, backend, mode) = (acceptor.clone(), backend.clone(), mode.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mode = *mode.lock().unwrap();
                    let backend = *backend.lock().unwrap();
                    match (mode, backend) {
                        (Mode::Forward, Some(backend)) => {
                            if let Ok(mut up) = TcpStream::connect(backend).await {
                                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                            }
                        }
                        _ => bad_gateway(tls).await,
                    }
                });
            }
        }));
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads a request head, answers the tunnel's own 502 page and closes.
async fn bad_gateway(mut tls: tokio_rustls::server::TlsStream<TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let page =
        "<html><body><h1>502 Bad Gateway</h1><p>The origin is unreachable.</p></body></html>";
    let answer = format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
        page.len()
    );
    let _ = tls.write_all(answer.as_bytes()).await;
    let _ = tls.shutdown().await;
}
