//! The request pipeline, each step with its answer: the canary's probe first (`canary`), then
//! [`route`] (the path exactly as sent, one of `Endpoint::paths`: 404), the method (405; a
//! provider's GET of the URL, Rede's, answered 200 once the address passes), the address against
//! `allow_ips` and the client certificate against `require_client_cert` (403), the body
//! (`body`: 413, 408, 503), the signature on the raw bytes (`verify`: 401; 400 for a body that
//! contradicts what is signed; a provider's URL check answered, nothing stored), the dedup key
//! (400), the event type and object id (`describe`, or the endpoint's fields through `pointer`;
//! never a reason to refuse, a field's miss counted; nor is a field the provider's events always
//! carry, missing: counted for the alert `drift`), the routes that take the type
//! (`Endpoint::deliveries_for`), the insert (503 past [`STORE_DEADLINE`] or on a failed
//! commit), and only then 200.
//!
//! Every way a request can end is an [`Outcome`]; [`Outcome::response`] is the one place that
//! turns outcomes into HTTP answers. The handler never forwards: it wakes the worker. Each
//! request logs one line (`flood` sums up what anyone can cause) and is counted in `Metrics`
//! (and the duplicate window). Credential headers are stored as `[redacted]` (`headers`). A
//! rejection after the body (401, 400, 413) is kept a while, never an event (`quarantine`).
//!
//! The endpoint table and the body limits are one `Routes` behind a lock that a reload swaps
//! whole ([`Intake::replace`]); each request reads it once, at its start, and keeps that `Arc`
//! to its end, so a request in flight during a reload finishes under the config it began with.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::sync::Notify;

mod body;
mod canary;
mod describe;
mod flood;
mod headers;
mod line;
mod pointer;
mod quarantine;
mod scalar;

pub use body::{BodyWatch, Budget, RATE_GRACE};
pub use describe::{Described, Sources, describe, describe_with};
pub use headers::REDACTED;
pub use pointer::read as read_pointer;

use body::BodyLimits;
use headers::{header_text, headers_blob};
use line::{EventMeta, log};

use crate::canary::ProbeKey;
use crate::client_ip::{ConnectionInfo, client_ip};
use crate::config::{Endpoint, RealIp, Server};
use crate::metrics::{self, Metrics};
use crate::store::{Counted, Inserted, NewDelivery, NewEvent, Received, Rejection, Store};
use crate::time::{now_ms, unix_millis, unix_secs};
use crate::verify::{self, Ack, Carried, Reply, VerifyError};

/// How long a request waits for the store to take its insert for a commit before the gateway
/// is told 503 (and the insert is given up, never to run). Gateways give up after 10-30 s; a
/// quick 503 makes them retry instead of wondering. An insert taken in time is waited for
/// to its end: its answer is the real one (`Store::insert_event`).
pub const STORE_DEADLINE: Duration = Duration::from_secs(5);

/// What the pipeline needs, shared by every connection.
pub struct Intake {
    /// What a reload replaces; read once per request.
    routes: RwLock<Arc<Routes>>,
    store: Store,
    /// Poked after a new event commits, so the forwarding worker starts at once.
    new_event: Arc<Notify>,
    /// Counts every answer, by endpoint and outcome.
    metrics: Arc<Metrics>,
    /// [`STORE_DEADLINE`] (a test may shorten it: `fault::store_deadline`).
    store_deadline: Duration,
    /// Rejections anyone can cause, summarised in the log per endpoint and outcome.
    rejections: Arc<flood::Rejections>,
    /// The body bytes buffered across all requests (`body_budget_bytes`).
    budget: Budget,
    /// The canary's key, when it runs: its probes are answered at `CANARY_PATH` (`canary`).
    canary: Option<Arc<ProbeKey>>,
    /// Rejected requests on their way to the store (`quarantine`).
    keeper: quarantine::Keeper,
}

