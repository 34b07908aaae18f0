//! The server: opens the store, starts the forwarding worker, accepts connections (at most
//! `max_connections` at once, each with header and body deadlines), hands each request to
//! [`Intake`], and on shutdown stops accepting, lets requests in flight finish, stops the
//! worker at a safe point and closes the database.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use crate::config::Config;
use crate::forward::Worker;
use crate::ingest::Intake;
use crate::shutdown::{self, Shutdown};
use crate::store::{Store, StoreError};

/// How long requests in flight get to finish after shutdown begins.
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Serves webhooks on an already-bound listener until `shutdown` resolves, then drains and
/// closes everything. Tests bind `127.0.0.1:0` and call this directly.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StoreError> {
    let path = config.storage.path.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&path))
        .await
        .map_err(|e| StoreError::Sqlite(format!("opening the database panicked: {e}")))??;

    let (trigger, signal) = shutdown::channel();
    let new_event = Arc::new(Notify::new());
    let max_connections = config.server.max_connections;
    let http = connection_settings(&config);
    let (intake, forwards) = Intake::new(config, store.clone(), new_event.clone());
    let worker = Worker::start(forwards, store.clone(), new_event, signal.clone()).await?;
    let intake = Arc::new(intake);

    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "listening");
    }
    let connections = accept_loop(&listener, http, intake, max_connections, signal, shutdown).await;
    drop(listener);

    trigger.fire();
    drain(connections).await;
    worker.stop().await;
    tokio::task::spawn_blocking(move || store.close())
        .await
        .ok();
    tracing::info!("stopped");
    Ok(())
}

fn connection_settings(config: &Config) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.server.header_timeout)
        .keep_alive(true);
    http
}

/// Accepts until `stop` resolves; returns the connection tasks still running.
async fn accept_loop(
    listener: &TcpListener,
    http: http1::Builder,
    intake: Arc<Intake>,
    max_connections: usize,
    signal: Shutdown,
    stop: impl Future<Output = ()>,
) -> JoinSet<()> {
    let permits = Arc::new(Semaphore::new(max_connections));
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        // Wait for a free slot first: past the cap, new connections queue in the kernel.
        let permit = tokio::select! {
            _ = &mut stop => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let http = http.clone();
        let intake = intake.clone();
        let mut signal = signal.clone();
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let intake = intake.clone();
                async move { Ok::<_, std::convert::Infallible>(intake.handle(req).await) }
            });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => log_connection_end(result),
                _ = signal.fired() => {
                    // Finish the request in flight, then close instead of keeping alive.
                    conn.as_mut().graceful_shutdown();
                    log_connection_end(conn.await);
                }
            }
        });
    }
    connections
}

fn log_connection_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

async fn drain(mut connections: JoinSet<()>) {
    let all_done = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN_GRACE, all_done).await.is_err() {
        tracing::warn!("requests still in flight after the grace period; closing them");
        connections.abort_all();
    }
}
