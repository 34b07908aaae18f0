//! `bare-server`: the ceiling. A hyper 1 HTTP/1 server with portaria's connection settings
//! (keep-alive, a header read timeout, TCP_NODELAY, tokio's multi-threaded runtime) that reads
//! each body and answers 200 `{"received":true}` without doing any work, so the benchmark can
//! report portaria's throughput as a share of what hyper alone does on the same machine.
//!
//! With `--record FILE` it also appends the SHA-256 of every body it receives, one per line,
//! which makes it the local HTTP forward target whose deliveries the benchmark checks. Leave
//! it off when measuring the ceiling.
//!
//! It prints `listening addr=<ip:port>` on stderr (like portaria) and stops on SIGTERM/SIGINT.

use std::convert::Infallible;
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http::header::{CONTENT_TYPE, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

#[derive(Debug, Parser)]
#[command(
    name = "bare-server",
    about = "Answer 200 to everything, doing no work: the ceiling"
)]
struct Args {
    /// Address to listen on; port 0 picks a free one (printed on stderr).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Append the SHA-256 hex of each body received to this file.
    #[arg(long)]
    record: Option<PathBuf>,
}

/// portaria's default header read timeout, so idle-connection handling costs the same.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

async fn answer(
    req: Request<Incoming>,
    record: Option<Arc<Mutex<File>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    // Read the body, as a receiver must; a client that breaks off gets a 400.
    let body = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(response);
        }
    };
    if let Some(file) = record {
        let line = format!("{}\n", hex::encode(Sha256::digest(&body)));
        // One write per line, so lines from concurrent requests never interleave. A failed
        // write makes the recording incomplete, which the benchmark's check then reports.
        if let Ok(mut file) = file.lock() {
            let _ = file.write_all(line.as_bytes());
        }
    }
    let mut response = Response::new(Full::new(Bytes::from_static(br#"{"received":true}"#)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

async fn serve(args: Args) -> Result<(), String> {
    let record = match &args.record {
        Some(path) => Some(Arc::new(Mutex::new(
            File::options()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?,
        ))),
        None => None,
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    eprintln!("bare-server: listening addr={addr}");

    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        // portaria's read buffer per connection (server::accept::READ_BUFFER).
        .max_buf_size(64 * 1024)
        .keep_alive(true);

    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    eprintln!("bare-server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let http = http.clone();
        let record = record.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, record.clone()));
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        });
    }
    eprintln!("bare-server: stopped");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // No signal handling: run until killed.
        _ => std::future::pending().await,
    }
}

fn main() -> ExitCode {
    loadgen::block_on_main("bare-server", serve(Args::parse()))
}
