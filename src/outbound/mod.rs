//! Outbound HTTPS: the one client portaria calls out with. The canary uses it to post its
//! probe through the tunnel (`canary`); the gateways' APIs (reconcile, fetch-verification) are
//! meant to use it too. A leaf: it imports nothing of the crate.
//!
//! One request is one connection: resolve, connect, TLS, send, read the whole answer, close.
//! portaria calls out a few times an hour, so a pool would only hold sockets open; and with
//! each phase apart, a failure says which one failed ([`Error::cause`]: `dns`, `connect`,
//! `tls`, `timeout`, ...), which is what an alert about the public path needs to say.
//!
//! - **Trust**: TLS 1.2 and 1.3 (rustls, the `ring` provider, as on the webhook listener),
//!   the server's certificate checked against the system's root certificates, read when a
//!   [`Roots::system`] is made (the start), plus any extra CA a config names (`ca_file`, read
//!   at validation). The roots come from the system's store (`rustls-native-certs`:
//!   `SSL_CERT_FILE`, `SSL_CERT_DIR`, or the distribution's bundle), not from a list built
//!   into the binary: the Pi's own `ca-certificates` package keeps them current.
//! - **Plain http** only to this machine: a `http://` URL whose every address is loopback (a
//!   test server, a local fake API); any other is refused before a byte is sent
//!   ([`Error::Url`]), so a credential never crosses a network in clear.
//! - **Bounds**: name resolution, connect, TLS handshake and the answer (head and body) each
//!   have a deadline ([`Limits`]), and the answer's body a size; past either the request
//!   fails, it never waits or buffers without end.
//! - **Secrets**: a request's headers (an API key) are in no `Debug` output and no error;
//!   errors name the host, never the path or query (which may hold a token).

mod connect;
mod retry_after;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, HOST, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};

pub use connect::Phase;
pub use retry_after::retry_after;

const USER_AGENT_VALUE: &str = concat!("portaria/", env!("CARGO_PKG_VERSION"));

/// How long each phase of one request may take, and how large an answer may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Resolving the host name.
    pub resolve: Duration,
    /// The TCP connection (all the addresses the name gave, in turn).
    pub connect: Duration,
    /// The TLS handshake.
    pub handshake: Duration,
    /// From the request's first byte to the answer's last.
    pub answer: Duration,
    /// The answer's body; a larger one is [`Error::TooLarge`].
    pub max_answer_bytes: usize,
}

impl Default for Limits {
    /// 10 s to resolve, connect and shake hands, 30 s for the answer, 2 MiB of it: a gateway's
    /// API page of a hundred events fits, a Pi's memory does not notice.
    fn default() -> Limits {
        Limits {
            resolve: Duration::from_secs(10),
            connect: Duration::from_secs(10),
            handshake: Duration::from_secs(10),
            answer: Duration::from_secs(30),
            max_answer_bytes: 2 * 1024 * 1024,
        }
    }
}

/// The certificates a client trusts: the system's and any extra CA.
#[derive(Clone, Default)]
pub struct Roots {
    certs: Vec<CertificateDer<'static>>,
    /// How many came from the system's store.
    pub from_system: usize,
    /// What went wrong reading the system's store (a file that could not be read), for a
    /// warning; the certificates that could be read are kept.
    pub problems: Vec<String>,
}