/// How a request ended. Each maps to exactly one HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Accepted(i64),
    Duplicate(i64),
    NotFound,
    MethodNotAllowed,
    /// The client address is outside the endpoint's `allow_ips`: refused before the body.
    Forbidden,
    /// The endpoint requires a verified client certificate (mutual TLS) and the connection
    /// presented none, or one whose names do not match `client_cert_subject`: 403, before
    /// the body.
    NoClientCert,
    TooLarge,
    /// The body did not arrive within `body_timeout`, or fell below the minimum rate.
    BodyTimeout,
    /// Taking the body would pass `body_budget_bytes`: 503, retry later.
    OverBudget,
    /// The body was the slowest arriving when the connection cap needed a slot: 503, and the
    /// connection closes.
    CutForRoom,
    BadSignature(String),
    StaleTimestamp,
    BadRequest(String),
    StorageError(String),
    /// A verified request that is the provider checking the URL (Slack's `url_verification`,
    /// Discord's PING, ...): answered directly, never stored or forwarded.
    Handshake(Reply),
}

impl Outcome {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Accepted(_) => metrics::ACCEPTED,
            Outcome::Duplicate(_) => metrics::DUPLICATE,
            Outcome::NotFound => "not_found",
            Outcome::MethodNotAllowed => "method_not_allowed",
            Outcome::TooLarge => "too_large",
            Outcome::BodyTimeout => "body_timeout",
            Outcome::OverBudget => "over_budget",
            Outcome::CutForRoom => "cut_for_room",
            Outcome::BadSignature(_) => "bad_signature",
            Outcome::StaleTimestamp => "stale_timestamp",
            Outcome::BadRequest(_) => "bad_request",
            Outcome::StorageError(_) => "storage_error",
            Outcome::Handshake(_) => "handshake",
            Outcome::Forbidden => "forbidden",
            Outcome::NoClientCert => "client_cert",
        }
    }

    /// What the status page counts of it (`hourly`): None for a handshake, which stores
    /// nothing, and a path no endpoint has, which is no endpoint's.
    fn counted(&self) -> Option<Counted> {
        let rejected = |why| Some(Counted::Rejected(why));
        match self {
            Outcome::Accepted(_) => Some(Counted::Received),
            Outcome::Duplicate(_) => Some(Counted::Duplicate),
            Outcome::NotFound | Outcome::Handshake(_) => None,
            Outcome::BadSignature(_) => rejected(Rejection::BadSignature),
            Outcome::StaleTimestamp => rejected(Rejection::StaleTimestamp),
            Outcome::TooLarge => rejected(Rejection::TooLarge),
            Outcome::StorageError(_) => rejected(Rejection::StorageError),
            Outcome::BadRequest(_)
            | Outcome::BodyTimeout
            | Outcome::OverBudget
            | Outcome::CutForRoom
            | Outcome::MethodNotAllowed
            | Outcome::Forbidden
            | Outcome::NoClientCert => rejected(Rejection::BadRequest),
        }
    }

    /// The status code of the answer; the log and [`Outcome::response`] both read it here.
    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Accepted(_) | Outcome::Duplicate(_) | Outcome::Handshake(_) => StatusCode::OK,
            Outcome::NotFound => StatusCode::NOT_FOUND,
            Outcome::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Outcome::Forbidden | Outcome::NoClientCert => StatusCode::FORBIDDEN,
            Outcome::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Outcome::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Outcome::BadSignature(_) | Outcome::StaleTimestamp => StatusCode::UNAUTHORIZED,
            Outcome::BadRequest(_) => StatusCode::BAD_REQUEST,
            Outcome::StorageError(_) | Outcome::OverBudget | Outcome::CutForRoom => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// The one mapping from outcomes to answers. 5xx bodies stay generic; the cause is logged.
    /// `ack`: the answer the provider expects for an accepted event (Adyen's `[accepted]`,
    /// Discord's `{"type":5}`), sent instead of the JSON default.
    pub fn response(&self, max_body_bytes: usize, ack: Option<Ack>) -> Response<Full<Bytes>> {
        let mut content_type = "application/json";
        let body = match self {
            Outcome::Accepted(_) | Outcome::Duplicate(_) => match ack {
                Some(ack) => {
                    content_type = ack.content_type;
                    Bytes::from_static(ack.body.as_bytes())
                }
                None => Bytes::from_static(br#"{"received":true}"#),
            },
            Outcome::Handshake(reply) => {
                content_type = reply.content_type;
                Bytes::from(reply.body.clone())
            }
            Outcome::NotFound => error_json("no endpoint at this path"),
            Outcome::MethodNotAllowed => error_json("webhooks are delivered with POST"),
            Outcome::Forbidden => {
                error_json("this endpoint does not accept webhooks from this address")
            }
            Outcome::NoClientCert => {
                error_json("this endpoint requires a client certificate its CA signed")
            }
            Outcome::TooLarge => error_json(&format!("body larger than {max_body_bytes} bytes")),
            Outcome::BodyTimeout => error_json("the body did not arrive in time"),
            Outcome::OverBudget => error_json("too many bodies in memory; retry later"),
            Outcome::CutForRoom => error_json("the server needed this connection; retry later"),
            Outcome::BadSignature(_) => error_json("invalid signature"),
            Outcome::StaleTimestamp => error_json("timestamp outside the allowed window"),
            Outcome::BadRequest(reason) => error_json(reason),
            Outcome::StorageError(_) => error_json("storage unavailable; retry later"),
        };
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(content_type),
        );
        match self {
            Outcome::MethodNotAllowed => {
                headers.insert(header::ALLOW, header::HeaderValue::from_static("POST"));
            }
            Outcome::StorageError(_) | Outcome::OverBudget => {
                headers.insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            }
            Outcome::CutForRoom => {
                headers.insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
                // The rest of the body is never read: the connection cannot be reused.
                headers.insert(
                    header::CONNECTION,
                    header::HeaderValue::from_static("close"),
                );
            }
            _ => {}
        }
        response
    }
}

