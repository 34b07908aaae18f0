//! The outbound HTTPS client (`portaria::outbound`) against real listeners on loopback: a
//! test CA's HTTPS server (the extra `ca_file`), the request as it arrives (headers, JSON
//! body, `Host`, `Connection: close`), `Retry-After`, and each failure with its cause: an
//! unknown CA, a refused connection, a server that never answers, an answer over the size
//! limit, plain http off this machine.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use http_body_util::Full;
use portaria::outbound::{Client, Error, Limits, Phase, Request, Roots};
use rustls::pki_types::CertificateDer;

use crate::support::ClosedPort;
use crate::support::tunnel::{HttpsServer, ca, server_tls};

fn short() -> Limits {
    Limits {
        resolve: Duration::from_secs(2),
        connect: Duration::from_secs(2),
        handshake: Duration::from_secs(2),
        answer: Duration::from_millis(500),
        max_answer_bytes: 1024,
    }
}

fn client_trusting(ca: &crate::support::tunnel::Ca) -> Client {
    let der = CertificateDer::from(ca.der().to_vec());
    Client::new(&Roots::none().with(&[der]), short()).unwrap()
}

fn reply(status: u16, headers: &[(&'static str, &str)], body: &str) -> http::Response<Full<Bytes>> {
    let mut answer = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = StatusCode::from_u16(status).unwrap();
    for (k, v) in headers {
        answer.headers_mut().insert(
            HeaderName::from_static(k),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    answer
}

#[tokio::test]
async fn an_https_request_trusting_the_extra_ca_reads_the_whole_answer() {
    let ca = ca("outbound test CA");
    let server = HttpsServer::start(server_tls(&ca), |_| {
        reply(
            429,
            &[("retry-after", "7")],
            r#"{"error":"slow down","page":2}"#,
        )
    })
    .await;
    let client = client_trusting(&ca);
    let url: http::Uri = format!("https://localhost:{}/v1/events?limit=2", server.addr.port())
        .parse()
        .unwrap();
    let request = Request::post_json(url, &serde_json::json!({"interrupted": false}))
        .unwrap()
        .header(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer rk_test_secret"),
        );
    assert_eq!(
        format!("{request:?}"),
        "POST localhost",
        "no path, query or header in Debug"
    );
    let answer = client.send(request).await.unwrap();
    assert_eq!(answer.status, 429);
    assert_eq!(
        answer.retry_after(SystemTime::now()),
        Some(Duration::from_secs(7))
    );
    let value: serde_json::Value = answer.json().unwrap();
    assert_eq!(value["page"], 2);
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/v1/events?limit=2")
    );
    assert_eq!(
        seen.headers["host"],
        format!("localhost:{}", server.addr.port())
    );
    assert_eq!(seen.headers["authorization"], "Bearer rk_test_secret");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(seen.headers["connection"], "close");
    assert!(
        seen.headers["user-agent"]
            .to_str()
            .unwrap()
            .starts_with("portaria/")
    );
    assert_eq!(&seen.body[..], br#"{"interrupted":false}"#);
}

#[tokio::test]
async fn each_failure_names_its_cause() {
    let ca = ca("outbound test CA");
    let other = crate::support::tunnel::ca("another CA");
    let server = HttpsServer::start(server_tls(&ca), |_| reply(200, &[], &"x".repeat(4096))).await;
    let url = |path: &str| -> http::Uri {
        format!("https://localhost:{}{path}", server.addr.port())
            .parse()
            .unwrap()
    };

    // A certificate from a CA the client does not trust.
    let e = client_trusting(&other)
        .send(Request::get(url("/")))
        .await
        .unwrap_err();
    assert_eq!(e.cause(), "tls", "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");

    // An answer larger than the limit.
    let e = client_trusting(&ca)
        .send(Request::get(url("/")))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::TooLarge { limit: 1024, .. }), "{e}");

    // Nobody listens.
    let closed = ClosedPort::new();
    let port = closed.port();
    let e = client_trusting(&ca)
        .send(Request::get(
            format!("https://127.0.0.1:{port}/").parse().unwrap(),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.cause(), "connect", "{e}");

    // A server that takes the connection and never says hello.
    let silent_tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent_tcp.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (tcp, _) = silent_tcp.accept().await.unwrap();
            held.push(tcp);
        }
    });
    let e = client_trusting(&ca)
        .send(Request::get(
            format!("https://127.0.0.1:{}/", silent_addr.port())
                .parse()
                .unwrap(),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Timeout {
                phase: Phase::Handshake,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.cause(), "timeout");
    hold.abort();

    // Plain http: to this machine only (a test server), never across a network.
    let e = client_trusting(&ca)
        .send(Request::get("http://192.0.2.1/".parse().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(e.cause(), "url", "{e}");
    let e = client_trusting(&ca)
        .send(Request::get("ftp://localhost/".parse().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(e.cause(), "url", "{e}");
}

#[tokio::test]
async fn an_answer_that_never_comes_is_cut_at_its_deadline() {
    let ca = ca("outbound test CA");
    // Takes the connection and the handshake, reads the request, and never answers.
    let acceptor = tokio_rustls::TlsAcceptor::from(server_tls(&ca));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(tls);
    });
    let e = client_trusting(&ca)
        .send(Request::get(
            format!("https://localhost:{port}/").parse().unwrap(),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Timeout {
                phase: Phase::Answer,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.to_string(), "localhost: no answer within 500ms");
    server.abort();
}

#[test]
fn the_system_roots_are_read() {
    // The machine's bundle (ca-certificates); a system without one reads none and says so.
    let roots = Roots::system();
    if std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        assert!(roots.from_system > 50, "{roots:?}");
    }
}
