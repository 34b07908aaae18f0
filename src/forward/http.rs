//! The HTTP target: one delivery attempt as a `POST` of the raw body to the business's own
//! plain-http URL, optionally signed with the Standard Webhooks scheme.
//!
//! This file owns the request's shape (headers, signature), the pooled keep-alive client, and
//! the mapping from what the server did to an [`Outcome`] ([`outcome`]): any 2xx is delivered;
//! a 4xx says the request itself is wrong, so retrying cannot help and the delivery is dead at
//! once, except 408, 409, 425 and 429, which say "not now", and 410, which pauses the route; 429 and 503 may say when to come
//! back (`Retry-After`); anything else, including a connection error or the timeout, is a
//! failure for the worker to retry on the schedule. An event verified by fetching goes as
//! `fetch::envelope` (`{"event": ..., "fetched": ...}`, JSON, `Portaria-Fetched: 1`), signed
//! as posted.
//!
//! Invariants:
//! - Event data never makes the request invalid: header values built from it are
//!   percent-encoded, so a stray control byte cannot stop delivery or cause a panic.
//! - One attempt (connect, send, response head, draining the body) never outlasts `timeout`.
//! - The signing key never reaches `Debug` output or an error message.
//! - The Standard Webhooks signature covers `webhook-id`, `webhook-timestamp` and the body,
//!   as the standard says and its libraries check, and nothing else: the `Portaria-*` headers
//!   (`Portaria-Signed-Id` and `Portaria-Event-Type-Signed` included) are not signed. They are
//!   portaria's word to a program on this machine; covering them would take a signature no
//!   Standard Webhooks library verifies.

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::uri::Scheme;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::{Instant, timeout_at};

use super::command::excerpt;
use super::{Delivery, Outcome};
use crate::verify::{Secret, standard_webhooks};

/// How much of a response body is kept; the rest is read and discarded so the connection can
/// go back to the pool.
const CAPTURE_LIMIT: usize = 4096;

/// How much of a failed response's body the `Failed` message quotes.
const QUOTE_LIMIT: usize = 1024;

/// Idle connections are dropped before common keep-alive timeouts on the server side (Node's
/// is 5 s), so we rarely send on a socket the server is just closing.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

const USER_AGENT_VALUE: &str = concat!("portaria/", env!("CARGO_PKG_VERSION"));

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
static EVENT_ID: HeaderName = HeaderName::from_static("portaria-event-id");
static ENDPOINT: HeaderName = HeaderName::from_static("portaria-endpoint");
static ROUTE: HeaderName = HeaderName::from_static("portaria-route");
static EVENT_TYPE: HeaderName = HeaderName::from_static("portaria-event-type");
static EVENT_TYPE_SIGNED: HeaderName = HeaderName::from_static("portaria-event-type-signed");
static SIGNED_ID: HeaderName = HeaderName::from_static("portaria-signed-id");
static ATTEMPT: HeaderName = HeaderName::from_static("portaria-attempt");
static ORIGIN: HeaderName = HeaderName::from_static("portaria-origin");
static FETCHED: HeaderName = HeaderName::from_static("portaria-fetched");
static WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
static WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
static WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// Posts each delivery to one URL.
#[derive(Debug)]
pub struct HttpTarget {
    /// Must be `http://`; config rejects other schemes, and `deliver` re-checks.
    url: Uri,
    /// Bound on one whole attempt.
    timeout: Duration,
    /// The Standard Webhooks key, if the forward is signed.
    signing_key: Option<Secret>,
    /// Shared keep-alive pool, so steady forwarding to one program reuses connections.
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HttpTarget {
    /// `signing_key`: when Some, the forward is signed with the Standard Webhooks scheme using
    /// this key (already decoded from `whsec_...` by config).
    pub fn new(url: Uri, timeout: Duration, signing_key: Option<Secret>) -> Self {
        let mut connector = HttpConnector::new();
        // Requests are small and latency matters more than packet count.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Self {
            url,
            timeout,
            signing_key,
            client,
        }
    }

