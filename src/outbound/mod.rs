//! Outbound HTTPS: the one client portaria calls out with. The canary uses it to post its
//! probe through the tunnel (`canary`); the gateways' APIs (reconcile, fetch-verification) are
//! meant to use it too. A leaf: it imports nothing of the crate.
//!
//! One request is one connection: resolve, connect, TLS, send, read the whole answer, close
//! (`http1`: HTTP/1.1 with `httparse`, not hyper's client: the binary's size budget).
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
mod http1;
mod key;
mod retry_after;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, TRANSFER_ENCODING, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};

pub use connect::Phase;
pub use key::KeyAuth;
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
        // One type for both, so HTTP/1.1 over them is one piece of code in the binary.
        let io: Box<dyn Io> = if target.tls {
            Box::new(target.handshake(stream, &self.tls, &self.limits).await?)
        } else {
            Box::new(stream)
        };
        let (status, headers, body) = self.exchange(&target, io, request).await?;
        Ok(Answer {
            status,
            headers,
            body,
            elapsed: started.elapsed(),
        })
    }

    /// Request and answer over one connection, within [`Limits::answer`].
    async fn exchange(
        &self,
        target: &connect::Target,
        mut io: Box<dyn Io>,
        request: Request,
    ) -> Result<(StatusCode, HeaderMap, Bytes), Error> {
        let limit = self.limits.answer;
        let head_only = request.method == Method::HEAD;
        let bytes = target.request_bytes(request)?;
        let max = self.limits.max_answer_bytes;
        let answer = tokio::time::timeout(limit, http1::exchange(&mut *io, &bytes, head_only, max));
        match answer.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(http1::Broke::TooLarge)) => Err(Error::TooLarge {
                host: target.host.clone(),
                limit: max,
            }),
            Ok(Err(http1::Broke::Http(why))) => Err(Error::Http {
                host: target.host.clone(),
                why,
            }),
            Err(_) => Err(Error::Timeout {
                host: target.host.clone(),
                phase: Phase::Answer,
                limit,
            }),
        }
    }
}

/// A connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl connect::Target {
    /// The request as sent: origin-form target, `Host`, `User-Agent`, `Connection: close`,
    /// `Content-Length` when there is a body (or the method sends one). The body's framing is
    /// this client's alone: a caller's `Transfer-Encoding` or `Content-Length` is dropped, so
    /// the head never says other than the bytes that follow it.
    fn request_bytes(&self, request: Request) -> Result<Vec<u8>, Error> {
        let target = request.url.path_and_query().map_or("/", |p| p.as_str());
        let mut headers = request.headers;
        headers.remove(TRANSFER_ENCODING);
        headers.remove(CONTENT_LENGTH);
        let host = HeaderValue::from_str(&self.authority)
            .map_err(|_| Error::Url("the URL's host is not valid".into()))?;
        headers.insert(HOST, host);
        headers
            .entry(USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT_VALUE));
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
        if !request.body.is_empty()
            || matches!(request.method, Method::POST | Method::PUT | Method::PATCH)
        {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(request.body.len()));
        }
        Ok(http1::request_bytes(
            &request.method,
            target,
            &headers,
            &request.body,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request's line, its header lines sorted (a `HeaderMap` keeps no order), its body.
    fn sent(request: Request) -> (String, Vec<String>, String) {
        let target = connect::Target::of(request.url()).unwrap();
        let bytes = String::from_utf8(target.request_bytes(request).unwrap()).unwrap();
        let (head, body) = bytes.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n").map(str::to_string);
        let line = lines.next().unwrap();
        let mut headers: Vec<String> = lines.collect();
        headers.sort();
        (line, headers, body.to_string())
    }

    #[test]
    fn the_request_frames_its_body_itself() {
        let url: Uri = "https://api.example:8443/v1/x?a=b".parse().unwrap();
        let post = Request::post(url.clone(), "{}")
            .header(TRANSFER_ENCODING, HeaderValue::from_static("chunked"))
            .header(CONTENT_LENGTH, HeaderValue::from_static("99"))
            .header(CONNECTION, HeaderValue::from_static("keep-alive"))
            .header(HOST, HeaderValue::from_static("elsewhere.example"));
        let agent = format!("user-agent: {USER_AGENT_VALUE}");
        assert_eq!(
            sent(post),
            (
                "POST /v1/x?a=b HTTP/1.1".to_string(),
                vec![
                    "connection: close".to_string(),
                    "content-length: 2".to_string(),
                    "host: api.example:8443".to_string(),
                    agent,
                ],
                "{}".to_string()
            )
        );
        let get = Request::get("https://api.example".parse().unwrap())
            .header(CONTENT_LENGTH, HeaderValue::from_static("5"))
            .header(USER_AGENT, HeaderValue::from_static("test"));
        let (line, headers, body) = sent(get);
        assert_eq!((line.as_str(), body.as_str()), ("GET / HTTP/1.1", ""));
        assert_eq!(
            headers,
            ["connection: close", "host: api.example", "user-agent: test"]
        );
        let (_, headers, _) = sent(Request::post(url, ""));
        assert!(headers.contains(&"content-length: 0".to_string()));
    }
}