fn error_json(reason: &str) -> Bytes {
    Bytes::from(serde_json::json!({ "error": reason }).to_string())
}

/// The part of the intake a reload replaces: the endpoints, the body limits and the
/// client-address rule.
struct Routes {
    /// Endpoints by each path they answer on (`Endpoint::paths`): routing is one hash lookup.
    endpoints: HashMap<String, Arc<Endpoint>>,
    body: BodyLimits,
    /// Whose header names the client (`[server] real_ip_header`); None: the TCP peer.
    real_ip: Option<RealIp>,
}

impl Routes {
    fn new(endpoints: &[Arc<Endpoint>], server: &Server) -> Arc<Routes> {
        Arc::new(Routes {
            endpoints: endpoints
                .iter()
                .flat_map(|e| e.paths().into_iter().map(|path| (path, e.clone())))
                .collect(),
            body: BodyLimits {
                max_bytes: server.max_body_bytes,
                timeout: server.body_timeout,
                min_rate: server.min_body_bytes_per_sec,
            },
            real_ip: server.real_ip.clone(),
        })
    }
}

impl Intake {
    /// Builds the intake for these endpoints (the same list the worker gets).
    pub fn new(
        endpoints: &[Arc<Endpoint>],
        server: &Server,
        store: Store,
        new_event: Arc<Notify>,
        metrics: Arc<Metrics>,
    ) -> Intake {
        Intake {
            routes: RwLock::new(Routes::new(endpoints, server)),
            store,
            new_event,
            metrics,
            store_deadline: crate::fault::store_deadline().unwrap_or(STORE_DEADLINE),
            rejections: flood::Rejections::new(
                crate::fault::log_summary_every().unwrap_or(flood::SUMMARY_EVERY),
            ),
            budget: Budget::new(server.body_budget_bytes),
            canary: None,
            keeper: quarantine::Keeper::default(),
        }
    }