    /// Posts `d` once. Never panics on event data; every problem becomes
    /// [`Outcome::Failed`] with a short, loggable reason.
    pub async fn deliver(&self, d: &Delivery) -> Outcome {
        if self.url.scheme() != Some(&Scheme::HTTP) {
            return Outcome::Failed(format!(
                "cannot post to {}: only http:// URLs are supported",
                self.url
            ));
        }
        let request = match self.request(d) {
            Ok(request) => request,
            Err(e) => return Outcome::Failed(format!("could not build the request: {e}")),
        };

        let deadline = Instant::now() + self.timeout;
        let response = match timeout_at(deadline, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Outcome::Failed(describe_client_error(&e)),
            Err(_) => return Outcome::Failed(format!("timed out after {:?}", self.timeout)),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::outbound::retry_after(v, SystemTime::now()));

        // The status already decides the outcome; the body is read only for the error excerpt
        // and so that a fully read connection can be reused. If the server stalls here, we give
        // up at the deadline and the half-read connection is dropped, not pooled.
        let mut body = Vec::new();
        let _ = timeout_at(deadline, read_capped(response.into_body(), &mut body)).await;

        if status.is_success() {
            return Outcome::Delivered;
        }
        let (text, cut) = excerpt(&body, QUOTE_LIMIT);
        let more = if cut { " …" } else { "" };
        let quoted = if text.is_empty() {
            String::new()
        } else {
            format!(": {text}{more}")
        };
        outcome(status.as_u16(), retry_after, &quoted)
    }

    fn request(&self, d: &Delivery) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut headers = HeaderMap::new();
        // Verified by fetching: the body and the object, in one JSON envelope.
        let (body, content_type) = match &d.fetched {
            Some(object) => (
                Bytes::from(super::fetch::envelope(&d.body, object)),
                Some("application/json"),
            ),
            None => (d.body.clone(), d.content_type.as_deref()),
        };
        let content_type = content_type
            .filter(|ct| !ct.is_empty())
            .and_then(|ct| HeaderValue::from_str(ct).ok())
            // It arrived as a header, so it is normally valid; if storage mangled it, the
            // program still gets the body, labelled honestly as opaque bytes.
            .unwrap_or(HeaderValue::from_static("application/octet-stream"));
        headers.insert(CONTENT_TYPE, content_type);
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        insert_encoded(&mut headers, &IDEMPOTENCY_KEY, &d.dedup_key);
        headers.insert(EVENT_ID.clone(), HeaderValue::from(d.event_id));
        insert_encoded(&mut headers, &ENDPOINT, &d.endpoint);
        insert_encoded(&mut headers, &ROUTE, &d.route);
        if let Some(event_type) = &d.event_type {
            insert_encoded(&mut headers, &EVENT_TYPE, event_type);
            let signed = if d.event_type_signed { "1" } else { "0" };
            headers.insert(EVENT_TYPE_SIGNED.clone(), HeaderValue::from_static(signed));
        }
        if let Some(id) = &d.signed_id {
            insert_encoded(&mut headers, &SIGNED_ID, id);
        }
        headers.insert(ATTEMPT.clone(), HeaderValue::from(d.attempt));
        headers.insert(ORIGIN.clone(), HeaderValue::from_static(d.origin.as_str()));
        if d.fetched.is_some() {
            headers.insert(FETCHED.clone(), HeaderValue::from_static("1"));
        }

        if let Some(key) = &self.signing_key {
            let id = d.event_id.to_string();
            let timestamp = crate::time::unix_secs(SystemTime::now());
            let signature = standard_webhooks::signature(key, &id, timestamp, &body);
            headers.insert(WEBHOOK_ID.clone(), HeaderValue::from(d.event_id));
            headers.insert(WEBHOOK_TIMESTAMP.clone(), HeaderValue::from(timestamp));
            // `v1,` plus base64 is always a valid header value; the fallible conversion is
            // only there to avoid a panic path.
            if let Ok(value) = HeaderValue::try_from(signature) {
                headers.insert(WEBHOOK_SIGNATURE.clone(), value);
            }
        }

        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .body(Full::new(body))?;
        *request.headers_mut() = headers;
        Ok(request)
    }
}

/// Statuses in 4xx that mean "not now" rather than "never": Request Timeout, Conflict (often
/// a lock held by another request), Too Early, Too Many Requests.
const RETRIED_4XX: [u16; 4] = [408, 409, 425, 429];

/// What a non-2xx answer comes to. `retry_after` is the answer's `Retry-After` as a wait (read
/// by [`crate::outbound::retry_after`]); `quoted` the body's excerpt, `: …` or empty.
fn outcome(status: u16, retry_after: Option<Duration>, quoted: &str) -> Outcome {
    match status {
        // A gone URL takes no event at all: the route pauses rather than killing each one.
        410 => Outcome::Gone(format!(
            "HTTP 410 Gone: the target says this URL is gone for good; route paused (fix its \
             url, then `portaria route resume`){quoted}"
        )),
        400..=499 if !RETRIED_4XX.contains(&status) => Outcome::Permanent(format!(
            "HTTP {status}: the target refused this request, retrying cannot help; not retried{quoted}"
        )),
        429 | 503 => match retry_after {
            Some(wait) => Outcome::RetryAfter {
                error: format!("HTTP {status} (Retry-After {}s){quoted}", wait.as_secs()),
                wait,
            },
            None => Outcome::Failed(format!("HTTP {status}{quoted}")),
        },
        _ => Outcome::Failed(format!("HTTP {status}{quoted}")),
    }
}