impl Roots {
    /// The system's root certificates, read now.
    pub fn system() -> Roots {
        let found = rustls_native_certs::load_native_certs();
        Roots {
            from_system: found.certs.len(),
            certs: found.certs,
            problems: found.errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    /// No certificate at all (an extra CA alone, in tests).
    pub fn none() -> Roots {
        Roots::default()
    }

    /// These roots and `extra` (a config's `ca_file`).
    pub fn with(mut self, extra: &[CertificateDer<'static>]) -> Roots {
        self.certs.extend_from_slice(extra);
        self
    }
}

impl fmt::Debug for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Roots")
            .field("certificates", &self.certs.len())
            .field("from_system", &self.from_system)
            .finish()
    }
}

/// One request to send: method, URL, headers, body.
pub struct Request {
    method: Method,
    url: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl Request {
    pub fn new(method: Method, url: Uri) -> Request {
        Request {
            method,
            url,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    pub fn get(url: Uri) -> Request {
        Request::new(Method::GET, url)
    }

    pub fn post(url: Uri, body: impl Into<Bytes>) -> Request {
        Request::new(Method::POST, url).body(body)
    }

    /// A POST of `value` as JSON.
    pub fn post_json(url: Uri, value: &impl serde::Serialize) -> Result<Request, Error> {
        let body = serde_json::to_vec(value).map_err(|e| Error::Json(e.to_string()))?;
        Ok(Request::post(url, body)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json")))
    }

    /// Sets a header (replacing one of the same name). A credential is fine here: no `Debug`
    /// output or error shows header values.
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Request {
        self.headers.insert(name, value);
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Request {
        self.body = body.into();
        self
    }

    pub fn url(&self) -> &Uri {
        &self.url
    }
}

impl fmt::Debug for Request {
    /// The method and host only: the path, the query and the headers may hold a credential.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.url.host().unwrap_or("?"))
    }
}

/// A whole answer, whatever its status: the caller decides what a status means.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// From the start of the request (name resolution included) to the answer's last byte.
    pub elapsed: Duration,
}

impl Answer {
    /// The body read as JSON into `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Json(e.to_string()))
    }

    /// A header's value as text, if it has one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// How long the server asked to be left alone (`Retry-After`, seconds or an HTTP date),
    /// counted from `now`.
    pub fn retry_after(&self, now: std::time::SystemTime) -> Option<Duration> {
        retry_after(self.header("retry-after")?, now)
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not a URL this client calls: no host, a scheme other than https, or plain http to an
    /// address that is not this machine's.
    #[error("{0}")]
    Url(String),
    #[error("cannot resolve {host}: {why}")]
    Dns { host: String, why: String },
    #[error("cannot connect to {host}: {why}")]
    Connect { host: String, why: String },
    #[error("TLS with {host} failed: {why}")]
    Tls { host: String, why: String },
    #[error("{host}: no {phase} within {limit:?}")]
    Timeout {
        host: String,
        phase: Phase,
        limit: Duration,
    },
    /// The connection broke, or what came back was not HTTP.
    #[error("{host}: {why}")]
    Http { host: String, why: String },
    #[error("{host}: the answer is larger than {limit} bytes")]
    TooLarge { host: String, limit: usize },
    /// A body that is not the JSON expected ([`Answer::json`]), or a value that cannot be sent
    /// as JSON.
    #[error("not the JSON expected: {0}")]
    Json(String),
}

impl Error {
    /// One word for what failed: a metrics label, an alert's cause.
    pub fn cause(&self) -> &'static str {
        match self {
            Error::Url(_) => "url",
            Error::Dns { .. } => "dns",
            Error::Connect { .. } => "connect",
            Error::Tls { .. } => "tls",
            Error::Timeout { .. } => "timeout",
            Error::Http { .. } => "http",
            Error::TooLarge { .. } => "too_large",
            Error::Json(_) => "json",
        }
    }
}

/// The client: what it trusts and how long it waits. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    tls: Arc<ClientConfig>,
    limits: Limits,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("limits", &self.limits)
            .finish()
    }
}

impl Client {
    /// A client trusting `roots`. A certificate of them that rustls cannot parse is skipped
    /// (the system's bundle may hold one); the count of those kept is in the start's log.
    pub fn new(roots: &Roots, limits: Limits) -> Result<Client, Error> {
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(roots.certs.iter().cloned());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| Error::Url(format!("cannot set the TLS versions: {e}")))?
            .with_root_certificates(store)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Client {
            tls: Arc::new(config),
            limits,
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Sends `request` and reads the whole answer, within the limits.
    pub async fn send(&self, request: Request) -> Result<Answer, Error> {
        let started = Instant::now();
        let target = connect::Target::of(&request.url)?;
        let stream = target.connect(&self.limits).await?;
        let (status, headers, body) = if target.tls {
            let tls = target.handshake(stream, &self.tls, &self.limits).await?;
            self.exchange(&target, tls, request).await?
        } else {
            self.exchange(&target, stream, request).await?
        };
        Ok(Answer {
            status,
            headers,
            body,
            elapsed: started.elapsed(),
        })
    }

    /// Request and answer over one connection, within [`Limits::answer`].
    async fn exchange<S>(
        &self,
        target: &connect::Target,
        io: S,
        request: Request,
    ) -> Result<(StatusCode, HeaderMap, Bytes), Error>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limit = self.limits.answer;
        let http = |why: String| Error::Http {
            host: target.host.clone(),
            why,
        };
        let exchange = async {
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(io))
                    .await
                    .map_err(|e| http(format!("HTTP/1.1 could not start: {e}")))?;
            // The connection is driven beside the exchange and dropped with it.
            let driver = AbortOnDrop(tokio::spawn(connection));
            let answer = sender
                .send_request(target.request(request)?)
                .await
                .map_err(|e| http(format!("no answer: {e}")))?;
            let (parts, body) = answer.into_parts();
            let max = self.limits.max_answer_bytes;
            let too_large = || Error::TooLarge {
                host: target.host.clone(),
                limit: max,
            };
            let declared = parts
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if declared.is_some_and(|n| n > max as u64) {
                return Err(too_large());
            }
            let body = match Limited::new(body, max).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
                Err(e) => return Err(http(format!("the answer broke off: {e}"))),
            };
            drop(driver);
            Ok((parts.status, parts.headers, body))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| Error::Timeout {
                host: target.host.clone(),
                phase: Phase::Answer,
                limit,
            })?
    }
}

/// A spawned task aborted when this is dropped (the connection of an exchange that ended,
/// however it ended).
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl connect::Target {
    /// The request as sent: origin-form target, `Host`, `User-Agent`, `Connection: close`.
    fn request(&self, request: Request) -> Result<http::Request<Full<Bytes>>, Error> {
        let path = request
            .url
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let mut out = http::Request::new(Full::new(request.body));
        *out.method_mut() = request.method;
        *out.uri_mut() = path
            .parse()
            .map_err(|_| Error::Url("the URL's path is not valid".into()))?;
        let headers = out.headers_mut();
        *headers = request.headers;
        let host = HeaderValue::from_str(&self.authority)
            .map_err(|_| Error::Url("the URL's host is not valid".into()))?;
        headers.insert(HOST, host);
        headers
            .entry(USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT_VALUE));
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
        Ok(out)
    }
}