    /// Swaps in a reloaded endpoint list, body limits (`max_body_bytes`, `body_timeout`,
    /// `min_body_bytes_per_sec`, `body_budget_bytes`) and client-address rule
    /// (`real_ip_header`, `trusted_proxies`). Requests that already started keep the table
    /// they read.
    pub fn replace(&self, endpoints: &[Arc<Endpoint>], server: &Server) {
        let routes = Routes::new(endpoints, server);
        *self.routes.write().unwrap_or_else(PoisonError::into_inner) = routes;
        self.budget.set_limit(server.body_budget_bytes);
    }

    /// Handles one request, start to finish, and logs one line about it. `conn` gives the
    /// peer address, which the client address is judged from; `watch` is its connection's,
    /// through which the connection cap sees the body arrive and may cut it.
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        conn: ConnectionInfo,
        watch: &BodyWatch,
    ) -> Response<Full<Bytes>> {
        let started = Instant::now();
        let routes = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let client = client_ip(conn.peer.ip(), req.headers(), routes.real_ip.as_ref());
        if let Some(response) = self.canary_probe(&req, routes.body.max_bytes, client) {
            return response;
        }
        let endpoint = route(&routes.endpoints, req.uri()).cloned();
        let (outcome, meta) = match &endpoint {
            Some(endpoint) => {
                self.pipeline(&routes, endpoint, client, &conn, req, watch)
                    .await
            }
            None => (Outcome::NotFound, EventMeta::default()),
        };
        let elapsed = started.elapsed();
        if self.worth_a_line(endpoint.as_deref(), &outcome) {
            log(endpoint.as_deref(), client, &outcome, &meta, elapsed);
        }
        let name = endpoint.as_deref().map(|e| e.name.as_str());
        self.metrics.request(name, outcome.label(), elapsed);
        if let (Some(name), Some(counted)) = (name, outcome.counted()) {
            self.store.count(name, counted, now_ms());
        }
        if matches!(outcome, Outcome::Accepted(_)) {
            self.new_event.notify_one();
        }
        let ack = endpoint.as_deref().and_then(|e| e.verifier.ack_reply());
        outcome.response(routes.body.max_bytes, ack)
    }

    /// Whether this request gets its log line: a rejection that anyone who reaches the URL
    /// can cause, as often as they like, is logged once per endpoint and outcome in an
    /// interval, the others counted into one summary line (`flood`).
    fn worth_a_line(&self, endpoint: Option<&Endpoint>, outcome: &Outcome) -> bool {
        let floodable = matches!(
            outcome,
            Outcome::BadSignature(_)
                | Outcome::StaleTimestamp
                | Outcome::BadRequest(_)
                | Outcome::Forbidden
                | Outcome::NoClientCert
                | Outcome::TooLarge
                | Outcome::BodyTimeout
                | Outcome::OverBudget
                | Outcome::CutForRoom
        );
        match endpoint {
            Some(endpoint) if floodable => self.rejections.first(&endpoint.name, outcome.label()),
            _ => true,
        }
    }

    async fn pipeline(
        &self,
        routes: &Routes,
        endpoint: &Endpoint,
        client: IpAddr,
        conn: &ConnectionInfo,
        req: Request<Incoming>,
        watch: &BodyWatch,
    ) -> (Outcome, EventMeta) {
        let mut meta = EventMeta::default();
        // A provider's GET of the URL (Rede's, at registration): answered once the address is.
        let probe = req.method() == Method::GET && endpoint.verifier.answers_get();
        if req.method() != Method::POST && !probe {
            return (Outcome::MethodNotAllowed, meta);
        }
        // Before the body is read: a refused address costs no read, no verify, no row.
        if let Some(allowed) = &endpoint.allow_ips
            && !allowed.iter().any(|range| range.contains(client))
        {
            return (Outcome::Forbidden, meta);
        }
        if probe {
            return (
                Outcome::Handshake(Reply::json(&serde_json::json!({"ok": true}))),
                meta,
            );
        }
        if let Some(rule) = &endpoint.client_cert {
            let admitted = conn
                .client_cert
                .as_deref()
                .is_some_and(|cert| rule.admits(cert.names()));
            if !admitted {
                return (Outcome::NoClientCert, meta);
            }
        }
        let (parts, body) = req.into_parts();

        // 1. The raw body, within the size, time and memory limits. Its bytes stay counted
        //    in the budget (`_held`) until the request ends.
        let (body, _held) = match body::read(body, routes.body, &self.budget, watch).await {
            Ok(read) => read,
            Err(outcome) => {
                let why = format!("body larger than {} bytes", routes.body.max_bytes);
                self.keeper.keep(
                    &self.store,
                    endpoint,
                    &outcome,
                    why,
                    &parts.headers,
                    &[],
                    now_ms(),
                );
                return (outcome, meta);
            }
        };

        // 2. The signature, on the raw bytes, before anything parses them. A provider checking
        //    the URL is answered here, and nothing is stored.
        let received_at = SystemTime::now();
        let request = verify::Request::new(&parts.headers, &body).with_query(parts.uri.query());
        let verifier = &endpoint.verifier;
        // A rejection from here on is kept (`quarantine`), with what was said of it.
        let at_ms = unix_millis(received_at);
        let keep = |outcome: Outcome, why: String, body: &[u8]| {
            let store = &self.store;
            self.keeper
                .keep(store, endpoint, &outcome, why, &parts.headers, body, at_ms);
            outcome
        };
        let proof = match verifier.verify_request(&request, unix_secs(received_at)) {
            Ok(proof) => proof,
            Err(e) => match verifier.unsigned_handshake(&request) {
                Some(reply) => return (Outcome::Handshake(reply), meta),
                None if matches!(e, VerifyError::StaleTimestamp { .. }) => {
                    return (keep(Outcome::StaleTimestamp, e.to_string(), &body), meta);
                }
                // Signed, but the body says otherwise: the request's own fault, said in the 400.
                None if matches!(e, VerifyError::Contradicts(_)) => {
                    return (
                        keep(Outcome::BadRequest(e.to_string()), e.to_string(), &body),
                        meta,
                    );
                }
                None => {
                    return (
                        keep(Outcome::BadSignature(e.to_string()), e.to_string(), &body),
                        meta,
                    );
                }
            },
        };
        // Which of the rotated secrets matched (its position, never its value): once the old
        // one stops showing up, it can go.
        tracing::debug!(endpoint = %endpoint.name, secret = proof.secret_index() + 1, "signature verified");
        if let Some(reply) = verifier.handshake(&proof, &request) {
            return (Outcome::Handshake(reply), meta);
        }

        // 3. The dedup key, and what kind of event this is.
        let signed = proof.signed_key();
        let dedup_key = match endpoint.dedup.extract_signed(signed, &parts.headers, &body) {
            Ok(key) => key,
            Err(e) => {
                return (
                    keep(Outcome::BadRequest(e.to_string()), e.to_string(), &body),
                    meta,
                );
            }
        };
        meta.dedup_key = Some(dedup_key.clone());
        let described = describe_with(Sources::of(verifier), &parts.headers, &body);
        // A field that found nothing: no type (stored, routed as such), and counted.
        let untyped = described.event_type.is_none() && verifier.event_type_field().is_some();
        tracing::trace!(endpoint = %endpoint.name, body = %String::from_utf8_lossy(&body), "webhook body");
        meta.event_type = described.event_type;
        meta.object_id = described.object_id;
        // A field its provider's events always carry, missing: stored all the same, and counted
        // (`drift`). No work for a provider without such fields.
        let carries = verifier.carries();
        let drifted = !carries.is_empty()
            && !Carried::missing(carries, meta.event_type.as_deref(), &body).is_empty();

        // 4. Store durably; only a committed row earns a 2xx.
        let received = Received {
            event_type: meta.event_type.clone(),
            content_type: header_text(&parts.headers, header::CONTENT_TYPE.as_str()),
            headers: headers_blob(&parts.headers, endpoint.verifier.credential_headers()),
            body,
            at_ms,
            dedup_since_ms: endpoint.dedup_since(at_ms),
            client_cert: conn.client_cert.as_ref().map(|cert| cert.to_string()),
            object_id: meta.object_id.clone(),
            event_type_signed: verifier.event_type_signed(),
        };
        // The routes that take this event type, each with the event's ordering key there.
        let routes: Vec<NewDelivery> = endpoint
            .deliveries_for(meta.event_type.as_deref(), &parts.headers, &received.body)
            .into_iter()
            .map(|(route, order_key)| NewDelivery { route, order_key })
            .collect();
        let unrouted = routes.is_empty() && endpoint.forwards();
        // A batch of separately signed items (Adyen) names each item's key too; none else.
        let items = endpoint.dedup.item_keys(&parts.headers, &received.body);
        let event =
            NewEvent::new(proof, &endpoint.name, dedup_key, received, routes).with_items(items);
        // Not taken by the store within the deadline: given up, never stored, 503. Taken: the
        // real answer, however long after the deadline it comes.
        let outcome = match self.store.insert_event(event, self.store_deadline).await {
            Ok(Inserted::New(id)) => {
                if unrouted {
                    // No route takes this event type: stored only, and counted.
                    self.metrics.unrouted(&endpoint.name);
                }
                if untyped {
                    self.metrics.untyped(&endpoint.name);
                }
                if drifted {
                    self.metrics.drifted(&endpoint.name, id);
                }
                Outcome::Accepted(id)
            }
            Ok(Inserted::Duplicate(id)) => Outcome::Duplicate(id),
            Err(e) => Outcome::StorageError(e.to_string()),
        };
        (outcome, meta)
    }
}

