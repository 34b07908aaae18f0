//! The accept loop of one listener: the connection cap and its make-room rule (the choice is
//! `connections`'), each connection's TLS handshake when there is one, and the hyper
//! connection that hands each request to the listener's [`Handler`] with the connection's
//! [`BodyWatch`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::admin::Admin;
use crate::client_ip::ConnectionInfo;
use crate::config::Server;
use crate::ingest::{BodyWatch, Intake};
use crate::shutdown::Shutdown;

use super::connections::{self, Counted, Live, Registration};
use super::tls::Certificates;

/// What each new connection is served with; a reload sends new ones.
#[derive(Clone)]
pub(super) struct ConnectionSettings {
    http: http1::Builder,
    /// The TLS handshake's deadline: the header timeout, so a client that opens a connection
    /// and says nothing holds its slot no longer on HTTPS than on HTTP.
    handshake: Duration,
}

/// The most a connection's read buffer grows to (hyper's default is about 400 KiB): a request
/// head must fit in it (431 otherwise), and a body streams through it. Every connection may
/// fill its buffer, so this is a per-connection cost; 64 KiB holds any webhook's headers many
/// times over (nginx's default limit is 32 KiB).
pub(super) const READ_BUFFER: usize = 64 * 1024;

pub(super) fn connection_settings(server: &Server) -> ConnectionSettings {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(server.header_timeout)
        .max_buf_size(READ_BUFFER)
        .keep_alive(true);
    ConnectionSettings {
        http,
        handshake: server.header_timeout,
    }
}

/// How one listener's connections are bounded and wrapped.
pub(super) struct Limits {
    pub(super) max_connections: usize,
    /// HTTPS: the handshake comes first. None: plain HTTP.
    pub(super) tls: Option<Arc<Certificates>>,
}

/// What answers the requests of one listener: the webhook [`Intake`] or the [`Admin`] endpoints.
/// `conn` is the connection the request came on (its peer address); `body` shows the cap how
/// its body arrives.
pub(super) trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        req: Request<Incoming>,
        conn: ConnectionInfo,
        body: &BodyWatch,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send;
}

impl Handler for Intake {
    fn handle(
        &self,
        req: Request<Incoming>,
        conn: ConnectionInfo,
        body: &BodyWatch,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send {
        Intake::handle(self, req, conn, body)
    }
}

impl Handler for Admin {
    fn handle(
        &self,
        req: Request<Incoming>,
        _conn: ConnectionInfo,
        _body: &BodyWatch,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send {
        Admin::handle(self, req)
    }
}

/// How long the accept loop waits for a slot after asking an idle connection to close, before
/// it asks the next one (the first may have begun a request and be finishing it).
const ROOM_RETRY: Duration = Duration::from_millis(50);

/// Accepts until `stop` resolves; returns the connection tasks still running.
///
/// At most `max_connections` are served at once. A connection arriving at the cap makes room:
/// the longest-idle connection (a kept-alive one between requests, or one that has sent
/// nothing yet; idle for at least [`connections::IDLE_GRACE`]) is asked to close
/// ([`connections`]), and the new one is served as soon as it has. With none idle, the connection whose request head has been arriving the longest, past
/// [`connections::SLOW_HEAD`], is cut instead; with no head stalled, the body arriving at the
/// lowest rate, past [`connections::SLOW_BODY`] (answered 503). A request whose body is in is
/// never closed for room; if every connection is busy so, or young, the new one waits for a
/// slot (and those behind it in the kernel's queue).
pub(super) async fn accept_loop(
    listener: &TcpListener,
    settings: watch::Receiver<ConnectionSettings>,
    handler: Arc<impl Handler>,
    limits: Limits,
    signal: Shutdown,
    stop: impl Future<Output = ()>,
) -> JoinSet<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let live = Arc::new(Live::new(
        connections::IDLE_GRACE,
        connections::SLOW_HEAD,
        connections::SLOW_BODY,
    ));
    let origin = Instant::now();
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::select! {
                _ = &mut stop => break,
                permit = make_room(&permits, &live) => match permit {
                    Some(permit) => permit,
                    None => break,
                },
            },
        };
        let _ = stream.set_nodelay(true);
        let settings = settings.borrow().clone();
        let handler = handler.clone();
        let signal = signal.clone();
        let tls = limits.tls.clone();
        let registration = live.register(origin);
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let _permit = permit;
            let tracked = registration.tracked.clone();
            let stream = Counted {
                inner: stream,
                tracked: tracked.clone(),
            };
            let Some(certificates) = tls else {
                let conn = ConnectionInfo::plain(peer);
                serve_connection(stream, conn, &settings, handler, &registration, signal).await;
                return;
            };
            // The handshake, unless the connection is asked to make room first (it has sent
            // nothing yet, or has been closed for room after a handshake that never came).
            let handshake = certificates.handshake(stream, settings.handshake);
            let close = registration.tracked.close.notified();
            let (stream, client_cert) = tokio::select! {
                done = handshake => match done {
                    Ok(done) => done,
                    Err(why) => {
                        tracing::debug!(%peer, "{why}");
                        return;
                    }
                },
                _ = close => return,
            };
            tracked.settled();
            let conn = ConnectionInfo {
                peer,
                client_cert: client_cert.map(Arc::new),
            };
            serve_connection(stream, conn, &settings, handler, &registration, signal).await;
        });
    }
    connections
}

/// Serves the requests of one connection (after its TLS handshake, on HTTPS) until it
/// closes, shutdown drains it, or it is asked to make room while idle. `stream` counts its
/// reads into `registration` (wrapped in [`Counted`], under TLS if any).
async fn serve_connection<S>(
    stream: S,
    conn: ConnectionInfo,
    settings: &ConnectionSettings,
    handler: Arc<impl Handler>,
    registration: &Registration,
    mut signal: Shutdown,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = conn.peer;
    let tracked = registration.tracked.clone();
    let in_service = tracked.clone();
    let service = service_fn(move |req| {
        let handler = handler.clone();
        let tracked = in_service.clone();
        let conn = conn.clone();
        async move {
            tracked.begin();
            let response = handler.handle(req, conn, &tracked.body).await;
            tracked.end();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let conn = settings
        .http
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => log_connection_end(result),
        _ = signal.fired() => {
            // Finish the request in flight, then close instead of keeping alive.
            conn.as_mut().graceful_shutdown();
            log_connection_end(conn.await);
        }
        _ = tracked.close.notified() => {
            if tracked.is_to_be_cut() {
                // A head arriving for over SLOW_HEAD: dropped (hyper would wait for it).
                tracing::debug!(%peer, "cutting a stalled request head to make room");
            } else {
                tracing::debug!(%peer, "closing the longest-idle connection to make room");
                // Idle: closed at once; a request that began meanwhile is answered first.
                conn.as_mut().graceful_shutdown();
                log_connection_end(conn.await);
            }
        }
    }
}

/// At the cap: asks idle connections to close, longest-idle first, until a slot is free.
/// None only if the semaphore is closed (it never is).
async fn make_room(permits: &Arc<Semaphore>, live: &Live) -> Option<OwnedSemaphorePermit> {
    loop {
        live.close_one();
        match tokio::time::timeout(ROOM_RETRY, permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => return Some(permit),
            Ok(Err(_)) => return None,
            Err(_) => continue,
        }
    }
}

fn log_connection_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
