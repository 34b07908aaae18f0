//! HTTP both ways: a tiny client (`send`, `post`, `get`) and a recording target (`Target`),
//! a real listener on loopback.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use prometheus_parse::{Scrape, Value};
use tokio::net::{TcpListener, TcpStream};

use super::signing::{h, pagarme_headers};

/// A reply, read in full.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

/// POSTs (or another method) over a fresh connection.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    let res = sender.send_request(req).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// POSTs `body` to the pagarme endpoint, signed as Pagar.me does.
pub async fn post_pagarme(addr: SocketAddr, body: &[u8]) -> Reply {
    post(addr, "/webhooks/pagarme", &pagarme_headers(body), body).await
}

pub async fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    send(addr, "POST", path, headers, body).await
}

/// GET over a fresh connection.
pub async fn get(admin: SocketAddr, path: &str, headers: &[(String, String)]) -> Reply {
    send(admin, "GET", path, headers, b"").await
}

/// A JSON answer's body, after checking that it says it is JSON.
pub fn json(reply: &Reply) -> serde_json::Value {
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"),
        "{:?}",
        reply.headers
    );
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

/// A request the recording target received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// A real HTTP listener on loopback that records every request and answers with the status
/// its script gives for the n-th request (the last entry repeats).
pub struct Target {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Recorded>>>,
}

impl Target {
    pub async fn start(statuses: Vec<u16>) -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let statuses = Arc::new(statuses);
        let record = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let record = record.clone();
                let statuses = statuses.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let record = record.clone();
                            let statuses = statuses.clone();
                            async move {
                                let headers = req.headers().clone();
                                let body = req.into_body().collect().await?.to_bytes();
                                let n = {
                                    let mut seen = record.lock().unwrap();
                                    seen.push(Recorded { headers, body });
                                    seen.len()
                                };
                                let status = statuses
                                    .get(n - 1)
                                    .or(statuses.last())
                                    .copied()
                                    .unwrap_or(200);
                                let mut res = hyper::Response::new(Full::new(Bytes::from_static(
                                    b"target says hi",
                                )));
                                *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                                Ok::<_, hyper::Error>(res)
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Target { addr, seen }
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// The pagarme endpoint forwards to `target`, one retry 100 ms after the first attempt.
pub fn forward_to(target: SocketAddr) -> String {
    format!("forward = {{ url = \"http://{target}/in\", timeout_secs = 2 }}\nretry = [\"100ms\"]\n")
}

/// POSTs a form (`application/x-www-form-urlencoded`).
pub async fn form(
    admin: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &str,
) -> Reply {
    let mut headers = headers.to_vec();
    headers.push(h("content-type", "application/x-www-form-urlencoded"));
    send(admin, "POST", path, &headers, body.as_bytes()).await
}

/// GETs `/metrics` and parses it as Prometheus does.
pub async fn scrape(admin: SocketAddr) -> Scrape {
    let reply = send(admin, "GET", "/metrics", &[], b"").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Scrape::parse(reply.body.lines().map(|l| Ok(l.to_string()))).expect("valid exposition text")
}

/// The value of one series, or None if the scrape does not have it.
pub fn find(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == metric
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            ref other => panic!("{metric} is not a single value: {other:?}"),
        })
}