/// Inserts a header whose value comes from event data, percent-encoding it (see
/// [`percent_encode`]) so that any bytes at all produce a valid value.
fn insert_encoded(headers: &mut HeaderMap, name: &HeaderName, raw: &str) {
    // The encoded text is visible ASCII only, so this cannot fail; if it somehow did, the
    // header is omitted rather than the delivery failing.
    if let Ok(value) = HeaderValue::try_from(percent_encode(raw)) {
        headers.insert(name.clone(), value);
    }
}

/// Percent-encodes every byte outside visible ASCII, and `%` itself, as `%XX`. Applied to every
/// value (not only to invalid ones) so the receiver can always percent-decode to get the exact
/// original; typical keys and names (`[A-Za-z0-9._:-]`) pass through unchanged. Spaces are
/// encoded too, because HTTP trims them at the ends of a value.
fn percent_encode(raw: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(raw.len());
    for &b in raw.as_bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// Reads a response body to the end, keeping the first `CAPTURE_LIMIT` bytes.
async fn read_capped(mut body: Incoming, into: &mut Vec<u8>) {
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return };
        if let Ok(data) = frame.into_data() {
            let room = CAPTURE_LIMIT.saturating_sub(into.len());
            into.extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
        }
    }
}

/// `connection failed: tcp connect error: Connection refused (os error 111)` and the like.
/// The client's own top-level text (`client error (Connect)`) says less than its causes.
fn describe_client_error(e: &hyper_util::client::legacy::Error) -> String {
    let mut causes = Vec::new();
    let mut source = e.source();
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let text = if causes.is_empty() {
        e.to_string()
    } else {
        causes.join(": ")
    };
    if e.is_connect() {
        format!("connection failed: {text}")
    } else {
        format!("request failed: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use hmac::{Hmac, KeyInit, Mac};
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Response, StatusCode};
    use hyper_util::rt::TokioIo;
    use sha2::Sha256;
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};
    use tokio::net::TcpListener;

    /// One request as the test server saw it.
    #[derive(Debug)]
    struct Seen {
        method: Method,
        path: String,
        headers: HeaderMap,
        body: Bytes,
    }

    /// A real hyper server that records requests and answers each with `status` and `reply`.
    async fn recording_server(
        status: StatusCode,
        reply: &'static str,
    ) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let record = Arc::clone(&record);
                let service = service_fn(move |req: Request<Incoming>| {
                    let record = Arc::clone(&record);
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        record.lock().expect("lock").push(Seen {
                            method: parts.method,
                            path: parts.uri.path().to_string(),
                            headers: parts.headers,
                            body,
                        });
                        let mut response =
                            Response::new(Full::new(Bytes::from_static(reply.as_bytes())));
                        *response.status_mut() = status;
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        (addr, seen)
    }

    fn delivery() -> Delivery {
        Delivery {
            origin: crate::store::Origin::Webhook,
            event_id: 7,
            endpoint: "stripe".to_string(),
            route: "default".to_string(),
            dedup_key: "stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy".to_string(),
            event_type: Some("invoice.paid".to_string()),
            event_type_signed: true,
            signed_id: None,
            content_type: Some("application/json; charset=utf-8".to_string()),
            received_at_ms: 1_796_026_524_123,
            attempt: 2,
            headers: bytes::Bytes::new(),
            body: Bytes::from_static(b"{\"id\":\"evt_1\",\"amount\":1200}\n"),
            fetched: None,
        }
    }

    fn url(addr: SocketAddr, path: &str) -> Uri {
        format!("http://{addr}{path}").parse().expect("uri")
    }

    #[test]
    fn client_errors_are_permanent_but_not_now_and_server_errors_retry() {
        for status in [400, 401, 403, 404, 405, 413, 415, 422, 451, 499] {
            let got = outcome(status, None, ": nope");
            let Outcome::Permanent(text) = got else {
                panic!("{status}: {got:?}")
            };
            assert!(text.starts_with(&format!("HTTP {status}: ")), "{text}");
            assert!(
                text.contains("not retried") && text.ends_with(": nope"),
                "{text}"
            );
        }
        let Outcome::Gone(gone) = outcome(410, None, "") else {
            panic!("410 is gone")
        };
        assert!(
            gone.contains("410 Gone") && gone.contains("gone for good"),
            "{gone}"
        );
        for status in [408, 409, 425, 429, 500, 502, 503, 504, 301, 304] {
            assert_eq!(
                outcome(status, None, ""),
                Outcome::Failed(format!("HTTP {status}"))
            );
        }
        let minute = Some(Duration::from_secs(60));
        for status in [429, 503] {
            assert_eq!(
                outcome(status, minute, ": slow down"),
                Outcome::RetryAfter {
                    error: format!("HTTP {status} (Retry-After 60s): slow down"),
                    wait: Duration::from_secs(60),
                }
            );
        }
        // Only 429 and 503 are read for it; elsewhere it is ignored.
        assert_eq!(outcome(500, minute, ""), Outcome::Failed("HTTP 500".into()));
        assert!(matches!(outcome(400, minute, ""), Outcome::Permanent(_)));
    }

    fn header<'a>(seen: &'a Seen, name: &str) -> Option<&'a str> {
        seen.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header"))
    }

    fn failure(outcome: Outcome) -> String {
        match outcome {
            Outcome::Failed(text) => text,
            other => panic!("expected a retried failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn posts_body_and_headers_and_signs_independently_verifiably() {
        let (addr, seen) = recording_server(StatusCode::NO_CONTENT, "").await;
        let key = b"0123456789abcdef0123456789abcdef".to_vec();
        let target = HttpTarget::new(
            url(addr, "/hooks/in"),
            Duration::from_secs(5),
            Some(Secret::new(key.clone())),
        );
        let d = delivery();

        let before = crate::time::unix_secs(SystemTime::now());
        assert_eq!(target.deliver(&d).await, Outcome::Delivered);
        let after = crate::time::unix_secs(SystemTime::now());

        let seen = seen.lock().expect("lock");
        let [req] = seen.as_slice() else {
            panic!("expected one request, got {seen:?}")
        };
        assert_eq!(req.method, Method::POST);
        assert_eq!(req.path, "/hooks/in");
        assert_eq!(req.body, d.body);
        assert_eq!(
            header(req, "content-type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(
            header(req, "idempotency-key"),
            Some("stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy")
        );
        assert_eq!(header(req, "portaria-event-id"), Some("7"));
        assert_eq!(header(req, "portaria-endpoint"), Some("stripe"));
        assert_eq!(header(req, "portaria-event-type"), Some("invoice.paid"));
        assert_eq!(header(req, "portaria-event-type-signed"), Some("1"));
        assert_eq!(header(req, "portaria-signed-id"), None);
        assert_eq!(header(req, "portaria-attempt"), Some("2"));
        assert_eq!(header(req, "portaria-origin"), Some("webhook"));
        let ua = format!("portaria/{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(header(req, "user-agent"), Some(ua.as_str()));

        assert_eq!(header(req, "webhook-id"), Some("7"));
        let ts: i64 = header(req, "webhook-timestamp")
            .expect("timestamp")
            .parse()
            .expect("int");
        assert!(
            (before..=after).contains(&ts),
            "{ts} not in {before}..={after}"
        );
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).expect("any key length");
        mac.update(format!("7.{ts}.").as_bytes());
        mac.update(&d.body);
        let expected = format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(header(req, "webhook-signature"), Some(expected.as_str()));
    }

    #[tokio::test]
    async fn unsigned_and_sparse_delivery_omits_optional_headers() {
        let (addr, seen) = recording_server(StatusCode::OK, "ok").await;
        let target = HttpTarget::new(url(addr, "/"), Duration::from_secs(5), None);
        let mut d = delivery();
        d.event_type = None;
        d.content_type = None;
        d.body = Bytes::new();
        assert_eq!(target.deliver(&d).await, Outcome::Delivered);

        let seen = seen.lock().expect("lock");
        let [req] = seen.as_slice() else {
            panic!("expected one request, got {seen:?}")
        };
        assert_eq!(
            header(req, "content-type"),
            Some("application/octet-stream")
        );
        assert_eq!(header(req, "portaria-event-type"), None);
        assert_eq!(header(req, "portaria-event-type-signed"), None);
        assert_eq!(header(req, "portaria-signed-id"), None);
        assert_eq!(header(req, "webhook-id"), None);
        assert_eq!(header(req, "webhook-timestamp"), None);
        assert_eq!(header(req, "webhook-signature"), None);
        assert!(req.body.is_empty());
    }

    #[tokio::test]
    async fn header_unsafe_event_data_is_percent_encoded_and_still_delivered() {
        let (addr, seen) = recording_server(StatusCode::ACCEPTED, "").await;
        let target = HttpTarget::new(url(addr, "/"), Duration::from_secs(5), None);
        let mut d = delivery();
        d.dedup_key = "key\r\nX-Injected: 1".to_string();
        d.event_type = Some("caf\u{e9} 100%\0".to_string());
        d.event_type_signed = false;
        d.signed_id = Some("123\r\nX-Injected: 2".to_string());
        d.content_type = Some("text/plain\nbroken".to_string());
        assert_eq!(target.deliver(&d).await, Outcome::Delivered);

        let seen = seen.lock().expect("lock");
        let [req] = seen.as_slice() else {
            panic!("expected one request, got {seen:?}")
        };
        assert_eq!(
            header(req, "idempotency-key"),
            Some("key%0D%0AX-Injected:%201")
        );
        assert_eq!(
            header(req, "portaria-event-type"),
            Some("caf%C3%A9%20100%25%00")
        );
        assert_eq!(header(req, "portaria-event-type-signed"), Some("0"));
        assert_eq!(
            header(req, "portaria-signed-id"),
            Some("123%0D%0AX-Injected:%202")
        );
        assert_eq!(header(req, "x-injected"), None);
        assert_eq!(
            header(req, "content-type"),
            Some("application/octet-stream")
        );
    }

    #[tokio::test]
    async fn reuses_the_connection_between_attempts() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(Mutex::new(0u32));
        let counter = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                *counter.lock().expect("lock") += 1;
                let service = service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        let target = HttpTarget::new(url(addr, "/"), Duration::from_secs(5), None);
        for _ in 0..3 {
            assert_eq!(target.deliver(&delivery()).await, Outcome::Delivered);
        }
        assert_eq!(*connections.lock().expect("lock"), 1);
    }

    #[tokio::test]
    async fn non_2xx_fails_with_status_and_body_excerpt() {
        let (addr, _) =
            recording_server(StatusCode::INTERNAL_SERVER_ERROR, "database is down\n").await;
        let target = HttpTarget::new(url(addr, "/"), Duration::from_secs(5), None);
        let text = failure(target.deliver(&delivery()).await);
        assert_eq!(text, "HTTP 500: database is down");

        let long: &'static str = "x".repeat(10_000).leak();
        let (addr, _) = recording_server(StatusCode::SERVICE_UNAVAILABLE, long).await;
        let target = HttpTarget::new(url(addr, "/"), Duration::from_secs(5), None);
        let text = failure(target.deliver(&delivery()).await);
        assert_eq!(text, format!("HTTP 503: {} …", "x".repeat(QUOTE_LIMIT)));
    }

    #[tokio::test]
    async fn silent_server_fails_after_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Accepts and holds connections without ever answering.
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let target = HttpTarget::new(url(addr, "/"), Duration::from_millis(300), None);
        let started = Instant::now();
        let text = failure(target.deliver(&delivery()).await);
        let elapsed = started.elapsed();
        assert_eq!(text, "timed out after 300ms");
        assert!(
            elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
            "{elapsed:?}"
        );
    }

    #[tokio::test]
    async fn refused_connection_fails() {
        // Bound and held without listening, so no other test's socket can take the port.
        let held = tokio::net::TcpSocket::new_v4().expect("socket");
        held.bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let addr = held.local_addr().expect("addr");
        let target = HttpTarget::new(url(addr, "/"), Duration::from_secs(5), None);
        let text = failure(target.deliver(&delivery()).await);
        assert!(text.starts_with("connection failed: "), "{text}");
        assert!(text.contains("refused"), "{text}");
    }

    #[tokio::test]
    async fn non_http_scheme_fails_clearly() {
        let uri: Uri = "https://127.0.0.1:1/".parse().expect("uri");
        let target = HttpTarget::new(uri, Duration::from_secs(5), None);
        let text = failure(target.deliver(&delivery()).await);
        assert_eq!(
            text,
            "cannot post to https://127.0.0.1:1/: only http:// URLs are supported"
        );
    }

    #[test]
    fn debug_output_redacts_the_signing_key() {
        let target = HttpTarget::new(
            "http://127.0.0.1:1/".parse().expect("uri"),
            Duration::from_secs(1),
            Some(Secret::new(b"supersecretkey".to_vec())),
        );
        let text = format!("{target:?}");
        assert!(text.contains("[redacted]"), "{text}");
        assert!(!text.contains("supersecret"), "{text}");
    }
}
