//! The admin listener's answers: `GET /healthz` (the process is up), `GET /readyz` (the
//! database takes a durable write within 2 s, else 503) and `GET /metrics` (the Prometheus
//! text format). It has its own listener, `[server] admin_listen` (loopback by default), so
//! none of this is reachable through the tunnel that exposes the webhook port; `server` runs
//! it with the same connection handling and graceful shutdown as the webhook listener.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::metrics::{self, Metrics};
use crate::store::Store;
use crate::time::now_ms;

/// How long `/readyz` waits for its write. Below the busy timeout (3 s) and the webhook
/// deadline (5 s): if the probe cannot commit in 2 s, a webhook arriving now is at risk.
pub const READY_DEADLINE: Duration = Duration::from_secs(2);

/// How long `/metrics` waits for the queue figures before answering without them.
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(2);

/// What the admin listener needs: the store for the probe and the queue, and the metrics.
pub struct Admin {
    store: Store,
    metrics: Arc<Metrics>,
}

impl Admin {
    pub fn new(store: Store, metrics: Arc<Metrics>) -> Admin {
        Admin { store, metrics }
    }

    pub async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        if !matches!(path, "/healthz" | "/readyz" | "/metrics") {
            return text(StatusCode::NOT_FOUND, "not found\n");
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

    /// A real write through the writer thread: it needs the write lock, room on the disk and
    /// a working fsync, exactly what storing a webhook needs.
    async fn ready(&self) -> Response<Full<Bytes>> {
        match tokio::time::timeout(READY_DEADLINE, self.store.probe_write(now_ms())).await {
            Ok(Ok(())) => text(StatusCode::OK, "ready\n"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "not ready: the database refused a write");
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
