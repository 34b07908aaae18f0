//! The admin listener's answers: `GET /healthz` (the process is up), `GET /readyz` (a webhook
//! arriving now would be stored: the latest intake commit did not fail, the disk has room for
//! one of `max_body_bytes`, and the database takes a durable write within 2 s; else 503) and `GET /metrics` (the Prometheus
//! text format). It has its own listener, `[server] admin_listen` (loopback by default), so
//! none of this is reachable through the tunnel that exposes the webhook port; `server` runs
//! it with the same connection handling and graceful shutdown as the webhook listener.
//! Every other path is the status page's ([`crate::status`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::metrics::{self, Metrics};
use crate::status::StatusPage;
use crate::store::Store;
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
}

impl Admin {
    pub fn new(
        store: Store,
        metrics: Arc<Metrics>,
        max_body_bytes: Arc<AtomicUsize>,
        status: StatusPage,
    ) -> Admin {
        Admin {
            store,
            metrics,
            max_body_bytes,
            status,
        }
    }

    pub async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
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
        let body = self.metrics.render(queue.as_deref(), now_ms());
        let mut response = Response::new(Full::new(Bytes::from(body)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(metrics::CONTENT_TYPE),
        );
        response
    }
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