/// The routing rule: the request target's path exactly as sent (no percent-decoding, no `..`
/// resolution, the query string left out), matched exactly against the configured paths.
pub fn route<'a, E>(endpoints: &'a HashMap<String, E>, target: &http::Uri) -> Option<&'a E> {
    endpoints.get(target.path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::REQUEST_OUTCOMES;

    #[test]
    fn every_outcome_label_has_a_series_from_the_start() {
        let outcomes = [
            Outcome::Accepted(0),
            Outcome::Duplicate(0),
            Outcome::MethodNotAllowed,
            Outcome::Forbidden,
            Outcome::NoClientCert,
            Outcome::TooLarge,
            Outcome::BodyTimeout,
            Outcome::OverBudget,
            Outcome::CutForRoom,
            Outcome::BadSignature(String::new()),
            Outcome::StaleTimestamp,
            Outcome::BadRequest(String::new()),
            Outcome::StorageError(String::new()),
            Outcome::Handshake(Reply::json(&serde_json::json!({}))),
            // Last: only requests to unknown paths end this way, counted under `-`.
            Outcome::NotFound,
        ];
        for outcome in &outcomes {
            // A new variant stops this compiling until it is added to the list above.
            match outcome {
                Outcome::Accepted(_)
                | Outcome::Duplicate(_)
                | Outcome::MethodNotAllowed
                | Outcome::Forbidden
                | Outcome::NoClientCert
                | Outcome::TooLarge
                | Outcome::BodyTimeout
                | Outcome::OverBudget
                | Outcome::CutForRoom
                | Outcome::BadSignature(_)
                | Outcome::StaleTimestamp
                | Outcome::BadRequest(_)
                | Outcome::StorageError(_)
                | Outcome::Handshake(_)
                | Outcome::NotFound => {}
            }
        }
        for outcome in &outcomes[..outcomes.len() - 1] {
            assert!(REQUEST_OUTCOMES.contains(&outcome.label()), "{outcome:?}");
        }
        assert_eq!(outcomes.len() - 1, REQUEST_OUTCOMES.len());
        // The duplicate window counts these two by their labels.
        assert_eq!(Outcome::Accepted(0).label(), metrics::ACCEPTED);
        assert_eq!(Outcome::Duplicate(0).label(), metrics::DUPLICATE);
    }
}
