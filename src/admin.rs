//! The admin listener's answers: `GET /healthz` (the process is up), `GET /readyz` (a webhook
//! arriving now would be stored: no intake commit failed in the last 30 s without one
//! succeeding since, the disk has room for one of `max_body_bytes` (statvfs; see
//! [`needed_free_bytes`]), and the database takes a durable write, the probe's upsert of one
//! `meta` row, within 2 s; else 503) and `GET /metrics` (the Prometheus text format: the queue
//! figures asked of the store first, its gauges left out if they take over 2 s; counters and
//! histograms live in memory and start at zero). It has its own listener, `[server] admin_listen` (loopback by default), so
//! none of this is reachable through the tunnel that exposes the webhook port; `server` runs
//! it with the same connection handling and graceful shutdown as the webhook listener.
//! Every other path is the status page's ([`crate::status`]).
//!
//! One `Host` rule for every path, the status page's and these three alike: a listener on a
//! loopback address answers only a loopback `Host` (`127.0.0.1`, `localhost`, `[::1]`, any
//! port), so a web page that points its own name at 127.0.0.1 (DNS rebinding) reads nothing
//! from it, not even `/metrics`. A listener on any other address (which config allows only
//! with a `[status]` token) is reached by whatever name the network gives it: a Prometheus on
//! another machine scrapes it as `pi.lan:9464`, so there the `Host` is not checked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::metrics::{self, Metrics};
use crate::status::StatusPage;
use crate::store::{LastRun, Store};
use crate::time::now_ms;

/// How long `/readyz` waits for its write. Below the busy timeout (3 s) and the webhook
/// deadline (5 s): if the probe cannot commit in 2 s, a webhook arriving now is at risk.
pub const READY_DEADLINE: Duration = Duration::from_secs(2);

/// How long `/metrics` waits for the queue figures before answering without them.
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(2);

/// Room on the disk for what storing one webhook may write, beyond its body: WAL frame headers,
/// index pages, the `-shm` index growing.
pub const READY_MARGIN: u64 = 1024 * 1024;

/// The free space `/readyz` asks for: a webhook of `max_body_bytes` is written to the WAL, then
/// copied into the database file by a checkpoint (2x), with a third copy's worth and
/// [`READY_MARGIN`] to spare.
pub fn needed_free_bytes(max_body_bytes: usize) -> u64 {
    (max_body_bytes as u64).saturating_mul(3) + READY_MARGIN
}

/// What the admin listener needs: the store for the probe and the queue, the metrics, the
/// body limit in force (a reload changes it), and the status page.
pub struct Admin {
    store: Store,
    metrics: Arc<Metrics>,
    max_body_bytes: Arc<AtomicUsize>,
    status: StatusPage,
    /// The listener is on a loopback address: only a loopback `Host` is answered.
    loopback_only: bool,
}

impl Admin {
    /// The `Host` rule follows the listener's address, which `status` knows.
    pub fn new(
        store: Store,
        metrics: Arc<Metrics>,
        max_body_bytes: Arc<AtomicUsize>,
        status: StatusPage,
    ) -> Admin {
        Admin {
            loopback_only: status.listen().is_none_or(|a| a.ip().is_loopback()),
            store,
            metrics,
            max_body_bytes,
            status,
        }
    }

    /// The status page's wrong-token summaries until `stop`: the admin listener's task runs
    /// this beside its connections.
    pub async fn log_wrong_tokens(&self, stop: impl std::future::Future<Output = ()>) {
        self.status.log_wrong_tokens(stop).await;
    }

    pub async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if self.loopback_only && !loopback_host(req.headers()) {
            return text(
                StatusCode::FORBIDDEN,
                "this listener is on loopback and answers only to a loopback name in Host \
                 (127.0.0.1, localhost, [::1])\n",
            );
        }
        let path = req.uri().path();
        if !matches!(path, "/healthz" | "/readyz" | "/metrics") {
            return self.status.handle(req).await;
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        match path {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => self.ready().await,
            _ => self.metrics().await,
        }
    }

    /// What storing a webhook needs: the latest intake commit went through (or is long past),
    /// room on the disk for one of `max_body_bytes`, then a real write through the writer
    /// thread (the write lock, a working fsync).
    async fn ready(&self) -> Response<Full<Bytes>> {
        let needed = needed_free_bytes(self.max_body_bytes.load(Ordering::Relaxed));
        match tokio::time::timeout(READY_DEADLINE, self.store.readiness(needed, now_ms())).await {
            Ok(Ok(())) => text(StatusCode::OK, "ready\n"),
            Ok(Err(e)) => {
                tracing::warn!(reason = %e, "not ready");
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
            Err(_) => {
                tracing::warn!(
                    "not ready: no write within 2 s (database locked by another process, or the disk stalled)"
                );
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
        }
    }

    async fn metrics(&self) -> Response<Full<Bytes>> {
        let queue = match tokio::time::timeout(SCRAPE_DEADLINE, self.store.queue_stats()).await {
            Ok(Ok(stats)) => Some(stats),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the queue for /metrics; leaving its gauges out");
                None
            }
            Err(_) => {
                tracing::warn!(
                    "no queue figures within 2 s for /metrics (database locked?); leaving its gauges out"
                );
                None
            }
        };
        let runs = match self.metrics.reconciles() {
            true => self.reconcile_runs().await,
            false => None,
        };
        let body = self
            .metrics
            .render(queue.as_deref(), runs.as_deref(), now_ms());
        let mut response = Response::new(Full::new(Bytes::from(body)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(metrics::CONTENT_TYPE),
        );
        response
    }

    /// Each endpoint's last reconcile run for `/metrics`; None (their series left out) when
    /// the store does not answer in time.
    async fn reconcile_runs(&self) -> Option<Vec<LastRun>> {
        match tokio::time::timeout(SCRAPE_DEADLINE, self.store.reconcile_runs()).await {
            Ok(Ok(runs)) => Some(LastRun::read_all(&runs)),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the reconcile runs for /metrics; leaving their gauges out");
                None
            }
            Err(_) => None,
        }
    }
}

/// The one `Host` names a loopback address: `127.0.0.1`, `localhost`, `[::1]`, any port.
fn loopback_host(headers: &HeaderMap) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    let (Some(host), None) = (hosts.next(), hosts.next()) else {
        return false;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_host_is_one() {
        let with = |hosts: &[&str]| {
            let mut headers = HeaderMap::new();
            for host in hosts {
                headers.append(header::HOST, host.parse().unwrap());
            }
            loopback_host(&headers)
        };
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST",
            "[::1]:9464",
            "127.0.0.1",
            "127.1.2.3:80",
        ] {
            assert!(with(&[host]), "{host}");
        }
        for host in [
            "evil.example:9464",
            "192.168.1.5:9464",
            "[::2]:1",
            "localhost.evil.example",
            "127.0.0.1.evil.example:9464",
        ] {
            assert!(!with(&[host]), "{host}");
        }
        assert!(!with(&[]), "no Host");
        assert!(!with(&["127.0.0.1:9464", "evil.example"]), "two of them");
    }
}
